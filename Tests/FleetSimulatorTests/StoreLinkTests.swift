import FleetSimulator
import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import Testing
import TestSupport
import Timekeeping

/// Sends every event to two sinks.
final class TeeSink: FleetTelemetrySink {
    let sinks: [any FleetTelemetrySink]
    init(_ sinks: [any FleetTelemetrySink]) { self.sinks = sinks }
    func record(_ event: TelemetryEvent) throws { for s in sinks { try s.record(event) } }
    func reached(_ now: Instant) throws { for s in sinks { try s.reached(now) } }
    func flush(at now: Instant) throws { for s in sinks { try s.flush(at: now) } }
}

/// The simulator against a store file: telemetry through the ingest path, config read from the store on every
/// fetch (so another connection's publish reaches the fleet), and its clock published for wall-clock readers.
@Suite struct StoreLinkTests {
    @Test func anOperatorsNudgeFromAnotherConnectionReachesTheFleet() throws {
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenario = try Scenario.parse(
            "duration 1h\nsessions-per-day 48\nsession-length 4m\nrealtime 50%\nfetch-interval 10m\nrollout 10%\n",
            name: "nudge")
        let recording = RecordingSink()
        let storeSink = try StoreTelemetrySink(store: store)
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 3000, seed: 6, start: Fixture.start),
            config: try store.configStore(), sink: TeeSink([storeSink, recording]))
        try simulation.advance(to: Fixture.start + .minutes(20))
        #expect(simulation.statistics().templateVersion == 2)

        // Another terminal: its own connection to the same file, its own write path, publishing 30%.
        let operatorStore = try RolloutStore(path: store.path)
        let path = WritePath(store: try operatorStore.configStore(), clock: simulation.clock, newSeed: { "unused" })
        let outcome = try path.execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 30))), actor: "ana@example.com", reason: "drill",
                origin: "TEST"))
        guard case .published(let stored, _, _) = outcome else { Issue.record("not published"); return }
        #expect(stored.info.number == 3)

        try simulation.run()
        let nudge = Fixture.start + .minutes(20)
        let fetched3 = recording.events.filter { $0.kind == .configFetch(templateVersion: 3) }
        #expect(fetched3.count > 1000)
        #expect(fetched3.allSatisfy { $0.time >= nudge })
        // Real-time listeners in a session had it within seconds of the publish.
        #expect(fetched3.contains { $0.time < nudge + .seconds(Int64(30)) })
        // Devices between 10% and 30% attested after the nudge.
        let newlyExposed = recording.events.filter {
            $0.kind == .attestationSuccess && ExposureTests.percentile($0.installationID) > 10_000_000
        }
        #expect(newlyExposed.count > 100 && newlyExposed.allSatisfy { $0.time > nudge })

        // Everything landed through the ingest path: the store's totals are the events sent.
        let totals = try store.withDatabase { try TelemetryTables(database: $0).allTimeTotals() }
        for kind in [CounterKind.session, .configFetch, .attestationSuccess, .attestationFailure, .crash] {
            let sent = recording.events.filter { Self.kind($0.kind) == kind }.count
            #expect(totals.sum(kind) == Int64(sent), "\(kind)")
        }
        // One batch per simulated minute (plus the final partial one at most).
        let batches = try store.withDatabase { try TelemetryTables(database: $0).batches() }
        #expect(batches.count >= 55 && batches.count <= 62)
        #expect(batches.allSatisfy { $0.source == "simulator" })
        #expect(storeSink.committedEvents == recording.events.count)
    }

    static func kind(_ k: TelemetryEventKind) -> CounterKind {
        switch k {
        case .attestationSuccess: .attestationSuccess
        case .attestationFailure: .attestationFailure
        case .crash: .crash
        case .sessionStart: .session
        case .configFetch: .configFetch
        }
    }

    @Test func theRunnerPacesSimulatedTimeAndPublishesItsClock() throws {
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenario = try Scenario.parse("duration 10m\nrollout 10%\n", name: "paced")
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 500, seed: 1, start: Fixture.start),
            config: try store.configStore(), sink: StoreTelemetrySink(store: store))
        // Wall time moves only when the runner sleeps: the run is exact and instant.
        let wallStart = Instant(seconds: 1_900_000_000)
        let wall = ManualClock(wallStart)
        let runner = SimulationRunner(
            simulation: simulation, speed: .factor(60), wall: wall, clockStore: store, sleep: { wall.advance(by: $0) })
        var reports = 0
        var midRun: SimulationClockRecord?
        try runner.run { stats, _ in
            reports += 1
            // The latest record before the end: the first ones publish at most 1x until the pace is measured.
            if stats.now < simulation.end {
                midRun = try? store.withDatabase { try SimulationClockTable.read(from: $0) }
            }
        }
        #expect(simulation.isFinished)
        // Ten simulated minutes at 60x are ten seconds of wall time (plus at most one sleep).
        let elapsed = wall.now() - wallStart
        #expect(elapsed >= .seconds(Int64(10)) && elapsed <= .seconds(10.1), "\(elapsed)")
        #expect(reports >= 15)
        let running = try #require(midRun)
        #expect(running.running && running.speed == 60 && running.simulatedStart == Fixture.start)
        #expect(running.wallStart == wallStart)
        let last = try #require(try store.withDatabase { try SimulationClockTable.read(from: $0) })
        #expect(!last.running && last.simulatedAtUpdate == simulation.end)
    }

    @Test func aWallClockReaderMapsToSimulatedTime() throws {
        let wall0 = Instant(seconds: 1_900_000_000)
        let sim0 = Fixture.start
        var r = SimulationClockRecord(
            wallStart: wall0, simulatedStart: sim0, speed: 60, wallUpdated: wall0 + .seconds(Int64(10)),
            simulatedAtUpdate: sim0 + .minutes(10), running: true)
        // Extrapolated at the speed from the last update...
        #expect(r.simulatedTime(atWall: wall0 + .seconds(Int64(12))) == sim0 + .minutes(12))
        // ...but no more than 5 s of wall time ahead; beyond that time goes on at 1x.
        #expect(r.simulatedTime(atWall: wall0 + .seconds(Int64(25))) == sim0 + .minutes(15) + .seconds(Int64(10)))
        // Run as fast as possible: the published time, then 1x once stale.
        r.speed = nil
        #expect(r.simulatedTime(atWall: wall0 + .seconds(Int64(12))) == sim0 + .minutes(10))
        // After the run: 1x from where it stopped.
        r.speed = 60
        r.running = false
        #expect(r.simulatedTime(atWall: wall0 + .seconds(Int64(12))) == sim0 + .minutes(10) + .seconds(Int64(2)))

        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wall = ManualClock(wall0 + .seconds(Int64(12)))
        let reader = StoreSimulationClock(store: store, wall: wall)
        #expect(reader.now() == wall.now())
        r.running = true
        try store.withDatabase { try SimulationClockTable.write(r, in: $0) }
        wall.advance(by: .seconds(Int64(1)))
        #expect(reader.now() == sim0 + .minutes(13))
        try store.withDatabase { try SimulationClockTable.clear(in: $0) }
        wall.advance(by: .seconds(Int64(1)))
        #expect(reader.now() == wall.now())
    }

    /// The console's tick clock reads on a connection of its own that never waits: it follows the record while
    /// another thread holds the store's connection (a publish waiting for the write lock, which another connection
    /// holds).
    @Test func aReaderOnItsOwnConnectionNeverWaitsForTheStore() throws {
        let wall0 = Instant(seconds: 1_900_000_000)
        let sim0 = Fixture.start
        let record = SimulationClockRecord(
            wallStart: wall0, simulatedStart: sim0, speed: 60, wallUpdated: wall0 + .seconds(Int64(10)),
            simulatedAtUpdate: sim0 + .minutes(10), running: true)
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        try store.withDatabase { try SimulationClockTable.write(record, in: $0) }
        let reader = try StoreSimulationClock(path: store.path, wall: ManualClock(wall0 + .seconds(Int64(12))))

        let writer = try SQLiteDatabase(path: store.path, create: false)
        try writer.execute("BEGIN EXCLUSIVE")
        defer { try? writer.execute("ROLLBACK") }
        let held = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holder = BackgroundCall {
            store.withDatabase { _ in
                held.signal()
                release.wait()
            }
        }
        defer {
            release.signal()
            _ = holder.result(within: 5)
        }
        held.wait()
        let tick = BackgroundCall { reader.now() }
        #expect(tick.result(within: 2) == sim0 + .minutes(12))
    }
}

/// The demo mode's use: the simulation advances on a background thread while the console reads its clock and
/// totals on another.
@Suite struct InProcessTests {
    @Test func readersSeeTimeMoveForwardWhileABackgroundThreadAdvances() throws {
        let scenario = try Scenario.parse("duration 30m\nsessions-per-day 24\nrollout 10%\n", name: "demo")
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 2000, seed: 1, start: Fixture.start),
            config: try Fixture.memoryStore(), sink: RecordingSink())
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var failure: Error?
        Thread.detachNewThread {
            do {
                var t = simulation.start
                while t < simulation.end {
                    t = t + .seconds(Int64(10))
                    try simulation.advance(to: t)
                }
            } catch {
                failure = error
            }
            done.signal()
        }
        var last = simulation.now
        var lastEvents = 0
        var reads = 0
        while done.wait(timeout: .now()) == .timedOut {
            let now = simulation.clock.now()
            let stats = simulation.statistics()
            #expect(now >= last && stats.events >= lastEvents)
            #expect(now >= simulation.start && now <= simulation.end)
            last = now
            lastEvents = stats.events
            reads += 1
        }
        #expect(failure == nil)
        #expect(simulation.isFinished && simulation.now == simulation.end)
        #expect(simulation.statistics().events > 500 && reads > 0)
    }
}
