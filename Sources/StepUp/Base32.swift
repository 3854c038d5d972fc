/// Base32 of RFC 4648 §6 (alphabet `A–Z2–7`), the encoding authenticator apps expect for TOTP secrets.
///
/// Encoding writes upper case without padding, as the `secret` parameter of an `otpauth://` URI is written.
/// Decoding is lenient in the ways people type a secret by hand (lower case, spaces, hyphens, trailing `=`)
/// and strict about everything else, including non-zero leftover bits.
public enum Base32 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// The unpadded upper-case encoding of `bytes`.
    public static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 8 + 4) / 5)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 5 {
                bits -= 5
                out.append(alphabet[Int(buffer >> UInt32(bits) & 31)])
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes `text`, ignoring case, spaces, hyphens and trailing padding; nil on any other character, on a
    /// length no encoder produces, or when the unused low bits of the last character are not zero.
    public static func decode(_ text: String) -> [UInt8]? {
        var symbols: [UInt8] = []
        symbols.reserveCapacity(text.utf8.count)
        var padding = false
        for c in text.utf8 {
            switch c {
            case 32, 45: continue
            case 61: padding = true
            case 65...90, 97...122, 50...55:
                guard !padding else { return nil }  // data after padding
                symbols.append(c)
            default: return nil
            }
        }
        // 8 symbols carry 5 bytes; a final group of 1, 3 or 6 symbols is never produced by an encoder.
        guard ![1, 3, 6].contains(symbols.count % 8) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(symbols.count * 5 / 8)
        var buffer: UInt32 = 0
        var bits = 0
        for c in symbols {
            let v: UInt32
            switch c {
            case 65...90: v = UInt32(c - 65)
            case 97...122: v = UInt32(c - 97)
            default: v = UInt32(c - 50 + 26)
            }
            buffer = (buffer << 5 | v) & 0xFFFF
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        if bits > 0, buffer & ((1 << UInt32(bits)) - 1) != 0 { return nil }
        return out
    }
}
