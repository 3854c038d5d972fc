import Glibc
import Platform
import Rollout
import Timekeeping

// The SQLite state store of a Firebase project (the port `FirebaseStateStore` is the core's; the Firebase adapter
// and the PostgreSQL one know nothing of this file).

/// The state store of a Firebase project: an SQLite `RolloutStore` file whose config tables hold only the audit
/// chain (Firebase holds the templates), bound to one project so that two projects never share a log.
public enum FirebaseState {
    /// The state store's file name in the per-user directory (`StoreLocation.directory`): `firebase-PROJECT.db`.
    public static func defaultFileName(project: String) -> String { "firebase-\(project).db" }

    /// Opens (with `create`, creating) the state store at `path` for `project`; refuses a store that holds template
    /// versions (an embedded store, not a state store) or belongs to another project.
    ///
    /// Without `create` (every command but `init`) nothing is created or bound: a missing state store, or a file
    /// that is not yet bound to `project`, is an error naming the path and how to adopt the project.
    public static func open(path: String, project: String, create: Bool, readOnly: Bool = false) throws -> RolloutStore
    {
        if !create, !Files.exists(path) {
            throw StoreError.unavailable(notAdopted(path: path, project: project, missing: true))
        }
        // Read-only is the connection's: a read-only session's state store refuses every write, so the write path
        // refuses publishes to Firebase too.
        let store = try RolloutStore(path: path, create: create, access: readOnly ? .readOnly : .readWrite)
        let config = try store.configStore()
        if let v = try config.versions(limit: 1, before: nil).first {
            throw StoreError.unavailable(
                "\(path) is an embedded rollout store holding template versions (newest \(v.number)), not the state store of firebase:\(project)"
            )
        }
        try store.withDatabase { db in
            let hasTable = try db.hasTable("firebase_state")
            let bound =
                hasTable ? try db.query("SELECT project FROM firebase_state WHERE id = 1").first?.first?.string : nil
            if let bound {
                guard bound == project else {
                    throw StoreError.unavailable(
                        "\(path) is the state store of firebase:\(bound), not of firebase:\(project)")
                }
                return
            }
            guard create, !readOnly else {
                throw StoreError.unavailable(notAdopted(path: path, project: project, missing: false))
            }
            try db.transaction {
                try db.execute(
                    "CREATE TABLE IF NOT EXISTS firebase_state (id INTEGER PRIMARY KEY CHECK (id = 1), project TEXT NOT NULL)"
                )
                try db.run("INSERT OR IGNORE INTO firebase_state (id, project) VALUES (1, ?)", [.text(project)])
            }
        }
        return store
    }

    /// The error of a command run before `rollout init` adopted the project with this state store.
    static func notAdopted(path: String, project: String, missing: Bool) -> String {
        (missing
            ? "no state store of firebase:\(project) at \(path)"
            : "\(path) is not yet the state store of firebase:\(project)")
            + ": adopt the project with 'rollout init --store firebase:\(project)' (it creates the state store; --state PATH puts it elsewhere), or pass --state PATH of the team's existing one; nothing was created"
    }
}

/// The `firebase_intents` table of a state store.
enum PublishIntentTable {
    static func create(in db: SQLiteDatabase) throws {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS firebase_intents (
                id INTEGER PRIMARY KEY, created_us INTEGER NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
                base_version INTEGER NOT NULL, if_match TEXT NOT NULL, content_sha256 TEXT, description TEXT NOT NULL,
                rollback_source INTEGER, update_origin TEXT NOT NULL,
                audit_time_us INTEGER NOT NULL, audit_actor TEXT NOT NULL, audit_action TEXT NOT NULL,
                audit_from TEXT NOT NULL, audit_to TEXT NOT NULL, audit_reason TEXT NOT NULL, audit_detail TEXT NOT NULL)
            """)
    }

    static func exists(in db: SQLiteDatabase) throws -> Bool {
        try db.hasTable("firebase_intents")
    }

    static func insert(_ i: PublishIntent, in db: SQLiteDatabase) throws -> Int64 {
        try create(in: db)
        try db.run(
            """
            INSERT INTO firebase_intents (created_us, host, pid, base_version, if_match, content_sha256, description,
                rollback_source, update_origin, audit_time_us, audit_actor, audit_action, audit_from, audit_to, audit_reason,
                audit_detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .integer(i.created.microseconds), .text(i.host), .integer(Int64(i.pid)), .integer(Int64(i.baseNumber)),
                .text(i.ifMatch), i.contentDigest.map { .text($0) } ?? .null, .text(i.description),
                i.rollbackSource.map { .integer(Int64($0)) } ?? .null, .text(i.origin),
                .integer(i.audit.time.microseconds), .text(i.audit.actor), .text(i.audit.action), .text(i.audit.from),
                .text(i.audit.to), .text(i.audit.reason), .text(i.audit.detail),
            ])
        return db.lastInsertRowID
    }

    static func all(in db: SQLiteDatabase) throws -> [PublishIntent] {
        guard try exists(in: db) else { return [] }
        return try db.query(
            """
            SELECT id, created_us, host, pid, base_version, if_match, content_sha256, description, rollback_source,
                update_origin, audit_time_us, audit_actor, audit_action, audit_from, audit_to, audit_reason, audit_detail
            FROM firebase_intents ORDER BY id
            """
        ).map { r in
            guard let id = r[0].int, let created = r[1].int, let host = r[2].string, let pid = r[3].int,
                let base = r[4].int, let ifMatch = r[5].string, let description = r[7].string, let origin = r[9].string,
                let time = r[10].int, let actor = r[11].string, let action = r[12].string, let from = r[13].string,
                let to = r[14].string, let reason = r[15].string, let detail = r[16].string
            else { throw StoreError.corrupt("a publish intent of the Firebase state store has an unexpected value") }
            return PublishIntent(
                id: id, created: Instant(microseconds: created), host: host, pid: Int32(truncatingIfNeeded: pid),
                baseNumber: Int(base), ifMatch: ifMatch, contentDigest: r[6].string, description: description,
                rollbackSource: r[8].int.map { Int($0) }, origin: origin,
                audit: AuditEntry(
                    time: Instant(microseconds: time), actor: actor, action: action, from: from, to: to, reason: reason,
                    result: .published, detail: detail))
        }
    }

    /// Removes the intent; false when another process settled it first.
    static func remove(_ id: Int64, in db: SQLiteDatabase) throws -> Bool {
        try db.run("DELETE FROM firebase_intents WHERE id = ?", [.integer(id)])
        return db.changes == 1
    }
}

/// The SQLite state file (a `RolloutStore` whose config tables hold only the audit chain) as the Firebase store's
/// state store.
extension SQLiteConfigStore: FirebaseStateStore {
    public var isReadOnly: Bool { database.isReadOnly }

    public func insertPublishIntent(_ intent: PublishIntent) throws -> Int64 {
        try atomically { try PublishIntentTable.insert(intent, in: database) }
    }

    public func publishIntents() throws -> [PublishIntent] {
        // Under the connection's lock (its write transaction) when the store is writable: other threads of this
        // process may be using the connection; a read-only session has no writer to wait for.
        if database.isReadOnly { return try PublishIntentTable.all(in: database) }
        return try atomically { try PublishIntentTable.all(in: database) }
    }

    public func removePublishIntent(_ id: Int64) throws -> Bool {
        try atomically { try PublishIntentTable.remove(id, in: database) }
    }

    public func verifiedAuditChain() throws -> [AuditRecord] {
        let integrity = try database.query("PRAGMA integrity_check").compactMap { $0.first?.string }
        if integrity != ["ok"] {
            throw ConfigIntegrityProblem(
                "database", "SQLite integrity check failed: \(integrity.prefix(3).joined(separator: "; "))")
        }
        let records = Array(try auditRecords(limit: Int.max, before: nil).reversed())
        if let b = AuditChain.verify(records) { throw ConfigIntegrityProblem(auditRecord: b.sequence, b.problem) }
        let head = try database.query("SELECT audit_sequence, audit_hash FROM config_head WHERE id = 1").first
        let last = records.last
        if let head {
            guard let sequence = head[0].int, let hash = head[1].string else {
                throw ConfigIntegrityProblem("chain head", "has an unexpected value (edited?)")
            }
            if sequence != (last?.sequence ?? 0) {
                throw ConfigIntegrityProblem(
                    auditRecord: min(sequence, last?.sequence ?? 0) + 1,
                    sequence > (last?.sequence ?? 0)
                        ? "missing (deleted?): the chain head is record \(sequence)"
                        : "not covered by the chain head (appended outside rollout?)")
            }
            if let last, last.hash != hash {
                throw ConfigIntegrityProblem(auditRecord: last.sequence, "does not match the chain head's hash (edited)")
            }
        } else if last != nil {
            throw ConfigIntegrityProblem("chain head", "missing (deleted?) although the store has records")
        }
        return records
    }
}
