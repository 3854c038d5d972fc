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
    public var notes: [String] = []
}

extension EvaluatedValue {
    /// What a non-empty conditional or default value gives, as firebase-admin reads it: `useInAppDefault` first
    /// (whatever `value` says), else `value`. The one reading of a value wrapper, the evaluator's and `Exposure`'s.
    init(_ wrapper: JSONObject, condition: String?) {
        if wrapper["useInAppDefault"]?.boolValue == true {
            self.init(value: nil, source: .inAppDefault, condition: condition)
        } else {
            self.init(value: wrapper["value"]?.stringValue, source: .remote, condition: condition)
        }
    }

    /// How the apps read this value as a boolean: whether some SDK reads it as true (`may`) and whether every
    /// SDK does (`must`). Only a value from the template can be true: the in-app default and the static default
    /// are the app's own (`false` for this flag). See `BooleanReading`.
    public var readsAsTrue: (may: Bool, must: Bool) {
        guard source == .remote, let value else { return (false, false) }
        return BooleanReading.of(value)
    }
}

/// How the SDKs turn a Remote Config string into a boolean, whatever the parameter's `valueType`.
///
/// firebase-admin's `get_boolean` (and the Android SDK's `asBoolean`) read `1`, `true`, `t`, `yes`, `y`, `on`,
/// in any case, as true. The iOS SDK's `boolValue` is `NSString.boolValue`: after leading spaces, an optional
/// sign and zeros, a first character in `tTyY1-9` is true (`"yes"`, `"2"`, `"Tomato"`), `"on"` is false.
public enum BooleanReading {
    static let adminTruthy: Set<String> = ["1", "true", "t", "yes", "y", "on"]

    /// (some SDK reads it as true, every SDK does).
    public static func of(_ text: String) -> (may: Bool, must: Bool) {
        let admin = adminTruthy.contains(text.lowercased())
        let apple = appleBoolValue(text)
        return (admin || apple, admin && apple)
    }

    /// `NSString.boolValue` (swift-corelibs-foundation's reading).
    static func appleBoolValue(_ text: String) -> Bool {
        var bytes = Substring(text).utf8[...]
        while let b = bytes.first, b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") || b == UInt8(ascii: "\n") { bytes = bytes.dropFirst() }
        if let b = bytes.first, b == UInt8(ascii: "+") || b == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        while bytes.first == UInt8(ascii: "0") { bytes = bytes.dropFirst() }
        guard let b = bytes.first else { return false }
        return "tTyY123456789".utf8.contains(b)
    }
}

/// Evaluates templates exactly as firebase-admin 7.7.0 does (FACTS.md §1).
///
/// Compile once, evaluate many: every condition is compiled into a small tree over seed slots, every parameter
/// into its ordered branches, and an installation's percentile is hashed once per seed. The hot path allocates
/// nothing: percentiles live in a stack buffer and results are precomputed values.
public struct TemplateEvaluator: Sendable {
    public let template: RemoteConfigTemplate
    /// The compiled form lives in one immutable object so that copies of the evaluator and of parameter handles
    /// cost one reference count, not one per array.
    private let engine: Engine

    public init(_ template: RemoteConfigTemplate) {
        self.template = template
        engine = Engine(template)
    }

    /// The value of parameter `key` for a device.
    public func value(of key: String, for context: EvaluationContext) -> EvaluatedValue {
        guard let p = engine.programIndex[key] else {
            return EvaluatedValue(value: nil, source: .static, condition: nil, notes: ["no parameter '\(key)' in the template"])
        }
        var id = context.randomizationId
        return id.withUTF8 { buf in
            engine.withPercentileCache { cache in engine.run(p, id: UnsafeRawBufferPointer(buf), cache: cache, context: context) }
        }
    }

    /// The values of several parameters for one device, hashing each seed once.
    public func values(of keys: [String], for context: EvaluationContext) -> [EvaluatedValue] {
        var id = context.randomizationId
        return id.withUTF8 { buf in
            engine.withPercentileCache { cache in
                keys.map { key in
                    guard let p = engine.programIndex[key] else {
                        return EvaluatedValue(value: nil, source: .static, condition: nil, notes: ["no parameter '\(key)' in the template"])
                    }
                    return engine.run(p, id: UnsafeRawBufferPointer(buf), cache: cache, context: context)
                }
            }
        }
    }

    /// A handle for evaluating one parameter over many ids given as UTF-8 bytes (the `evaluate` command's loop).
    public func program(for key: String) -> ParameterHandle? {
        engine.programIndex[key].map { ParameterHandle(engine: engine, program: $0) }
    }

    public struct ParameterHandle: Sendable {
        let engine: Engine
        let program: Int

        public func value(utf8 id: UnsafeRawBufferPointer) -> EvaluatedValue {
            engine.withPercentileCache { cache in engine.run(program, id: id, cache: cache, context: nil) }
        }

        /// The possible results of this parameter; `resultIndex(utf8:)` picks one per device.
        public var results: [EvaluatedValue] { engine.programs[program].results }

        /// The index in `results` for a device: the hot loop of bulk evaluation, with no copies of strings.
        /// Opaque terms count as false here (use `value(utf8:)` to get the notes).
        public func resultIndex(utf8 id: UnsafeRawBufferPointer) -> Int {
            engine.withPercentileCache { cache in
                var notes: [String] = []
                return engine.resultIndex(program, id: id, cache: cache, context: nil, notes: &notes)
            }
        }
    }

    /// Whether the named condition is true for a device.
    public func conditionMatches(_ name: String, for context: EvaluationContext) -> Bool {
        guard let c = engine.conditionNames.firstIndex(of: name) else { return false }
        var id = context.randomizationId
        var notes: [String] = []
        return id.withUTF8 { buf in
            engine.withPercentileCache { cache in engine.evaluate(engine.roots[c], id: UnsafeRawBufferPointer(buf), cache: cache, context: context, notes: &notes) }
        }
    }
}

/// The compiled template: seed hashers, flattened conditions, parameter programs. Immutable after init.
///
/// The hot path reads only plain memory owned by this object (node, branch and hasher tables), so evaluating an
/// id does no reference counting and no allocation.
final class Engine: @unchecked Sendable {
    let hashers: UnsafeMutableBufferPointer<PercentileHasher>
    let nodes: UnsafeMutableBufferPointer<FlatConditions.Node>
    let children: UnsafeMutableBufferPointer<Int32>
    let opaques: [OpaqueTerm]
    /// Root node of each condition, in template order.
    let roots: UnsafeMutableBufferPointer<Int32>
    let conditionNames: [String]
    /// All programs' branches: (condition index, result index), each program a range.
    let branches: UnsafeMutableBufferPointer<(condition: Int32, result: Int32)>
    let programs: [ParameterProgram]
    /// Per program: first branch, number of branches, index of the default result.
    let programTable: UnsafeMutableBufferPointer<(branchStart: Int32, branchCount: Int32, fallback: Int32)>
    let programIndex: [String: Int]

    init(_ template: RemoteConfigTemplate) {
        let flat = FlatConditions(template)
        var programs: [ParameterProgram] = []
        var allBranches: [(condition: Int32, result: Int32)] = []
        var index: [String: Int] = [:]
        for key in template.parameterKeys where index[key] == nil {
            index[key] = programs.count
            var program = ParameterProgram(template.parameter(key)!, conditions: template.conditions)
            program.branchStart = allBranches.count
            allBranches += program.branches
            programs.append(program)
        }
        hashers = Engine.copy(flat.seeds.map { PercentileHasher(seed: $0) })
        nodes = Engine.copy(flat.nodes)
        children = Engine.copy(flat.children)
        opaques = flat.opaques
        roots = Engine.copy(flat.roots)
        conditionNames = template.conditions.map(\.name)
        branches = Engine.copy(allBranches)
        self.programs = programs
        programTable = Engine.copy(programs.map { (Int32($0.branchStart), Int32($0.branches.count), Int32($0.results.count - 1)) })
        programIndex = index
    }

    deinit {
        hashers.deallocate()
        nodes.deallocate()
        children.deallocate()
        roots.deallocate()
        branches.deallocate()
        programTable.deallocate()
    }

    private static func copy<T>(_ array: [T]) -> UnsafeMutableBufferPointer<T> {
        let buffer = UnsafeMutableBufferPointer<T>.allocate(capacity: max(array.count, 1))
        _ = buffer.initialize(from: array)
        return buffer
    }

    func withPercentileCache<R>(_ body: (UnsafeMutableBufferPointer<Int64>) -> R) -> R {
        withUnsafeTemporaryAllocation(of: Int64.self, capacity: max(hashers.count, 1)) { cache in
            cache.initialize(repeating: -1)
            return body(cache)
        }
    }

    func run(_ program: Int, id: UnsafeRawBufferPointer, cache: UnsafeMutableBufferPointer<Int64>, context: EvaluationContext?)
        -> EvaluatedValue
    {
        var notes: [String] = []
        let index = resultIndex(program, id: id, cache: cache, context: context, notes: &notes)
        guard !notes.isEmpty else { return programs[program].results[index] }
        var result = programs[program].results[index]
        result.notes = notes
        return result
    }

    /// The index in the program's results of the first branch whose condition holds, else of the default.
    func resultIndex(
        _ program: Int, id: UnsafeRawBufferPointer, cache: UnsafeMutableBufferPointer<Int64>, context: EvaluationContext?,
        notes: inout [String]
    ) -> Int {
        let p = programTable[program]
        for k in Int(p.branchStart)..<Int(p.branchStart + p.branchCount) {
            let b = branches[k]
            if evaluate(roots[Int(b.condition)], id: id, cache: cache, context: context, notes: &notes) { return Int(b.result) }
        }
        return Int(p.fallback)
    }

    func evaluate(
        _ index: Int32, id: UnsafeRawBufferPointer, cache: UnsafeMutableBufferPointer<Int64>, context: EvaluationContext?,
        notes: inout [String]
    ) -> Bool {
        let node = nodes[Int(index)]
        switch node.kind {
        case .constant: return node.slot == 1
        case .percent:
            guard id.count > 0 else { return false }
            let slot = Int(node.slot)
            var p = cache[slot]
            if p < 0 {
                p = hashers[slot].microPercentile(utf8: id)
                cache[slot] = p
            }
            return node.lower < p && p <= node.upper
        case .not:
            return !evaluate(children[Int(node.childStart)], id: id, cache: cache, context: context, notes: &notes)
        case .and:
            for k in Int(node.childStart)..<Int(node.childStart + node.childCount)
            where !evaluate(children[k], id: id, cache: cache, context: context, notes: &notes) {
                return false
            }
            return true
        case .or:
            for k in Int(node.childStart)..<Int(node.childStart + node.childCount)
            where evaluate(children[k], id: id, cache: cache, context: context, notes: &notes) {
                return true
            }
            return false
        case .opaque:
            let term = opaques[Int(node.slot)]
            if let decided = context?.resolveOpaque?(term) { return decided }
            notes.append("'\(term.text)' is not known for this device; taken as false")
            return false
        case .tooDeep:
            notes.append("a condition nested deeper than firebase-admin evaluates; taken as false")
            return false
        }
    }
}

/// All conditions of a template flattened into one array of plain nodes (no reference counting on the hot path).
///
/// Seeds are resolved to slots and percent operators to bounds `lower < p <= upper`; `and`/`or`/`not` refer to
/// their children by index range in `children`.
struct FlatConditions: Sendable {
    enum Kind: UInt8, Sendable { case constant, percent, not, and, or, opaque, tooDeep }

    struct Node: Sendable {
        var kind: Kind
        /// constant: 1 = true; percent: the seed slot; opaque: index in `opaques`.
        var slot: Int32 = 0
        var lower: Int64 = 0
        var upper: Int64 = 0
        /// and / or / not: the range of child node indices in `children`.
        var childStart: Int32 = 0
        var childCount: Int32 = 0
    }

    var nodes: [Node] = []
    var children: [Int32] = []
    var opaques: [OpaqueTerm] = []
    /// The seed of each slot.
    var seeds: [String] = []
    /// The root node of each of the template's conditions, in template order.
    var roots: [Int32] = []

    /// The template's conditions, compiled: the one reading of what a condition means (operators as bounds, an
    /// unknown operator false, a node nested deeper than firebase-admin evaluates false) that both the evaluator
    /// and `Exposure` walk.
    init(_ template: RemoteConfigTemplate) {
        // firebase-admin stops at nesting level 10 of server conditions, counting or/and wrappers twice.
        let limit = template.form == .server ? 10 : Int.max
        var slots: [String: Int] = [:]
        var seeds: [String] = []
        for c in template.conditions {
            roots.append(
                add(c.node, level: 0, limit: limit) { seed in
                    if let s = slots[seed] { return s }
                    slots[seed] = seeds.count
                    seeds.append(seed)
                    return seeds.count - 1
                })
        }
        self.seeds = seeds
    }

    /// Appends `node` (and its subtree) and returns its index. `level` follows firebase-admin's nesting count.
    mutating func add(_ node: ConditionNode, level: Int, limit: Int, slot: (String) -> Int) -> Int32 {
        guard level < limit else { return append(Node(kind: .tooDeep)) }
        switch node {
        case .constant(let b): return append(Node(kind: .constant, slot: b ? 1 : 0))
        case .percent(let term):
            let s = Int32(slot(term.seed ?? ""))
            switch term.op {
            case .lessOrEqual(let m): return append(Node(kind: .percent, slot: s, lower: -1, upper: m.value))
            case .greaterThan(let m): return append(Node(kind: .percent, slot: s, lower: m.value, upper: .max))
            case .between(let a, let b): return append(Node(kind: .percent, slot: s, lower: a.value, upper: b.value))
            case .unknown: return append(Node(kind: .constant, slot: 0))
            }
        case .not(let inner): return group(.not, [inner], level: level + 1, limit: limit, slot: slot)
        case .and(let items): return group(.and, items, level: level + 2, limit: limit, slot: slot)
        case .or(let items): return group(.or, items, level: level + 2, limit: limit, slot: slot)
        case .opaque(let o):
            opaques.append(o)
            return append(Node(kind: .opaque, slot: Int32(opaques.count - 1)))
        }
    }

    private mutating func group(_ kind: Kind, _ items: [ConditionNode], level: Int, limit: Int, slot: (String) -> Int) -> Int32 {
        let ids = items.map { add($0, level: level, limit: limit, slot: slot) }
        let start = Int32(children.count)
        children += ids
        return append(Node(kind: kind, childStart: start, childCount: Int32(ids.count)))
    }

    private mutating func append(_ n: Node) -> Int32 {
        nodes.append(n)
        return Int32(nodes.count - 1)
    }
}

/// A parameter's ordered branches: the conditions (in template order) that have a value for it, each pointing at
/// its result, and the default as the last result. An empty conditional value counts as absent in firebase-admin
/// (the default applies), so its branch points at the default too.
struct ParameterProgram: Sendable {
    /// (condition index, result index) in the template's condition order.
    var branches: [(condition: Int32, result: Int32)]
    /// Where these branches start in the engine's branch table.
    var branchStart = 0
    /// The possible results; the last one is the default.
    var results: [EvaluatedValue]
    /// Per result: whether Firebase itself decides it per installation and may serve a true value there (a
    /// Firebase Rollout's `rolloutValue`, an A/B test's variants, a personalization), which the evaluator, like
    /// firebase-admin, reads as no value. `Exposure` counts such a value as one that may be true.
    var decidedByFirebase: [Bool]

    /// Whether a value wrapper is one Firebase decides per installation and may make true.
    static func firebaseMayServeTrue(_ wrapper: JSONObject) -> Bool {
        guard wrapper["useInAppDefault"]?.boolValue != true, wrapper["value"] == nil else { return false }
        if let rollout = wrapper["rolloutValue"] { return BooleanReading.of(rollout["value"]?.stringValue ?? "").may }
        if let experiment = wrapper["experimentValue"] {
            return (experiment["variantValue"]?.arrayValue ?? []).contains { BooleanReading.of($0["value"]?.stringValue ?? "").may }
        }
        return wrapper["personalizationValue"] != nil
    }

    init(_ parameter: TemplateParameter, conditions: [TemplateCondition]) {
        let conditional = parameter.json["conditionalValues"]?.objectValue ?? JSONObject()
        var results: [EvaluatedValue] = []
        var branches: [(condition: Int32, result: Int32)] = []
        var emptyBranches: [Int] = []
        var decided: [Bool] = []
        for (i, c) in conditions.enumerated() {
            guard let v = conditional[c.name] else { continue }
            let wrapper = v.objectValue ?? JSONObject()
            if wrapper.isEmpty {
                emptyBranches.append(branches.count)
                branches.append((Int32(i), -1))
                continue
            }
            branches.append((Int32(i), Int32(results.count)))
            results.append(EvaluatedValue(wrapper, condition: c.name))
            decided.append(Self.firebaseMayServeTrue(wrapper))
        }
        if let d = parameter.json["defaultValue"]?.objectValue, !d.isEmpty {
            results.append(EvaluatedValue(d, condition: nil))
            decided.append(Self.firebaseMayServeTrue(d))
        } else {
            results.append(EvaluatedValue(value: nil, source: .static, condition: nil))
            decided.append(false)
        }
        for b in emptyBranches { branches[b].result = Int32(results.count - 1) }
        self.branches = branches
        self.results = results
        decidedByFirebase = decided
    }
}
