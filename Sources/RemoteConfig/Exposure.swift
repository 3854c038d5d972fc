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
        guard let parameter = template.parameter(key) else { return .none }
        let program = ParameterProgram(parameter, conditions: template.conditions)
        let truthy = program.results.map { $0.source == .remote && $0.value == "true" }
        let branches = program.branches.map { (node: template.conditions[Int($0.condition)].node, true: truthy[Int($0.result)]) }
        let fallback = truthy[truthy.count - 1]

        // Where any term on `seed` changes its answer: p <= m and p > m change between m and m + 1.
        var cuts: Set<Int64> = [0, MicroPercent.hundred.value]
        for branch in branches {
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
            let (may, must) = outcome(branches, fallback: fallback, percentile: b, seed: seed)
            if may { possible += b - a }
            if must { certain += b - a }
        }
        return Exposure(certain: MicroPercent(certain), possible: MicroPercent(possible))
    }

    /// Whether boolean parameter `key` may be `"true"`, and whether it must be, for an installation at
    /// micro-percentile `percentile` on `seed`: the answer `of` sums over the percentile line.
    public static func answer(_ key: String, in template: RemoteConfigTemplate, seed: String, percentile: Int64)
        -> (may: Bool, must: Bool)
    {
        guard let parameter = template.parameter(key) else { return (false, false) }
        let program = ParameterProgram(parameter, conditions: template.conditions)
        let truthy = program.results.map { $0.source == .remote && $0.value == "true" }
        let branches = program.branches.map { (node: template.conditions[Int($0.condition)].node, true: truthy[Int($0.result)]) }
        return outcome(branches, fallback: truthy[truthy.count - 1], percentile: percentile, seed: seed)
    }

    private static func clamp(_ m: Int64) -> Int64 { min(max(m, 0), MicroPercent.hundred.value) }

    /// Whether the parameter may be true, and whether it must be, for an installation at `percentile` on `seed`.
    private static func outcome(
        _ branches: [(node: ConditionNode, true: Bool)], fallback: Bool, percentile: Int64, seed: String
    ) -> (may: Bool, must: Bool) {
        var may = false
        var must = true
        for branch in branches {
            switch truth(branch.node, percentile: percentile, seed: seed) {
            case .yes:
                return (may || branch.true, must && branch.true)
            case .maybe:
                // The branch may win (its value) or be passed over (what follows decides).
                may = may || branch.true
                must = must && branch.true
            case .no:
                continue
            }
        }
        return (may || fallback, must && fallback)
    }

    private enum Truth { case yes, no, maybe }

    /// A condition's answer at `percentile` on `seed`, three-valued: terms the evaluator cannot decide are `maybe`.
    private static func truth(_ node: ConditionNode, percentile p: Int64, seed: String) -> Truth {
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
