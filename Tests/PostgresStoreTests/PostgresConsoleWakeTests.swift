import Foundation
import PostgresStore
import Rollout
import RolloutApp
import Testing
import TestSupport

/// The console's picture of a PostgreSQL store is woken by `NOTIFY`: with its fallback poll set to an hour, a
/// colleague's publish (another process) still reaches the next picture, and only a notification can have brought
/// it. (`TwoConsolesTests` shows the same in two real terminals, where a time bound cannot tell a wake-up from the
/// five-second fallback.)
@Suite(.serialized)
struct PostgresConsoleWakeTests {
    @Test func aColleaguesPublishWakesThePictureWithoutThePoll() throws {
        let directory = try TestSupport.temporaryDirectory("pg-wake")
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = directory.appendingPathComponent("team.key").path
        let server = try PostgresServer.get()
        let conninfo = server.uris(of: try server.freshDatabase()).socket
        func rollout(_ arguments: String...) throws -> TestSupport.ProcessResult {
            try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", conninfo],
                environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "carl@test", "NO_COLOR": "1"])
        }
        try #require(try rollout("init", "--seed", "wake").status == 0)
        try #require(try rollout("set", "10", "--reason", "start").status == 0)

        let team = try Wiring.teamSession(conninfo: conninfo, operatorID: "ana@test", keyPath: key)
        let source = try PostgresConsoleSource(team: team, conninfo: conninfo, project: "test", fallback: 3_600)
        let before = try source.snapshot().header.templateVersion
        #expect(before != nil)
        // Unchanged and not notified: the same picture, no wake-up.
        #expect(try source.snapshot().header.templateVersion == before)
        #expect(source.wakeUps == 0)

        let published = try rollout("set", "12", "--reason", "colleague")
        try #require(published.status == 0, "\(published.stderr)")
        // The notification arrives at the listener's connection shortly after the commit: bounded by a condition.
        var after = before
        let deadline = Date().addingTimeInterval(30)
        while after == before, Date() < deadline {
            after = try source.snapshot().header.templateVersion
            if after == before { usleep(20_000) }
        }
        #expect(after != before, "the colleague's publish never reached the picture")
        #expect(source.wakeUps == 1)
    }
}
