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

    /// A step cut short by its budget stops between instants and the next one goes on from there: the same events
    /// as one uninterrupted run, in the same order.
    @Test func aStepCutShortLosesAndRepeatsNothing() throws {
        // A busy fleet, and 40 changes due at the same instant: more than a step asks its budget between.
        let changes = (1...40).map { "at 20m rollout \($0)%\n" }.joined()
        let scenario = try Scenario.parse(
            "duration 1h\nsessions-per-day 24\nsession-length 4m\ncrash-rate 2%\nrollout 40%\n" + changes, name: "cut")
        let options = FleetOptions(
            scenario: scenario, devices: 1500, seed: 3, start: Fixture.start, duration: .hours(Int64(1)))
        let whole = RecordingSink()
        let once = try FleetSimulation(
            scenario: scenario, options: options, config: try Fixture.memoryStore(seed: scenario.rolloutSeed),
            sink: whole)
        try once.advance(to: once.end)
        let cut = RecordingSink()
        let stepped = try FleetSimulation(
            scenario: scenario, options: options, config: try Fixture.memoryStore(seed: scenario.rolloutSeed), sink: cut
        )
        var steps = 0
        while !stepped.isFinished {
            let before = stepped.now
            try stepped.advance(to: stepped.end, yieldingWhen: { true })
            steps += 1
            #expect(stepped.now >= before)
            // Where it stopped, nothing due is left behind: advancing to the same instant does nothing.
            let (landed, totals) = (cut.events.count, stepped.statistics())
            try stepped.advance(to: stepped.now)
            #expect(
                cut.events.count == landed && stepped.statistics() == totals, "an action due at \(stepped.now) was left"
            )
        }
        #expect(once.isFinished && steps > 10, "\(steps) steps")
        #expect(cut.events.count == whole.events.count && cut.events.count > 1000)
        #expect(cut.events == whole.events)
        #expect(stepped.statistics() == once.statistics() && once.statistics().templateVersion == 42)
    }

    /// A machine slower than the speed asks for: every event costs wall time. A step is bounded by wall time, not
    /// by an amount of simulated time the machine was assumed to manage, so the heartbeat keeps coming while the
    /// fleet works through a busy stretch (the first minutes of a large fleet at 3600x took longer than the 5 s
    /// after which readers call a silent simulation lost, and the demo was called STALE on a busy machine).
    /// At the maximum speed a step was a simulated minute, whatever it cost.
    @Test(arguments: [(SimulationSpeed.factor(3600), Int64(3)), (.maximum, 20)])
    func aSlowMachineStillBeatsWellWithinTheTimeout(speed: SimulationSpeed, millisecondsPerEvent: Int64) throws {
        let scenario = try Fixture.scenario("busy")
        let wall = ManualClock(Instant(seconds: 1_900_000_000))
        // Milliseconds of wall time per event: at 3 ms an hour of this fleet takes about 16 s, not 1 s; at 20 ms a
        // busy simulated minute takes 2 s.
        let slow = WallCostSink(wall: wall, perEvent: .milliseconds(millisecondsPerEvent))
        let simulation = try FleetSimulation(
            scenario: scenario,
            options: FleetOptions(
                scenario: scenario, devices: 3000, seed: 2, start: Fixture.start, duration: .hours(Int64(1))),
            config: try Fixture.memoryStore(seed: scenario.rolloutSeed), sink: slow)
        let beats = HeartbeatLog()
        let runner = SimulationRunner(
            simulation: simulation, speed: speed, wall: wall, clockStore: beats, sleep: { wall.advance(by: $0) }
        )
        try runner.run()
        #expect(simulation.isFinished)
        #expect(slow.events > 5_000, "a busy stretch: \(slow.events) events")
        let walls = beats.records.map(\.wallUpdated)
        let gaps = zip(walls.dropFirst(), walls).map { $0 - $1 }
        let longest = try #require(gaps.max())
        #expect(
            longest.microseconds * 5 < TelemetryTimeline.heartbeatTimeout.microseconds,
            "longest silence \(longest) over \(gaps.count) beats")
        // Simulated time never runs backwards in what readers are told, and the run ends at the end.
        #expect(
            zip(beats.records.dropFirst(), beats.records).allSatisfy { $0.simulatedAtUpdate >= $1.simulatedAtUpdate })
        #expect(beats.records.last?.running == false && beats.records.last?.simulatedAtUpdate == simulation.end)
    }
}

/// A sink on a machine where each event costs `perEvent` of wall time.
final class WallCostSink: FleetTelemetrySink {
    let wall: ManualClock
    let perEvent: Instant.Duration
    var events = 0
    init(wall: ManualClock, perEvent: Instant.Duration) {
        self.wall = wall
        self.perEvent = perEvent
    }
    func record(_ event: TelemetryEvent) {
        events += 1
        wall.advance(by: perEvent)
    }
    func reached(_ now: Instant) {}
    func flush(at now: Instant) {}
}

/// Every clock record a runner publishes, in order.
final class HeartbeatLog: SimulationHeartbeat {
    var records: [SimulationClockRecord] = []
    func simulationClock() -> SimulationClockRecord? { records.last }
    func publishSimulationClock(_ record: SimulationClockRecord) { records.append(record) }
    func clearSimulationClock() { records.removeAll() }
}
