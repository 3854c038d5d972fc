import FirebaseFake
import Foundation
import RolloutApp
import SQLiteStore
import Telemetry
import TelemetrySources
import TestSupport
import Testing
import Timekeeping

/// A source's faults as a session meets them, on its manual clock (back-off waits move the clock, nothing sleeps):
/// a 429, 5xx answers, ten minutes without any answer, a duplicated page, then the source answering again. A failed
/// pull writes nothing but the failure; once silent past its limit the source is HOLD "source bq silent since …" in
/// the one assessment every reader judges by (`status`, `watch`'s loop, the console's picture), and when it answers
/// again the verdict is the store's own and nothing was counted twice (the counters are those of `ingest`).
@Suite("source faults", .serialized)
struct SourceFaultTests {
    @Test func aFailingOrSilentSourceIsHoldEverywhereAndRecovers() throws {
        let fake = try FakeFirebase(tls: true)
        // The session's clock starts half an hour before the wall clock and moves only as the test moves it: the
        // service account's token assertions it signs stay within what the token endpoint accepts.
        let wall = Int64(Date().timeIntervalSince1970)
        let clock = ManualClock(Instant(seconds: wall - wall % 60) - .minutes(30))
        let start = clock.now() - .minutes(25)
        let fleet = ExportFleet(seed: 31, installations: 200, minutes: 20, start: start)
        try fleet.load(into: fake)
        let ingested = try temporaryStore("faults-ingest")
        try fleet.ingest(into: ingested, now: clock.now(), since: start - .hours(1))

        let dir = try TestSupport.temporaryDirectory("source-faults")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-source-faults", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let bq = try SourceConfiguration(
            name: "bq", project: fake.project, analytics: "\(fake.project).analytics_123456",
            credentials: .serviceAccountFile(fake.keyFile), origin: start - .minutes(5), every: .seconds(Int64(60)))
        _ = try session.settingsWritePath().execute(.source(.add(bq)), actor: "alice@test", code: nil)
        let environment = ["ROLLOUT_BIGQUERY_URL": fake.origin, "CURL_CA_BUNDLE": fake.caFile]
        let waits = DelayRecorder()
        let sources = SessionSources(session: session, environment: environment) { d in
            waits.record(d)
            clock.advance(by: d)
        }
        let store = try RolloutStore(path: path, create: false)
        func counters() throws -> CounterTotals { try store.telemetryCounters().allTimeTotals() }
        let monitor = try session.monitor()
        let loop = try session.headlessLoop()
        let console = try session.consoleSource()
        func verdicts() throws -> [(String, VerdictLevel, String)] {
            let s = try monitor.status().assessment.verdict
            let w = try loop.look().status.assessment.verdict
            let c = try console.snapshot().crash
            return [("status", s.level, s.reason), ("watch", w.level, w.reason), ("console", c.verdict, c.reasons.first ?? "")]
        }

        // Answering: the pull lands what ingest lands, no source reason in any verdict.
        let first = try #require(try sources.pullDue(all: true).first)
        #expect(first.error == nil && first.addedEvents > 0, "\(String(describing: first.error))")
        let landed = try counters()
        #expect(landed == (try ingested.telemetryCounters().allTimeTotals()))
        let lastSuccess = clock.now()
        for (who, _, reason) in try verdicts() { #expect(!reason.contains("source bq"), "\(who): \(reason)") }
        let answering = try monitor.status().assessment.verdict.level

        // A 429 with the quota exhausted through every retry, then 503s: each pull fails naming the source and the
        // status, writes nothing, and the verdict stays the store's while the last success is recent.
        clock.advance(by: .minutes(1))
        try fake.fault("rate_limited", match: "bigquery_query", count: 50, seconds: 7)
        let throttled = try #require(try sources.pullDue().first)
        #expect(throttled.error?.kind == .unavailable && throttled.error?.message.contains("HTTP 429") == true, "\(String(describing: throttled.error))")
        #expect(waits.delays.contains(.seconds(Int64(7))), "Retry-After honoured: \(waits.delays)")
        try fake.clearFaults()
        clock.advance(by: .minutes(1))
        try fake.fault("unavailable", match: "bigquery_query", count: 50)
        let unavailable = try #require(try sources.pullDue().first)
        #expect(unavailable.error?.message.contains("HTTP 503") == true, "\(String(describing: unavailable.error))")
        #expect(try counters() == landed)
        #expect(try monitor.status().assessment.verdict.level == answering)
        try fake.clearFaults()

        // Silent: the connection closes without an answer at every pull, minute after minute. Past ten minutes
        // since the last success, every reader says HOLD with the source's reason.
        try fake.fault("drop_before", match: "bigquery_query", count: 1000)
        while clock.now() - lastSuccess <= .minutes(10) {
            clock.advance(by: .minutes(1))
            let r = try #require(try sources.pullDue().first)
            #expect(r.error?.kind == .unavailable, "\(String(describing: r.error))")
        }
        #expect(try counters() == landed)
        let silent = "source bq silent since \(lastSuccess.iso8601)"
        for (who, level, reason) in try verdicts() {
            #expect(level >= .hold && reason.hasPrefix(silent), "\(who): \(level) \(reason)")
        }
        let finding = try #require(try monitor.status().assessment.verdict.findings.first { $0.text.hasPrefix(silent) })
        #expect(finding.level == .hold && finding.topic == .data)
        try fake.clearFaults()

        // A duplicated page: a bad answer, nothing written, still HOLD.
        try fake.control("POST", "/_fake/data/options", ["duplicate_page": true, "page_rows": 2])
        clock.advance(by: .minutes(1))
        let duplicated = try #require(try sources.pullDue().first)
        #expect(duplicated.error?.kind == .badAnswer, "\(String(describing: duplicated.error)) \(String(describing: duplicated.rows)) \(duplicated.window)")
        #expect(try counters() == landed)
        #expect(try monitor.status().assessment.verdict.reason.hasPrefix(silent))

        // Answering again: the pull lands nothing new (its window overlaps what was counted), the silence is gone
        // from every reader, and the counters are still those of ingest.
        try fake.control("POST", "/_fake/data/options", ["duplicate_page": false])
        clock.advance(by: .minutes(1))
        let recovered = try #require(try sources.pullDue().first)
        #expect(recovered.error == nil && recovered.addedEvents == 0, "\(String(describing: recovered.error))")
        #expect(try counters() == landed)
        for (who, _, reason) in try verdicts() { #expect(!reason.contains("source bq"), "\(who): \(reason)") }
        #expect(try monitor.status().assessment.context.sourceSilences.isEmpty)
    }
}
