import Timekeeping

/// The rollout's running aggregates (a `RolloutWatch` folded up to a minute) as derived data that a store keeps
/// beside its counters, so that a new reader (every `rollout status`) starts from it instead of folding the whole
/// rollout again.
///
/// Each batch commit advances it in the batch's own transaction: the minutes settled at the newest event time are
/// folded, one look per minute, exactly as a long-lived reader folds them. A batch with an event before the
/// cursor (late data in a folded minute) makes the store fold again from the rollout start. A reader adopts it
/// only for the same `WatchConfiguration` (the same start and settings) and only when every folded minute is
/// settled at the reader's `now`; otherwise it folds from the start itself. The encoding is canonical (keys in
/// order, doubles by bit pattern), so two folds of the same looks encode to the same bytes. Pure: no clock, no
/// database.
public struct RolloutFold: Sendable {
    public private(set) var watch: RolloutWatch
    /// The first minute not yet folded.
    public private(set) var cursorMinute: Int64
    /// The newest batch the fold has seen (its counters are folded, or lie at or after the cursor).
    public var lastBatch: Int64

    public init(watch: RolloutWatch, cursorMinute: Int64, lastBatch: Int64) {
        self.watch = watch
        self.cursorMinute = cursorMinute
        self.lastBatch = lastBatch
    }

    public var configuration: WatchConfiguration { watch.configuration }

    /// The fold from the rollout's start, read through `looks` (a store's counter rows of a level with
    /// `from ≤ bucket < to`, one look per bucket that has rows, in time order): the pre-rollout baseline from hour
    /// rows, then day looks where hour rows are gone, hour looks where minute rows are gone. Minute looks from
    /// the returned cursor are left to `advance`. Every store folds cold this way, so they agree on every horizon.
    public static func fromStart<E: Error>(
        _ configuration: WatchConfiguration, newest: Int64?, retention: TelemetryRetention, lastBatch: Int64,
        looks: (_ level: BucketLevel, _ from: Int64, _ to: Int64) throws(E) -> [CounterLook]
    ) throws(E) -> RolloutFold {
        var w = RolloutWatch(configuration: configuration)
        let since = configuration.since.microseconds
        let baselineStart = BucketLevel.hour.bucket(since - configuration.failures.baselineWindow.microseconds)
        for look in try looks(.hour, baselineStart, BucketLevel.hour.bucket(since)) { w.foldPreRollout(look.counts) }
        var start = since
        if let newest {
            let minuteOldest = retention.oldestKept(.minute, newest: newest)!
            let hourOldest = retention.oldestKept(.hour, newest: newest)!
            // Hours fully covered by minute rows start at the first hour boundary at or after the oldest minute.
            let minuteHorizon = ceilDivide(minuteOldest, 60)
            let hourHorizon = ceilDivide(hourOldest, 24)
            if BucketLevel.hour.bucket(start) < hourOldest {
                let from = BucketLevel.day.bucket(start)
                for look in try looks(.day, from, hourHorizon) { w.fold(look) }
                start = max(start, BucketLevel.day.start(max(from, hourHorizon)).microseconds)
            }
            if BucketLevel.minute.bucket(start) < minuteOldest {
                let from = BucketLevel.hour.bucket(start)
                for look in try looks(.hour, from, minuteHorizon) { w.fold(look) }
                start = max(start, BucketLevel.hour.start(max(from, minuteHorizon)).microseconds)
            }
        }
        return RolloutFold(watch: w, cursorMinute: BucketLevel.minute.bucket(start), lastBatch: lastBatch)
    }

    private static func ceilDivide(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b > 0) ? q + 1 : q
    }

    /// Folds `looks` (minute looks at or after the cursor, in time order) while each is settled at `now`, and
    /// returns the rest, which a reader shows as pending.
    public mutating func advance(_ looks: [CounterLook], now: Instant) -> [CounterLook] {
        var pending: [CounterLook] = []
        for look in looks {
            precondition(look.level == .minute && look.bucket >= cursorMinute, "looks before the cursor")
            if pending.isEmpty, watch.isSettled(minute: look.bucket, now: now) {
                watch.fold(look)
                cursorMinute = look.bucket + 1
            } else {
                pending.append(look)
            }
        }
        return pending
    }

    /// Whether events at or after `earliest` land in a minute already folded (then the fold must start again).
    public func isLate(earliest: Instant) -> Bool {
        earliest < BucketLevel.minute.start(cursorMinute)
    }

    /// Whether a reader with `configuration` at `now` may continue from this fold: the same rollout start and
    /// settings, and nothing folded that is not yet settled at `now` (a reader whose clock is behind the data).
    public func isUsable(for configuration: WatchConfiguration, at now: Instant) -> Bool {
        guard watch.configuration == configuration else { return false }
        guard let through = watch.settledThrough else { return true }
        return through + configuration.settleDelay <= now
    }

    // MARK: Encoding

    static let magic: [UInt8] = Array("rollout-fold-3\n".utf8)

    /// The canonical bytes of this fold.
    public func encoded() -> [UInt8] {
        var w = FoldWriter()
        w.bytes.append(contentsOf: Self.magic)
        w.int(cursorMinute)
        w.int(lastBatch)
        let c = watch.configuration
        w.int(c.since.microseconds)
        w.crashConfiguration(c.crash)
        let f = c.failures
        w.double(f.shiftMultiplier)
        w.double(f.threshold)
        w.int(f.window.microseconds)
        w.int(f.baselineWindow.microseconds)
        w.int(Int64(f.configuredBaseline.count))
        for (k, v) in f.configuredBaseline.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            w.int(Int64(k.rawValue))
            w.double(v)
        }
        w.int(f.minimumBaselineAttempts)
        w.int(f.firstWindow.microseconds)
        w.int(f.firstWindowMinimumAttempts)
        w.int(f.firstWindowLimit.microseconds)
        w.int(c.settleDelay.microseconds)

        w.instant(watch.settledThrough)
        w.counts(watch.totals.counts)
        w.counts(watch.preRollout.counts)
        w.counts(watch.firstWindow.counts)
        w.instant(watch.firstWindowFrozenAt)
        w.int(Int64(watch.recent.count))
        for minute in watch.recent.keys.sorted() {
            w.int(minute)
            w.counts(watch.recent[minute]!)
        }

        let crash = watch.crash
        w.crashConfiguration(crash.configuration)
        let s = crash.sprt
        w.double(s.harmRatio)
        w.double(s.alpha)
        w.double(s.beta)
        w.double(s.logLikelihoodRatio)
        w.int(s.exposedCrashes)
        w.int(s.controlCrashes)
        w.instant(s.harmDeclaredAt)
        for m in [crash.sessionDifference, crash.userDifference] {
            w.double(m.alpha)
            w.double(m.pValue)
            w.optionalDouble(m.estimate)
            w.flag(m.interval != nil)
            if let i = m.interval {
                w.double(i.lowerBound)
                w.double(i.upperBound)
            }
        }
        let t = crash.totals
        for v in [
            t.exposedSessions, t.controlSessions, t.exposedCrashes, t.controlCrashes, t.exposedUsers, t.controlUsers,
            t.exposedCrashedUsers, t.controlCrashedUsers,
        ] { w.int(v) }
        w.flag(crash.baseline != nil)
        if let b = crash.baseline {
            w.double(b.harmRatio)
            w.double(b.alpha)
            w.int(b.baselineCrashes)
            w.int(b.baselineSessions)
            w.double(b.baselineUpperRate)
            w.int(b.frozenAt.microseconds)
            w.double(b.logLikelihoodRatio)
            w.int(b.exposedSessions)
            w.int(b.exposedCrashes)
            w.instant(b.harmDeclaredAt)
        }
        w.instant(crash.controlGoneSince)
        w.int(Int64(crash.looks))
        w.optionalDouble(crash.exposedShare)
        return w.bytes
    }

    /// The fold `encoded()` wrote; any other bytes are refused (the store then folds from the start).
    public init(decoding bytes: [UInt8]) throws(FoldDecodingError) {
        var r = FoldReader(bytes: bytes)
        guard bytes.starts(with: Self.magic) else { throw FoldDecodingError(offset: 0) }
        r.offset = Self.magic.count
        let cursor = try r.int()
        let lastBatch = try r.int()
        let since = Instant(microseconds: try r.int())
        let crashConfiguration = try r.crashConfiguration()
        var f = FailureMonitorConfiguration()
        f.shiftMultiplier = try r.double()
        f.threshold = try r.double()
        f.window = try r.duration()
        f.baselineWindow = try r.duration()
        var baseline: [ErrorClassBucket: Double] = [:]
        for _ in 0..<(try r.count(limit: ErrorClassBucket.allCases.count)) {
            guard let k = ErrorClassBucket(rawValue: UInt8(clamping: try r.int())) else { throw r.failure() }
            baseline[k] = try r.double()
        }
        f.configuredBaseline = baseline
        f.minimumBaselineAttempts = try r.int()
        f.firstWindow = try r.duration()
        f.firstWindowMinimumAttempts = try r.int()
        f.firstWindowLimit = try r.duration()
        let settleDelay = try r.duration()
        let configuration = WatchConfiguration(
            since: since, crash: crashConfiguration, failures: f, settleDelay: settleDelay)

        var watch = RolloutWatch(configuration: configuration)
        watch.settledThrough = try r.instant()
        watch.totals = CounterTotals(try r.counts())
        watch.preRollout = CounterTotals(try r.counts())
        watch.firstWindow = CounterTotals(try r.counts())
        watch.firstWindowFrozenAt = try r.instant()
        var recent: [Int64: [CounterKey: Int64]] = [:]
        for _ in 0..<(try r.count(limit: Int(watch.recentMinutes) + 8)) {
            let minute = try r.int()
            recent[minute] = try r.counts()
        }
        watch.recent = recent

        let crash = try r.crashConfiguration()
        guard crash == crashConfiguration else { throw r.failure() }
        var comparison = CrashComparison(configuration: crash)
        let harmRatio = try r.double()
        let alpha = try r.double()
        let beta = try r.double()
        guard harmRatio > 1, alpha > 0, alpha < 1, beta > 0, beta < 1 else { throw r.failure() }
        var sprt = CrashSPRT(harmRatio: harmRatio, alpha: alpha, beta: beta)
        sprt.logLikelihoodRatio = try r.double()
        sprt.exposedCrashes = try r.int()
        sprt.controlCrashes = try r.int()
        sprt.harmDeclaredAt = try r.instant()
        comparison.sprt = sprt
        var differences: [MixtureSPRT] = []
        for _ in 0..<2 {
            var m = MixtureSPRT(alpha: try r.double())
            m.pValue = try r.double()
            m.estimate = try r.optionalDouble()
            if try r.flag() {
                let lower = try r.double()
                let upper = try r.double()
                guard lower <= upper else { throw r.failure() }
                m.interval = lower...upper
            }
            differences.append(m)
        }
        comparison.sessionDifference = differences[0]
        comparison.userDifference = differences[1]
        var t = CrashLook()
        t.exposedSessions = try r.int()
        t.controlSessions = try r.int()
        t.exposedCrashes = try r.int()
        t.controlCrashes = try r.int()
        t.exposedUsers = try r.int()
        t.controlUsers = try r.int()
        t.exposedCrashedUsers = try r.int()
        t.controlCrashedUsers = try r.int()
        comparison.totals = t
        if try r.flag() {
            let harmRatio = try r.double()
            let alpha = try r.double()
            let crashes = try r.int()
            let sessions = try r.int()
            let upper = try r.double()
            let frozenAt = Instant(microseconds: try r.int())
            guard harmRatio > 1, alpha > 0, alpha < 1, sessions > 0, crashes >= 0, upper > 0, harmRatio * upper < 1 else {
                throw r.failure()
            }
            var b = BaselineCrashTest(
                harmRatio: harmRatio, alpha: alpha, baselineCrashes: crashes, baselineSessions: sessions,
                baselineUpperRate: upper, frozenAt: frozenAt)
            b.logLikelihoodRatio = try r.double()
            b.exposedSessions = try r.int()
            b.exposedCrashes = try r.int()
            b.harmDeclaredAt = try r.instant()
            comparison.baseline = b
        }
        comparison.controlGoneSince = try r.instant()
        comparison.looks = Int(try r.int())
        comparison.exposedShare = try r.optionalDouble()
        watch.crash = comparison
        guard r.offset == bytes.count else { throw r.failure() }
        self.init(watch: watch, cursorMinute: cursor, lastBatch: lastBatch)
    }
}

/// Bytes that are not a fold this program wrote (truncated, edited, or from another version).
public struct FoldDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public var offset: Int
    public var description: String { "the stored rollout fold is not readable (at byte \(offset)); it is folded again" }
}

private struct FoldWriter {
    var bytes: [UInt8] = []

    mutating func int(_ v: Int64) {
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }
    mutating func double(_ v: Double) { int(Int64(bitPattern: v.bitPattern)) }
    mutating func flag(_ v: Bool) { bytes.append(v ? 1 : 0) }
    mutating func instant(_ v: Instant?) {
        flag(v != nil)
        if let v { int(v.microseconds) }
    }
    mutating func optionalDouble(_ v: Double?) {
        flag(v != nil)
        if let v { double(v) }
    }
    mutating func counts(_ c: [CounterKey: Int64]) {
        int(Int64(c.count))
        for (k, v) in c.sorted(by: { $0.key.packed < $1.key.packed }) {
            int(Int64(k.packed))
            int(v)
        }
    }
    mutating func crashConfiguration(_ c: CrashMonitorConfiguration) {
        double(c.harmRatio)
        double(c.alpha)
        double(c.beta)
        double(c.mixingRelativeEffect)
    }
}

private struct FoldReader {
    let bytes: [UInt8]
    var offset = 0

    func failure() -> FoldDecodingError { FoldDecodingError(offset: offset) }

    mutating func int() throws(FoldDecodingError) -> Int64 {
        guard bytes.count - offset >= 8 else { throw failure() }
        var v: UInt64 = 0
        for i in 0..<8 { v |= UInt64(bytes[offset + i]) << (8 * UInt64(i)) }
        offset += 8
        return Int64(bitPattern: v)
    }
    mutating func double() throws(FoldDecodingError) -> Double { Double(bitPattern: UInt64(bitPattern: try int())) }
    mutating func duration() throws(FoldDecodingError) -> Instant.Duration {
        Instant.Duration(microseconds: try int())
    }
    mutating func flag() throws(FoldDecodingError) -> Bool {
        guard offset < bytes.count, bytes[offset] <= 1 else { throw failure() }
        offset += 1
        return bytes[offset - 1] == 1
    }
    mutating func instant() throws(FoldDecodingError) -> Instant? {
        try flag() ? Instant(microseconds: try int()) : nil
    }
    mutating func optionalDouble() throws(FoldDecodingError) -> Double? { try flag() ? try double() : nil }
    /// A count that is at most `limit` and fits in the bytes left (16 bytes per counter at most).
    mutating func count(limit: Int) throws(FoldDecodingError) -> Int {
        let n = try int()
        guard n >= 0, n <= Int64(limit) else { throw failure() }
        return Int(n)
    }
    mutating func counts() throws(FoldDecodingError) -> [CounterKey: Int64] {
        let n = try count(limit: (bytes.count - offset) / 16)
        var c: [CounterKey: Int64] = [:]
        c.reserveCapacity(n)
        var previous: Int64 = -1
        for _ in 0..<n {
            // Keys in strictly increasing order, as written: no duplicates, one encoding per fold.
            let packed = try int()
            guard packed > previous, let key = CounterKey(packed: UInt32(truncatingIfNeeded: packed)),
                Int64(key.packed) == packed
            else { throw failure() }
            previous = packed
            c[key] = try int()
        }
        return c
    }
    mutating func crashConfiguration() throws(FoldDecodingError) -> CrashMonitorConfiguration {
        CrashMonitorConfiguration(
            harmRatio: try double(), alpha: try double(), beta: try double(), mixingRelativeEffect: try double())
    }
}
