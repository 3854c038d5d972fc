import Glibc
import Rollout
import Timekeeping

/// Settings of the failure-class CUSUMs.
public struct FailureMonitorConfiguration: Hashable, Sendable {
    /// The shifted rate the CUSUM looks for: p1 = multiplier × p0.
    public var shiftMultiplier: Double
    /// The alarm threshold h.
    public var threshold: Double
    /// The CUSUM runs over this many recent complete minutes.
    public var window: Instant.Duration
    /// The stretch before the rollout start that counts as the pre-rollout baseline.
    public var baselineWindow: Instant.Duration
    /// Fixed baseline rates per class; a class listed here ignores the observed baseline.
    public var configuredBaseline: [ErrorClassBucket: Double]
    /// An observed baseline needs at least this many attempts.
    public var minimumBaselineAttempts: Int64
    /// The exposed group's first window after the start, frozen as its baseline: this long, extended (up to
    /// `firstWindowLimit`) until it holds `firstWindowMinimumAttempts`. Frozen so that a group that degrades
    /// later never becomes its own baseline; kept short so that a degradation soon after the start is not in it.
    public var firstWindow: Instant.Duration
    public var firstWindowMinimumAttempts: Int64
    public var firstWindowLimit: Instant.Duration

    public init(
        shiftMultiplier: Double = 2, threshold: Double = 5, window: Instant.Duration = .minutes(60),
        baselineWindow: Instant.Duration = .hours(24), configuredBaseline: [ErrorClassBucket: Double] = [:],
        minimumBaselineAttempts: Int64 = 200, firstWindow: Instant.Duration = .minutes(10),
        firstWindowMinimumAttempts: Int64 = 50, firstWindowLimit: Instant.Duration = .minutes(60)
    ) {
        self.firstWindow = firstWindow
        self.firstWindowMinimumAttempts = firstWindowMinimumAttempts
        self.firstWindowLimit = firstWindowLimit
        self.shiftMultiplier = shiftMultiplier
        self.threshold = threshold
        self.window = window
        self.baselineWindow = baselineWindow
        self.configuredBaseline = configuredBaseline
        self.minimumBaselineAttempts = minimumBaselineAttempts
    }
}

/// Everything that decides how the telemetry of one rollout is read.
public struct WatchConfiguration: Hashable, Sendable {
    /// When the rollout started: totals and sequential statistics count from the bucket holding this instant.
    public var since: Instant
    public var crash: CrashMonitorConfiguration
    public var failures: FailureMonitorConfiguration
    /// Minutes younger than this are shown but not yet fed to the sequential statistics (late events).
    public var settleDelay: Instant.Duration

    public init(
        since: Instant, crash: CrashMonitorConfiguration = CrashMonitorConfiguration(),
        failures: FailureMonitorConfiguration = FailureMonitorConfiguration(),
        settleDelay: Instant.Duration = .minutes(2)
    ) {
        self.since = since
        self.crash = crash
        self.failures = failures
        self.settleDelay = settleDelay
    }
}

/// The running state of one rollout's telemetry: looks folded in time order, oldest first.
///
/// Whoever reads the store (the console, `rollout status`) keeps one of these and folds each bucket once it is
/// settled; a query then only reads the buckets after `settledThrough`. The sequential statistics take one look
/// per bucket, so the figures do not depend on how often anybody looks. Pure: no clock, no database.
public struct RolloutWatch: Sendable {
    public let configuration: WatchConfiguration
    /// The end of the last folded look.
    public internal(set) var settledThrough: Instant?
    /// Every folded counter since the rollout start.
    public internal(set) var totals = CounterTotals()
    /// Counters of the baseline window before the start.
    public internal(set) var preRollout = CounterTotals()
    public internal(set) var crash: CrashComparison
    /// The exposed group's App Attest attempts from the start until the first window froze.
    public internal(set) var firstWindow = CounterTotals()
    /// When the first window froze (nil: still gathering).
    public internal(set) var firstWindowFrozenAt: Instant?
    /// Folded minute looks of the last `recentMinutes` minutes.
    var recent: [Int64: [CounterKey: Int64]] = [:]

    /// How many settled minutes are kept for windows, sparklines and the CUSUMs.
    public var recentMinutes: Int64 { max(60, configuration.failures.window.microseconds / 60_000_000) + 16 }

    public init(configuration: WatchConfiguration) {
        self.configuration = configuration
        crash = CrashComparison(configuration: configuration.crash)
    }

    /// Adds counters from before the rollout start (the failure baseline).
    public mutating func foldPreRollout(_ counts: [CounterKey: Int64]) { preRollout.add(counts) }

    /// Adds the next look; looks must come in time order without overlap.
    public mutating func fold(_ look: CounterLook) {
        if let settledThrough { precondition(look.start >= settledThrough, "looks out of order") }
        totals.add(look.counts)
        if firstWindowFrozenAt == nil {
            for (k, v) in look.counts where Self.exposedAttestation(k) { firstWindow.add(k, v) }
            let attempts = firstWindow.sum(.attestationSuccess) + firstWindow.sum(.attestationFailure)
            let age = look.end - configuration.since
            let f = configuration.failures
            if age >= f.firstWindow, attempts >= f.firstWindowMinimumAttempts || (age >= f.firstWindowLimit && attempts > 0) {
                firstWindowFrozenAt = look.end
            }
        }
        crash.observe(CrashLook(look.counts), at: look.end)
        if look.level == .minute {
            recent[look.bucket] = look.counts
            let oldest = look.bucket - recentMinutes
            if recent.count > Int(recentMinutes) + 8 { recent = recent.filter { $0.key > oldest } }
        }
        settledThrough = look.end
    }

    /// Whether a minute starting at `minuteStart` may be folded at `now`.
    public func isSettled(minute: Int64, now: Instant) -> Bool {
        BucketLevel.minute.start(minute + 1) + configuration.settleDelay <= now
    }

    /// Everything the console's panels show, at `now`.
    ///
    /// - Parameters:
    ///   - pending: minute looks after `settledThrough` (shown, not yet in the sequential statistics).
    ///   - presence: presence rows of the last day (hour ≥ the hour of `now` − 23 h).
    ///   - sessionsLastDay: sessions counted in the last 24 hours (all cohorts).
    public func snapshot(
        now: Instant, pending: [CounterLook], presence: [PresenceRow], sessionsLastDay: Int64, newestEvent: Instant?,
        lastBatchAt: Instant?
    ) -> TelemetrySnapshot {
        var all = totals
        var minutes = recent
        for look in pending {
            all.add(look.counts)
            if look.level == .minute {
                minutes[look.bucket, default: [:]].merge(look.counts, uniquingKeysWith: +)
            }
        }
        let nowMinute = BucketLevel.minute.bucket(now.microseconds)
        func sum(_ range: Range<Int64>) -> CounterTotals {
            var t = CounterTotals()
            for m in range { if let c = minutes[m] { t.add(c) } }
            return t
        }
        let windows = [1, 5, 15].map { RateWindow(minutes: $0, totals: sum((nowMinute - Int64($0))..<nowMinute)) }
        let series = ((nowMinute - 60)..<nowMinute).map {
            MinuteCounts(start: BucketLevel.minute.start($0), totals: sum($0..<($0 + 1)))
        }
        let current = MinuteCounts(start: BucketLevel.minute.start(nowMinute), totals: sum(nowMinute..<(nowMinute + 1)))

        let windowMinutes = max(1, configuration.failures.window.microseconds / 60_000_000)
        let monitors = failureMonitors(
            minutes: ((nowMinute - windowMinutes)..<nowMinute).map { minutes[$0] ?? [:] }, totals: all)

        var activity = FleetActivity(sessionsLastDay: sessionsLastDay)
        var fetched: [Int64: Int64] = [:]
        let oldestHour = BucketLevel.hour.bucket(now.microseconds) - 23
        for row in presence where row.hour >= oldestHour {
            switch row.key {
            case .active(let cohort, let eligible):
                activity.activeByCohort[cohort, default: 0] += row.delta
                if eligible { activity.attestCapable += row.delta }
            case .fetched(let v): fetched[v, default: 0] += row.delta
            case .crashed(let cohort): activity.crashedByCohort[cohort, default: 0] += row.delta
            }
        }
        var snapshot = TelemetrySnapshot(
            now: now, since: configuration.since, newestEvent: newestEvent, lastBatchAt: lastBatchAt,
            settledThrough: settledThrough, totals: all, preRollout: preRollout, windows: windows, series: series,
            currentMinute: current, crash: crash, failureMonitors: monitors, activity: activity,
            fetchedVersions: fetched.filter { $0.value > 0 })
        snapshot.failureWindow = .minutes(windowMinutes)
        return snapshot
    }

    /// The one-sided 95% Wilson upper bound of a failure rate (never 0, so a clean window still gives a rate).
    static func upperBound(failures x: Int64, attempts n: Int64) -> Double {
        let z = 1.645
        let nn = Double(n)
        let p = Double(x) / nn
        let centre = p + z * z / (2 * nn)
        let spread = z * (p * (1 - p) / nn + z * z / (4 * nn * nn)).squareRoot()
        return min(0.999, (centre + spread) / (1 + z * z / nn))
    }

    static func exposedAttestation(_ k: CounterKey) -> Bool {
        k.cohort == .enabled && (k.provider == .appAttest || k.provider == .unspecified)
    }

    /// One CUSUM per error class over the exposed App Attest attempts of the recent minutes.
    func failureMonitors(minutes: [[CounterKey: Int64]], totals: CounterTotals) -> [FailureMonitor] {
        let config = configuration.failures
        // Baseline: the control group since the start plus everybody in the window before the start.
        var baseTotals = CounterTotals()
        for (k, v) in totals.counts where k.cohort == .control { baseTotals.add(k, v) }
        baseTotals.add(preRollout)
        let baseAttempts = baseTotals.sum(.attestationSuccess) + baseTotals.sum(.attestationFailure)
        let baseFailures = baseTotals.failuresByClass()
        let firstAttempts = firstWindow.sum(.attestationSuccess) + firstWindow.sum(.attestationFailure)
        let firstFailures = firstWindow.failuresByClass()
        return ErrorClassBucket.allCases.map { errorClass in
            var monitor = FailureMonitor(errorClass: errorClass)
            if let fixed = config.configuredBaseline[errorClass] {
                monitor.baseline = fixed
                monitor.baselineSource = .configured
            } else if let frozen = firstWindowFrozenAt {
                // The upper 95% bound of the first window's rate: a short window's estimate is uncertain, and a
                // baseline set too low would alarm on ordinary background failures.
                monitor.baseline = Self.upperBound(failures: firstFailures[errorClass] ?? 0, attempts: firstAttempts)
                monitor.baselineSource = .firstWindow(attempts: firstAttempts, through: frozen)
            } else if baseAttempts >= config.minimumBaselineAttempts {
                monitor.baseline = max(Double(baseFailures[errorClass] ?? 0), 0.5) / Double(baseAttempts)
                monitor.baselineSource = .observed(attempts: baseAttempts)
            }
            for counts in minutes {
                var attempts: Int64 = 0
                var failures: Int64 = 0
                for (k, v) in counts where Self.exposedAttestation(k) {
                    if k.kind == .attestationSuccess { attempts += v }
                    if k.kind == .attestationFailure {
                        attempts += v
                        if FailureDetail(code: k.detail).errorClass == errorClass { failures += v }
                    }
                }
                monitor.attempts += attempts
                monitor.failures += failures
                if let p0 = monitor.baseline, p0 > 0, p0 < 1 {
                    if monitor.cusum == nil {
                        let p1 = p0 * config.shiftMultiplier < 1 ? p0 * config.shiftMultiplier : (1 + p0) / 2
                        monitor.cusum = BernoulliCUSUM(baseline: p0, shifted: p1, threshold: config.threshold)
                    }
                    monitor.cusum!.observe(attempts: attempts, failures: failures)
                }
            }
            return monitor
        }
    }
}

/// The CUSUM of one failure class for the exposed group's App Attest attempts.
public struct FailureMonitor: Hashable, Sendable {
    public enum BaselineSource: Hashable, Sendable {
        case none
        case configured
        /// From the control group and the pre-rollout window, with this many attempts.
        case observed(attempts: Int64)
        /// Frozen from the exposed group's first settled window after the start (Phase I of a control chart):
        /// in a real rollout neither control nor pre-rollout devices attest, so this is the usual baseline, and
        /// it never learns a later degraded state.
        case firstWindow(attempts: Int64, through: Instant)
    }

    public var errorClass: ErrorClassBucket
    public var baseline: Double?
    public var baselineSource = BaselineSource.none
    /// nil without a baseline.
    public var cusum: BernoulliCUSUM?
    /// Exposed App Attest attempts and failures of this class in the window.
    public var attempts: Int64 = 0
    public var failures: Int64 = 0

    public init(errorClass: ErrorClassBucket) { self.errorClass = errorClass }

    public var alarmed: Bool { cusum?.alarmed ?? false }
    public var observedRate: Double? { attempts > 0 ? Double(failures) / Double(attempts) : nil }
}

/// Installations active in the last 24 hours (by their latest event) and how often they launch.
public struct FleetActivity: Hashable, Sendable {
    public var activeByCohort: [Cohort: Int64] = [:]
    /// Active installations that can run App Attest (iOS 14 or later, not a simulator).
    public var attestCapable: Int64 = 0
    public var sessionsLastDay: Int64
    /// Installations whose latest fatal crash falls in the window, by latest cohort (a subset of `activeByCohort`'s
    /// of the same cohort).
    public var crashedByCohort: [Cohort: Int64] = [:]

    /// The window of `activeByCohort` and `crashedByCohort`: the current hour and the 23 before it (presence is
    /// counted per hour, so a window is whole hours; between 23 and 24 hours of data).
    public static let windowHours = 24

    /// Crash-free users of `cohort` over the window, as Crashlytics defines them: of the users active in the
    /// window, the share without a fatal crash in it. Nil without active users (nothing sends per-installation
    /// events: an aggregating source cannot give distinct users per window).
    public func crashFreeUsers(_ cohort: Cohort) -> Double? {
        let active = activeByCohort[cohort] ?? 0
        guard active > 0 else { return nil }
        return 1 - Double(min(active, max(0, crashedByCohort[cohort] ?? 0))) / Double(active)
    }

    public init(activeByCohort: [Cohort: Int64] = [:], attestCapable: Int64 = 0, sessionsLastDay: Int64 = 0) {
        self.activeByCohort = activeByCohort
        self.attestCapable = attestCapable
        self.sessionsLastDay = sessionsLastDay
    }

    public var active: Int64 { activeByCohort.values.reduce(0, +) }

    /// Sessions per active installation per day (nil without activity).
    public var launchesPerInstallationPerDay: Double? {
        active > 0 && sessionsLastDay > 0 ? Double(sessionsLastDay) / Double(active) : nil
    }
}

/// Everything the console's attestation and crash panels show, as of `now`.
public struct TelemetrySnapshot: Sendable {
    public var now: Instant
    /// The rollout start the totals count from.
    public var since: Instant
    /// The newest event time in the store (data age = now − newestEvent).
    public var newestEvent: Instant?
    /// When the last batch landed.
    public var lastBatchAt: Instant?
    /// The end of the last look fed to the sequential statistics.
    public var settledThrough: Instant?
    /// Counters since the rollout start.
    public var totals: CounterTotals
    /// Counters of the baseline window before the start.
    public var preRollout: CounterTotals
    /// The last 1, 5 and 15 complete minutes.
    public var windows: [RateWindow]
    /// The last 60 complete minutes, oldest first.
    public var series: [MinuteCounts]
    /// The minute in progress (partial).
    public var currentMinute: MinuteCounts
    public var crash: CrashComparison
    /// One per error class, in `ErrorClassBucket` order.
    public var failureMonitors: [FailureMonitor]
    public var activity: FleetActivity
    /// Installations whose latest config fetch (in the last 24 hours) was each template version.
    public var fetchedVersions: [Int64: Int64]

    public init(
        now: Instant, since: Instant, newestEvent: Instant?, lastBatchAt: Instant?, settledThrough: Instant?,
        totals: CounterTotals, preRollout: CounterTotals, windows: [RateWindow], series: [MinuteCounts],
        currentMinute: MinuteCounts, crash: CrashComparison, failureMonitors: [FailureMonitor], activity: FleetActivity,
        fetchedVersions: [Int64: Int64]
    ) {
        self.now = now
        self.since = since
        self.newestEvent = newestEvent
        self.lastBatchAt = lastBatchAt
        self.settledThrough = settledThrough
        self.totals = totals
        self.preRollout = preRollout
        self.windows = windows
        self.series = series
        self.currentMinute = currentMinute
        self.crash = crash
        self.failureMonitors = failureMonitors
        self.activity = activity
        self.fetchedVersions = fetchedVersions
    }

    /// The monitored window of the failure CUSUMs.
    public var failureWindow: Instant.Duration = .minutes(60)

    /// The age of the newest event, never negative (an event stamped after now has age 0).
    public var dataAge: Instant.Duration? {
        newestEvent.map { Instant.Duration(microseconds: max(0, (now - $0).microseconds)) }
    }

    /// Whether any event has been counted since the rollout start.
    public var hasTelemetry: Bool {
        totals.counts.contains { $0.key.kind != .usersEntered && $0.key.kind != .usersCrashed && $0.value > 0 }
    }

    /// A per-minute series of one kind over the last 60 minutes, all cohorts (for a sparkline).
    public func sparkline(_ kind: CounterKind) -> [Int64] { series.map { $0.totals.sum(kind) } }

    /// A per-minute series of one kind in `cohort` over the last 60 minutes.
    public func sparkline(_ kind: CounterKind, cohort: Cohort) -> [Int64] {
        series.map { $0.totals.sum(kind, cohort: cohort) }
    }
}
