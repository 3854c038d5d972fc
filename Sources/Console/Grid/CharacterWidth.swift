/// How many terminal columns a Unicode scalar occupies: 0, 1 or 2.
///
/// Terminals (and tmux) lay text out by the C library's `wcwidth`, which follows Unicode's East Asian Width
/// property: Wide and Fullwidth characters take two columns, combining marks and format characters none. The
/// grid must agree with the terminal cell for cell, or every character after a wide one lands in the wrong
/// column. The standard library exposes the general category and emoji presentation but not East Asian Width, so
/// the wide ideographic blocks are listed here; emoji with default emoji presentation are wide since Unicode 9.
public enum CharacterWidth {
    /// The column width of `scalar`; control characters count as 0 (the grid never stores them).
    @inline(__always)
    public static func of(_ scalar: Unicode.Scalar) -> Int {
        let v = scalar.value
        if v < 0x7F { return v >= 0x20 ? 1 : 0 }
        if v < 0xA0 { return 0 }
        if v < 0x0300 { return 1 }
        if v < tableLimit { return Int(table[Int(v)]) }
        return slow(scalar)
    }

    /// Scalars below this are answered from a table built once, since property lookups are slow and every frame
    /// measures thousands of arrows, quotes, check marks and box-drawing characters.
    private static let tableLimit: UInt32 = 0x3000

    private static let table: [UInt8] = (0..<tableLimit).map { v in
        guard let s = Unicode.Scalar(v) else { return 1 }
        if v < 0x20 || (v >= 0x7F && v < 0xA0) { return 0 }
        return UInt8(slow(s))
    }

    /// The column width of a string (the sum over its scalars).
    public static func of(_ text: String) -> Int {
        var total = 0
        for s in text.unicodeScalars { total += of(s) }
        return total
    }

    private static func slow(_ scalar: Unicode.Scalar) -> Int {
        let v = scalar.value
        if isZeroWidth(scalar) { return 0 }
        if isWide(v) || scalar.properties.isEmojiPresentation { return 2 }
        return 1
    }

    private static func isZeroWidth(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        // Hangul medial vowels and final consonants join the preceding initial into one syllable block.
        if v >= 0x1160 && v <= 0x11FF { return true }
        if v == 0x200B { return true }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark: return true
        case .format: return v != 0x00AD
        case .control, .lineSeparator, .paragraphSeparator, .surrogate: return true
        default: return false
        }
    }

    /// Unicode's East Asian Wide and Fullwidth blocks outside the emoji set.
    private static func isWide(_ v: UInt32) -> Bool {
        switch v {
        case 0x1100...0x115F, 0x2329...0x232A, 0x2E80...0x2E99, 0x2E9B...0x2EF3, 0x2F00...0x2FD5,
            0x2FF0...0x2FFB, 0x3000...0x303E, 0x3041...0x3096, 0x3099...0x30FF, 0x3105...0x312F,
            0x3131...0x318E, 0x3190...0x31E3, 0x31F0...0x321E, 0x3220...0x3247, 0x3250...0x4DBF,
            0x4E00...0xA48C, 0xA490...0xA4C6, 0xA960...0xA97C, 0xAC00...0xD7A3, 0xF900...0xFAFF,
            0xFE10...0xFE19, 0xFE30...0xFE52, 0xFE54...0xFE66, 0xFE68...0xFE6B, 0xFF01...0xFF60,
            0xFFE0...0xFFE6, 0x16FE0...0x16FE4, 0x16FF0...0x16FF1, 0x17000...0x187F7, 0x18800...0x18CD5,
            0x18D00...0x18D08, 0x1B000...0x1B122, 0x1B150...0x1B152, 0x1B164...0x1B167, 0x1B170...0x1B2FB,
            0x1F200...0x1F202, 0x1F210...0x1F23B, 0x1F240...0x1F248, 0x1F250...0x1F251, 0x1F260...0x1F265,
            0x20000...0x2FFFD, 0x30000...0x3FFFD:
            return true
        default:
            return false
        }
    }
}
