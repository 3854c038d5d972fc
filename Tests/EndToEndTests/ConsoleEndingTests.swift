import Foundation
import Testing
import TestSupport

/// The console ends as README's exit codes say however its end comes: a terminal that goes away without a SIGHUP
/// reaching the console is a hang-up (129).
@Suite(.serialized)
struct ConsoleEndingTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    /// A parent that traps HUP (here the pane's shell) is the only process the kernel signals when the terminal
    /// goes away; the console sees only its input hung up. It ends as a hang-up does instead of polling a dead
    /// terminal forever with the store open.
    @Test func aTerminalGoneWithoutAHangUpSignalEndsTheConsoleWith129() throws {
        let f = try Fixture()
        let session = try TerminalSession(
            [f.binary, "console", "--store", f.store, "--operator", "ana@example.com", "--read-only"], width: 100,
            height: 30, shellCatchesHangUp: true)
        defer { session.close() }
        try session.waitFor("AppAttestEnabled")
        let pid = try session.programPID()
        // A console that missed the end would run on after the test.
        defer { if kill(pid, 0) == 0 { kill(pid, SIGKILL) } }
        try session.hangUp()
        #expect(try session.exitStatus(timeout: 10) == 129)
    }
}
