import Console
import Monitoring
import Rollout
import Telemetry
import Timekeeping

/// The console's chart history, read from the store's per-minute counters (`TelemetryCounters.counterLooks`).
///
/// A day of minutes is at most 1,440 rows of a few counters each; the whole day is read again every `fullEvery`
/// refreshes (late batches may change old minutes) and only the last `recentMinutes` otherwise, so a refresh four
/// times a second reads a handful of rows. Memory is bounded by the day: minutes older than it are dropped.
/// Propagation of the newest version is not in the counters (a fetch counter has no version), so it is sampled
/// here, once per telemetry minute, from the assessment's figure, and kept for a day.
struct ChartHistoryReader {
    var minutes: [Int64: ArmMinute] = [:]
    var propagation: [PropagationSample] = []
    var refreshes = 0
    var fullEvery = 40
    var recentMinutes: Int64 = 16
    /// The newest minute of the last read.
    var lastMinute: Int64?

    static func arms(_ counts: [CounterKey: Int64]) -> ArmMinute {
        let t = CounterTotals(counts)
        func arm(_ c: Cohort) -> ArmCounts {
            ArmCounts(
                successes: Int(t.sum(.attestationSuccess, cohort: c)), failures: Int(t.sum(.attestationFailure, cohort: c)),
                crashes: Int(t.sum(.crash, cohort: c, fatal: true)), sessions: Int(t.sum(.session, cohort: c)))
        }
        return ArmMinute(exposed: arm(.enabled), control: arm(.control), other: arm(.none))
    }

    mutating func history(_ counters: any TelemetryCounters, status: RolloutMonitor.Status) throws -> ChartHistory {
        let now = status.snapshot.now
        let nowMinute = BucketLevel.minute.bucket(now.microseconds)
        let first = nowMinute - Int64(ChartZoom.longestMinutes) + 1
        let full = refreshes % fullEvery == 0 || minutes.isEmpty
        refreshes += 1
        // From a little before the newest minute read last time, so a fast simulation's jump leaves no gap.
        let from = full ? first : max(first, min(nowMinute, lastMinute ?? nowMinute) - recentMinutes)
        lastMinute = nowMinute
        if full { minutes.removeAll(keepingCapacity: true) } else { minutes = minutes.filter { $0.key >= first && $0.key < from } }
        for look in try counters.counterLooks(.minute, from: from, to: nowMinute + 1) { minutes[look.bucket] = Self.arms(look.counts) }
        let series = (first...nowMinute).map { minutes[$0] ?? ArmMinute() }

        // What the rollout counted before the day shown: its totals less the minutes since its start.
        let startMinute = BucketLevel.minute.bucket(status.snapshot.since.microseconds)
        var before = Self.arms(status.snapshot.totals.counts)
        for (minute, counts) in minutes where minute >= startMinute {
            before.exposed = Self.minus(before.exposed, counts.exposed)
            before.control = Self.minus(before.control, counts.control)
            before.other = Self.minus(before.other, counts.other)
        }

        if let share = status.assessment.exposure.propagation {
            let sample = PropagationSample(
                at: BucketLevel.minute.start(nowMinute), share: share, version: String(status.current.info.number))
            if propagation.last?.at == sample.at { propagation[propagation.count - 1] = sample } else { propagation.append(sample) }
            let oldest = BucketLevel.minute.start(first)
            if let drop = propagation.firstIndex(where: { $0.at >= oldest }), drop > 0 { propagation.removeFirst(drop) }
        }
        var history = ChartHistory(
            minutes: series, end: BucketLevel.minute.start(nowMinute + 1), before: before, propagation: propagation)
        history.since = status.snapshot.since
        return history
    }

    static func minus(_ a: ArmCounts, _ b: ArmCounts) -> ArmCounts {
        ArmCounts(
            successes: max(0, a.successes - b.successes), failures: max(0, a.failures - b.failures),
            crashes: max(0, a.crashes - b.crashes), sessions: max(0, a.sessions - b.sessions))
    }
}
