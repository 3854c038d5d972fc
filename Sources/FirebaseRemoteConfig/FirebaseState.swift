import Glibc
import JSON
import RemoteConfig
import Rollout
import Timekeeping
import WebClient

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
        // Each Firebase version is made by one publish: two records claiming one version cannot both be true.
        var claimedBy: [Int: Int64] = [:]
        for r in records where r.entry.result == .published {
            guard let v = r.entry.version, r.entry.detail.contains("firebase version \(v) etag ") else {
                throw ConfigIntegrityProblem(auditRecord: r.sequence, "a publish that names no Firebase version and ETag (edited?)")
            }
            if let first = claimedBy[v] {
                throw ConfigIntegrityProblem(
                    auditRecord: r.sequence,
                    "a publish that claims Firebase version \(v), as record \(first) does: one of them is not what Firebase holds")
            }
            claimedBy[v] = r.sequence
        }
        let published = claimedBy.count
        return ConfigIntegrityReport(
            auditRecords: records.count, versions: published, headSequence: last?.sequence ?? 0,
            headHash: last?.hash ?? AuditChain.genesis)
    }
}
