import Platform

/// A percentage as an exact integer count of micro-percent (1% = 1,000,000; 100% = 100,000,000).
///
/// Firebase stores percent conditions in micro-percent, and percentages must stay exact: `10.1 + 0.1` must be
/// `10.2`, never `10.199999999`. Every percentage in rollout is this type; only formatting turns it into text.
public struct MicroPercent: Hashable, Comparable, Sendable, CustomStringConvertible {
    public static let perPercent: Int64 = 1_000_000
    public static let zero = MicroPercent(0)
    public static let fifty = MicroPercent(50_000_000)
    public static let hundred = MicroPercent(100_000_000)

    public let value: Int64

    public init(_ value: Int64) { self.value = value }
    public init(percent: Int64) { value = percent * MicroPercent.perPercent }

    public static func < (a: MicroPercent, b: MicroPercent) -> Bool { a.value < b.value }
    public static func + (a: MicroPercent, b: MicroPercent) -> MicroPercent { MicroPercent(a.value + b.value) }
    public static func - (a: MicroPercent, b: MicroPercent) -> MicroPercent { MicroPercent(a.value - b.value) }

    /// Whether this is a valid rollout percentage: 0 to 100 inclusive.
    public var isValidPercentage: Bool { value >= 0 && value <= MicroPercent.hundred.value }

    /// The shortest exact decimal: `12.5`, `10`, `0.000001`.
    public var decimalText: String {
        let sign = value < 0 ? "-" : ""
        let a = value.magnitude
        let whole = a / 1_000_000
        var frac = a % 1_000_000
        guard frac != 0 else { return "\(sign)\(whole)" }
        var digits = 6
        while frac % 10 == 0 {
            frac /= 10
            digits -= 1
        }
        let fracText = String(frac)
        return "\(sign)\(whole)." + String(repeating: "0", count: digits - fracText.count) + fracText
    }

    /// `12.5%`.
    public var description: String { decimalText + "%" }

    /// A signed change: `+2.5`, `-10`.
    public var signedText: String { value >= 0 ? "+" + decimalText : decimalText }

    /// A change in percentage points, signed, in the one spelling of console and CLI: `+1 point`, `-2.5 points`.
    public var pointsText: String { signedText + (value.magnitude == 1_000_000 ? " point" : " points") }

    /// Parses a decimal percentage (`25`, `12.5`, `0.000001`), optionally signed, optionally with a trailing `%`.
    ///
    /// Exact: decimal text is converted digit by digit, never through floating point. More than six decimals,
    /// exponents, `NaN`, words and empty text are refused with a message that says why.
    public static func parse(_ text: String, allowSign: Bool = false) throws(PercentParseError) -> MicroPercent {
        // Over the UTF-8 bytes: every character that matters is ASCII, and a Character walk's first use in a
        // process costs more than the rest of the parse (grapheme breaking tables).
        func fail(_ kind: PercentParseError.Kind) -> PercentParseError { PercentParseError(input: text, kind: kind) }
        let bytes = Array(text.utf8)
        var lo = 0
        var hi = bytes.count
        while lo < hi, bytes[lo] == UInt8(ascii: " ") || bytes[lo] == UInt8(ascii: "\t") { lo += 1 }
        while hi > lo, bytes[hi - 1] == UInt8(ascii: " ") || bytes[hi - 1] == UInt8(ascii: "\t") { hi -= 1 }
        guard lo < hi else { throw fail(.empty) }
        if bytes[hi - 1] == UInt8(ascii: "%") { hi -= 1 }
        var negative = false
        if lo < hi, bytes[lo] == UInt8(ascii: "+") || bytes[lo] == UInt8(ascii: "-") {
            guard allowSign || bytes[lo] == UInt8(ascii: "-") else { throw fail(.unexpectedSign) }
            negative = bytes[lo] == UInt8(ascii: "-")
            lo += 1
        }
        let s = bytes[lo..<hi]
        let dot = s.firstIndex(of: UInt8(ascii: "."))
        let wholeDigits = s[s.startIndex..<(dot ?? s.endIndex)]
        let fracDigits = dot.map { s[($0 + 1)...] } ?? []
        func isDigits(_ d: ArraySlice<UInt8>) -> Bool { d.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } }
        guard !wholeDigits.isEmpty || dot != nil, isDigits(wholeDigits), isDigits(fracDigits), dot == nil || !fracDigits.isEmpty
        else { throw fail(.notANumber) }
        guard fracDigits.count <= 6 else { throw fail(.tooPrecise) }
        guard wholeDigits.count <= 12 else { throw fail(.outOfRange) }
        func value(_ d: ArraySlice<UInt8>) -> Int64 { d.reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) } }
        var frac = value(fracDigits)
        for _ in fracDigits.count..<6 { frac *= 10 }
        let micro = value(wholeDigits) * 1_000_000 + frac
        // `-0` is not a percentage either: a sign where none is expected is refused whatever follows it.
        if negative && !allowSign { throw fail(.unexpectedSign) }
        return MicroPercent(negative ? -micro : micro)
    }

    /// Parses a rollout percentage: `parse` without a sign, then the range 0 to 100. The one parser of every
    /// percentage an operator types (`set`, plans, the console's `=`, `--percent`).
    public static func parsePercentage(_ text: String) throws(PercentParseError) -> MicroPercent {
        let p = try parse(text)
        guard p.isValidPercentage else { throw PercentParseError(input: text, kind: .outOfRange) }
        return p
    }
}

/// Why a percentage was refused: a kind that callers decide on, and the words shown to a person.
public struct PercentParseError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case empty, notANumber, tooPrecise, outOfRange
        /// `+5` or `-0` where a percentage, not a change, is expected.
        case unexpectedSign
    }

    public var input: String
    public var kind: Kind

    public var reason: String {
        switch kind {
        case .empty: "a percentage is required"
        case .notANumber: "not a number (expected e.g. 25 or 12.5)"
        case .tooPrecise: "at most 6 decimals (micro-percent precision)"
        case .outOfRange: "out of range 0 to 100"
        case .unexpectedSign: "no sign expected (a percentage from 0 to 100)"
        }
    }

    public var description: String { "invalid percentage \(input.quotedExcerpt()): \(reason)" }
}
