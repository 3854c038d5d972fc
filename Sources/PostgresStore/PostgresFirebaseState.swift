import Glibc
import Platform
import Rollout
import Timekeeping

/// The PostgreSQL team store as the state store of a Firebase project (`--store firebase:PROJECT --state
/// postgresql://...`): the audit chain naming Firebase's versions and the publish intents live in the team's
/// database, beside its operators, step-up and guardrail settings, telemetry and App Check state, so that every
/// on-call engineer's console and CLI share them. Its config tables hold no template version (Firebase holds them);
/// the database is bound to one project (`firebase_state`, schema 5) so that two projects never share a log.
///
/// Concurrency is the team store's: every write runs in `PostgresConfigStore.atomically`, under the chain-head row
/// lock, so an intent's insert, its removal with the audit record, and every other audit append are totally
/// ordered. An intent id is the next after the newest (taken under that lock, as SQLite's rowid is), so the
/// writer role needs no sequence.
public final class PostgresFirebaseState: FirebaseStateStore, @unchecked Sendable {
    /// The team store's connection (the same one the session's other PostgreSQL ports use).
    public let store: PostgresConfigStore
    public let project: String

    /// The intents this connection recorded and still holds the lease of (`publishIntentOwnerIsConnected`).
    private var leases: Set<Int64> = []
    private let leaseLock = Lock()
    /// The advisory lock class of intent leases (two-key form: class, intent id).
    static let leaseClass = "5282125"

    init(store: PostgresConfigStore, project: String) {
        self.store = store
        self.project = project
    }

    /// Opens the state store of `project` at `conninfo`. With `create` (`rollout init`): creates or migrates the
    /// schema and binds the database to `project`. Without it, creates and migrates nothing: a database without a
    /// rollout schema, or not bound to `project`, is an error saying how to adopt the project. A database holding
    /// template versions (a team store of its own) or bound to another project is refused either way.
    /// `sealing`: as for `PostgresConfigStore.init`.
    public static func open(
        conninfo: String, project: String, create: Bool, readOnly: Bool = false, sealing: PostgresSealing? = nil
    ) throws
        -> PostgresFirebaseState
    {
        let shown = PostgresConfigStore.redacted(conninfo)
        if create {
            guard !readOnly else { throw PostgresStoreError.readOnly("adopting firebase:\(project)") }
            try PostgresSchema.migrating(conninfo: conninfo) { c, _ in
                try refuseForeign(c, shown: shown, project: project)
                try c.query(
                    "INSERT INTO firebase_state (id, project) VALUES (1, $1) ON CONFLICT (id) DO NOTHING", [project])
            }
        }
        let store: PostgresConfigStore
        do {
            store = try PostgresConfigStore(conninfo: conninfo, readOnly: readOnly, sealing: sealing)
        } catch let e as StoreError {
            // A database without any rollout schema has simply not adopted the project yet.
            if let c = try? PostgresConfigStore.session(conninfo), (try? PostgresSchema.version(c)) == .some(nil) {
                throw StoreError.unavailable(notAdopted(shown, project: project))
            }
            throw e
        }
        try store.readingLocked {
            try refuseForeign(store.connection, shown: shown, project: project)
            guard try store.connection.query("SELECT project FROM firebase_state WHERE id = 1").first?.first != nil
            else {
                throw StoreError.unavailable(notAdopted(shown, project: project))
            }
        }
        return PostgresFirebaseState(store: store, project: project)
    }

    /// Refuses a database that holds template versions or is bound to another project.
    private static func refuseForeign(_ c: PGConnection, shown: String, project: String) throws {
        if let n = try c.query("SELECT max(number) FROM config_versions").first?.first ?? nil {
            throw StoreError.unavailable(
                "\(shown) is a PostgreSQL team store holding template versions (newest \(n)), not the state store of firebase:\(project)"
            )
        }
        if let bound = try c.query("SELECT project FROM firebase_state WHERE id = 1").first?.first ?? nil,
            bound != project
        {
            throw StoreError.unavailable("\(shown) is the state store of firebase:\(bound), not of firebase:\(project)")
        }
    }

    static func notAdopted(_ shown: String, project: String) -> String {
        "\(shown) is not yet the state store of firebase:\(project): adopt the project with "
            + "'rollout init --store firebase:\(project) --state \(shown)' (it creates the schema), or pass the --state of the team's existing one; nothing was created"
    }

    // MARK: FirebaseStateStore

    public var isReadOnly: Bool { store.isReadOnly }

    public func atomically<T>(_ body: () throws -> T) throws -> T { try store.atomically(body) }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) throws -> AuditRecord { try store.appendAudit(entry) }

    public func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        try store.auditRecords(limit: limit, before: before)
    }

    static let intentColumns =
        "id, created_us, host, pid, base_version, if_match, content_sha256, description, rollback_source, update_origin, "
        + "audit_time_us, audit_actor, audit_action, audit_from, audit_to, audit_reason, audit_detail"

    public func insertPublishIntent(_ i: PublishIntent) throws -> Int64 {
        if isReadOnly { throw PostgresStoreError.readOnly("publish intent on a read-only store") }
        return try store.atomically {
            let rows = try store.connection.query(
                """
                INSERT INTO firebase_intents (\(Self.intentColumns))
                SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16
                FROM firebase_intents RETURNING id
                """,
                [
                    String(i.created.microseconds), i.host, String(i.pid), String(i.baseNumber), i.ifMatch,
                    i.contentDigest,
                    i.description, i.rollbackSource.map { String($0) }, i.origin, String(i.audit.time.microseconds),
                    i.audit.actor, i.audit.action, i.audit.from, i.audit.to, i.audit.reason, i.audit.detail,
                ])
            guard let text = rows.first?.first ?? nil, let id = Int64(text) else {
                throw StoreError.corrupt("the publish intent was not recorded")
            }
            // The lease: a session-level advisory lock that this connection holds until it removes the intent or
            // dies (the server releases it when a killed process's connection closes), so a process on any host
            // can tell a dead owner from a live one.
            if id <= Int64(Int32.max) {
                try store.connection.query(
                    "SELECT pg_advisory_lock($1::int4, $2::int4)", [Self.leaseClass, String(id)])
                leaseLock.withLock { _ = leases.insert(id) }
            }
            return id
        }
    }

    public func publishIntents() throws -> [PublishIntent] {
        try store.readingLocked {
            try store.connection.query("SELECT \(Self.intentColumns) FROM firebase_intents ORDER BY id").map(
                Self.intent)
        }
    }

    public func removePublishIntent(_ id: Int64) throws -> Bool {
        if isReadOnly { throw PostgresStoreError.readOnly("publish intent removal on a read-only store") }
        let removed = try store.atomically {
            try !store.connection.query("DELETE FROM firebase_intents WHERE id = $1 RETURNING id", [String(id)]).isEmpty
        }
        try releaseLease(id)
        return removed
    }

    private func releaseLease(_ id: Int64) throws {
        guard leaseLock.withLock({ leases.remove(id) }) != nil else { return }
        try store.readingLocked {
            _ = try store.connection.query(
                "SELECT pg_advisory_unlock($1::int4, $2::int4)", [Self.leaseClass, String(id)])
        }
    }

    /// Whether another connection holds intent `id`'s lease: its owner is connected (on whatever host). Intents
    /// whose id does not fit a lease key cannot tell (nil).
    public func publishIntentOwnerIsConnected(_ id: Int64) throws -> Bool? {
        guard id <= Int64(Int32.max) else { return nil }
        if leaseLock.withLock({ leases.contains(id) }) { return true }
        return try store.readingLocked {
            let c = store.connection
            guard
                try c.query("SELECT pg_try_advisory_lock($1::int4, $2::int4)", [Self.leaseClass, String(id)]).first?
                    .first == "t"
            else { return true }
            _ = try c.query("SELECT pg_advisory_unlock($1::int4, $2::int4)", [Self.leaseClass, String(id)])
            return false
        }
    }

    /// `audit verify`'s checks of the team store (the chain, its head; no version is held here) and the chain
    /// they checked, from one read-only snapshot.
    public func verifiedAuditChain() throws -> [AuditRecord] {
        try store.readingLocked {
            let c = store.connection
            try c.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            defer { try? c.execute("COMMIT") }
            do {
                _ = try PostgresConfigStore.check(c)
            } catch StoreError.corrupt(let why) {
                throw ConfigIntegrityProblem("audit log", why)
            }
            return try c.query("SELECT \(PostgresConfigStore.auditColumns) FROM config_audit ORDER BY sequence")
                .map { try PostgresConfigStore.auditRecord($0) }
        }
    }

    static func intent(_ r: [String?]) throws -> PublishIntent {
        func int(_ i: Int) -> Int64? { r[i].flatMap { Int64($0) } }
        guard r.count == 17, let id = int(0), let created = int(1), let host = r[2], let pid = int(3),
            let base = int(4),
            let ifMatch = r[5], let description = r[7], let origin = r[9], let time = int(10), let actor = r[11],
            let action = r[12], let from = r[13], let to = r[14], let reason = r[15], let detail = r[16]
        else { throw StoreError.corrupt("a publish intent of the Firebase state store has an unexpected value") }
        return PublishIntent(
            id: id, created: Instant(microseconds: created), host: host, pid: Int32(truncatingIfNeeded: pid),
            baseNumber: Int(base), ifMatch: ifMatch, contentDigest: r[6], description: description,
            rollbackSource: int(8).map { Int($0) }, origin: origin,
            audit: AuditEntry(
                time: Instant(microseconds: time), actor: actor, action: action, from: from, to: to, reason: reason,
                result: .published, detail: detail))
    }
}
