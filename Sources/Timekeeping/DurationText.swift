import Platform

/// Why a text is not a duration.
public struct DurationParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var input: String
    /// A duration in the right form, but longer than `Instant.Duration.longestWritten`.
    public var tooLong = false
    public init(input: String, tooLong: Bool = false) {
        self.input = input
        self.tooLong = tooLong
    }
    public var description: String {
        tooLong
            ? "\(input.quotedExcerpt()) is longer than \(Instant.Duration.longestWritten.compactText) (100 years), the longest duration accepted"
            : "\(input.quotedExcerpt()) is not a duration such as 30s, 5m, 2h or 1h30m"
    }
}

extension Instant.Duration {
    /// The longest duration a text may say: 100 years (36500d). Far beyond any hold, timeout or approval, and far
    /// enough below `Int64`'s microseconds that the sums and instants a plan computes from a few of them (a hold
    /// plus a timeout, added to now) cannot overflow, which would stop the process.
    public static let longestWritten = Instant.Duration.days(36_500)

    /// The one duration parser of the texts people write: `90s`, `5m`, `2h`, `1d`, `1h30m`, `0s`; at most
    /// `longestWritten`.
    public static func parse(_ text: String) throws(DurationParseError) -> Instant.Duration {
        var total: Int64 = 0
        var digits = ""
        var sawUnit = false
        for c in text {
            if c.isASCII, c.isNumber {
                digits.append(c)
                continue
            }
            let unit: Int64
            switch c {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86_400
            default: throw DurationParseError(input: text)
            }
            guard !digits.isEmpty else { throw DurationParseError(input: text) }
            // Checked arithmetic: digits of any length are too long, never a trap.
            guard let n = Int64(digits), case let (part, o1) = n.multipliedReportingOverflow(by: unit), !o1,
                case let (sum, o2) = total.addingReportingOverflow(part), !o2, sum <= longestWritten.microseconds / 1_000_000
            else { throw DurationParseError(input: text, tooLong: true) }
            total = sum
            digits = ""
            sawUnit = true
        }
        guard sawUnit, digits.isEmpty else { throw DurationParseError(input: text) }
        return .seconds(total)
    }

    /// The same duration written back (`1h30m`, `45s`, `0s`; a negative one with a minus sign, `-5m`).
    public var compactText: String {
        var s = microseconds / 1_000_000
        if s == 0 { return "0s" }
        if s < 0 { return "-" + Instant.Duration.seconds(-s).compactText }
        var out = ""
        for (unit, name) in [(Int64(86_400), "d"), (3600, "h"), (60, "m"), (1, "s")] where s >= unit {
            out += "\(s / unit)\(name)"
            s %= unit
        }
        return out
    }
}
