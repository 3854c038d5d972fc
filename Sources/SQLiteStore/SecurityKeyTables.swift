import Rollout
import StepUp
import StoreSupport
import Timekeeping

/// The operators' security keys (`stepup_security_keys`, a sealed table): per operator the credential (relying
/// party, credential id, COSE public key), sealed with the store key like a TOTP secret with the operator id as
/// associated data, the signature counter of the last accepted assertion and the enrolment time.
public enum SecurityKeyTables {
    static let schema = """
        CREATE TABLE IF NOT EXISTS stepup_security_keys (
            id TEXT PRIMARY KEY,
            credential BLOB NOT NULL,
            sign_count INTEGER NOT NULL,
            enrolled_at INTEGER NOT NULL
        )
        """

    public static func credential(_ id: OperatorID, in db: SQLiteDatabase) throws -> SecurityKeyCredential? {
        guard try db.hasTable("stepup_security_keys") else { return nil }
        guard let row = try db.query(
            "SELECT credential, sign_count, enrolled_at FROM stepup_security_keys WHERE id = ?", [.text(id.rawValue)]
        ).first else { return nil }
        let opened = try key(db).openSecret(row[0].bytes ?? [], owner: id.rawValue)
        guard let count = row[1].int, let n = UInt32(exactly: count),
            let credential = SecurityKeyCredential(
                sealedForm: opened, operatorID: id, signCount: n, enrolledAt: Instant(microseconds: row[2].int ?? 0))
        else { throw StoredStepUpError(description: "the security key of \(id) in \(db.path) is unreadable") }
        return credential
    }

    public static func save(_ credential: SecurityKeyCredential, in db: SQLiteDatabase) throws {
        let id = credential.operatorID.rawValue
        try db.run(
            """
            INSERT INTO stepup_security_keys (id, credential, sign_count, enrolled_at) VALUES (?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET credential = excluded.credential, sign_count = excluded.sign_count,
                enrolled_at = excluded.enrolled_at
            """,
            [
                .text(id), .blob(try key(db).sealSecret(credential.sealedForm, owner: id)),
                .integer(Int64(credential.signCount)), .integer(credential.enrolledAt.microseconds),
            ])
    }

    /// Deletes the security key of `id` (with the operator's enrolment).
    public static func remove(_ id: OperatorID, in db: SQLiteDatabase) throws {
        guard try db.hasTable("stepup_security_keys") else { return }
        try db.run("DELETE FROM stepup_security_keys WHERE id = ?", [.text(id.rawValue)])
    }

    private static func key(_ db: SQLiteDatabase) throws -> StoreKey {
        guard let key = db.storeKey else {
            throw StoredStepUpError(
                description: "the store key \(StoreKey.path(forStore: db.path)) is missing: security keys cannot be "
                    + "stored or checked")
        }
        return key
    }
}

extension SQLiteStepUpStore: SecurityKeyStore {
    public func securityKey(_ id: OperatorID) throws -> SecurityKeyCredential? {
        try withStore { try SecurityKeyTables.credential(id, in: $0) }
    }

    public func saveSecurityKey(_ credential: SecurityKeyCredential, audit: () throws -> Void) throws {
        try withStore { db in
            try db.transaction {
                try SecurityKeyTables.save(credential, in: db)
                try audit()
            }
        }
    }

    public func authorizeSecurityKey(
        _ assertion: SecurityKeyAssertion, over document: ChangeDocument, by actor: OperatorID, at clock: any Clock,
        audit: (SecurityKeyOutcome, SecurityKeyCredential) throws -> Void
    ) throws -> SecurityKeyOutcome? {
        try withStore { db in
            try db.transaction {
                guard let stored = try SecurityKeyTables.credential(actor, in: db) else { return nil }
                let (outcome, updated) = SecurityKeyVerifier.verify(
                    assertion, over: document, credential: stored, at: clock.now())
                if updated != stored { try SecurityKeyTables.save(updated, in: db) }
                try audit(outcome, stored)
                return outcome
            }
        }
    }
}
