import Crypto
import Glibc
import Rollout
import StepUp
import StoreSupport
import Telemetry
import Timekeeping

// The write path's other ports on the PostgreSQL team store: the guardrail settings and the step-up state. They
// share the config store's connection and transaction runner, so a policy's read, the attempt it records and the
// publish it allows commit together (one transaction per intent, under the chain-head row lock).

/// The guardrail settings of a PostgreSQL store (`guardrail_settings`: one row per key that was ever set).
public final class PostgresGuardrailSettings: GuardrailSettingsStore, @unchecked Sendable {
    private let store: PostgresConfigStore

    public init(store: PostgresConfigStore) { self.store = store }

    /// The stored settings; defaults for keys never set.
    public func guardrailSettings() throws -> GuardrailSettings {
        try store.reading {
            var settings = GuardrailSettings()
            for row in try store.connection.query("SELECT key, value FROM guardrail_settings ORDER BY key") {
                guard let k = row[0], let v = row[1] else { continue }
                do {
                    try settings.set(k, v)
                } catch {
                    throw PostgresStoredDataError("the guardrail setting \(k) in the PostgreSQL store is unreadable: \(error)")
                }
            }
            return settings
        }
    }

    /// Stores one validated setting (callers run this through the write policies first), under the head lock.
    public func saveGuardrailSetting(_ key: String, _ value: String) throws {
        var check = GuardrailSettings()
        try check.set(key, value)
        _ = try store.atomically {
            try store.connection.query(
                "INSERT INTO guardrail_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value])
        }
    }
}

/// The step-up port (`StepUpStore`) on a PostgreSQL store: operators with their secrets and lockout counters,
/// pending enrolments and the policy, in the same transaction as the write they decide.
///
/// Secrets are AES-256-GCM boxes under the team's store key (`StoreKey`, a file every operator's machine holds,
/// never in the database), with the operator id bound as associated data, exactly as the SQLite store keeps them;
/// a database dump alone reveals no secret. `store_key_check` holds a box of a fixed text under the key, so a
/// wrong key file is named as such instead of failing on some operator's secret.
///
/// `authorize` runs in one transaction that first takes the chain-head row lock, then reads the actor's record:
/// of two processes presenting the same code at once, the second waits for the first to commit and then sees
/// its `last_accepted_step`, so exactly one is accepted; a refused attempt still counts towards the lockout.
public final class PostgresStepUpStore: StepUpStore, StepUpPolicyStore, @unchecked Sendable {
    let store: PostgresConfigStore
    private let key: StoreKey?

    public init(store: PostgresConfigStore, key: StoreKey?) {
        self.store = store
        self.key = key
    }

    var c: PGConnection { store.connection }

    public func enforcement() throws -> StepUpEnforcement {
        try store.reading { StepUpEnforcement(policy: try stepUpPolicy(), enforced: try isEnforced()) }
    }

    public func operatorRecord(_ id: OperatorID) throws -> OperatorRecord? {
        try store.reading {
            try c.query(
                "SELECT id, encode(secret, 'hex'), enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators WHERE id = $1",
                [id.rawValue]
            ).first.map(record)
        }
    }

    public func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, at clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision {
        try store.atomically {
            let gate = StepUpGate(policy: try stepUpPolicy())
            let decision = gate.authorize(
                change, by: actor, code: code, record: try operatorRecord(actor), enforced: try isEnforced(), at: clock.now())
            if let updated = decision.record { try save(updated) }
            if let event = decision.event { try audit(event) }
            return decision
        }
    }

    // MARK: Tables (enrolment, `store copy`, tests)

    /// Whether step-up is enforced: at least one operator is enrolled.
    public func isEnforced() throws -> Bool {
        try store.reading { try !c.query("SELECT 1 FROM stepup_operators LIMIT 1").isEmpty }
    }

    /// Every enrolled operator, by id.
    public func operators() throws -> [OperatorRecord] {
        try store.reading {
            try c.query(
                "SELECT id, encode(secret, 'hex'), enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators ORDER BY id"
            ).map(record)
        }
    }

    /// Every pending enrolment, by id.
    public func pendingEnrolments() throws -> [PendingEnrolment] {
        try store.reading {
            try c.query("SELECT id, encode(secret, 'hex'), created_at, approved_by, failed_attempts FROM stepup_enrolments ORDER BY id")
                .map { row in
                    let id = try Self.storedID(row[0] ?? "")
                    return PendingEnrolment(
                        id: id, secret: try opened(row[1] ?? "", owner: id), createdAt: Instant(microseconds: Int64(row[2] ?? "") ?? 0),
                        approvedBy: try row[3].map(Self.storedID), failedAttempts: Int(row[4] ?? "") ?? 0)
                }
        }
    }

    /// Every enrolled operator without its secret (`operator list`): what the viewer role may read.
    public func operatorStandings() throws -> [OperatorStanding] {
        try store.reading {
            try c.query(
                "SELECT id, enrolled_at, last_accepted_step, failed_attempts, locked_until FROM stepup_operators ORDER BY id"
            ).map { row in
                OperatorStanding(
                    id: try Self.storedID(row[0] ?? ""), enrolledAt: Instant(microseconds: Int64(row[1] ?? "") ?? 0),
                    lastAcceptedStep: row[2].flatMap { Int64($0) }, failedAttempts: Int(row[3] ?? "") ?? 0,
                    lockedUntil: row[4].flatMap { Int64($0) }.map { Instant(microseconds: $0) })
            }
        }
    }

    /// Every pending enrolment without its secret: what the viewer role may read.
    public func pendingStandings() throws -> [PendingStanding] {
        try store.reading {
            try c.query("SELECT id, created_at, approved_by, failed_attempts FROM stepup_enrolments ORDER BY id").map { row in
                PendingStanding(
                    id: try Self.storedID(row[0] ?? ""), createdAt: Instant(microseconds: Int64(row[1] ?? "") ?? 0),
                    approvedBy: try row[2].map(Self.storedID), failedAttempts: Int(row[3] ?? "") ?? 0)
            }
        }
    }

    /// The pending enrolment of `id`, if any.
    public func pendingEnrolment(_ id: OperatorID) throws -> PendingEnrolment? {
        try pendingEnrolments().first { $0.id == id }
    }

    /// Removes the enrolled operator `id` (its secret and counters, its security key and its phone); false when
    /// there was none.
    @discardableResult
    public func remove(_ id: OperatorID) throws -> Bool {
        try store.atomically {
            _ = try c.query("DELETE FROM stepup_security_keys WHERE id = $1", [id.rawValue])
            _ = try c.query("DELETE FROM stepup_phones WHERE id = $1", [id.rawValue])
            return try !c.query("DELETE FROM stepup_operators WHERE id = $1 RETURNING id", [id.rawValue]).isEmpty
        }
    }

    /// Removes the pending enrolment of `id`, if any.
    public func removePending(_ id: OperatorID) throws {
        try store.atomically { _ = try c.query("DELETE FROM stepup_enrolments WHERE id = $1", [id.rawValue]) }
    }

    /// Inserts or replaces the record of `record.id`.
    public func save(_ record: OperatorRecord) throws {
        _ = try store.atomically {
            try c.query(
                """
                INSERT INTO stepup_operators (id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until)
                VALUES ($1, decode($2, 'hex'), $3, $4, $5, $6)
                ON CONFLICT (id) DO UPDATE SET secret = excluded.secret, enrolled_at = excluded.enrolled_at,
                    last_accepted_step = excluded.last_accepted_step, failed_attempts = excluded.failed_attempts,
                    locked_until = excluded.locked_until
                """,
                [
                    record.id.rawValue, try sealed(record.secret, owner: record.id), String(record.enrolledAt.microseconds),
                    record.lastAcceptedStep.map { String($0) }, String(record.failedAttempts),
                    record.lockedUntil.map { String($0.microseconds) },
                ])
        }
    }

    /// Inserts or replaces the pending enrolment of `enrolment.id`.
    public func savePending(_ enrolment: PendingEnrolment) throws {
        _ = try store.atomically {
            try c.query(
                """
                INSERT INTO stepup_enrolments (id, secret, created_at, approved_by, failed_attempts) VALUES ($1, decode($2, 'hex'), $3, $4, $5)
                ON CONFLICT (id) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at,
                    approved_by = excluded.approved_by, failed_attempts = excluded.failed_attempts
                """,
                [
                    enrolment.id.rawValue, try sealed(enrolment.secret, owner: enrolment.id), String(enrolment.createdAt.microseconds),
                    enrolment.approvedBy?.rawValue, String(enrolment.failedAttempts),
                ])
        }
    }

    /// The stored policy; keys never set keep their defaults.
    public func stepUpPolicy() throws -> StepUpPolicy {
        try store.reading {
            var settings: [String: String] = [:]
            for row in try c.query("SELECT key, value FROM stepup_policy") {
                if let k = row[0], let v = row[1] { settings[k] = v }
            }
            do {
                return try StepUpPolicy(settings: settings)
            } catch {
                throw PostgresStoredDataError("the step-up policy in the PostgreSQL store is unreadable: \(error)")
            }
        }
    }

    /// Stores every setting of `policy`, so that later changes of the defaults do not silently change it.
    public func saveStepUpPolicy(_ policy: StepUpPolicy) throws {
        try store.atomically {
            for s in policy.settings {
                try c.query(
                    "INSERT INTO stepup_policy (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [s.key, s.value])
            }
        }
    }

    // MARK: Security keys

    /// Inserts or replaces the security key of `credential.operatorID` (sealed like a TOTP secret).
    public func saveSecurityKeyRow(_ credential: SecurityKeyCredential) throws {
        let id = credential.operatorID
        _ = try store.atomically {
            try c.query(
                """
                INSERT INTO stepup_security_keys (id, credential, sign_count, enrolled_at) VALUES ($1, decode($2, 'hex'), $3, $4)
                ON CONFLICT (id) DO UPDATE SET credential = excluded.credential, sign_count = excluded.sign_count,
                    enrolled_at = excluded.enrolled_at
                """,
                [
                    id.rawValue, Hex.encode(try checkedKey().sealSecret(credential.sealedForm, owner: id.rawValue)),
                    String(credential.signCount), String(credential.enrolledAt.microseconds),
                ])
        }
    }

    // MARK: Secrets

    /// Whether a store key was ever recorded for this store (`store_key_check`): false until the first secret.
    public func hasKeyCheck() throws -> Bool {
        try store.reading { try !c.query("SELECT 1 FROM store_key_check WHERE id = 1").isEmpty }
    }

    package static let keyCheckText = Array("rollout team store key check v1".utf8)

    func checkedKey() throws -> StoreKey {
        try store.checkedStoreKey(key, for: "step-up secrets")
    }

    private func sealed(_ secret: TOTPSecret, owner: OperatorID) throws -> String {
        Hex.encode(try checkedKey().sealSecret(secret.bytes, owner: owner.rawValue))
    }

    private func opened(_ hex: String, owner: OperatorID) throws -> TOTPSecret {
        guard let box = Hex.decode(hex) else { throw StoreError.corrupt("the step-up secret of \(owner.rawValue) is unreadable") }
        return TOTPSecret(bytes: try checkedKey().openSecret(box, owner: owner.rawValue))
    }

    private func record(_ row: [String?]) throws -> OperatorRecord {
        let id = try Self.storedID(row[0] ?? "")
        return OperatorRecord(
            id: id, secret: try opened(row[1] ?? "", owner: id), enrolledAt: Instant(microseconds: Int64(row[2] ?? "") ?? 0),
            lastAcceptedStep: row[3].flatMap { Int64($0) }, failedAttempts: Int(row[4] ?? "") ?? 0,
            lockedUntil: row[5].flatMap { Int64($0) }.map { Instant(microseconds: $0) })
    }

    private static func storedID(_ text: String) throws -> OperatorID {
        do {
            return try OperatorID(text)
        } catch {
            throw PostgresStoredDataError("the PostgreSQL store holds an unusable operator id: \(error)")
        }
    }
}

extension PostgresConfigStore {
    /// `key`, checked against `store_key_check` (and recorded there by the first writer that has one), for the
    /// secrets named by `what` (in the error when there is no key).
    func checkedStoreKey(_ key: StoreKey?, for what: String) throws -> StoreKey {
        guard let key else {
            throw PostgresStoredDataError(
                "no store key for this PostgreSQL store: \(what) cannot be stored or read (set "
                    + "ROLLOUT_STORE_KEY to the team's key file, see docs/POSTGRES.md)")
        }
        if let box = try connection.query("SELECT encode(box, 'hex') FROM store_key_check WHERE id = 1").first?.first ?? nil {
            guard let bytes = Hex.decode(box),
                (try? key.openSecret(bytes, owner: "store key check")) == PostgresStepUpStore.keyCheckText
            else {
                throw PostgresStoredDataError("the store key \(key.path) is not this PostgreSQL store's key (another store's key?)")
            }
        } else if !isReadOnly, headLocked {
            // Only inside a write under the head lock: the key check is sealed, and such a write renews the seal.
            try connection.query(
                "INSERT INTO store_key_check (id, box) VALUES (1, decode($1, 'hex')) ON CONFLICT (id) DO NOTHING",
                [Hex.encode(key.sealSecret(PostgresStepUpStore.keyCheckText, owner: "store key check"))])
        }
        return key
    }
}

/// Data in the PostgreSQL store that this program cannot use (an unreadable setting, a malformed operator id),
/// or a missing or wrong store key.
public struct PostgresStoredDataError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension PostgresStepUpStore: SecurityKeyStore {
    /// What change documents name as this store: `postgresql` and the database's identity (the cluster's system
    /// identifier and the database's name), the same from every operator's machine whatever address it connects by.
    public func storeIdentity() throws -> String {
        try store.reading { "postgresql " + (try PostgresSeal.identity(c)) }
    }

    public func securityKey(_ id: OperatorID) throws -> SecurityKeyCredential? {
        try store.reading {
            guard let row = try c.query(
                "SELECT encode(credential, 'hex'), sign_count, enrolled_at FROM stepup_security_keys WHERE id = $1", [id.rawValue]
            ).first else { return nil }
            guard let box = Hex.decode(row[0] ?? ""), let count = row[1].flatMap({ UInt32($0) }),
                let credential = SecurityKeyCredential(
                    sealedForm: try checkedKey().openSecret(box, owner: id.rawValue), operatorID: id, signCount: count,
                    enrolledAt: Instant(microseconds: Int64(row[2] ?? "") ?? 0))
            else { throw PostgresStoredDataError("the security key of \(id.rawValue) in the PostgreSQL store is unreadable") }
            return credential
        }
    }

    public func saveSecurityKey(_ credential: SecurityKeyCredential, audit: () throws -> Void) throws {
        try store.atomically {
            try saveSecurityKeyRow(credential)
            try audit()
        }
    }

    public func authorizeSecurityKey(
        _ assertion: SecurityKeyAssertion, over document: ChangeDocument, by actor: OperatorID, at clock: any Clock,
        audit: (SecurityKeyOutcome, SecurityKeyCredential) throws -> Void
    ) throws -> SecurityKeyOutcome? {
        try store.atomically {
            guard let stored = try securityKey(actor) else { return nil }
            let (outcome, updated) = SecurityKeyVerifier.verify(assertion, over: document, credential: stored, at: clock.now())
            if updated != stored { try saveSecurityKeyRow(updated) }
            try audit(outcome, stored)
            return outcome
        }
    }
}
