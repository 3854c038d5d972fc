import Console
import FleetSimulator
import Foundation
import RolloutApp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// The main screen of every scenario `rollout demo --scenario` accepts, on a store the real simulator filled.
///
/// The fleet runs in this process for 30 simulated minutes from a fixed start with a fixed seed (the same events
/// every time), its telemetry through the store's ingest path and its scripted changes through the write path, like
/// the demo's; the wall clock (which stamps those changes) is a manual one, moved along with the simulation. The console's own
/// source (`StoreConsoleSource`) then reads the store at the end, and the header shows the simulation as a demo's does.
@Suite("Golden screens of the demo's scenarios")
struct ScenarioScreenTests {
    static let start = Instant(microseconds: 1_772_442_000_000_000)  // 2026-03-02T09:00:00Z

    @Test(
        "the main screen at 80×24, 120×40, 200×60 and the minimum size, colour and monochrome",
        arguments: FleetSimulator.Scenario.builtInNames)
    func screen(_ name: String) throws {
        let scenario = try FleetSimulator.Scenario.load(name)
        let dir = try TestSupport.temporaryDirectory("scenario-\(name)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path

        let wall = ManualClock(Self.start)
        let store = try RolloutStore(path: path)
        try store.withDatabase { try DrillStoreMark.mark($0, at: Self.start, by: "demo") }
        _ = try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(
                seed: scenario.rolloutSeed, actor: FleetOptions.simulatorActor, time: Self.start)
        }
        let options = FleetOptions(
            scenario: scenario, seed: 1, start: Self.start, duration: .minutes(30))
        let session = try Wiring.session(path: path, operatorID: FleetOptions.simulatorActor, clock: wall)
        let simulation = try FleetSimulation(
            scenario: scenario, options: options, config: try store.configStore(),
            sink: try StoreTelemetrySink(store: store, source: "demo"), writePath: try session.writePath())
        // Second by second, the wall clock beside the simulation's (a demo at 1x), so that the scenario's scripted
        // changes are stamped when the scenario makes them.
        let end = options.start + options.duration
        var t = options.start
        while t < end {
            t = t + .seconds(Int64(1))
            wall.set(t)
            try simulation.advance(to: t)
        }
        try simulation.flush()

        let source = try StoreConsoleSource(
            path: path, clock: wall, operatorID: "ana@example.com", readOnly: false, project: "demo · \(name)")
        var model = try source.snapshot()
        // The two things that differ between runs: the temporary directory the store is in, and the ETag's random
        // salt (unguessable by design); the version number before it stays.
        model.header.store = "sqlite /tmp/rollout-demo/rollout.db"
        let etag = try #require(model.header.etag)
        #expect(etag.hasPrefix("etag-\(model.header.templateVersion ?? "")-"), "\(etag)")
        model.header.etag = "etag-\(model.header.templateVersion ?? "")-0123456789abcdef"
        for size in GoldenScreenTests.sizes {
            var state = ConsoleState(
                configuration: .init(staleAfter: try source.status().settings.staleAfter), screenSize: size)
            _ = state.handle(
                .simulation(SimulationStatus(speed: scenario.demoSpeed?.description ?? "60x", paused: false, wall: end))
            )
            _ = state.handle(.tick(end))
            _ = state.handle(.snapshot(model))
            let grid = ConsoleScreen.render(state, size: size)
            let base = "scenario-\(name)-\(size.width)x\(size.height)"
            try GoldenScreen.check(
                GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .indexed256), title: "scenario " + name),
                name: base + "-colour")
            try GoldenScreen.check(
                GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: "scenario " + name),
                name: base + "-mono")
        }
    }
}
