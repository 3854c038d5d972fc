import Crypto
import Glibc
import Rollout
import Telemetry
import Timekeeping

/// Telemetry on the PostgreSQL team store: the SQLite store's tables and arithmetic (`BatchSettlement` decides
/// every row, `RolloutWatch` folds them), aggregated in the database so that many ingesting processes and the
/// simulator write at once. The methods have the signatures of the SQLite store's `TelemetryTables`.
///
/// A batch lands in one READ COMMITTED transaction, without the chain-head lock (ingest does not queue behind
/// publishes):
/// - the batch first takes a transaction advisory lock on each of its installations' partitions (an id's FNV-1a
///   modulo 64), in ascending order (one order for every batch: no deadlock), so two batches sharing a
///   partition run one after the other; the statements that follow see every batch that held those partitions
///   before. Row locks (`FOR UPDATE`) did this before, but locking a row writes it;
/// - installations are stored as on a store file, many to a row (`telemetry_installation_blocks`, schema 12: the
///   core's `InstallationBlock` form, blocks of one partition keyed by the upper end of their id range,
///   `InstallationRanges`). The batch merges its installations into the stored blocks of its ids in memory with
///   the core's code, and writes them back with UPDATE (blocks kept under their key) and INSERT (new blocks: a
///   partition's first, the parts of a split); blocks are never deleted. Every block read or written lies in a
///   partition the batch holds, so the advisory locks order writers; a block key created meanwhile by a writer
///   outside these locks makes the transaction run again (a fresh settlement, so nothing counts twice);
/// - counters and presence rows are additive upserts (`ON CONFLICT ... DO UPDATE SET count = count +
///   excluded.count`), sorted by key, one statement each;
/// - the batch's id is drawn last from `telemetry_meta.batch_sequence` (a row lock held to commit), so ids are in
///   commit order and a reader that has seen batch N has seen every batch before it;
/// - `NOTIFY rollout_telemetry, '<batch id>'` wakes consoles at commit.
///
/// A writer whose last read found every block it asked for unchanged in its cache (it alone wrote them) lands the
/// next batch in one round trip (`landInOneRoundTrip`): it merges into the blocks it expects, while its statements
/// go: the locks, a guard that fails the transaction unless the store holds exactly what was expected, the blocks a
/// chunk at a time as they are merged, the rest and COMMIT. Otherwise, and when the guard fails, the batch takes two
/// (`landAfterReading`): the locks with the reads, then the writes with COMMIT, which go as they are merged too
/// (`mergeAndSend`, what both ways share). Either way a batch costs the same
/// number of round trips whatever its size (`PGConnection.pipeline`).
public final class PostgresTelemetry: TelemetryCounters, @unchecked Sendable {
    /// The channel a landed batch notifies, with the batch id as payload.
    public static let channel = "rollout_telemetry"

    private let store: PostgresConfigStore
    public var retention: TelemetryRetention
    /// The rollout's fold as far as this reader has come (the core's `RolloutFold`, kept in memory here).
    private var fold: RolloutFold?
    private var lastBatchSeen: Int64 = 0
    /// The installation blocks this writer read or wrote last, by revision (`BlockCache`).
    private let blockCache = BlockCache()
    /// What this writer's next batch expects the store to hold (`expectedInputs`): the reasons' ids it read, the
    /// newest event as it left it, and whether its last read found every block it asked for in `blockCache`,
    /// unchanged (no block's bytes came back). Only then does a batch land in one round trip; an expectation never
    /// decides anything, the guard does (`guardQuery`).
    private var knownReasons: [String: UInt16] = [:]
    private var expectedNewest: Int64?
    private var lastReadWasCached = false
    /// Batches landed in one round trip (`landInOneRoundTrip`), and those whose guard refused them (they landed
    /// again, reading first).
    public private(set) var oneRoundTrip = (landed: 0, refused: 0)

    public init(store: PostgresConfigStore, retention: TelemetryRetention = TelemetryRetention()) {
        self.store = store
        self.retention = retention
    }

    private var c: PGConnection { store.connection }

    // MARK: Writing

    /// Lands `batch` as one transaction and returns what it added. An empty batch writes nothing.
    @discardableResult
    public func commit(_ batch: TelemetryBatch, source: String, at committedAt: Instant) throws -> BatchReceipt? {
        guard !batch.isEmpty else { return nil }
        if store.isReadOnly { throw PostgresStoreError.readOnly("telemetry batch on a read-only store") }
        // The batch's installations by partition, in id order within each (the order of the blocks' keys).
        let (groups, deltas) = try InstallationRanges.grouped(batch, groups: Int(Self.partitions))
        let landing = Landing(
            batch: batch, groups: groups, deltas: deltas, partitions: groups.indices.filter { !groups[$0].isEmpty }.map { Int64($0) },
            source: source, committedAt: committedAt)
        return try store.transaction(lockingHead: false) { () throws -> BatchReceipt in
            do {
                if store.commitsInBody, lastReadWasCached, let expected = expectedInputs(batch, groups) {
                    return try landInOneRoundTrip(landing, expecting: expected)
                }
                return try landAfterReading(landing)
            } catch let e as PostgresError where e.sqlState == "23505" {
                // Another writer created one of the new installations after the read: settle again from its row.
                throw PostgresError(sqlState: "40001", message: "an installation of the batch was created concurrently")
            } catch let e as PostgresError where e.sqlState == "23502" {
                throw StoreError.corrupt("the telemetry batch sequence is missing (run 'rollout store migrate')")
            }
        }
    }

    /// A batch on its way: its installations by partition (`InstallationRanges.grouped`), their deltas, the
    /// partitions it holds, where it came from and when it is committed.
    private struct Landing {
        let batch: TelemetryBatch
        let groups: [[(id: [UInt8], index: Int)]]
        let deltas: [InstallationDelta]
        let partitions: [Int64]
        let source: String
        let committedAt: Instant
    }

    /// Prepared statements are planned once, not per batch (PostgreSQL's default plans the first five runs of each
    /// anew, and a writer's connection may never get past them): for this transaction only.
    static let genericPlans = PGStatement("SET LOCAL plan_cache_mode = force_generic_plan", [], prepare: true)

    /// The batch's partitions' advisory locks, taken in ascending order.
    static func partitionLocks(_ partitions: [Int64]) -> PGStatement {
        PGStatement(
            "SELECT pg_advisory_xact_lock(\(partitionLockClass), p) FROM (SELECT unnest($1::int[]) AS p ORDER BY 1) s",
            [PGArray.ints(partitions)], prepare: true)
    }

    /// `merge` of the landing's installations into the stored blocks of `inputs` for the partitions of `range`,
    /// settled by `settlement`.
    private func merge(
        _ l: Landing, _ inputs: MergeInputs, settlement: inout BatchSettlement, partitions range: Range<Int>
    ) throws -> (updated: BlockColumns, inserted: BlockColumns) {
        try Self.blockColumns(groups: l.groups, stored: inputs.blocks, partitions: range) { stored, ids in
            try InstallationRanges.merge(stored: stored, ids: ids, deltas: l.deltas, settlement: &settlement)
        }
    }

    /// Two round trips: BEGIN with the partitions' locks and the reads (each statement seeing every batch that held
    /// those partitions before: the reasons, the newest event, the blocks holding the installations), then the
    /// writes with COMMIT, each chunk of blocks sent as it is merged (`mergeAndSend`). Blocks this writer holds in
    /// its cache come back without their bytes.
    private func landAfterReading(_ l: Landing) throws -> BatchReceipt {
        let lookup = Self.blockLookup(l.groups, cache: blockCache)
        let reads = [
            Self.genericPlans, Self.partitionLocks(l.partitions),
            PGStatement("SELECT reason, id FROM telemetry_reasons WHERE reason = ANY($1::text[])", [PGArray.text(l.batch.reasons)], prepare: true),
            PGStatement("SELECT value FROM telemetry_meta WHERE key = 'newest_event'", [], prepare: true),
            PGStatement(Self.revisionQuery, [], prepare: true),
            PGStatement(lookup.sql, lookup.params, prepare: true),
        ]
        let read = Array(try c.pipeline(statements: reads).dropFirst(2))
        var known: [String: UInt16] = [:]
        for row in read[0] { if let reason = row[0], let id = row[1].flatMap({ UInt16($0) }) { known[reason] = id } }
        // (Only what was read, committed, is expected next time: a reason added here may yet roll back.)
        knownReasons.merge(known) { _, read in read }
        let codes = try l.batch.reasons.map { try known[$0] ?? reasonCode($0) }
        let storedNewest = read[1].first?.first?.flatMap { Int64($0) }
        guard let revision = read[2].first?.first?.flatMap({ Int64($0) }) else {
            throw PostgresStoredDataError("the block revision sequence gave no value")
        }
        let (stored, allCached) = try Self.storedBlocks(read[3], groups: l.groups, cache: blockCache)
        let inputs = MergeInputs(codes: codes, storedNewest: storedNewest, blocks: stored)
        var settlement = BatchSettlement(batch: l.batch, reasonCodes: codes, retention: retention, storedNewest: storedNewest)
        // A read that found no block at all confirmed nothing (the batch's blocks are all new, and another writer
        // may be creating the same partitions' blocks): the next batch reads again.
        lastReadWasCached = allCached && !read[3].isEmpty
        var blocks: [(part: Int, upper: [UInt8], data: [UInt8])] = []
        let written = try store.pipelineThenCommit(statements: []) { send in
            blocks = try mergeAndSend(l, inputs, settlement: &settlement, send: send)
        }
        return try landed(l, settlement, inputs, blocks: blocks, revision: revision, batchRow: written.last)
    }

    /// One round trip, for a writer whose last read found every block it asked for unchanged in its cache: the batch
    /// merges into the blocks it expects to be stored (`expectedInputs`), and its statements go while it merges:
    /// BEGIN, the partitions' locks and a guard (`guardQuery`) that fails the transaction unless the stored blocks,
    /// the newest event and the reasons' ids are exactly those expected, then the rewritten blocks a chunk of
    /// partitions at a time (the server writes one chunk while the next merges), then the rest and COMMIT. When the
    /// guard fails, nothing of the batch is written and it runs again in a new transaction that reads (a refusal
    /// counted in `oneRoundTrip.refused`): an expectation never decides anything, the guard does.
    private func landInOneRoundTrip(_ l: Landing, expecting expected: (inputs: MergeInputs, runs: [[StoredBlock]])) throws -> BatchReceipt {
        let guardQuery = Self.guardQuery(
            l.groups, runs: expected.runs, newest: expected.inputs.storedNewest,
            reasons: Array(zip(l.batch.reasons, expected.inputs.codes)))
        let first = [
            Self.genericPlans, Self.partitionLocks(l.partitions), PGStatement(guardQuery.sql, guardQuery.params, prepare: true),
            PGStatement(Self.revisionQuery, [], prepare: true),
        ]
        var settlement = BatchSettlement(
            batch: l.batch, reasonCodes: expected.inputs.codes, retention: retention, storedNewest: expected.inputs.storedNewest)
        var blocks: [(part: Int, upper: [UInt8], data: [UInt8])] = []
        let written: [[[String?]]]
        do {
            written = try store.pipelineThenCommit(statements: first) { send in
                blocks = try mergeAndSend(l, expected.inputs, settlement: &settlement, send: send)
            }
        } catch let e as PostgresError where e.sqlState == "22P02" && e.message.contains(Self.guardMarker) {
            lastReadWasCached = false
            oneRoundTrip.refused += 1
            throw PostgresError(sqlState: "40001", message: "the telemetry blocks changed since this writer last saw them")
        } catch {
            lastReadWasCached = false
            throw error
        }
        // The rows of `first`, then those of what was sent.
        guard let revision = written[3].first?.first?.flatMap({ Int64($0) }) else {
            throw PostgresStoredDataError("the block revision sequence gave no value")
        }
        oneRoundTrip.landed += 1
        return try landed(l, settlement, expected.inputs, blocks: blocks, revision: revision, batchRow: written.last)
    }

    /// A batch's writes once its inputs are known, in the round trip that its COMMIT ends (both ways of landing):
    /// the partitions merged a chunk at a time, each chunk's rewritten and new blocks sent as soon as it is merged,
    /// so that the server writes one chunk while the next one merges; then the settlement's writes. Answers the
    /// blocks written, for the cache.
    private func mergeAndSend(
        _ l: Landing, _ inputs: MergeInputs, settlement: inout BatchSettlement, send: ([PGStatement]) throws -> Void
    ) throws -> [(part: Int, upper: [UInt8], data: [UInt8])] {
        var blocks: [(part: Int, upper: [UInt8], data: [UInt8])] = []
        for chunk in stride(from: 0, to: l.groups.count, by: Self.partitionsPerChunk) {
            let partitions = chunk..<min(l.groups.count, chunk + Self.partitionsPerChunk)
            let (updated, inserted) = try merge(l, inputs, settlement: &settlement, partitions: partitions)
            let (writes, chunkBlocks) = Self.blockStatements(updated: updated, inserted: inserted)
            blocks += chunkBlocks
            try send(writes)
        }
        try send(settlementWrites(settlement, l))
        return blocks
    }

    /// Partitions merged and sent together by `mergeAndSend`: four chunks of sixteen.
    static let partitionsPerChunk = 16

    /// The writes after the blocks: the counters and presence rows (additive upserts, sorted by key), the newest
    /// event and what retention drops, and last the batch's id (under the sequence row's lock until commit, so
    /// ids are in commit order), its row and its notification, in one statement.
    private func settlementWrites(_ settlement: BatchSettlement, _ l: Landing) -> [PGStatement] {
        var writes: [PGStatement] = []
        let counters = settlement.counterRows().sorted { ($0.level.rawValue, $0.bucket, $0.key.packed) < ($1.level.rawValue, $1.bucket, $1.key.packed) }
        if !counters.isEmpty {
            writes.append(
                PGStatement(
                    "INSERT INTO telemetry_counters (level, bucket, key, count) "
                        + "SELECT * FROM unnest($1::smallint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(level, bucket, key, count) "
                        + "ORDER BY level, bucket, key "
                        + "ON CONFLICT (level, bucket, key) DO UPDATE SET count = telemetry_counters.count + excluded.count",
                    [
                        PGArray.ints(counters.map { Int64($0.level.rawValue) }), PGArray.ints(counters.map(\.bucket)),
                        PGArray.ints(counters.map { Int64($0.key.packed) }), PGArray.ints(counters.map(\.count)),
                    ]
                ))
        }
        let presence = settlement.presenceRows().sorted { ($0.hour, $0.key.packed) < ($1.hour, $1.key.packed) }
        if !presence.isEmpty {
            writes.append(
                PGStatement(
                    "INSERT INTO telemetry_presence (hour, key, count) "
                        + "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(hour, key, count) ORDER BY hour, key "
                        + "ON CONFLICT (hour, key) DO UPDATE SET count = telemetry_presence.count + excluded.count",
                    [PGArray.ints(presence.map(\.hour)), PGArray.ints(presence.map(\.key.packed)), PGArray.ints(presence.map(\.delta))]
                ))
        }
        let newest = settlement.newest
        if newest != .min {
            writes.append(
                PGStatement(
                    "INSERT INTO telemetry_meta (key, value) VALUES ('newest_event', $1) "
                        + "ON CONFLICT (key) DO UPDATE SET value = GREATEST(telemetry_meta.value, excluded.value)",
                    [String(newest)]
                ))
            for level in [BucketLevel.minute, .hour] {
                if let oldest = retention.oldestKept(level, newest: newest) {
                    writes.append(PGStatement("DELETE FROM telemetry_counters WHERE level = $1 AND bucket < $2", [String(level.rawValue), String(oldest)]))
                }
            }
            let oldestHour = BucketLevel.hour.bucket(newest - TelemetryRetention.presenceWindow.microseconds)
            writes.append(PGStatement("DELETE FROM telemetry_presence WHERE hour < $1 OR count = 0", [String(oldestHour)]))
        }
        // Without the sequence row the id is NULL, which the batch's primary key refuses (so nothing commits).
        writes.append(
            PGStatement(
                "WITH s AS (UPDATE telemetry_meta SET value = value + 1 WHERE key = 'batch_sequence' RETURNING value), "
                    + "b AS (INSERT INTO telemetry_batches (id, source, committed_at, events, installations, earliest, latest) "
                    + "VALUES ((SELECT value FROM s), $1::text, $2::bigint, $3::bigint, $4::bigint, $5::bigint, $6::bigint) RETURNING id) "
                    + "SELECT id, pg_notify($7::text, id::text) FROM b",
                [
                    l.source, String(l.committedAt.microseconds), String(l.batch.eventCount), String(l.batch.installationCount),
                    l.batch.earliest.map { String($0.microseconds) }, l.batch.latest.map { String($0.microseconds) }, Self.channel,
                ]
            ))
        for i in writes.indices { writes[i].prepare = true }
        return writes
    }

    /// The receipt of a landed batch (`batchRow`: the rows of its last statement, its id), after caching the blocks
    /// it wrote under its `revision` and noting the newest event it leaves for the next batch's expectations.
    private func landed(
        _ l: Landing, _ settlement: BatchSettlement, _ inputs: MergeInputs, blocks: [(part: Int, upper: [UInt8], data: [UInt8])],
        revision: Int64, batchRow: [[String?]]?
    ) throws -> BatchReceipt {
        for b in blocks { blockCache.put(part: b.part, upper: b.upper, revision: revision, data: b.data) }
        let stored = inputs.storedNewest
        expectedNewest = settlement.newest == .min ? stored : max(stored ?? .min, settlement.newest)
        guard let id = batchRow?.first?.first?.flatMap({ Int64($0) }) else {
            throw StoreError.corrupt("the telemetry batch sequence is missing (run 'rollout store migrate')")
        }
        return BatchReceipt(
            id: id, source: l.source, committedAt: l.committedAt, events: l.batch.eventCount, installations: l.batch.installationCount,
            earliest: l.batch.earliest, latest: l.batch.latest)
    }

    /// The advisory-lock class of installation partitions (`pg_advisory_xact_lock(class, partition)`).
    static let partitionLockClass = "5282127"
    static let partitions: UInt32 = 64

    /// The partition of an installation: FNV-1a of its id's UTF-8, the same in every process.
    static func partition(_ id: String) -> Int64 { partition(id.utf8) }

    /// Writes rows exactly as given (`store copy`): the tables of another store, in this store's transaction.
    func copyRow(_ table: String, _ columns: String, _ values: [String?]) throws {
        let placeholders = (1...values.count).map { "$\($0)" }.joined(separator: ", ")
        try c.query("INSERT INTO \(table) (\(columns)) VALUES (\(placeholders))", values)
    }

    /// The catalog id of a rejection reason, added when new (beyond the catalog's size: the last id, "other").
    /// New reasons are added under an advisory lock, so two batches never give one id to two reasons.
    private func reasonCode(_ reason: String) throws -> UInt16 {
        if let id = try c.query("SELECT id FROM telemetry_reasons WHERE reason = $1", [reason]).first?.first?.flatMap({ UInt16($0) }) {
            return id
        }
        try c.query("SELECT pg_advisory_xact_lock($1)", [Self.reasonLock])
        if let id = try c.query("SELECT id FROM telemetry_reasons WHERE reason = $1", [reason]).first?.first?.flatMap({ UInt16($0) }) {
            return id
        }
        let count = try c.query("SELECT count(*) FROM telemetry_reasons").first?.first?.flatMap { Int64($0) } ?? 0
        if count >= Int64(FailureDetail.maximumReasons) { return FailureDetail.maximumReasons }
        try c.query("INSERT INTO telemetry_reasons (id, reason) VALUES ($1, $2)", [String(count), reason])
        return UInt16(count)
    }

    static let reasonLock = "5282125"

    /// The revision every block a batch writes gets: one value of `telemetry_block_revision` per batch, drawn in
    /// its read round trip (not one per block, and no row sent back per block written). A block is written at most
    /// once by a batch and no value is drawn twice, so a block and a revision still name one version of that block.
    static let revisionQuery = "SELECT nextval('telemetry_block_revision')"

    private func meta(_ key: String) throws -> Int64? {
        try c.query("SELECT value FROM telemetry_meta WHERE key = $1", [key]).first?.first?.flatMap { Int64($0) }
    }

    // MARK: Reading

    /// The rejection reason of a failure counter's detail (nil for Apple's classes).
    public func reason(of detail: FailureDetail) throws -> String? {
        guard let id = detail.reasonID else { return nil }
        if id == FailureDetail.maximumReasons { return "other" }
        return try store.reading {
            try c.query("SELECT reason FROM telemetry_reasons WHERE id = $1", [String(id)]).first?.first ?? nil
        }
    }

    /// A failure detail in words: the class, or `rejected:REASON`.
    public func describe(_ detail: FailureDetail) throws -> String {
        guard let reason = try reason(of: detail) else { return detail.errorClass.description }
        return reason.isEmpty ? "rejected" : "rejected:\(reason)"
    }

    /// The stored state of one installation.
    public func installation(_ id: String) throws -> InstallationRecord? {
        try store.reading {
            let key = Array(id.utf8)
            guard
                let row = try c.query(
                    "SELECT data FROM telemetry_installation_blocks WHERE part = $1 AND upper >= $2::bytea ORDER BY upper LIMIT 1",
                    [String(Self.partition(key)), Self.byteaLiteral(key)]
                ).first, let data = try Self.bytea(row[0])
            else { return nil }
            return try data.withUnsafeBytes { bytes throws -> InstallationRecord? in
                var reader = try InstallationBlock.Reader(bytes)
                return try key.withUnsafeBytes { key throws -> InstallationRecord? in
                    while let (stored, record) = try reader.next() {
                        let c = compareInstallationIDs(stored, key)
                        if c == 0 { return record }
                        if c > 0 { break }
                    }
                    return nil
                }
            }
        }
    }

    public func installationCount() throws -> Int {
        try store.reading {
            Int(try c.query("SELECT coalesce(sum(installations), 0) FROM telemetry_installation_blocks").first?.first?.flatMap { Int($0) } ?? 0)
        }
    }

    /// Every stored installation, by partition and in id order within each.
    public func forEachInstallation(_ body: (String, InstallationRecord) throws -> Void) throws {
        try store.reading {
            for row in try c.query("SELECT data FROM telemetry_installation_blocks ORDER BY part, upper") {
                guard let data = try Self.bytea(row[0]) else { continue }
                try data.withUnsafeBytes { bytes throws in
                    var reader = try InstallationBlock.Reader(bytes)
                    while let (id, record) = try reader.next() { try body(String(decoding: id, as: UTF8.self), record) }
                }
            }
        }
    }

    /// The newest event time in the store.
    public func newestEvent() throws -> Instant? {
        try store.reading { try meta("newest_event").map(Instant.init(microseconds:)) }
    }

    /// Every landed batch, oldest first.
    public func batches() throws -> [BatchReceipt] {
        try store.reading {
            try c.query("SELECT id, source, committed_at, events, installations, earliest, latest FROM telemetry_batches ORDER BY id").map { r in
                BatchReceipt(
                    id: Int64(r[0] ?? "") ?? 0, source: r[1] ?? "", committedAt: Instant(microseconds: Int64(r[2] ?? "") ?? 0),
                    events: Int(r[3] ?? "") ?? 0, installations: Int(r[4] ?? "") ?? 0,
                    earliest: r[5].flatMap { Int64($0) }.map(Instant.init(microseconds:)),
                    latest: r[6].flatMap { Int64($0) }.map(Instant.init(microseconds:)))
            }
        }
    }

    /// Every counter ever landed, from the day rows (kept for ever).
    public func allTimeTotals() throws -> CounterTotals {
        try store.reading {
            var totals = CounterTotals()
            for r in try c.query("SELECT key, sum(count) FROM telemetry_counters WHERE level = 2 GROUP BY key") {
                if let packed = r[0].flatMap({ Int64($0) }), let key = CounterKey(packed: UInt32(truncatingIfNeeded: packed)),
                    let n = r[1].flatMap({ Int64($0) })
                {
                    totals.add(key, n)
                }
            }
            return totals
        }
    }

    /// The dashboard query (as `TelemetryTables.snapshot`): everything the console's panels need, as of `now`, on
    /// one consistent snapshot of the database. The instance keeps the fold up to the last settled minute, so a
    /// refresh reads only the newest minutes; a batch that brings events older than the folded point makes the
    /// next query fold again from the rollout start. One instance belongs to one thread.
    public func snapshot(_ configuration: WatchConfiguration, now: Instant) throws -> TelemetrySnapshot {
        try store.consistentRead { () throws -> TelemetrySnapshot in
            let newest = try meta("newest_event")
            if fold?.configuration != configuration { fold = nil }
            let fresh = try c.query("SELECT min(earliest), max(id) FROM telemetry_batches WHERE id > $1", [String(lastBatchSeen)])[0]
            if let maxID = fresh[1].flatMap({ Int64($0) }) {
                if let earliest = fresh[0].flatMap({ Int64($0) }), fold?.isLate(earliest: Instant(microseconds: earliest)) == true {
                    fold = nil
                }
                lastBatchSeen = maxID
            }
            var f = try fold ?? RolloutFold.fromStart(configuration, newest: newest, retention: retention, lastBatch: 0) {
                (level, from, to) throws(any Error) in try looks(level, from: from, to: to)
            }
            let nowMinute = BucketLevel.minute.bucket(now.microseconds)
            let pending = f.advance(try looks(.minute, from: f.cursorMinute, to: nowMinute + 1), now: now)
            fold = f
            let nowHour = BucketLevel.hour.bucket(now.microseconds)
            var presence: [PresenceRow] = []
            for r in try c.query("SELECT hour, key, count FROM telemetry_presence WHERE hour >= $1 AND hour <= $2", [String(nowHour - 23), String(nowHour)]) {
                if let hour = r[0].flatMap({ Int64($0) }), let key = r[1].flatMap({ Int64($0) }).flatMap(PresenceKey.init(packed:)),
                    let n = r[2].flatMap({ Int64($0) })
                {
                    presence.append(PresenceRow(hour: hour, key: key, delta: n))
                }
            }
            let sessionKeys = Cohort.allCases.map { Int64(CounterKey(.session, $0).packed) }
            let sessionsLastDay =
                try c.query(
                    "SELECT coalesce(sum(count), 0) FROM telemetry_counters WHERE level = 1 AND bucket >= $1 AND bucket <= $2 AND key = ANY($3::bigint[])",
                    [String(nowHour - 23), String(nowHour), PGArray.ints(sessionKeys)]
                ).first?.first?.flatMap { Int64($0) } ?? 0
            let lastBatchAt = try c.query("SELECT committed_at FROM telemetry_batches ORDER BY id DESC LIMIT 1").first?.first?.flatMap { Int64($0) }
            return f.watch.snapshot(
                now: now, pending: pending, presence: presence, sessionsLastDay: sessionsLastDay,
                newestEvent: newest.map(Instant.init(microseconds:)), lastBatchAt: lastBatchAt.map(Instant.init(microseconds:)))
        }
    }

    /// Counter rows of `level` with `from ≤ bucket < to`, read on one consistent snapshot of the database.
    public func counterLooks(_ level: BucketLevel, from: Int64, to: Int64) throws -> [CounterLook] {
        try store.consistentRead { () throws -> [CounterLook] in try looks(level, from: from, to: to) }
    }

    /// Counter rows of `level` with `from ≤ bucket < to`, one look per bucket that has rows, in time order.
    private func looks(_ level: BucketLevel, from: Int64, to: Int64) throws -> [CounterLook] {
        guard from < to else { return [] }
        var out: [CounterLook] = []
        for r in try c.query(
            "SELECT bucket, key, count FROM telemetry_counters WHERE level = $1 AND bucket >= $2 AND bucket < $3 ORDER BY bucket",
            [String(level.rawValue), String(from), String(to)])
        {
            guard let bucket = r[0].flatMap({ Int64($0) }), let packed = r[1].flatMap({ Int64($0) }),
                let key = CounterKey(packed: UInt32(truncatingIfNeeded: packed)), let n = r[2].flatMap({ Int64($0) })
            else { continue }
            if out.last?.bucket != bucket { out.append(CounterLook(level: level, bucket: bucket, counts: [:])) }
            out[out.count - 1].counts[key, default: 0] += n
        }
        return out
    }

    // MARK: Installation blocks

    /// The statement that reads the stored blocks holding `groups`' installations: for each partition with any, the
    /// run of its blocks from the block of its first id (the first key at or after it) to the block of its last,
    /// by partition and key, in index order (two probes and a range per partition, not a probe per installation).
    /// The run may hold blocks none of the ids falls in; `heldBlocks` leaves those out.
    static func blockLookup(_ groups: [[(id: [UInt8], index: Int)]], cache: BlockCache?) -> (sql: String, params: [String?]) {
        (
            "SELECT b.part, b.upper, b.revision, CASE WHEN c.revision = b.revision THEN NULL ELSE b.data END FROM (\(runsQuery)) b "
                + "LEFT JOIN unnest($4::smallint[], $5::bytea[], $6::bigint[]) AS c(part, upper, revision) "
                + "ON c.part = b.part AND c.upper = b.upper",
            runsAndBlocks(groups) { p in (cache?.blocks[p] ?? [:]).map { (upper: $0.key, revision: $0.value.revision) } }
        )
    }

    /// `runsQuery`'s parameters for `groups` ($1...$3: each partition with ids, its first id, its last id), then
    /// the blocks `blocks` gives for each of those partitions ($4...$6: partition, key, revision).
    static func runsAndBlocks(
        _ groups: [[(id: [UInt8], index: Int)]], blocks: (Int) -> [(upper: [UInt8], revision: Int64)]
    ) -> [String?] {
        var parts: [Int64] = []
        var firsts: [[UInt8]] = []
        var lasts: [[UInt8]] = []
        var listed: (parts: [Int64], uppers: [[UInt8]], revisions: [Int64]) = ([], [], [])
        for (p, group) in groups.enumerated() {
            guard let first = group.first, let last = group.last else { continue }
            parts.append(Int64(p))
            firsts.append(first.id)
            lasts.append(last.id)
            for block in blocks(p) {
                listed.parts.append(Int64(p))
                listed.uppers.append(block.upper)
                listed.revisions.append(block.revision)
            }
        }
        return [
            PGArray.ints(parts), PGArray.byteas(firsts), PGArray.byteas(lasts), PGArray.ints(listed.parts),
            PGArray.byteas(listed.uppers), PGArray.ints(listed.revisions),
        ]
    }

    /// The stored blocks of each partition in `$1` (smallint[]) from the first key at or after its first id (`$2`,
    /// bytea[]) to the first key at or after its last id (`$3`): part, upper, revision, data, by partition and key, in
    /// index order (two probes and a range per partition, not a probe per installation).
    static let runsQuery =
        "SELECT b.part, b.upper, b.revision, b.data FROM unnest($1::smallint[], $2::bytea[], $3::bytea[]) AS u(part, first, last) "
        + "CROSS JOIN LATERAL (SELECT t.part, t.upper, t.revision, t.data FROM telemetry_installation_blocks t "
        + "WHERE t.part = u.part AND t.upper >= u.first AND t.upper <= (SELECT x.upper FROM telemetry_installation_blocks x "
        + "WHERE x.part = u.part AND x.upper >= u.last ORDER BY x.upper LIMIT 1) ORDER BY t.upper) b"

    /// A stored block as a batch merges it: its key, the revision that names this version of it, and its bytes.
    struct StoredBlock {
        var upper: [UInt8]
        var revision: Int64
        var data: [UInt8]
    }

    /// Everything a batch's merge depends on besides the batch itself: its reasons' ids, the newest event stored,
    /// and for each partition the stored blocks its installations fall in (`heldBlocks`). Equal inputs give an
    /// equal merge, which is what lets a batch merge on the inputs it expects once the store has confirmed them
    /// (`landInOneRoundTrip`).
    struct MergeInputs {
        var codes: [UInt16]
        var storedNewest: Int64?
        var blocks: [[StoredBlock]]
    }

    /// The inputs this writer's reads will give for `groups` if nothing it read or wrote changed since: the ids of
    /// the reasons it read, the newest event as it left it, and per partition the run of cached blocks that
    /// `blockLookup` reads (from the first key at or after the first id to the first key at or after the last;
    /// none when no cached key is at or after the last), as `runs` and reduced to the blocks the ids fall in
    /// (`heldBlocks`). Nil when a reason of the batch was never read. `guardQuery` checks them against the store.
    private func expectedInputs(_ batch: TelemetryBatch, _ groups: [[(id: [UInt8], index: Int)]]) -> (inputs: MergeInputs, runs: [[StoredBlock]])? {
        var codes: [UInt16] = []
        for reason in batch.reasons {
            guard let id = knownReasons[reason] else { return nil }
            codes.append(id)
        }
        var blocks = [[StoredBlock]](repeating: [], count: groups.count)
        for (p, ids) in groups.enumerated() {
            guard let first = ids.first?.id, let last = ids.last?.id, let cached = blockCache.blocks[p] else { continue }
            // One pass over the cached keys: those from the first id's up to the last id, and the first key at or
            // after the last id (the run's end; none cached: no run, which the guard then holds the store to).
            var run: [(upper: [UInt8], block: (revision: Int64, data: [UInt8]))] = []
            var end: (upper: [UInt8], block: (revision: Int64, data: [UInt8]))?
            for (upper, block) in cached where !Self.precedes(upper, first) {
                if Self.precedes(upper, last) {
                    run.append((upper, block))
                } else if end.map({ Self.precedes(upper, $0.upper) }) ?? true {
                    end = (upper, block)
                }
            }
            guard let end else { continue }
            run.sort { Self.precedes($0.upper, $1.upper) }
            blocks[p] = (run + [end]).map { StoredBlock(upper: $0.upper, revision: $0.block.revision, data: $0.block.data) }
        }
        return (MergeInputs(codes: codes, storedNewest: expectedNewest, blocks: Self.heldBlocks(blocks, by: groups)), blocks)
    }

    /// The text of the error `guardQuery` raises.
    static let guardMarker = "rollout: the telemetry this writer expected is not what is stored"

    /// A statement that fails the transaction (SQLSTATE 22P02, its message holding `guardMarker` and what differs)
    /// unless, for every partition `groups` holds, the blocks `blockLookup` would read are exactly `runs` (the same
    /// keys, the same revisions), the newest event stored is `newest`, and each reason has its id. It answers one
    /// row (0) when they are. The blocks' bytes need no check: a key and a revision name one version of a block.
    ///
    /// The failure is a cast to integer of a text that is not a number, over an aggregate, so that the server
    /// evaluates it once, when the rows are counted, and never while planning.
    static func guardQuery(
        _ groups: [[(id: [UInt8], index: Int)]], runs: [[StoredBlock]], newest: Int64?, reasons: [(String, UInt16)]
    ) -> (sql: String, params: [String?]) {
        (
            "SELECT (CASE WHEN count(*) = 0 THEN '0' ELSE '\(guardMarker): ' || string_agg(d.x, ', ') END)::integer FROM ("
                + "SELECT 'block ' || coalesce(s.part, e.part) AS x FROM (\(runsQuery)) s "
                + "FULL JOIN unnest($4::smallint[], $5::bytea[], $6::bigint[]) AS e(part, upper, revision) "
                + "ON e.part = s.part AND e.upper = s.upper AND e.revision = s.revision WHERE s.part IS NULL OR e.part IS NULL "
                + "UNION ALL SELECT 'newest event' FROM (SELECT (SELECT value FROM telemetry_meta WHERE key = 'newest_event') AS v) n "
                + "WHERE n.v IS DISTINCT FROM $7::bigint "
                + "UNION ALL SELECT 'reason ' || r.reason FROM unnest($8::text[], $9::integer[]) AS r(reason, id) "
                + "WHERE NOT EXISTS (SELECT 1 FROM telemetry_reasons t WHERE t.reason = r.reason AND t.id = r.id)) d",
            runsAndBlocks(groups) { p in runs[p].map { (upper: $0.upper, revision: $0.revision) } }
                + [newest.map { String($0) }, PGArray.text(reasons.map(\.0)), PGArray.ints(reasons.map { Int64($0.1) })]
        )
    }

    /// The stored blocks `blockLookup` read (`rows`), per partition and by key, reduced to those `groups`' ids fall
    /// in (`heldBlocks`); a block that came without its bytes is the cached version of the same revision. Also
    /// whether every block came that way (none changed since this writer saw it). Blocks read are cached.
    static func storedBlocks(_ rows: [[String?]], groups: [[(id: [UInt8], index: Int)]], cache: BlockCache?) throws -> (
        blocks: [[StoredBlock]], allCached: Bool
    ) {
        var stored = [[StoredBlock]](repeating: [], count: groups.count)
        var allCached = true
        for row in rows {
            guard let part = row[0].flatMap({ Int($0) }), stored.indices.contains(part), let upper = try bytea(row[1]),
                let revision = row[2].flatMap({ Int64($0) })
            else { throw PostgresStoredDataError("an installation block of the PostgreSQL store is unreadable") }
            if let data = try bytea(row[3]) {
                stored[part].append(StoredBlock(upper: upper, revision: revision, data: data))
                cache?.put(part: part, upper: upper, revision: revision, data: data)
                allCached = false
            } else if let known = cache?.blocks[part]?[upper], known.revision == revision {
                // The bytes this writer saw last, unchanged since (a block and a revision name one version of it).
                stored[part].append(StoredBlock(upper: upper, revision: revision, data: known.data))
            } else {
                throw PostgresStoredDataError("an installation block of the PostgreSQL store came without its bytes")
            }
        }
        for p in stored.indices { stored[p].sort { precedes($0.upper, $1.upper) } }
        return (heldBlocks(stored, by: groups), allCached)
    }

    /// Of each partition's blocks (by key), those some id of `groups` falls in (after the previous block's key, up
    /// to its own): the blocks a batch merges.
    static func heldBlocks(_ stored: [[StoredBlock]], by groups: [[(id: [UInt8], index: Int)]]) -> [[StoredBlock]] {
        stored.indices.map { p in
            let ids = groups[p]
            var next = 0
            return stored[p].filter { block in
                var holds = false
                while next < ids.count, !precedes(block.upper, ids[next].id) {
                    holds = true
                    next += 1
                }
                return holds
            }
        }
    }

    /// `groups`' installations merged into their partitions' `stored` blocks in memory by `merge(stored, ids)` (the
    /// core's `InstallationRanges.merge`): the blocks rewritten under their key and the new ones (a partition's
    /// first, a split's parts); a block whose bytes did not change is not written.
    static func blockColumns(
        groups: [[(id: [UInt8], index: Int)]], stored: [[StoredBlock]], partitions: Range<Int>? = nil,
        merge: (_ stored: [(upper: [UInt8], data: [UInt8])], _ ids: [(id: [UInt8], index: Int)]) throws -> [InstallationRanges.Written]
    ) throws -> (updated: BlockColumns, inserted: BlockColumns) {
        var updated = BlockColumns()
        var inserted = BlockColumns()
        for p in partitions ?? groups.indices where !groups[p].isEmpty {
            let group = groups[p]
            let before = stored[p].map { (upper: $0.upper, data: $0.data) }
            for block in try merge(before, group) {
                if block.replacing {
                    if before.contains(where: { same($0.upper, block.upper) && same($0.data, block.data) }) { continue }
                    updated.append(part: p, block)
                } else {
                    inserted.append(part: p, block)
                }
            }
        }
        return (updated, inserted)
    }

    /// The statements that write merged blocks: one UPDATE for the blocks rewritten under their key, one INSERT for
    /// the new ones, each block with the revision the transaction drew (`revisionQuery`, read by the server with
    /// `currval`: the statements need not wait for its value to come back); and the blocks written, for the cache.
    static func blockStatements(updated: BlockColumns, inserted: BlockColumns) -> (
        writes: [PGStatement], blocks: [(part: Int, upper: [UInt8], data: [UInt8])]
    ) {
        // The blocks' bytes go as one binary bytea parameter (the bytes as they are: no hex written here or parsed by
        // the server) and are cut with `substring` (no array of bytea for the server to parse).
        let rows = "unnest($1::smallint[], $2::bytea[], $3::integer[], $5::integer[], $6::integer[]) AS u(part, upper, n, start, length)"
        var writes: [PGStatement] = []
        if !updated.parts.isEmpty {
            writes.append(
                updated.statement(
                    "UPDATE telemetry_installation_blocks t SET installations = u.n, data = substring($4::bytea FROM u.start FOR u.length), "
                        + "revision = currval('telemetry_block_revision') FROM \(rows) WHERE t.part = u.part AND t.upper = u.upper"))
        }
        if !inserted.parts.isEmpty {
            writes.append(
                inserted.statement(
                    // A block key taken by another writer since the read (none holding the partition can) is a unique
                    // violation: the batch runs again, settled from the blocks as they are then.
                    "INSERT INTO telemetry_installation_blocks (part, upper, installations, data, revision) "
                        + "SELECT u.part, u.upper, u.n, substring($4::bytea FROM u.start FOR u.length), "
                        + "currval('telemetry_block_revision') FROM \(rows)"))
        }
        let blocks = (updated.parts.indices.map { (Int(updated.parts[$0]), updated.uppers[$0], updated.data[$0]) })
            + inserted.parts.indices.map { (Int(inserted.parts[$0]), inserted.uppers[$0], inserted.data[$0]) }
        return (writes, blocks)
    }

    /// Stores `installations` exactly as given (replacing any stored record of the same id), inside the caller's
    /// transaction on `c`, with nothing else writing the installations (`store copy` into a new store, the
    /// migration to blocks): two round trips, the blocks' read and their writes.
    package static func storeInstallations(_ installations: [(id: [UInt8], record: InstallationRecord)], on c: PGConnection) throws {
        guard !installations.isEmpty else { return }
        var groups = [[(id: [UInt8], index: Int)]](repeating: [], count: Int(partitions))
        for (i, entry) in installations.enumerated() { groups[Int(partition(entry.id))].append((entry.id, i)) }
        for p in groups.indices {
            groups[p].sort { precedes($0.id, $1.id) }
            for k in groups[p].indices.dropFirst() where groups[p][k].id == groups[p][k - 1].id {
                throw StoreError.corrupt("the installation \(String(decoding: groups[p][k].id, as: UTF8.self)) is stored twice")
            }
        }
        let lookup = blockLookup(groups, cache: nil)
        // The revision drawn here is the one the writes take (`currval`).
        let read = try c.pipeline([(revisionQuery, []), lookup])
        guard read[0].first?.first?.flatMap({ Int64($0) }) != nil else {
            throw PostgresStoredDataError("the block revision sequence gave no value")
        }
        let (updated, inserted) = try blockColumns(groups: groups, stored: try storedBlocks(read[1], groups: groups, cache: nil).blocks) {
            stored, ids in try InstallationRanges.merge(stored: stored, ids: ids) { index, _ in installations[index].record }
        }
        _ = try c.pipeline(statements: blockStatements(updated: updated, inserted: inserted).writes)
    }

    /// Schema 12: the installations of `telemetry_installations` (one row each) moved into blocks, `chunk` at a time
    /// (in the migration's transaction; nothing else writes meanwhile), leaving that table empty.
    static func moveInstallationsToBlocks(_ c: PGConnection, chunk: Int = 20_000) throws {
        var after: String?
        while true {
            let rows =
                try after.map {
                    try c.query(
                        "SELECT \(legacyInstallationColumns) FROM telemetry_installations WHERE id > $1 ORDER BY id LIMIT $2", [$0, String(chunk)])
                } ?? c.query("SELECT \(legacyInstallationColumns) FROM telemetry_installations ORDER BY id LIMIT $1", [String(chunk)])
            guard let last = rows.last else { break }
            try storeInstallations(rows.map { (Array(($0[0] ?? "").utf8), legacyRecord($0)) }, on: c)
            after = last[0]
        }
        try c.execute("DELETE FROM telemetry_installations")
    }

    /// The installation of a row of `telemetry_installations` (schema 11 and before) with `legacyInstallationColumns`.
    static func legacyRecord(_ r: [String?]) -> InstallationRecord {
        func int(_ i: Int) -> Int64 { r[i].flatMap { Int64($0) } ?? 0 }
        return InstallationRecord(
            firstSeen: int(1), lastSeen: int(2), cohort: Cohort(code: UInt8(clamping: int(3))) ?? .none,
            provider: AttestationProvider(rawValue: UInt8(clamping: int(4))) ?? .unspecified, osMajor: UInt8(clamping: int(5)),
            sessions: int(6), enteredCohorts: UInt8(clamping: int(7)), crashedCohorts: UInt8(clamping: int(8)),
            fetchedAt: r[9].flatMap { Int64($0) }, templateVersion: r[10].flatMap { Int64($0) },
            lastCrashAt: r.count > 11 ? r[11].flatMap { Int64($0) } : nil)
    }

    static let legacyInstallationColumns =
        "id, first_seen, last_seen, cohort, provider, os_major, sessions, entered, crashed, fetched_at, template_version, last_crash"

    /// `bytea` as PostgreSQL writes it in text (`\x` and hex, `bytea_output = hex`); nil for NULL.
    static func bytea(_ text: String?) throws -> [UInt8]? {
        guard var text else { return nil }
        let decoded = text.withUTF8 { u -> [UInt8]? in
            guard u.count >= 2, u[0] == UInt8(ascii: "\\"), u[1] == UInt8(ascii: "x"), u.count % 2 == 0 else { return nil }
            let n = (u.count - 2) / 2
            var bad: UInt8 = 0
            let out = hexValues.withUnsafeBufferPointer { values in
                [UInt8](unsafeUninitializedCapacity: n) { buffer, count in
                    var at = 2
                    for i in 0..<n {
                        let high = values[Int(u[at])]
                        let low = values[Int(u[at + 1])]
                        bad |= high | low
                        buffer[i] = high << 4 | (low & 15)
                        at += 2
                    }
                    count = n
                }
            }
            return bad & 0xF0 == 0 ? out : nil
        }
        guard let decoded else { throw PostgresStoredDataError("a bytea value of the PostgreSQL store is not in hex form") }
        return decoded
    }

    /// The value of each byte as a hex digit, 0xFF for any other byte.
    static let hexValues: [UInt8] = (0...255).map { (c: Int) -> UInt8 in
        switch c {
        case 0x30...0x39: UInt8(c - 0x30)
        case 0x61...0x66: UInt8(c - 0x57)
        case 0x41...0x46: UInt8(c - 0x37)
        default: 0xFF
        }
    }

    /// A `bytea` parameter in text (`\x` and hex).
    static func byteaLiteral(_ bytes: [UInt8]) -> String { "\\x" + Hex.encode(bytes) }

    /// Whether `a` sorts before `b`, bytewise (`lexicographicallyPrecedes`, through `memcmp`: the generic one
    /// iterated byte by byte through the runtime's metadata, seen in perf).
    @inline(__always) static func precedes(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.withUnsafeBytes { a in b.withUnsafeBytes { b in compareInstallationIDs(a, b) < 0 } }
    }

    /// Whether `a` and `b` hold the same bytes, through `memcmp` as `precedes` (`==` on arrays compared them element
    /// by element through the runtime's metadata while this module was built unoptimised; seen in perf).
    @inline(__always) static func same(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.count == b.count && a.withUnsafeBytes { a in b.withUnsafeBytes { b in compareInstallationIDs(a, b) == 0 } }
    }

    /// The partition of an installation id's UTF-8 bytes (as `partition(_: String)`).
    static func partition<Bytes: Sequence<UInt8>>(_ id: Bytes) -> Int64 {
        Int64(Array(id).withUnsafeBytes { InstallationRanges.fnv1a($0) } % partitions)
    }
}

/// PostgreSQL array literals for text parameters (`$1::bigint[]`), so a batch is one statement per table.
package enum PGArray {
    /// `{1,-2,3}`: the digits written straight into the string's bytes (a `String` per value and `joined` took
    /// about 5% of a PostgreSQL telemetry batch's client CPU in `perf`).
    static func ints(_ values: [Int64]) -> String {
        String(unsafeUninitializedCapacity: 2 + 21 * values.count) { out in
            var at = 0
            out[at] = UInt8(ascii: "{")
            at += 1
            for (i, value) in values.enumerated() {
                if i > 0 {
                    out[at] = UInt8(ascii: ",")
                    at += 1
                }
                if value < 0 {
                    out[at] = UInt8(ascii: "-")
                    at += 1
                }
                // The digits from the last: count them, then fill their places backwards.
                var magnitude = value.magnitude
                var count = 1
                var rest = magnitude / 10
                while rest > 0 {
                    count += 1
                    rest /= 10
                }
                for k in stride(from: at + count - 1, through: at, by: -1) {
                    out[k] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                    magnitude /= 10
                }
                at += count
            }
            out[at] = UInt8(ascii: "}")
            return at + 1
        }
    }

    static func optionalInts(_ values: [Int64?]) -> String {
        "{" + values.map { $0.map(String.init) ?? "NULL" }.joined(separator: ",") + "}"
    }

    /// `bytea` elements as `"\\x<hex>"` (the array literal's escape of the hex form's backslash).
    static func byteas(_ values: [[UInt8]]) -> String {
        let size = 2 + values.reduce(0) { $0 + 2 * $1.count + 6 }
        return String(unsafeUninitializedCapacity: size) { out in
            var at = 0
            out[at] = UInt8(ascii: "{")
            at += 1
            for (i, v) in values.enumerated() {
                if i > 0 {
                    out[at] = UInt8(ascii: ",")
                    at += 1
                }
                out[at] = UInt8(ascii: "\"")
                out[at + 1] = UInt8(ascii: "\\")
                out[at + 2] = UInt8(ascii: "\\")
                out[at + 3] = UInt8(ascii: "x")
                at += 4
                at = hex(v, into: out, at: at)
                out[at] = UInt8(ascii: "\"")
                at += 1
            }
            out[at] = UInt8(ascii: "}")
            return at + 1
        }
    }

    /// `values` one after another (a binary `bytea` parameter), and where each starts (1-based, as `substring`
    /// counts) and how long it is: many values in one parameter without an array to parse.
    static func concatenated(_ values: [[UInt8]]) -> (bytes: [UInt8], starts: String, lengths: String) {
        let total = values.reduce(0) { $0 + $1.count }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(total)
        for v in values { bytes.append(contentsOf: v) }
        var starts: [Int64] = []
        starts.reserveCapacity(values.count)
        var next: Int64 = 1
        for v in values {
            starts.append(next)
            next += Int64(v.count)
        }
        return (bytes, ints(starts), ints(values.map { Int64($0.count) }))
    }

    /// Writes the hex of `bytes` into `out` from `at`; returns where it ended.
    @inline(__always) private static func hex(_ bytes: [UInt8], into out: UnsafeMutableBufferPointer<UInt8>, at start: Int) -> Int {
        guard !bytes.isEmpty, let base = out.baseAddress else { return start }
        hexPairs.withUnsafeBufferPointer { pairs in
            bytes.withUnsafeBufferPointer { b in
                // Two digits at a time, as one unaligned 16-bit store.
                let to = UnsafeMutableRawPointer(base + start)
                for i in 0..<b.count { to.storeBytes(of: pairs[Int(b[i])], toByteOffset: 2 * i, as: UInt16.self) }
            }
        }
        return start + 2 * bytes.count
    }

    /// The two lowercase hex digits of each byte, in memory order.
    private static let hexPairs: [UInt16] = (0...255).map { (b: Int) -> UInt16 in
        func digit(_ n: Int) -> UInt16 { UInt16(n < 10 ? 0x30 + n : 0x57 + n) }
        return (digit(b >> 4) | digit(b & 15) << 8).littleEndian
    }

    /// Every element quoted, with `\` and `"` escaped (the array literal's own escapes).
    static func text(_ values: [String]) -> String { optionalText(values) }

    /// The same with NULL elements for nil.
    package static func optionalText(_ values: [String?]) -> String {
        "{"
            + values.map { v in
                guard let v else { return "NULL" }
                var out = "\""
                for ch in v.unicodeScalars {
                    if ch == "\\" || ch == "\"" { out.unicodeScalars.append("\\") }
                    out.unicodeScalars.append(ch)
                }
                return out + "\""
            }.joined(separator: ",") + "}"
    }
}

/// The installation blocks a writer read or wrote last, each with its revision (drawn from the sequence
/// `telemetry_block_revision` once per batch, for every block the batch writes: a value never given twice, so a
/// block and its revision name one version of it): a batch sends the revisions it holds for its partitions and gets back
/// only the bytes of blocks another transaction wrote since, so a writer that lands batch after batch on the same
/// installations reads back none of what it wrote. An entry is right or stale, never wrong: a version another
/// transaction wrote has another revision, and one that rolled back left the row at its old revision. At most `limit` bytes are kept (all dropped beyond it).
final class BlockCache {
    struct Key: Hashable {
        var part: Int
        var upper: [UInt8]
    }

    static let limit = 64 << 20
    private(set) var blocks: [Int: [[UInt8]: (revision: Int64, data: [UInt8])]] = [:]
    private var bytes = 0

    func put(part: Int, upper: [UInt8], revision: Int64, data: [UInt8]) {
        if let old = blocks[part]?[upper] { bytes -= old.data.count + upper.count }
        bytes += data.count + upper.count
        if bytes > Self.limit {
            blocks.removeAll()
            bytes = data.count + upper.count
        }
        blocks[part, default: [:]][upper] = (revision, data)
    }
}

/// Blocks to write, as the columns the block statements unnest: partition, key, installations, bytes.
struct BlockColumns {
    var parts: [Int64] = []
    var uppers: [[UInt8]] = []
    var counts: [Int64] = []
    var data: [[UInt8]] = []

    mutating func append(part: Int, _ block: InstallationRanges.Written) {
        parts.append(Int64(part))
        uppers.append(block.upper)
        counts.append(Int64(block.installations))
        data.append(block.data)
    }

    /// `sql` with these columns as $1...$6: the bytes concatenated into one binary bytea ($4), cut by start ($5)
    /// and length ($6).
    func statement(_ sql: String) -> PGStatement {
        let bytes = PGArray.concatenated(data)
        return PGStatement(
            sql, [PGArray.ints(parts), PGArray.byteas(uppers), PGArray.ints(counts), nil, bytes.starts, bytes.lengths],
            binary: [3: bytes.bytes], prepare: true)
    }
}
