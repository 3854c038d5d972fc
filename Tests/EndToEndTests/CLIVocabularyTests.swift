import Foundation
import Testing
import TestSupport

/// `rollout --version`, `rollout help [COMMAND]`, and the verdict symbols the CLI shares with the console.
@Suite("CLI: version, help and one vocabulary")
struct CLIVocabularyTests {
    @Test func versionAndHelpCommand() throws {
        let binary = try TestSupport.rolloutBinary()
        let version = try TestSupport.run(binary, ["--version"])
        #expect(
            version.status == 0 && version.stdout.hasPrefix("rollout ")
                && version.stdout.split(separator: "\n").count == 1)
        #expect(try TestSupport.run(binary, ["--version", "x"]).status == 2)

        let help = try TestSupport.run(binary, ["help"])
        let rootHelp = try TestSupport.run(binary, ["--help"])
        #expect(help.status == 0 && help.stdout == rootHelp.stdout)
        let words = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(words.contains("✓ OK, ◆ WATCH, ‖ HOLD, ✗ HALT"), "\(help.stdout)")
        let nudge = try TestSupport.run(binary, ["help", "nudge"])
        let nudgeHelp = try TestSupport.run(binary, ["nudge", "--help"])
        #expect(nudge.status == 0 && nudge.stdout == nudgeHelp.stdout)
        let nested = try TestSupport.run(binary, ["help", "config", "export"])
        #expect(nested.status == 0 && nested.stdout.hasPrefix("rollout config export:"), "\(nested.stdout)")
        let unknown = try TestSupport.run(binary, ["help", "frobnicate"])
        #expect(unknown.status == 2 && unknown.stderr.contains("unknown command 'frobnicate'"), "\(unknown.stderr)")
    }

    @Test func resumeIsIdempotentAndPercentagesPast100AreUsageErrors() throws {
        let dir = try TestSupport.temporaryDirectory("cli-vocabulary")
        defer { try? FileManager.default.removeItem(at: dir) }
        let binary = try TestSupport.rolloutBinary()
        let store = dir.appendingPathComponent("rollout.db").path
        func cli(_ args: String...) throws -> TestSupport.ProcessResult {
            try TestSupport.run(binary, args + ["--store", store, "--operator", "ana@example.com"])
        }
        #expect(try cli("init").status == 0)
        #expect(try cli("set", "20", "--reason", "r").status == 0)
        let versions = try cli("history").stdout
        let resume = try cli("resume")
        #expect(resume.status == 0 && resume.stdout.contains("no change"), "\(resume.stdout) \(resume.stderr)")
        let after = try cli("history").stdout
        #expect(after == versions, "an idempotent resume publishes nothing")
        let past = try cli("nudge", "+90", "--reason", "r")
        #expect(past.status == 2 && past.stderr.contains("within 0 and 100"), "\(past.stderr)")
        let set = try cli("set", "101")
        #expect(set.status == 2)
        let nudge = try cli("nudge", "+1", "--dry-run")
        #expect(nudge.stdout.contains("(+1 point)"), "\(nudge.stdout)")
    }
}
