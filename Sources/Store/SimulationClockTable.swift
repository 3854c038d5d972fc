import Foundation
import Telemetry
import Timekeeping

/// A running simulation's clock as published in the store, so that a reader on the wall clock (a console in
/// another terminal) can tell the simulated time.
///
/// The simulation writes a record when it starts, about once a second of wall time while it runs, and when it
/// stops: the anchor (`wallUpdated`, `simulatedAtUpdate`) and the speed. A reader extrapolates from the anchor
/// at the speed, but never more than `staleAfter` of wall time ahead: a simulation that stopped publishing
/// (killed, or slower than its speed) must not run ahead of its own data. Readers go through
/// `TelemetryTimeline`, which also decides when a simulation is no longer followed (ended, or silent).
public struct SimulationClockRecord: Hashable, Sendable {
    /// Wall time when the run started, and simulated time at that moment.
    public var wallStart: Instant
    public var simulatedStart: Instant
    /// Simulated seconds per wall second; nil when the simulation runs as fast as it can.
    public var speed: Double?
    /// Wall time of the last update, and simulated time at that update.
    public var wallUpdated: Instant
    public var simulatedAtUpdate: Instant
    /// False once the run has ended or was stopped.
    public var running: Bool

    public init(
        wallStart: Instant, simulatedStart: Instant, speed: Double?, wallUpdated: Instant, simulatedAtUpdate: Instant,
        running: Bool
    ) {
        self.wallStart = wallStart
        self.simulatedStart = simulatedStart
        self.speed = speed
        self.wallUpdated = wallUpdated
        self.simulatedAtUpdate = simulatedAtUpdate
        self.running = running
    }

    /// The simulated time at wall time `wall`.
    public func simulatedTime(atWall wall: Instant, staleAfter: Instant.Duration = .seconds(Int64(5))) -> Instant {
        let elapsed = max(0, (wall - wallUpdated).microseconds)
        guard running else { return simulatedAtUpdate + Instant.Duration(microseconds: elapsed) }
        let fast = min(elapsed, staleAfter.microseconds)
        let slow = elapsed - fast
        let scaled = Int64((Double(fast) * (speed ?? 0)).rounded())
        return simulatedAtUpdate + Instant.Duration(microseconds: scaled + slow)
    }
}

/// The `simulation_clock` table: at most one row, the clock of the simulation writing into this store.
public enum SimulationClockTable {
    public static func createSchema(in db: SQLiteDatabase) throws(SQLiteError) {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS simulation_clock (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                wall_start INTEGER NOT NULL,
                simulated_start INTEGER NOT NULL,
                speed REAL,
                wall_updated INTEGER NOT NULL,
                simulated_at_update INTEGER NOT NULL,
                running INTEGER NOT NULL CHECK (running IN (0, 1)));
            """)
    }

    /// Replaces the record.
    public static func write(_ r: SimulationClockRecord, in db: SQLiteDatabase) throws(SQLiteError) {
        try createSchema(in: db)
        try db.run(
            "INSERT OR REPLACE INTO simulation_clock (id, wall_start, simulated_start, speed, wall_updated, "
                + "simulated_at_update, running) VALUES (1, ?, ?, ?, ?, ?, ?)",
            [
                .integer(r.wallStart.microseconds), .integer(r.simulatedStart.microseconds),
                r.speed.map { .real($0) } ?? .null, .integer(r.wallUpdated.microseconds),
                .integer(r.simulatedAtUpdate.microseconds), .integer(r.running ? 1 : 0),
            ])
    }

    /// The record, or nil when no simulation ever wrote into this store.
    public static func read(from db: SQLiteDatabase) throws(SQLiteError) -> SimulationClockRecord? {
        let exists = try db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'simulation_clock'")
        guard !exists.isEmpty,
            let r = try db.query(
                "SELECT wall_start, simulated_start, speed, wall_updated, simulated_at_update, running "
                    + "FROM simulation_clock WHERE id = 1"
            ).first,
            let wallStart = r[0].int, let simulatedStart = r[1].int, let wallUpdated = r[3].int,
            let simulatedAt = r[4].int, let running = r[5].int
        else { return nil }
        return SimulationClockRecord(
            wallStart: Instant(microseconds: wallStart), simulatedStart: Instant(microseconds: simulatedStart),
            speed: r[2].double, wallUpdated: Instant(microseconds: wallUpdated),
            simulatedAtUpdate: Instant(microseconds: simulatedAt), running: running == 1)
    }

    /// Removes the record (the store is back on wall time).
    public static func clear(in db: SQLiteDatabase) throws(SQLiteError) {
        try createSchema(in: db)
        try db.run("DELETE FROM simulation_clock")
    }
}

/// Telemetry time for a store: the wall clock, or a simulation's time while it is alive.
///
/// People and security never use this (TOTP windows, lockouts, TTLs and audit timestamps run on the wall
/// clock); it only places "now" among a simulation's own events. A simulation is alive while its heartbeat
/// (the record's `wallUpdated`, written about twice a second) is at most `heartbeatTimeout` old; once it ended
/// or went silent, readers stop following it: time is frozen at its last simulated instant and the assessment
/// says so (HOLD).
public struct TelemetryTimeline: Hashable, Sendable {
    public static let heartbeatTimeout = Instant.Duration.seconds(Int64(5))
    public var record: SimulationClockRecord?

    public init(record: SimulationClockRecord?) { self.record = record }

    /// Telemetry time and its source at wall time `wall`.
    public func now(atWall wall: Instant) -> (now: Instant, source: TelemetryTimeSource) {
        guard let r = record else { return (wall, .wall) }
        if !r.running { return (r.simulatedAtUpdate, .finishedSimulation(endedAt: r.wallUpdated)) }
        if wall - r.wallUpdated > Self.heartbeatTimeout {
            return (r.simulatedAtUpdate, .lostSimulation(lastHeartbeat: r.wallUpdated))
        }
        return (r.simulatedTime(atWall: wall, staleAfter: Self.heartbeatTimeout), .liveSimulation)
    }

    /// A wall-clock instant (a version's publish time) placed on telemetry time: before the simulation began
    /// at the wall's pace from its start, during it along the line from its start to its last heartbeat (its
    /// pace), after it frozen at its end. Without a simulation it is the instant itself.
    public func telemetryTime(ofWall t: Instant) -> Instant {
        guard let r = record else { return t }
        if t <= r.wallStart { return r.simulatedStart - (r.wallStart - t) }
        if t >= r.wallUpdated { return r.running ? r.simulatedAtUpdate + (t - r.wallUpdated) : r.simulatedAtUpdate }
        let span = Double((r.wallUpdated - r.wallStart).microseconds)
        let simulated = Double((r.simulatedAtUpdate - r.simulatedStart).microseconds)
        let share = Double((t - r.wallStart).microseconds) / span
        return r.simulatedStart + Instant.Duration(microseconds: Int64((simulated * share).rounded()))
    }
}

/// A `Clock` of telemetry time for a reader of a store that a simulation may write into (the console's ticks):
/// `TelemetryTimeline` over the store's record, re-read at most once per `refresh` of wall time.
public final class StoreSimulationClock: Clock, @unchecked Sendable {
    public let store: RolloutStore
    public let wall: any Clock
    public let refresh: Instant.Duration
    private let lock = NSLock()
    private var timeline = TelemetryTimeline(record: nil)
    private var readAt: Instant?

    public init(store: RolloutStore, wall: any Clock, refresh: Instant.Duration = .seconds(Int64(1))) {
        self.store = store
        self.wall = wall
        self.refresh = refresh
    }

    public func now() -> Instant {
        let w = wall.now()
        let t: TelemetryTimeline = lock.withLock {
            if readAt.map({ w - $0 >= refresh }) ?? true {
                readAt = w
                timeline = TelemetryTimeline(record: (try? store.withDatabase { try SimulationClockTable.read(from: $0) }) ?? nil)
            }
            return timeline
        }
        return t.now(atWall: w).now
    }
}

/// Whether a store was made for drills (`simulate`, `demo`): the `store_drill` table, one row when it is.
///
/// Simulations write simulated telemetry and scripted changes; they run only on drill stores, or on an
/// ordinary store when the operator says so explicitly (recorded in the audit log by the caller).
public enum DrillStoreMark {
    public static func isDrill(_ db: SQLiteDatabase) throws(SQLiteError) -> Bool {
        let exists = try db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'store_drill'")
        guard !exists.isEmpty else { return false }
        return try !db.query("SELECT 1 FROM store_drill WHERE id = 1").isEmpty
    }

    /// Marks the store as a drill store (kept forever: a drill store never turns ordinary).
    public static func mark(_ db: SQLiteDatabase, at time: Instant, by actor: String) throws(SQLiteError) {
        try db.execute(
            "CREATE TABLE IF NOT EXISTS store_drill (id INTEGER PRIMARY KEY CHECK (id = 1), marked_at INTEGER NOT NULL, marked_by TEXT NOT NULL)"
        )
        try db.run("INSERT OR IGNORE INTO store_drill (id, marked_at, marked_by) VALUES (1, ?, ?)", [.integer(time.microseconds), .text(actor)])
    }
}
