/// What the write path is about to do, described just enough to decide whether it needs a fresh code.
///
/// The write path fills one of these from its intent: `from` and `to` are the exposed percentage before and
/// after, in micro-percent (1% = 1_000_000), as the devices see it: a killed rollout is at 0, so `resume` to
/// 30% is `from: 0, to: 30_000_000`. `force` and `guardrailOverride` are flags on top of any kind, because a
/// forced `set` is still a `set` whose increase rules apply as well. For the kinds that move no percentage
/// (policy and operator changes) leave `from` and `to` at 0 and say what changes in `detail`.
public struct StepUpChange: Sendable, Equatable {
    /// The operations that reach the write path.
    public enum Kind: String, Sendable, CaseIterable {
        case set, nudge, kill, resume, rollback
        /// A new seed, allowed only before the rollout starts (no exposure moves).
        case reseed
        /// A whole template from a file (`config import`): may change anything.
        case importTemplate = "import"
        case policyChange = "policy-change"
        case operatorEnroll = "operator-enroll"
        case operatorRemove = "operator-remove"
        /// An App Check registration: an app (and its trust of the demo authority), a debug token, a key rotation.
        case appCheckChange = "appcheck"
    }

    public var kind: Kind
    /// The exposed percentage before the change, in micro-percent.
    public var from: Int64
    /// The exposed percentage after the change, in micro-percent.
    public var to: Int64
    /// Publishing over a concurrent change (`If-Match: *`).
    public var force: Bool
    /// Publishing although a guardrail says HOLD or HALT.
    public var guardrailOverride: Bool
    /// What a policy or operator change touches, for the audit line (`increase-over 20`, `ana@laptop`).
    public var detail: String
    /// The change removes, reseeds or retypes the rollout on purpose (`--allow-rollout-change`): always a code.
    public var protectionOverride: Bool

    public init(
        _ kind: Kind, from: Int64 = 0, to: Int64 = 0, force: Bool = false, guardrailOverride: Bool = false,
        protectionOverride: Bool = false, detail: String = ""
    ) {
        self.kind = kind
        self.from = from
        self.to = to
        self.force = force
        self.guardrailOverride = guardrailOverride
        self.protectionOverride = protectionOverride
        self.detail = detail
    }

    /// One line for the audit log and messages: `set 10% -> 30% --force`, `policy-change increase-over 20`.
    public var summary: String {
        var parts = [kind.rawValue]
        switch kind {
        case .set, .nudge, .kill, .resume, .rollback, .reseed, .importTemplate:
            parts.append("\(Percent.format(from)) -> \(Percent.format(to))")
        case .policyChange, .operatorEnroll, .operatorRemove, .appCheckChange:
            break
        }
        if !detail.isEmpty { parts.append(detail) }
        if force { parts.append("--force") }
        if guardrailOverride { parts.append("(guardrail override)") }
        if protectionOverride { parts.append("--allow-rollout-change") }
        return parts.joined(separator: " ")
    }
}

/// Why a change needs a fresh code; `code` is the stable spelling used in the audit log and JSON.
public enum StepUpReason: Sendable, Hashable, CustomStringConvertible {
    /// An increase of `points` micro-percent, more than the policy's `limit`.
    case largeIncrease(points: Int64, limit: Int64)
    /// The increase goes past `threshold` micro-percent.
    case crosses(threshold: Int64)
    case reachesFull
    case rollback
    case importTemplate
    case force
    case guardrailOverride
    case policyChange
    case operatorEnrolment
    case operatorRemoval
    case appCheckChange
    /// Removing, reseeding or retyping the rollout on purpose (`--allow-rollout-change`).
    case rolloutProtection

    /// The policy's name of the change kind this reason belongs to (`step-up.KIND`).
    public var policyKind: String {
        switch self {
        case .largeIncrease: "increase-over"
        case .crosses: "cross"
        case .reachesFull: "reach-100"
        case .rollback: "rollback"
        case .importTemplate: "import"
        case .force: "force"
        case .guardrailOverride: "guardrail-override"
        case .policyChange: "policy-change"
        case .operatorEnrolment: "operator-enroll"
        case .operatorRemoval: "operator-remove"
        case .appCheckChange: "appcheck"
        case .rolloutProtection: "rollout-change"
        }
    }

    public var code: String {
        switch self {
        case .largeIncrease: "large-increase"
        case .crosses(let t): "crosses-\(Percent.format(t, sign: false))"
        case .reachesFull: "reaches-100"
        case .rollback: "rollback"
        case .importTemplate: "import"
        case .force: "force"
        case .guardrailOverride: "guardrail-override"
        case .policyChange: "policy-change"
        case .operatorEnrolment: "operator-enroll"
        case .operatorRemoval: "operator-remove"
        case .appCheckChange: "appcheck"
        case .rolloutProtection: "rollout-change"
        }
    }

    public var description: String {
        switch self {
        case .largeIncrease(let points, let limit):
            "an increase of \(Percent.format(points, sign: false)) points, more than \(Percent.format(limit, sign: false))"
        case .crosses(let t): "it goes past \(Percent.format(t))"
        case .reachesFull: "it reaches 100%"
        case .rollback: "a rollback"
        case .importTemplate: "a template import"
        case .force: "--force"
        case .guardrailOverride: "a guardrail override"
        case .policyChange: "a policy change"
        case .operatorEnrolment: "enrolling an operator"
        case .operatorRemoval: "removing an operator"
        case .appCheckChange: "an App Check registration"
        case .rolloutProtection: "removing, reseeding or retyping the rollout (--allow-rollout-change)"
        }
    }
}

/// The reasons `change` needs a fresh code under `policy`; empty when it needs none.
///
/// Pure and total: a kill never needs a code whatever its flags (stopping exposure must never wait for a phone),
/// and a decrease needs one only for a flag (`force`, `guardrailOverride`) or a kind (`rollback`) that carries
/// its own risk. Removing an operator always needs one. Whether step-up is enforced at all (an operator is
/// enrolled) is decided by the caller; see `StepUpGate`.
public func requiresStepUp(_ change: StepUpChange, policy: StepUpPolicy) -> [StepUpReason] {
    if change.kind == .kill { return [] }
    var reasons: [StepUpReason] = []
    if change.to > change.from {
        if let limit = policy.largeIncrease, change.to - change.from > limit {
            reasons.append(.largeIncrease(points: change.to - change.from, limit: limit))
        }
        for t in policy.crossings where change.from <= t && t < change.to {
            reasons.append(.crosses(threshold: t))
        }
        if policy.reachingFull, change.to >= 100_000_000 { reasons.append(.reachesFull) }
    }
    switch change.kind {
    case .rollback where policy.rollback: reasons.append(.rollback)
    case .importTemplate where policy.importTemplate: reasons.append(.importTemplate)
    case .policyChange where policy.policyChange: reasons.append(.policyChange)
    case .operatorEnroll where policy.operatorEnrolment: reasons.append(.operatorEnrolment)
    case .operatorRemove: reasons.append(.operatorRemoval)
    case .appCheckChange where policy.appCheckChange: reasons.append(.appCheckChange)
    default: break
    }
    if change.force, policy.force { reasons.append(.force) }
    if change.guardrailOverride, policy.guardrailOverride { reasons.append(.guardrailOverride) }
    if change.protectionOverride { reasons.append(.rolloutProtection) }
    return reasons
}
