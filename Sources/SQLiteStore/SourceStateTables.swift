import JSON
import Telemetry
import TelemetrySources
import Timekeeping

/// The state of telemetry sources in the store file: `source_state` (watermark, last success and failure per
/// source) and `source_ledger` (what each pull contributed per minute and key), so that a re-pull or an
/// overlap commits only the difference, in the same transaction as the batch it lands.
extension RolloutStore: SourceStateStore {
    static let sourceTables = """
        CREATE TABLE IF NOT EXISTS source_state(
            source TEXT PRIMARY KEY NOT NULL, watermark INTEGER, last_success INTEGER, last_attempt INTEGER,
            last_error TEXT) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS source_ledger(
            source TEXT NOT NULL, minute INTEGER NOT NULL, dimensions TEXT NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY(source, minute, dimensions)) WITHOUT ROWID;
        """

    public func sourceState(_ name: String) throws -> SourceState? {
        try withDatabase { db in
            guard try db.hasTable("source_state"),
                let r = try db.query(
                    "SELECT watermark, last_success, last_attempt, last_error, "
                        + "(SELECT max(minute) FROM source_ledger WHERE source = ?1) "
                        + "FROM source_state WHERE source = ?1",
                    [.text(name)]
                ).first
            else { return nil }
            return SourceState(
                watermark: r[0].int.map(Instant.init(microseconds:)), lastSuccess: r[1].int.map(Instant.init(microseconds:)),
                lastAttempt: r[2].int.map(Instant.init(microseconds:)), lastError: r[3].string,
                newestData: SourceState.newestData(minute: r[4].int))
        }
    }

    /// The configured sources (`source_config`) that are silent at `now`, by `SourceState.silences`.
    public func sourceSilences(at now: Instant) throws -> [String] {
        try withDatabase { db in
            try SourceState.silences(try SourceConfigTable.load(from: db), now: now) { try sourceState($0) }
        }
    }

    @discardableResult
    public func commitPull(_ pull: SourcePull, at committedAt: Instant) throws -> [AggregateKey: Int64] {
        try withDatabase { db in
            try db.transaction(immediate: true) { () throws -> [AggregateKey: Int64] in
                try db.createTables(["source_state", "source_ledger"], Self.sourceTables)
                var recorded: [AggregateKey: Int64] = [:]
                let read = try db.prepare(
                    "SELECT minute, dimensions, count FROM source_ledger WHERE source = ? AND minute >= ? AND minute < ?")
                try read.bind(.text(pull.source), at: 1)
                try read.bind(.integer(pull.plan.fromMinute), at: 2)
                try read.bind(.integer(pull.plan.throughMinute), at: 3)
                while try read.step() {
                    guard let key = AggregateKey(minute: read.int(0), dimensions: read.text(1)) else { continue }
                    recorded[key] = read.int(2)
                }
                read.reset()
                let changes = PullLedger.changes(pulled: pull.counts, recorded: recorded)
                if !changes.isEmpty {
                    let put = try db.prepare(
                        "INSERT INTO source_ledger(source, minute, dimensions, count) VALUES (?,?,?,?) "
                            + "ON CONFLICT(source, minute, dimensions) DO UPDATE SET count = excluded.count")
                    for (key, _) in changes {
                        put.reset()
                        try put.bind(.text(pull.source), at: 1)
                        try put.bind(.integer(key.minute), at: 2)
                        try put.bind(.text(key.dimensions), at: 3)
                        try put.bind(.integer(pull.counts[key] ?? 0), at: 4)
                        while try put.step() {}
                    }
                    try db.run("DELETE FROM source_ledger WHERE source = ? AND count = 0", [.text(pull.source)])
                    // The same commit as `rollout ingest`, inside this transaction (a savepoint).
                    try TelemetryTables(database: db).commit(
                        PullLedger.batch(changes), source: "source:" + pull.source, at: committedAt)
                }
                try db.run(
                    "INSERT INTO source_state(source, watermark, last_success, last_attempt, last_error) VALUES (?,?,?,?,NULL) "
                        + "ON CONFLICT(source) DO UPDATE SET watermark = excluded.watermark, "
                        + "last_success = excluded.last_success, last_attempt = excluded.last_attempt, last_error = NULL",
                    [
                        .text(pull.source), .integer(pull.plan.nextWatermark.microseconds),
                        .integer(committedAt.microseconds), .integer(committedAt.microseconds),
                    ])
                return changes
            }
        }
    }

    public func recordFailure(source: String, message: String, at: Instant) throws {
        try withDatabase { db in
            try db.transaction(immediate: true) {
                try db.createTables(["source_state", "source_ledger"], Self.sourceTables)
                try db.run(
                    "INSERT INTO source_state(source, last_attempt, last_error) VALUES (?,?,?) "
                        + "ON CONFLICT(source) DO UPDATE SET last_attempt = excluded.last_attempt, last_error = excluded.last_error",
                    [.text(source), .integer(at.microseconds), .text(String(message.prefix(500)))])
            }
        }
    }
}

/// The configured sources (`source_config`: one row per source, its configuration as JSON), in the settings
/// write path's transaction on `db`.
public enum SourceConfigTable {
    static let schema = """
        CREATE TABLE IF NOT EXISTS source_config(name TEXT PRIMARY KEY NOT NULL, definition TEXT NOT NULL) WITHOUT ROWID;
        """

    public static func load(from db: SQLiteDatabase) throws -> [SourceConfiguration] {
        guard try db.hasTable("source_config") else { return [] }
        return try db.query("SELECT definition FROM source_config ORDER BY name").map { row in
            try SourceConfiguration(json: try JSONParser().parse(row[0].string ?? ""))
        }
    }

    public static func save(_ configuration: SourceConfiguration, in db: SQLiteDatabase) throws {
        try db.createTables(["source_config"], schema)
        try db.run(
            "INSERT INTO source_config(name, definition) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET definition = excluded.definition",
            [.text(configuration.name), .text(configuration.json.compactText)])
    }

    public static func remove(_ name: String, in db: SQLiteDatabase) throws {
        if try db.hasTable("source_config") { try db.run("DELETE FROM source_config WHERE name = ?", [.text(name)]) }
        if try db.hasTable("source_state") {
            try db.run("DELETE FROM source_state WHERE source = ?", [.text(name)])
            try db.run("DELETE FROM source_ledger WHERE source = ?", [.text(name)])
        }
    }
}
