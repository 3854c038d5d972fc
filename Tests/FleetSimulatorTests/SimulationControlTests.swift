import FleetSimulator
import Foundation
import SQLiteStore
import Telemetry
import Testing
import Timekeeping

/// The demo's pause and speed: a ladder of speeds, and a runner that re-anchors at every change, keeps its
/// heartbeat while paused (so readers neither lose it nor call its data stale) and continues where it stood.
@Suite struct SimulationControlTests {
    @Test func theSpeedLadderStopsAtItsEnds() {
        let c = SimulationControl(speed: .factor(60))
        #expect(c.faster().speed == .factor(600))
        #expect(c.faster().speed == .factor(3600))
        #expect(c.faster().speed == .maximum)
        let top = c.state.generation
        #expect(c.faster().speed == .maximum && c.state.isFastest && c.state.generation == top)
        for expected in [3600.0, 600, 60, 10, 1] { #expect(c.slower().speed == .factor(expected)) }
        #expect(c.slower().speed == .factor(1) && c.state.isSlowest)
        // A speed off the ladder goes to the next rung either way.
        #expect(SimulationControl(speed: .factor(120)).faster().speed == .factor(600))
        #expect(SimulationControl(speed: .factor(120)).slower().speed == .factor(60))
        #expect(c.togglePause().paused && !c.togglePause().paused)
    }

    @Test func pausingStopsSimulatedTimeAndKeepsTheHeartbeat() throws {
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenario = try Scenario.parse("duration 10m\nrollout 10%\n", name: "paused")
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 300, seed: 1, start: Fixture.start),
            config: try store.configStore(), sink: StoreTelemetrySink(store: store))
        let wallStart = Instant(seconds: 1_900_000_000)
        let wall = ManualClock(wallStart)
        let control = SimulationControl(speed: .factor(60))
        let runner = SimulationRunner(
            simulation: simulation, speed: .factor(60), wall: wall, clockStore: store, control: control,
            sleep: { wall.advance(by: $0) })
        var pausedRecords: [SimulationClockRecord] = []
        var pausedAtWall: Instant?
        try runner.run { stats, _ in
            let record = try? store.withDatabase { try SimulationClockTable.read(from: $0) }
            if pausedAtWall == nil, stats.now >= Fixture.start + .minutes(3) {
                control.togglePause()
                pausedAtWall = wall.now()
            } else if let paused = pausedAtWall, control.state.paused, let record {
                pausedRecords.append(record)
                // Paused for 20 s of wall time: far beyond the 5 s after which a silent simulation is "lost".
                if wall.now() - paused >= .seconds(Int64(20)) { control.togglePause() }
            }
        }
        #expect(simulation.isFinished)
        try #require(pausedRecords.count >= 10)
        let frozen = pausedRecords[0].simulatedAtUpdate
        for r in pausedRecords {
            #expect(r.running && r.speed == 0 && r.simulatedAtUpdate == frozen, "\(r)")
            // Readers following the heartbeat: live, and their telemetry time stands still.
            let reading = TelemetryTimeline(record: r).now(atWall: r.wallUpdated + .seconds(Int64(1)))
            #expect(reading.source == .liveSimulation && reading.now == frozen)
        }
        #expect(pausedRecords.last!.wallUpdated - pausedRecords[0].wallUpdated >= .seconds(Int64(15)))
        // Ten simulated minutes at 60x are ten seconds of wall time, plus the 20 s pause (and a few sleeps).
        let elapsed = wall.now() - wallStart
        #expect(elapsed >= .seconds(Int64(30)) && elapsed <= .seconds(Int64(31)), "\(elapsed)")
        let last = try #require(try store.withDatabase { try SimulationClockTable.read(from: $0) })
        #expect(!last.running && last.simulatedAtUpdate == simulation.end)
    }
}
