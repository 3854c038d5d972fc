import JSON

/// The share of installations for which a boolean parameter is true: what a template does, not what one of its
/// fields says.
///
/// A change is judged by its effect (an import that sets the flag's default to `"true"`, or adds an earlier
/// condition serving `"true"`, exposes everyone whatever the rollout's percentage field reads), so the write path
/// measures the template it is about to publish with the evaluator's own reading of it: the same compiled
/// conditions (`FlatConditions`: operators, the nesting limit of server conditions) and the same parameter
/// programs (`ParameterProgram`: template order, the first true condition with a value wins, `useInAppDefault`
/// before `value`, an empty value is the default), and a value counts as true as the SDKs read it as a boolean
/// (`BooleanReading`: `"yes"` and `"1"` too, whatever the `valueType`).
///
/// Percentiles on `seed` are decided exactly: the percent terms on that seed cut the integer percentiles
/// `0 ... 99_999_999` into runs on which every term is constant, and each run is evaluated once. What the evaluator
/// cannot decide from a percentile on `seed` (`device.os == 'ios'`, custom signals, a percent term on another
/// seed) is taken both ways: `possible` counts a percentile where the flag may be true, `certain` one where it is
/// true whatever those terms say.
///
/// Shares count percentiles, one in 10^8 each, as a `MicroPercent`: `percent <= N` covers the N + 1 percentiles
/// `0 ... N` (`share(ofAtMost:)`), and `percent <= 99.999999` covers all of them: every installation, 100%.
/// `percentageScale` reads a share back as the rollout percentage that exposes it.
public struct Exposure: Hashable, Sendable, CustomStringConvertible {
    /// Installations for which the parameter is true whatever the undecided terms say.
    public var certain: MicroPercent
    /// Installations for which it may be true.
    public var possible: MicroPercent

    public init(certain: MicroPercent, possible: MicroPercent) {
        self.certain = certain
        self.possible = possible
    }

    public static let none = Exposure(certain: .zero, possible: .zero)

    /// The share `percent <= n` covers: the percentiles `0 ... n`, every one of them from 99.999999% up.
    public static func share(ofAtMost n: MicroPercent) -> MicroPercent {
        n.value < 0 ? .zero : MicroPercent(min(n.value + 1, MicroPercent.hundred.value))
    }

    /// A share on the scale of a rollout's percentage: the N of the `percent <= N` that covers it (a share a
    /// percent condition cannot cover exactly reads as the N just below), every installation 100%, and a share
    /// of one percentile the smallest percentage above 0, so that no exposure reads as none.
    public static func percentageScale(_ share: MicroPercent) -> MicroPercent {
        if share.value <= 0 { return .zero }
        if share >= .hundred { return .hundred }
        return MicroPercent(max(share.value - 1, 1))
    }

    /// `25%`, or `at least 10%, at most 25%` when terms the evaluator cannot decide leave a range; shares on
    /// the scale of the rollout's percentage (`percentageScale`).
    public var description: String {
        let low = Exposure.percentageScale(certain)
        let high = Exposure.percentageScale(possible)
        return low == high ? high.description : "at least \(low), at most \(high)"
    }

    /// The exposure of boolean parameter `key` in `template`, percent terms on `seed` decided exactly.
    public static func of(_ key: String, in template: RemoteConfigTemplate, seed: String) -> Exposure {
        guard let program = Program(key, in: template, seed: seed) else { return .none }
        let last = MicroPercent.hundred.value - 1
        // Where any term on `seed` changes its answer: `lower < p <= upper` changes between lower and lower + 1
        // and between upper and upper + 1. Runs are (a, b], starting below percentile 0.
        var cuts: Set<Int64> = [-1, last]
        for node in program.flat.nodes where node.kind == .percent && program.isSeed(node.slot) {
            cuts.insert(min(max(node.lower, -1), last))
            cuts.insert(min(max(node.upper, -1), last))
        }
        let points = cuts.sorted()
        var certain: Int64 = 0
        var possible: Int64 = 0
        for (a, b) in zip(points, points.dropFirst()) {
            // Every percentile in (a, b] answers alike; b stands for them.
            let answer = program.outcome(percentile: b)
            if answer.may { possible += b - a }
            if answer.must { certain += b - a }
        }
        return Exposure(certain: MicroPercent(certain), possible: MicroPercent(possible))
    }

    /// Whether boolean parameter `key` may be true, and whether it must be, for an installation at
    /// micro-percentile `percentile` on `seed`: the answer `of` sums over the percentiles.
    public static func answer(_ key: String, in template: RemoteConfigTemplate, seed: String, percentile: Int64)
        -> (may: Bool, must: Bool)
    {
        Program(key, in: template, seed: seed)?.outcome(percentile: percentile) ?? (false, false)
    }

    /// A parameter's program as the evaluator compiles it, walked three-valued for a percentile on `seed`.
    struct Program {
        let flat: FlatConditions
        /// The slot of `seed` in `flat`, if any term uses it.
        let seedSlot: Int32?
        /// In evaluation order: a condition's root (nil: a value Firebase serves where it decides, keyed by no
        /// condition of the template) and what its value may be.
        var branches: [(root: Int32?, may: Bool, must: Bool)] = []
        var fallback: (may: Bool, must: Bool)

        init?(_ key: String, in template: RemoteConfigTemplate, seed: String) {
            guard let parameter = template.parameter(key) else { return nil }
            flat = FlatConditions(template)
            seedSlot = flat.seeds.firstIndex(of: seed).map(Int32.init)
            let program = ParameterProgram(parameter, conditions: template.conditions)
            func truth(_ result: Int) -> (may: Bool, must: Bool) {
                let t = program.results[result].readsAsTrue
                return (t.may || program.decidedByFirebase[result], t.must)
            }
            fallback = truth(program.results.count - 1)
            // Values keyed by a name that is no condition of the template (a Firebase Rollout's id, `rollout_1`)
            // are served by Firebase where it decides: they may win before any condition. The evaluator, like
            // firebase-admin, never serves them, so they may be true and never must.
            let names = Set(template.conditions.map(\.name))
            for member in parameter.json["conditionalValues"]?.objectValue ?? JSONObject() where !names.contains(member.key) {
                let wrapper = member.value.objectValue ?? JSONObject()
                let may =
                    wrapper.isEmpty
                    ? fallback.may
                    : EvaluatedValue(wrapper, condition: nil).readsAsTrue.may || ParameterProgram.firebaseMayServeTrue(wrapper)
                branches.append((nil, may, false))
            }
            for b in program.branches {
                let t = truth(Int(b.result))
                branches.append((flat.roots[Int(b.condition)], t.may, t.must))
            }
        }

        func isSeed(_ slot: Int32) -> Bool { slot == seedSlot }

        /// Whether the parameter may be true, and whether it must be, for an installation at `percentile` on
        /// the seed.
        func outcome(percentile: Int64) -> (may: Bool, must: Bool) {
            var may = false
            var must = true
            for branch in branches {
                switch branch.root.map({ truth($0, percentile: percentile) }) ?? .maybe {
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

        enum Truth { case yes, no, maybe }

        /// A compiled condition's answer at `percentile` on the seed, three-valued: what the evaluator decides
        /// from a device's context (opaque terms, percent terms on another seed) is `maybe`.
        func truth(_ index: Int32, percentile p: Int64) -> Truth {
            let node = flat.nodes[Int(index)]
            let children = flat.children[Int(node.childStart)..<Int(node.childStart + node.childCount)]
            switch node.kind {
            case .constant: return node.slot == 1 ? .yes : .no
            case .tooDeep: return .no
            case .opaque: return .maybe
            case .percent:
                if node.slot == seedSlot { return node.lower < p && p <= node.upper ? .yes : .no }
                // Another seed hashes the installation anew: only a term true for every percentile or for none is
                // decided.
                let last = MicroPercent.hundred.value - 1
                if node.lower < 0 && node.upper >= last { return .yes }
                if node.upper <= node.lower || node.lower >= last || node.upper < 0 { return .no }
                return .maybe
            case .not:
                switch truth(flat.children[Int(node.childStart)], percentile: p) {
                case .yes: return .no
                case .no: return .yes
                case .maybe: return .maybe
                }
            case .and:
                var result = Truth.yes
                for child in children {
                    switch truth(child, percentile: p) {
                    case .no: return .no
                    case .maybe: result = .maybe
                    case .yes: break
                    }
                }
                return result
            case .or:
                var result = Truth.no
                for child in children {
                    switch truth(child, percentile: p) {
                    case .yes: return .yes
                    case .maybe: result = .maybe
                    case .no: break
                    }
                }
                return result
            }
        }
    }
}
