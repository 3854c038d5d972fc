import RemoteConfig
import Timekeeping

/// A proposed change as the policies see it: what it does to the rollout, who asks and with which flags.
public struct Proposal: Sendable {
    public enum Kind: String, Hashable, Sendable {
        case set, nudge, kill, resume, reseed, rollback
        /// A whole template imported from a file.
        case importTemplate = "import"
    }

    public var kind: Kind
    public var actor: String
    public var reason: String
    public var time: Instant
    /// The rollout before and after (nil before when the template has no rollout yet).
    public var before: RolloutPlan?
    public var after: RolloutPlan?
    public var summary: String
    public var diff: [String]
    /// `--force`: publish without compare-and-swap.
    public var force: Bool
    /// `--override-guardrail`: publish although a guardrail refuses (needs a reason; audited).
    public var overrideGuardrail: Bool
    /// The step-up code typed for this change, if any.
    public var stepUpCode: String?
    /// The protections of the rollout this change overrides (`--allow-rollout-change`): removing the flag, its
    /// conditions or the cohort parameter, a new seed, a changed value type. Empty for ordinary changes; when
    /// not empty the change needs a step-up code.
    public var protectionOverrides: [String] = []
    /// The plan step this change publishes (set by the plan runner only), nil for every other change.
    public var planStep: PlanStepOrigin?
    /// The version the change is applied to and its ETag (set by the write path), and the rollout's parameter:
    /// what a second factor's change document names, so an approval of one base approves nothing on another.
    public var baseVersion: Int?
    public var baseETag: String?
    public var parameter = ""
    /// A second factor's approval of this change (a security key's assertion over its change document), if any.
    public var secondFactor: SecondFactorEvidence?
    /// A second operator's approval of the same change document (the two-person rule), and who gave it.
    public var coApproval: SecondFactorEvidence?
    public var coApprover: String?
    /// A code sent to the operator's phone for this change (`--phone`), which the step-up policy checks itself.
    public var phoneApproval: PhoneApproval?

    /// What the templates before and after do: the share of installations for which the flag is `"true"`,
    /// measured by the evaluator's rules (`Exposure`), whatever the rollout's percentage field says. Set by the
    /// write path for every proposal; nil only for a proposal built elsewhere (a test, a preview of a plan step).
    public var effectBefore: Exposure?
    public var effectAfter: Exposure?

    /// The exposure the change is judged on, before and after, on the scale of the rollout's percentage
    /// (`Exposure.percentageScale`: every installation is 100%, so `set 99.999999` reaches 100%): what the
    /// devices get now or, for a killed rollout, what `resume` would expose (its percentage), so that changing a
    /// killed rollout's percentage is judged like the exposure it arms. A change that brings a killed rollout back
    /// (resume, or a rollback or import to a rolling version) starts from what is exposed now. A not-started
    /// rollout is at 0. Either side is at least what its template does (`effectBefore`, `effectAfter`): an import
    /// that serves `"true"` to everyone through its default value is a change to 100%, whatever its percentage
    /// field reads.
    ///
    /// A template whose terms the evaluator cannot decide (`app.id`, a custom signal, another seed) exposes a
    /// range, `certain` to `possible`. The change is judged on the bound it moves most: a 10% → 100% `set` beside
    /// a condition that may serve `"true"` to everyone is 10% → 100% on the certain bound although the possible
    /// bound stays at 100%, and an import that lets such a condition serve `"true"` is judged on the possible one.
    public var exposedBefore: MicroPercent { judged.before }
    public var exposedAfter: MicroPercent { judged.after }

    /// (before, after) on each bound, the armed percentage folded in, and the pair the change is judged on.
    private var judged: (before: MicroPercent, after: MicroPercent) {
        let armedAfter = Proposal.armed(after)
        func scaled(_ e: Exposure?, _ bound: KeyPath<Exposure, MicroPercent>) -> MicroPercent {
            e.map { Exposure.percentageScale($0[keyPath: bound]) } ?? .zero
        }
        let possible = (max(armedBefore, scaled(effectBefore, \.possible)), max(armedAfter, scaled(effectAfter, \.possible)))
        let certain = (max(armedBefore, scaled(effectBefore, \.certain)), max(armedAfter, scaled(effectAfter, \.certain)))
        let rise = { (p: (MicroPercent, MicroPercent)) in p.1.value - p.0.value }
        // The larger rise; without a rise the larger fall; the possible bound when both move alike.
        if rise(certain) > 0 || rise(possible) > 0 { return rise(certain) > rise(possible) ? certain : possible }
        return rise(certain) < rise(possible) ? certain : possible
    }

    /// What the rollout arms before the change; a change that brings a killed rollout back (resume, or a
    /// rollback or import to a rolling version) starts from what is exposed now, not from what it arms.
    private var armedBefore: MicroPercent {
        before?.state == .killed && after?.state == .rolling ? .zero : Proposal.armed(before)
    }

    /// Whether the templates do more or less than their rollout's percentage field says (a default of
    /// `"true"`, another condition serving `"true"`): the summary then names the effect.
    public var effectDiffersFromRollout: Bool {
        func differs(_ plan: RolloutPlan?, _ effect: Exposure?) -> Bool {
            guard let effect else { return false }
            let served = plan?.state == .rolling ? Exposure.share(ofAtMost: plan!.percentage) : .zero
            return effect.certain != served || effect.possible != served
        }
        return differs(before, effectBefore) || differs(after, effectAfter)
    }

    /// The percentage a rollout exposes or would expose on resume, on the scale of `percentageScale`.
    static func armed(_ p: RolloutPlan?) -> MicroPercent {
        guard let p, p.state != .notStarted else { return .zero }
        return Exposure.percentageScale(Exposure.share(ofAtMost: p.percentage))
    }

    /// Whether the change only lowers exposure (a kill or a decrease): never blocked by guardrails or step-up.
    public var onlyReducesExposure: Bool {
        guard !force, kind != .importTemplate, kind != .rollback, kind != .reseed, protectionOverrides.isEmpty else {
            return false
        }
        return kind == .kill || (!increasesExposure && exposedAfter < exposedBefore)
    }

    /// Whether the change raises exposure (more installations get the flag, or may): a rise of the certain share,
    /// of the possible share or of the percentage the rollout arms. Either bound alone is enough, so a condition
    /// that may serve `"true"` to everyone never hides a rise of the rollout itself.
    public var increasesExposure: Bool {
        let b = effectBefore ?? .none
        let a = effectAfter ?? .none
        return exposedAfter > exposedBefore || a.certain > b.certain || a.possible > b.possible
            || Proposal.armed(after) > armedBefore
    }
}

/// What a second factor returned for one change: the canonical change document it approved and, for a security
/// key, the credential, authenticator data and signature. The step-up policy checks that the document is this
/// proposal's change and verifies the rest; the audit record keeps all of it.
public struct SecondFactorEvidence: Sendable, Equatable {
    public var document: [UInt8]
    public var credentialID: [UInt8]
    public var authenticatorData: [UInt8]
    public var signature: [UInt8]

    public init(document: [UInt8], credentialID: [UInt8], authenticatorData: [UInt8], signature: [UInt8]) {
        self.document = document
        self.credentialID = credentialID
        self.authenticatorData = authenticatorData
        self.signature = signature
    }
}

/// A phone verification (a code sent by SMS or a voice call) offered for one change: the provider's verification
/// id and the code the operator typed, which the step-up policy itself has checked by the provider (its phone port)
/// for a verification that port started for this change and this phone. A request never says "verified": it
/// carries a code or the reason none was checked, and only the provider's answer to the policy's own check decides.
/// The code goes from the prompt to the provider and nowhere else: this value never prints it.
public struct PhoneApproval: Sendable, Equatable, CustomStringConvertible {
    public enum Submission: Sendable, Equatable {
        /// The code typed, to be checked by the provider (never printed, logged or audited).
        case code(String)
        /// No code was checked: the method did not start (locked, not accepted) or the provider refused first
        /// (409, 422, 429, ...); its words, never a code.
        case notChecked(String)

        /// The operator gave up before typing a code (an empty line at the CLI's prompt, Esc in the console): the
        /// verification was cancelled at the provider. Audited as a refused step-up; counts no attempt.
        public static let cancelled = Submission.notChecked("no code was entered; the verification was cancelled")
    }

    /// The provider's id of the verification (its request id), "-" when none was started.
    public var verification: String
    public var submission: Submission

    public init(verification: String, submission: Submission) {
        self.verification = verification
        self.submission = submission
    }

    public var description: String {
        switch submission {
        case .code: "phone verification \(verification) (a code, redacted)"
        case .notChecked(let words): "phone verification \(verification) (not checked: \(words))"
        }
    }
}

/// The ramp-plan step a change publishes, so that a pre-approval of exactly that step (a code checked when the
/// plan was started) can recognise it. Only the plan runner sets it.
public struct PlanStepOrigin: Sendable, Hashable {
    /// The stored plan's id: a digest of its file and of its start.
    public var plan: String
    /// The step, 1-based.
    public var step: Int

    public init(plan: String, step: Int) {
        self.plan = plan
        self.step = step
    }
}

/// What a policy decides about a proposal.
public enum PolicyDecision: Sendable, Equatable {
    case allow
    case refuse(PolicyRefusal)
}

/// A refusal with what a person needs to act on it.
public struct PolicyRefusal: Error, Sendable, Hashable, CustomStringConvertible {
    /// Which policy refused (`guardrail`, `step-up`, ...).
    public var policy: String
    public var reason: String
    /// What would be accepted instead (e.g. `the largest step within the budget is +2.5`).
    public var suggestion: String?
    /// What kind of refusal this is, set by the policy that refuses: what callers decide on, never the words.
    public var kind: Kind
    /// The change was not refused for good but recorded as a two-person request, with this id, that a second
    /// operator approves (`rollout approve ID`); nil for every other refusal.
    public var twoPersonRequest: String? = nil
    /// The refusal is lifted by typing a valid step-up code.
    public var needsStepUpCode: Bool { kind == .stepUpNeeded || kind == .stepUpFailed }

    /// Which policy refuses, and whether a step-up code could lift it.
    public enum Kind: Sendable, Hashable {
        /// The telemetry guardrail (the verdict, or the attestation budget).
        case guardrail
        /// Step-up: a code is needed and none was given.
        case stepUpNeeded
        /// Step-up: the code given did not pass (wrong, expired, used); a fresh code may.
        case stepUpFailed
        /// Step-up cannot pass now: the operator is not enrolled or is locked out.
        case stepUpBlocked
        /// Any other rule (a reason for an increase, rollout protection).
        case other
    }

    /// `needsStepUpCode` alone (no `kind`) means a code is needed and none was given.
    public init(
        policy: String, reason: String, suggestion: String? = nil, needsStepUpCode: Bool = false, kind: Kind? = nil
    ) {
        self.policy = policy
        self.reason = reason
        self.suggestion = suggestion
        self.kind = kind ?? (needsStepUpCode ? .stepUpNeeded : .other)
    }

    /// The reason and what would be accepted instead, without the verdict (`refused by guardrail`).
    public var detail: String { reason + (suggestion.map { "; \($0)" } ?? "") }

    public var description: String { "refused by \(policy): \(detail)" }
}

/// Which policy a report comes from, told by the policy's type rather than by its name.
public struct PolicyIdentity: Hashable, Sendable {
    private let type: ObjectIdentifier

    public init(_ policy: any WritePolicy.Type) { type = ObjectIdentifier(policy) }
}

/// What a policy shows in a preview (the console's confirm dialog, `--dry-run`).
public struct PolicyReport: Sendable, Equatable {
    public var policy: String
    /// Facts in words, e.g. `new attestations ≈ 1,240 over 30 min, peak 4.1/s (guidance 100/s)`.
    public var lines: [String]
    public var decision: PolicyDecision
    /// The policy that wrote the report (set by `WritePath.preview`), so that a caller tells e.g. the guardrail's
    /// report and refusal by type: `report.source == PolicyIdentity(TelemetryGuardrail.self)`.
    public var source: PolicyIdentity?

    public init(policy: String, lines: [String], decision: PolicyDecision) {
        self.policy = policy
        self.lines = lines
        self.decision = decision
    }
}

/// A check in the write path: guardrails, step-up verification, and whatever comes later.
///
/// `preview` must not change anything. `review` may record side effects of its own (a step-up attempt and its
/// audit record) through `context`. The write path never asks policies about changes that only reduce exposure.
public protocol WritePolicy: Sendable {
    var name: String { get }
    func preview(_ proposal: Proposal) throws -> PolicyReport
    func review(_ proposal: Proposal, context: PolicyContext) throws -> PolicyDecision
    /// Whether the policy also reviews changes that only reduce exposure, which no guardrail or step-up holds up:
    /// a policy that must act before exposure drops (App Check enforcement). False unless a policy says so.
    var reviewsReductions: Bool { get }
}

extension WritePolicy {
    public var reviewsReductions: Bool { false }
}

/// What a policy may use while reviewing: the audit log, and memory across retries of the same request.
public final class PolicyContext: @unchecked Sendable {
    public let audit: (AuditEntry) throws -> Void
    /// The audit log newest first, inside the write's transaction (`ConfigStore.auditRecords`): what the App Check
    /// enforcement policy reads to settle a change whose outcome another command left unknown.
    public let auditRecords: (_ limit: Int, _ before: Int64?) throws -> [AuditRecord]
    /// Set by the step-up policy once a code was accepted for this request, so that a retry after a conflict
    /// does not ask again (codes are single-use).
    public var stepUpVerified = false

    public init(
        audit: @escaping (AuditEntry) throws -> Void,
        auditRecords: @escaping (_ limit: Int, _ before: Int64?) throws -> [AuditRecord] = { _, _ in [] }
    ) {
        self.audit = audit
        self.auditRecords = auditRecords
    }
}
