import Rollout
import StepUp
import StoreSupport
import Timekeeping

/// The operators' phones for step-up by SMS or voice (`stepup_phones`, a sealed table): per operator the number,
/// sealed with the store key like a TOTP secret with the operator id as associated data, the enrolment time and
/// the phone method's own lockout (consecutive wrong codes, locked until).
public enum PhoneTables {
    static let schema = """
        CREATE TABLE IF NOT EXISTS stepup_phones (
            id TEXT PRIMARY KEY,
            number BLOB NOT NULL,
            enrolled_at INTEGER NOT NULL,
            failed_attempts INTEGER NOT NULL DEFAULT 0,
            locked_until INTEGER
        )
        """

    public static func enrolment(_ id: OperatorID, in db: SQLiteDatabase) throws -> PhoneEnrolment? {
        guard try db.hasTable("stepup_phones") else { return nil }
        guard let row = try db.query(
            "SELECT number, enrolled_at, failed_attempts, locked_until FROM stepup_phones WHERE id = ?", [.text(id.rawValue)]
        ).first else { return nil }
        let opened = try key(db).openSecret(row[0].bytes ?? [], owner: id.rawValue)
        guard let text = String(validating: opened, as: UTF8.self), let number = PhoneNumber.normalized(text) else {
            throw StoredStepUpError(description: "the phone of \(id) in \(db.path) is unreadable")
        }
        return PhoneEnrolment(
            operatorID: id, number: number, enrolledAt: Instant(microseconds: row[1].int ?? 0),
            failedAttempts: Int(row[2].int ?? 0), lockedUntil: row[3].int.map { Instant(microseconds: $0) })
    }

    public static func save(_ enrolment: PhoneEnrolment, in db: SQLiteDatabase) throws {
        let id = enrolment.operatorID.rawValue
        try db.run(
            """
            INSERT INTO stepup_phones (id, number, enrolled_at, failed_attempts, locked_until) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET number = excluded.number, enrolled_at = excluded.enrolled_at,
                failed_attempts = excluded.failed_attempts, locked_until = excluded.locked_until
            """,
            [
                .text(id), .blob(try key(db).sealSecret(Array(enrolment.number.utf8), owner: id)),
                .integer(enrolment.enrolledAt.microseconds), .integer(Int64(enrolment.failedAttempts)),
                enrolment.lockedUntil.map { .integer($0.microseconds) } ?? .null,
            ])
    }

    /// Deletes the phone of `id` (with the operator's enrolment).
    public static func remove(_ id: OperatorID, in db: SQLiteDatabase) throws {
        guard try db.hasTable("stepup_phones") else { return }
        try db.run("DELETE FROM stepup_phones WHERE id = ?", [.text(id.rawValue)])
    }

    private static func key(_ db: SQLiteDatabase) throws -> StoreKey {
        guard let key = db.storeKey else {
            throw StoredStepUpError(
                description: "the store key \(StoreKey.path(forStore: db.path)) is missing: phones cannot be stored or read")
        }
        return key
    }
}

extension SQLiteStepUpStore: PhoneStepUpStore {
    public func phoneEnrolment(_ id: OperatorID) throws -> PhoneEnrolment? {
        try withStore { try PhoneTables.enrolment(id, in: $0) }
    }

    public func recordPhoneAttempt(
        _ id: OperatorID, accepted: Bool, policy: StepUpPolicy, at now: Instant, audit: (PhoneEnrolment) throws -> Void
    ) throws -> PhoneEnrolment? {
        try withStore { db in
            try db.transaction {
                guard let stored = try PhoneTables.enrolment(id, in: db) else { return nil }
                let updated = stored.after(accepted: accepted, policy: policy, at: now)
                if updated != stored { try PhoneTables.save(updated, in: db) }
                try audit(updated)
                return updated
            }
        }
    }
}
