import Glibc
import Platform

/// A source of the current time, injected everywhere the core needs "now".
///
/// Core code never reads the wall clock directly: refresh ticks, staleness, TTLs, lockouts and the simulator
/// all take a `Clock`, so that tests can move time by hand and the simulator can run faster than real time.
public protocol Clock: Sendable {
    /// The current instant.
    func now() -> Instant
}

/// An instant as whole microseconds since the Unix epoch (UTC).
///
/// Microseconds match the resolution of Google Analytics' `event_timestamp`, fit comfortably in 64 bits, and
/// keep arithmetic exact (no floating-point drift across long simulations).
public struct Instant: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var microseconds: Int64

    public init(microseconds: Int64) { self.microseconds = microseconds }
    public init(seconds: Int64) { self.microseconds = seconds * 1_000_000 }
    /// Whole seconds, or nil when they do not fit in 64-bit microseconds (about ±292,000 years): for seconds
    /// read from outside (token claims, files), where `init(seconds:)` would trap.
    public init?(checkedSeconds seconds: Int64) {
        let (m, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000)
        guard !overflow else { return nil }
        microseconds = m
    }
    public init(secondsSince1970 seconds: Double) { self.microseconds = Int64((seconds * 1_000_000).rounded()) }

    public var seconds: Int64 { microseconds >= 0 ? microseconds / 1_000_000 : -((-microseconds + 999_999) / 1_000_000) }
    public var secondsSince1970: Double { Double(microseconds) / 1_000_000 }

    public static func < (a: Instant, b: Instant) -> Bool { a.microseconds < b.microseconds }
    public static func + (a: Instant, d: Duration) -> Instant { Instant(microseconds: a.microseconds + d.microseconds) }
    public static func - (a: Instant, d: Duration) -> Instant { Instant(microseconds: a.microseconds - d.microseconds) }
    public static func - (a: Instant, b: Instant) -> Duration { Duration(microseconds: a.microseconds - b.microseconds) }

    /// RFC 3339 / ISO 8601 in UTC with millisecond precision, as Firebase writes `updateTime`.
    public var iso8601: String { ISO8601.format(self) }
    public var description: String { iso8601 }
}

extension Instant {
    /// A span of time in whole microseconds.
    public struct Duration: Hashable, Comparable, Sendable, CustomStringConvertible {
        public var microseconds: Int64
        public init(microseconds: Int64) { self.microseconds = microseconds }
        public static func seconds(_ s: Int64) -> Duration { Duration(microseconds: s * 1_000_000) }
        public static func seconds(_ s: Double) -> Duration { Duration(microseconds: Int64((s * 1_000_000).rounded())) }
        public static func milliseconds(_ ms: Int64) -> Duration { Duration(microseconds: ms * 1_000) }
        public static func minutes(_ m: Int64) -> Duration { .seconds(m * 60) }
        public static func hours(_ h: Int64) -> Duration { .seconds(h * 3600) }
        public static func days(_ d: Int64) -> Duration { .seconds(d * 86_400) }
        public var seconds: Double { Double(microseconds) / 1_000_000 }
        public static func < (a: Duration, b: Duration) -> Bool { a.microseconds < b.microseconds }
        public static func + (a: Duration, b: Duration) -> Duration { Duration(microseconds: a.microseconds + b.microseconds) }
        public static func * (a: Duration, k: Int64) -> Duration { Duration(microseconds: a.microseconds * k) }
        public var description: String { "\(seconds)s" }
    }
}

/// The real wall clock; used only by the executable's wiring.
public struct SystemClock: Clock {
    public init() {}
    public func now() -> Instant {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Instant(microseconds: Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1_000)
    }
}

/// A clock that only moves when told to; for tests and for the simulator's virtual time.
public final class ManualClock: Clock, @unchecked Sendable {
    private let lock = Lock()
    private var current: Instant

    public init(_ start: Instant = Instant(seconds: 1_780_000_000)) { current = start }

    public func now() -> Instant { lock.withLock { current } }
    public func set(_ instant: Instant) { lock.withLock { current = instant } }
    public func advance(by d: Instant.Duration) { lock.withLock { current = current + d } }
}

/// Minimal, allocation-light ISO 8601 formatting and parsing in UTC (no DateFormatter, no locale).
public enum ISO8601 {
    /// Formats as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public static func format(_ t: Instant) -> String {
        let (days, secOfDay) = floorDiv(t.microseconds, 86_400_000_000)
        let (y, m, d) = civil(fromDays: days)
        let ms = (secOfDay / 1_000) % 1_000
        let s = secOfDay / 1_000_000
        // By hand, not String(format:): its first call in a process costs Foundation's locale and CVarArg casts,
        // a tenth of a whole `rollout nudge`. Widths as printf's `%04lld` (a sign counts towards the width).
        var out: [UInt8] = []
        out.reserveCapacity(24)
        func put(_ v: Int64, _ width: Int, _ separator: UInt8?) {
            var digits: [UInt8] = []
            var n = v.magnitude
            repeat {
                digits.append(UInt8(ascii: "0") + UInt8(n % 10))
                n /= 10
            } while n > 0
            if v < 0 { out.append(UInt8(ascii: "-")) }
            for _ in 0..<max(0, width - digits.count - (v < 0 ? 1 : 0)) { out.append(UInt8(ascii: "0")) }
            out.append(contentsOf: digits.reversed())
            if let separator { out.append(separator) }
        }
        put(y, 4, UInt8(ascii: "-"))
        put(m, 2, UInt8(ascii: "-"))
        put(d, 2, UInt8(ascii: "T"))
        put(s / 3600, 2, UInt8(ascii: ":"))
        put((s / 60) % 60, 2, UInt8(ascii: ":"))
        put(s % 60, 2, UInt8(ascii: "."))
        put(ms, 3, UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// The largest UTC offset accepted (RFC 3339 allows ±23:59, but no zone has ever been beyond ±14:00;
    /// ±18:00 is the bound of `java.time` and of the issue: anything larger is a typo or an attack).
    public static let maximumOffsetMinutes: Int64 = 18 * 60

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, also with a space instead of `T` and ` UTC` as the zone
    /// (the BigQuery export's timestamp text). Returns nil on anything else.
    ///
    /// Strict: the date must exist in the proleptic Gregorian calendar (`2026-02-31` is refused, not moved to
    /// 3 March), hours 0–23, minutes and seconds 0–59 (a leap second `:60` is refused: Unix time has none, and
    /// none of our sources write one), offsets within ±18:00 with minutes 0–59. `parseReportingError` says why.
    /// This is the one ISO 8601 parser of the code base; every command, file format and row format uses it.
    public static func parse(_ text: String) -> Instant? {
        try? parseReportingError(text)
    }

    /// Why a text is not an ISO 8601 instant.
    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        public var text: String
        public var reason: String
        public var description: String { "'\(text)' is not an ISO 8601 instant: \(reason)" }
    }

    /// `parse`, with the reason for a refusal.
    public static func parseReportingError(_ text: String) throws(ParseError) -> Instant {
        var u = Array(text.utf8.prefix(64))
        func fail(_ reason: String) -> ParseError { ParseError(text: String(text.prefix(64)), reason: reason) }
        guard text.utf8.count <= 64 else { throw fail("longer than 64 bytes") }
        if u.count >= 4, u.suffix(4).elementsEqual(" UTC".utf8) {
            u.removeLast(4)
            u.append(UInt8(ascii: "Z"))
        }
        func num(_ from: Int, _ len: Int) -> Int64? {
            guard from + len <= u.count else { return nil }
            var v: Int64 = 0
            for i in from..<from + len {
                let c = u[i]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int64(c - 48)
            }
            return v
        }
        guard u.count >= 19, let y = num(0, 4), u[4] == 45, let mo = num(5, 2), u[7] == 45, let d = num(8, 2),
            u[10] == 84 || u[10] == 116 || u[10] == 32, let h = num(11, 2), u[13] == 58, let mi = num(14, 2),
            u[16] == 58, let s = num(17, 2)
        else { throw fail("expected YYYY-MM-DDTHH:MM:SS") }
        guard (1...12).contains(mo) else { throw fail("month \(mo) is not 1 to 12") }
        guard d >= 1, d <= daysInMonth(year: y, month: mo) else {
            throw fail("day \(d) does not exist in \(cFormat("%04lld-%02lld", y, mo))")
        }
        guard h < 24 else { throw fail("hour \(h) is not 0 to 23") }
        guard mi < 60 else { throw fail("minute \(mi) is not 0 to 59") }
        guard s < 60 else { throw fail("second \(s) is not 0 to 59 (leap seconds are not accepted)") }
        var i = 19
        var micros: Int64 = 0
        if i < u.count, u[i] == 46 {
            i += 1
            var digits = 0
            while i < u.count, u[i] >= 48, u[i] <= 57 {
                if digits < 6 { micros = micros * 10 + Int64(u[i] - 48) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { throw fail("a '.' needs digits after it") }
            for _ in digits..<max(digits, 6) { micros *= 10 }
        }
        var offset: Int64 = 0
        if i < u.count, u[i] == 90 || u[i] == 122 {
            i += 1
        } else if i < u.count, u[i] == 43 || u[i] == 45 {
            let sign: Int64 = u[i] == 43 ? 1 : -1
            guard let oh = num(i + 1, 2), i + 3 < u.count, u[i + 3] == 58, let om = num(i + 4, 2) else {
                throw fail("expected an offset ±HH:MM")
            }
            guard om < 60, oh * 60 + om <= maximumOffsetMinutes else {
                throw fail("offset \(sign > 0 ? "+" : "-")\(cFormat("%02lld:%02lld", oh, om)) is beyond ±18:00")
            }
            offset = sign * (oh * 3600 + om * 60)
            i += 6
        } else {
            throw fail("expected Z or an offset ±HH:MM after the time")
        }
        guard i == u.count else { throw fail("unexpected text after the time zone") }
        let days = daysFromCivil(y, mo, d)
        let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset
        // The instant must be writable back as YYYY in UTC: 0000-01-01T00:00:00+02:00 is in year -1.
        let first = daysFromCivil(0, 1, 1) * 86_400
        let end = daysFromCivil(10_000, 1, 1) * 86_400
        guard secs >= first, secs < end else { throw fail("the instant in UTC is outside the years 0000 to 9999") }
        return Instant(microseconds: secs * 1_000_000 + micros)
    }

    /// Whether `year` is a leap year of the proleptic Gregorian calendar.
    public static func isLeapYear(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    /// The number of days of a month (1–12) of the proleptic Gregorian calendar.
    public static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    public static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The inverse of `daysFromCivil`.
    public static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    private static func floorDiv(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        var q = a / b
        var r = a % b
        if r < 0 { q -= 1; r += b }
        return (q, r)
    }
}
