import Crypto
import Glibc
import Platform
import JSON
import RemoteConfig
import Rollout
import StoreSupport
import Timekeeping

/// The team `ConfigStore` on PostgreSQL: every version and the hash-chained audit log in one database that every
/// on-call engineer's console and CLI reach.
///
/// Concurrency: **a lock on the chain head, then one snapshot; not SERIALIZABLE.** Every write transaction
/// (`atomically`, and a bare `publish`/`appendAudit`, which run as one) starts at REPEATABLE READ with `LOCK TABLE
/// config_head IN EXCLUSIVE MODE` and then `SELECT ... FROM config_head WHERE id = 1 FOR UPDATE`. Every write
/// moves the head (the next version number and the next audit sequence both come from it), so the writes of one
/// store are totally ordered anyway; taking that one lock first makes them queue on it instead of running
/// optimistically and being aborted: one lock, always taken first, so no deadlock. `LOCK TABLE` is not a query,
/// so the transaction's snapshot is taken by the statement after it, once the lock is granted: the
/// compare-and-swap reads the newest committed version, and the seal check, the write and the seal it leaves all
/// see that one state. (At READ COMMITTED each statement took a fresh snapshot, so a row of a sealed table that a
/// login with the writer role changed and committed between the check and the new seal was sealed with the write's
/// own changes: never checked, yet sealed. Now such a change is either in the state checked, or outside the seal
/// and named by the next check, or on a row the write changes too, which fails with 40001 and runs again.) Under
/// SERIALIZABLE the same contention (8 writers on one head) would abort most transactions with 40001 and re-run
/// the whole intent, policies included, many times. The transaction runner retries 40001/40P01 (a row changed
/// by another login after the snapshot, a server restart) by running the transaction again, inside
/// `atomically`, never around the write path.
///
/// Read-only (`--read-only`): the connection sets `default_transaction_read_only = on` and every transaction is
/// `BEGIN READ ONLY`, so the server itself refuses every write (SQLSTATE 25006, `PostgresStoreError.readOnly`).
///
/// Live updates: a publish sends `NOTIFY rollout_config, '<version>'` inside its transaction (delivered at
/// commit); `PostgresChangeListener.waitForChange(timeout:)` waits for it. Polling stays the fallback.
///
/// Tamper evidence: right after the head lock a transaction checks the seal (`PostgresSeal`) and this machine's
/// witness, and refuses to write on a store that fails; before COMMIT it writes the seal of the state it leaves.
public final class PostgresConfigStore: ConfigStore, @unchecked Sendable {
    /// The channel a publish notifies, with the new version number as payload.
    public static let channel = "rollout_config"

    public let conninfo: String
    public let isReadOnly: Bool
    let connection: PGConnection
    private let lock = RecursiveLock()
    /// Depth of `atomically` calls on this thread's use of the connection (0: no transaction open).
    private var depth = 0
    /// Whether the open transaction holds the chain-head row lock.
    private(set) var headLocked = false
    /// How this connection keeps the seal (`PostgresSeal`); nil: a bare connection, which writes no sealed store.
    public let sealing: PostgresSealing?
    /// Whether the open transaction checked the seal and renews it before COMMIT.
    var renewsSeal = false
    /// The state that check found (its catalog is sealed again at COMMIT; `catalogChanged` drops it).
    var checkedSeal: PostgresSeal.State?

    /// Says that the open transaction changes the catalog of the rollout tables (DDL, a migration step): its
    /// seal then digests the catalog again at COMMIT instead of sealing the one checked after the head lock.
    package func catalogChanged() {
        checkedSeal = nil
        catalogCache = nil
        tablesCache = nil
    }

    /// The monitor's rollout start waiting for this connection's next head-locked write
    /// (`PostgresRolloutStartCache.cacheRolloutStartWithNextWrite`).
    let pendingRolloutStart = PendingWrite<(version: Int, start: Instant?)>()
    /// The catalog's digest and privilege check (columns 9 and 10 of `PostgresSeal.stateQuery`) as this connection
    /// last computed them, with the catalog's fingerprint then: while a write finds the same fingerprint after
    /// its head lock, it takes them from here instead of recomputing them (`PostgresSeal.catalogFingerprint`).
    /// `since`: the oldest transaction id the statement that read them did not see finished (see
    /// `PostgresSeal.stillNames`).
    var catalogCache: (fingerprint: String, since: UInt64, catalog: String?, privilege: String?)?
    /// The sealed tables' digests (columns 11... of `PostgresSeal.stateQuery`) as this connection last computed
    /// them, with their rows' fingerprint then (`PostgresSeal.rowsFingerprint`): kept as the catalog's are.
    var tablesCache: (fingerprint: String, since: UInt64, digests: [String?])?
    /// How many transactions of this connection took the head lock in one round trip with the state.
    private var headLocks = 0
    /// The database's identity for the witness, read once.
    var witnessIdentity: String?
    /// The witness's sync of this connection's last sealed write, run after its COMMIT (`PostgresWitness.advance`).
    let witnessSync = WitnessSync()
    /// How many round trips to the server this store's connection has made (`PGConnection.roundTrips`).
    public var roundTrips: Int { connection.roundTrips }
    /// How many times a transaction is run again after a serialisation failure or deadlock.
    public var retryLimit = 20

    /// Opens an existing store; refuses a database without a rollout schema, with an older one (run `rollout
    /// store migrate`) or a newer one. Creates nothing.
    ///
    /// `sealing`: the team store key and witness directory of this machine (the executable always passes one);
    /// nil opens a bare connection that refuses to write a sealed store (see `PostgresSealing`).
    ///
    /// `lockTimeoutMilliseconds`: how long a statement waits for a lock another session holds (the chain head's,
    /// a row's) before it fails with SQLSTATE 55P03 and its transaction rolls back: the same bound, 10 s, as the
    /// SQLite store's busy wait, so a session left open in `psql` holding the head makes a command fail with "the
    /// store is busy" instead of hanging. 0 waits without a bound (PostgreSQL's default).
    public init(
        conninfo: String, readOnly: Bool = false, sealing: PostgresSealing? = nil,
        lockTimeoutMilliseconds: Int = PostgresConfigStore.lockTimeoutMilliseconds
    ) throws {
        self.conninfo = conninfo
        self.isReadOnly = readOnly
        self.sealing = sealing
        self.lockTimeoutMilliseconds = lockTimeoutMilliseconds
        connection = try Self.session(conninfo, readOnly: readOnly, lockTimeoutMilliseconds: lockTimeoutMilliseconds)
        let found = try PostgresSchema.version(connection)
        guard let found else {
            // Found through the search path: one that names no schema (a role's setting) hides a live store, and
            // 'rollout init' would then be the wrong advice.
            let schemas = try connection.query("SELECT array_to_string(current_schemas(false), ', ')").first?.first ?? nil
            if (schemas ?? "").isEmpty {
                throw StoreError.unavailable(
                    "\(PostgresConfigStore.redacted(conninfo)): the session's search path names no schema, so no table is "
                        + "found (SHOW search_path; a role's or the database's setting?): fix it, not with 'rollout init'")
            }
            throw StoreError.unavailable(
                "\(PostgresConfigStore.redacted(conninfo)) holds no rollout store in the schemas of its search path (\(schemas!)); "
                    + "create one with 'rollout init --store ...'")
        }
        if found > PostgresSchema.current {
            throw StoreError.unavailable(
                "the store's schema (\(found)) is newer than this program's (\(PostgresSchema.current)): upgrade rollout")
        }
        if found < PostgresSchema.current {
            throw StoreError.unavailable(
                "the store's schema (\(found)) is older than this program's (\(PostgresSchema.current)): run 'rollout store migrate'")
        }
    }

    /// Creates the schema (if the database has none) and version 1 from `genesis`, in one transaction; refuses a
    /// database that already holds a rollout version.
    /// With `sealing` (and its key) the new store is sealed in the transaction of version 1.
    public static func create(
        conninfo: String, sealing: PostgresSealing? = nil, genesis: () throws -> PublishRequest
    ) throws -> PostgresConfigStore {
        try PostgresSchema.migrating(conninfo: conninfo) { c, _ in
            if let n = try c.query("SELECT max(number) FROM config_versions").first?.first ?? nil {
                throw StoreError.unavailable("a store already exists there (version \(n)); init only creates new stores")
            }
            if let project = try c.query("SELECT project FROM firebase_state WHERE id = 1").first?.first ?? nil {
                throw StoreError.unavailable("the database is the state store of firebase:\(project); init only creates new stores")
            }
        }
        let store = try PostgresConfigStore(conninfo: conninfo, sealing: sealing)
        _ = try store.atomically {
            // Checked again under the head lock: of two inits racing on one database, exactly one writes version 1.
            if let n = try store.connection.query("SELECT max(number) FROM config_versions").first?.first ?? nil {
                throw StoreError.unavailable("a store already exists there (version \(n)); init only creates new stores")
            }
            return try store.insertVersion(try genesis())
        }
        return store
    }

    /// The connection string with any password removed, for messages.
    public static func redacted(_ conninfo: String) -> String {
        // `:secret@` in a URI (the password between the user and the host) and `password=secret` in key=value form.
        var out: [UInt8] = []
        let bytes = Array(conninfo.utf8)
        let password = Array("password=".utf8)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: ":") {
                var j = i + 1
                while j < bytes.count, !":@/".utf8.contains(bytes[j]) { j += 1 }
                if j < bytes.count, bytes[j] == UInt8(ascii: "@") {
                    out += ":***@".utf8
                    i = j + 1
                    continue
                }
            } else if bytes[i...].starts(with: password) {
                var j = i + password.count
                while j < bytes.count, !" \t\n\r\u{0B}\u{0C}".utf8.contains(bytes[j]) { j += 1 }
                out += "password=***".utf8
                i = j
                continue
            }
            out.append(bytes[i])
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The default bound on a wait for another session's lock, in milliseconds (see `init`).
    public static let lockTimeoutMilliseconds = 10_000

    /// This store's bound on a wait for another session's lock, in milliseconds (`init`): its own session's, and
    /// that of every other session opened for it (the App Check state's reading connection).
    public let lockTimeoutMilliseconds: Int

    /// A new session on `conninfo` set up as every session of the store is, and again after a reconnect
    /// (`PGConnection.sessionSetup`): notices below warnings not sent, `bytea` as hex (the seal digests rows in their
    /// text form), lock waits bounded by `lockTimeoutMilliseconds` (0: unbounded, PostgreSQL's default), and
    /// with `readOnly` every transaction read-only. The one place these are set: the store's own session, the App
    /// Check reader's and a migration's, so a lock held in another session (a `psql` left open, a migration's
    /// DDL) makes none of them wait without end.
    package static func session(
        _ conninfo: String, readOnly: Bool = false,
        lockTimeoutMilliseconds: Int = PostgresConfigStore.lockTimeoutMilliseconds
    ) throws -> PGConnection {
        let c = try PGConnection(conninfo)
        c.sessionSetup = [
            "SET client_min_messages = warning", "SET bytea_output = hex",
            "SET lock_timeout = \(max(0, lockTimeoutMilliseconds))",
        ] + (readOnly ? ["SET default_transaction_read_only = on"] : [])
        for statement in c.sessionSetup { try c.execute(statement) }
        return c
    }

    /// Cancelled by `abandonLockWaits`: no transaction begins on this connection from then on.
    private let lockWaits = Cancellation()

    /// Ends this connection's waits for other sessions' locks, now and from now on: the statement in progress is
    /// cancelled (a transaction waiting for the chain head's row lock, or a group of App Check writes for its
    /// rows, fails with SQLSTATE 57014 and rolls back) and no transaction begins afterwards. A server stopping past
    /// its drain does this, so that its last calls do not each wait for a lock another session holds. Any thread;
    /// it takes none of the connection's locks. A transaction that begins just before it and only then reaches a
    /// lock still waits (the server waits for it at most its drain).
    public func abandonLockWaits() {
        lockWaits.cancel()
        connection.cancelStatement()
    }

    // MARK: Transactions

    /// One transaction: `BEGIN` (READ ONLY on a read-only store), the chain-head row lock on a writable one,
    /// `body`, `COMMIT`. Nested calls join the outer transaction. A serialisation failure or deadlock rolls back
    /// and runs the transaction again (up to `retryLimit`); every other error rolls back and is rethrown.
    public func atomically<T>(_ body: () throws -> T) throws -> T {
        try transaction(lockingHead: true, body)
    }

    /// `current()` and then `atomically(body)`, with the read sent in the round trip that begins the transaction,
    /// ahead of BEGIN and ended by a sync point of its own (`PGStatement.syncAfter`): the server runs it as its own
    /// implicit transaction, in its own snapshot, before the transaction begins, exactly as a `current()` call made
    /// first would, so a version published between the read and the head lock is still the compare-and-swap's
    /// conflict. One round trip less per write. Inside an open transaction (or read-only) it makes the two calls.
    public func currentThenAtomically<T>(_ body: (StoredTemplate) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        guard depth == 0, !isReadOnly else {
            let seen = try current()
            return try atomically { try body(seen) }
        }
        readsCurrentFirst = true
        currentRead = nil
        defer {
            readsCurrentFirst = false
            currentRead = nil
        }
        return try transaction(lockingHead: true) {
            guard let seen = currentRead else { preconditionFailure("internal: the head lock's round trip read no version") }
            return try body(seen)
        }
    }

    /// Whether the next head lock's round trip reads the newest version first (`currentThenAtomically`).
    private var readsCurrentFirst = false
    /// The newest version as that round trip read it (nil until one did: when the first attempt's round trip
    /// failed, the next attempt's reads it, before any attempt ran the body).
    private var currentRead: StoredTemplate?

    /// The transaction runner of every table on this connection. `lockingHead`: take the chain-head row lock
    /// first (every write that can touch the audit chain or a policy's input: the config, step-up, settings);
    /// telemetry batches pass false, so that many ingesting processes do not queue behind publishes (their
    /// counters are additive upserts). A nested call joins the outer transaction, taking the head lock then if
    /// it asks for it and the outer did not.
    public func transaction<T>(lockingHead: Bool, _ body: () throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if depth == 0, lockWaits.isCancelled {
            throw StoreError.unavailable(
                "\(Self.redacted(conninfo)): this process stopped waiting for the store's locks (it is stopping): "
                    + "nothing was written")
        }
        if depth > 0 {
            if lockingHead, !headLocked, !isReadOnly { try lockHead() }
            depth += 1
            defer { depth -= 1 }
            return try body()
        }
        var attempt = 0
        while true {
            attempt += 1
            // A connection lost since the last call (a server restart) is opened again before this transaction;
            // the call that met the loss failed with a connection error, and nothing of it is re-run here.
            connection.reconnectIfLost()
            // Cleared per attempt, not when it ends: a rollback after the body committed must not send ROLLBACK.
            committedByBody = false
            commitSent = false
            do {
                depth = 1
                defer {
                    depth = 0
                    lockRead = nil
                    headLocked = false
                    renewsSeal = false
                    checkedSeal = nil
                }
                if lockingHead, !isReadOnly {
                    try beginLockingHead()
                } else {
                    // BEGIN goes with the body's first statements, in their round trip.
                    connection.deferUntilNextRoundTrip([
                        (isReadOnly ? "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY" : "BEGIN ISOLATION LEVEL READ COMMITTED", [])
                    ])
                }
                let value = try body()
                if committedByBody { return value }
                // The monitor's rollout start rides on a head-locked write, under the seal it renews (best effort:
                // a cache; its savepoint keeps a failure from touching the write).
                if headLocked, let entry = pendingRolloutStart.take() {
                    try? bestEffort { try keepRolloutStart(version: entry.version, start: entry.start) }
                }
                // The new seal and COMMIT in one round trip (the body's deferred writes go with the state the
                // seal is made of, in the round trip before).
                commitSent = true
                let sealed = try renewSeal(thenCommit: true)
                if sealed == nil { try connection.execute("COMMIT") }
                if let sealed, sealed.sequence > 0 { advanceWitness(to: sealed) }
                return value
            } catch is PostgresError where attempt == 1 && !commitSent && connection.isLost {
                // The session was gone (ended by the server while idle, its goodbye not read yet): the server drops
                // an ended session's open transaction and COMMIT was not sent, so nothing of this one lasts; it
                // runs once more on a new session (`reconnectIfLost` at the top of the loop).
                _ = connection.discardDeferred()
                continue
            } catch let e as PostgresError where e.isRetryable && attempt < retryLimit {
                rollback()
                continue
            } catch let e as PostgresError where e.isReadOnlyRefusal {
                rollback()
                throw PostgresStoreError.readOnly(e.message)
            } catch {
                rollback()
                throw error
            }
        }
    }

    /// One round trip: BEGIN, the head lock, then (after it) the state the seal check compares (a statement
    /// planned once per connection), the seal, the newest version's etag (the compare-and-swap of a publish made
    /// next) and the audit record this machine's witness saw; then the seal's check.
    ///
    /// The catalog's digest and privilege check come from `catalogCache`, and the sealed tables' digests from
    /// `tablesCache`, while the catalog's and the rows' fingerprints, read in that round trip, are the ones they
    /// were computed at; else the whole state is read again, in one more round trip under the same lock, and
    /// both caches renewed.
    private func beginLockingHead() throws {
        let cached = catalogCache.flatMap { c in tablesCache.map { (c, $0) } }
        let stateQuery =
            cached != nil
            ? PostgresSeal.fingerprintedStateQuery
            : headLocks > 0 ? PostgresSeal.fingerprintingStateQuery : PostgresSeal.stateQuery
        headLocks += 1
        try connection.prepare(stateQuery)
        // (A witness that cannot be read is named by the check after the lock, in its order.)
        var seen: (sequence: Int64, hash: String)?
        if let w = try? witness() { seen = try? w.read() }
        // Each prepared as it is first sent (in this round trip): from then on the server plans none of them
        // again on this connection.
        // Read once: an attempt run again keeps the version its first read found, as with a `current()` call made
        // before the transaction (a version published since is the compare-and-swap's conflict).
        let readsCurrent = readsCurrentFirst && currentRead == nil
        var statements =
            readsCurrent ? [PGStatement(Self.currentQuery, [], prepare: true, syncAfter: true)] : []
        statements += [
            PGStatement("BEGIN ISOLATION LEVEL REPEATABLE READ", []), PGStatement(Self.headTableLock, []),
            PGStatement(Self.headLockQuery, [], prepare: true),
            PGStatement(stateQuery, []), PGStatement(PostgresSeal.sealQuery, [], prepare: true),
            PGStatement(Self.newestETagQuery, [], prepare: true),
        ]
        if let seen, seen.sequence > 0 {
            statements.append(PGStatement(PostgresWitness.recordQuery, [String(seen.sequence)], prepare: true))
        }
        var read = try connection.pipeline(statements: statements)
        if readsCurrent {
            guard let row = read.removeFirst().first
            else { throw StoreError.unavailable("the store has no version yet (create it with 'rollout init')") }
            currentRead = try Self.stored(row)
        }
        read.remove(at: 1)  // LOCK TABLE's (no rows): the rest keep their places, BEGIN's first
        var state = read[2].first
        let tables = 11..<(11 + PostgresSeal.sealedTables.count)
        let (catalogColumn, rowsColumn) = (tables.upperBound, tables.upperBound + 1)
        let (xidColumn, sinceColumn) = (rowsColumn + 1, rowsColumn + 2)
        if var row = state, let (catalog, rows) = cached, row.count > sinceColumn {
            let now = row[xidColumn].flatMap { UInt64($0) }
            if PostgresSeal.stillNames(catalog.fingerprint, since: catalog.since, column: row[catalogColumn], now: now),
                PostgresSeal.stillNames(rows.fingerprint, since: rows.since, column: row[rowsColumn], now: now)
            {
                (row[9], row[10]) = (catalog.catalog, catalog.privilege)
                row.replaceSubrange(tables, with: rows.digests)
                state = row
            } else {
                try connection.prepare(PostgresSeal.fingerprintingStateQuery)
                state = try connection.query(PostgresSeal.fingerprintingStateQuery).first
            }
        }
        if let row = state, row.count > sinceColumn, let catalog = PostgresSeal.fingerprint(row[catalogColumn]),
            let rows = PostgresSeal.fingerprint(row[rowsColumn]), let since = row[sinceColumn].flatMap({ UInt64($0) })
        {
            catalogCache = (catalog.hash, since, row[9], row[10])
            tablesCache = (rows.hash, since, Array(row[tables]))
        }
        lockRead = (read[1].first, read[4].first?.first ?? nil, connection.statementsSent)
        var witnessRead: ((sequence: Int64, hash: String), String?)?
        if let seen { witnessRead = (seen, read.count > 5 ? read[5].first?.first ?? nil : nil) }
        try lockedHead(read[1], seal: (state, read[3].first), witnessRead: witnessRead)
    }

    /// Rolls the open transaction back; statements still queued for the next round trip are dropped with it.
    private func rollback() {
        if committedByBody { return }
        // A BEGIN still queued never reached the server: there is no transaction to roll back.
        if connection.discardDeferred().contains(where: { $0.sql.hasPrefix("BEGIN") }) { return }
        try? connection.execute("ROLLBACK")
    }

    /// Whether the body of the open transaction committed it itself (`pipelineThenCommit`).
    private var committedByBody = false
    /// Whether COMMIT went to the server in this attempt (from the body or after it): a failure after it is never
    /// run again, since the transaction may have committed.
    private var commitSent = false

    /// Runs `statements` in one round trip and answers their rows; in the outermost transaction of a writer that
    /// holds no head lock and renews no seal (a telemetry batch of its own), COMMIT goes last in that round trip,
    /// so the caller sends nothing after it in the transaction. A failure among the statements leaves COMMIT
    /// unsent (the server skips the rest of the round trip) and the transaction is rolled back as usual.
    func pipelineThenCommit(_ statements: [(sql: String, params: [String?])]) throws -> [[[String?]]] {
        try pipelineThenCommit(statements: statements.map { PGStatement($0.sql, $0.params) })
    }

    /// The same with statements that may carry binary parameters.
    func pipelineThenCommit(statements: [PGStatement]) throws -> [[[String?]]] {
        guard commitsInBody else { return try connection.pipeline(statements: statements) }
        commitSent = true
        let rows = try connection.pipeline(statements: statements + [PGStatement("COMMIT", [])])
        committedByBody = true
        return Array(rows.dropLast())
    }

    /// The same with statements made while the round trip runs (`PGConnection.pipeline(statements:streaming:)`):
    /// COMMIT goes after the last statement `more` sends, and only when `more` returned.
    func pipelineThenCommit(
        statements: [PGStatement], streaming more: (_ send: ([PGStatement]) throws -> Void) throws -> Void
    ) throws -> [[[String?]]] {
        guard commitsInBody else { return try connection.pipeline(statements: statements, streaming: more) }
        commitSent = true
        let rows = try connection.pipeline(statements: statements) { send in
            // (Swift refuses to pass one non-escaping closure parameter to another without this; nothing escapes.)
            try withoutActuallyEscaping(send) { send in
                try more(send)
                try send([PGStatement("COMMIT", [])])
            }
        }
        committedByBody = true
        return Array(rows.dropLast())
    }

    /// A write that may fail without failing anything else (a cache): in a transaction of its own when none is
    /// open, else in a savepoint of the open one, rolled back to when it fails, so that the transaction around it
    /// goes on. (A failed statement aborts the whole transaction in PostgreSQL: a cache write that failed inside a
    /// plan runner's write, and whose error its caller ignored, left every later statement of it refused with
    /// 25P02.) Rethrows the error.
    public func bestEffort(_ body: () throws -> Void) throws {
        lock.lock()
        defer { lock.unlock() }
        guard depth > 0 else { return try transaction(lockingHead: false, body) }
        try connection.execute("SAVEPOINT best_effort")
        do {
            try body()
            try connection.execute("RELEASE SAVEPOINT best_effort")
        } catch {
            try? connection.execute("ROLLBACK TO SAVEPOINT best_effort")
            throw error
        }
    }

    /// `bestEffort` for a sealed table (`PostgresSeal.sealedTables`: the monitor's cache of the rollout start): in a
    /// transaction of its own that takes the head lock (so the seal is checked first and renewed at COMMIT), or in
    /// a savepoint of the caller's when that holds the head lock (its renewal covers the write); inside a caller's
    /// transaction without it (a telemetry batch, whose COMMIT renews no seal) nothing is written.
    public func bestEffortSealed(_ body: () throws -> Void) throws {
        lock.lock()
        defer { lock.unlock() }
        guard depth > 0 else { return try transaction(lockingHead: true, body) }
        guard headLocked else { return }
        try bestEffort(body)
    }

    /// Whether the open transaction is the outermost, holds no head lock, renews no seal and may write: a telemetry
    /// batch of its own, whose body sends COMMIT with its writes (`pipelineThenCommit`).
    var commitsInBody: Bool { depth == 1 && !headLocked && !renewsSeal && !isReadOnly }

    /// The head row lock: every writer queues here (see the type's comment); then the seal is checked, before
    /// anything is written.
    private func lockHead() throws {
        try lockedHead(try connection.query(Self.headLockQuery), seal: nil)
    }

    /// Taken first by every write transaction, before its snapshot: `LOCK TABLE` is not a query, so the snapshot of
    /// REPEATABLE READ is taken by the statement after it, once the lock is granted. EXCLUSIVE lets plain reads of
    /// the head through and waits for (and holds off) every other writer of it, `FOR UPDATE` on it included.
    static let headTableLock = "LOCK TABLE config_head IN EXCLUSIVE MODE"
    static let headLockQuery = "SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1 FOR UPDATE"
    static let newestETagQuery = "SELECT etag FROM config_versions ORDER BY number DESC LIMIT 1"

    /// The head and the newest etag as read in the round trip of the head lock, and `statementsSent` then: valid
    /// for a publish while nothing else ran on the connection since (nothing can have moved the locked head).
    private var lockRead: (head: [String?]?, etag: String?, statementsSent: Int)?

    /// After the head lock's rows (`seal`: the seal check's rows when read in the same round trip; `witnessRead`:
    /// what this machine's witness saw and the hash the chain holds for that record, read in it too).
    private func lockedHead(
        _ rows: [[String?]], seal: (state: [String?]?, seal: [String?]?)?,
        witnessRead: ((sequence: Int64, hash: String), String?)? = nil
    ) throws {
        guard !rows.isEmpty else {
            throw StoreError.unavailable("the store has no version yet (create it with 'rollout init')")
        }
        headLocked = true
        try checkSealBeforeWriting(read: seal, witnessRead: witnessRead)
    }

    /// Runs `body` on one consistent snapshot: inside the caller's transaction when one is open, else in a
    /// REPEATABLE READ READ ONLY transaction of its own (the dashboard query: a batch landing meanwhile is seen
    /// whole or not at all).
    public func consistentRead<T>(_ body: () throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if depth > 0 { return try body() }
        connection.reconnectIfLost()
        do {
            try connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        } catch is PostgresError where connection.isLost {
            connection.reconnectIfLost()
            try connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        }
        depth = 1
        defer { depth = 0 }
        do {
            let value = try body()
            try connection.execute("COMMIT")
            return value
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
    }

    /// Reads outside a write transaction run on the connection's own snapshot (autocommit).
    func readingLocked<T>(_ body: () throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if depth == 0 { connection.reconnectIfLost() }
        do {
            return try body()
        } catch is PostgresError where depth == 0 && connection.isLost {
            // A read on a session that was gone: once more on a new one (a read changes nothing).
            connection.reconnectIfLost()
            return try body()
        }
    }

    // MARK: ConfigStore

    public func current() throws -> StoredTemplate {
        try reading {
            // Prepared as it is first sent: every write path reads it first.
            let read = try connection.pipeline(statements: [PGStatement(Self.currentQuery, [], prepare: true)])
            guard let row = read.first?.first
            else { throw StoreError.unavailable("the store has no version yet (create it with 'rollout init')") }
            return try Self.stored(row)
        }
    }

    static let currentQuery = "SELECT \(versionColumns) FROM config_versions ORDER BY number DESC LIMIT 1"

    public func publish(_ request: PublishRequest) throws -> StoredTemplate {
        if isReadOnly { throw PostgresStoreError.readOnly("publish on a read-only store") }
        return try atomically {
            // The newest version's etag (the compare-and-swap) and the head: as read after the head lock when
            // nothing ran since (the lock keeps every other writer out), else read now, in one round trip.
            let etag: String?
            let headRow: [String?]?
            if let lockRead, lockRead.statementsSent == connection.statementsSent {
                (etag, headRow) = (lockRead.etag, lockRead.head)
            } else {
                let read = try connection.pipeline([
                    (Self.newestETagQuery, []), ("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1", []),
                ])
                (etag, headRow) = (read[0].first?.first ?? nil, read[1].first)
            }
            if case .etag(let expected) = request.ifMatch, etag != expected {
                throw PublishConflict(current: try current(), expectedETag: expected)
            }
            return try insertVersion(request, head: try Self.chainHead(headRow))
        }
    }

    public func versions(limit: Int, before: Int?) throws -> [VersionInfo] {
        try reading {
            try connection.query(
                "SELECT \(Self.versionColumns) FROM config_versions WHERE number < $1 ORDER BY number DESC LIMIT $2",
                [String(before ?? Int.max), String(max(0, limit))]
            ).map { try Self.info($0) }
        }
    }

    public func version(_ number: Int) throws -> StoredTemplate {
        try reading {
            guard let row = try connection.query("SELECT \(Self.versionColumns) FROM config_versions WHERE number = $1", [String(number)]).first
            else { throw StoreError.noSuchVersion(number) }
            return try Self.stored(row)
        }
    }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) throws -> AuditRecord {
        if isReadOnly { throw PostgresStoreError.readOnly("audit append on a read-only store") }
        return try atomically {
            let head = try chainHead()
            let record = head.chaining(entry)
            try insert(record)
            try connection.query("UPDATE config_head SET audit_sequence = $1, audit_hash = $2 WHERE id = 1", [String(record.sequence), record.hash])
            return record
        }
    }

    public func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        try reading {
            try connection.query(
                "SELECT \(Self.auditColumns) FROM config_audit WHERE sequence < $1 ORDER BY sequence DESC LIMIT $2",
                [String(before ?? Int64.max), String(max(0, limit))]
            ).map { try Self.auditRecord($0) }
        }
    }

    // MARK: Verification

    /// What `verify` checked, when everything holds.
    public struct IntegrityReport: Sendable, Equatable {
        public var versions: Int
        public var auditRecords: Int
        public var headHash: String
    }

    /// Checks the whole audit chain, that the head row names the newest version and record, and that every
    /// version is pinned by the digest in its audit record. Reads only (one read-only snapshot).
    public func verify() throws -> IntegrityReport {
        try reading {
            try connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            defer { try? connection.execute("COMMIT") }
            return try Self.check(connection)
        }
    }

    /// `verify`'s checks on `connection`, inside the transaction the caller holds (`store copy` checks the copy
    /// before it commits).
    package static func check(_ connection: PGConnection) throws -> IntegrityReport {
        do {
            let records = try connection.query("SELECT \(Self.auditColumns) FROM config_audit ORDER BY sequence").map { try Self.auditRecord($0) }
            if let broken = AuditChain.verify(records) { throw StoreError.corrupt("\(broken)") }
            guard let head = try connection.query("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1").first,
                let hv = head[0].flatMap({ Int($0) }), let hs = head[1].flatMap({ Int64($0) }), let hh = head[2]
            else { throw StoreError.corrupt("the chain head is missing") }
            guard hs == (records.last?.sequence ?? 0), hh == (records.last?.hash ?? AuditChain.genesis) else {
                throw StoreError.corrupt("the chain head (\(hs)) does not match the newest audit record (\(records.last?.sequence ?? 0))")
            }
            let bySequence = Dictionary(uniqueKeysWithValues: records.map { ($0.sequence, $0) })
            let rows = try connection.query("SELECT \(Self.versionColumns) FROM config_versions ORDER BY number")
            for (i, row) in rows.enumerated() {
                let info = try Self.info(row)
                guard info.number == i + 1 else { throw StoreError.corrupt("version \(i + 1) is missing") }
                guard let seq = row[10].flatMap({ Int64($0) }), let record = bySequence[seq], record.hash == row[11],
                    record.entry.version == info.number,
                    Self.pins(record.entry.detail, row)
                else { throw StoreError.corrupt("version \(info.number) does not match its audit record (edited?)") }
            }
            guard rows.count == hv else { throw StoreError.corrupt("the head names version \(hv), the store holds \(rows.count)") }
            return IntegrityReport(versions: rows.count, auditRecords: records.count, headHash: hh)
        }
    }

    // MARK: Writing

    /// Inserts the next version and its audit record, moves the head and notifies listeners; the caller holds
    /// the head lock (inside `atomically`).
    func insertVersion(_ request: PublishRequest, head known: ChainHead? = nil) throws -> StoredTemplate {
        let head = try known ?? chainHead()
        let number = head.version + 1
        let template = request.template.strippingVersionInfo()
        let text = template.json.compactText
        let info = VersionInfo(
            number: number, etag: Self.newETag(number: number, content: text), updateTime: request.time,
            updateUser: request.updateUser, updateOrigin: request.updateOrigin, updateType: request.updateType,
            description: request.description, rollbackSource: request.rollbackSource)
        let values: [String?] = [
            String(number), info.etag, text, template.form.rawValue, String(info.updateTime.microseconds), info.updateUser,
            info.updateOrigin, info.updateType.rawValue, info.description, info.rollbackSource.map { String($0) },
        ]
        var entry = request.audit
        entry.version = number
        entry.detail =
            (entry.detail.isEmpty ? "" : entry.detail + "; ") + VersionDigest.label
            + VersionDigest.hex(info, form: template.form, templateText: text)
        let record = head.chaining(entry)
        // The audit record, the version, the head (a row since the first migration, so writers need UPDATE on it,
        // not INSERT) and the notification: nothing is read back, so they go with the transaction's next round
        // trip (the state the seal is made of, or COMMIT), in this order, before anything sent after them; each
        // prepared as it is first sent, so that the server plans none of them again on this connection.
        let audit = Self.insertStatement(record)
        connection.deferUntilNextRoundTrip(statements: [
            PGStatement(audit.sql, audit.params, prepare: true),
            PGStatement(
                "INSERT INTO config_versions (\(Self.versionColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                values + [String(record.sequence), record.hash], prepare: true),
            PGStatement(
                "UPDATE config_head SET version = $1, audit_sequence = $2, audit_hash = $3 WHERE id = 1",
                [String(number), String(record.sequence), record.hash], prepare: true),
            PGStatement("SELECT pg_notify($1, $2)", [Self.channel, String(number)], prepare: true),
        ])
        return StoredTemplate(stamping: template, info: info)
    }

    private func insert(_ record: AuditRecord) throws {
        let (sql, params) = Self.insertStatement(record)
        try connection.query(sql, params)
    }

    private static func insertStatement(_ record: AuditRecord) -> (sql: String, params: [String?]) {
        let e = record.entry
        return (
            "INSERT INTO config_audit (\(Self.auditColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            [
                String(record.sequence), String(e.time.microseconds), e.actor, e.action, e.from, e.to, e.reason,
                e.result.rawValue, e.version.map { String($0) }, e.detail, record.previousHash, record.hash,
            ]
        )
    }

    private func chainHead() throws -> ChainHead {
        try Self.chainHead(try connection.query("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1").first)
    }

    /// The head from its row (nil: no row yet, the empty chain).
    private static func chainHead(_ row: [String?]?) throws -> ChainHead {
        guard let row else { return ChainHead(version: 0, sequence: 0, hash: AuditChain.genesis) }
        guard let v = row[0].flatMap({ Int($0) }), let s = row[1].flatMap({ Int64($0) }), let h = row[2] else {
            throw StoreError.corrupt("the chain head has an unexpected value (run 'rollout audit verify')")
        }
        return ChainHead(version: v, sequence: s, hash: h)
    }

    struct ChainHead {
        var version: Int
        var sequence: Int64
        var hash: String

        func chaining(_ entry: AuditEntry) -> AuditRecord {
            let next = sequence + 1
            return AuditRecord(sequence: next, entry: entry, previousHash: hash, hash: AuditChain.hash(sequence: next, entry: entry, previousHash: hash))
        }
    }

    /// `etag-<n>-<16 hex>`, as the SQLite store makes them: unique per version and salted.
    static func newETag(number: Int, content: String) -> String {
        var hasher = SHA256.Hasher()
        hasher.update("\(number)\n")
        hasher.update(content)
        hasher.update(SecureRandom.bytes(16))
        return "etag-\(number)-" + Hex.encode(hasher.finish().prefix(8))
    }

    // MARK: Rows

    /// Whether an audit record's detail pins a version row: by the shared `VersionDigest` (schema 2 on, and
    /// versions copied from an SQLite store), or by the JSON array of the ten columns that schema 1 pinned.
    static func pins(_ detail: String, _ row: [String?]) -> Bool {
        if let info = try? info(row), let text = row[2], let form = row[3].flatMap(RemoteConfigTemplate.Form.init(rawValue:)),
            VersionDigest.isPinned(VersionDigest.hex(info, form: form, templateText: text), by: detail)
        {
            return true
        }
        return VersionDigest.isPinned(schema1Digest(row), by: detail)
    }
    package static let versionColumns =
        "number, etag, template, form, update_time, update_user, update_origin, update_type, description, rollback_source, audit_sequence, audit_hash"
    package static let auditColumns =
        "sequence, time, actor, action, from_state, to_state, reason, result, version, detail, previous_hash, hash"

    /// Schema 1's digest: SHA-256 over the ten columns a publish writes as a JSON array (still accepted by
    /// `verify` for the versions written then).
    static func schema1Digest(_ row: [String?]) -> String {
        let canonical = JSONValue.array(row.prefix(10).map { $0.map { .string($0) } ?? .null })
        return SHA256.hex(Array(canonical.compactText.utf8))
    }

    static func info(_ row: [String?]) throws -> VersionInfo {
        guard row.count == 12, let n = row[0].flatMap({ Int($0) }), let etag = row[1], let time = row[4].flatMap({ Int64($0) }),
            let user = row[5], let origin = row[6], let type = row[7].flatMap(UpdateType.init(rawValue:)), let description = row[8]
        else { throw StoreError.corrupt("a version row has an unexpected value (edited?)") }
        return VersionInfo(
            number: n, etag: etag, updateTime: Instant(microseconds: time), updateUser: user, updateOrigin: origin,
            updateType: type, description: description, rollbackSource: row[9].flatMap { Int($0) })
    }

    static func stored(_ row: [String?]) throws -> StoredTemplate {
        let info = try info(row)
        guard let text = row[2], let form = row[3].flatMap(RemoteConfigTemplate.Form.init(rawValue:)) else {
            throw StoreError.corrupt("version \(info.number) has an unexpected template column (edited?)")
        }
        let template: RemoteConfigTemplate
        do {
            template = try RemoteConfigTemplate(json: try JSONParser().parse(text), preferredForm: form)
        } catch {
            throw StoreError.corrupt("version \(info.number): its template does not parse (\(error))")
        }
        return StoredTemplate(stamping: template, info: info)
    }

    static func auditRecord(_ row: [String?]) throws -> AuditRecord {
        guard row.count == 12, let sequence = row[0].flatMap({ Int64($0) }), let time = row[1].flatMap({ Int64($0) }),
            let actor = row[2], let action = row[3], let from = row[4], let to = row[5], let reason = row[6],
            let result = row[7].flatMap(AuditEntry.Result.init(rawValue:)), let detail = row[9], let previous = row[10],
            let hash = row[11]
        else { throw StoreError.corrupt("an audit record has an unexpected value (edited?)") }
        let entry = AuditEntry(
            time: Instant(microseconds: time), actor: actor, action: action, from: from, to: to, reason: reason, result: result,
            version: row[8].flatMap { Int($0) }, detail: detail)
        return AuditRecord(sequence: sequence, entry: entry, previousHash: previous, hash: hash)
    }
}

/// Failures of the PostgreSQL store a person can act on.
public enum PostgresStoreError: Error, Sendable, CustomStringConvertible, Equatable {
    /// A write on a read-only store or connection (`--read-only`): nothing was written.
    case readOnly(String)

    public var description: String {
        switch self {
        case .readOnly(let m):
            "refused: the PostgreSQL session is read-only (--read-only, a role's or the database's "
                + "default_transaction_read_only, or a standby server); nothing was written (\(m))"
        }
    }
}

/// Waits for publishes (`NOTIFY rollout_config`) and landed telemetry batches (`NOTIFY rollout_telemetry`) on a
/// connection of its own: what wakes a console on another machine.
public final class PostgresChangeListener: @unchecked Sendable {
    private let connection: PGConnection

    /// What a notification announced.
    public enum Change: Sendable, Equatable {
        case published(version: Int)
        case telemetry(batch: Int64)
    }

    public init(conninfo: String) throws {
        connection = try PGConnection(conninfo)
        try connection.execute("LISTEN \(PostgresConfigStore.channel); LISTEN \(PostgresTelemetry.channel)")
    }

    /// The number of a version published since the last call, or nil when none was within `timeout` seconds
    /// (then poll as the fallback). Telemetry notifications are skipped.
    public func waitForChange(timeout: Double) throws -> Int? {
        let deadline = Deadline(secondsFromNow: timeout)
        while true {
            let left = deadline.secondsLeft
            guard let change = try next(timeout: max(0, left)) else { return nil }
            if case .published(let v) = change { return v }
            if left <= 0 { return nil }
        }
    }

    /// The next publish or telemetry batch, or nil when none came within `timeout` seconds.
    public func next(timeout: Double) throws -> Change? {
        guard let (channel, payload) = try connection.waitForNotification(timeout: timeout) else { return nil }
        if channel == PostgresTelemetry.channel { return Int64(payload).map { .telemetry(batch: $0) } ?? .telemetry(batch: 0) }
        return .published(version: Int(payload) ?? 0)
    }
}
