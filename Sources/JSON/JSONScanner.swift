#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Platform

/// Why a line could not be read; the text is what the person fixing the file needs.
public struct LineError: Error, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// A string value as it sits in the line's bytes (valid only while the line is being read).
package struct ByteSpan {
    package var start: UnsafePointer<UInt8>
    package var count: Int
    /// The raw bytes contain backslash escapes; `decoded(into:)` resolves them.
    package var escaped: Bool

    package var raw: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: start, count: count) }

    @inline(__always)
    package func equals(_ literal: StaticString) -> Bool {
        count == literal.utf8CodeUnitCount && !escaped && Self.sameBytes(start, literal.utf8Start, count)
    }

    /// `memcmp(a, b, n) == 0` for the short names and values a line is made of, without a call into libc: two
    /// loads that overlap cover 4 to 16 bytes; a line's every value was compared through `memcmp` before.
    @inline(__always)
    package static func sameBytes(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ n: Int) -> Bool {
        let x = UnsafeRawPointer(a), y = UnsafeRawPointer(b)
        switch n {
        case 0: return true
        case 1...3: return a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1]
        case 4...8:
            return x.loadUnaligned(as: UInt32.self) == y.loadUnaligned(as: UInt32.self)
                && x.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self)
                    == y.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self)
        case 9...16:
            return x.loadUnaligned(as: UInt64.self) == y.loadUnaligned(as: UInt64.self)
                && x.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
                    == y.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
        default: return memcmp(a, b, n) == 0
        }
    }

    package var string: String { String(decoding: raw, as: UTF8.self) }

    /// Whether two names are the same text once escapes are resolved.
    @inline(__always)
    package func sameText(as other: ByteSpan) -> Bool {
        if !escaped, !other.escaped {
            return count == other.count && Self.sameBytes(start, other.start, count)
        }
        return text == other.text
    }
}

/// What a reader does with an object that names a member twice.
public enum DuplicateKeyPolicy: Sendable {
    /// The line is bad (strict ingest, and `JSONParser`'s rule for templates and requests).
    case reject
    /// The line is read (the last value wins) and the duplicate is counted as a warning.
    case count
}

/// The member names of the objects a `JSONScanner` is inside, to find a name given twice in one object.
///
/// Allocated once per batch and reused by every line: up to `inlineKeys` names per object are kept as spans into
/// the line and compared directly (native lines have about eight); an object with more switches to a set of
/// its decoded names, so that a line of thousands of keys costs linear time, not quadratic.
public final class MemberNames {
    // One reader owns these at a time (a batch belongs to one thread), so no dynamic exclusivity checks on
    // the per-line path.
    @exclusivity(unchecked) public var policy: DuplicateKeyPolicy
    /// Duplicates found since the last `resetFindings` (only under `.count`: `.reject` throws instead).
    @exclusivity(unchecked) public private(set) var duplicates = 0
    /// The first duplicated name found since the last `resetFindings`.
    @exclusivity(unchecked) public private(set) var firstDuplicate: String?
    package static let inlineKeys = 32
    package let storage: UnsafeMutablePointer<ByteSpan>
    package let capacity: Int

    public init(policy: DuplicateKeyPolicy = .reject) {
        self.policy = policy
        capacity = Self.inlineKeys * (JSONScanner.maximumDepth + 1)
        storage = .allocate(capacity: capacity)
    }

    deinit { storage.deallocate() }

    public func resetFindings() {
        guard duplicates > 0 else { return }
        duplicates = 0
        firstDuplicate = nil
    }

    package func found(_ name: String) {
        duplicates += 1
        if firstDuplicate == nil { firstDuplicate = name }
    }
}

/// Where a `JSONScanner` is in one object: before its first member or after one, and the names seen so far.
package struct ObjectMembers {
    package var first = true
    package let base: Int
    package var large: Set<String>?
}

/// A forward-only reader of one JSON text in a byte buffer, building no tree and allocating nothing per line.
///
/// Callers walk the structure they expect (`member`, `element`, `string`, `integer`) and `skipValue` whatever
/// they do not need. It is a fast path of the one JSON grammar, `JSONParser`'s: it accepts exactly the texts
/// `JSONParser` accepts (RFC 8259: valid UTF-8, no lone surrogates, no control characters in strings, the
/// number grammar without leading zeros, nesting at most `maximumDepth` deep, no member named twice in one
/// object), and the differential fuzz target `Fuzz/JSONDifferential` holds it to that. Under
/// `DuplicateKeyPolicy.count` a repeated name is counted instead of refused.
package struct JSONScanner {
    /// `JSONParser.maximumDepth`'s default.
    package static let maximumDepth = 256

    package private(set) var p: UnsafePointer<UInt8>
    package let start: UnsafePointer<UInt8>
    package let end: UnsafePointer<UInt8>
    /// Nil only for the scanner of a number written inside a string, which meets no object.
    package let names: MemberNames?
    /// `names.storage`, read once per line rather than through the class reference per key.
    package let keys: UnsafeMutablePointer<ByteSpan>?
    private var depth = 0
    private var keyTop = 0

    package init(_ bytes: UnsafeRawBufferPointer, names: MemberNames?) {
        let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(bitPattern: 1)!
        p = base
        start = base
        end = base + bytes.count
        self.names = names
        keys = names?.storage
    }

    package var column: Int { p - start + 1 }

    package func fail(_ what: String) -> LineError {
        if p >= end { return LineError("\(what) at the end of the line (column \(column))") }
        let c = p.pointee
        let shown = c >= 0x20 && c < 0x7F ? "'\(Character(Unicode.Scalar(c)))'" : cFormat("byte 0x%02X", c)
        return LineError("\(what) at column \(column), found \(shown)")
    }

    @inline(__always)
    package mutating func skipWhitespace() {
        while p < end {
            let c = p.pointee
            guard c == 0x20 || c == 0x09 || c == 0x0D || c == 0x0A else { return }
            p += 1
        }
    }

    @inline(__always)
    package mutating func peek() -> UInt8? {
        skipWhitespace()
        return p < end ? p.pointee : nil
    }

    @inline(__always)
    package mutating func expect(_ c: UInt8, _ what: @autoclosure () -> String) throws(LineError) {
        skipWhitespace()
        guard p < end, p.pointee == c else { throw fail(what()) }
        p += 1
    }

    @inline(__always)
    private mutating func enter() throws(LineError) {
        guard depth < Self.maximumDepth else { throw fail("nesting deeper than \(Self.maximumDepth)") }
        depth += 1
    }

    /// Consumes `{`; walk the members with `member(&)` until it returns nil.
    @inline(__always)
    package mutating func beginObject() throws(LineError) -> ObjectMembers {
        try expect(0x7B, "expected '{'")
        try enter()
        return ObjectMembers(base: keyTop)
    }

    package mutating func beginArray() throws(LineError) {
        try expect(0x5B, "expected '['")
        try enter()
    }

    /// The next member's key, positioned at its value; nil (having consumed `}`) when the object ends.
    @inline(__always)
    package mutating func member(_ object: inout ObjectMembers) throws(LineError) -> ByteSpan? {
        skipWhitespace()
        guard p < end else { throw fail("unterminated object") }
        if p.pointee == 0x7D {
            p += 1
            depth -= 1
            keyTop = object.base
            return nil
        }
        if object.first {
            object.first = false
        } else {
            guard p.pointee == 0x2C else { throw fail("expected ',' or '}'") }
            p += 1
            skipWhitespace()
        }
        let keyStart = p
        let key = try string()
        try note(key, in: &object, at: keyStart)
        try expect(0x3A, "expected ':'")
        skipWhitespace()
        return key
    }

    /// Records a member name, finding one given twice in the same object.
    @inline(__always)
    private mutating func note(_ key: ByteSpan, in object: inout ObjectMembers, at keyStart: UnsafePointer<UInt8>)
        throws(LineError)
    {
        guard let keys else { return }
        var repeated = false
        if object.large != nil {
            repeated = !object.large!.insert(key.text).inserted
        } else {
            var i = object.base
            while i < keyTop {
                if keys[i].sameText(as: key) {
                    repeated = true
                    break
                }
                i += 1
            }
            if !repeated {
                if keyTop - object.base < MemberNames.inlineKeys {
                    keys[keyTop] = key
                    keyTop += 1
                } else {
                    var set = Set<String>()
                    for k in object.base..<keyTop { set.insert(keys[k].text) }
                    set.insert(key.text)
                    object.large = set
                    keyTop = object.base
                }
            }
        }
        guard repeated, let names else { return }
        switch names.policy {
        case .reject:
            let name = key.text
            throw LineError("duplicate member name \"\(name.prefix(64))\" at column \(keyStart - start + 1)")
        case .count: names.found(key.text)
        }
    }

    /// Positions at the next element; false (having consumed `]`) when the array ends.
    @inline(__always)
    package mutating func element(_ first: inout Bool) throws(LineError) -> Bool {
        skipWhitespace()
        guard p < end else { throw fail("unterminated array") }
        if p.pointee == 0x5D {
            p += 1
            depth -= 1
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

    /// A string, checked as `JSONParser` checks it (escapes, surrogate pairs, UTF-8, no raw control characters).
    @inline(__always)
    package mutating func string() throws(LineError) -> ByteSpan {
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
            if c < 0x80 {
                if c == 0x5C {
                    escaped = true
                    try escape()
                    continue
                }
                if c < 0x20 { throw fail("control character in a string") }
                p += 1
                continue
            }
            let n = utf8SequenceLength(p, end)
            guard n > 0 else { throw fail("invalid UTF-8 in a string") }
            p += n
        }
        throw fail("unterminated string")
    }

    /// Checks the escape at `p` (a backslash) and moves past it.
    private mutating func escape() throws(LineError) {
        p += 1
        guard p < end else { throw fail("unterminated string") }
        switch p.pointee {
        case 0x22, 0x5C, 0x2F, 0x62, 0x66, 0x6E, 0x72, 0x74: p += 1
        case 0x75:
            guard let v = hex4(p + 1) else { throw fail("bad \\u escape") }
            if v >= 0xD800, v < 0xDC00 {
                guard end - p >= 11, p[5] == 0x5C, p[6] == 0x75, let low = hex4(p + 7), low >= 0xDC00, low < 0xE000
                else { throw fail("a high surrogate without its low surrogate") }
                p += 11
            } else {
                guard v < 0xDC00 || v >= 0xE000 else { throw fail("a lone low surrogate") }
                p += 5
            }
        default: throw fail("bad escape")
        }
    }

    private func hex4(_ q: UnsafePointer<UInt8>) -> UInt32? {
        guard end - q >= 4 else { return nil }
        var v: UInt32 = 0
        for k in 0..<4 {
            guard let d = hexValue(q[k]) else { return nil }
            v = v << 4 | d
        }
        return v
    }

    /// Whether the next value is `null` (consumed if so).
    @inline(__always)
    package mutating func null() -> Bool {
        skipWhitespace()
        if end - p >= 4, p[0] == 0x6E, p[1] == 0x75, p[2] == 0x6C, p[3] == 0x6C {
            p += 4
            return true
        }
        return false
    }

    /// A boolean, also written as the strings `"true"` / `"false"` or the integers 1 / 0 (export tools vary).
    package mutating func bool() throws(LineError) -> Bool {
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
            throw LineError("expected true or false, found \"\(s.text.prefix(64))\"")
        }
        switch try integer() {
        case 0: return false
        case 1: return true
        default: throw fail("expected true or false")
        }
    }

    /// Moves past one number of the JSON grammar (`-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`);
    /// returns whether it is an integer (no fraction, no exponent).
    @inline(__always)
    package mutating func numberLiteral() throws(LineError) -> Bool {
        @inline(__always) func digit(_ q: UnsafePointer<UInt8>) -> Bool { q < end && q.pointee &- 0x30 < 10 }
        if p < end, p.pointee == 0x2D { p += 1 }
        guard digit(p) else { throw fail("expected a number") }
        if p.pointee == 0x30 {
            p += 1
            if digit(p) { throw fail("a number with a leading zero") }
        } else {
            while digit(p) { p += 1 }
        }
        var integer = true
        if p < end, p.pointee == 0x2E {
            p += 1
            guard digit(p) else { throw fail("expected a digit after '.'") }
            while digit(p) { p += 1 }
            integer = false
        }
        if p < end, p.pointee | 0x20 == 0x65 {
            p += 1
            if p < end, p.pointee == 0x2B || p.pointee == 0x2D { p += 1 }
            guard digit(p) else { throw fail("expected a digit in the exponent") }
            while digit(p) { p += 1 }
            integer = false
        }
        return integer
    }

    /// An integer written as a JSON number without fraction or exponent, or as a string holding one (BigQuery
    /// writes INT64 values as strings in its JSON exports).
    @inline(__always)
    package mutating func integer() throws(LineError) -> Int64 {
        skipWhitespace()
        guard p < end else { throw fail("expected an integer") }
        if p.pointee == 0x22 {
            let s = try string()
            var inner = JSONScanner(s.raw, names: nil)
            let v = try? inner.integer()
            guard let v, !s.escaped, inner.p == inner.end else {
                throw LineError("expected an integer, found \"\(s.text.prefix(64))\"")
            }
            return v
        }
        let s = p
        guard try numberLiteral() else {
            p = s
            throw fail("expected an integer, not a fraction")
        }
        var q = s
        let negative = q.pointee == 0x2D
        if negative { q += 1 }
        var v: Int64 = 0
        while q < p {
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) =
                negative ? m.subtractingReportingOverflow(Int64(q.pointee &- 0x30)) : m.addingReportingOverflow(Int64(q.pointee &- 0x30))
            guard !o1, !o2 else {
                p = s
                throw fail("integer out of range")
            }
            v = a
            q += 1
        }
        return v
    }

    /// Any JSON number (or a string holding one) as a double; rare path, so it may allocate.
    package mutating func number() throws(LineError) -> Double {
        skipWhitespace()
        if p < end, p.pointee == 0x22 {
            let s = try string()
            var inner = JSONScanner(s.raw, names: nil)
            let d = try? inner.number()
            guard let d, !s.escaped, inner.p == inner.end else {
                throw LineError("expected a number, found \"\(s.text.prefix(64))\"")
            }
            return d
        }
        let s = p
        _ = try numberLiteral()
        guard let d = Double(String(decoding: UnsafeRawBufferPointer(start: s, count: p - s), as: UTF8.self)) else {
            throw fail("expected a number")
        }
        return d
    }

    /// Skips one value of any type.
    package mutating func skipValue() throws(LineError) {
        skipWhitespace()
        guard p < end else { throw fail("expected a value") }
        switch p.pointee {
        case 0x22: _ = try string()
        case 0x7B:
            var object = try beginObject()
            while try member(&object) != nil { try skipValue() }
        case 0x5B:
            try beginArray()
            var first = true
            while try element(&first) { try skipValue() }
        case 0x74: try literal("true")
        case 0x66: try literal("false")
        case 0x6E: try literal("null")
        case 0x2D, 0x30...0x39: _ = try numberLiteral()
        default: throw fail("expected a value")
        }
    }

    private mutating func literal(_ text: StaticString) throws(LineError) {
        let n = text.utf8CodeUnitCount
        guard end - p >= n, memcmp(p, text.utf8Start, n) == 0 else { throw fail("expected a value") }
        p += n
    }

    /// Only whitespace may follow the value.
    package mutating func finish() throws(LineError) {
        skipWhitespace()
        guard p == end else { throw fail("unexpected text after the JSON value") }
    }

    /// The value at `p` written back as compact JSON text with `JSONWriter`'s spelling (strings decoded and
    /// re-quoted, numbers as written): the differential fuzz target and the tests compare it with
    /// `JSONWriter` over `JSONParser`'s tree, which holds the scanner to the same decoded values.
    package mutating func canonicalText(into out: inout [UInt8]) throws(LineError) {
        skipWhitespace()
        guard p < end else { throw fail("expected a value") }
        switch p.pointee {
        case 0x22: JSONWriter.appendQuoted(try string().text, to: &out)
        case 0x7B:
            var object = try beginObject()
            out.append(0x7B)
            var any = false
            while let key = try member(&object) {
                if any { out.append(0x2C) }
                any = true
                JSONWriter.appendQuoted(key.text, to: &out)
                out.append(0x3A)
                try canonicalText(into: &out)
            }
            out.append(0x7D)
        case 0x5B:
            try beginArray()
            out.append(0x5B)
            var first = true
            var any = false
            while try element(&first) {
                if any { out.append(0x2C) }
                any = true
                try canonicalText(into: &out)
            }
            out.append(0x5D)
        default:
            let s = p
            try skipValue()
            out.append(contentsOf: UnsafeBufferPointer(start: s, count: p - s))
        }
    }
}

/// The length of the valid UTF-8 sequence of two to four bytes at `p` (whose first byte is at least 0x80), or 0
/// when it is not valid UTF-8 (Unicode Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
@inline(__always)
package func utf8SequenceLength(_ p: UnsafePointer<UInt8>, _ end: UnsafePointer<UInt8>) -> Int {
    let c = p.pointee
    @inline(__always) func cont(_ i: Int, _ lo: UInt8 = 0x80, _ hi: UInt8 = 0xBF) -> Bool {
        p + i < end && p[i] >= lo && p[i] <= hi
    }
    switch c {
    case 0xC2...0xDF: return cont(1) ? 2 : 0
    case 0xE0: return cont(1, 0xA0) && cont(2) ? 3 : 0
    case 0xE1...0xEC, 0xEE, 0xEF: return cont(1) && cont(2) ? 3 : 0
    case 0xED: return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0
    case 0xF0: return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0
    case 0xF1...0xF3: return cont(1) && cont(2) && cont(3) ? 4 : 0
    case 0xF4: return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0
    default: return 0
    }
}

@inline(__always)
package func hexValue(_ c: UInt8) -> UInt32? {
    switch c {
    case 0x30...0x39: UInt32(c - 0x30)
    case 0x41...0x46: UInt32(c - 0x41 + 10)
    case 0x61...0x66: UInt32(c - 0x61 + 10)
    default: nil
    }
}

extension ByteSpan {
    /// The string with escapes resolved (the rare path: it allocates).
    package var text: String {
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
