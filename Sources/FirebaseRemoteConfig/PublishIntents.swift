import Glibc
import JSON
import Platform
import Rollout
import Timekeeping
import WebClient

// `PublishIntent` and the state store's port (`FirebaseStateStore`) are the core's (Sources/Rollout); the state
// stores are the SQLite adapter's (`FirebaseState`) and the PostgreSQL one's (`PostgresFirebaseState`).

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

    /// Whether process `pid` of host `host` runs, as far as this process can tell: itself, or a pid alive on this
    /// host; nil for a process on another host (the caller decides what it assumes).
    package static func runs(pid: Int32, host: String) -> Bool? {
        guard host == thisProcess.host else { return nil }
        return pid == thisProcess.pid || kill(pid, 0) == 0 || errno == EPERM
    }

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
            // Published all the same (and so audited): a forced publish, or a rollback an older rollout sent with
            // `:rollback` (which has no precondition), landed after someone else's version.
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
            let finding = try landing(of: intent, head: head, claimed: claimed)
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
        if let runs = Self.runs(pid: intent.pid, host: intent.host) { return runs }
        return (try? state.publishIntentOwnerIsConnected(intent.id)) ?? nil ?? true
    }

    enum Finding {
        case landed(StoredTemplate)
        case notFound
        /// A version it may have become is gone from Firebase (`oldest` is the oldest Firebase keeps).
        case purged(version: Int, oldest: Int)
    }

    /// The version `intent` became, if it landed: the version after its base that holds what it sent (`holds`) and
    /// that no audit record claims (`claimed`). A conditional publish (`If-Match` of its base's ETag) can only have
    /// become the version after its base; a forced one lands on whatever is newest when Firebase applies it, so every
    /// version up to `head` is a candidate. The one search of both ways of settling: `publish` after a lost answer,
    /// `reconcile` after an interruption.
    func landing(of intent: PublishIntent, head: Int, claimed: Set<Int>) throws -> Finding {
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
            if Self.holds(intent, json: v.template.json, info: v.info) { return .landed(v) }
        }
        return purged.map { .purged(version: $0.version, oldest: $0.oldest) } ?? .notFound
    }
}
