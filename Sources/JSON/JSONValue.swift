/// A JSON document that keeps everything it was given: key order, number spelling, unknown fields.
///
/// Firebase templates must survive read-modify-write untouched (tools that decode into fixed structs and
/// re-encode have silently wiped rollout values and parameter groups), so the template model wraps this value
/// instead of decoding into `Codable` structs. Numbers keep their literal text; objects keep insertion order.
public enum JSONValue: Hashable, Sendable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    public var numberValue: JSONNumber? { if case .number(let n) = self { n } else { nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { a } else { nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { o } else { nil } }
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The member `key` of an object (nil for other kinds or a missing key).
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { o[key] } else { nil }
    }

    /// A short name of the kind, for error messages.
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .number(JSONNumber(value)) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONObject(elements)) }
    public init(nilLiteral: ()) { self = .null }
}

/// A JSON number kept as its literal text, so that re-encoding never changes its spelling.
public struct JSONNumber: Hashable, Sendable, CustomStringConvertible {
    /// The literal as it appeared (or as produced from an integer or double).
    public let text: String

    /// Wraps a literal that the caller guarantees is valid JSON number syntax (the parser checks it).
    init(literal: String) { text = literal }

    public init(_ value: Int64) { text = String(value) }
    public init(_ value: Int) { text = String(value) }

    /// A double as the shortest text that round-trips; non-finite values are not JSON and become 0.
    public init(_ value: Double) {
        guard value.isFinite else {
            text = "0"
            return
        }
        if value == value.rounded(.towardZero), abs(value) < 1e15 {
            text = String(Int64(value))
        } else {
            text = "\(value)"
        }
    }

    /// The value as an exact integer, when the literal is one (no fraction or exponent) and fits in 64 bits.
    public var int64: Int64? { Int64(text) }
    public var double: Double? { Double(text) }
    public var description: String { text }
}

/// An object whose members keep their order.
///
/// Lookups are linear below a small size and hashed above it; templates have few keys per object, while
/// parameters maps can hold hundreds.
public struct JSONObject: Hashable, Sendable, Sequence {
    public private(set) var members: [(key: String, value: JSONValue)]
    private var index: [String: Int]?

    public init() { members = [] }

    public init(_ pairs: [(String, JSONValue)]) {
        members = []
        for (k, v) in pairs { self[k] = v }
    }

    /// Members whose keys are already known to be distinct (the parser checks them as it reads).
    init(uniqueMembers: [(key: String, value: JSONValue)]) {
        members = uniqueMembers
        rebuildIndex()
    }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map(\.key) }

    public func makeIterator() -> IndexingIterator<[(key: String, value: JSONValue)]> { members.makeIterator() }

    private func position(of key: String) -> Int? {
        if let index { return index[key] }
        return members.firstIndex { $0.key == key }
    }

    /// Reading returns the member; assigning replaces it in place (keeping its position) or appends it;
    /// assigning nil removes it.
    public subscript(key: String) -> JSONValue? {
        get { position(of: key).map { members[$0].value } }
        set {
            if let i = position(of: key) {
                if let newValue {
                    members[i].value = newValue
                } else {
                    members.remove(at: i)
                    rebuildIndex()
                }
            } else if let newValue {
                members.append((key, newValue))
                if index != nil {
                    index![key] = members.count - 1
                } else if members.count > 16 {
                    rebuildIndex()
                }
            }
        }
    }

    /// Inserts or replaces `key` so that it ends up at `position` (used to place new conditions in order).
    public mutating func insert(_ value: JSONValue, forKey key: String, at position: Int) {
        if let i = self.position(of: key) { members.remove(at: i) }
        members.insert((key, value), at: Swift.min(position, members.count))
        rebuildIndex()
    }

    private mutating func rebuildIndex() {
        guard members.count > 16 else {
            index = nil
            return
        }
        var map: [String: Int] = [:]
        for (i, m) in members.enumerated() { map[m.key] = i }
        index = map
    }

    public static func == (a: JSONObject, b: JSONObject) -> Bool {
        a.members.count == b.members.count
            && zip(a.members, b.members).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(members.count)
        for m in members {
            hasher.combine(m.key)
            hasher.combine(m.value)
        }
    }
}
