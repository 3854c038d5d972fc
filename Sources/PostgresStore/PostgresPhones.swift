import Crypto
import Rollout
import StepUp
import StoreSupport
import Timekeeping

/// The operators' phones on the PostgreSQL team store (`stepup_phones`, schema 9, a sealed table): the SQLite
/// store's table with the same columns; the number is sealed with the team store key like a TOTP secret, the
/// operator id as associated data. The viewer role has no grant on the number column (docs/POSTGRES.md).
extension PostgresStepUpStore: PhoneStepUpStore {
    public func phoneEnrolment(_ id: OperatorID) throws -> PhoneEnrolment? {
        try store.reading {
            guard let row = try c.query(
                "SELECT encode(number, 'hex'), enrolled_at, failed_attempts, locked_until FROM stepup_phones WHERE id = $1",
                [id.rawValue]
            ).first else { return nil }
            guard let box = Hex.decode(row[0] ?? ""),
                let text = String(validating: try checkedKey().openSecret(box, owner: id.rawValue), as: UTF8.self),
                let number = PhoneNumber.normalized(text), let enrolled = row[1].flatMap({ Int64($0) }),
                let failed = row[2].flatMap({ Int($0) })
            else { throw PostgresStoredDataError("the phone of \(id.rawValue) in the PostgreSQL store is unreadable") }
            return PhoneEnrolment(
                operatorID: id, number: number, enrolledAt: Instant(microseconds: enrolled), failedAttempts: failed,
                lockedUntil: row[3].flatMap { Int64($0) }.map { Instant(microseconds: $0) })
        }
    }

    public func recordPhoneAttempt(
        _ id: OperatorID, accepted: Bool, policy: StepUpPolicy, at now: Instant, audit: (PhoneEnrolment) throws -> Void
    ) throws -> PhoneEnrolment? {
        try store.atomically {
            guard let stored = try phoneEnrolment(id) else { return nil }
            let updated = stored.after(accepted: accepted, policy: policy, at: now)
            if updated != stored { try savePhoneRow(updated) }
            try audit(updated)
            return updated
        }
    }

    /// Inserts or replaces the phone of `enrolment.operatorID` (the number sealed).
    public func savePhoneRow(_ enrolment: PhoneEnrolment) throws {
        let id = enrolment.operatorID.rawValue
        _ = try store.atomically {
            try c.query(
                """
                INSERT INTO stepup_phones (id, number, enrolled_at, failed_attempts, locked_until)
                VALUES ($1, decode($2, 'hex'), $3, $4, $5)
                ON CONFLICT (id) DO UPDATE SET number = excluded.number, enrolled_at = excluded.enrolled_at,
                    failed_attempts = excluded.failed_attempts, locked_until = excluded.locked_until
                """,
                [
                    id, Hex.encode(try checkedKey().sealSecret(Array(enrolment.number.utf8), owner: id)),
                    String(enrolment.enrolledAt.microseconds), String(enrolment.failedAttempts),
                    enrolment.lockedUntil.map { String($0.microseconds) },
                ])
        }
    }
}
