import JSON

/// The server template's structured conditions (`namespaces/firebase-server`), to and from `ConditionNode`.
public enum ServerCondition {
    /// Reads a structured condition. Unknown element kinds become opaque terms (kept, evaluated as false);
    /// a percent element with the wrong shape is an error naming what is wrong.
    public static func node(from json: JSONValue) throws(TemplateError) -> ConditionNode {
        guard let object = json.objectValue else {
            throw TemplateError("a condition must be an object, found \(json.kindName)")
        }
        // The same precedence as firebase-admin: or, and, true, false, percent; anything else is opaque.
        if let or = object["orCondition"], !or.isNull { return .or(try children(or, "orCondition")) }
        if let and = object["andCondition"], !and.isNull { return .and(try children(and, "andCondition")) }
        if let t = object["true"], !t.isNull { return .constant(true) }
        if let f = object["false"], !f.isNull { return .constant(false) }
        if let p = object["percent"], !p.isNull { return .percent(try percent(p)) }
        return .opaque(OpaqueTerm(source: .server(json)))
    }

    private static func children(_ json: JSONValue, _ kind: String) throws(TemplateError) -> [ConditionNode] {
        guard let object = json.objectValue else { throw TemplateError("\(kind) must be an object") }
        guard let list = object["conditions"], !list.isNull else { return [] }
        guard let items = list.arrayValue else { throw TemplateError("\(kind).conditions must be an array") }
        var out: [ConditionNode] = []
        for item in items { out.append(try node(from: item)) }
        return out
    }

    static func microPercent(_ value: JSONValue?, _ field: String) throws(TemplateError) -> MicroPercent {
        guard let value, !value.isNull else { return .zero }
        guard let n = value.numberValue, let m = n.int64 ?? n.double.flatMap({ $0 == $0.rounded() ? Int64(exactly: $0) : nil })
        else {
            throw TemplateError("\(field) must be a whole number of micro-percent, found \(value.compactText)")
        }
        guard (0...MicroPercent.hundred.value).contains(m) else {
            throw TemplateError("\(field) must be within 0 and 100000000, found \(m)")
        }
        return MicroPercent(m)
    }

    static func percent(_ json: JSONValue) throws(TemplateError) -> PercentTerm {
        guard let p = json.objectValue else { throw TemplateError("percent must be an object") }
        var seed: String?
        if let s = p["seed"], !s.isNull {
            guard let text = s.stringValue else { throw TemplateError("percent.seed must be a string") }
            seed = text
        }
        let opName = p["percentOperator"]?.stringValue ?? ""
        switch opName {
        case "LESS_OR_EQUAL": return PercentTerm(.lessOrEqual(try microPercent(p["microPercent"], "microPercent")), seed: seed)
        case "GREATER_THAN": return PercentTerm(.greaterThan(try microPercent(p["microPercent"], "microPercent")), seed: seed)
        case "BETWEEN":
            let range = p["microPercentRange"]?.objectValue
            let lower = try microPercent(range?["microPercentLowerBound"], "microPercentLowerBound")
            let upper = try microPercent(range?["microPercentUpperBound"], "microPercentUpperBound")
            return PercentTerm(.between(lower, upper), seed: seed)
        default: return PercentTerm(.unknown(opName), seed: seed)
        }
    }

    /// The structured JSON of a node. Client-only elements (negation, device or app terms) cannot be expressed
    /// and are an error naming the element.
    public static func json(of node: ConditionNode) throws(TemplateError) -> JSONValue {
        switch node {
        case .constant(let b): return .object(JSONObject([(b ? "true" : "false", .object(JSONObject()))]))
        case .percent(let p): return .object(JSONObject([("percent", percentJSON(p))]))
        case .and(let items): return .object(JSONObject([("andCondition", try list(items))]))
        case .or(let items): return .object(JSONObject([("orCondition", try list(items))]))
        case .not: throw TemplateError("server conditions have no negation ('!')")
        case .opaque(let o):
            if case .server(let v) = o.source { return v }
            throw TemplateError("'\(o.text)' has no server-template form")
        }
    }

    private static func list(_ items: [ConditionNode]) throws(TemplateError) -> JSONValue {
        var out: [JSONValue] = []
        for i in items { out.append(try json(of: i)) }
        return .object(JSONObject([("conditions", .array(out))]))
    }

    /// The `percent` element of a term.
    public static func percentJSON(_ p: PercentTerm, updating existing: JSONObject = JSONObject()) -> JSONValue {
        var o = existing
        o["percentOperator"] = .string(p.op.apiName)
        if let seed = p.seed { o["seed"] = .string(seed) }
        switch p.op {
        case .lessOrEqual(let m), .greaterThan(let m):
            o["microPercent"] = .number(JSONNumber(m.value))
            o["microPercentRange"] = nil
        case .between(let a, let b):
            o["microPercent"] = nil
            o["microPercentRange"] = .object(
                JSONObject([
                    ("microPercentLowerBound", .number(JSONNumber(a.value))),
                    ("microPercentUpperBound", .number(JSONNumber(b.value))),
                ]))
        case .unknown: break
        }
        return .object(o)
    }

    /// Wraps a node the way the Firebase console writes server conditions: `orCondition` → `andCondition` → terms.
    public static func canonical(_ node: ConditionNode) -> ConditionNode {
        switch node {
        case .or: return node
        case .and: return .or([node])
        default: return .or([.and([node])])
        }
    }
}

/// The client expression text of a node (used when exporting a server template in client form).
public enum ExpressionRenderer {
    public static func text(_ node: ConditionNode, topLevel: Bool = true) -> String {
        switch node {
        case .constant(let b): return b ? "true" : "false"
        case .percent(let p): return ConditionExpression.render(p)
        case .not(let c):
            // `!` glued to an operand that starts with `=` would read back as the operator `!=` (found by fuzzing).
            let operand = text(c, topLevel: false)
            // Compared by scalar: `=` followed by a combining mark is one Character, which `hasPrefix("=")` misses.
            return (operand.unicodeScalars.first == "=" ? "! " : "!") + operand
        case .and(let items):
            let inner = items.map { text($0, topLevel: false) }.joined(separator: " && ")
            return items.count == 1 ? inner : (topLevel ? inner : "(\(inner))")
        case .or(let items):
            let inner = items.map { text($0, topLevel: false) }.joined(separator: " || ")
            return items.count == 1 ? inner : (topLevel ? inner : "(\(inner))")
        case .opaque(let o): return o.text
        }
    }
}
