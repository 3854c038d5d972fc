import Glibc
import Platform
import Telemetry
import Timekeeping

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

    /// Replaces the record; refuses one with a pace no simulation runs at (`SimulationClockRecord.hasValidSpeed`).
    public static func write(_ r: SimulationClockRecord, in db: SQLiteDatabase) throws {
        guard r.hasValidSpeed else { throw SimulationClockRecord.speedRefusal(r.speed) }
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
        guard try db.hasTable("simulation_clock"),
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

/// A `Clock` of telemetry time for a reader of a store that a simulation may write into (the console's ticks):
/// `TelemetryTimeline` over the store's record, re-read at most once per `refresh` of wall time. A read that fails
/// keeps the timeline last read (a failed read says nothing about the simulation) and is tried again a `refresh`
/// later.
public final class StoreSimulationClock: Clock, @unchecked Sendable {
    public let wall: any Clock
    public let refresh: Instant.Duration
    private let read: () throws -> SimulationClockRecord?
    private let lock = Lock()
    private var timeline = TelemetryTimeline(record: nil)
    private var readAt: Instant?

    /// Reads through the store's own connection (waiting for it while another thread uses it).
    public init(store: RolloutStore, wall: any Clock, refresh: Instant.Duration = .seconds(Int64(1))) {
        read = { try store.withDatabase { try SimulationClockTable.read(from: $0) } }
        self.wall = wall
        self.refresh = refresh
    }

    /// Reads on a read-only connection of its own that never waits for a lock, for a thread that must never wait
    /// on the store: the console's input thread ticks this clock while a publish may hold the store's connection
    /// for as long as another process holds the file's write lock.
    public init(path: String, wall: any Clock, refresh: Instant.Duration = .seconds(Int64(1))) throws {
        let database = try SQLiteDatabase(path: path, create: false, readOnly: true, busyTimeoutMilliseconds: 0)
        read = { try SimulationClockTable.read(from: database) }
        self.wall = wall
        self.refresh = refresh
    }

    public func now() -> Instant {
        let w = wall.now()
        let t: TelemetryTimeline = lock.withLock {
            if readAt.map({ w - $0 >= refresh }) ?? true {
                readAt = w
                if case .success(let record) = Result(catching: read) { timeline = TelemetryTimeline(record: record) }
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
        guard try db.hasTable("store_drill") else { return false }
        return try !db.query("SELECT 1 FROM store_drill WHERE id = 1").isEmpty
    }

    /// The table that marks a drill store (created by the first `mark`).
    static let schema =
        "CREATE TABLE IF NOT EXISTS store_drill (id INTEGER PRIMARY KEY CHECK (id = 1), marked_at INTEGER NOT NULL, marked_by TEXT NOT NULL)"

    /// Marks the store as a drill store (kept forever: a drill store never turns ordinary).
    ///
    /// In a write transaction of its own (a savepoint of the caller's, if any): on a store's connection the table
    /// it creates becomes part of the sealed schema when that transaction re-seals the store.
    public static func mark(_ db: SQLiteDatabase, at time: Instant, by actor: String) throws {
        try db.transaction {
            try db.execute(schema)
            try db.run(
                "INSERT OR IGNORE INTO store_drill (id, marked_at, marked_by) VALUES (1, ?, ?)",
                [.integer(time.microseconds), .text(actor)])
        }
    }
}
