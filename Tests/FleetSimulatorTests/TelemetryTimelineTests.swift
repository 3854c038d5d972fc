import Foundation
import SQLiteStore
import Telemetry
import TestSupport
import Testing
import Timekeeping

/// Telemetry time from a store's simulation heartbeat: followed while alive, frozen (and said so) once the
/// simulation ended or went silent; versions' wall-clock times placed on the simulation's time.
@Suite struct TelemetryTimelineTests {
    let wall0 = Instant(seconds: 1_900_000_000)
    let sim0 = Fixture.start

    func record(updatedAfter seconds: Int64, simulatedMinutes: Int64, running: Bool = true) -> SimulationClockRecord {
        SimulationClockRecord(
            wallStart: wall0, simulatedStart: sim0, speed: 60, wallUpdated: wall0 + .seconds(seconds),
            simulatedAtUpdate: sim0 + .minutes(simulatedMinutes), running: running)
    }

    @Test func noSimulationIsTheWallClock() {
        let t = TelemetryTimeline(record: nil)
        let (now, source) = t.now(atWall: wall0)
        #expect(now == wall0)
        #expect(source == .wall)
        #expect(t.telemetryTime(ofWall: wall0) == wall0)
    }

    @Test func aLiveSimulationIsFollowed() {
        let t = TelemetryTimeline(record: record(updatedAfter: 10, simulatedMinutes: 10))
        let (now, source) = t.now(atWall: wall0 + .seconds(Int64(12)))
        #expect(source == .liveSimulation)
        #expect(now == sim0 + .minutes(12))
    }

    /// A heartbeat written "in the future" (a forged `simulation_clock` row: wall_updated ahead, the simulated time
    /// hours ahead) kept the simulation live, and telemetry time hours ahead, for as long as it was ahead: beyond a
    /// small skew it is not live, and wall time is used.
    @Test func aHeartbeatFromTheFutureIsNotLive() {
        let t = TelemetryTimeline(record: record(updatedAfter: 600, simulatedMinutes: 420))
        let (now, source) = t.now(atWall: wall0 + .seconds(Int64(10)))
        #expect(source == .wall)
        #expect(now == wall0 + .seconds(Int64(10)))
        // Within the skew (a writer's clock a little ahead) it is followed.
        let near = TelemetryTimeline(record: record(updatedAfter: 11, simulatedMinutes: 11))
        #expect(near.now(atWall: wall0 + .seconds(Int64(10))).source == .liveSimulation)
    }

    /// A pace no simulation runs at is not followed when read and refused when written.
    @Test func aPaceAboveTheLimitIsIgnoredAndRefused() throws {
        var r = record(updatedAfter: 10, simulatedMinutes: 10)
        r.speed = SimulationClockRecord.maximumSpeed * 10
        #expect(TelemetryTimeline(record: r).now(atWall: wall0 + .seconds(Int64(11))).source == .wall)
        let directory = try TestSupport.temporaryDirectory("timeline-speed")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try RolloutStore(path: directory.appendingPathComponent("r.db").path)
        #expect(throws: SimulationSpeedOutOfRange.self) { try store.publishSimulationClock(r) }
        r.speed = 3600
        try store.publishSimulationClock(r)
        #expect(try store.simulationClock()?.speed == 3600)
    }

    @Test func aSilentSimulationIsFrozenAndSaidSo() {
        let t = TelemetryTimeline(record: record(updatedAfter: 10, simulatedMinutes: 10))
        let (now, source) = t.now(atWall: wall0 + .seconds(Int64(16)))
        #expect(source == .lostSimulation(lastHeartbeat: wall0 + .seconds(Int64(10))))
        #expect(now == sim0 + .minutes(10))
        // However long after: still frozen, so every reader at any later instant sees the same figures.
        #expect(t.now(atWall: wall0 + .hours(3)).now == sim0 + .minutes(10))
    }

    @Test func aFinishedSimulationIsFrozenAtItsEnd() {
        let t = TelemetryTimeline(record: record(updatedAfter: 120, simulatedMinutes: 120, running: false))
        let (now, source) = t.now(atWall: wall0 + .seconds(Int64(121)))
        #expect(source == .finishedSimulation(endedAt: wall0 + .seconds(Int64(120))))
        #expect(now == sim0 + .minutes(120))
    }

    @Test func versionsPublishedDuringTheRunLandOnSimulatedTime() {
        let t = TelemetryTimeline(record: record(updatedAfter: 120, simulatedMinutes: 120, running: false))
        // A minute of wall time into the run at 60x: an hour of simulated time.
        #expect(t.telemetryTime(ofWall: wall0 + .seconds(Int64(60))) == sim0 + .minutes(60))
        // Before the run: at the wall's pace back from its start; after it: its end.
        #expect(t.telemetryTime(ofWall: wall0 - .seconds(Int64(5))) == sim0 - .seconds(Int64(5)))
        #expect(t.telemetryTime(ofWall: wall0 + .hours(1)) == sim0 + .minutes(120))
    }

    @Test func aDrillStoreSaysSo() throws {
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try store.withDatabase { try DrillStoreMark.isDrill($0) } == false)
        try store.withDatabase { try DrillStoreMark.mark($0, at: wall0, by: "simulate") }
        #expect(try store.withDatabase { try DrillStoreMark.isDrill($0) } == true)
    }
}
