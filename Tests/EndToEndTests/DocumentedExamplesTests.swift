import Foundation
import TestSupport
import Testing

/// Every `rollout …` example in the README and docs/ still speaks the grammar: each command path and option
/// exists and takes what the example gives it. Run through the built binary as `rollout ARGS --help`, which
/// parses everything before the help (an unknown command or option, or an option without its value, is a usage
/// error, exit 2) and then prints help instead of running. Placeholders stay as they are (positionals are not
/// judged); optional groups `[--json]` are read as given; alternatives (`a / b`) and shell substitutions are left
/// out.
struct DocumentedExamplesTests {
    /// The example lines of the fenced blocks of `text`, continuation lines joined, comments cut.
    static func examples(_ text: String) -> [String] {
        var out: [String] = []
        var fenced = false
        var pending: String?
        for raw in text.components(separatedBy: "\n") {
            if raw.hasPrefix("```") {
                fenced.toggle()
                continue
            }
            guard fenced else { continue }
            var line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("$ ") { line.removeFirst(2) }
            if let p = pending {
                line = p + " " + line
                pending = nil
            } else if !line.hasPrefix("rollout ") {
                continue
            }
            if let comment = line.range(of: "  #") { line = String(line[..<comment.lowerBound]) }
            line = line.trimmingCharacters(in: .whitespaces)
            if line.hasSuffix("\\") {
                pending = String(line.dropLast()).trimmingCharacters(in: .whitespaces)
                continue
            }
            out.append(line)
        }
        return out
    }

    /// Splits an example as a shell would (double and single quotes), dropping a redirection and its target
    /// and a trailing `&`; nil for what a shell would have to evaluate first.
    static func arguments(_ line: String) -> [String]? {
        if line.contains(" / ") || line.contains("$(") || line.contains("...") || line.contains("|") { return nil }
        var words: [String] = []
        var current = ""
        var quote: Character?
        var inWord = false
        for c in line {
            if let q = quote {
                if c == q { quote = nil } else { current.append(c) }
            } else if c == "\"" || c == "'" {
                quote = c
                inWord = true
            } else if c == " " {
                if inWord { words.append(current) }
                current = ""
                inWord = false
            } else if c != "[" && c != "]" {
                current.append(c)
                inWord = true
            }
        }
        if inWord { words.append(current) }
        if let r = words.firstIndex(of: ">") { words.removeSubrange(r...) }
        if words.last == "&" { words.removeLast() }
        guard words.first == "rollout" else { return nil }
        return Array(words.dropFirst())
    }

    @Test func everyExampleParses() throws {
        let root = TestSupport.packageRoot
        var files = [root.appendingPathComponent("README.md")]
        let docs = root.appendingPathComponent("docs")
        for name in try FileManager.default.contentsOfDirectory(atPath: docs.path).sorted() where name.hasSuffix(".md") {
            files.append(docs.appendingPathComponent(name))
        }
        let bin = try TestSupport.rolloutBinary()
        var checked = 0
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for example in Self.examples(text) {
                guard let args = Self.arguments(example) else { continue }
                let r = try TestSupport.run(bin, args + ["--help"], environment: ["NO_COLOR": "1"])
                #expect(
                    r.status == 0,
                    "\(file.lastPathComponent): '\(example)' does not parse: \(r.stderr.split(separator: "\n").first ?? "")")
                checked += 1
            }
        }
        // The README alone has dozens; a parse that finds none must not pass.
        #expect(checked >= 40, "only \(checked) examples found")
    }

    @Test func theExtractionReadsContinuationsCommentsAndOptionalGroups() {
        let text = """
            ```
            rollout set 10 --reason "start"         # publish
            rollout attest verify --attestation B64 \\
              --challenge C
            rollout plan status [--json]     # the step
            rollout plan pause --reason "..." / resume
            not rollout
            ```
            rollout outside a fence
            """
        let found = Self.examples(text)
        #expect(found == [
            "rollout set 10 --reason \"start\"", "rollout attest verify --attestation B64 --challenge C",
            "rollout plan status [--json]", "rollout plan pause --reason \"...\" / resume",
        ])
        #expect(Self.arguments(found[0]) == ["set", "10", "--reason", "start"])
        #expect(Self.arguments(found[2]) == ["plan", "status", "--json"])
        #expect(Self.arguments(found[3]) == nil)
        #expect(Self.arguments("rollout config export > template.json") == ["config", "export"])
        #expect(Self.arguments("rollout serve --trust-demo --store server.db &") == ["serve", "--trust-demo", "--store", "server.db"])
    }
}
