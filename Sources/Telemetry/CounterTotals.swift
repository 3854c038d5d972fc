import Rollout
import Timekeeping

/// Counter totals over some span, with the sums the panels ask for.
public struct CounterTotals: Hashable, Sendable {
    public private(set) var counts: [CounterKey: Int64]

    public init(_ counts: [CounterKey: Int64] = [:]) { self.counts = counts }

    public subscript(key: CounterKey) -> Int64 { counts[key] ?? 0 }

    public mutating func add(_ key: CounterKey, _ n: Int64) { counts[key, default: 0] += n }

    public mutating func add(_ other: CounterTotals) {
        for (k, v) in other.counts { counts[k, default: 0] += v }
    }

    public mutating func add(_ other: [CounterKey: Int64]) {
        for (k, v) in other { counts[k, default: 0] += v }
    }

    // No parameter here is a `Cohort?`: `Cohort` has a case `none`, and `cohort: .none` would silently mean
    // "no filter". Each query comes as an all-cohorts form and a one-cohort form instead.

    /// The sum over every counter of `kind` (all cohorts) that matches the optional filters.
    public func sum(
        _ kind: CounterKind, provider: AttestationProvider? = nil, errorClass: ErrorClassBucket? = nil,
        fatal: Bool? = nil
    ) -> Int64 {
        total(kind, nil, provider, errorClass, fatal)
    }

    /// The sum over the counters of `kind` in `cohort` that match the optional filters.
    public func sum(
        _ kind: CounterKind, cohort: Cohort, provider: AttestationProvider? = nil, errorClass: ErrorClassBucket? = nil,
        fatal: Bool? = nil
    ) -> Int64 {
        total(kind, cohort, provider, errorClass, fatal)
    }

    private func total(
        _ kind: CounterKind, _ cohort: Cohort?, _ provider: AttestationProvider?, _ errorClass: ErrorClassBucket?,
        _ fatal: Bool?
    ) -> Int64 {
        var total: Int64 = 0
        for (k, v) in counts where k.kind == kind {
            if let cohort, k.cohort != cohort { continue }
            if let provider, k.provider != provider { continue }
            if let errorClass, FailureDetail(code: k.detail).errorClass != errorClass { continue }
            if let fatal, (k.detail == 1) != fatal { continue }
            total += v
        }
        return total
    }

    /// Successes / (successes + failures) over all cohorts, nil without attempts.
    public func successRatio(provider: AttestationProvider? = nil) -> Double? {
        ratio(sum(.attestationSuccess, provider: provider), sum(.attestationFailure, provider: provider))
    }

    /// Successes / (successes + failures) in `cohort`, nil without attempts.
    public func successRatio(cohort: Cohort, provider: AttestationProvider? = nil) -> Double? {
        ratio(
            sum(.attestationSuccess, cohort: cohort, provider: provider),
            sum(.attestationFailure, cohort: cohort, provider: provider))
    }

    private func ratio(_ ok: Int64, _ failed: Int64) -> Double? {
        ok + failed == 0 ? nil : Double(ok) / Double(ok + failed)
    }

    /// Failures by class over all cohorts (rejections split by catalog reason id).
    public func failuresByDetail() -> [FailureDetail: Int64] { failures(nil) }

    /// Failures by class in `cohort` (rejections split by catalog reason id).
    public func failuresByDetail(cohort: Cohort) -> [FailureDetail: Int64] { failures(cohort) }

    private func failures(_ cohort: Cohort?) -> [FailureDetail: Int64] {
        var out: [FailureDetail: Int64] = [:]
        for (k, v) in counts where k.kind == .attestationFailure && (cohort == nil || k.cohort == cohort) {
            out[FailureDetail(code: k.detail), default: 0] += v
        }
        return out
    }

    /// Failures by class with all rejections together, over all cohorts.
    public func failuresByClass() -> [ErrorClassBucket: Int64] { byClass(failures(nil)) }

    /// Failures by class with all rejections together, in `cohort`.
    public func failuresByClass(cohort: Cohort) -> [ErrorClassBucket: Int64] { byClass(failures(cohort)) }

    private func byClass(_ details: [FailureDetail: Int64]) -> [ErrorClassBucket: Int64] {
        var out: [ErrorClassBucket: Int64] = [:]
        for (d, v) in details { out[d.errorClass, default: 0] += v }
        return out
    }
}

/// Counts over the last few complete minutes.
public struct RateWindow: Hashable, Sendable {
    public var minutes: Int
    public var totals: CounterTotals
    /// Events per minute of `kind` in the window, all cohorts.
    public func perMinute(_ kind: CounterKind) -> Double { Double(totals.sum(kind)) / Double(minutes) }

    /// Events per minute of `kind` in `cohort` in the window.
    public func perMinute(_ kind: CounterKind, cohort: Cohort) -> Double {
        Double(totals.sum(kind, cohort: cohort)) / Double(minutes)
    }
}

/// One minute of counters, for sparklines.
public struct MinuteCounts: Hashable, Sendable {
    public var start: Instant
    public var totals: CounterTotals
}

/// One bucket of counters handed to the watch, in time order.
public struct CounterLook: Sendable {
    public var level: BucketLevel
    public var bucket: Int64
    public var counts: [CounterKey: Int64]

    public init(level: BucketLevel, bucket: Int64, counts: [CounterKey: Int64]) {
        self.level = level
        self.bucket = bucket
        self.counts = counts
    }

    public var start: Instant { level.start(bucket) }
    public var end: Instant { level.start(bucket + 1) }
}
