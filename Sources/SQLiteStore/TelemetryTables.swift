import Glibc
import Platform
import Rollout
import Telemetry
import Timekeeping

/// Telemetry in the store: time-bucketed counters, per-installation state, presence marks, the catalog of
/// rejection reasons, and a log of batches.
///
/// A batch lands in one `BEGIN IMMEDIATE` transaction: whole or not at all, also when the process is killed.
/// Counters are upserted once per (level, bucket, key) the batch touches and installations once per distinct
/// installation, so the database grows with the time span and the installations, never with the events.
///
/// `snapshot` is the console's dashboard query. The instance keeps a `RolloutFold` folded up to the last
/// settled minute, so a refresh reads only the newest minutes, the last day's presence rows and a few sums; a
/// batch that brings events older than the folded point (late data) makes the next query fold again from the
/// rollout start. One instance belongs to one thread.
///
/// The store keeps one fold too (`FoldTable`), so that a new instance (every `rollout status`) starts from it
/// instead of folding the whole rollout: the first reader that folds from the start stores its fold, and every
/// commit advances it in the batch's transaction over the minutes settled at the newest event (or folds again
/// from the start on late data). A reader uses it only for the same rollout start and settings, when its clock
/// is not behind the folded minutes and the row is intact; otherwise it folds from the start as before.
public final class TelemetryTables: TelemetryCounters {
    public let database: SQLiteDatabase
    public var retention: TelemetryRetention
    /// This reader's fold, advanced up to its own `now`.
    private var fold: RolloutFold?
    /// How many times this instance folded from the rollout start (a test hook: a reader that continues from the
    /// stored fold does not).
    package private(set) var foldsFromStart = 0
    /// The lock of the store that owns `database` (`RolloutStore.lock`), held by every public method; nil when
    /// the caller holds it (or owns the connection alone).
    private let lock: RecursiveLock?

    public init(
        database: SQLiteDatabase, retention: TelemetryRetention = TelemetryRetention(), lock: RecursiveLock? = nil
    ) throws(SQLiteError) {
        self.database = database
        self.retention = retention
        self.lock = lock
        try Self.createSchema(in: database)
    }

    public static func createSchema(in db: SQLiteDatabase) throws(SQLiteError) {
        try db.createTables(
            [
                "telemetry_counters", "telemetry_presence", "telemetry_installation_blocks", "telemetry_reasons",
                "telemetry_batches", "telemetry_meta",
            ],
            """
            CREATE TABLE IF NOT EXISTS telemetry_counters(
                level INTEGER NOT NULL, bucket INTEGER NOT NULL, key INTEGER NOT NULL, count INTEGER NOT NULL,
                PRIMARY KEY(level, bucket, key)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS telemetry_presence(
                hour INTEGER NOT NULL, key INTEGER NOT NULL, count INTEGER NOT NULL,
                PRIMARY KEY(hour, key)) WITHOUT ROWID;
            \(InstallationBlocks.schema)
            CREATE TABLE IF NOT EXISTS telemetry_reasons(id INTEGER PRIMARY KEY, reason TEXT NOT NULL UNIQUE);
            CREATE TABLE IF NOT EXISTS telemetry_batches(
                id INTEGER PRIMARY KEY, source TEXT NOT NULL, committed_at INTEGER NOT NULL, events INTEGER NOT NULL,
                installations INTEGER NOT NULL, earliest INTEGER, latest INTEGER);
            CREATE TABLE IF NOT EXISTS telemetry_meta(key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
            """)
        try FoldTable.createSchema(in: db)
    }

    // MARK: Writing

    /// Lands `batch` as one transaction and returns what it added. An empty batch writes nothing.
    @discardableResult
    public func commit(_ batch: TelemetryBatch, source: String, at committedAt: Instant) throws -> BatchReceipt? {
        lock?.lock()
        defer { lock?.unlock() }
        guard !batch.isEmpty else { return nil }
        // A large batch touches many installation pages; SQLite's default 2 MB cache would spill them to the
        // WAL and read them back. The cache grows with the installations of the batch, not its events, up to
        // 32 MB: the batch walks the key in order, so a page it left is not visited again, and the memory is
        // better spent on the batch's own table of installations (ingest stays within 300 MB).
        let previousCache = try database.query("PRAGMA cache_size").first?.first?.int ?? -2000
        let cachePages = min(8_192, max(2_000, batch.installationBound / 8))
        try database.execute("PRAGMA cache_size = \(cachePages)")
        defer { try? database.execute("PRAGMA cache_size = \(previousCache)") }
        return try database.transaction(immediate: true) { () throws -> BatchReceipt in
            let codes = try batch.reasons.map { reason throws -> UInt16 in try reasonCode(reason) }
            let storedNewest = try meta("newest_event")
            var settlement = BatchSettlement(
                batch: batch, reasonCodes: codes, retention: retention, storedNewest: storedNewest)
            // The batch comes in id order (SQLite's BINARY order: bytes, then length), the order of the blocks.
            let blocks = try InstallationBlockWriter(database)
            try batch.forEachInstallationID { id, delta in
                let r = settlement.settle(delta, previous: try blocks.previous(id))
                try blocks.put(id, r)
            }
            try blocks.finish()
            let addCounter = try database.prepare(
                "INSERT INTO telemetry_counters(level, bucket, key, count) VALUES (?,?,?,?) "
                    + "ON CONFLICT(level, bucket, key) DO UPDATE SET count = count + excluded.count")
            for row in settlement.counterRows() {
                addCounter.reset()
                try addCounter.bind(.integer(row.level.rawValue), at: 1)
                try addCounter.bind(.integer(row.bucket), at: 2)
                try addCounter.bind(.integer(Int64(row.key.packed)), at: 3)
                try addCounter.bind(.integer(row.count), at: 4)
                while try addCounter.step() {}
            }
            let addPresence = try database.prepare(
                "INSERT INTO telemetry_presence(hour, key, count) VALUES (?,?,?) "
                    + "ON CONFLICT(hour, key) DO UPDATE SET count = count + excluded.count")
            for row in settlement.presenceRows() {
                addPresence.reset()
                try addPresence.bind(.integer(row.hour), at: 1)
                try addPresence.bind(.integer(row.key.packed), at: 2)
                try addPresence.bind(.integer(row.delta), at: 3)
                while try addPresence.step() {}
            }
            let previousBatch = try database.query("SELECT max(id) FROM telemetry_batches")[0][0].int ?? 0
            try database.run(
                "INSERT INTO telemetry_batches(source, committed_at, events, installations, earliest, latest) VALUES (?,?,?,?,?,?)",
                [
                    .text(source), .integer(committedAt.microseconds), .integer(Int64(batch.eventCount)),
                    .integer(Int64(batch.installationCount)), batch.earliest.map { .integer($0.microseconds) } ?? .null,
                    batch.latest.map { .integer($0.microseconds) } ?? .null,
                ])
            let id = database.lastInsertRowID
            let newest = settlement.newest
            if newest != .min {
                // Before retention drops old minute rows, so that the fold sees every minute a reader saw.
                try advanceStoredFold(batch: batch, id: id, previousBatch: previousBatch, newest: newest)
                try setMeta("newest_event", newest)
                for level in [BucketLevel.minute, .hour] {
                    if let oldest = retention.oldestKept(level, newest: newest) {
                        try database.run(
                            "DELETE FROM telemetry_counters WHERE level = ? AND bucket < ?",
                            [.integer(level.rawValue), .integer(oldest)])
                    }
                }
                let oldestHour = BucketLevel.hour.bucket(newest - TelemetryRetention.presenceWindow.microseconds)
                try database.run("DELETE FROM telemetry_presence WHERE hour < ? OR count = 0", [.integer(oldestHour)])
            }
            return BatchReceipt(
                id: id, source: source, committedAt: committedAt, events: batch.eventCount,
                installations: batch.installationCount, earliest: batch.earliest, latest: batch.latest)
        }
    }

    /// Advances the materialised fold, if there is one, over the minutes settled at the newest event (inside the
    /// batch's transaction): late data in a folded minute, or a fold that missed a batch, folds from the start.
    private func advanceStoredFold(batch: TelemetryBatch, id: Int64, previousBatch: Int64, newest: Int64) throws {
        guard var fold = try FoldTable.load(from: database) else { return }
        if fold.lastBatch != previousBatch || batch.earliest.map(fold.isLate(earliest:)) ?? false {
            fold = try coldFold(fold.configuration, newest: newest, lastBatch: id)
        }
        fold.lastBatch = id
        let horizon = BucketLevel.minute.bucket(newest)
        _ = fold.advance(try looks(.minute, from: fold.cursorMinute, to: horizon + 1), now: Instant(microseconds: newest))
        try FoldTable.save(fold, in: database)
    }

    /// An installation of the table before blocks (schema 6), from its columns starting at `i`.
    static func record(_ s: SQLiteStatement, from i: Int32) -> InstallationRecord {
        InstallationRecord(
            firstSeen: s.int(i), lastSeen: s.int(i + 1), cohort: Cohort(code: UInt8(clamping: s.int(i + 2))) ?? .none,
            provider: AttestationProvider(rawValue: UInt8(clamping: s.int(i + 3))) ?? .unspecified,
            osMajor: UInt8(clamping: s.int(i + 4)), sessions: s.int(i + 5),
            enteredCohorts: UInt8(clamping: s.int(i + 6)), crashedCohorts: UInt8(clamping: s.int(i + 7)),
            fetchedAt: s.isNull(i + 8) ? nil : s.int(i + 8), templateVersion: s.isNull(i + 9) ? nil : s.int(i + 9))
    }

    /// The catalog id of a rejection reason, added when new (beyond the catalog's size: the last id, "other").
    private func reasonCode(_ reason: String) throws(SQLiteError) -> UInt16 {
        if let id = try database.query("SELECT id FROM telemetry_reasons WHERE reason = ?", [.text(reason)]).first?[0]
            .int
        {
            return UInt16(id)
        }
        let count = try database.query("SELECT count(*) FROM telemetry_reasons")[0][0].int ?? 0
        if count >= Int64(FailureDetail.maximumReasons) { return FailureDetail.maximumReasons }
        try database.run("INSERT INTO telemetry_reasons(id, reason) VALUES (?, ?)", [.integer(count), .text(reason)])
        return UInt16(count)
    }

    private func meta(_ key: String) throws(SQLiteError) -> Int64? {
        try database.query("SELECT value FROM telemetry_meta WHERE key = ?", [.text(key)]).first?[0].int
    }

    private func setMeta(_ key: String, _ value: Int64) throws(SQLiteError) {
        try database.run(
            "INSERT OR REPLACE INTO telemetry_meta(key, value) VALUES (?, ?)", [.text(key), .integer(value)])
    }

    // MARK: Reading

    /// The rejection reason of a failure counter's detail (nil for Apple's classes).
    public func reason(of detail: FailureDetail) throws(SQLiteError) -> String? {
        lock?.lock()
        defer { lock?.unlock() }
        guard let id = detail.reasonID else { return nil }
        if id == FailureDetail.maximumReasons { return "other" }
        return try database.query("SELECT reason FROM telemetry_reasons WHERE id = ?", [.integer(Int64(id))]).first?[0]
            .string
    }

    /// A failure detail in words: the class, or `rejected:REASON`.
    public func describe(_ detail: FailureDetail) throws(SQLiteError) -> String {
        lock?.lock()
        defer { lock?.unlock() }
        guard let reason = try reason(of: detail) else { return detail.errorClass.description }
        return reason.isEmpty ? "rejected" : "rejected:\(reason)"
    }

    /// The stored state of one installation.
    public func installation(_ id: String) throws -> InstallationRecord? {
        lock?.lock()
        defer { lock?.unlock() }
        return try InstallationBlocks.record(id, in: database)
    }

    public func installationCount() throws -> Int {
        lock?.lock()
        defer { lock?.unlock() }
        return try Self.installationCount(in: database)
    }

    /// Every stored installation in id order (for copies, exports and tests).
    public func forEachInstallation(_ body: (String, InstallationRecord) throws -> Void) throws {
        lock?.lock()
        defer { lock?.unlock() }
        try Self.forEachInstallation(in: database, body)
    }

    /// `forEachInstallation` on a connection whose lock the caller holds (a store copy's source).
    public static func forEachInstallation(
        in database: SQLiteDatabase, _ body: (String, InstallationRecord) throws -> Void
    ) throws {
        try InstallationBlocks.forEach(in: database) { id, r in try body(String(decoding: id, as: UTF8.self), r) }
    }

    /// `installationCount` on a connection whose lock the caller holds.
    public static func installationCount(in database: SQLiteDatabase) throws -> Int {
        try InstallationBlocks.count(in: database)
    }

    /// The newest event time in the store.
    public func newestEvent() throws(SQLiteError) -> Instant? {
        lock?.lock()
        defer { lock?.unlock() }
        return try meta("newest_event").map(Instant.init(microseconds:))
    }

    /// Every landed batch, oldest first.
    public func batches() throws(SQLiteError) -> [BatchReceipt] {
        lock?.lock()
        defer { lock?.unlock() }
        return try database.query(
            "SELECT id, source, committed_at, events, installations, earliest, latest FROM telemetry_batches ORDER BY id"
        )
        .map { r in
            BatchReceipt(
                id: r[0].int!, source: r[1].string ?? "", committedAt: Instant(microseconds: r[2].int!),
                events: Int(r[3].int!), installations: Int(r[4].int!),
                earliest: r[5].int.map(Instant.init(microseconds:)),
                latest: r[6].int.map(Instant.init(microseconds:)))
        }
    }

    /// Every counter ever landed, from the day rows (kept for ever).
    public func allTimeTotals() throws(SQLiteError) -> CounterTotals {
        lock?.lock()
        defer { lock?.unlock() }
        var totals = CounterTotals()
        for r in try database.query("SELECT key, sum(count) FROM telemetry_counters WHERE level = 2 GROUP BY key") {
            if let key = CounterKey(packed: UInt32(truncatingIfNeeded: r[0].int!)) { totals.add(key, r[1].int!) }
        }
        return totals
    }

    /// The dashboard query: everything the console's panels need, as of `now`, for the rollout `configuration`
    /// describes. Read in one read transaction, so a batch landing meanwhile is seen whole or not at all; when
    /// the caller already holds a transaction (the write path's compare-and-swap), it reads inside that one.
    public func snapshot(_ configuration: WatchConfiguration, now: Instant) throws -> TelemetrySnapshot {
        lock?.lock()
        defer { lock?.unlock() }
        // Inside a caller's transaction (the write path's compare-and-swap) a fold computed here is not stored:
        // that would turn the caller's read into a write. The next reader on its own stores it.
        let ownTransaction = !database.isInTransaction
        let (snapshot, computed) = try reading { () throws -> (TelemetrySnapshot, RolloutFold?) in
            let newest = try meta("newest_event")
            if fold?.configuration != configuration { fold = nil }
            if let f = fold { fold = try continuing(f) }
            // A new reader, or one that late data sent back to the start, continues from the store's fold (which
            // the late batch's commit folded again) when it fits this rollout and this instant.
            if fold == nil, let stored = try FoldTable.load(from: database), stored.isUsable(for: configuration, at: now) {
                fold = try continuing(stored)
            }

            // Minutes after the cursor: fold the settled ones, show the rest.
            let nowMinute = BucketLevel.minute.bucket(now.microseconds)
            var computed: RolloutFold?
            if fold == nil {
                let lastBatch = try database.query("SELECT max(id) FROM telemetry_batches")[0][0].int ?? 0
                var f = try coldFold(configuration, newest: newest, lastBatch: lastBatch)
                foldsFromStart += 1
                // What the store keeps is folded to the newest event, as each commit folds it, not to this
                // reader's clock.
                if let newest {
                    let horizon = min(now.microseconds, newest)
                    let minute = BucketLevel.minute.bucket(horizon)
                    _ = f.advance(try looks(.minute, from: f.cursorMinute, to: minute + 1), now: Instant(microseconds: horizon))
                }
                if f.watch.settledThrough != nil { computed = f }
                fold = f
            }
            let pending = fold!.advance(try looks(.minute, from: fold!.cursorMinute, to: nowMinute + 1), now: now)

            let nowHour = BucketLevel.hour.bucket(now.microseconds)
            var presence: [PresenceRow] = []
            let p = try database.prepare(
                "SELECT hour, key, count FROM telemetry_presence WHERE hour >= ? AND hour <= ?")
            try p.bind(.integer(nowHour - 23), at: 1)
            try p.bind(.integer(nowHour), at: 2)
            while try p.step() {
                if let key = PresenceKey(packed: p.int(1)) {
                    presence.append(PresenceRow(hour: p.int(0), key: key, delta: p.int(2)))
                }
            }
            p.reset()
            let sessionKeys = Cohort.allCases.map { Int64(CounterKey(.session, $0).packed) }
            let s = try database.prepare(
                "SELECT sum(count) FROM telemetry_counters WHERE level = 1 AND bucket >= ? AND bucket <= ? AND key IN (?, ?, ?)"
            )
            try s.bind(.integer(nowHour - 23), at: 1)
            try s.bind(.integer(nowHour), at: 2)
            for (i, k) in sessionKeys.enumerated() { try s.bind(.integer(k), at: Int32(3 + i)) }
            let sessionsLastDay = try s.step() ? s.int(0) : 0
            s.reset()
            let lastBatchAt = try database.query("SELECT committed_at FROM telemetry_batches ORDER BY id DESC LIMIT 1")
                .first?[0].int
            let snapshot = fold!.watch.snapshot(
                now: now, pending: pending, presence: presence, sessionsLastDay: sessionsLastDay,
                newestEvent: newest.map(Instant.init(microseconds:)),
                lastBatchAt: lastBatchAt.map(Instant.init(microseconds:)))
            return (snapshot, computed)
        }
        if let computed, ownTransaction { storeFold(computed) }
        return snapshot
    }

    /// `fold` with the batches landed since it was last seen, or nil when one of them is late for it.
    private func continuing(_ fold: RolloutFold) throws(SQLiteError) -> RolloutFold? {
        let fresh = try database.query(
            "SELECT min(earliest), max(id) FROM telemetry_batches WHERE id > ?", [.integer(fold.lastBatch)])[0]
        guard let maxID = fresh[1].int else { return fold }
        if let earliest = fresh[0].int, fold.isLate(earliest: Instant(microseconds: earliest)) { return nil }
        var f = fold
        f.lastBatch = maxID
        return f
    }

    /// Keeps a fold this reader computed, so that the next reader continues from it. Best effort: on a
    /// read-only connection, or when a batch landed meanwhile (its commit did not advance this fold), nothing is
    /// kept and a later reader folds again.
    private func storeFold(_ computed: RolloutFold) {
        guard !database.isReadOnly else { return }
        try? database.transaction(immediate: true) { () throws -> Void in
            let lastBatch = try database.query("SELECT max(id) FROM telemetry_batches")[0][0].int ?? 0
            guard lastBatch == computed.lastBatch else { return }
            try FoldTable.save(computed, in: database)
        }
    }

    /// Drops the stored fold (the next reader folds from the rollout start) and this reader's own.
    public func discardFold() throws {
        fold = nil
        try database.transaction(immediate: true) { () throws -> Void in try FoldTable.clear(in: database) }
    }

    /// Runs `body` in a read transaction of its own, or in the caller's when one is open.
    private func reading<T>(_ body: () throws -> T) throws -> T {
        if database.isInTransaction { return try body() }
        try database.execute("BEGIN DEFERRED")
        do {
            let value = try body()
            try database.execute("COMMIT")
            return value
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
    }

    /// The fold from the rollout start (`RolloutFold.fromStart`) over this store's counter rows.
    private func coldFold(_ configuration: WatchConfiguration, newest: Int64?, lastBatch: Int64) throws -> RolloutFold {
        try RolloutFold.fromStart(configuration, newest: newest, retention: retention, lastBatch: lastBatch) {
            (level, from, to) throws(SQLiteError) in try looks(level, from: from, to: to)
        }
    }

    /// Counter rows of `level` with `from ≤ bucket < to`, read in one read transaction (or the caller's).
    public func counterLooks(_ level: BucketLevel, from: Int64, to: Int64) throws -> [CounterLook] {
        lock?.lock()
        defer { lock?.unlock() }
        return try reading { () throws -> [CounterLook] in try looks(level, from: from, to: to) }
    }

    /// Counter rows of `level` with `from ≤ bucket < to`, one look per bucket that has rows, in time order.
    private func looks(_ level: BucketLevel, from: Int64, to: Int64) throws(SQLiteError) -> [CounterLook] {
        guard from < to else { return [] }
        let s = try database.prepare(
            "SELECT bucket, key, count FROM telemetry_counters WHERE level = ? AND bucket >= ? AND bucket < ? ORDER BY bucket"
        )
        try s.bind(.integer(level.rawValue), at: 1)
        try s.bind(.integer(from), at: 2)
        try s.bind(.integer(to), at: 3)
        defer { s.reset() }
        var out: [CounterLook] = []
        while try s.step() {
            let bucket = s.int(0)
            guard let key = CounterKey(packed: UInt32(truncatingIfNeeded: s.int(1))) else { continue }
            if out.last?.bucket != bucket { out.append(CounterLook(level: level, bucket: bucket, counts: [:])) }
            out[out.count - 1].counts[key, default: 0] += s.int(2)
        }
        return out
    }
}
