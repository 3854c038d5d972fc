import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import TestSupport
import Timekeeping

/// A store file in a fresh temporary directory, opened in-process, plus helpers to drive the real binary on it.
final class StoreFixture: Sendable {
    let directory: URL
    let path: String
    let clock = ManualClock()

    init(_ label: String = "store") throws {
        directory = try TestSupport.temporaryDirectory("rollout-\(label)")
        path = directory.appendingPathComponent("rollout.db").path
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// Opens the store (a new connection each time) with version 1 on seed `s` if it is new.
    func open(create: Bool = true) throws -> (RolloutStore, SQLiteConfigStore) {
        let store = try RolloutStore(path: path, create: create)
        let config = try store.configStore()
        try config.initializeIfEmpty { try SQLiteConfigStore.genesis(seed: "s", actor: "init@test", time: clock.now()) }
        return (store, config)
    }

    func writePath(_ config: SQLiteConfigStore, readOnly: Bool = false) -> WritePath {
        WritePath(store: config, clock: clock, readOnly: readOnly, newSeed: { "unused" })
    }

    static func request(_ op: RolloutOperation, actor: String = "ana@example.com", reason: String = "test")
        -> WritePath.Request
    {
        WritePath.Request(intent: .rollout(op), actor: actor, reason: reason, origin: "TEST")
    }

    /// Runs the `rollout` binary on this store as `operator`.
    @discardableResult
    func cli(_ arguments: [String], operator id: String = "ana@example.com", stdin: String? = nil) throws
        -> TestSupport.ProcessResult
    {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments, stdin: stdin,
            environment: ["ROLLOUT_STORE": path, "ROLLOUT_OPERATOR": id])
    }

    /// Every row of the config tables, as text, for before/after comparisons.
    func dump() throws -> [String] {
        let db = try SQLiteDatabase(path: path, create: false)
        var out: [String] = []
        for table in ["config_versions", "config_audit", "config_head"] {
            for row in try db.query("SELECT * FROM \(table) ORDER BY 1") { out.append("\(table) \(row)") }
        }
        return out
    }

    static func percentage(_ config: SQLiteConfigStore) throws -> MicroPercent {
        try RolloutPlan.locate(in: config.current().template)!.percentage
    }
}

/// A temporary directory removed when the value goes away.
final class TemporaryDirectory {
    let url: URL
    init() throws { url = try TestSupport.temporaryDirectory("rollout-files") }
    deinit { try? FileManager.default.removeItem(at: url) }
}
