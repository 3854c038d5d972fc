#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a line could not be read; the text is what the person fixing the file needs.
public struct LineError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// A string value as it sits in the line's bytes (valid only while the line is being read).
struct ByteSpan {
    var start: UnsafePointer<UInt8>
    var count: Int
    /// The raw bytes contain backslash escapes; `decoded(into:)` resolves them.
    var escaped: Bool

    var raw: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: start, count: count) }

    @inline(__always)
    func equals(_ literal: StaticString) -> Bool {
        count == literal.utf8CodeUnitCount && !escaped && memcmp(start, literal.utf8Start, count) == 0
    }

    var string: String { String(decoding: raw, as: UTF8.self) }
}

/// A forward-only reader of one JSON text in a byte buffer, building no tree and allocating nothing.
///
/// Callers walk the structure they expect (`member`, `element`, `string`, `integer`) and `skipValue` whatever
/// they do not need. It accepts exactly RFC 8259 JSON (no comments, no trailing commas) except that it does
/// not check that string bytes are valid UTF-8.
struct JSONScanner {
    private(set) var p: UnsafePointer<UInt8>
    let start: UnsafePointer<UInt8>
    let end: UnsafePointer<UInt8>

    init(_ bytes: UnsafeRawBufferPointer) {
        let base = bytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
        p = base
        start = base
        end = base + bytes.count
    }

    var column: Int { p - start + 1 }

    func fail(_ what: String) -> LineError {
        if p >= end { return LineError("\(what) at the end of the line (column \(column))") }
        let c = p.pointee
        let shown = c >= 0x20 && c < 0x7F ? "'\(Character(Unicode.Scalar(c)))'" : String(format: "byte 0x%02X", c)
        return LineError("\(what) at column \(column), found \(shown)")
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while p < end {
            let c = p.pointee
            guard c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A else { return }
            p += 1
        }
    }

    @inline(__always)
    mutating func peek() -> UInt8? {
        skipWhitespace()
        return p < end ? p.pointee : nil
    }

    @inline(__always)
    mutating func expect(_ c: UInt8, _ what: @autoclosure () -> String) throws(LineError) {
        skipWhitespace()
        guard p < end, p.pointee == c else { throw fail(what()) }
        p += 1
    }

    mutating func beginObject() throws(LineError) { try expect(0x7B, "expected '{'") }
    mutating func beginArray() throws(LineError) { try expect(0x5B, "expected '['") }

    /// The next member's key, positioned at its value; nil (having consumed `}`) when the object ends.
    @inline(__always)
    mutating func member(_ first: inout Bool) throws(LineError) -> ByteSpan? {
        skipWhitespace()
        guard p < end else { throw fail("unterminated object") }
        if p.pointee == 0x7D {
            p += 1
            return nil
        }
        if first {
            first = false
        } else {
            guard p.pointee == 0x2C else { throw fail("expected ',' or '}'") }
            p += 1
            skipWhitespace()
        }
        let key = try string()
        try expect(0x3A, "expected ':'")
        skipWhitespace()
        return key
    }

    /// Positions at the next element; false (having consumed `]`) when the array ends.
    @inline(__always)
    mutating func element(_ first: inout Bool) throws(LineError) -> Bool {
        skipWhitespace()
        guard p < end else { throw fail("unterminated array") }
        if p.pointee == 0x5D {
            p += 1
            return false
        }
        if first {
            first = false
        } else {
            guard p.pointee == 0x2C else { throw fail("expected ',' or ']'") }
            p += 1
            skipWhitespace()
        }
        return true
    }

    @inline(__always)
    mutating func string() throws(LineError) -> ByteSpan {
        skipWhitespace()
        guard p < end, p.pointee == 0x22 else { throw fail("expected a string") }
        p += 1
        let s = p
        var escaped = false
        while p < end {
            let c = p.pointee
            if c == 0x22 {
                let span = ByteSpan(start: s, count: p - s, escaped: escaped)
                p += 1
                return span
            }
            if c == 0x5C {
                escaped = true
                p += 1
                guard p < end else { break }
                switch p.pointee {
                case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: p += 1
                case 0x75:
                    guard end - p >= 5, (1...4).allSatisfy({ hexValue(p[$0]) != nil }) else {
                        throw fail("bad \\u escape")
                    }
                    p += 5
                default: throw fail("bad escape")
                }
                continue
            }
            if c < 0x20 { throw fail("control character in a string") }
            p += 1
        }
        throw fail("unterminated string")
    }

    /// Whether the next value is `null` (consumed if so).
    @inline(__always)
    mutating func null() -> Bool {
        skipWhitespace()
        if end - p >= 4, p[0] == 0x6E, p[1] == 0x75, p[2] == 0x6C, p[3] == 0x6C {
            p += 4
            return true
        }
        return false
    }

    /// A boolean, also written as the strings `"true"` / `"false"` or the integers 1 / 0 (export tools vary).
    mutating func bool() throws(LineError) -> Bool {
        skipWhitespace()
        guard p < end else { throw fail("expected true or false") }
        if end - p >= 4, memcmp(p, "true", 4) == 0 {
            p += 4
            return true
        }
        if end - p >= 5, memcmp(p, "false", 5) == 0 {
            p += 5
            return false
        }
        if p.pointee == 0x22 {
            let s = try string()
            if s.equals("true") { return true }
            if s.equals("false") { return false }
            throw LineError("expected true or false, found \"\(s.string)\"")
        }
        switch try integer() {
        case 0: return false
        case 1: return true
        default: throw fail("expected true or false")
        }
    }

    /// An integer written as a JSON number without fraction or exponent, or as a string of digits (BigQuery
    /// writes INT64 values as strings in its JSON exports).
    @inline(__always)
    mutating func integer() throws(LineError) -> Int64 {
        skipWhitespace()
        guard p < end else { throw fail("expected an integer") }
        if p.pointee == 0x22 {
            let s = try string()
            var inner = JSONScanner(s.raw)
            let v = try inner.integer()
            guard inner.p == inner.end else { throw LineError("expected an integer, found \"\(s.string)\"") }
            return v
        }
        var negative = false
        if p.pointee == 0x2D {
            negative = true
            p += 1
        }
        let digitsStart = p
        var v: Int64 = 0
        while p < end {
            let d = p.pointee &- 0x30
            guard d < 10 else { break }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(d))
            guard !o1, !o2 else { throw fail("integer out of range") }
            v = a
            p += 1
        }
        guard p > digitsStart else { throw fail("expected an integer") }
        if p < end, p.pointee == 0x2E || p.pointee == 0x65 || p.pointee == 0x45 {
            throw fail("expected an integer, not a fraction")
        }
        return negative ? -v : v
    }

    /// Any JSON number (or numeric string) as a double; rare path, so it may allocate.
    mutating func number() throws(LineError) -> Double {
        skipWhitespace()
        if p < end, p.pointee == 0x22 {
            let s = try string()
            guard let d = Double(s.string) else { throw LineError("expected a number, found \"\(s.string)\"") }
            return d
        }
        let s = p
        while p < end, (p.pointee >= 0x30 && p.pointee <= 0x39) || [0x2D, 0x2B, 0x2E, 0x65, 0x45].contains(p.pointee) {
            p += 1
        }
        guard p > s, let d = Double(String(decoding: UnsafeRawBufferPointer(start: s, count: p - s), as: UTF8.self))
        else { throw fail("expected a number") }
        return d
    }

    /// Skips one value of any type.
    mutating func skipValue() throws(LineError) {
        skipWhitespace()
        guard p < end else { throw fail("expected a value") }
        switch p.pointee {
        case 0x22: _ = try string()
        case 0x7B:
            p += 1
            var first = true
            while try member(&first) != nil { try skipValue() }
        case 0x5B:
            p += 1
            var first = true
            while try element(&first) { try skipValue() }
        case 0x74: try literal("true")
        case 0x66: try literal("false")
        case 0x6E: try literal("null")
        default:
            let s = p
            if p.pointee == 0x2D { p += 1 }
            while p < end,
                (p.pointee >= 0x30 && p.pointee <= 0x39) || [0x2D, 0x2B, 0x2E, 0x65, 0x45].contains(p.pointee)
            {
                p += 1
            }
            guard p > s, s.pointee != 0x2D || p > s + 1 else { throw fail("expected a value") }
        }
    }

    private mutating func literal(_ text: StaticString) throws(LineError) {
        let n = text.utf8CodeUnitCount
        guard end - p >= n, memcmp(p, text.utf8Start, n) == 0 else { throw fail("expected a value") }
        p += n
    }

    /// Only whitespace may follow the value.
    mutating func finish() throws(LineError) {
        skipWhitespace()
        guard p == end else { throw fail("unexpected text after the JSON value") }
    }
}

@inline(__always)
func hexValue(_ c: UInt8) -> UInt32? {
    switch c {
    case 0x30...0x39: UInt32(c - 0x30)
    case 0x41...0x46: UInt32(c - 0x41 + 10)
    case 0x61...0x66: UInt32(c - 0x61 + 10)
    default: nil
    }
}

extension ByteSpan {
    /// The string with escapes resolved (the rare path: it allocates).
    var text: String {
        guard escaped else { return string }
        var out: [UInt8] = []
        out.reserveCapacity(count)
        var i = 0
        func appendScalar(_ v: UInt32) { out.append(contentsOf: String(Unicode.Scalar(v) ?? "\u{FFFD}").utf8) }
        func hex4(_ at: Int) -> UInt32 {
            var v: UInt32 = 0
            for k in 0..<4 { v = v << 4 | (hexValue(start[at + k]) ?? 0) }
            return v
        }
        while i < count {
            let c = start[i]
            guard c == 0x5C, i + 1 < count else {
                out.append(c)
                i += 1
                continue
            }
            let e = start[i + 1]
            i += 2
            switch e {
            case 0x62: out.append(0x08)
            case 0x66: out.append(0x0C)
            case 0x6E: out.append(0x0A)
            case 0x72: out.append(0x0D)
            case 0x74: out.append(0x09)
            case 0x75:
                let v = hex4(i)
                i += 4
                if v >= 0xD800, v < 0xDC00, i + 6 <= count, start[i] == 0x5C, start[i + 1] == 0x75 {
                    let low = hex4(i + 2)
                    if low >= 0xDC00, low < 0xE000 {
                        i += 6
                        appendScalar(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00))
                        continue
                    }
                }
                appendScalar(v)
            default: out.append(e)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
