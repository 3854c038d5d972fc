import Timekeeping

/// How much time the charts show: `z` cycles 15 min → 1 h → 6 h → 24 h.
public enum ChartZoom: Int, Hashable, Sendable, CaseIterable {
    case quarterHour
    case hour
    case sixHours
    case day

    /// The span in minutes.
    public var minutes: Int {
        switch self {
        case .quarterHour: 15
        case .hour: 60
        case .sixHours: 360
        case .day: 1440
        }
    }

    /// `15 min`, `1 h`, `6 h`, `24 h`.
    public var text: String {
        switch self {
        case .quarterHour: "15 min"
        case .hour: "1 h"
        case .sixHours: "6 h"
        case .day: "24 h"
        }
    }

    /// The next zoom out, back to 15 minutes after 24 hours.
    public var next: ChartZoom { ChartZoom(rawValue: (rawValue + 1) % ChartZoom.allCases.count)! }

    /// The widest span the source keeps: the charts never need more minutes than this.
    public static let longestMinutes = 1440
}

/// One arm's counts in one minute (the exposed group or the control group).
public struct ArmCounts: Hashable, Sendable {
    public var successes: Int
    public var failures: Int
    /// Fatal crashes.
    public var crashes: Int
    public var sessions: Int

    public init(successes: Int = 0, failures: Int = 0, crashes: Int = 0, sessions: Int = 0) {
        self.successes = successes
        self.failures = failures
        self.crashes = crashes
        self.sessions = sessions
    }

    public static let zero = ArmCounts()

    public var attempts: Int { successes + failures }

    public static func + (a: ArmCounts, b: ArmCounts) -> ArmCounts {
        ArmCounts(
            successes: a.successes + b.successes, failures: a.failures + b.failures, crashes: a.crashes + b.crashes,
            sessions: a.sessions + b.sessions)
    }
}

/// One minute of the charts' history: both arms' counts.
public struct ArmMinute: Hashable, Sendable {
    public var exposed: ArmCounts
    public var control: ArmCounts
    /// Installations in neither arm (outside the rollout's bands): with the arms, every cohort, what the main
    /// screen's attestation chart counts.
    public var other: ArmCounts

    public init(exposed: ArmCounts = .zero, control: ArmCounts = .zero, other: ArmCounts = .zero) {
        self.exposed = exposed
        self.control = control
        self.other = other
    }

    /// Every cohort together.
    public var all: ArmCounts { exposed + control + other }
}

/// The share of active devices on the newest template version, as sampled at one instant (telemetry time).
public struct PropagationSample: Hashable, Sendable {
    public var at: Instant
    /// 0...1.
    public var share: Double
    /// The version the share is of.
    public var version: String

    public init(at: Instant, share: Double, version: String) {
        self.at = at
        self.share = share
        self.version = version
    }
}

/// What the charts draw, read from the store's per-minute counters (not from an in-memory buffer of the screen):
/// up to 24 hours of minutes, so memory is bounded by `ChartZoom.longestMinutes` whatever the traffic.
public struct ChartHistory: Hashable, Sendable {
    /// Per-minute counts per arm, oldest first; the last one is the minute that ends at `end`.
    public var minutes: [ArmMinute]
    /// The end of the newest minute (telemetry time).
    public var end: Instant
    /// Counts per arm from the rollout start up to the first minute of `minutes` (the crash chart's running rate
    /// starts from them, so its interval is the one the guardrail narrows).
    public var before: ArmMinute
    /// Propagation of the newest version over time (oldest first), sampled by the source.
    public var propagation: [PropagationSample]
    /// The rollout's start (telemetry time): the crash chart's running rate counts the minutes from it on; nil
    /// counts every minute shown.
    public var since: Instant? = nil

    public init(minutes: [ArmMinute], end: Instant, before: ArmMinute = ArmMinute(), propagation: [PropagationSample] = []) {
        self.minutes = Array(minutes.suffix(ChartZoom.longestMinutes))
        self.end = end
        self.before = before
        self.propagation = Array(propagation.suffix(ChartZoom.longestMinutes))
    }

    /// The instant the minute at `index` starts.
    public func start(ofMinute index: Int) -> Instant {
        Instant(microseconds: end.microseconds - Int64(minutes.count - index) * 60_000_000)
    }
}
