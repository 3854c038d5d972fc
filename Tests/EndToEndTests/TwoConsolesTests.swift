import Foundation
import Testing
import TestSupport

/// Two `rollout console`s in real terminals (tmux) on one PostgreSQL store: a publish in one appears in the
/// other, and a colleague's CLI publish in both. How soon is printed, not asserted (tests assert no wall-clock
/// times: under CI's load a terminal's redraw alone can take a second); that the picture is woken by NOTIFY rather
/// than the five-second fallback poll is checked with the fallback at an hour
/// (`PostgresCLITests.aColleaguesPublishWakesTheConsolePictureWithoutThePoll`).
@Suite("two consoles on one PostgreSQL store", .serialized)
struct TwoConsolesTests {
    /// A fresh database on the shared server holding a store at 10%, with a team store key; Bob's CLI and a
    /// console per operator on it.
    struct Fixture {
        let server: PostgresServer
        let conninfo: String
        let uri: String
        let binary: String
        let directory: URL
        var key: String { directory.appendingPathComponent("team.key").path }

        init() throws {
            server = try PostgresServer.get()
            conninfo = try server.freshDatabase()
            uri = server.uris(of: conninfo).socket
            binary = try TestSupport.rolloutBinary()
            directory = try TestSupport.temporaryDirectory("pg-consoles")
            try #require(try cli("init").status == 0)
            try #require(try cli("set", "10", "--reason", "start").status == 0)
        }

        func cli(_ arguments: String...) throws -> TestSupport.ProcessResult {
            try TestSupport.run(binary, arguments + ["--store", uri, "--operator", "bob@example.com"], environment: ["ROLLOUT_STORE_KEY": key])
        }

        func console(_ id: String) throws -> TerminalSession {
            let command = ([binary, "console", "--store", uri, "--operator", id]).map(TerminalSession.quote).joined(separator: " ")
            return try TerminalSession(["sh", "-c", "ROLLOUT_STORE_KEY=\(TerminalSession.quote(key)) \(command)"], width: 100, height: 30)
        }

        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    @Test func aPublishInOneConsoleAppearsInTheOther() throws {
        let f = try Fixture()
        defer { f.remove() }
        let ana = try f.console("ana@example.com")
        defer { ana.close() }
        let carl = try f.console("carl@example.com")
        defer { carl.close() }
        _ = try ana.waitFor("<= 10", timeout: 20)
        _ = try carl.waitFor("<= 10", timeout: 20)

        // Ana nudges down from her console; Carl's shows it.
        try ana.press("-")
        _ = try ana.waitFor("Confirm: nudge -1 point")
        try ana.press("Tab", "Enter")
        _ = try ana.waitFor("<= 9", timeout: 10)
        let published = Date()
        _ = try carl.waitFor("<= 9", timeout: 10)
        let shownAfter = Date().timeIntervalSince(published)

        // A colleague's CLI publish reaches both.
        try #require(try f.cli("kill", "--reason", "stop").status == 0)
        let killed = Date()
        _ = try ana.waitFor("KILLED", timeout: 10)
        _ = try carl.waitFor("KILLED", timeout: 10)
        let cliShownAfter = Date().timeIntervalSince(killed)
        print("two consoles: the other console showed the publish \(String(format: "%.2f", shownAfter)) s after it landed; a CLI kill \(String(format: "%.2f", cliShownAfter)) s")
    }

    /// The server ends the console's sessions (an administrator's `pg_terminate_backend`, a failover): the
    /// console's screen stays its own (libpq printed the server's FATAL over it, from the connection waiting for
    /// NOTIFY), it reconnects, and a colleague's publish after the loss appears.
    @Test func sessionsEndedByTheServerLeaveTheScreenIntactAndTheConsoleReconnects() throws {
        let f = try Fixture()
        defer { f.remove() }
        let ana = try f.console("ana@example.com")
        defer { ana.close() }
        _ = try ana.waitFor("<= 10", timeout: 20)
        #expect(try f.server.terminateSessions(of: f.conninfo) >= 1, "the console had sessions to end")
        try #require(try f.cli("set", "11", "--reason", "after the loss").status == 0)
        let screen = try ana.waitFor("<= 11", timeout: 30)
        let rows = screen.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(rows.first?.hasPrefix(" rollout · team") == true, "the header row: \(screen)")
        #expect(rows.dropFirst().first?.hasPrefix("┌ Condition") == true, "the row under the header: \(screen)")
        // libpq's own text ("FATAL:  terminating ...", two spaces); the console names the server's words in its
        // notice row in its own form ("the server said: FATAL: terminating ...").
        #expect(!screen.contains("FATAL:  "), "libpq's notice written over the screen: \(screen)")
        try ana.press("q")
        #expect(try ana.exitStatus(timeout: 20) == 0)
    }
}
