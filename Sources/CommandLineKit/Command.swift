/// A small, strict command-line model: commands with options, positionals, subcommands, help with examples.
///
/// The `rollout` executable describes every subcommand as a `Command` value. Parsing is pure (argv in,
/// `Invocation` or `UsageError` out) and help text is a pure function of the command and the width, so both are
/// tested without running anything.

import Platform

/// The process exit codes of PRODUCT.md.
public enum ExitCode: Int32, Sendable {
    case ok = 0
    case failure = 1
    case usage = 2
    case conflict = 3
    case refused = 4
    /// `status --check` and `watch`: the verdict is WATCH, HOLD or HALT (OK is `ok`).
    case verdictWatch = 5
    case verdictHold = 6
    case verdictHalt = 7
    /// `plan run`: the plan was aborted / paused (`--exit-on-pause`); killed is `verdictHalt`.
    case planAborted = 8
    case planPaused = 9
    /// Stopped by SIGHUP (the terminal closed), SIGINT (Ctrl-C) or SIGTERM after a clean stop: 128 + the signal,
    /// as shells report it.
    case hungUp = 129
    case interrupted = 130
    case terminated = 143

    /// The exit code of a clean stop on signal `number` (SIGHUP: hung up; SIGTERM: terminated; any other:
    /// interrupted).
    public init(stoppedBy number: Int32) {
        switch number {
        case 1: self = .hungUp
        case 15: self = .terminated
        default: self = .interrupted
        }
    }
}

/// An error that ends the command with a one-line message and an exit code.
public struct CommandError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var exitCode: ExitCode
    public init(_ message: String, exit: ExitCode = .failure) {
        self.message = message
        self.exitCode = exit
    }
    public var description: String { message }
}

/// One `--name` option: a flag (no value) or an option taking a value.
public struct Option: Sendable {
    public var names: [String]
    public var valueName: String?
    public var help: String
    public var repeatable: Bool

    /// A boolean flag such as `--json`.
    public static func flag(_ names: String..., help: String) -> Option {
        Option(names: names, valueName: nil, help: help, repeatable: false)
    }

    /// An option with a value such as `--store PATH`.
    public static func value(_ names: String..., name: String, help: String, repeatable: Bool = false) -> Option {
        Option(names: names, valueName: name, help: help, repeatable: repeatable)
    }

    public var primary: String { names.first { $0.hasPrefix("--") } ?? names[0] }
}

/// A positional argument.
public struct Positional: Sendable {
    public var name: String
    public var help: String
    public var optional: Bool
    public var variadic: Bool
    public init(_ name: String, help: String, optional: Bool = false, variadic: Bool = false) {
        self.name = name
        self.help = help
        self.optional = optional
        self.variadic = variadic
    }
}

/// A command or subcommand.
public struct Command: Sendable {
    public typealias Action = @Sendable (Invocation) throws -> ExitCode

    public var name: String
    public var summary: String
    /// The help text's paragraphs after the summary. Built when help is printed: some are made from tables
    /// (policy keys, simulator parameters), which every other run of the executable would build for nothing.
    public var discussion: String { discussionText() }
    private let discussionText: @Sendable () -> String
    public var options: [Option]
    public var positionals: [Positional]
    public var examples: [String]
    public var subcommands: [Command]
    public var action: Action?

    public init(
        _ name: String, summary: String, discussion: @autoclosure @escaping @Sendable () -> String = "",
        options: [Option] = [],
        positionals: [Positional] = [], examples: [String] = [], subcommands: [Command] = [], action: Action? = nil
    ) {
        self.name = name
        self.summary = summary
        self.discussionText = discussion
        self.options = options
        self.positionals = positionals
        self.examples = examples
        self.subcommands = subcommands
        self.action = action
    }
}

/// The result of parsing: which command, with which values.
public struct Invocation: Sendable {
    /// Names from the root to the chosen command, e.g. `["rollout", "config", "export"]`.
    public var path: [String]
    public var flags: Set<String> = []
    public var values: [String: [String]] = [:]
    public var positionals: [String] = []
    /// Environment variables visible to the command (injected so that commands stay testable).
    public var environment: [String: String] = [:]

    public var commandLine: String { path.joined(separator: " ") }

    public func flag(_ name: String) -> Bool { flags.contains(name) }
    public func value(_ name: String) -> String? { values[name]?.last }
    public func allValues(_ name: String) -> [String] { values[name] ?? [] }
    public func positional(_ i: Int) -> String? { i < positionals.count ? positionals[i] : nil }

    /// A usage error (exit 2) that points at this command's help.
    public func usageError(_ message: String) -> CommandError {
        CommandError("\(message) (see '\(commandLine) --help')", exit: .usage)
    }
}

/// Why parsing failed; always a single line.
public struct UsageError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}

/// What the parser decided to do.
public enum ParseOutcome: Sendable {
    case run(Command, Invocation)
    case help(Command, path: [String])
    /// `--version` on the root command.
    case version
}

extension Command {
    /// Parses `arguments` (without the program name). Options of ancestors (global options) are accepted at
    /// any depth. `--help`/`-h` anywhere asks for the help of the deepest command reached.
    public func parse(_ arguments: [String], environment: [String: String] = [:]) throws(UsageError) -> ParseOutcome {
        // `rollout --version`, and `rollout help [COMMAND...]` as a spelling of `rollout [COMMAND...] --help`.
        if arguments.first == "--version" {
            guard arguments.count == 1 else {
                throw UsageError(message: "--version takes no arguments (see '\(name) --help')")
            }
            return .version
        }
        if arguments.first == "help", !subcommands.contains(where: { $0.name == "help" }) {
            var command = self
            var path = [name]
            for word in arguments.dropFirst() {
                guard let sub = command.subcommands.first(where: { $0.name == word }) else {
                    let names = command.subcommands.map(\.name).joined(separator: ", ")
                    throw UsageError(
                        message: command.subcommands.isEmpty
                            ? "'\(path.joined(separator: " "))' has no subcommand '\(word)'"
                            : "unknown command '\(word)' for '\(path.joined(separator: " "))'; expected one of: \(names)"
                    )
                }
                command = sub
                path.append(sub.name)
            }
            return .help(command, path: path)
        }
        var command = self
        var path = [name]
        var inherited: [Option] = options
        var invocation = Invocation(path: path)
        invocation.environment = environment
        var index = 0
        var onlyPositionals = false

        func option(named n: String) -> Option? {
            (command.options + inherited).first { $0.names.contains(n) }
        }

        while index < arguments.count {
            let arg = arguments[index]
            index += 1
            if !onlyPositionals, arg == "--" {
                onlyPositionals = true
                continue
            }
            if !onlyPositionals, arg == "--help" || arg == "-h" {
                return .help(command, path: path)
            }
            if !onlyPositionals, arg.hasPrefix("-"), arg.count > 1, !Command.looksNumeric(arg) {
                var key = arg
                var inline: String?
                if let eq = arg.firstIndex(of: "="), arg.hasPrefix("--") {
                    key = String(arg[..<eq])
                    inline = String(arg[arg.index(after: eq)...])
                }
                guard let opt = option(named: key) else {
                    throw UsageError(
                        message:
                            "unknown option '\(key)' for '\(path.joined(separator: " "))' (see '\(path.joined(separator: " ")) --help')"
                    )
                }
                if let valueName = opt.valueName {
                    let value: String
                    if let inline {
                        value = inline
                    } else {
                        guard index < arguments.count else {
                            throw UsageError(
                                message:
                                    "option '\(key)' needs a value \(valueName) (see '\(path.joined(separator: " ")) --help')"
                            )
                        }
                        value = arguments[index]
                        index += 1
                    }
                    if !opt.repeatable, invocation.values[opt.primary] != nil {
                        throw UsageError(message: "option '\(opt.primary)' given twice")
                    }
                    invocation.values[opt.primary, default: []].append(value)
                } else {
                    if inline != nil { throw UsageError(message: "option '\(key)' takes no value") }
                    invocation.flags.insert(opt.primary)
                }
                continue
            }
            if invocation.positionals.isEmpty, !command.subcommands.isEmpty, !onlyPositionals {
                guard let sub = command.subcommands.first(where: { $0.name == arg }) else {
                    let names = command.subcommands.map(\.name).joined(separator: ", ")
                    throw UsageError(
                        message:
                            "unknown command '\(arg)' for '\(path.joined(separator: " "))'; expected one of: \(names)")
                }
                inherited += command.options
                command = sub
                path.append(sub.name)
                invocation.path = path
                continue
            }
            invocation.positionals.append(arg)
        }

        if command.action == nil {
            return .help(command, path: path)
        }
        let required = command.positionals.filter { !$0.optional }.count
        let variadic = command.positionals.contains { $0.variadic }
        let shown = path.joinedText(" ")
        if invocation.positionals.count < required {
            let missing = command.positionals[invocation.positionals.count].name
            throw UsageError(message: "missing argument \(missing) for '\(shown)' (see '\(shown) --help')")
        }
        if !variadic, invocation.positionals.count > command.positionals.count {
            let extra = invocation.positionals[command.positionals.count]
            throw UsageError(message: "unexpected argument '\(extra)' for '\(shown)' (see '\(shown) --help')")
        }
        return .run(command, invocation)
    }

    /// `-2.5`, `-1` and `+5` are values (e.g. `nudge -2.5`), not options.
    static func looksNumeric(_ s: String) -> Bool {
        guard let f = s.utf8.dropFirst().first else { return false }
        return (f >= 48 && f <= 57) || f == 46
    }
}
