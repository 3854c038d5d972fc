import RemoteConfig

/// The names a rollout uses in the template.
public struct RolloutNames: Hashable, Sendable {
    /// The boolean flag the app reads before requesting App Check tokens.
    public var parameter: String
    /// The companion string parameter carrying the cohort (`enabled` / `control` / `none`).
    public var cohortParameter: String
    public var exposedCondition: String
    public var controlCondition: String

    public init(
        parameter: String = "AppAttestEnabled", cohortParameter: String = "AppAttestCohort",
        exposedCondition: String = "app_attest_rollout", controlCondition: String = "app_attest_control"
    ) {
        self.parameter = parameter
        self.cohortParameter = cohortParameter
        self.exposedCondition = exposedCondition
        self.controlCondition = controlCondition
    }

    public static let standard = RolloutNames()
}

/// The cohort values the app attaches to its events and crash reports.
public enum Cohort: String, Hashable, Sendable, CaseIterable {
    case enabled
    case control
    case none
}

/// Where a rollout stands, as written in the template.
public enum RolloutState: String, Hashable, Sendable, CaseIterable {
    /// The flag's conditional value is `"false"` at 0%: nobody is exposed.
    case notStarted = "not started"
    /// The flag's conditional value is `"true"`: installations at or below N% are exposed.
    case rolling
    /// The flag's conditional value is `"false"` above 0%: the kill switch is on; `resume` restores N%.
    case killed
}

/// A band of micro-percentiles `(lower, upper]`, or `[0, upper]` when `includesZero`.
public struct CohortBand: Hashable, Sendable, CustomStringConvertible {
    public var lower: MicroPercent
    public var upper: MicroPercent
    public var includesZero: Bool

    public func contains(_ percentile: Int64) -> Bool {
        includesZero ? (percentile >= 0 && percentile <= upper.value) : (lower.value < percentile && percentile <= upper.value)
    }

    /// The share of all installations in the band, in micro-percent (the zero percentile adds 1 in 10^8).
    public var width: MicroPercent { upper - lower }
    public var isEmpty: Bool { !includesZero && upper <= lower }

    public var description: String {
        includesZero ? "[0, \(upper.decimalText)]" : "(\(lower.decimalText), \(upper.decimalText)]"
    }
}

/// The rollout of the flag as one template describes it.
public struct RolloutPlan: Hashable, Sendable {
    public var names: RolloutNames
    public var percentage: MicroPercent
    public var seed: String
    public var state: RolloutState
    /// The exposed condition as written in the template.
    public var conditionText: String
    /// Which percent term of the exposed condition carries the percentage (compound conditions may have several).
    public var percentTermIndex: Int
    /// Whether the control condition and the cohort parameter exist (they are added on the first write).
    public var hasControl: Bool
    public var hasCohortParameter: Bool

    /// Installations that get the flag while rolling: percentile in `[0, N]`.
    public var exposedBand: CohortBand { RolloutPlan.exposedBand(percentage) }
    /// The control group on the same seed: `(50, 50+N]` up to 50%, `(N, 100]` above; none at 100%.
    public var controlBand: CohortBand { RolloutPlan.controlBand(percentage) }

    public static func exposedBand(_ n: MicroPercent) -> CohortBand {
        CohortBand(lower: .zero, upper: n, includesZero: true)
    }

    public static func controlBand(_ n: MicroPercent) -> CohortBand {
        n <= .fifty
            ? CohortBand(lower: .fifty, upper: .fifty + n, includesZero: false)
            : CohortBand(lower: n, upper: .hundred, includesZero: false)
    }

    /// The cohort of an installation at `percentile` under this plan.
    public func cohort(ofPercentile percentile: Int64) -> Cohort {
        guard state == .rolling else { return .none }
        if exposedBand.contains(percentile) { return .enabled }
        if controlBand.contains(percentile) { return .control }
        return .none
    }

    /// Finds the rollout of `names.parameter` in a template; nil when the template has none yet.
    ///
    /// The exposed condition is the one named `names.exposedCondition` if it has a value for the flag, otherwise
    /// the first condition (in evaluation order) with a value for the flag and a `percent <=` term.
    public static func locate(in template: RemoteConfigTemplate, names: RolloutNames = .standard) throws(RolloutError)
        -> RolloutPlan?
    {
        guard let flag = template.parameter(names.parameter) else { return nil }
        let candidates = template.conditions.filter { c in
            flag.conditionalValue(c.name) != nil && c.node.percentTerms.contains { if case .lessOrEqual = $0.op { true } else { false } }
        }
        guard let exposed = candidates.first(where: { $0.name == names.exposedCondition }) ?? candidates.first else {
            return nil
        }
        let terms = exposed.node.percentTerms
        guard let termIndex = terms.firstIndex(where: { if case .lessOrEqual = $0.op { true } else { false } }),
            case .lessOrEqual(let n) = terms[termIndex].op
        else { return nil }
        let lessOrEqualCount = terms.filter { if case .lessOrEqual = $0.op { true } else { false } }.count
        guard lessOrEqualCount == 1 else {
            throw RolloutError.unsupportedCondition(
                "condition '\(exposed.name)' has \(lessOrEqualCount) 'percent <=' terms; rollout needs exactly one")
        }
        let value = flag.conditionalValue(exposed.name)
        let state: RolloutState
        switch value {
        case .value("true")?: state = .rolling
        case .value("false")?: state = n == .zero ? .notStarted : .killed
        default:
            throw RolloutError.unsupportedCondition(
                "\(names.parameter) has value \(value?.text ?? "none") under '\(exposed.name)'; expected \"true\" or \"false\"")
        }
        var names = names
        names.exposedCondition = exposed.name
        return RolloutPlan(
            names: names, percentage: n, seed: terms[termIndex].seed ?? "", state: state, conditionText: exposed.displayText,
            percentTermIndex: termIndex, hasControl: template.condition(named: names.controlCondition) != nil,
            hasCohortParameter: template.parameter(names.cohortParameter) != nil)
    }
}

/// Why a rollout operation was refused; each says what to do instead.
public enum RolloutError: Error, Hashable, Sendable, CustomStringConvertible {
    case invalidPercentage(String)
    case notSetUp(String)
    case unsupportedCondition(String)
    case seedChangeDuringRollout(current: String, requested: String, percentage: MicroPercent)
    case unexpectedCurrent(expected: MicroPercent, actual: MicroPercent)
    case notKilled(RolloutState)
    case template(String)

    public var description: String {
        switch self {
        case .invalidPercentage(let m): m
        case .notSetUp(let m): m
        case .unsupportedCondition(let m): m
        case .seedChangeDuringRollout(let current, let requested, let n):
            "refusing to change the seed from '\(current)' to '\(requested)' while \(n) are exposed: a new seed reshuffles every installation (set 0 first)"
        case .unexpectedCurrent(let expected, let actual):
            "the rollout is at \(actual), not the expected \(expected); check 'rollout status' and try again"
        case .notKilled(let state): "nothing to resume: the rollout is \(state.rawValue), not killed"
        case .template(let m): m
        }
    }
}
