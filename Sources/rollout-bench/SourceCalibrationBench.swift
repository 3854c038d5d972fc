import Foundation
import GoogleDataSources
import JSON
import Telemetry
import TelemetrySources
import TestSupport
import Timekeeping

/// The calibration figures per source at 1,000 runs (the tests' `SourceCalibrationTests` run 200): the same simulated
/// minutes of a 10% rollout (about 4,200 sessions a minute, 0.2% fatal crashes per session, 200 looks) land as
/// ingest's counters (BigQuery's are the same, by the equality tests) and as GA4's realtime report states them
/// (read by `AnalyticsRealtimeSource.counts`: sessions and crashes per minute and cohort, no distinct users); the
/// HALT rates without a difference and at a true +50% crash rate, and the runs where the two disagree on HALT.
/// The Crashlytics API alone carries no sessions: its crash comparison stands down (the tests check it).
enum SourceCalibrationBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "source-calibration", title: "False HALT and detection per source, 1,000 runs of 200 looks", run: run)
    ]

    static let start = Instant(seconds: 1_780_000_020)

    static func realtimeAnswer(_ arms: [(String, Int64, Int64, Int64)]) -> JSONValue {
        var rows: [JSONValue] = []
        for (cohort, sessions, crashes, users) in arms {
            for (event, n, u) in [("session_start", sessions, users), ("app_exception", crashes, crashes)] where n > 0 {
                rows.append([
                    "dimensionValues": [["value": "0"], ["value": .string(event)], ["value": .string(cohort)]],
                    "metricValues": [["value": .string(String(n))], ["value": .string(String(u))]],
                ])
            }
        }
        return [
            "dimensionHeaders": [
                ["name": "minutesAgo"], ["name": "eventName"], ["name": "customUser:AppAttestCohort"],
            ],
            "metricHeaders": [["name": "eventCount"], ["name": "activeUsers"]], "rows": .array(rows),
        ]
    }

    /// HALT after 200 looks through ingest's counters and through the realtime report, for one run.
    static func run(_ g: inout SplitMix64, rateRatio: Double) throws -> (Bool, Bool) {
        let config = WatchConfiguration(since: start)
        var ingest = RolloutWatch(configuration: config)
        var realtime = RolloutWatch(configuration: config)
        let first = BucketLevel.minute.bucket(start.microseconds)
        for look in 0..<200 {
            let minute = first + Int64(look)
            let es = g.poisson(420), cs = g.poisson(420)
            let ec = g.poisson(Double(es) * 0.002 * rateRatio), cc = g.poisson(Double(cs) * 0.002)
            let eu = g.poisson(Double(es) * 0.25), cu = g.poisson(Double(cs) * 0.25)
            ingest.fold(
                CounterLook(
                    level: .minute, bucket: minute,
                    counts: [
                        CounterKey(.session, .enabled): es, CounterKey(.session, .control): cs,
                        CounterKey(.crash, .enabled, detail: 1): ec, CounterKey(.crash, .control, detail: 1): cc,
                        CounterKey(.usersEntered, .enabled): eu, CounterKey(.usersEntered, .control): cu,
                        CounterKey(.usersCrashed, .enabled): min(ec, eu),
                        CounterKey(.usersCrashed, .control): min(cc, cu),
                    ]))
            let (counts, _) = try AnalyticsRealtimeSource.counts(
                realtimeAnswer([("enabled", es, ec, eu), ("control", cs, cc, cu)]), source: "rt",
                cohortDimension: "customUser:AppAttestCohort", nowMinute: minute)
            var look: [CounterKey: Int64] = [:]
            for (k, n) in counts { look[PullLedger.counterKey(k) { _ in 0 }, default: 0] += n }
            realtime.fold(CounterLook(level: .minute, bucket: minute, counts: look))
        }
        let end = start + .minutes(200)
        func halted(_ w: RolloutWatch) -> Bool {
            w.snapshot(now: end, pending: [], presence: [], sessionsLastDay: 0, newestEvent: end, lastBatchAt: end)
                .assess(RolloutContext(currentMicroPercent: 10_000_000)).verdict.level == .halt
        }
        return (halted(ingest), halted(realtime))
    }

    static func run() throws {
        let runs = 1_000
        for (label, ratio, seed) in [("no difference", 1.0, UInt64(41)), ("+50% crash rate", 1.5, UInt64(43))] {
            var g = SplitMix64(state: seed)
            var halts = (0, 0)
            var disagreements = 0
            for _ in 0..<runs {
                let (a, b) = try run(&g, rateRatio: ratio)
                halts.0 += a ? 1 : 0
                halts.1 += b ? 1 : 0
                disagreements += a != b ? 1 : 0
            }
            func percent(_ n: Int) -> String { String(format: "%.1f%%", Double(n) / Double(runs) * 100) }
            print(
                "  \(label), \(runs) runs of 200 looks at 10%: HALT ingest/BigQuery \(percent(halts.0)), GA4 realtime "
                    + "\(percent(halts.1)), runs where they disagree: \(disagreements)")
        }
    }
}
