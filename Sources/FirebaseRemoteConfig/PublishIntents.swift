import Crypto
import FoundationEssentials
import Glibc
import JSON
import Platform
import Rollout
import Store
import Timekeeping

// `PublishIntent` and the state store's port (`FirebaseStateStore`) are the core's (Sources/Rollout).

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

/// What `reconcile` did with one interrupted publish.
public enum ReconciledPublish: Sendable, Equatable, CustomStringConvertible {
    /// It had landed: its audit record now names the version.
    case published(intent: Int64, version: Int)
    /// It never landed (and no longer can): recorded as not published.
    case notPublished(intent: Int64)
    /// Firebase purged the version it would have become before anyone settled it: whether it landed cannot be
    /// known any more; recorded as such (never as "not published").
    case purged(intent: Int64, version: Int)

    public var description: String {
        switch self {
        case .published(let i, let v):
            "interrupted publish \(i) had landed as Firebase version \(v): audit record completed"
        case .notPublished(let i): "interrupted publish \(i) was not applied by Firebase: recorded as not published"
        case .purged(let i, let v):
            "interrupted publish \(i): Firebase has purged version \(v), so whether it landed is unknown: recorded as such"
        }
    }
}

extension FirebaseConfigStore {
    /// The host name and pid an intent is stamped with.
    package static let thisProcess: (host: String, pid: Int32) = (CurrentUser.hostName, getpid())

    /// Publishes begun and not yet settled (none on a read-only state store that never had one).
    package func pendingIntents() throws -> [PublishIntent] { try state.publishIntents() }

    /// Records `intent` and commits it (one transaction of its own), before anything is sent.
    package func begin(_ intent: PublishIntent) throws -> Int64 {
        try state.atomically { try state.insertPublishIntent(intent) }
    }

    /// Appends the audit record of a landed publish and removes its intent, in one transaction; nothing when another
    /// process has settled it already.
    func complete(_ intent: PublishIntent, landed info: VersionInfo, note: String? = nil) throws {
        var entry = intent.audit
        entry.version = info.number
        if info.number != intent.baseNumber + 1 {
            // Published all the same (and so audited): a forced publish or a rollback (which has no precondition)
            // landed after someone else's version.
            entry.detail =
                (entry.detail.isEmpty ? "" : entry.detail + "; ")
                + "published on top of version \(info.number - 1), not \(intent.baseNumber)"
        }
        if let note { entry.detail = (entry.detail.isEmpty ? "" : entry.detail + "; ") + note }
        entry.detail = (entry.detail.isEmpty ? "" : entry.detail + "; ") + Self.auditMark(info, origin: intent.origin)
        try state.atomically {
            guard try state.removePublishIntent(intent.id) else { return }
            try state.appendAudit(entry)
        }
    }

    /// Removes the intent of a publish known not to have landed (and unable to land later) without a record: the
    /// caller reports (and the write path audits) what happened instead.
    func abandon(_ id: Int64) throws {
        try state.atomically { _ = try state.removePublishIntent(id) }
    }

    /// How long an interrupted publish that is neither found nor excluded stays pending: a request the dead
    /// process had sent in full may still be applied by Firebase for a while. Ten minutes is 20 times the
    /// default per-call timeout.
    public static let inFlightHorizon = Instant.Duration.seconds(Int64(600))

    /// Settles the publishes that an interrupted process (killed between its PUT and its audit record) left
    /// behind, against Firebase's versions: a landed one gets its audit record (with its version and ETag), one
    /// that can no longer land is recorded as not published; one that may still be in flight stays pending.
    /// Publishes of processes still running are theirs to settle. Cheap when there is nothing to settle (one
    /// query of the state store, no call to Firebase).
    @discardableResult
    public func reconcile() throws -> [ReconciledPublish] {
        let pending = try pendingIntents().filter { !isLive($0, now: clock.now()) }
        guard !pending.isEmpty else { return [] }
        var claimed = try claimedVersions()
        var out: [ReconciledPublish] = []
        for intent in pending {
            let head = try fresh().info.number
            let finding = try find(intent, below: head, claimed: claimed)
            if case .landed(let landed) = finding {
                try complete(
                    intent, landed: landed.info,
                    note: "settled after an interruption (publish intent \(intent.id))")
                claimed.insert(landed.info.number)
                out.append(.published(intent: intent.id, version: landed.info.number))
                continue
            }
            if case .purged(let version, let oldest) = finding {
                var entry = intent.audit
                entry.result = .recorded
                entry.detail =
                    (entry.detail.isEmpty ? "" : entry.detail + "; ")
                    + "outcome unknown: interrupted (publish intent \(intent.id), on version \(intent.baseNumber)), and "
                    + "Firebase purged version \(version) before it was settled (it keeps the newest 300 versions, "
                    + "each for at most 90 days; the oldest it keeps is \(oldest)); compare Firebase's history by hand"
                try state.atomically {
                    guard try state.removePublishIntent(intent.id) else { return }
                    try state.appendAudit(entry)
                }
                out.append(.purged(intent: intent.id, version: version))
                continue
            }
            let cannotLand = intent.conditional && head > intent.baseNumber
            guard cannotLand || clock.now() - intent.created >= Self.inFlightHorizon else { continue }
            var entry = intent.audit
            entry.result = .recorded
            entry.detail =
                (entry.detail.isEmpty ? "" : entry.detail + "; ")
                + "not published: interrupted before Firebase applied it (publish intent \(intent.id), on version \(intent.baseNumber); "
                + (cannotLand
                    ? "version \(intent.baseNumber + 1) is someone else's"
                    : "not found \(Self.inFlightHorizon.microseconds / 60_000_000) minutes later") + ")"
            try state.atomically {
                guard try state.removePublishIntent(intent.id) else { return }
                try state.appendAudit(entry)
            }
            out.append(.notPublished(intent: intent.id))
        }
        return out
    }

    /// Whether the process that began `intent` may still settle it itself: it runs (this process, or a pid alive on
    /// this host; on another host, still connected to a state store that can tell, else assumed), and the intent is
    /// younger than `inFlightHorizon` (after that, whoever comes next settles it, so a stuck or reused pid cannot
    /// hold it forever).
    func isLive(_ intent: PublishIntent, now: Instant) -> Bool {
        guard now - intent.created < Self.inFlightHorizon else { return false }
        if intent.host == Self.thisProcess.host {
            guard intent.pid != Self.thisProcess.pid else { return true }
            return kill(intent.pid, 0) == 0 || errno == EPERM
        }
        return (try? state.publishIntentOwnerIsConnected(intent.id)) ?? nil ?? true
    }

    enum Finding {
        case landed(StoredTemplate)
        case notFound
        /// A version it may have become is gone from Firebase (`oldest` is the oldest Firebase keeps).
        case purged(version: Int, oldest: Int)
    }

    /// The version `intent` became, if it landed: after its base, not already another record's, with its content
    /// and description (a rollback: its source).
    private func find(_ intent: PublishIntent, below head: Int, claimed: Set<Int>) throws -> Finding {
        guard head > intent.baseNumber else { return .notFound }
        let candidates =
            intent.conditional
            ? [intent.baseNumber + 1]
            : Array((intent.baseNumber + 1)...head)
        var purged: (version: Int, oldest: Int)?
        for n in candidates where !claimed.contains(n) {
            let v: StoredTemplate
            do {
                v = try version(n)
            } catch StoreError.noSuchVersion {
                continue
            } catch let p as PurgedVersion {
                if purged == nil { purged = (n, p.oldestKept) }
                continue
            }
            let ours: Bool
            if let source = intent.rollbackSource {
                ours = v.info.updateType == .rollback && v.info.rollbackSource == source
            } else {
                ours =
                    v.info.description == String(intent.description.prefix(1024))
                    && SHA256.hex(Array(Self.content(v.template.json).utf8)) == intent.contentDigest
            }
            if ours { return .landed(v) }
        }
        return purged.map { .purged(version: $0.version, oldest: $0.oldest) } ?? .notFound
    }
}
