import Timekeeping

/// What a config store whose templates live elsewhere (Firebase Remote Config) needs of its state store: the audit
/// chain and the publish intents, both written inside the state store's transactions.
///
/// Firebase and the state store are two systems, so a publish cannot commit in both at once: the intent is
/// committed (one transaction) before the PUT, and removed together with the audit record naming the version
/// (one transaction) after it; a process killed in between leaves the intent for the next command to settle
/// (`FirebaseConfigStore.reconcile`). The SQLite state file and the PostgreSQL team store both implement it.
public protocol FirebaseStateStore: AnyObject {
    /// Whether every write is refused (`--read-only`, a viewer's connection).
    var isReadOnly: Bool { get }

    /// Runs `body` as one write transaction of the state store; nested calls join it.
    func atomically<T>(_ body: () throws -> T) throws -> T

    /// Appends an audit record to the chain (inside the caller's transaction when one is open).
    @discardableResult
    func appendAudit(_ entry: AuditEntry) throws -> AuditRecord

    /// Audit records newest first: up to `limit`, with sequence numbers below `before` when given.
    func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord]

    /// Records `intent` and returns its id (inside the caller's transaction when one is open).
    func insertPublishIntent(_ intent: PublishIntent) throws -> Int64

    /// Every open intent, oldest first.
    func publishIntents() throws -> [PublishIntent]

    /// Removes an intent; false when another process settled (removed) it first.
    func removePublishIntent(_ id: Int64) throws -> Bool

    /// The whole audit chain, oldest first, once the database, the chain's hashes and the chain head have been
    /// checked; throws a `ConfigIntegrityProblem` naming what fails.
    func verifiedAuditChain() throws -> [AuditRecord]

    /// Whether the process that recorded intent `id` is still connected to the state store, when the store can
    /// tell (a shared server sees its clients on every host); nil when it cannot (a file: then the pid on this
    /// host decides, and another host's intent waits out the in-flight horizon).
    func publishIntentOwnerIsConnected(_ id: Int64) throws -> Bool?
}

extension FirebaseStateStore {
    public func publishIntentOwnerIsConnected(_ id: Int64) throws -> Bool? { nil }
}

/// A publish to Firebase that was begun and whose audit record is not written yet.
///
/// The state store records the intent (what will be sent, on which base, and the audit record that goes with
/// it) and commits it before the PUT; the audit record is appended, and the intent removed, in one state-store
/// transaction once the version is known. A process killed in between leaves the intent behind, and the next
/// command settles it against Firebase's versions: applied, the audit record is completed with the version and
/// ETag Firebase gave it; not applied, the record says so. Nothing is sent again.
public struct PublishIntent: Sendable, Equatable {
    public var id: Int64
    public var created: Instant
    /// The process that sent it (its host and pid): while that process lives, it settles its own intent.
    public var host: String
    public var pid: Int32
    /// The version the publish was based on, and the `If-Match` it sent (`*` when forced).
    public var baseNumber: Int
    public var ifMatch: String
    /// SHA-256 of the published content (`FirebaseConfigStore.content`); nil only in the rollback intents of older
    /// rollouts (below).
    public var contentDigest: String?
    public var description: String
    /// Set only in intents older rollouts left for a rollback they sent with Firebase's `:rollback` (no
    /// precondition, no content digest): the version it restored, which Firebase marks the new version with. A
    /// rollback is now a conditional publish of the old template, with a digest like any other.
    public var rollbackSource: Int?
    public var origin: String
    /// The audit record to append when the publish is settled (its `version` is filled in then).
    public var audit: AuditEntry

    public init(
        id: Int64 = 0, created: Instant, host: String, pid: Int32, baseNumber: Int, ifMatch: String,
        contentDigest: String?,
        description: String, rollbackSource: Int?, origin: String, audit: AuditEntry
    ) {
        self.id = id
        self.created = created
        self.host = host
        self.pid = pid
        self.baseNumber = baseNumber
        self.ifMatch = ifMatch
        self.contentDigest = contentDigest
        self.description = description
        self.rollbackSource = rollbackSource
        self.origin = origin
        self.audit = audit
    }

    /// `If-Match: <etag>`, not forced and not an older rollout's `:rollback`: it can only ever become version
    /// `baseNumber + 1`.
    public var conditional: Bool { ifMatch != "*" && rollbackSource == nil }
}
