import FoundationEssentials
import Glibc
import JSON
import RemoteConfig
import Rollout
import Store
import Timekeeping

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
        if !create, !FileManager.default.fileExists(atPath: path) {
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

extension FirebaseConfigStore {
    /// Adopts the project's existing template: adds the rollout (the flag, its two conditions on the genesis
    /// request's seed, the cohort parameter, all at 0% and not started) and leaves every other parameter,
    /// condition, group and rollout value as it is. Returns false when the template already has the rollout.
    @discardableResult
    public func initializeIfEmpty(_ genesis: () throws -> PublishRequest) throws -> Bool {
        let head = try fresh()
        if try RolloutPlan.locate(in: head.template) != nil { return false }
        let request = try genesis()
        guard let plan = try RolloutPlan.locate(in: request.template) else {
            throw StoreError.unavailable("the initial template has no rollout")
        }
        guard
            request.template.form == head.template.form
                || head.template.conditions.isEmpty && request.template.form == .client
        else {
            throw StoreError.unavailable(
                "firebase:\(client.project) holds a \(head.template.form.rawValue) template; a \(request.template.form.rawValue) rollout cannot be added to it"
            )
        }
        let change = try RolloutPlan.apply(
            .set(.zero, expected: nil), to: head.template.strippingVersionInfo(), newSeed: plan.seed)
        var audit = request.audit
        audit.from = "firebase version \(head.info.number) without a rollout"
        audit.detail = "seed \(plan.seed), adopted Firebase template version \(head.info.number)"
        let adopt = PublishRequest(
            template: change.template, ifMatch: .etag(head.etag), updateUser: request.updateUser,
            updateOrigin: request.updateOrigin,
            updateType: .incremental, description: "rollout: add \(plan.names.parameter) (not started)",
            time: request.time, audit: audit)
        _ = try publish(adopt)
        return true
    }

    /// Checks the state store's audit chain and head, and that every `published` record names the Firebase version
    /// and ETag it produced. (The template versions themselves are Firebase's, immutable there.)
    public func verifyIntegrity() throws -> ConfigIntegrityReport {
        let records = try state.verifiedAuditChain()
        let last = records.last
        // An interrupted publish not settled yet: its audit record is missing until it is (see `reconcile`).
        if let p = try pendingIntents().first(where: { !isLive($0, now: clock.now()) }) {
            throw ConfigIntegrityProblem(
                "publish intent \(p.id)",
                "a \(p.audit.action) by \(p.audit.actor) on version \(p.baseNumber), interrupted at \(p.created.iso8601), is not settled yet (Firebase unreachable, or the request may still land): its audit record is missing until a later command settles it"
            )
        }
        var published = 0
        for r in records where r.entry.result == .published {
            guard let v = r.entry.version, r.entry.detail.contains("firebase version \(v) etag ") else {
                throw ConfigIntegrityProblem(auditRecord: r.sequence, "a publish that names no Firebase version and ETag (edited?)")
            }
            published += 1
        }
        return ConfigIntegrityReport(
            auditRecords: records.count, versions: published, headSequence: last?.sequence ?? 0,
            headHash: last?.hash ?? AuditChain.genesis)
    }
}
