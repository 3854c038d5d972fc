import CommandLineKit
import Testing

/// The command-line grammar every `rollout` command shares: subcommands, options of ancestors at any depth,
/// `--opt=value`, `--`, numbers that look like options, and one clear usage error for each mistake.
struct ParsingTests {
    static let root = Command(
        "tool", summary: "A tool.",
        options: [.value("--store", name: "PATH", help: "The store."), .flag("--json", help: "JSON.")],
        subcommands: [
            Command(
                "nudge", summary: "Nudge.", options: [.value("--reason", name: "TEXT", help: "Why.")],
                positionals: [Positional("DELTA", help: "The change.")], action: { _ in .ok }),
            Command(
                "tag", summary: "Tag.", options: [.value("--label", name: "L", help: "A label.", repeatable: true)],
                positionals: [Positional("NAMES", help: "Names.", optional: true, variadic: true)],
                action: { _ in .ok }),
            Command("group", summary: "A group without an action.", subcommands: [
                Command("leaf", summary: "Leaf.", action: { _ in .ok })
            ]),
        ])

    struct NotRun: Error {}

    static func run(_ args: [String]) throws -> Invocation {
        guard case .run(_, let inv) = try root.parse(args) else {
            Issue.record("expected a command to run for \(args)")
            throw NotRun()
        }
        return inv
    }

    static func usage(_ args: [String]) -> String? {
        do {
            _ = try root.parse(args)
            return nil
        } catch { return error.message }
    }

    @Test func globalOptionsAreAcceptedAtAnyDepthAndInlineValuesWork() throws {
        let inv = try Self.run(["nudge", "--store=/tmp/s.db", "+5", "--json", "--reason", "why not"])
        #expect(inv.path == ["tool", "nudge"])
        #expect(inv.value("--store") == "/tmp/s.db")
        #expect(inv.flag("--json"))
        #expect(inv.value("--reason") == "why not")
        #expect(inv.positionals == ["+5"])
        // Before the subcommand too.
        #expect(try Self.run(["--store", "a.db", "nudge", "1"]).value("--store") == "a.db")
    }

    @Test func numbersThatLookLikeOptionsAreValues() throws {
        #expect(try Self.run(["nudge", "-2.5"]).positionals == ["-2.5"])
        #expect(try Self.run(["nudge", "-.5"]).positionals == ["-.5"])
        #expect(Self.usage(["nudge", "-x"])?.contains("unknown option '-x'") == true)
    }

    @Test func doubleDashEndsOptions() throws {
        let inv = try Self.run(["tag", "--", "--json", "-h"])
        #expect(inv.positionals == ["--json", "-h"])
        #expect(!inv.flag("--json"))
    }

    @Test func repeatableOptionsCollectAndOthersRefuseTwice() throws {
        #expect(try Self.run(["tag", "--label", "a", "--label", "b"]).allValues("--label") == ["a", "b"])
        #expect(Self.usage(["nudge", "1", "--reason", "a", "--reason", "b"]) == "option '--reason' given twice")
    }

    @Test(arguments: [
        (["nudge"], "missing argument DELTA for 'tool nudge'"),
        (["nudge", "1", "2"], "unexpected argument '2' for 'tool nudge'"),
        (["nudge", "1", "--reason"], "option '--reason' needs a value TEXT"),
        (["nudge", "1", "--json=yes"], "option '--json' takes no value"),
        (["frob"], "unknown command 'frob' for 'tool'; expected one of: nudge, tag, group"),
        (["nudge", "1", "--colour", "red"], "unknown option '--colour' for 'tool nudge'"),
        (["--version", "x"], "--version takes no arguments"),
        (["help", "nudge", "deeper"], "'tool nudge' has no subcommand 'deeper'"),
    ])
    func eachMistakeHasItsMessage(args: [String], message: String) {
        let got = Self.usage(args)
        #expect(got?.hasPrefix(message) == true, "\(args): \(got ?? "parsed")")
    }

    @Test func helpIsAskedForInThreeSpellings() throws {
        for args in [["nudge", "--help"], ["help", "nudge"], ["nudge", "-h", "--json"]] {
            guard case .help(_, let path) = try Self.root.parse(args) else {
                Issue.record("\(args) must ask for help"); continue
            }
            #expect(path == ["tool", "nudge"])
        }
        // A command without an action shows its help; --version is its own outcome.
        guard case .help(_, let path) = try Self.root.parse(["group"]) else { Issue.record("group"); return }
        #expect(path == ["tool", "group"])
        guard case .version = try Self.root.parse(["--version"]) else { Issue.record("--version"); return }
    }

    @Test func theEnvironmentTravelsWithTheInvocation() throws {
        guard case .run(_, let inv) = try Self.root.parse(["nudge", "1"], environment: ["A": "b"]) else {
            Issue.record("not run"); return
        }
        #expect(inv.environment == ["A": "b"])
    }

    @Test func helpTextListsOptionsPositionalsAndSubcommands() {
        let text = Self.root.subcommands[0].helpText(path: ["tool", "nudge"], globalOptions: Self.root.options)
        for part in ["tool nudge", "DELTA", "--reason", "--store"] {
            #expect(text.contains(part), "\(part) missing from:\n\(text)")
        }
        let top = Self.root.helpText(path: ["tool"])
        for part in ["nudge", "tag", "group"] { #expect(top.contains(part), "\(part) missing from:\n\(top)") }
    }
}

/// Text for people, wrapped between words at the terminal's width (never in a pipe).
struct WrappedOutputTests {
    @Test func wrapsBetweenWordsWithAHangingIndent() {
        let text = "crash-free users 97.5% (exposed) against 97.9% (control), difference -0.245 points, not significant"
        let lines = WrappedOutput.lines(text, indent: 4, width: 40)
        #expect(lines.count > 1)
        #expect(lines.allSatisfy { $0.count <= 40 }, "\(lines)")
        #expect(lines.dropFirst().allSatisfy { $0.hasPrefix("    ") && !$0.hasPrefix("     ") })
        // Nothing lost, no word broken.
        let words = lines.flatMap { $0.split(separator: " ") }
        #expect(words == text.split(separator: " "))
    }

    @Test func leavesTextAloneInAPipeOrWhenItFits() {
        let text = String(repeating: "word ", count: 40)
        #expect(WrappedOutput.lines(text, indent: 2, width: nil) == [text])
        #expect(WrappedOutput.lines("short", indent: 2, width: 80) == ["short"])
        // A word longer than a line stays whole.
        let long = "a " + String(repeating: "x", count: 60) + " b"
        #expect(WrappedOutput.lines(long, indent: 2, width: 30).contains { $0.hasSuffix(String(repeating: "x", count: 60)) })
    }
}

/// The progress line on standard error.
struct ProgressLineTests {
    @Test func showsShareRateAndTimeLeft() {
        let line = ProgressReporter.line(
            label: "ingest", unit: .count("events"), done: 250_000, total: 1_000_000, elapsed: 2, width: 120)
        #expect(line.contains("ingest"), "\(line)")
        #expect(line.contains("(25%)"), "\(line)")
        #expect(line.contains("events/s"), "\(line)")
        #expect(line.contains("left"), "\(line)")
        let narrow = ProgressReporter.line(
            label: "ingest", unit: .count("events"), done: 250_000, total: 1_000_000, elapsed: 2, width: 20)
        #expect(narrow.count <= 20, "\(narrow)")
    }
}

/// A command stopped by a signal ends with 128 + its number, as shells report it (the README's exit-code table).
struct StoppedBySignalTests {
    @Test func aStopBySignalIs128PlusItsNumber() {
        #expect(ExitCode(stoppedBy: 1).rawValue == 129)  // SIGHUP: the terminal closed
        #expect(ExitCode(stoppedBy: 2).rawValue == 130)  // SIGINT
        #expect(ExitCode(stoppedBy: 15).rawValue == 143)  // SIGTERM
    }
}
