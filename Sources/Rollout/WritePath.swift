import Platform
import RemoteConfig
import Timekeeping

/// The one path every change takes: intent → validate → policy → diff → compare-and-swap publish → audit.
///
/// The CLI and the console both call this; read-only mode, policies (guardrails, step-up) and `--force` are
/// enforced here and nowhere else, so no caller can forget them.
public struct WritePath {
    public let store: ConfigStore
    public let clock: Clock
    public let policies: [WritePolicy]
    public let names: RolloutNames
    /// Why this path refuses every write (nil: it writes); `readOnly` says whether it does.
    public let readOnlyCause: ReadOnlyCause?
    public var readOnly: Bool { readOnlyCause != nil }
    /// Draws the seed of a rollout created by its first change.
    public let newSeed: () -> String
    /// How many times a `--retry` nudge is re-applied after conflicts before giving up.
    public var retryLimit = 200
    /// Every increase of exposure needs a reason (the policy setting `increase-reason`, on by default); enforced
    /// here, for every caller: CLI, console, plans, simulator.
    public var requireReasonForIncrease: Bool

    public init(
        store: ConfigStore, clock: Clock, policies: [WritePolicy] = [], names: RolloutNames = .standard, readOnly: Bool = false,
        readOnlyCause: ReadOnlyCause? = nil, requireReasonForIncrease: Bool = true, newSeed: @escaping () -> String
    ) {
        self.store = store
        self.clock = clock
        self.policies = policies
        self.names = names
        // `readOnly` alone is the operator's `--read-only`; a store that cannot be written says why itself.
        self.readOnlyCause = readOnlyCause ?? (readOnly ? .requested : nil)
        self.requireReasonForIncrease = requireReasonForIncrease
        self.newSeed = newSeed
    }

    /// What an operator asks for.
    public enum Intent: Sendable, Equatable {
        case rollout(RolloutOperation)
        /// Publish version N's template again as a new version.
        case rollback(toVersion: Int)
        /// Publish a whole template (from `config import`).
        case importTemplate(RemoteConfigTemplate)
    }

    public struct Request: Sendable {
        public var intent: Intent
        public var actor: String
        public var reason: String
        public var origin: String
        /// Publish without compare-and-swap (`--force`; audited as forced).
        public var force = false
        /// Re-apply a nudge on top of a newer version after a conflict (`--retry`).
        public var retryOnConflict = false
        public var overrideGuardrail = false
        public var stepUpCode: String?
        /// A security key's approval of the change document (`rollout ... --security-key`).
        public var secondFactor: SecondFactorEvidence?
        /// A second operator's approval of the same document (`rollout approve`), and who gave it.
        public var coApproval: SecondFactorEvidence?
        public var coApprover: String?
        /// A code sent to the operator's phone for this change (`--phone`), which the step-up policy checks itself.
        public var phoneApproval: PhoneApproval?
        /// The ETag the operator saw (the console's confirm dialog); the change is then applied to that version
        /// only, and a newer version is a conflict.
        public var basedOnETag: String?
        /// Allow an import or rollback that removes or reseeds the rollout or changes a value type
        /// (`--allow-rollout-change`); such a change then needs a step-up code. See `RolloutProtection`.
        public var allowRolloutChange = false
        /// The plan step this change publishes (the plan runner's advances only).
        public var planStep: PlanStepOrigin?

        public init(intent: Intent, actor: String, reason: String = "", origin: String) {
            self.intent = intent
            self.actor = actor
            self.reason = reason
            self.origin = origin
        }
    }

    /// A change computed but not written.
    public struct Preview: Sendable {
        public var base: StoredTemplate
        public var proposal: Proposal
        public var template: RemoteConfigTemplate
        public var reports: [PolicyReport]
        /// The change increases exposure without a reason: the real run refuses it with this before asking any
        /// policy (`--dry-run` answers with it; the console asks for the reason after its preview).
        public var missingReason: PolicyRefusal?
        /// Nothing would change (e.g. `set 25` at 25%).
        public var isNoChange: Bool { proposal.diff.isEmpty }
    }

    public enum Outcome: Sendable {
        case published(StoredTemplate, Proposal, attempts: Int)
        case unchanged(StoredTemplate, Proposal)
    }

    /// Why a change was not published.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        case readOnly(ReadOnlyCause)
        case invalid(String)
        /// The change would take the percentage outside 0–100 (e.g. `nudge +90` at 20%): a usage error, like any
        /// other invalid percentage.
        case invalidPercentage(String)
        /// The rollout is not where the operator said it was (`set --expect`): a lost race, like a conflict.
        case unexpectedCurrent(String)
        /// The rollout refuses the operation on the template as it is (e.g. resume when not killed).
        case plan(RolloutError)
        case refused(PolicyRefusal)
        case conflict(ConflictReport)

        public var description: String {
            switch self {
            case .readOnly(let cause): "refused: " + cause.description
            case .invalid(let m): m
            case .plan(let e): e.description
            case .invalidPercentage(let m): m
            case .unexpectedCurrent(let m): m
            case .refused(let r): r.description
            case .conflict(let c): c.description
            }
        }
    }

    /// Who won a compare-and-swap race, and what they changed.
    public struct ConflictReport: Sendable, Hashable, CustomStringConvertible {
        public var winner: VersionInfo
        public var winnerChange: String
        public var current: StoredTemplate

        public init(winner: VersionInfo, winnerChange: String, current: StoredTemplate) {
            self.winner = winner
            self.winnerChange = winnerChange
            self.current = current
        }

        public var description: String {
            let why = winner.description.isEmpty ? "" : " (\"\(winner.description)\")"
            return "publish conflict: version \(winner.number) by \(winner.updateUser) at \(winner.updateTime.iso8601) \(winnerChange)\(why); nothing was written — review and retry (nudge --retry re-applies on top)"
        }
    }

    // MARK: Preview

    /// Computes the change against the current version, with the checks the real run makes before any policy
    /// (`checkedProposal`), and asks every policy for its report; writes nothing.
    public func preview(_ request: Request) throws -> Preview {
        let base = try store.current()
        let (template, proposal, missingReason) = try checkedProposal(request, on: base, audit: false)
        var reports: [PolicyReport] = []
        for p in policies {
            var report = try p.preview(proposal)
            report.source = PolicyIdentity(type(of: p))
            reports.append(report)
        }
        return Preview(
            base: base, proposal: proposal, template: template, reports: reports, missingReason: missingReason)
    }

    // MARK: Execute

    /// Validates, checks policies, publishes with compare-and-swap and audits; throws `Failure`.
    ///
    /// All of it runs in one write transaction of the store (`ConfigStore.atomically`): the policies judge the
    /// state the publish is applied to, and the publish, its audit record and the policies' own records (a
    /// step-up attempt) commit together. A refusal commits its records (the attempt counts, the refusal is
    /// audited) and publishes nothing.
    public func execute(_ request: Request) throws -> Outcome {
        // A read-only session writes nothing at all, not even the record of its refusal (its connection could
        // not, and a reader must leave the store byte for byte as it found it).
        if let readOnlyCause { throw Failure.readOnly(readOnlyCause) }
        // The version the change is based on is read before the transaction, as an operator reads it before
        // deciding: a version published in between is a conflict (compare-and-swap), not silently built upon.
        // (The store may send that read in the round trip that begins the transaction: `currentThenAtomically`.)
        let result: Result<Outcome, Failure> = try store.currentThenAtomically { seen in
            do {
                return .success(try executeOnce(request, base: seen))
            } catch let failure as Failure {
                return .failure(failure)
            }
        }
        return try result.get()
    }

    private func executeOnce(_ request: Request, base seen: StoredTemplate) throws -> Outcome {
        let context = PolicyContext(
            audit: { entry in _ = try store.appendAudit(entry) },
            auditRecords: { limit, before in try store.auditRecords(limit: limit, before: before) })
        var attempts = 0
        var base = seen
        // The change a step-up verification was given for, as judged then: a code verifies that one change.
        var verified: Judgement?
        while true {
            attempts += 1
            let (template, proposal, missingReason) = try checkedProposal(request, on: base, audit: true)
            if proposal.diff.isEmpty { return .unchanged(base, proposal) }
            if let refusal = missingReason {
                try store.appendAudit(audit(proposal, request, result: .refusedByPolicy, detail: refusal.description))
                throw Failure.refused(refusal)
            }
            // A retry on a newer base is judged anew: the verification carries over only when the change is the
            // same (from and to, and so what it needs); a code for 45% → 55% never publishes 90% → 100%.
            if context.stepUpVerified, let v = verified, v != Judgement(proposal) {
                let refusal = PolicyRefusal(
                    policy: "step-up",
                    reason: "after a conflict the change became \(Judgement(proposal)) on version \(base.info.number); "
                        + "the second factor was given for \(v)",
                    suggestion: "nothing was written; review the new version and run it again with a fresh code",
                    kind: .stepUpNeeded)
                try store.appendAudit(audit(proposal, request, result: .refusedByPolicy, detail: refusal.description))
                throw Failure.refused(refusal)
            }
            for p in policies where !proposal.onlyReducesExposure || p.reviewsReductions {
                if case .refuse(let refusal) = try p.review(proposal, context: context) {
                    try store.appendAudit(audit(proposal, request, result: .refusedByPolicy, detail: refusal.description))
                    throw Failure.refused(refusal)
                }
            }
            if context.stepUpVerified, verified == nil { verified = Judgement(proposal) }
            let publish = PublishRequest(
                template: template, ifMatch: request.force ? .any : .etag(base.etag), updateUser: request.actor,
                updateOrigin: request.origin, updateType: updateType(request), description: String(request.reason.prefix(1024)),
                rollbackSource: rollbackSource(request.intent), time: clock.now(),
                audit: audit(proposal, request, result: .published, detail: details(request, proposal)))
            do {
                let stored = try store.publish(publish)
                return .published(stored, proposal, attempts: attempts)
            } catch let c as PublishConflict {
                let retryable = request.retryOnConflict && { if case .rollout(.nudge) = request.intent { true } else { false } }()
                if retryable, attempts < retryLimit {
                    base = c.current
                    continue
                }
                throw try conflict(request, expected: base.etag, current: c.current, audit: true)
            }
        }
    }

    // MARK: Internals

    /// A change as judged for step-up: its kind, and the exposure before and after (which decide what it needs:
    /// a large increase, a crossing, reaching 100%, the two-person rule).
    private struct Judgement: Equatable, CustomStringConvertible {
        var kind: Proposal.Kind
        var from: MicroPercent
        var to: MicroPercent
        var increases: Bool

        init(_ p: Proposal) {
            kind = p.kind
            from = p.exposedBefore
            to = p.exposedAfter
            increases = p.increasesExposure
        }

        var description: String { "\(kind.rawValue) \(from) → \(to)" }
    }

    /// The change proposed on `base`, checked for what refuses it before any policy is asked. `preview` and
    /// `execute` both call this, so a dry run is refused where the real run is, with the same failure (and exit
    /// code):
    /// - a base other than the version the operator saw (`basedOnETag`) is a conflict (compare-and-swap), thrown
    ///   before anything is proposed, and audited when `audit` is set (the real run);
    /// - a change that increases exposure without a reason (`requireReasonForIncrease`) returns its refusal as
    ///   `missingReason`: the real run audits and throws it, a preview carries it.
    private func checkedProposal(_ request: Request, on base: StoredTemplate, audit: Bool) throws
        -> (template: RemoteConfigTemplate, proposal: Proposal, missingReason: PolicyRefusal?)
    {
        if let seen = request.basedOnETag, seen != base.etag {
            throw try conflict(request, expected: seen, current: base, audit: audit)
        }
        let (template, proposal) = try propose(request, on: base)
        guard requireReasonForIncrease, !proposal.diff.isEmpty, proposal.increasesExposure, request.reason.isBlank
        else { return (template, proposal, nil) }
        let refusal = PolicyRefusal(
            policy: "reason", reason: "an increase of exposure needs a reason",
            suggestion: "say why with --reason TEXT")
        return (template, proposal, refusal)
    }

    private func propose(_ request: Request, on base: StoredTemplate) throws -> (RemoteConfigTemplate, Proposal) {
        let time = clock.now()
        let current = base.template
        let template: RemoteConfigTemplate
        let before: RolloutPlan?
        let after: RolloutPlan?
        let summary: String
        var diff: [String]
        do {
            switch request.intent {
            case .rollout(let op):
                let change = try RolloutPlan.apply(op, to: current.strippingVersionInfo(), names: names, newSeed: newSeed())
                template = change.template
                (before, after, summary, diff) = (change.before, change.after, change.summary, change.diff)
            case .rollback(let n):
                let old: StoredTemplate
                do {
                    old = n == base.info.number ? base : try store.version(n)
                } catch let e as StoreError {
                    throw Failure.invalid("\(e)")
                }
                template = old.template.strippingVersionInfo()
                if let problem = RolloutProtection.shapeProblem(template) {
                    throw Failure.invalid("version \(n) cannot be restored: \(problem)")
                }
                before = try RolloutPlan.locate(in: current, names: names)
                after = try RolloutPlan.locate(in: template, names: names)
                diff = TemplateDiff.lines(from: current.strippingVersionInfo(), to: template)
                summary = "roll back to version \(n)" + (after.map { ": " + RolloutPlan.summary(before: before, after: $0) } ?? "")
            case .importTemplate(let imported):
                if let problem = RolloutProtection.shapeProblem(imported) {
                    throw Failure.invalid("invalid template: \(problem)")
                }
                template = imported.strippingVersionInfo()
                before = try RolloutPlan.locate(in: current, names: names)
                after = try RolloutPlan.locate(in: template, names: names)
                if let b = before, let a = after, b.seed != a.seed, b.state != .notStarted {
                    throw RolloutError.seedChangeDuringRollout(current: b.seed, requested: a.seed, percentage: b.percentage)
                }
                diff = TemplateDiff.lines(from: current.strippingVersionInfo(), to: template)
                summary = "import template" + (after.map { ": " + RolloutPlan.summary(before: before, after: $0) } ?? "")
            }
        } catch let e as RolloutError {
            if case .unexpectedCurrent = e { throw Failure.unexpectedCurrent(e.description) }
            if case .invalidPercentage = e { throw Failure.invalidPercentage(e.description) }
            throw Failure.plan(e)
        }
        // "No change" never publishes: a rollback to a version whose template equals the current one (the current
        // version itself included) has an empty diff, so `execute` returns `.unchanged` and writes nothing.
        // A whole-template write must not remove, reseed or retype the rollout by accident.
        var overrides: [String] = []
        switch request.intent {
        case .rollback, .importTemplate:
            let violations = RolloutProtection.violations(
                from: current, to: template, before: before, after: after, names: names)
            if !violations.isEmpty, !request.allowRolloutChange {
                throw Failure.refused(
                    PolicyRefusal(
                        policy: "rollout protection", reason: violations.joined(separator: "; "),
                        suggestion: "nothing was written; to do this on purpose pass --allow-rollout-change (needs a step-up code)"))
            }
            overrides = violations
        case .rollout: break
        }
        var proposal = Proposal(
            kind: kind(request.intent), actor: request.actor, reason: request.reason, time: time, before: before, after: after,
            summary: summary, diff: diff, force: request.force, overrideGuardrail: request.overrideGuardrail,
            stepUpCode: request.stepUpCode)
        proposal.protectionOverrides = overrides
        proposal.planStep = request.planStep
        proposal.baseVersion = base.info.number
        proposal.baseETag = base.etag
        proposal.parameter = names.parameter
        proposal.secondFactor = request.secondFactor
        proposal.coApproval = request.coApproval
        proposal.coApprover = request.coApprover
        proposal.phoneApproval = request.phoneApproval
        // No publish may leave the flag on past a kill where the current version does not: the rule `init` applies
        // when it adopts a template, applied where every publish passes.
        if let a = after {
            do {
                try RolloutPlan.requireKillStopsEveryone(
                    template, names: a.names, seed: a.seed,
                    unless: before.map { RolloutPlan.servedPastKill(current, names: $0.names, seed: $0.seed) } ?? .none)
            } catch {
                throw Failure.plan(error)
            }
        }
        // Judged by what the templates do, with the evaluator's rules, not by the percentage field alone.
        // Each template on its own rollout's seed (a share of installations is a share on any seed).
        let seed = before?.seed ?? after?.seed ?? ""
        proposal.effectBefore = Exposure.of(names.parameter, in: current, seed: seed)
        proposal.effectAfter = Exposure.of(names.parameter, in: template, seed: after?.seed ?? seed)
        if proposal.effectDiffersFromRollout, let b = proposal.effectBefore, let a = proposal.effectAfter {
            proposal.summary += "; \(names.parameter) is \"true\" for \(b) → \(a) of installations"
        }
        return (template, proposal)
    }

    private func conflict(_ request: Request, expected: String, current: StoredTemplate, audit write: Bool) throws -> Failure {
        // Describe what the winning version itself changed (against its predecessor), not everything since our base.
        var change = "published a change"
        if let previous = try? store.version(current.info.number - 1).template,
            let b = try? RolloutPlan.locate(in: previous, names: names), let a = try? RolloutPlan.locate(in: current.template, names: names)
        {
            change = b == a ? "changed other parts of the template" : "set " + RolloutPlan.summary(before: b, after: a)
        }
        let report = ConflictReport(winner: current.info, winnerChange: change, current: current)
        if write {
            try store.appendAudit(
                AuditEntry(
                    time: clock.now(), actor: request.actor, action: actionName(request.intent), reason: request.reason, result: .conflict,
                    detail: "expected \(expected), found version \(current.info.number) by \(current.info.updateUser)"))
        }
        return .conflict(report)
    }

    private func audit(_ p: Proposal, _ request: Request, result: AuditEntry.Result, detail: String) -> AuditEntry {
        AuditEntry(
            time: clock.now(), actor: request.actor, action: actionName(request.intent), from: describe(p.before), to: describe(p.after),
            reason: request.reason, result: result, detail: detail)
    }

    private func describe(_ plan: RolloutPlan?) -> String {
        guard let plan else { return "no rollout" }
        return plan.state == .rolling ? plan.percentage.description : "\(plan.percentage) (\(plan.state.rawValue))"
    }

    private func details(_ request: Request, _ proposal: Proposal) -> String {
        var parts: [String] = []
        if proposal.effectDiffersFromRollout, let b = proposal.effectBefore, let a = proposal.effectAfter {
            parts.append("effective exposure \(b) → \(a)")
        }
        if request.force { parts.append("forced (no compare-and-swap)") }
        if request.overrideGuardrail { parts.append("guardrail override") }
        if request.allowRolloutChange { parts.append("rollout protection overridden (--allow-rollout-change)") }
        if case .rollback(let n) = request.intent { parts.append("rollback of version \(n)") }
        return parts.joinedText("; ")
    }

    private func kind(_ intent: Intent) -> Proposal.Kind {
        switch intent {
        case .rollout(.set): .set
        case .rollout(.nudge): .nudge
        case .rollout(.kill): .kill
        case .rollout(.resume): .resume
        case .rollout(.reseed): .reseed
        case .rollback: .rollback
        case .importTemplate: .importTemplate
        }
    }

    private func actionName(_ intent: Intent) -> String {
        switch intent {
        case .rollout(let op): op.description
        case .rollback(let n): "rollback to \(n)"
        case .importTemplate: "import"
        }
    }

    private func updateType(_ request: Request) -> UpdateType {
        if case .rollback = request.intent { return .rollback }
        return request.force ? .forced : .incremental
    }

    private func rollbackSource(_ intent: Intent) -> Int? {
        if case .rollback(let n) = intent { return n }
        return nil
    }
}
