import Platform

/// Why a text is not a duration.
public struct DurationParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var input: String
    public var description: String { "\(input.quotedExcerpt()) is not a duration such as 30s, 5m, 2h or 1h30m" }
}

extension Instant.Duration {
    /// The one duration parser of the texts people write: `90s`, `5m`, `2h`, `1d`, `1h30m`, `0s`.
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
            guard let n = Int64(digits), n <= 10_000_000 else { throw DurationParseError(input: text) }
            total += n * unit
            digits = ""
            sawUnit = true
        }
        guard sawUnit, digits.isEmpty else { throw DurationParseError(input: text) }
        return .seconds(total)
    }

    /// The same duration written back (`1h30m`, `45s`, `0s`).
    public var compactText: String {
        var s = microseconds / 1_000_000
        if s == 0 { return "0s" }
        var out = ""
        for (unit, name) in [(Int64(86_400), "d"), (3600, "h"), (60, "m"), (1, "s")] where s >= unit {
            out += "\(s / unit)\(name)"
            s %= unit
        }
        return out
    }
}
