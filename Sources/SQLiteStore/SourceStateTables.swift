import JSON
import Telemetry
import TelemetrySources
import Timekeeping

/// The state of telemetry sources in the store file: `source_state` (watermark, last success and failure, and the
/// events read up to which minute, per ledger) and `source_ledger` (what each pull contributed per minute and key),
/// so that a re-pull or an overlap commits only the difference, in the same transaction as the batch it lands.
///
/// Both are keyed by the ledger (`SourceLedger.key`: the events a source reads; the `source` column holds it), not
/// by the source's name, and removing a source leaves them: what it landed stays counted, and so does the record of
/// it. Schema 11 creates the tables (before, they were created on first use) and moves the rows of each configured
/// source from its name to its ledger's key (`SourceTables.migrate`).
extension RolloutStore: SourceStateStore {
    public func sourceState(_ ledger: String) throws -> SourceState? {
        try withDatabase { db in
            guard try db.hasTable("source_state"),
                let r = try db.query(
                    "SELECT watermark, last_success, last_attempt, last_error, "
                        + "(SELECT max(minute) FROM source_ledger WHERE source = ?1) "
                        + "FROM source_state WHERE source = ?1",
                    [.text(ledger)]
                ).first
            else { return nil }
            return SourceState(
                watermark: r[0].int.map(Instant.init(microseconds:)), lastSuccess: r[1].int.map(Instant.init(microseconds:)),
                lastAttempt: r[2].int.map(Instant.init(microseconds:)), lastError: r[3].string,
                newestData: SourceState.newestData(minute: r[4].int))
        }
    }

    public func sourceLedgers() throws -> [SourceLedgerRecord] {
        try withDatabase { db in try SourceConfigTable.ledgers(in: db) }
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
                let ledger = pull.ledger.key
                var recorded: [AggregateKey: Int64] = [:]
                let read = try db.prepare(
                    "SELECT minute, dimensions, count FROM source_ledger WHERE source = ? AND minute >= ? AND minute < ?")
                try read.bind(.text(ledger), at: 1)
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
                        try put.bind(.text(ledger), at: 1)
                        try put.bind(.integer(key.minute), at: 2)
                        try put.bind(.text(key.dimensions), at: 3)
                        try put.bind(.integer(pull.counts[key] ?? 0), at: 4)
                        while try put.step() {}
                    }
                    try db.run("DELETE FROM source_ledger WHERE source = ? AND count = 0", [.text(ledger)])
                    // The same commit as `rollout ingest`, inside this transaction (a savepoint).
                    try TelemetryTables(database: db).commit(
                        PullLedger.batch(changes), source: "source:" + pull.source, at: committedAt)
                }
                let landed = SourceLedgerRecord.reads(
                    try db.query("SELECT reads FROM source_state WHERE source = ?", [.text(ledger)]).first?[0].string)
                let reads = SourceLedgerRecord.reads(landed, adding: pull.ledger, through: pull.plan.throughMinute)
                try db.run(
                    "INSERT INTO source_state(source, watermark, last_success, last_attempt, last_error, reads) "
                        + "VALUES (?,?,?,?,NULL,?) "
                        + "ON CONFLICT(source) DO UPDATE SET watermark = excluded.watermark, "
                        + "last_success = excluded.last_success, last_attempt = excluded.last_attempt, last_error = NULL, "
                        + "reads = excluded.reads",
                    [
                        .text(ledger), .integer(pull.plan.nextWatermark.microseconds),
                        .integer(committedAt.microseconds), .integer(committedAt.microseconds),
                        .text(SourceLedgerRecord.readsText(reads)),
                    ])
                return changes
            }
        }
    }

    public func recordFailure(ledger: String, message: String, at: Instant) throws {
        try withDatabase { db in
            try db.transaction(immediate: true) {
                try db.run(
                    "INSERT INTO source_state(source, last_attempt, last_error) VALUES (?,?,?) "
                        + "ON CONFLICT(source) DO UPDATE SET last_attempt = excluded.last_attempt, last_error = excluded.last_error",
                    [.text(ledger), .integer(at.microseconds), .text(String(message.prefix(500)))])
            }
        }
    }
}

/// The configured sources (`source_config`: one row per source, its configuration as JSON), in the settings
/// write path's transaction on `db`.
public enum SourceConfigTable {
    public static func load(from db: SQLiteDatabase) throws -> [SourceConfiguration] {
        guard try db.hasTable("source_config") else { return [] }
        return try db.query("SELECT definition FROM source_config ORDER BY name").map { row in
            try SourceConfiguration(json: try JSONParser().parse(row[0].string ?? ""))
        }
    }

    public static func save(_ configuration: SourceConfiguration, in db: SQLiteDatabase) throws {
        try db.run(
            "INSERT INTO source_config(name, definition) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET definition = excluded.definition",
            [.text(configuration.name), .text(configuration.json.compactText)])
    }

    /// Removes the source's configuration; its ledger and state stay (`SourceLedger`).
    public static func remove(_ name: String, in db: SQLiteDatabase) throws {
        try db.run("DELETE FROM source_config WHERE name = ?", [.text(name)])
    }

    /// Every ledger with what it has read (for `SourceConfiguration.overlap`).
    public static func ledgers(in db: SQLiteDatabase) throws -> [SourceLedgerRecord] {
        guard try db.hasTable("source_state") else { return [] }
        return try db.query("SELECT source, watermark, reads FROM source_state ORDER BY source").map { r in
            SourceLedgerRecord(
                key: r[0].string ?? "", watermark: r[1].int.map(Instant.init(microseconds:)),
                reads: SourceLedgerRecord.reads(r[2].string))
        }
    }
}

/// The telemetry sources' tables and their migration (schema 11).
enum SourceTables {
    static let schema = """
        CREATE TABLE IF NOT EXISTS source_config(name TEXT PRIMARY KEY NOT NULL, definition TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS source_state(
            source TEXT PRIMARY KEY NOT NULL, watermark INTEGER, last_success INTEGER, last_attempt INTEGER,
            last_error TEXT, reads TEXT) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS source_ledger(
            source TEXT NOT NULL, minute INTEGER NOT NULL, dimensions TEXT NOT NULL, count INTEGER NOT NULL,
            PRIMARY KEY(source, minute, dimensions)) WITHOUT ROWID;
        """

    /// Schema 11: the tables (created on first use before), `reads` added to a `source_state` of schema 10, and the
    /// rows of each configured source moved from its name to its ledger's key by the rules of `SourceMigration`.
    static func migrate(_ db: SQLiteDatabase) throws {
        let hadState = try db.hasTable("source_state")
        try db.execute(schema)
        if hadState, try !db.query("PRAGMA table_info(source_state)").contains(where: { $0[1].string == "reads" }) {
            try db.execute("ALTER TABLE source_state ADD COLUMN reads TEXT")
        }
        for (name, ledger) in SourceMigration.ledgers(try SourceConfigTable.load(from: db)) {
            let key = ledger.key
            if let r = try db.query(
                "SELECT watermark, last_success, last_attempt, last_error FROM source_state WHERE source = ?", [.text(name)]
            ).first {
                let before = try db.query("SELECT watermark, reads FROM source_state WHERE source = ?", [.text(key)]).first
                let reads = SourceMigration.reads(
                    SourceLedgerRecord.reads(before?[1].string), ledger: ledger, watermark: r[0].int)
                let watermark = SourceMigration.earlier(before?[0].int, r[0].int)
                try db.run(
                    "INSERT INTO source_state(source, watermark, last_success, last_attempt, last_error, reads) "
                        + "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(source) DO UPDATE SET watermark = ?2, "
                        + "last_success = max(coalesce(last_success, ?3), coalesce(?3, last_success)), "
                        + "last_attempt = max(coalesce(last_attempt, ?4), coalesce(?4, last_attempt)), "
                        + "last_error = coalesce(last_error, ?5), reads = ?6",
                    [
                        .text(key), watermark.map { .integer($0) } ?? .null, r[1], r[2], r[3],
                        .text(SourceLedgerRecord.readsText(reads)),
                    ])
                try db.run("DELETE FROM source_state WHERE source = ?", [.text(name)])
            }
            try db.run(
                "INSERT INTO source_ledger(source, minute, dimensions, count) "
                    + "SELECT ?1, minute, dimensions, count FROM source_ledger WHERE source = ?2 "
                    + "ON CONFLICT(source, minute, dimensions) DO UPDATE SET count = count + excluded.count",
                [.text(key), .text(name)])
            try db.run("DELETE FROM source_ledger WHERE source = ?", [.text(name)])
        }
    }
}
