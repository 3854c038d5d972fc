/// Serialises a `JSONValue`, compact or pretty-printed the way the firebase CLI writes templates
/// (two-space indentation, `": "` after names), escaping only what JSON requires.
public struct JSONWriter {
    public enum Style: Sendable { case compact, pretty }
    public var style: Style

    public init(style: Style = .compact) { self.style = style }

    public func string(_ value: JSONValue) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out, indent: 0)
        return String(decoding: out, as: UTF8.self)
    }

    public func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        write(value, into: &out, indent: 0)
        return out
    }

    private func newline(_ out: inout [UInt8], _ indent: Int) {
        out.append(0x0A)
        out.append(contentsOf: repeatElement(0x20, count: indent * 2))
    }

    func write(_ value: JSONValue, into out: inout [UInt8], indent: Int) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let n): out.append(contentsOf: n.text.utf8)
        case .string(let s): JSONWriter.appendQuoted(s, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (k, item) in items.enumerated() {
                if k > 0 { out.append(UInt8(ascii: ",")) }
                if style == .pretty { newline(&out, indent + 1) }
                write(item, into: &out, indent: indent + 1)
            }
            if style == .pretty, !items.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "]"))
        case .object(let object):
            out.append(UInt8(ascii: "{"))
            var first = true
            for member in object {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                if style == .pretty { newline(&out, indent + 1) }
                JSONWriter.appendQuoted(member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                if style == .pretty { out.append(0x20) }
                write(member.value, into: &out, indent: indent + 1)
            }
            if style == .pretty, !object.isEmpty { newline(&out, indent) }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Appends `s` as a JSON string literal.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(0x22)
        for c in s.utf8 {
            switch c {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, UInt8(ascii: "n")]
            case 0x0D: out += [0x5C, UInt8(ascii: "r")]
            case 0x09: out += [0x5C, UInt8(ascii: "t")]
            case 0x08: out += [0x5C, UInt8(ascii: "b")]
            case 0x0C: out += [0x5C, UInt8(ascii: "f")]
            case 0..<0x20: out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hexDigits[Int(c >> 4)], hexDigits[Int(c & 15)]]
            default: out.append(c)
            }
        }
        out.append(0x22)
    }

    /// `s` as a JSON string literal.
    public static func quoted(_ s: String) -> String {
        var out: [UInt8] = []
        appendQuoted(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

extension JSONValue {
    /// Compact JSON text.
    public var compactText: String { JSONWriter(style: .compact).string(self) }
    /// Pretty JSON text (two-space indentation), with a trailing newline.
    public var prettyText: String { JSONWriter(style: .pretty).string(self) + "\n" }
}
