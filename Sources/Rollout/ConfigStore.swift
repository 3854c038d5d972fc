import JSON
import RemoteConfig
import Timekeeping

/// Where templates live: load with an ETag, publish with compare-and-swap, list versions, audit.
///
/// The semantics follow Firebase's Remote Config REST API (FACTS.md §1) so that the API itself, the embedded
/// SQLite store and a shared PostgreSQL store can all implement it: every publish creates a new version with the
/// next number; a publish whose `ifMatch` is not the current ETag fails with `PublishConflict`; a rollback is a
/// publish of an old template as a new version. The audit log is the store's, not Firebase's (Firebase keeps
/// only 300 versions and 90 days), and a publish writes its audit record in the same transaction.
public protocol ConfigStore: AnyObject {
    /// The newest version. A new store holds version 1 (the seed template).
    func current() throws -> StoredTemplate

    /// Publishes a new version if `request.ifMatch` still matches, writing `request.audit` atomically with it.
    func publish(_ request: PublishRequest) throws -> StoredTemplate

    /// Versions newest first: up to `limit`, with numbers below `before` when given.
    func versions(limit: Int, before: Int?) throws -> [VersionInfo]

    /// One version in full; `StoreError.noSuchVersion` if it does not exist.
    func version(_ number: Int) throws -> StoredTemplate

    /// Appends a record that is not a publish (a refusal, a conflict, a step-up attempt).
    @discardableResult
    func appendAudit(_ entry: AuditEntry) throws -> AuditRecord

    /// Audit records newest first: up to `limit`, with sequence numbers below `before` when given.
    func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord]

    /// Runs `body` as one write transaction: every publish, audit append and policy side effect (a step-up
    /// attempt) made inside commits together when `body` returns, and nothing of it when `body` throws. Stores
    /// that cannot group writes run `body` as it is (the default); their publish is still atomic with its audit
    /// record.
    func atomically<T>(_ body: () throws -> T) throws -> T

    /// `current()` and then `atomically(body)` with the version it read: the read is made before the transaction
    /// begins, in a snapshot of its own, so a version published between the read and the transaction is the
    /// compare-and-swap's conflict, as with the two calls. A store may send the read in the round trip that begins
    /// the transaction, ahead of it (the default makes the two calls).
    func currentThenAtomically<T>(_ body: (StoredTemplate) throws -> T) throws -> T
}

extension ConfigStore {
    public func atomically<T>(_ body: () throws -> T) throws -> T { try body() }

    public func currentThenAtomically<T>(_ body: (StoredTemplate) throws -> T) throws -> T {
        let seen = try current()
        return try atomically { try body(seen) }
    }
}

/// One stored version: the template (with `version` and `etag` filled in) and its metadata.
public struct StoredTemplate: Hashable, Sendable {
    public var template: RemoteConfigTemplate
    public var info: VersionInfo
    public var etag: String { info.etag }

    public init(template: RemoteConfigTemplate, info: VersionInfo) {
        self.template = template
        self.info = info
    }

    /// A stored version whose template gets its `version` and `etag` members from `info`, as a read from
    /// Firebase returns them; every store stamps its templates this one way.
    public init(stamping template: RemoteConfigTemplate, info: VersionInfo) {
        var t = template
        var version = JSONObject()
        version["versionNumber"] = .string(String(info.number))
        version["updateTime"] = .string(info.updateTime.iso8601)
        version["updateUser"] = ["email": .string(info.updateUser)]
        version["updateOrigin"] = .string(info.updateOrigin)
        version["updateType"] = .string(info.updateType.rawValue)
        version["description"] = .string(info.description)
        if let r = info.rollbackSource { version["rollbackSource"] = .string(String(r)) }
        t.setMember("version", .object(version))
        t.setMember("etag", .string(info.etag))
        self.init(template: t, info: info)
    }
}

/// Firebase's `updateType`.
public enum UpdateType: String, Hashable, Sendable, Codable {
    case incremental = "INCREMENTAL_UPDATE"
    case forced = "FORCED_UPDATE"
    case rollback = "ROLLBACK"
}

/// A version's metadata, as Firebase's `version` object carries it.
public struct VersionInfo: Hashable, Sendable {
    public var number: Int
    public var etag: String
    public var updateTime: Instant
    /// The operator who published (Firebase's `updateUser.email`).
    public var updateUser: String
    /// `ROLLOUT_CLI`, `ROLLOUT_CONSOLE`, `REST_API`, ...
    public var updateOrigin: String
    public var updateType: UpdateType
    /// The reason given (Firebase's writable `description`, up to 1024 characters).
    public var description: String
    public var rollbackSource: Int?

    public init(
        number: Int, etag: String, updateTime: Instant, updateUser: String, updateOrigin: String, updateType: UpdateType,
        description: String, rollbackSource: Int? = nil
    ) {
        self.number = number
        self.etag = etag
        self.updateTime = updateTime
        self.updateUser = updateUser
        self.updateOrigin = updateOrigin
        self.updateType = updateType
        self.description = description
        self.rollbackSource = rollbackSource
    }
}

/// What a publish must match: the ETag read before the change, or anything (`--force`, always audited).
public enum IfMatch: Hashable, Sendable {
    case etag(String)
    case any
}

/// A publish: the new template, the precondition, and the metadata and audit record that go with it.
public struct PublishRequest: Sendable {
    public var template: RemoteConfigTemplate
    public var ifMatch: IfMatch
    public var updateUser: String
    public var updateOrigin: String
    public var updateType: UpdateType
    public var description: String
    public var rollbackSource: Int?
    public var time: Instant
    /// Written in the same transaction; its `version` is filled in by the store.
    public var audit: AuditEntry

    public init(
        template: RemoteConfigTemplate, ifMatch: IfMatch, updateUser: String, updateOrigin: String, updateType: UpdateType,
        description: String, rollbackSource: Int? = nil, time: Instant, audit: AuditEntry
    ) {
        self.template = template
        self.ifMatch = ifMatch
        self.updateUser = updateUser
        self.updateOrigin = updateOrigin
        self.updateType = updateType
        self.description = description
        self.rollbackSource = rollbackSource
        self.time = time
        self.audit = audit
    }
}

/// Someone else published first: the version that won.
public struct PublishConflict: Error, Sendable {
    public var current: StoredTemplate
    public var expectedETag: String
    public init(current: StoredTemplate, expectedETag: String) {
        self.current = current
        self.expectedETag = expectedETag
    }
}

/// Store failures a person can act on.
public enum StoreError: Error, Sendable, CustomStringConvertible, Equatable {
    case noSuchVersion(Int)
    case corrupt(String)
    case unavailable(String)

    public var description: String {
        switch self {
        case .noSuchVersion(let n): "no version \(n) in the store"
        case .corrupt(let m): "the store is damaged: \(m)"
        case .unavailable(let m): m
        }
    }
}
