import Glibc
import Platform
import RemoteConfig
import Timekeeping

/// A `ConfigStore` in memory with the same semantics as the durable ones; for tests and in-process demos.
public final class InMemoryConfigStore: ConfigStore, @unchecked Sendable {
    private let lock = Lock()
    private var stored: [StoredTemplate] = []
    private var audit: [AuditRecord] = []

    /// Starts with `template` as version 1.
    public init(initial template: RemoteConfigTemplate, time: Instant, user: String = "rollout") {
        let info = VersionInfo(
            number: 1, etag: InMemoryConfigStore.etag(1), updateTime: time, updateUser: user, updateOrigin: "ROLLOUT_INIT",
            updateType: .incremental, description: "initial template")
        stored = [StoredTemplate(stamping: template, info: info)]
    }

    static func etag(_ n: Int) -> String { "etag-memory-\(n)" }

    public func current() throws -> StoredTemplate { lock.withLock { stored.last! } }

    public func publish(_ request: PublishRequest) throws -> StoredTemplate {
        try lock.withLock {
            let head = stored.last!
            if case .etag(let e) = request.ifMatch, e != head.etag {
                throw PublishConflict(current: head, expectedETag: e)
            }
            let n = head.info.number + 1
            let info = VersionInfo(
                number: n, etag: InMemoryConfigStore.etag(n), updateTime: request.time, updateUser: request.updateUser,
                updateOrigin: request.updateOrigin, updateType: request.updateType, description: request.description,
                rollbackSource: request.rollbackSource)
            let s = StoredTemplate(stamping: request.template.strippingVersionInfo(), info: info)
            stored.append(s)
            var entry = request.audit
            entry.version = n
            audit.append(AuditChain.record(entry, after: audit.last))
            return s
        }
    }

    public func versions(limit: Int, before: Int?) throws -> [VersionInfo] {
        lock.withLock {
            Array(stored.reversed().map(\.info).filter { before == nil || $0.number < before! }.prefix(limit))
        }
    }

    public func version(_ number: Int) throws -> StoredTemplate {
        try lock.withLock {
            guard let s = stored.first(where: { $0.info.number == number }) else { throw StoreError.noSuchVersion(number) }
            return s
        }
    }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) throws -> AuditRecord {
        lock.withLock {
            let r = AuditChain.record(entry, after: audit.last)
            audit.append(r)
            return r
        }
    }

    public func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        lock.withLock { Array(audit.reversed().filter { before == nil || $0.sequence < before! }.prefix(limit)) }
    }
}
