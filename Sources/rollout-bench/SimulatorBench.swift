import FleetSimulator
import Foundation
import Rollout
import SQLiteStore
import Timekeeping

/// The fleet simulator: simulated device-hours per second of wall time for one simulated hour of the shipped
/// `steady` scenario (10% exposure), with telemetry landing in a store file and the config read from it, as
/// `rollout simulate --speed max` runs. The share of time in real cryptography (P-256 keys, attestations and
/// assertions through the App Check exchange, RS256 tokens) is measured inside the simulation.
enum SimulatorBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "simulator", title: "fleet simulator: device-hours per wall second, share of real crypto", run: run)
    ]

    /// One simulated hour of 100,000 devices in under 30 s of wall time (the issue's target).
    static let targetRate = 100_000.0 / 30

    static func run() throws {
        for devices in [100_000, 1_000_000] { try measure(devices: devices) }
    }

    static func measure(devices: Int) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-simbench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let start = ISO8601.parse("2026-05-20T18:00:00Z")!
        let scenario = try Scenario.load("steady")
        let store = try RolloutStore(path: dir.appendingPathComponent("bench.db").path)
        try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: scenario.rolloutSeed, actor: "bench", time: start)
        }
        var options = FleetOptions(scenario: scenario, devices: devices, seed: 1, start: start, duration: .hours(1))
        options.cryptoStopwatch = { Stopwatch.nanoseconds() }
        var simulation: FleetSimulation?
        let sink = try StoreTelemetrySink(store: store)
        let setup = try Stopwatch.time {
            simulation = try FleetSimulation(
                scenario: scenario, options: options, config: try store.configStore(), sink: sink)
        }
        let sim = simulation!
        let running = try Stopwatch.time { try sim.run() }
        let wall = setup + running
        let s = sim.statistics()
        let crypto = Double(s.cryptoNanoseconds) / 1e9
        print(
            "  \(devices) devices, 1 simulated hour: setup \(String(format: "%.2f", setup)) s, run \(String(format: "%.2f", running)) s; "
                + "\(s.events) events in \(sink.committedBatches) batches, \(s.sessions) sessions, "
                + "\(s.exposedDevices) of \(s.eligibleDevices) eligible exposed; crypto: \(s.keysGenerated) keys, "
                + "\(s.attestations) attestations, \(s.assertions) assertions, \(s.failureCount) failures; "
                + "peak RSS \(peakRSSBytes() / 1_000_000) MB")
        if devices == 100_000 {
            report(
                "wall time for one simulated hour of 100,000 devices", value: wall, unit: "s", limit: 30,
                higherIsBetter: false)
        }
        report(
            "\(devices) devices: simulated device-hours per wall second", value: Double(devices) / wall,
            unit: "device-h/s", limit: targetRate, higherIsBetter: true)
        report(
            "\(devices) devices: time in real cryptography", value: crypto, unit: "s",
            against: ("whole run (share = ratio)", wall))
        report(
            "\(devices) devices: simulated time per wall time", value: 3600 / wall, unit: "x",
            against: ("the demo's --speed 60", 60))
    }
}
