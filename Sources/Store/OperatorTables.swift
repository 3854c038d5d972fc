import Rollout
import StepUp
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
        try !db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stepup_operators'").isEmpty
    }

    // MARK: The write path's hook

    /// Decides `change` by `actor` with `code`, in one immediate transaction: reads the policy, whether step-up
    /// is enforced and the actor's record; stores the updated record; hands the event to `audit`; commits.
    ///
    /// `audit` runs inside the transaction, so a sink that writes to this connection without a transaction of
    /// its own is atomic with the record (and its failure undoes the attempt). The store's audit log opens its
    /// own transaction: collect the event and append `event.auditEntry` after this returns, as
    /// `StepUpWritePolicy` does.
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

/// Step-up verification as a policy of the write path (`WritePath.policies`): the code typed for a proposal is
/// checked against the acting operator's authenticator when the policy asks for one.
///
/// The write path never consults policies for a kill or a decrease, and the step-up rules ask nothing for them
/// either. `review` checks the code through `OperatorTables.authorize` (one immediate transaction: replay-safe
/// across processes), then appends the attempt to the audit log through the context. That append happens just
/// after the attempt's transaction commits, because the audit log opens a transaction of its own on the same
/// connection; a crash between the two loses the audit record of that one attempt, never its effect on the
/// lockout. An accepted code sets `context.stepUpVerified`, so a retry after a conflict does not ask again.
public struct StepUpWritePolicy: WritePolicy {
    public let name = "step-up"
    private let store: RolloutStore
    private let clock: any Clock

    /// A policy on the operator tables of `store` (created when missing), reading time from `clock`.
    public init(store: RolloutStore, clock: any Clock) throws {
        self.store = store
        self.clock = clock
        try store.withDatabase { try OperatorTables.createSchema(in: $0) }
    }

    /// Whether a code is needed and why; checks nothing and writes nothing.
    public func preview(_ proposal: Proposal) throws -> PolicyReport {
        let change = StepUpChange(proposal)
        return try store.withDatabase { db in
            guard try OperatorTables.isEnforced(in: db) else {
                return PolicyReport(
                    policy: name, lines: ["step-up verification is off (no operator enrolled)"], decision: .allow)
            }
            let reasons = requiresStepUp(change, policy: try OperatorTables.policy(in: db))
            guard !reasons.isEmpty else {
                return PolicyReport(policy: name, lines: ["no code needed"], decision: .allow)
            }
            var lines = ["a fresh code is needed: " + reasons.map(\.description).joined(separator: "; ")]
            let record = try (try? OperatorID(proposal.actor)).flatMap { try OperatorTables.record($0, in: db) }
            let decision: PolicyDecision
            if record == nil {
                lines.append("\(proposal.actor) is not enrolled")
                decision = .refuse(PolicyRefusal(policy: name, reason: "\(proposal.actor) is not enrolled for step-up"))
            } else if let until = record?.lockedUntil, clock.now() < until {
                lines.append("\(proposal.actor) is locked out until \(until.iso8601)")
                decision = .refuse(
                    PolicyRefusal(policy: name, reason: "\(proposal.actor) is locked out until \(until.iso8601)"))
            } else if proposal.stepUpCode == nil {
                decision = .refuse(
                    PolicyRefusal(policy: name, reason: "a fresh code is needed", needsStepUpCode: true))
            } else {
                lines.append("the code is checked when the change is published")
                decision = .allow
            }
            return PolicyReport(policy: name, lines: lines, decision: decision)
        }
    }

    /// Checks the proposal's code when one is needed; records and audits the attempt.
    public func review(_ proposal: Proposal, context: PolicyContext) throws -> PolicyDecision {
        if context.stepUpVerified { return .allow }
        let change = StepUpChange(proposal)
        guard let actor = try? OperatorID(proposal.actor) else {
            // An id that cannot hold an enrolment (a ':' or too long) passes only where no code is needed.
            let reasons = try store.withDatabase { db in
                try OperatorTables.isEnforced(in: db)
                    ? requiresStepUp(change, policy: try OperatorTables.policy(in: db)) : []
            }
            guard !reasons.isEmpty else { return .allow }
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary,
                    result: .stepUpRefused,
                    detail: "result not-enrolled; needed for \(reasons.map(\.code).joined(separator: ", "))"))
            return .refuse(
                PolicyRefusal(policy: name, reason: "\(proposal.actor) cannot be enrolled, so it cannot pass step-up"))
        }
        var event: StepUpAuditEvent?
        let decision = try store.withDatabase { db in
            try OperatorTables.authorize(change, by: actor, code: proposal.stepUpCode, in: db, clock: clock) {
                event = $0
            }
        }
        if let event { try context.audit(event.auditEntry) }
        switch decision.verdict {
        case .notRequired:
            return .allow
        case .accepted:
            context.stepUpVerified = true
            return .allow
        case .refused:
            let refusal = decision.refusal!
            let retryable: Bool
            switch refusal.outcome {
            case .lockedOut, .notEnrolled: retryable = false
            default: retryable = true
            }
            return .refuse(PolicyRefusal(policy: name, reason: refusal.description, needsStepUpCode: retryable))
        }
    }
}
