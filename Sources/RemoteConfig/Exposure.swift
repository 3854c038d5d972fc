import JSON

/// The share of installations for which a boolean parameter is `"true"`: what a template does, not what one of
/// its fields says.
///
/// A change is judged by its effect (an import that sets the flag's default to `"true"`, or adds an earlier
/// condition serving `"true"`, exposes everyone whatever the rollout's percentage field reads), so the write path
/// measures the template it is about to publish with the evaluator's own rules (FACTS.md §1): conditions in
/// template order, the first true condition with a value for the parameter wins, else the default; only the exact
/// string `"true"` is true; the app's in-app default and a missing value are the app's default, `false`.
///
/// Percentiles on `seed` are decided exactly: the percent terms on that seed cut the percentile line into
/// intervals on which every term is constant, and each interval is evaluated once. What the evaluator cannot
/// decide from a percentile on `seed` (`device.os == 'ios'`, custom signals, a percent term on another seed) is
/// taken both ways: `possible` counts an interval where the flag may be true, `certain` one where it is true
/// whatever those terms say.
///
/// Shares are in micro-percent of the percentile line taken as continuous: `percent <= N` measures exactly N
/// (the discrete percentile 0, one installation in 10^8, is counted at the line's other end), so an ordinary
/// rollout's exposure equals its percentage.
public struct Exposure: Hashable, Sendable, CustomStringConvertible {
    /// Installations for which the parameter is `"true"` whatever the undecided terms say.
    public var certain: MicroPercent
    /// Installations for which it may be `"true"`.
    public var possible: MicroPercent

    public init(certain: MicroPercent, possible: MicroPercent) {
        self.certain = certain
        self.possible = possible
    }

    public static let none = Exposure(certain: .zero, possible: .zero)

    /// `25%`, or `10%–25%` when terms the evaluator cannot decide leave a range.
    public var description: String {
        certain == possible ? possible.description : "\(certain.decimalText)%–\(possible.description)"
    }

    /// The exposure of boolean parameter `key` in `template`, percent terms on `seed` decided exactly.
    public static func of(_ key: String, in template: RemoteConfigTemplate, seed: String) -> Exposure {
        guard let program = Program(key, in: template) else { return .none }
        // Where any term on `seed` changes its answer: p <= m and p > m change between m and m + 1.
        var cuts: Set<Int64> = [0, MicroPercent.hundred.value]
        for branch in program.branches {
            for term in branch.node.percentTerms where (term.seed ?? "") == seed {
                switch term.op {
                case .lessOrEqual(let m), .greaterThan(let m): cuts.insert(clamp(m.value))
                case .between(let a, let b):
                    cuts.insert(clamp(a.value))
                    cuts.insert(clamp(b.value))
                case .unknown: break
                }
            }
        }
        let points = cuts.sorted()
        var certain: Int64 = 0
        var possible: Int64 = 0
        for (a, b) in zip(points, points.dropFirst()) {
            // Every percentile in (a, b] answers alike; b stands for them.
            let answer = program.outcome(percentile: b, seed: seed)
            if answer.may { possible += b - a }
            if answer.must { certain += b - a }
        }
        return Exposure(certain: MicroPercent(certain), possible: MicroPercent(possible))
    }

    /// Whether boolean parameter `key` may be `"true"`, and whether it must be, for an installation at
    /// micro-percentile `percentile` on `seed`: the answer `of` sums over the percentile line.
    public static func answer(_ key: String, in template: RemoteConfigTemplate, seed: String, percentile: Int64)
        -> (may: Bool, must: Bool)
    {
        Program(key, in: template)?.outcome(percentile: percentile, seed: seed) ?? (false, false)
    }

    private static func clamp(_ m: Int64) -> Int64 { min(max(m, 0), MicroPercent.hundred.value) }

    /// Whether a value the parameter may take is `"true"`: (may be, must be).
    ///
    /// `{value}` is itself; the app's in-app default, an empty value and a missing one are the app's default
    /// (`false`). Values Firebase itself decides per installation are `"true"` for some and not others: a Firebase
    /// Rollout's `rolloutValue` (for its percent of the installations), an A/B test's variants, a personalization.
    static func truth(of value: JSONValue?) -> (may: Bool, must: Bool) {
        guard let o = value?.objectValue else { return (false, false) }
        if let v = o["value"]?.stringValue { return (v == "true", v == "true") }
        if let rollout = o["rolloutValue"] { return (rollout["value"]?.stringValue == "true", false) }
        if let experiment = o["experimentValue"] {
            let variants = experiment["variantValue"]?.arrayValue ?? []
            return (variants.contains { $0["value"]?.stringValue == "true" }, false)
        }
        if o["personalizationValue"] != nil { return (true, false) }
        return (false, false)
    }

    /// A parameter's branches in evaluation order, each a condition and what its value may be, and the default.
    struct Program {
        var branches: [(node: ConditionNode, may: Bool, must: Bool)]
        var fallback: (may: Bool, must: Bool)

        init?(_ key: String, in template: RemoteConfigTemplate) {
            guard let parameter = template.parameter(key) else { return nil }
            let values = parameter.json["conditionalValues"]?.objectValue ?? JSONObject()
            fallback = Exposure.truth(of: parameter.json["defaultValue"])
            branches = []
            // Values keyed by a name that is no condition of the template (a Firebase Rollout's id, `rollout_1`)
            // are served by Firebase where it decides: they may win before any condition.
            let names = Set(template.conditions.map(\.name))
            for member in values where !names.contains(member.key) {
                let t = Exposure.truth(of: member.value)
                branches.append((.opaque(OpaqueTerm(source: .expression("rollout " + member.key))), t.may, t.must))
            }
            for condition in template.conditions {
                guard let value = values[condition.name] else { continue }
                // An empty value counts as absent (firebase-admin): the default applies when the condition holds.
                let t = (value.objectValue ?? JSONObject()).isEmpty ? fallback : Exposure.truth(of: value)
                branches.append((condition.node, t.may, t.must))
            }
        }

        /// Whether the parameter may be true, and whether it must be, for an installation at `percentile` on `seed`.
        func outcome(percentile: Int64, seed: String) -> (may: Bool, must: Bool) {
            var may = false
            var must = true
            for branch in branches {
                switch Exposure.truth(branch.node, percentile: percentile, seed: seed) {
                case .yes:
                    return (may || branch.may, must && branch.must)
                case .maybe:
                    // The branch may win (its value) or be passed over (what follows decides).
                    may = may || branch.may
                    must = must && branch.must
                case .no:
                    continue
                }
            }
            return (may || fallback.may, must && fallback.must)
        }
    }

    enum Truth { case yes, no, maybe }

    /// A condition's answer at `percentile` on `seed`, three-valued: terms the evaluator cannot decide are `maybe`.
    static func truth(_ node: ConditionNode, percentile p: Int64, seed: String) -> Truth {
        switch node {
        case .constant(let b): return b ? .yes : .no
        case .percent(let term):
            // An unknown operator is false for firebase-admin, on any seed.
            if case .unknown = term.op { return .no }
            if (term.seed ?? "") == seed { return term.matches(microPercentile: p) ? .yes : .no }
            // Another seed hashes the installation anew: only a term true for every percentile or for none is
            // decided.
            let last = MicroPercent.hundred.value - 1
            if term.matches(microPercentile: 0), term.matches(microPercentile: last) { return .yes }
            switch term.op {
            case .between(let a, let b) where b.value <= a.value: return .no
            case .greaterThan(let m) where m.value >= last: return .no
            default: break
            }
            return .maybe
        case .not(let inner):
            switch truth(inner, percentile: p, seed: seed) {
            case .yes: return .no
            case .no: return .yes
            case .maybe: return .maybe
            }
        case .and(let items):
            var result = Truth.yes
            for item in items {
                switch truth(item, percentile: p, seed: seed) {
                case .no: return .no
                case .maybe: result = .maybe
                case .yes: break
                }
            }
            return result
        case .or(let items):
            var result = Truth.no
            for item in items {
                switch truth(item, percentile: p, seed: seed) {
                case .yes: return .yes
                case .maybe: result = .maybe
                case .no: break
                }
            }
            return result
        case .opaque: return .maybe
        }
    }
}
