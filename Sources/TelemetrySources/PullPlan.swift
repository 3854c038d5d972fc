import Platform
import Telemetry
import Timekeeping

/// Which minutes the next pull of a source asks for, from its watermark.
///
/// A pull covers `[from, through)`, whole minutes: from the watermark less the overlap (late events land in
/// minutes already pulled: GA4's intraday export and Crashlytics' streaming export trail by minutes), never before
/// the source's origin, to the end of the current minute. The first pull starts at the origin. The watermark
/// then moves to the start of the current minute (its partial count is pulled again next time); the ledger
/// makes the overlap count once.
///
/// A pull covers at most `longest` minutes (6 hours): a source whose origin (`--since`) or watermark lies further
/// back catches up a pull at a time, its watermark moving to the end of each window, instead of asking for
/// days in one answer that every pull would find past the answer's limit (32 MiB) or the pull's time bound.
public struct PullPlan: Hashable, Sendable {
    /// The most minutes one pull asks for.
    public static let longest: Int64 = 360

    /// The first minute whose counts the pull replaces (inclusive), and the end (exclusive).
    public var fromMinute: Int64
    public var throughMinute: Int64
    /// The watermark to store once the pull has landed.
    public var nextWatermark: Instant

    public init(now: Instant, watermark: Instant?, origin: Instant, overlap: Instant.Duration, longest: Int64 = PullPlan.longest) {
        let nowMinute = BucketLevel.minute.bucket(now.microseconds)
        let start = watermark.map { max(origin, $0 - overlap) } ?? origin
        fromMinute = min(BucketLevel.minute.bucket(start.microseconds), nowMinute)
        // Each window reaches past the overlap the next one goes back by, so that a source behind moves on.
        let overlapMinutes = (overlap.microseconds + 59_999_999) / 60_000_000
        let span = max(1, longest, 2 * overlapMinutes + 1)
        if nowMinute + 1 - fromMinute > span {
            // Behind: whole minutes only, all of them past; the next pull starts where this one ends (less the
            // overlap, which the ledger counts once).
            throughMinute = fromMinute + span
            nextWatermark = BucketLevel.minute.start(throughMinute)
        } else {
            throughMinute = nowMinute + 1
            nextWatermark = BucketLevel.minute.start(nowMinute)
        }
    }

    /// Whether the pull stops short of now (a source catching up).
    public func isBehind(now: Instant) -> Bool { throughMinute <= BucketLevel.minute.bucket(now.microseconds) }

    public var from: Instant { BucketLevel.minute.start(fromMinute) }
    public var through: Instant { BucketLevel.minute.start(throughMinute) }
    public var minutes: Int64 { throughMinute - fromMinute }
}

/// How long to wait before asking a source again after an answer that says "later".
///
/// 429 and 5xx answers are retried after the `Retry-After` the server named (whole seconds, or an HTTP date),
/// else after an exponential back-off with jitter; the wait is never longer than `cap`, and a pull gives up
/// after `attempts` (the source's state then says so; the next scheduled pull starts afresh).
public struct SourceBackoff: Hashable, Sendable {
    public var attempts: Int
    public var base: Instant.Duration
    public var cap: Instant.Duration

    public init(attempts: Int = 5, base: Instant.Duration = .seconds(Int64(1)), cap: Instant.Duration = .seconds(Int64(120))) {
        self.attempts = attempts
        self.base = base
        self.cap = cap
    }

    /// Whether an HTTP status asks to try again later.
    public static func isTransient(status: Int) -> Bool { status == 429 || (status >= 500 && status <= 599) }

    /// The wait before retry `retry` (1-based): the server's `Retry-After` when it gave a usable one, else a
    /// uniform draw in [d/2, d] with d = min(cap, base · 2^(retry−1)).
    public func delay(retry: Int, retryAfter: String?, now: Instant, random: Double) -> Instant.Duration {
        if let named = Self.retryAfter(retryAfter, now: now) { return min(named, cap) }
        let d = min(cap.microseconds, base.microseconds << Int64(min(20, max(0, retry - 1))))
        return Instant.Duration(microseconds: d / 2 + Int64(Double(d / 2) * min(1, max(0, random))))
    }

    /// RFC 9110's `Retry-After`: delay-seconds, or an HTTP-date (IMF-fixdate) relative to `now`.
    public static func retryAfter(_ text: String?, now: Instant) -> Instant.Duration? {
        guard let t = text?.trimmingSpaces(), !t.isEmpty else { return nil }
        if t.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let s = Int64(t.prefix(9)) { return .seconds(s) }
        guard let date = HTTPDate.parse(t) else { return nil }
        return Instant.Duration(microseconds: max(0, (date - now).microseconds))
    }
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP servers send.
enum HTTPDate {
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func parse(_ text: String) -> Instant? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int64(parts[1]),
            let month = months.firstIndex(of: String(parts[2])), let year = Int64(parts[3])
        else { return nil }
        let hms = parts[4].split(separator: ":").compactMap { Int64($0) }
        guard hms.count == 3, (1...31).contains(day), hms[0] < 24, hms[1] < 60, hms[2] < 61 else { return nil }
        let days = ISO8601.daysFromCivil(year, Int64(month + 1), day)
        return Instant(seconds: days * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2])
    }
}
