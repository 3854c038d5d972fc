import FleetSimulator
import Foundation
import Monitoring
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import TestSupport
import Timekeeping

/// Keeps every event in memory, in order.
final class RecordingSink: FleetTelemetrySink {
    var events: [TelemetryEvent] = []
    var flushes = 0
    func record(_ event: TelemetryEvent) { events.append(event) }
    func reached(_ now: Instant) {}
    func flush(at now: Instant) { flushes += 1 }
}

enum Fixture {
    /// An evening in Europe, midday in the Americas: a busy hour on the daily curve.
    static let start = ISO8601.parse("2026-05-20T18:00:00Z")!

    static func scenario(_ name: String) throws -> Scenario { try Scenario.load(name) }

    /// A config store holding a new store's first version (the rollout present at 0%) on `seed`.
    static func memoryStore(seed: String = "rollout-sim") throws -> InMemoryConfigStore {
        InMemoryConfigStore(initial: try RolloutPlan.initialTemplate(seed: seed), time: start)
    }

    /// Runs `scenario` to the end against an in-memory config store, keeping the events.
    static func run(
        _ scenario: Scenario, devices: Int, seed: UInt64, duration: Instant.Duration? = nil,
        config: (any ConfigStore)? = nil
    ) throws -> (FleetSimulation, RecordingSink) {
        let sink = RecordingSink()
        let simulation = try FleetSimulation(
            scenario: scenario,
            options: FleetOptions(scenario: scenario, devices: devices, seed: seed, start: start, duration: duration),
            config: config ?? memoryStore(seed: scenario.rolloutSeed), sink: sink)
        try simulation.run()
        return (simulation, sink)
    }

    /// A new store file in a temporary directory, with version 1 at the fixture's start.
    static func storeFile(seed: String = "rollout-sim") throws -> (RolloutStore, URL) {
        let dir = try TestSupport.temporaryDirectory("fleet")
        let store = try RolloutStore(path: dir.appendingPathComponent("rollout.db").path)
        try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: seed, actor: "test", time: start)
        }
        return (store, dir)
    }

    /// Runs `scenario` into a store file through the ingest path and reads the verdict as the console does.
    static func verdict(_ scenario: Scenario, devices: Int, seed: UInt64) throws -> (
        FleetStatistics, RolloutMonitor.Status
    ) {
        let (store, dir) = try storeFile(seed: scenario.rolloutSeed)
        defer { try? FileManager.default.removeItem(at: dir) }
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: devices, seed: seed, start: start),
            config: try store.configStore(), sink: StoreTelemetrySink(store: store))
        try simulation.run()
        let status = try RolloutMonitor(store: store, clock: simulation.clock).status()
        return (simulation.statistics(), status)
    }
}
