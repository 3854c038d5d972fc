import Foundation
import Testing
import TestSupport

/// "3 a.m.", item 9. Reproduction: `rollout status` in an 80-column terminal printed lines longer than the terminal,
/// which broke them in the middle of words (`cras h-free`, `-0 .245`). On a terminal the CLI wraps between words
/// under the value's column; in a pipe each record stays one line.
struct CLIWrapTests {
    @Test func statusWrapsBetweenWordsInAnEightyColumnTerminal() throws {
        let dir = try TestSupport.temporaryDirectory("cli-wrap")
        defer { try? FileManager.default.removeItem(at: dir) }
        // The store is named relative to its directory, where every command runs: an absolute path under the run's
        // temporary directory can be wider than the value column, one word that no wrapping can break.
        let store = "s.db"
        let bin = try TestSupport.rolloutBinary()
        let reason =
            "a long reason about crash-free sessions and the -0.245 difference between the exposed group and control over the last hour"
        #expect(try TestSupport.run(bin, ["init", "--store", store], currentDirectory: dir).status == 0)
        #expect(try TestSupport.run(bin, ["set", "7", "--reason", reason, "--store", store], currentDirectory: dir).status == 0)

        let session = try TerminalSession([bin, "status", "--store", store], width: 80, height: 50, directory: dir)
        defer { session.close() }
        #expect(try session.exitStatus() == 0)
        let screen = try session.waitFor("step-up")
        // Lines the terminal wrapped itself are joined by -J: none may be. Compared up to the output's last row:
        // tmux may add its "Pane is dead" line between the two captures.
        func output(_ text: String) -> [Substring] {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            return Array(lines.prefix { !$0.hasPrefix("step-up") }) + lines.filter { $0.hasPrefix("step-up") }.prefix(1)
        }
        let joined = try session.joinedScreen()
        #expect(output(joined) == output(screen), "terminal-wrapped:\n\(joined)\nshown:\n\(screen)")
        let words = screen.split(whereSeparator: { $0 == " " || $0 == "\n" })
        for word in ["crash-free", "-0.245", "difference"] { #expect(words.contains(Substring(word)), "\(screen)") }
        #expect(screen.split(separator: "\n").allSatisfy { $0.count <= 80 })

        // In a pipe, the reason is one line as before.
        let piped = try TestSupport.run(bin, ["status", "--store", store], currentDirectory: dir).stdout
        #expect(piped.contains(reason))
    }
}
