import Foundation
@testable import PostgresStore
import Testing
import TestSupport

/// What the server says outside a statement's result (libpq's notices) goes to the connection, never to standard
/// error: the console's screen is the terminal, and libpq's default printed a server's FATAL over it when the
/// server ended an idle session (a restart, an administrator's `pg_terminate_backend`).
struct PGConnectionNoticeTests {
    /// A connection waiting for notifications (the console's, between refreshes) reads the server's FATAL as it
    /// arrives: the wait fails naming it, the connection keeps it, and a reconnect starts a session without it.
    @Test func aSessionEndedByTheServerIsNamedInTheWaitsErrorAndNeverPrinted() throws {
        let conninfo = try PostgresServer.get().freshDatabase()
        let connection = try PGConnection(conninfo)
        try connection.execute("LISTEN rollout_notice_test")
        let pid = try #require(try connection.query("SELECT pg_backend_pid()").first?.first ?? nil)
        let admin = try PGConnection(conninfo)
        #expect(try admin.query("SELECT pg_terminate_backend($1::int)", [pid]).first?.first == "t")
        var failure: PostgresError?
        do {
            // Bounded: the FATAL arrives at once; a notification never does.
            _ = try connection.waitForNotification(timeout: 20)
        } catch {
            failure = error
        }
        let error = try #require(failure, "the wait on a terminated session failed")
        #expect(
            error.message.contains("(the server said: FATAL: terminating connection due to administrator command)"),
            "the error names the server's reason: \(error.message)")
        #expect(
            connection.notices.contains { $0.hasPrefix("FATAL:") && $0.contains("administrator command") },
            "the FATAL reached the connection's notice log, not libpq's default (standard error): \(connection.notices)")
        // A new session: the old one's words are gone, and the connection works again.
        #expect(connection.reconnectIfLost())
        #expect(connection.notices.isEmpty)
        #expect(try connection.query("SELECT 1").first?.first == "1")
    }
}
