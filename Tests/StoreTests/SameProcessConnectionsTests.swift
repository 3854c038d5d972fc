import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// Several connections to one store in one process (the console has a reader and a writer; a demo adds the
/// simulator) must not lose commits when another process writes too.
///
/// POSIX advisory locks belong to the process: opening and closing another descriptor of the database file (a
/// header check, say) silently drops SQLite's locks, another process then checkpoints and deletes the WAL under
/// the live connection, and that connection's later commits vanish. This test failed before the fix.
struct SameProcessConnectionsTests {
    @Test func commitsSurviveASecondConnectionAndAnotherProcess() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let binary = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(binary, ["init", "--store", path]).status == 0)
        #expect(try TestSupport.run(binary, ["set", "10", "--store", path, "--reason", "start"]).status == 0)

        let writer = try RolloutStore(path: path, create: false)
        let config = try writer.configStore()
        _ = try config.current()
        // A second connection in this process, opened after the first (as the console's data source is).
        let reader = try RolloutStore(path: path, create: false)
        _ = try reader.configStore().current()
        // Another process writes and exits; if our locks were gone it would checkpoint and remove the WAL.
        #expect(try TestSupport.run(binary, ["nudge", "+1", "--store", path, "--reason", "other process"]).status == 0)

        let clock = ManualClock()
        let path2 = WritePath(store: config, clock: clock, newSeed: { "unused" })
        let outcome = try path2.execute(WritePath.Request(intent: .rollout(.kill), actor: "ana", origin: "TEST"))
        guard case .published(let stored, _, _) = outcome else {
            Issue.record("expected a publish")
            return
        }
        #expect(stored.info.number == 4)
        // Another process must see the commit made by this process.
        let history = try TestSupport.run(binary, ["history", "--store", path, "--json"])
        #expect(history.status == 0)
        #expect(history.stdout.contains("\"versionNumber\": 4") || history.stdout.contains("\"number\": 4"), "\(history.stdout.prefix(300))")
        _ = reader
    }
}
