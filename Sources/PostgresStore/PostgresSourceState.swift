import JSON
import Telemetry
import TelemetrySources
import Timekeeping

/// Telemetry sources on the PostgreSQL team store (schema 7): `source_state` (watermark, last success and failure,
/// and the events read up to which minute, per ledger) and `source_ledger` (what each pull contributed per minute
/// and key), the SQLite store's tables. Both are keyed by the ledger (`SourceLedger.key`, in the `source` column:
/// the events a source reads, not its name; step 13 moved the rows of schema 12, `moveSourcesToLedgers`), and
/// removing a source leaves them: what it landed stays counted, and so does the record of it.
///
/// A pull lands in one READ COMMITTED transaction without the chain-head lock, as a telemetry batch does: the
/// source's state row is locked first (created if missing), so two processes pulling the same source queue and the
/// second one sees the first one's ledger; then the ledger's difference, the batch of changes through
/// `PostgresTelemetry.commit` (joining this transaction), the ledger and the watermark commit together. Like
/// telemetry, these two tables are not sealed; the configuration (`source_config`) is, and is written by the
/// settings write path under the chain-head lock (`PostgresSourceConfig`).
extension PostgresConfigStore: SourceStateStore {
    public func sourceState(_ ledger: String) throws -> SourceState? {
        try consistentRead {
            guard
                let r = try connection.query(
                    "SELECT watermark, last_success, last_attempt, last_error, "
                        + "(SELECT max(minute) FROM source_ledger WHERE source = $1) "
                        + "FROM source_state WHERE source = $1", [ledger]
                ).first
            else { return nil }
            func instant(_ i: Int) -> Instant? { r[i].flatMap { Int64($0) }.map(Instant.init(microseconds:)) }
            return SourceState(
                watermark: instant(0), lastSuccess: instant(1), lastAttempt: instant(2), lastError: r[3],
                newestData: SourceState.newestData(minute: r[4].flatMap { Int64($0) }))
        }
    }

    public func sourceLedgers() throws -> [SourceLedgerRecord] { try PostgresSourceConfig(store: self).ledgers() }

    /// The configured sources (`source_config`) that are silent at `now`, by `SourceState.silences`.
    public func sourceSilences(at now: Instant) throws -> [String] {
        try consistentRead {
            try SourceState.silences(try PostgresSourceConfig(store: self).load(), now: now) { try sourceState($0) }
        }
    }

    @discardableResult
    public func commitPull(_ pull: SourcePull, at committedAt: Instant) throws -> [AggregateKey: Int64] {
        if isReadOnly { throw PostgresStoreError.readOnly("source pull on a read-only store") }
        return try transaction(lockingHead: false) { () throws -> [AggregateKey: Int64] in
            let ledger = pull.ledger.key
            try lockSourceRow(ledger)
            var recorded: [AggregateKey: Int64] = [:]
            for row in try connection.query(
                "SELECT minute, dimensions, count FROM source_ledger WHERE source = $1 AND minute >= $2 AND minute < $3",
                [ledger, String(pull.plan.fromMinute), String(pull.plan.throughMinute)])
            {
                guard let minute = row[0].flatMap({ Int64($0) }), let dimensions = row[1],
                    let count = row[2].flatMap({ Int64($0) }), let key = AggregateKey(minute: minute, dimensions: dimensions)
                else { continue }
                recorded[key] = count
            }
            let changes = PullLedger.changes(pulled: pull.counts, recorded: recorded)
            if !changes.isEmpty {
                let keys = changes.keys.sorted()
                try connection.query(
                    "INSERT INTO source_ledger (source, minute, dimensions, count) "
                        + "SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bigint[]) "
                        + "ON CONFLICT (source, minute, dimensions) DO UPDATE SET count = excluded.count",
                    [
                        ledger, PGArray.ints(keys.map(\.minute)), PGArray.text(keys.map(\.dimensions)),
                        PGArray.ints(keys.map { pull.counts[$0] ?? 0 }),
                    ])
                try connection.query("DELETE FROM source_ledger WHERE source = $1 AND count = 0", [ledger])
                // The same commit as `rollout ingest`, inside this transaction.
                try PostgresTelemetry(store: self).commit(
                    PullLedger.batch(changes), source: "source:" + pull.source, at: committedAt)
            }
            let landed = SourceLedgerRecord.reads(
                try connection.query("SELECT reads FROM source_state WHERE source = $1", [ledger]).first?[0] ?? nil)
            let reads = SourceLedgerRecord.reads(landed, adding: pull.ledger, through: pull.plan.throughMinute)
            try connection.query(
                "UPDATE source_state SET watermark = $2, last_success = $3, last_attempt = $3, last_error = NULL, reads = $4 "
                    + "WHERE source = $1",
                [
                    ledger, String(pull.plan.nextWatermark.microseconds), String(committedAt.microseconds),
                    SourceLedgerRecord.readsText(reads),
                ])
            return changes
        }
    }

    public func recordFailure(ledger: String, message: String, at: Instant) throws {
        if isReadOnly { throw PostgresStoreError.readOnly("source failure on a read-only store") }
        try transaction(lockingHead: false) {
            try lockSourceRow(ledger)
            try connection.query(
                "UPDATE source_state SET last_attempt = $2, last_error = $3 WHERE source = $1",
                [ledger, String(at.microseconds), String(message.prefix(500))])
        }
    }

    /// The ledger's state row, created when missing and locked to the end of the transaction.
    private func lockSourceRow(_ ledger: String) throws {
        try connection.query("INSERT INTO source_state (source) VALUES ($1) ON CONFLICT (source) DO NOTHING", [ledger])
        try connection.query("SELECT 1 FROM source_state WHERE source = $1 FOR UPDATE", [ledger])
    }

    /// Step 13: the rows of each configured source moved from its name to its ledger's key, by the rules of
    /// `SourceMigration` (two sources over the same events merged: counts added, the earlier watermark kept).
    static func moveSourcesToLedgers(_ c: PGConnection) throws {
        let configurations = try c.query("SELECT definition FROM source_config ORDER BY name COLLATE \"C\"").map { row in
            try SourceConfiguration(json: try JSONParser().parse(row[0] ?? ""))
        }
        for (name, ledger) in SourceMigration.ledgers(configurations) {
            let key = ledger.key
            if let r = try c.query(
                "SELECT watermark, last_success, last_attempt, last_error FROM source_state WHERE source = $1 FOR UPDATE", [name]
            ).first {
                let before = try c.query("SELECT watermark, reads FROM source_state WHERE source = $1 FOR UPDATE", [key]).first
                let moved = r[0].flatMap { Int64($0) }
                let watermark = SourceMigration.earlier(before?[0].flatMap { Int64($0) }, moved)
                let reads = SourceMigration.reads(
                    SourceLedgerRecord.reads(before?[1] ?? nil), ledger: ledger, watermark: moved)
                try c.query(
                    "INSERT INTO source_state (source, watermark, last_success, last_attempt, last_error, reads) "
                        + "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (source) DO UPDATE SET watermark = $2, "
                        + "last_success = GREATEST(source_state.last_success, excluded.last_success), "
                        + "last_attempt = GREATEST(source_state.last_attempt, excluded.last_attempt), "
                        + "last_error = COALESCE(source_state.last_error, excluded.last_error), reads = $6",
                    [key, watermark.map { String($0) }, r[1], r[2], r[3], SourceLedgerRecord.readsText(reads)])
                try c.query("DELETE FROM source_state WHERE source = $1", [name])
            }
            try c.query(
                "INSERT INTO source_ledger (source, minute, dimensions, count) "
                    + "SELECT $1, minute, dimensions, count FROM source_ledger WHERE source = $2 "
                    + "ON CONFLICT (source, minute, dimensions) DO UPDATE SET count = source_ledger.count + excluded.count",
                [key, name])
            try c.query("DELETE FROM source_ledger WHERE source = $1", [name])
        }
    }
}

/// The configured sources on the team store (`source_config`, sealed: one row per source, its configuration as
/// JSON), read and written inside the settings write path's transaction on `store`'s connection.
public struct PostgresSourceConfig {
    let store: PostgresConfigStore

    public init(store: PostgresConfigStore) { self.store = store }

    public func load() throws -> [SourceConfiguration] {
        try store.consistentRead {
            try store.connection.query("SELECT definition FROM source_config ORDER BY name COLLATE \"C\"").map { row in
                try SourceConfiguration(json: try JSONParser().parse(row[0] ?? ""))
            }
        }
    }

    public func save(_ configuration: SourceConfiguration) throws {
        _ = try store.atomically {
            try store.connection.query(
                "INSERT INTO source_config (name, definition) VALUES ($1, $2) "
                    + "ON CONFLICT (name) DO UPDATE SET definition = excluded.definition",
                [configuration.name, configuration.json.compactText])
        }
    }

    /// Removes the source's configuration; its ledger and state stay (`SourceLedger`).
    public func remove(_ name: String) throws {
        try store.atomically {
            try store.connection.query("DELETE FROM source_config WHERE name = $1", [name])
        }
    }

    /// Every ledger with what it has read (for `SourceConfiguration.overlap`).
    public func ledgers() throws -> [SourceLedgerRecord] {
        try store.consistentRead {
            try store.connection.query("SELECT source, watermark, reads FROM source_state ORDER BY source COLLATE \"C\"").map { r in
                SourceLedgerRecord(
                    key: r[0] ?? "", watermark: r[1].flatMap { Int64($0) }.map(Instant.init(microseconds:)),
                    reads: SourceLedgerRecord.reads(r[2] ?? nil))
            }
        }
    }
}
