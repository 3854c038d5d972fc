/// Serialises a `JSONValue`, compact or pretty-printed the way the firebase CLI writes templates
/// (two-space indentation, `": "` after names), escaping what JSON requires and what a terminal would obey.
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
    ///
    /// Besides what JSON requires (`"`, `\\` and U+0000–U+001F), DEL, the C1 controls (U+0080–U+009F), the
    /// bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and U+2028 /
    /// U+2029 are written as `\uXXXX`: the text means the same to every JSON reader, and JSON shown on a terminal
    /// (`--json` output, `template get`) can neither drive it nor reorder what it shows.
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(0x22)
        var text = s
        text.withUTF8 { u in
            var i = 0
            while i < u.count {
                let c = u[i]
                switch c {
                case 0x22: out += [0x5C, 0x22]
                case 0x5C: out += [0x5C, 0x5C]
                case 0x0A: out += [0x5C, UInt8(ascii: "n")]
                case 0x0D: out += [0x5C, UInt8(ascii: "r")]
                case 0x09: out += [0x5C, UInt8(ascii: "t")]
                case 0x08: out += [0x5C, UInt8(ascii: "b")]
                case 0x0C: out += [0x5C, UInt8(ascii: "f")]
                case 0..<0x20, 0x7F: appendEscape(UInt32(c), to: &out)
                case 0xC2 where i + 1 < u.count && u[i + 1] < 0xA0:
                    appendEscape(UInt32(u[i + 1]), to: &out)
                    i += 1
                case 0xD8 where i + 1 < u.count && u[i + 1] == 0x9C:
                    appendEscape(0x061C, to: &out)
                    i += 1
                case 0xE2 where i + 2 < u.count && isFormatting(u[i + 1], u[i + 2]):
                    appendEscape(0x2000 | UInt32(u[i + 1] & 0x3F) << 6 | UInt32(u[i + 2] & 0x3F), to: &out)
                    i += 2
                default: out.append(c)
                }
                i += 1
            }
        }
        out.append(0x22)
    }

    /// Whether `E2 b1 b2` encodes U+200E, U+200F, U+2028–U+202E or U+2066–U+2069.
    @inline(__always)
    private static func isFormatting(_ b1: UInt8, _ b2: UInt8) -> Bool {
        (b1 == 0x80 && (b2 == 0x8E || b2 == 0x8F || (0xA8...0xAE).contains(b2))) || (b1 == 0x81 && (0xA6...0xA9).contains(b2))
    }

    private static func appendEscape(_ scalar: UInt32, to out: inout [UInt8]) {
        out += [0x5C, UInt8(ascii: "u")]
        for shift in stride(from: 12, through: 0, by: -4) { out.append(hexDigits[Int((scalar >> UInt32(shift)) & 0xF)]) }
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
