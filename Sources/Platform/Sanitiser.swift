/// The one output sanitiser: text that came from outside (telemetry, templates, tokens, files) made safe to
/// show on a terminal.
///
/// A terminal obeys control characters wherever they appear, so an error class such as
/// `rejected:\u{1b}]0;pwned\u{07}` printed raw retitles the window, and `\u{1b}[2J` clears the screen. Every
/// scalar a terminal could act on, or that reorders the text around it, is shown as a visible escape instead:
/// C0 controls (U+0000–U+001F, including tab and newline), DEL (U+007F), C1 controls (U+0080–U+009F, which
/// some terminals take as CSI and OSC introducers), the bidirectional formatting characters (U+061C, U+200E,
/// U+200F, U+202A–U+202E, U+2066–U+2069: "Trojan Source" reordering) and the line and paragraph separators
/// U+2028 and U+2029. Each becomes `\u001b`-style text (four lower-case hex digits, the spelling of a JSON
/// escape), so the output stays one line and names the scalar exactly. Everything else passes unchanged.
public enum Sanitiser {
    /// Whether a scalar must be escaped before it reaches a terminal.
    @inline(__always)
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        if v < 0x20 || (v >= 0x7F && v < 0xA0) { return true }
        if v < 0x61C { return false }
        switch v {
        case 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// Whether any scalar of `text` must be escaped, over its UTF-8 bytes (a generic `StringProtocol` walk across
    /// modules goes through a witness table per byte, a hundred times slower).
    public static func needsEscape(_ text: String) -> Bool {
        var bytes = text
        guard let u = bytes.withUTF8({ $0.first { $0 < 0x20 || $0 >= 0x7F } }) else { return false }
        if u < 0x20 || u == 0x7F { return true }
        return text.unicodeScalars.contains(where: needsEscape)
    }

    /// `text` with every scalar of `needsEscape` shown as `\uXXXX`.
    public static func escape(_ text: String) -> String {
        needsEscape(text) ? escaped(text) : text
    }

    /// Whether any scalar of `text` must be escaped (the common answer, no, allocates nothing).
    public static func needsEscape(_ text: some StringProtocol) -> Bool {
        for u in text.utf8 where u < 0x20 || u >= 0x7F {
            if u < 0x20 || u == 0x7F { return true }
            return text.unicodeScalars.contains(where: needsEscape)
        }
        return false
    }

    /// `text` with every scalar of `needsEscape` shown as `\uXXXX`.
    public static func escape(_ text: some StringProtocol) -> String {
        guard needsEscape(text) else { return String(text) }
        return escaped(text)
    }

    private static func escaped(_ text: some StringProtocol) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                out.append(scalar)
                continue
            }
            out.append(contentsOf: "\\u".unicodeScalars)
            for shift in stride(from: 12, through: 0, by: -4) {
                out.append(hexDigits[Int((scalar.value >> UInt32(shift)) & 0xF)])
            }
        }
        return String(out)
    }

    private static let hexDigits: [Unicode.Scalar] = Array("0123456789abcdef".unicodeScalars)
}
