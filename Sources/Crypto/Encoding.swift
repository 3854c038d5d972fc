/// Lowercase hexadecimal.
public enum Hex {
    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        if let hex = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0)) }) { return hex }
        return encode(Array(bytes))
    }

    /// Lowercase hex of `bytes`, written straight into the string's storage.
    public static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            var i = 0
            for b in bytes {
                out[i] = lowercase(b >> 4)
                out[i + 1] = lowercase(b & 15)
                i += 2
            }
            return i
        }
    }

    @inline(__always) private static func lowercase(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? 0x30 + nibble : 0x57 + nibble
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

    /// The value of one hex digit (either case), or nil.
    public static func value(of c: UInt8) -> UInt8? { value(c) }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
}

/// Base64 (RFC 4648) in the standard and URL-safe alphabets, with one strict decoder.
///
/// Every decoding is canonical: a string is accepted only when encoding its bytes again in the same spelling
/// gives the same string back. So the characters come from one alphabet (never `+` and `_` together), padding is
/// either absent or exactly what the length needs (`T=`, `QQ=` and `QQ===` are refused), nothing follows the
/// padding, and the bits left over in the last character are zero. Two different strings therefore never decode
/// to the same bytes under one set of options: a replay check keyed on decoded bytes cannot be bypassed by
/// re-spelling a token. `Options` says which spellings a field allows.
public enum Base64 {
    private static let standardTable = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlSafeTable = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The alphabets a field accepts; a single input must stay within one of them.
    public struct Alphabets: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// `+` and `/` (RFC 4648 §4).
        public static let standard = Alphabets(rawValue: 1)
        /// `-` and `_` (RFC 4648 §5).
        public static let urlSafe = Alphabets(rawValue: 2)
    }

    /// Whether `=` padding is allowed; when present it must always be exactly the padding the length needs.
    public enum Padding: Hashable, Sendable {
        case required
        case forbidden
        /// Either none or the canonical padding.
        case optional
    }

    /// The spellings a decoder accepts.
    public struct Options: Hashable, Sendable {
        public var alphabets: Alphabets
        public var padding: Padding
        public init(alphabets: Alphabets, padding: Padding) {
            self.alphabets = alphabets
            self.padding = padding
        }

        /// JWS/JWT segments (RFC 7515 §2): base64url without padding, nothing else.
        public static let jwt = Options(alphabets: .urlSafe, padding: .forbidden)
        /// App Check request fields and CLI arguments: either alphabet, padded or not (FACTS.md §3), canonical.
        public static let anySpelling = Options(alphabets: [.standard, .urlSafe], padding: .optional)
        /// The standard alphabet with padding (PEM bodies, RFC 4648 §4).
        public static let standard = Options(alphabets: .standard, padding: .required)
    }

    public static func encode<C: Collection>(_ bytes: C, urlSafe url: Bool = false, padded: Bool = true) -> String
    where C.Element == UInt8 {
        if let text = bytes.withContiguousStorageIfAvailable({
            encode(UnsafeRawBufferPointer($0), urlSafe: url, padded: padded)
        }) {
            return text
        }
        return Array(bytes).withUnsafeBytes { encode($0, urlSafe: url, padded: padded) }
    }

    /// Base64 of `bytes`, written straight into the string's storage (a token's signature and payload are
    /// encoded for every token the exchange issues: no array per group of three bytes).
    public static func encode(_ b: UnsafeRawBufferPointer, urlSafe url: Bool = false, padded: Bool = true) -> String {
        let rest = b.count % 3
        let length = b.count / 3 * 4 + (rest == 0 ? 0 : padded ? 4 : rest + 1)
        return (url ? urlSafeTable : standardTable).withUnsafeBufferPointer { table in
            String(unsafeUninitializedCapacity: length) { out in
                var i = 0
                var o = 0
                while i + 3 <= b.count {
                    let n = UInt32(b[i]) << 16 | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2])
                    out[o] = table[Int(n >> 18 & 63)]
                    out[o + 1] = table[Int(n >> 12 & 63)]
                    out[o + 2] = table[Int(n >> 6 & 63)]
                    out[o + 3] = table[Int(n & 63)]
                    i += 3
                    o += 4
                }
                if rest > 0 {
                    let n = UInt32(b[i]) << 16 | (rest == 2 ? UInt32(b[i + 1]) << 8 : 0)
                    out[o] = table[Int(n >> 18 & 63)]
                    out[o + 1] = table[Int(n >> 12 & 63)]
                    o += 2
                    if rest == 2 {
                        out[o] = table[Int(n >> 6 & 63)]
                        o += 1
                    }
                    if padded {
                        while o < length {
                            out[o] = 61
                            o += 1
                        }
                    }
                }
                return o
            }
        }
    }

    /// Base64url without padding, as JWTs use.
    public static func encodeURL<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        encode(bytes, urlSafe: true, padded: false)
    }

    /// Decodes a canonical spelling allowed by `options`; nil on anything else (whitespace included).
    ///
    /// The default accepts all four spellings App Check clients send (FACTS.md §3), each only in its canonical form.
    public static func decode(_ text: String, _ options: Options = .anySpelling) -> [UInt8]? {
        decode(bytes: text.utf8, options)
    }

    /// `decode` of text given as its UTF-8 bytes (a slice of a token, say).
    public static func decode<C: Collection>(bytes text: C, _ options: Options = .anySpelling) -> [UInt8]?
    where C.Element == UInt8 {
        if let decoded = text.withContiguousStorageIfAvailable({ decode($0, options) }) { return decoded }
        return Array(text).withUnsafeBufferPointer { decode($0, options) }
    }

    /// Each byte's six bits, with `standardOnly` set for `+` and `/` and `urlSafeOnly` for `-` and `_`;
    /// `invalid` for a byte of neither alphabet (`=` included: padding is taken off before the table is used).
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, c) in standardTable.prefix(62).enumerated() { table[Int(c)] = UInt8(value) }
        table[Int(UInt8(ascii: "+"))] = 62 | standardOnly
        table[Int(UInt8(ascii: "/"))] = 63 | standardOnly
        table[Int(UInt8(ascii: "-"))] = 62 | urlSafeOnly
        table[Int(UInt8(ascii: "_"))] = 63 | urlSafeOnly
        return table
    }()
    private static let standardOnly: UInt8 = 0x40
    private static let urlSafeOnly: UInt8 = 0x80
    private static let invalid: UInt8 = 0xFF

    /// The decoder: a table lookup per character and three bytes written per group of four, straight into the
    /// result (every App Check token a backend verifies is three of these; a byte at a time through a copy of the
    /// input cost about 5% of a consume).
    private static func decode(_ u: UnsafeBufferPointer<UInt8>, _ options: Options) -> [UInt8]? {
        var count = u.count
        var padding = 0
        while count > 0, u[count - 1] == UInt8(ascii: "=") {
            count -= 1
            padding += 1
        }
        // The padding, if any, is exactly what completes the last group of four; one leftover character is
        // never a whole byte.
        let remainder = count % 4
        guard remainder != 1 else { return nil }
        if padding > 0 {
            guard options.padding != .forbidden, remainder != 0, padding == 4 - remainder else { return nil }
        } else if options.padding == .required {
            guard remainder == 0 else { return nil }
        }
        let whole = count - remainder
        var marks: UInt8 = 0
        var valid = true
        let decoded = decodeTable.withUnsafeBufferPointer { t in
            [UInt8](unsafeUninitializedCapacity: whole / 4 * 3 + max(remainder - 1, 0)) { out, written in
                var i = 0
                var o = 0
                while i < whole {
                    let (a, b, c, d) = (t[Int(u[i])], t[Int(u[i + 1])], t[Int(u[i + 2])], t[Int(u[i + 3])])
                    guard a != invalid, b != invalid, c != invalid, d != invalid else {
                        valid = false
                        break
                    }
                    marks |= (a | b | c | d) & (standardOnly | urlSafeOnly)
                    let n = UInt32(a & 63) << 18 | UInt32(b & 63) << 12 | UInt32(c & 63) << 6 | UInt32(d & 63)
                    out[o] = UInt8(truncatingIfNeeded: n >> 16)
                    out[o + 1] = UInt8(truncatingIfNeeded: n >> 8)
                    out[o + 2] = UInt8(truncatingIfNeeded: n)
                    i += 4
                    o += 3
                }
                if valid, remainder > 0 {
                    let (a, b) = (t[Int(u[i])], t[Int(u[i + 1])])
                    let c = remainder == 3 ? t[Int(u[i + 2])] : 0
                    if a == invalid || b == invalid || c == invalid {
                        valid = false
                    } else {
                        marks |= (a | b | c) & (standardOnly | urlSafeOnly)
                        let n = UInt32(a & 63) << 18 | UInt32(b & 63) << 12 | UInt32(c & 63) << 6
                        out[o] = UInt8(truncatingIfNeeded: n >> 16)
                        o += 1
                        if remainder == 3 {
                            out[o] = UInt8(truncatingIfNeeded: n >> 8)
                            o += 1
                        }
                        // Leftover bits must be zero (a canonical encoding): 4 after two characters, 2 after three.
                        if n & (remainder == 2 ? 0xFFFF : 0xFF) != 0 { valid = false }
                    }
                }
                written = valid ? o : 0
            }
        }
        guard valid else { return nil }
        // One alphabet per input, and one the options allow.
        var seen: Alphabets = []
        if marks & standardOnly != 0 { seen.insert(.standard) }
        if marks & urlSafeOnly != 0 { seen.insert(.urlSafe) }
        guard seen != [.standard, .urlSafe], options.alphabets.isSuperset(of: seen) else { return nil }
        return decoded
    }
}
