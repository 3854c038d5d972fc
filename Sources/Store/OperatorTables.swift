import StepUp
import Timekeeping

/// The step-up tables: enrolled operators with their secrets and lockout state, pending enrolments, the
/// policy, and an attempt log.
///
/// Secrets are stored as raw bytes in a store file that only its owner can read (mode 0600, set by the store);
/// no query here returns them except to the code that checks a code. `authorize` is the write path's hook: it
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
            CREATE TABLE IF NOT EXISTS stepup_attempts (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                at INTEGER NOT NULL,
                operator TEXT NOT NULL,
                action TEXT NOT NULL,
                kind TEXT NOT NULL,
                reasons TEXT NOT NULL,
                result TEXT NOT NULL,
                failed_attempts INTEGER NOT NULL,
                locked_until INTEGER
            );
            """)
    }

    // MARK: Operators

    /// Every enrolled operator, by id.
    public static func operators(in db: SQLiteDatabase) throws -> [OperatorRecord] {
        try db.query(
            "SELECT id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators ORDER BY id"
        ).map(record)
    }

    /// The enrolment of `id`, nil when it has none.
    public static func record(_ id: OperatorID, in db: SQLiteDatabase) throws -> OperatorRecord? {
        try db.query(
            "SELECT id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators WHERE id = ?",
            [.text(id.rawValue)]
        ).first.map(record)
    }

    /// Whether step-up is enforced: at least one operator is enrolled.
    public static func isEnforced(in db: SQLiteDatabase) throws -> Bool {
        try !db.query("SELECT 1 FROM stepup_operators LIMIT 1").isEmpty
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
                .text(record.id.rawValue), .blob(record.secret.bytes), .integer(record.enrolledAt.microseconds),
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
            .map(pending)
    }

    public static func pendingEnrolment(_ id: OperatorID, in db: SQLiteDatabase) throws -> PendingEnrolment? {
        try db.query(
            "SELECT id, secret, created_at, approved_by, failed_attempts FROM stepup_enrolments WHERE id = ?",
            [.text(id.rawValue)]
        ).first.map(pending)
    }

    /// Inserts or replaces the pending enrolment of `enrolment.id`.
    public static func savePending(_ enrolment: PendingEnrolment, in db: SQLiteDatabase) throws {
        try db.run(
            "INSERT OR REPLACE INTO stepup_enrolments (id, secret, created_at, approved_by, failed_attempts) VALUES (?, ?, ?, ?, ?)",
            [
                .text(enrolment.id.rawValue), .blob(enrolment.secret.bytes), .integer(enrolment.createdAt.microseconds),
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

    // MARK: Attempts

    /// Appends a step-up attempt to the store's attempt log.
    ///
    /// Until the write path's tamper-evident audit log records step-up events itself, the CLI passes this as
    /// the `audit` of `authorize`.
    public static func appendAttempt(_ event: StepUpAuditEvent, in db: SQLiteDatabase) throws {
        try db.run(
            """
            INSERT INTO stepup_attempts (at, operator, action, kind, reasons, result, failed_attempts, locked_until)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .integer(event.at.microseconds), .text(event.operatorID.rawValue), .text(event.action),
                .text(event.kind.rawValue), .text(event.reasons.joined(separator: ",")), .text(event.result),
                .integer(Int64(event.failedAttempts)), event.lockedUntil.map { .integer($0.microseconds) } ?? .null,
            ])
    }

    /// One row of the attempt log.
    public struct Attempt: Sendable, Equatable {
        public var at: Instant
        public var operatorID: String
        public var action: String
        public var kind: String
        public var reasons: [String]
        public var result: String
        public var failedAttempts: Int
        public var lockedUntil: Instant?
    }

    /// The latest `limit` attempts, oldest first.
    public static func attempts(in db: SQLiteDatabase, limit: Int = 100) throws -> [Attempt] {
        try db.query(
            """
            SELECT at, operator, action, kind, reasons, result, failed_attempts, locked_until FROM
            (SELECT * FROM stepup_attempts ORDER BY seq DESC LIMIT ?) ORDER BY seq
            """, [.integer(Int64(limit))]
        ).map { r in
            Attempt(
                at: Instant(microseconds: r[0].int ?? 0), operatorID: r[1].string ?? "", action: r[2].string ?? "",
                kind: r[3].string ?? "", reasons: (r[4].string ?? "").split(separator: ",").map(String.init),
                result: r[5].string ?? "", failedAttempts: Int(r[6].int ?? 0),
                lockedUntil: r[7].int.map { Instant(microseconds: $0) })
        }
    }

    // MARK: The write path's hook

    /// Decides `change` by `actor` with `code`, in one immediate transaction: reads the policy, whether step-up
    /// is enforced and the actor's record; stores the updated record; hands the event to `audit`; commits.
    ///
    /// Call it outside any open transaction and before publishing. The attempt is committed whatever the
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

    private static func record(_ row: [SQLiteValue]) throws -> OperatorRecord {
        OperatorRecord(
            id: try storedID(row[0].string ?? ""), secret: TOTPSecret(bytes: row[1].bytes ?? []),
            enrolledAt: Instant(microseconds: row[2].int ?? 0), lastAcceptedStep: row[3].int,
            failedAttempts: Int(row[4].int ?? 0), lockedUntil: row[5].int.map { Instant(microseconds: $0) })
    }

    private static func pending(_ row: [SQLiteValue]) throws -> PendingEnrolment {
        PendingEnrolment(
            id: try storedID(row[0].string ?? ""), secret: TOTPSecret(bytes: row[1].bytes ?? []),
            createdAt: Instant(microseconds: row[2].int ?? 0), approvedBy: try row[3].string.map(storedID),
            failedAttempts: Int(row[4].int ?? 0))
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
