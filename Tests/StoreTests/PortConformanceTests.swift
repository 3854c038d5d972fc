import AppCheck
import Foundation
import Rollout
import StepUp
import SQLiteStore
import StoreConformance
import Telemetry
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

/// The SQLite store passes the conformance suites of the telemetry, settings and App Check ports; every check
/// ends with the whole store still verifying (seal, witness, chain), since the ports write through the gate.
struct TelemetryAndSettingsConformanceTests {
    /// A fresh store in its own directory, with version 1 written (as `init` leaves it).
    static func freshStore(_ directory: URL, _ name: String) throws -> RolloutStore {
        let store = try RolloutStore(path: directory.appendingPathComponent("\(name).db").path)
        try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(
                seed: "conformance", actor: "init@test", time: Instant(seconds: 1_780_000_000))
        }
        return store
    }

    @Test(arguments: TelemetryCountersConformance.checks.map(\.name))
    func sqliteTelemetryCountersPass(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance-telemetry")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var stores: [RolloutStore] = []
        let factory: TelemetryCountersConformance.Factory = {
            count += 1
            let store = try Self.freshStore(directory, "t\(count)")
            stores.append(store)
            let path = store.path
            return TelemetryCountersConformance.Fixture(
                open: { try RolloutStore(path: path, create: false).telemetryCounters() },
                openReadOnly: { try RolloutStore(path: path, create: false, access: .readOnly).telemetryCounters() })
        }
        try TelemetryCountersConformance.checks.first { $0.name == check }!.run(factory)
        for store in stores { _ = try store.verify() }
    }

    @Test(arguments: SettingsConformance.checks.map(\.name))
    func sqliteSettingsPass(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance-settings")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var stores: [RolloutStore] = []
        let factory: SettingsConformance.Factory = {
            count += 1
            let store = try Self.freshStore(directory, "g\(count)")
            stores.append(store)
            let path = store.path
            return SettingsConformance.Fixture(
                guardrails: store, policy: SQLiteStepUpStore(store: store), config: try store.configStore(),
                openReadOnly: {
                    let ro = try RolloutStore(path: path, create: false, access: .readOnly)
                    return (ro, SQLiteStepUpStore(store: ro))
                })
        }
        try SettingsConformance.checks.first { $0.name == check }!.run(factory)
        for store in stores { _ = try store.verify() }
    }

    @Test(arguments: AppCheckStateConformance.checks.map(\.name))
    func sqliteAppCheckStatePasses(_ check: String) throws {
        let directory = try TestSupport.temporaryDirectory("conformance-appcheck")
        defer { try? FileManager.default.removeItem(at: directory) }
        var count = 0
        var stores: [RolloutStore] = []
        let factory: AppCheckStateConformance.Factory = {
            count += 1
            let store = try Self.freshStore(directory, "a\(count)")
            stores.append(store)
            let path = store.path
            return { try AppCheckStateTables(database: RolloutStore(path: path, create: false).database) }
        }
        try AppCheckStateConformance.checks.first { $0.name == check }!.run(factory)
        for store in stores { _ = try store.verify() }
    }

    /// The in-memory state (tests, simulations) keeps the same rules.
    @Test func inMemoryAppCheckStatePasses() throws {
        try AppCheckStateConformance.all {
            let state = InMemoryAppCheckState()
            return { state }
        }
    }
}
