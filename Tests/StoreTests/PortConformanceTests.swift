import Foundation
import Rollout
import StepUp
import Store
import StoreConformance
import Testing
import TestSupport
import Timekeeping

/// The SQLite store passes the conformance suite of the core's ports (the same checks other stores run).
struct PortConformanceTests {
    @Test(arguments: ConfigStoreConformance.checks.map(\.name))
    func sqliteConfigStorePasses(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var stores: [RolloutStore] = []
        let factory: ConfigStoreConformance.Factory = { seed in
            count += 1
            let store = try RolloutStore(path: directory.appendingPathComponent("s\(count).db").path)
            stores.append(store)
            let config = try store.configStore()
            try config.initializeIfEmpty {
                try SQLiteConfigStore.genesis(seed: seed, actor: "init@test", time: Instant(seconds: 1_780_000_000))
            }
            return config
        }
        try ConfigStoreConformance.checks.first { $0.name == check }!.run(factory)
        // Everything the checks wrote went through the gate: the store still verifies in full.
        for store in stores { _ = try store.verify() }
    }

    @Test func sqliteStepUpStorePasses() throws {
        let directory = try TestSupport.temporaryDirectory("conformance-stepup")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try RolloutStore(path: directory.appendingPathComponent("s.db").path)
        try StepUpStoreConformance.all { record in
            try store.database.transaction { try OperatorTables.save(record, in: store.database) }
            return SQLiteStepUpStore(store: store)
        }
        _ = try store.configStore()
        _ = try store.verify()
    }
}
