/// A CBOR data item (RFC 8949), limited to what App Attest uses.
///
/// Attestation objects, assertions and COSE keys use unsigned and negative integers, byte and text strings,
/// arrays and maps. Booleans and null are accepted for completeness; tags, floating-point numbers, other simple
/// values and indefinite lengths are refused by the decoder, since no Apple object carries them and each is an
/// extra path an attacker could use.
public indirect enum CBOR: Hashable, Sendable {
    case unsigned(UInt64)
    /// The negative integer `-1 - n`.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    /// Entries in the order they were encoded (the encoder keeps this order too).
    case map([Entry])
    case bool(Bool)
    case null

    /// One key/value pair of a map.
    public struct Entry: Hashable, Sendable {
        public var key: CBOR
        public var value: CBOR
        public init(_ key: CBOR, _ value: CBOR) {
            self.key = key
            self.value = value
        }
    }

    /// An integer value (for COSE labels such as `1`, `-2`), or nil when out of `Int64` range or not an integer.
    public var integer: Int64? {
        switch self {
        case .unsigned(let n): n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negative(let n): n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: nil
        }
    }

    public var byteString: [UInt8]? { if case .bytes(let b) = self { b } else { nil } }
    public var textString: String? { if case .text(let t) = self { t } else { nil } }
    public var arrayItems: [CBOR]? { if case .array(let a) = self { a } else { nil } }
    public var mapEntries: [Entry]? { if case .map(let m) = self { m } else { nil } }

    /// The value stored under the text key `name` in a map.
    public subscript(name: String) -> CBOR? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key == .text(name) }?.value
    }

    /// The value stored under the integer key `label` in a map (COSE keys use integer labels).
    public subscript(label: Int64) -> CBOR? {
        guard case .map(let entries) = self else { return nil }
        return entries.first { $0.key.integer == label }?.value
    }

    /// An integer item of any sign.
    public static func int(_ v: Int64) -> CBOR { v >= 0 ? .unsigned(UInt64(v)) : .negative(UInt64(-1 - v)) }
}

/// Why a CBOR input was refused; each case names the offset so a person can find the byte.
public enum CBORError: Error, Hashable, Sendable, CustomStringConvertible {
    case truncated(offset: Int)
    case trailingBytes(offset: Int, count: Int)
    case inputTooLarge(size: Int, limit: Int)
    case nestingTooDeep(offset: Int, limit: Int)
    case tooManyItems(offset: Int, limit: Int)
    case lengthBeyondInput(offset: Int, length: UInt64)
    case indefiniteLength(offset: Int)
    case unsupportedItem(offset: Int, what: String)
    case duplicateMapKey(offset: Int)
    case invalidUTF8(offset: Int)

    public var description: String {
        switch self {
        case .truncated(let o): "CBOR truncated at byte \(o)"
        case .trailingBytes(let o, let n): "\(n) trailing bytes after the CBOR item at byte \(o)"
        case .inputTooLarge(let s, let l): "CBOR input of \(s) bytes exceeds the limit of \(l)"
        case .nestingTooDeep(let o, let l): "CBOR nesting deeper than \(l) at byte \(o)"
        case .tooManyItems(let o, let l): "CBOR has more than \(l) items (at byte \(o))"
        case .lengthBeyondInput(let o, let n): "CBOR length \(n) at byte \(o) runs past the end of the input"
        case .indefiniteLength(let o): "indefinite-length CBOR item at byte \(o)"
        case .unsupportedItem(let o, let w): "unsupported CBOR item (\(w)) at byte \(o)"
        case .duplicateMapKey(let o): "duplicate CBOR map key at byte \(o)"
        case .invalidUTF8(let o): "CBOR text string at byte \(o) is not valid UTF-8"
        }
    }
}

/// A strict, bounded CBOR decoder.
///
/// Limits bound the work any input can cause: the total size, the nesting depth, and the number of items (every
/// array element, map key and map value counts). Declared lengths are checked against the bytes that remain
/// before anything is allocated, so a 5-byte input cannot ask for gigabytes.
public struct CBORDecoder: Sendable {
    /// Bounds on what one decode may accept.
    public struct Limits: Hashable, Sendable {
        public var maxBytes: Int
        public var maxDepth: Int
        public var maxItems: Int
        public init(maxBytes: Int, maxDepth: Int, maxItems: Int) {
            self.maxBytes = maxBytes
            self.maxDepth = maxDepth
            self.maxItems = maxItems
        }

        /// Enough for any App Attest object (a real attestation is about 5.5 KB with a 16-deep margin to spare).
        public static let appAttest = Limits(maxBytes: 64 * 1024, maxDepth: 16, maxItems: 512)
    }

    public var limits: Limits
    public init(limits: Limits = .appAttest) { self.limits = limits }

    /// Decodes exactly one item that spans the whole input; trailing bytes are an error.
    public func decode(_ bytes: [UInt8]) throws(CBORError) -> CBOR {
        let (item, end) = try decodePrefix(bytes[...])
        guard end == bytes.count else { throw .trailingBytes(offset: end, count: bytes.count - end) }
        return item
    }

    /// Decodes one item at the start of `bytes` and returns it with the index just past it.
    ///
    /// Used where a CBOR item is followed by other data (the COSE key inside authenticator data).
    public func decodePrefix(_ bytes: ArraySlice<UInt8>) throws(CBORError) -> (CBOR, end: Int) {
        guard bytes.count <= limits.maxBytes else { throw .inputTooLarge(size: bytes.count, limit: limits.maxBytes) }
        var reader = Reader(bytes: bytes, limits: limits)
        let item = try reader.item(depth: 1)
        return (item, reader.position)
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        let limits: Limits
        var position: Int
        var items = 0

        init(bytes: ArraySlice<UInt8>, limits: Limits) {
            self.bytes = bytes
            self.limits = limits
            self.position = bytes.startIndex
        }

        var remaining: Int { bytes.endIndex - position }

        mutating func byte() throws(CBORError) -> UInt8 {
            guard position < bytes.endIndex else { throw .truncated(offset: position) }
            defer { position += 1 }
            return bytes[position]
        }

        /// The argument of a head: the additional information itself or the 1/2/4/8 bytes that follow.
        mutating func argument(_ info: UInt8, at offset: Int) throws(CBORError) -> UInt64 {
            switch info {
            case 0..<24: return UInt64(info)
            case 24...27:
                let width = 1 << Int(info - 24)
                guard remaining >= width else { throw .truncated(offset: bytes.endIndex) }
                var v: UInt64 = 0
                for _ in 0..<width { v = v << 8 | UInt64(bytes[position]); position += 1 }
                return v
            case 31: throw .indefiniteLength(offset: offset)
            default: throw .unsupportedItem(offset: offset, what: "reserved additional information \(info)")
            }
        }

        mutating func count(at offset: Int) throws(CBORError) {
            items += 1
            guard items <= limits.maxItems else { throw .tooManyItems(offset: offset, limit: limits.maxItems) }
        }

        mutating func payload(length: UInt64, at offset: Int) throws(CBORError) -> ArraySlice<UInt8> {
            guard length <= UInt64(remaining) else { throw .lengthBeyondInput(offset: offset, length: length) }
            let end = position + Int(length)
            defer { position = end }
            return bytes[position..<end]
        }

        mutating func item(depth: Int) throws(CBORError) -> CBOR {
            let offset = position
            guard depth <= limits.maxDepth else { throw .nestingTooDeep(offset: offset, limit: limits.maxDepth) }
            try count(at: offset)
            let head = try byte()
            let major = head >> 5
            let info = head & 0x1f
            switch major {
            case 0: return .unsigned(try argument(info, at: offset))
            case 1: return .negative(try argument(info, at: offset))
            case 2: return .bytes(Array(try payload(length: try argument(info, at: offset), at: offset)))
            case 3:
                let raw = try payload(length: try argument(info, at: offset), at: offset)
                guard let text = String(validating: raw, as: UTF8.self) else { throw .invalidUTF8(offset: offset) }
                return .text(text)
            case 4:
                let n = try argument(info, at: offset)
                // Every element needs at least one byte: a cheap bound before reserving anything.
                guard n <= UInt64(remaining) else { throw .lengthBeyondInput(offset: offset, length: n) }
                var out: [CBOR] = []
                out.reserveCapacity(Int(n))
                for _ in 0..<n { out.append(try item(depth: depth + 1)) }
                return .array(out)
            case 5:
                let n = try argument(info, at: offset)
                guard n <= UInt64(remaining / 2) else { throw .lengthBeyondInput(offset: offset, length: n) }
                var out: [CBOR.Entry] = []
                out.reserveCapacity(Int(n))
                for _ in 0..<n {
                    let keyOffset = position
                    let key = try item(depth: depth + 1)
                    if out.contains(where: { $0.key == key }) { throw .duplicateMapKey(offset: keyOffset) }
                    out.append(CBOR.Entry(key, try item(depth: depth + 1)))
                }
                return .map(out)
            case 6: throw .unsupportedItem(offset: offset, what: "tag")
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                case 25, 26, 27: throw .unsupportedItem(offset: offset, what: "floating-point number")
                case 31: throw .indefiniteLength(offset: offset)
                default: throw .unsupportedItem(offset: offset, what: "simple value \(info)")
                }
            }
        }
    }
}

extension CBOR {
    /// The deterministic encoding: shortest heads, definite lengths, map entries in their stored order.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    /// Appends this item's encoding to `out`.
    public func encode(into out: inout [UInt8]) {
        switch self {
        case .unsigned(let n): CBOR.head(0, n, into: &out)
        case .negative(let n): CBOR.head(1, n, into: &out)
        case .bytes(let b):
            CBOR.head(2, UInt64(b.count), into: &out)
            out += b
        case .text(let t):
            let u = Array(t.utf8)
            CBOR.head(3, UInt64(u.count), into: &out)
            out += u
        case .array(let a):
            CBOR.head(4, UInt64(a.count), into: &out)
            for x in a { x.encode(into: &out) }
        case .map(let m):
            CBOR.head(5, UInt64(m.count), into: &out)
            for e in m {
                e.key.encode(into: &out)
                e.value.encode(into: &out)
            }
        case .bool(let b): out.append(b ? 0xf5 : 0xf4)
        case .null: out.append(0xf6)
        }
    }

    private static func head(_ major: UInt8, _ n: UInt64, into out: inout [UInt8]) {
        let m = major << 5
        switch n {
        case 0..<24: out.append(m | UInt8(n))
        case 24...0xff: out += [m | 24, UInt8(n)]
        case 0x100...0xffff: out += [m | 25, UInt8(n >> 8), UInt8(n & 0xff)]
        case 0x1_0000...0xffff_ffff:
            out.append(m | 26)
            for s in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt64(s))) }
        default:
            out.append(m | 27)
            for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt64(s))) }
        }
    }
}
