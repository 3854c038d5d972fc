import JSON

/// What a device provides when conditions are evaluated.
public struct EvaluationContext: Sendable {
    /// The Firebase installation ID (the randomization id of percent conditions).
    public var randomizationId: String
    /// Decides opaque terms (`device.os == 'ios'`, custom signals); nil means "not known here" (false, noted).
    public var resolveOpaque: (@Sendable (OpaqueTerm) -> Bool?)?

    public init(randomizationId: String, resolveOpaque: (@Sendable (OpaqueTerm) -> Bool?)? = nil) {
        self.randomizationId = randomizationId
        self.resolveOpaque = resolveOpaque
    }
}

/// The value a parameter takes for one device.
public struct EvaluatedValue: Hashable, Sendable {
    public enum Source: String, Sendable {
        /// From the template (a conditional value or the default value).
        case remote
        /// The app's own in-app default (`useInAppDefault`).
        case inAppDefault = "default"
        /// No value at all (the parameter or its default is missing): the SDK's static default.
        case `static`
    }

    public var value: String?
    public var source: Source
    /// The condition whose conditional value applied, if any.
    public var condition: String?
    /// Why parts of conditions were taken as false (opaque terms without context), for display.
    public var notes: [String]
}

/// Evaluates templates exactly as firebase-admin 7.7.0 does (FACTS.md §1).
///
/// Compile once, evaluate many: conditions are pre-parsed, percentile hashers are built once per seed, and an
/// installation's percentile is computed once per seed even when several conditions share it.
public struct TemplateEvaluator: Sendable {
    public let template: RemoteConfigTemplate
    private let hashers: [String: PercentileHasher]
    /// firebase-admin stops at nesting level 10 of server conditions (counting or/and wrappers twice).
    private let nestingLimit: Int?

    public init(_ template: RemoteConfigTemplate) {
        self.template = template
        var seeds = Set<String>()
        for c in template.conditions {
            for p in c.node.percentTerms { seeds.insert(p.seed ?? "") }
        }
        var h: [String: PercentileHasher] = [:]
        for s in seeds { h[s] = PercentileHasher(seed: s) }
        hashers = h
        nestingLimit = template.form == .server ? 10 : nil
    }

    /// The value of parameter `key` for a device.
    public func value(of key: String, for context: EvaluationContext) -> EvaluatedValue {
        var state = EvaluationState(context: context)
        return value(of: key, state: &state)
    }

    /// The values of several parameters for one device, hashing each seed once.
    public func values(of keys: [String], for context: EvaluationContext) -> [EvaluatedValue] {
        var state = EvaluationState(context: context)
        return keys.map { key in
            state.notes = []
            return value(of: key, state: &state)
        }
    }

    private func value(of key: String, state: inout EvaluationState) -> EvaluatedValue {
        guard let parameter = template.parameter(key) else {
            return EvaluatedValue(value: nil, source: .static, condition: nil, notes: ["no parameter '\(key)' in the template"])
        }
        let conditional = parameter.json["conditionalValues"]?.objectValue ?? JSONObject()
        // Conditions are tried in the template's order; the first true one with a value for this key wins.
        for c in template.conditions where conditional[c.name] != nil {
            guard evaluate(c.node, level: 0, state: &state) else { continue }
            let wrapper = conditional[c.name]!.objectValue ?? JSONObject()
            // firebase-admin treats an empty conditional value as absent and falls through to the default.
            if wrapper.isEmpty { break }
            if wrapper["useInAppDefault"]?.boolValue == true {
                return EvaluatedValue(value: nil, source: .inAppDefault, condition: c.name, notes: state.notes)
            }
            return EvaluatedValue(value: wrapper["value"]?.stringValue, source: .remote, condition: c.name, notes: state.notes)
        }
        guard let d = parameter.json["defaultValue"]?.objectValue, !d.isEmpty else {
            return EvaluatedValue(value: nil, source: .static, condition: nil, notes: state.notes)
        }
        if d["useInAppDefault"]?.boolValue == true {
            return EvaluatedValue(value: nil, source: .inAppDefault, condition: nil, notes: state.notes)
        }
        return EvaluatedValue(value: d["value"]?.stringValue, source: .remote, condition: nil, notes: state.notes)
    }

    /// Whether the named condition is true for a device.
    public func conditionMatches(_ name: String, for context: EvaluationContext) -> Bool {
        guard let c = template.condition(named: name) else { return false }
        var state = EvaluationState(context: context)
        return evaluate(c.node, level: 0, state: &state)
    }

    /// The micro-percentile of a device for `seed`.
    public func microPercentile(seed: String, randomizationId: String) -> Int64 {
        (hashers[seed] ?? PercentileHasher(seed: seed)).microPercentile(of: randomizationId)
    }

    struct EvaluationState {
        let context: EvaluationContext
        var percentiles: [String: Int64] = [:]
        var notes: [String] = []
    }

    private func evaluate(_ node: ConditionNode, level: Int, state: inout EvaluationState) -> Bool {
        if let limit = nestingLimit, level >= limit {
            state.notes.append("condition nested deeper than firebase-admin evaluates; taken as false")
            return false
        }
        switch node {
        case .constant(let b): return b
        case .not(let inner): return !evaluate(inner, level: level + 1, state: &state)
        case .and(let items):
            for item in items where !evaluate(item, level: level + 2, state: &state) { return false }
            return true
        case .or(let items):
            for item in items where evaluate(item, level: level + 2, state: &state) { return true }
            return false
        case .percent(let term):
            let id = state.context.randomizationId
            guard !id.isEmpty else { return false }
            let seed = term.seed ?? ""
            let p: Int64
            if let cached = state.percentiles[seed] {
                p = cached
            } else {
                p = (hashers[seed] ?? PercentileHasher(seed: seed)).microPercentile(of: id)
                state.percentiles[seed] = p
            }
            return term.matches(microPercentile: p)
        case .opaque(let term):
            if let decided = state.context.resolveOpaque?(term) { return decided }
            state.notes.append("'\(term.text)' is not known for this device; taken as false")
            return false
        }
    }
}
