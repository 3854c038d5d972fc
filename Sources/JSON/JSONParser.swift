import Platform

/// A strict RFC 8259 parser over UTF-8 bytes.
///
/// Strict on purpose: templates and requests come from outside, so duplicate keys, trailing garbage, invalid
/// UTF-8, lone surrogates, control characters in strings and nesting deeper than `maximumDepth` are errors with
/// the line and column where the problem is.
public struct JSONParser {
    public var maximumDepth = 256

    public init() {}

    /// Parses one complete document.
    public func parse(_ text: String) throws(JSONError) -> JSONValue {
        var copy = text
        let result = copy.withUTF8 { buf in Result { () throws(JSONError) in try parse(bytes: UnsafeRawBufferPointer(buf)) } }
        return try result.get()
    }

    public func parse(_ bytes: [UInt8]) throws(JSONError) -> JSONValue {
        let result = bytes.withUnsafeBytes { buf in Result { () throws(JSONError) in try parse(bytes: buf) } }
        return try result.get()
    }

    public func parse(bytes: UnsafeRawBufferPointer) throws(JSONError) -> JSONValue {
        var reader = Reader(bytes: bytes.bindMemory(to: UInt8.self), maximumDepth: maximumDepth)
        reader.skipWhitespace()
        let value = try reader.value(depth: 0)
        reader.skipWhitespace()
        guard reader.atEnd else { throw reader.error("end of input after the document") }
        return value
    }
}

/// Why a document was rejected, with its position.
public struct JSONError: Error, CustomStringConvertible, Sendable, Equatable {
    public var message: String
    public var line: Int
    public var column: Int
    public var description: String { "line \(line), column \(column): \(message)" }
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    let maximumDepth: Int
    var i = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    var atEnd: Bool { i >= bytes.count }

    func error(_ expected: String, at position: Int? = nil) -> JSONError {
        let p = min(position ?? i, bytes.count)
        var line = 1
        var column = 1
        for k in 0..<p {
            if bytes[k] == 0x0A {
                line += 1
                column = 1
            } else if bytes[k] & 0xC0 != 0x80 {
                column += 1
            }
        }
        let found: String
        if p >= bytes.count {
            found = "end of input"
        } else {
            let c = bytes[p]
            found = c >= 0x20 && c < 0x7F ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
        }
        return JSONError(message: "expected \(expected), found \(found)", line: line, column: column)
    }

    mutating func skipWhitespace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x0A, 0x0D, 0x09: i += 1
            default: return
            }
        }
    }

    mutating func value(depth: Int) throws(JSONError) -> JSONValue {
        guard i < bytes.count else { throw error("a value") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return .object(try object(depth: depth + 1))
        case UInt8(ascii: "["): return .array(try array(depth: depth + 1))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw error("a value")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONError) {
        let start = i
        for k in 0..<word.utf8CodeUnitCount {
            guard i < bytes.count, bytes[i] == word.utf8Start[k] else { throw error("'\(word)'", at: start) }
            i += 1
        }
    }

    mutating func object(depth: Int) throws(JSONError) -> JSONObject {
        guard depth <= maximumDepth else { throw error("nesting no deeper than \(maximumDepth)") }
        i += 1
        var members: [(key: String, value: JSONValue)] = []
        // Duplicates are found by a scan of the members read so far, and by a set once an object passes 16 (the
        // size at which `JSONObject` indexes its keys): most objects are small, and a set per object cost a
        // template parse a third of its time.
        var seen: Set<String>?
        skipWhitespace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
            i += 1
            return JSONObject()
        }
        while true {
            skipWhitespace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw error("a member name in double quotes") }
            let keyStart = i
            let key = try string()
            let duplicate: Bool
            if seen != nil {
                duplicate = !seen!.insert(key).inserted
            } else {
                duplicate = members.contains { $0.key == key }
                if !duplicate, members.count == 16 { seen = Set(members.map(\.key) + [key]) }
            }
            guard !duplicate else {
                throw JSONError(
                    message: "duplicate member name \"\(key)\"", line: error("", at: keyStart).line,
                    column: error("", at: keyStart).column)
            }
            skipWhitespace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw error("':' after a member name") }
            i += 1
            skipWhitespace()
            members.append((key, try value(depth: depth)))
            skipWhitespace()
            guard i < bytes.count else { throw error("',' or '}'") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard bytes[i] == UInt8(ascii: "}") else { throw error("',' or '}'") }
            i += 1
            return JSONObject(uniqueMembers: members)
        }
    }

    mutating func array(depth: Int) throws(JSONError) -> [JSONValue] {
        guard depth <= maximumDepth else { throw error("nesting no deeper than \(maximumDepth)") }
        i += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
            i += 1
            return items
        }
        while true {
            skipWhitespace()
            items.append(try value(depth: depth))
            skipWhitespace()
            guard i < bytes.count else { throw error("',' or ']'") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard bytes[i] == UInt8(ascii: "]") else { throw error("',' or ']'") }
            i += 1
            return items
        }
    }

    mutating func number() throws(JSONError) -> JSONNumber {
        let start = i
        func digit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard i < bytes.count, digit(bytes[i]) else { throw error("a digit") }
        if bytes[i] == 0x30 {
            i += 1
            if i < bytes.count, digit(bytes[i]) { throw error("no leading zeros in a number") }
        } else {
            while i < bytes.count, digit(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            guard i < bytes.count, digit(bytes[i]) else { throw error("a digit after '.'") }
            while i < bytes.count, digit(bytes[i]) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, digit(bytes[i]) else { throw error("a digit in the exponent") }
            while i < bytes.count, digit(bytes[i]) { i += 1 }
        }
        return JSONNumber(literal: String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self))
    }

    mutating func string() throws(JSONError) -> String {
        i += 1
        let start = i
        // Fast path: no escapes, ASCII or valid UTF-8 validated below.
        var plain = true
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") { break }
            if c == UInt8(ascii: "\\") {
                plain = false
                break
            }
            if c < 0x20 { throw error("no control characters inside a string (escape them)") }
            i += 1
        }
        guard i < bytes.count else { throw error("'\"' to close the string") }
        if plain {
            let slice = UnsafeBufferPointer(rebasing: bytes[start..<i])
            guard let s = String(utf8Bytes: slice) else { throw error("valid UTF-8", at: start) }
            i += 1
            return s
        }
        var out = [UInt8](UnsafeBufferPointer(rebasing: bytes[start..<i]))
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                i += 1
                guard let s = String(utf8Bytes: out) else { throw error("valid UTF-8", at: start) }
                return s
            }
            if c < 0x20 { throw error("no control characters inside a string (escape them)") }
            if c != UInt8(ascii: "\\") {
                out.append(c)
                i += 1
                continue
            }
            i += 1
            guard i < bytes.count else { throw error("an escape character") }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        throw error("a low surrogate after a high surrogate")
                    }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("a low surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw error("no lone low surrogate")
                }
                out.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
            default:
                throw error("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)", at: i - 1)
            }
        }
        throw error("'\"' to close the string")
    }

    mutating func hex4() throws(JSONError) -> UInt32 {
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard i < bytes.count else { throw error("four hex digits") }
            guard let d = hexValue(bytes[i]) else { throw error("a hex digit") }
            v = v << 4 | d
            i += 1
        }
        return v
    }
}
