import Glibc
import Rollout
import StepUp
import StoreSupport
import Timekeeping

/// The step-up tables: enrolled operators with their secrets and lockout state, pending enrolments, and the
/// policy. Attempts go to the store's audit log (`StepUpAuditEvent.auditEntry`).
///
/// Secrets are stored encrypted (AES-256-GCM under the store key, `StoreKey`, which lives outside the store
/// file; the operator id is bound as associated data); no query here returns them except to the code that checks
/// a code. A bare connection without a store key cannot store or read secrets. `authorize` is the write path's hook: it
/// reads, decides and writes in one immediate transaction, so that two processes cannot both accept one code.
public enum OperatorTables {
    public static func createSchema(in db: SQLiteDatabase) throws {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS stepup_operators (
                id TEXT PRIMARY KEY,
                secret BLOB NOT NULL,
                enrolled_at INTEGER NOT NULL,
                last_accepted_step INTEGER,
                failed_attempts INTEGER NOT NULL DEFAULT 0,
                locked_until INTEGER
            );
            CREATE TABLE IF NOT EXISTS stepup_enrolments (
                id TEXT PRIMARY KEY,
                secret BLOB NOT NULL,
                created_at INTEGER NOT NULL,
                approved_by TEXT,
                failed_attempts INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE IF NOT EXISTS stepup_policy (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL
            );
            """)
    }

    // MARK: Operators

    /// Every enrolled operator, by id.
    public static func operators(in db: SQLiteDatabase) throws -> [OperatorRecord] {
        try db.query(
            "SELECT id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators ORDER BY id"
        ).map { try record($0, in: db) }
    }

    /// The enrolment of `id`, nil when it has none.
    public static func record(_ id: OperatorID, in db: SQLiteDatabase) throws -> OperatorRecord? {
        try db.query(
            "SELECT id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators WHERE id = ?",
            [.text(id.rawValue)]
        ).first.map { try record($0, in: db) }
    }

    /// Whether step-up is enforced: at least one operator is enrolled.
    public static func isEnforced(in db: SQLiteDatabase) throws -> Bool {
        // A store whose step-up tables were never created has nobody enrolled.
        guard try schemaExists(in: db) else { return false }
        return try !db.query("SELECT 1 FROM stepup_operators LIMIT 1").isEmpty
    }

    /// Inserts or replaces the record of `record.id`.
    public static func save(_ record: OperatorRecord, in db: SQLiteDatabase) throws {
        try db.run(
            """
            INSERT INTO stepup_operators (id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until)
            VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET secret = excluded.secret, enrolled_at = excluded.enrolled_at,
                last_accepted_step = excluded.last_accepted_step, failed_attempts = excluded.failed_attempts,
                locked_until = excluded.locked_until
            """,
            [
                .text(record.id.rawValue), .blob(try sealed(record.secret, owner: record.id, in: db)),
                .integer(record.enrolledAt.microseconds),
                record.lastAcceptedStep.map(SQLiteValue.integer) ?? .null, .integer(Int64(record.failedAttempts)),
                record.lockedUntil.map { .integer($0.microseconds) } ?? .null,
            ])
    }

    /// Deletes the enrolment of `id`; false when there was none.
    @discardableResult
    public static func remove(_ id: OperatorID, in db: SQLiteDatabase) throws -> Bool {
        try db.run("DELETE FROM stepup_operators WHERE id = ?", [.text(id.rawValue)])
        return db.changes > 0
    }

    // MARK: Pending enrolments

    public static func pendingEnrolments(in db: SQLiteDatabase) throws -> [PendingEnrolment] {
        try db.query("SELECT id, secret, created_at, approved_by, failed_attempts FROM stepup_enrolments ORDER BY id")
            .map { try pending($0, in: db) }
    }

    public static func pendingEnrolment(_ id: OperatorID, in db: SQLiteDatabase) throws -> PendingEnrolment? {
        try db.query(
            "SELECT id, secret, created_at, approved_by, failed_attempts FROM stepup_enrolments WHERE id = ?",
            [.text(id.rawValue)]
        ).first.map { try pending($0, in: db) }
    }

    /// Inserts or replaces the pending enrolment of `enrolment.id`.
    public static func savePending(_ enrolment: PendingEnrolment, in db: SQLiteDatabase) throws {
        try db.run(
            "INSERT OR REPLACE INTO stepup_enrolments (id, secret, created_at, approved_by, failed_attempts) VALUES (?, ?, ?, ?, ?)",
            [
                .text(enrolment.id.rawValue), .blob(try sealed(enrolment.secret, owner: enrolment.id, in: db)),
                .integer(enrolment.createdAt.microseconds),
                enrolment.approvedBy.map { .text($0.rawValue) } ?? .null, .integer(Int64(enrolment.failedAttempts)),
            ])
    }

    public static func removePending(_ id: OperatorID, in db: SQLiteDatabase) throws {
        try db.run("DELETE FROM stepup_enrolments WHERE id = ?", [.text(id.rawValue)])
    }

    // MARK: Policy

    /// The stored policy; keys never set keep their defaults.
    public static func policy(in db: SQLiteDatabase) throws -> StepUpPolicy {
        var settings: [String: String] = [:]
        for row in try db.query("SELECT key, value FROM stepup_policy") {
            if let k = row[0].string, let v = row[1].string { settings[k] = v }
        }
        do {
            return try StepUpPolicy(settings: settings)
        } catch {
            throw StoredStepUpError(description: "the step-up policy in \(db.path) is unreadable: \(error)")
        }
    }

    /// Stores every setting of `policy`, so that later changes of the defaults do not silently change it.
    public static func savePolicy(_ policy: StepUpPolicy, in db: SQLiteDatabase) throws {
        for s in policy.settings {
            try db.run(
                "INSERT OR REPLACE INTO stepup_policy (key, value) VALUES (?, ?)", [.text(s.key), .text(s.value)])
        }
    }

    /// Whether the step-up tables exist (a read-only command on a store that never had them reads nothing).
    public static func schemaExists(in db: SQLiteDatabase) throws -> Bool {
        try db.hasTable("stepup_operators")
    }

    // MARK: The write path's hook

    /// Decides `change` by `actor` with `code`, in one immediate transaction: reads the policy, whether step-up
    /// is enforced and the actor's record; stores the updated record; hands the event to `audit`; commits.
    ///
    /// `audit` runs inside the transaction (the store's audit log nests in it as a savepoint), so the attempt and
    /// its audit record commit together, and an error from the sink undoes the attempt.
    ///
    /// Inside an open transaction (the write path's) it nests, and commits with it. The attempt is committed whatever the
    /// verdict (a refused code still counts towards the lockout and is audited); publish only when the
    /// returned decision `isAllowed`, else throw its `refusal`. A code accepted here is used up even if the
    /// publish then hits a conflict: re-apply within the same command without asking again.
    public static func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, in db: SQLiteDatabase, clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision {
        try db.transaction {
            let gate = StepUpGate(policy: try policy(in: db))
            let decision = gate.authorize(
                change, by: actor, code: code, record: try record(actor, in: db), enforced: try isEnforced(in: db),
                at: clock.now())
            if let updated = decision.record { try save(updated, in: db) }
            if let event = decision.event { try audit(event) }
            return decision
        }
    }

    // MARK: Rows

    private static func record(_ row: [SQLiteValue], in db: SQLiteDatabase) throws -> OperatorRecord {
        let id = try storedID(row[0].string ?? "")
        return OperatorRecord(
            id: id, secret: try opened(row[1].bytes ?? [], owner: id, in: db),
            enrolledAt: Instant(microseconds: row[2].int ?? 0), lastAcceptedStep: row[3].int,
            failedAttempts: Int(row[4].int ?? 0), lockedUntil: row[5].int.map { Instant(microseconds: $0) })
    }

    private static func pending(_ row: [SQLiteValue], in db: SQLiteDatabase) throws -> PendingEnrolment {
        let id = try storedID(row[0].string ?? "")
        return PendingEnrolment(
            id: id, secret: try opened(row[1].bytes ?? [], owner: id, in: db),
            createdAt: Instant(microseconds: row[2].int ?? 0), approvedBy: try row[3].string.map(storedID),
            failedAttempts: Int(row[4].int ?? 0))
    }

    private static func key(_ db: SQLiteDatabase) throws -> StoreKey {
        guard let key = db.storeKey else {
            throw StoredStepUpError(
                description: "the store key \(StoreKey.path(forStore: db.path)) is missing: step-up secrets cannot be "
                    + "stored or checked (restore the key file, see README 'Store files')")
        }
        return key
    }

    private static func sealed(_ secret: TOTPSecret, owner: OperatorID, in db: SQLiteDatabase) throws -> [UInt8] {
        try key(db).sealSecret(secret.bytes, owner: owner.rawValue)
    }

    private static func opened(_ box: [UInt8], owner: OperatorID, in db: SQLiteDatabase) throws -> TOTPSecret {
        TOTPSecret(bytes: try key(db).openSecret(box, owner: owner.rawValue))
    }

    /// Ids were validated when written; one that no longer is (a hand-edited file) is reported, not used.
    private static func storedID(_ text: String) throws -> OperatorID {
        do {
            return try OperatorID(text)
        } catch {
            throw StoredStepUpError(description: "the store holds an unusable operator id: \(error)")
        }
    }
}

/// Step-up data in the store that this version cannot use (an unknown policy key, a malformed id).
public struct StoredStepUpError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

/// The step-up port (`StepUpStore`) on a store's SQLite file: `OperatorTables` on its connection, under its lock.
public final class SQLiteStepUpStore: StepUpStore, @unchecked Sendable {
    private let store: RolloutStore

    public init(store: RolloutStore) { self.store = store }

    func withStore<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T { try store.withDatabase(body) }

    public func enforcement() throws -> StepUpEnforcement {
        try store.withDatabase { db in
            StepUpEnforcement(policy: try OperatorTables.policy(in: db), enforced: try OperatorTables.isEnforced(in: db))
        }
    }

    public func operatorRecord(_ id: OperatorID) throws -> OperatorRecord? {
        try store.withDatabase { try OperatorTables.record(id, in: $0) }
    }

    public func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, at clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision {
        try store.withDatabase { db in
            try OperatorTables.authorize(change, by: actor, code: code, in: db, clock: clock, audit: audit)
        }
    }
}

extension StepUpWritePolicy {
    /// The store file's absolute path without symbolic links: a change document names the same store whichever
    /// directory each operator runs rollout from (`rollout approve` in another shell).
    static func canonicalPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The step-up policy on the operator tables of `store`, reading time from `clock`.
    public init(store: RolloutStore, clock: any Clock) throws {
        let stepUp = SQLiteStepUpStore(store: store)
        self.init(
            store: stepUp, clock: clock, preApprovals: SQLiteRampPreApprovals(store: store), securityKeys: stepUp,
            phones: stepUp, storeIdentity: Self.canonicalPath(store.path))
    }
}
