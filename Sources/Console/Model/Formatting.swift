import RemoteConfig
import Telemetry
import Timekeeping

/// Percent text for the console: the core's `MicroPercent` (1% = 1,000,000) shown and typed exactly.
///
/// The arithmetic and the exact decimal conversion are RemoteConfig's `MicroPercent`; this adds the console's
/// units (`%`, `pt`) and messages written for a person at a prompt.
public enum PercentText {
    /// 100%.
    public static let whole = MicroPercent.hundred
    /// 1 percentage point.
    public static let point = MicroPercent(MicroPercent.perPercent)

    /// Formats exactly, without rounding and without trailing zeros: `12_500_000` → `12.5%`, `1` → `0.000001%`.
    public static func format(_ micro: MicroPercent, sign: Bool = false) -> String {
        formatNumber(micro, sign: sign) + "%"
    }

    /// As `format` but without the `%` sign (used in condition bands and in the exact-value prompt).
    public static func formatNumber(_ micro: MicroPercent, sign: Bool = false) -> String {
        sign ? micro.signedText : micro.decimalText
    }

    /// Formats a change in percentage points, signed, as the CLI does (RemoteConfig's `pointsText`): `+1 point`,
    /// `-2.5 points`.
    public static func formatPoints(_ micro: MicroPercent) -> String { micro.pointsText }

    /// Why a typed percentage was not accepted.
    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        case empty
        case notANumber(String)
        case tooPrecise(String)
        case outOfRange(String)

        public var description: String {
            switch self {
            case .empty: "type a percentage, for example 12.5"
            case .notANumber(let t): "'\(t)' is not a percentage; type a number such as 12.5"
            case .tooPrecise(let t): "'\(t)' has more than 6 decimals; Remote Config keeps 6 (0.000001%)"
            case .outOfRange(let t): "'\(t)' is outside 0–100%"
            }
        }
    }

    /// Parses a typed percentage such as `12.5`, `12.5%` or ` 7 ` into micro-percent, exactly (no floating point).
    public static func parse(_ input: String) throws(ParseError) -> MicroPercent {
        var text = Substring(input).drop(while: { $0 == " " })
        while text.last == " " { text = text.dropLast() }
        if text.last == "%" { text = text.dropLast() }
        while text.last == " " { text = text.dropLast() }
        guard !text.isEmpty else { throw .empty }
        let value: RemoteConfig.MicroPercent
        do {
            value = try RemoteConfig.MicroPercent.parsePercentage(String(text))
        } catch {
            switch error.kind {
            case .tooPrecise: throw .tooPrecise(String(text))
            case .outOfRange, .unexpectedSign: throw .outOfRange(String(text))
            case .empty, .notANumber: throw .notANumber(String(text))
            }
        }
        return value
    }
}

/// Number, ratio, rate, time and duration text for the console, all locale-independent.
public enum Format {
    /// A count with thousands separators: `12,345`.
    public static func count(_ n: Int) -> String { groupedCount(Int64(n)) }

    /// A count shortened to at most about five characters: `987`, `12.3k`, `4.56M`.
    public static func shortCount(_ n: Int) -> String {
        let a = Double(n.magnitude)
        let sign = n < 0 ? "-" : ""
        func scaled(_ unit: Double, _ suffix: String) -> String {
            let v = a / unit
            var text = fixed(v, v < 9.995 ? 2 : v < 99.95 ? 1 : 0)
            if text.contains(".") {
                while text.last == "0" { text.removeLast() }
                if text.last == "." { text.removeLast() }
            }
            return sign + text + suffix
        }
        if a < 10_000 { return sign + count(Int(a)) }
        if a < 999_500 { return scaled(1e3, "k") }
        if a < 999_500_000 { return scaled(1e6, "M") }
        return scaled(1e9, "G")
    }

    /// A share as a whole percentage for quick reading: `41%`, `<1%`, `0%`.
    public static func roughShare(_ value: Double) -> String {
        guard value.isFinite else { return "–" }
        if value > 0 && value < 0.005 { return "<1%" }
        return fixed(value * 100, 0) + "%"
    }

    /// A share in 0...1 as a percentage with `decimals` places: `0.9812` → `98.1%`.
    public static func share(_ value: Double, decimals: Int = 1) -> String {
        guard value.isFinite else { return "–" }
        return fixed(value * 100, decimals) + "%"
    }

    /// A rate with sensible precision: `0.42`, `4.2`, `42`, `4,200`.
    public static func rate(_ value: Double) -> String {
        guard value.isFinite else { return "–" }
        let a = abs(value)
        if a == 0 { return "0" }
        if a < 1 { return fixed(value, 2) }
        if a < 10 { return fixed(value, 1) }
        return count(Int(value.rounded()))
    }

    /// A signed number of percentage points: `+0.06`, `-0.12`.
    public static func points(_ value: Double, decimals: Int = 2) -> String {
        guard value.isFinite else { return "–" }
        let text = fixed(abs(value), decimals)
        if value < 0 && text.contains(where: { $0 != "0" && $0 != "." }) { return "-" + text }
        return "+" + text
    }

    /// A fixed-point decimal without locale or Foundation: rounds half away from zero.
    public static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return "–" }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        guard scaled < 9e17 else { return value < 0 ? "-∞" : "∞" }
        let n = Int(scaled)
        let whole = n / Int(scale)
        let fraction = n % Int(scale)
        var text = String(whole)
        if decimals > 0 {
            let f = String(fraction)
            text += "." + String(repeating: "0", count: decimals - f.count) + f
        }
        return (value < 0 && n != 0 ? "-" : "") + text
    }

    /// A time of day `HH:MM:SS` at a fixed offset from UTC.
    public static func time(_ instant: Instant, utcOffsetSeconds: Int = 0) -> String {
        let secs = instant.seconds + Int64(utcOffsetSeconds)
        let s = ((secs % 86_400) + 86_400) % 86_400
        return two(Int(s / 3600)) + ":" + two(Int(s / 60 % 60)) + ":" + two(Int(s % 60))
    }

    /// A log line's time: `HH:MM:SS` on the day of `today`, `MM-DD HH:MM:SS` on any other day.
    public static func logTime(_ instant: Instant, today: Instant?, utcOffsetSeconds: Int = 0) -> String {
        let day = { (i: Instant) in (i.seconds + Int64(utcOffsetSeconds)) / 86_400 - ((i.seconds + Int64(utcOffsetSeconds)) < 0 ? 1 : 0) }
        guard let today, day(today) != day(instant) else { return time(instant, utcOffsetSeconds: utcOffsetSeconds) }
        return String(dateTime(instant, utcOffsetSeconds: utcOffsetSeconds).dropFirst(5))
    }

    /// A date and time `YYYY-MM-DD HH:MM:SS` at a fixed offset from UTC.
    public static func dateTime(_ instant: Instant, utcOffsetSeconds: Int = 0) -> String {
        let shifted = Instant(microseconds: instant.microseconds + Int64(utcOffsetSeconds) * 1_000_000)
        let iso = shifted.iso8601
        return String(iso.prefix(10)) + " " + String(iso.dropFirst(11).prefix(8))
    }

    /// An offset from UTC as `UTC`, `UTC+02:00` or `UTC-05:30`.
    public static func utcOffset(_ seconds: Int) -> String {
        guard seconds != 0 else { return "UTC" }
        let a = abs(seconds)
        return "UTC" + (seconds < 0 ? "-" : "+") + two(a / 3600) + ":" + two(a / 60 % 60)
    }

    /// An age or duration, short: `0.3s`, `12s`, `3m12s`, `2h05m`, `3d04h`.
    public static func duration(_ d: Instant.Duration) -> String {
        let us = max(0, d.microseconds)
        if us < 10_000_000 { return fixed(Double(us) / 1e6, 1) + "s" }
        let s = us / 1_000_000
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m" + two(Int(s % 60)) + "s" }
        if s < 86_400 { return "\(s / 3600)h" + two(Int(s / 60 % 60)) + "m" }
        return "\(s / 86_400)d" + two(Int(s / 3600 % 24)) + "h"
    }

    /// Text broken into lines of at most `width` columns at spaces (words longer than a line are cut).
    public static func wrap(_ text: String, _ width: Int) -> [String] {
        guard width > 0 else { return [] }
        var lines: [String] = []
        var current = ""
        for word in text.split(separator: " ") {
            let w = String(word)
            if current.isEmpty {
                current = truncate(w, width)
            } else if CharacterWidth.of(current) + 1 + CharacterWidth.of(w) <= width {
                current += " " + w
            } else {
                lines.append(current)
                current = truncate(w, width)
            }
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    /// Text cut to `width` columns with a trailing `…`, or kept whole when it fits.
    public static func truncate(_ text: String, _ width: Int) -> String {
        guard width > 0 else { return "" }
        guard CharacterWidth.of(text) > width else { return text }
        var out = String.UnicodeScalarView()
        var used = 0
        for s in text.unicodeScalars {
            let w = CharacterWidth.of(s)
            if used + w > width - 1 { break }
            out.append(s)
            used += w
        }
        return String(out) + "…"
    }

    /// Text cut from the left to `width` columns: `…/long/path/store.db`.
    public static func truncateLeading(_ text: String, _ width: Int) -> String {
        guard width > 0 else { return "" }
        guard CharacterWidth.of(text) > width else { return text }
        var kept: [Unicode.Scalar] = []
        var used = 0
        for s in text.unicodeScalars.reversed() {
            let w = CharacterWidth.of(s)
            if used + w > width - 1 { break }
            kept.append(s)
            used += w
        }
        var view = String.UnicodeScalarView()
        view.append("…")
        view.append(contentsOf: kept.reversed())
        return String(view)
    }

    /// Text padded with spaces (or cut) to exactly `width` columns.
    public static func pad(_ text: String, _ width: Int) -> String {
        let t = truncate(text, width)
        let w = CharacterWidth.of(t)
        return w >= width ? t : t + String(repeating: " ", count: width - w)
    }

    /// Text right-aligned in `width` columns.
    public static func padLeft(_ text: String, _ width: Int) -> String {
        let t = truncate(text, width)
        let w = CharacterWidth.of(t)
        return w >= width ? t : String(repeating: " ", count: width - w) + t
    }

    private static func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
}
