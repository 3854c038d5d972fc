import JSON

/// The `--json` reports that are built as `[String: Any]` trees (`policy show`, `operator list`, `telemetry`,
/// `ingest`, `simulate`), written without corelibs Foundation's `JSONSerialization` but byte for byte as it wrote
/// them, so scripts that read them see no change: keys sorted at every level, `" : "` after names and empty
/// containers on two lines when pretty, `\/` for a slash where it escaped one, numbers as `JSONNumber` writes them
/// (the same shortest round-trip text). Strings are escaped by `JSONWriter`, which also escapes the C1 controls and
/// bidirectional formatting characters that `JSONSerialization` passed through raw.
enum AnyJSON {
    /// A JSON value or null.
    static func orNull(_ v: Any?) -> Any { v ?? JSONValue.null }

    static func value(_ any: Any) -> JSONValue {
        switch any {
        case let v as JSONValue: return sorted(v)
        case let v as String: return .string(v)
        case let v as Substring: return .string(String(v))
        case let v as Bool: return .bool(v)
        case let v as Int: return .number(JSONNumber(v))
        case let v as Int64: return .number(JSONNumber(v))
        case let v as Int32: return .number(JSONNumber(Int64(v)))
        case let v as UInt32: return .number(JSONNumber(Int64(v)))
        case let v as UInt64: return v <= UInt64(Int64.max) ? .number(JSONNumber(Int64(v))) : .number(JSONNumber(Double(v)))
        case let v as Double: return .number(JSONNumber(v))
        case let v as [String: Any]:
            return .object(JSONObject(v.keys.sorted().map { ($0, value(v[$0]!)) }))
        case let v as [Any]: return .array(v.map(value))
        case Optional<Any>.none: return .null
        default:
            // Only the types above are built; anything else is a programming error, shown rather than lost.
            return .string(String(describing: any))
        }
    }

    /// Objects with their keys sorted, at every level.
    static func sorted(_ v: JSONValue) -> JSONValue {
        switch v {
        case .object(let o): return .object(JSONObject(o.members.sorted { $0.key < $1.key }.map { ($0.key, sorted($0.value)) }))
        case .array(let a): return .array(a.map(sorted))
        default: return v
        }
    }

    static func compact(_ any: Any, escapingSlashes: Bool = true) -> String {
        text(value(any), pretty: false, escapingSlashes: escapingSlashes)
    }
    static func pretty(_ any: Any, escapingSlashes: Bool = true) -> String {
        text(value(any), pretty: true, escapingSlashes: escapingSlashes)
    }

    static func text(_ v: JSONValue, pretty: Bool, escapingSlashes: Bool) -> String {
        var out: [UInt8] = []
        write(v, pretty: pretty, indent: 0, into: &out)
        // A slash can only stand inside a string in JSON text.
        if escapingSlashes, out.contains(UInt8(ascii: "/")) {
            out = out.flatMap { $0 == UInt8(ascii: "/") ? [UInt8(ascii: "\\"), $0] : [$0] }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func write(_ v: JSONValue, pretty: Bool, indent: Int, into out: inout [UInt8]) {
        func newline(_ level: Int) {
            out.append(0x0A)
            out.append(contentsOf: repeatElement(0x20, count: level * 2))
        }
        func container(_ open: UInt8, _ close: UInt8, _ count: Int, _ item: (Int, inout [UInt8]) -> Void) {
            out.append(open)
            if pretty, count == 0 { out.append(0x0A) }
            for k in 0..<count {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                if pretty { newline(indent + 1) }
                item(k, &out)
            }
            if pretty { newline(indent) }
            out.append(close)
        }
        switch v {
        case .object(let o):
            let members = o.members
            container(UInt8(ascii: "{"), UInt8(ascii: "}"), members.count) { k, out in
                JSONWriter.appendQuoted(members[k].key, to: &out)
                out.append(contentsOf: pretty ? Array(" : ".utf8) : [UInt8(ascii: ":")])
                write(members[k].value, pretty: pretty, indent: indent + 1, into: &out)
            }
        case .array(let a):
            container(UInt8(ascii: "["), UInt8(ascii: "]"), a.count) { k, out in
                write(a[k], pretty: pretty, indent: indent + 1, into: &out)
            }
        default: out.append(contentsOf: JSONWriter(style: .compact).bytes(v))
        }
    }
}
