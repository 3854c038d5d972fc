import JSON

/// A Remote Config condition as a tree, whichever form it came from.
///
/// Client templates write conditions as expression strings (`percent('s') <= 10 && device.os == 'ios'`),
/// server templates as structured JSON (`orCondition` / `andCondition` / `percent`). Both parse into this tree;
/// terms rollout does not model (device, app, custom signals) are kept as `opaque` and evaluated through a
/// context supplied by the caller, or as false with a stated reason.
public indirect enum ConditionNode: Hashable, Sendable {
    case constant(Bool)
    case percent(PercentTerm)
    case not(ConditionNode)
    case and([ConditionNode])
    case or([ConditionNode])
    case opaque(OpaqueTerm)

    /// Every percent term in the tree, in reading order.
    public var percentTerms: [PercentTerm] {
        switch self {
        case .percent(let p): [p]
        case .not(let c): c.percentTerms
        case .and(let cs), .or(let cs): cs.flatMap(\.percentTerms)
        case .constant, .opaque: []
        }
    }

    /// Every opaque term in the tree, in reading order.
    public var opaqueTerms: [OpaqueTerm] {
        switch self {
        case .opaque(let o): [o]
        case .not(let c): c.opaqueTerms
        case .and(let cs), .or(let cs): cs.flatMap(\.opaqueTerms)
        case .constant, .percent: []
        }
    }
}

/// `percent[('seed')] <= N`, `> N` or `between A and B`, in micro-percent.
public struct PercentTerm: Hashable, Sendable {
    public var op: PercentOperator
    /// The seed; nil or empty means the bare randomization id is hashed.
    public var seed: String?

    public init(_ op: PercentOperator, seed: String?) {
        self.op = op
        self.seed = seed
    }

    /// Whether an installation at `microPercentile` satisfies the term (FACTS.md §1).
    public func matches(microPercentile p: Int64) -> Bool {
        switch op {
        case .lessOrEqual(let m): p <= m.value
        case .greaterThan(let m): p > m.value
        case .between(let lower, let upper): lower.value < p && p <= upper.value
        case .unknown: false
        }
    }
}

/// The three percent operators; anything else is kept and evaluates to false.
public enum PercentOperator: Hashable, Sendable {
    case lessOrEqual(MicroPercent)
    case greaterThan(MicroPercent)
    /// Lower bound exclusive, upper bound inclusive.
    case between(MicroPercent, MicroPercent)
    case unknown(String)

    /// The REST API's `percentOperator` name.
    public var apiName: String {
        switch self {
        case .lessOrEqual: "LESS_OR_EQUAL"
        case .greaterThan: "GREATER_THAN"
        case .between: "BETWEEN"
        case .unknown(let n): n
        }
    }
}

/// A condition element rollout does not interpret, kept verbatim.
public struct OpaqueTerm: Hashable, Sendable {
    public enum Source: Hashable, Sendable {
        /// The exact text of the element in a client expression, e.g. `device.os == 'ios'`.
        case expression(String)
        /// The JSON of a server condition element, e.g. `{"customSignal": {...}}`.
        case server(JSONValue)
    }

    public var source: Source

    public init(source: Source) { self.source = source }

    /// A one-line description for messages.
    public var text: String {
        switch source {
        case .expression(let s): s
        case .server(let v): v.compactText
        }
    }
}
