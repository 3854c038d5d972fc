/// Lowercase hexadecimal.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes hex in either case; nil on odd length or a non-hex character.
    public static func decode(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count / 2)
        var i = 0
        while i < u.count {
            guard let h = value(u[i]), let l = value(u[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}

/// Base64 in the standard and URL-safe alphabets, padded or not (App Check requests use all four spellings).
public enum Base64 {
    private static let standard = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlSafe = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode<C: Collection>(_ bytes: C, urlSafe url: Bool = false, padded: Bool = true) -> String
    where C.Element == UInt8 {
        let table = url ? urlSafe : standard
        let b = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((b.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= b.count {
            let n = UInt32(b[i]) << 16 | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2])
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)], table[Int(n & 63)]]
            i += 3
        }
        let rest = b.count - i
        if rest == 1 {
            let n = UInt32(b[i]) << 16
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)]]
            if padded { out += [61, 61] }
        } else if rest == 2 {
            let n = UInt32(b[i]) << 16 | UInt32(b[i + 1]) << 8
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)]]
            if padded { out.append(61) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Base64url without padding, as JWTs use.
    public static func encodeURL<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        encode(bytes, urlSafe: true, padded: false)
    }

    /// Decodes either alphabet, with or without padding; nil on anything else (whitespace included).
    public static func decode(_ text: String) -> [UInt8]? {
        var u = Array(text.utf8)
        while u.last == 61 { u.removeLast() }
        guard u.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(u.count * 3 / 4)
        var acc: UInt32 = 0
        var bits = 0
        for c in u {
            let v: UInt32
            switch c {
            case 65...90: v = UInt32(c - 65)
            case 97...122: v = UInt32(c - 71)
            case 48...57: v = UInt32(c + 4)
            case 43, 45: v = 62
            case 47, 95: v = 63
            default: return nil
            }
            acc = acc << 6 | v
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        // Leftover bits must be zero (a canonical encoding).
        if bits > 0, acc & ((1 << UInt32(bits)) - 1) != 0 { return nil }
        return out
    }
}
