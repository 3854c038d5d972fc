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
        var s = Substring(text.trimmingSpaces)
        guard !s.isEmpty else { throw PercentParseError(input: text, reason: "a percentage is required") }
        if s.hasSuffix("%") { s = s.dropLast() }
        var negative = false
        if let f = s.first, f == "+" || f == "-" {
            guard allowSign || f == "-" else { throw PercentParseError(input: text, reason: "no sign expected") }
            negative = f == "-"
            s = s.dropFirst()
        }
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let wholeText = parts.first, !wholeText.isEmpty || parts.count == 2,
            (wholeText + (parts.count == 2 ? parts[1] : "")).utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            !(parts.count == 2 && parts[1].isEmpty)
        else {
            throw PercentParseError(input: text, reason: "not a number (expected e.g. 25 or 12.5)")
        }
        let fracText = parts.count == 2 ? parts[1] : ""
        guard fracText.count <= 6 else {
            throw PercentParseError(input: text, reason: "at most 6 decimals (micro-percent precision)")
        }
        guard wholeText.count <= 12 else { throw PercentParseError(input: text, reason: "out of range 0 to 100") }
        let whole = Int64(wholeText.isEmpty ? "0" : wholeText)!
        var frac = Int64(fracText.isEmpty ? "0" : fracText)!
        for _ in fracText.count..<6 { frac *= 10 }
        let micro = whole * 1_000_000 + frac
        if negative && !allowSign && micro != 0 {
            throw PercentParseError(input: text, reason: "out of range 0 to 100")
        }
        return MicroPercent(negative ? -micro : micro)
    }
}

/// Why a percentage was refused.
public struct PercentParseError: Error, CustomStringConvertible, Sendable, Equatable {
    public var input: String
    public var reason: String
    public var description: String { "invalid percentage '\(input)': \(reason)" }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
}
