import FirebaseFake
import Foundation
import GoogleDataSources
import JSON
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
            return [
                ("status", s.level, s.reason), ("watch", w.level, w.reason),
                ("console", c.verdict, c.reasons.first ?? ""),
            ]
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
        #expect(
            throttled.error?.kind == .unavailable && throttled.error?.message.contains("HTTP 429") == true,
            "\(String(describing: throttled.error))")
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
        #expect(
            duplicated.error?.kind == .badAnswer,
            "\(String(describing: duplicated.error)) \(String(describing: duplicated.rows)) \(duplicated.window)")
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

    /// GA4's realtime report with the property's tokens exhausted (429 RESOURCE_EXHAUSTED): each pull fails naming
    /// the source, writes nothing, and once silent past its limit the source is HOLD; when the quota refills the
    /// next pull lands and the HOLD is gone.
    @Test func anExhaustedRealtimeQuotaIsHoldUntilItRefills() throws {
        let fake = try FakeFirebase(tls: true)
        let wall = Int64(Date().timeIntervalSince1970)
        // Behind the wall clock, so that the token assertions signed on it stay acceptable as the test moves it.
        let clock = ManualClock(Instant(seconds: wall - wall % 60) - .minutes(20))
        try ExportFleet(
            seed: 37, installations: 60, minutes: 20, start: Instant(seconds: wall) - .minutes(25),
            cohortAsProperty: true
        ).load(into: fake)
        let dir = try TestSupport.temporaryDirectory("source-quota")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-source-quota", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let rt = try SourceConfiguration(
            name: "rt", kind: .analyticsRealtime, project: fake.project, analytics: "", property: "123456",
            credentials: .serviceAccountFile(fake.keyFile), origin: clock.now() - .minutes(30))
        _ = try session.settingsWritePath().execute(.source(.add(rt)), actor: "alice@test", code: nil)
        let sources = SessionSources(
            session: session, environment: ["ROLLOUT_ANALYTICS_URL": fake.origin, "CURL_CA_BUNDLE": fake.caFile]
        ) { clock.advance(by: $0) }
        let store = try RolloutStore(path: path, create: false)
        let monitor = try session.monitor()

        try fake.control("POST", "/_fake/data/realtime", ["tokens_per_hour": 0])
        let started = clock.now()
        while clock.now() - started <= .minutes(10) {
            let r = try #require(try sources.pullDue(all: true).first)
            #expect(r.error?.kind == .unavailable, "\(String(describing: r.error))")
            #expect(r.error?.message.contains("HTTP 429") == true && r.error?.message.contains("Exhausted") == true)
            clock.advance(by: .minutes(1))
        }
        #expect(try store.telemetryCounters().allTimeTotals().counts.isEmpty)
        let held = try monitor.status().assessment.verdict
        #expect(held.level == .hold && held.reason.hasPrefix("source rt has not answered yet: "), "\(held)")
        #expect(held.reason.contains("Exhausted property tokens"), "\(held)")

        try fake.control("POST", "/_fake/data/realtime", ["tokens_per_hour": 5000])
        let refilled = try #require(try sources.pullDue(all: true).first)
        #expect(refilled.error == nil && refilled.addedEvents > 0, "\(String(describing: refilled.error))")
        #expect(refilled.note.contains("quota: 4995 tokens left this hour"), "\(refilled.note)")
        #expect(try monitor.status().assessment.context.sourceSilences.isEmpty)
    }

    /// A bad answer from any of the three APIs (not JSON, a flood past the limit of an answer, 32 MiB as README
    /// says, as sent, as declared or once inflated) fails the pull as a bad answer naming the source, what was
    /// asked and the limit, writes no counter, and is not asked again (a flood would come again); the store's
    /// counters and batches are unchanged.
    @Test(arguments: ["invalid_json", "giant_body", "declared_giant", "gzip_bomb"])
    func aBadAnswerFailsThePullAndWritesNothing(_ fault: String) throws {
        let fake = try FakeFirebase(tls: true)
        let wall = Int64(Date().timeIntervalSince1970)
        let clock = ManualClock(Instant(seconds: wall - wall % 60))
        let dir = try TestSupport.temporaryDirectory("source-bad-answer")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-source-bad", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let key = SourceConfiguration.Credentials.serviceAccountFile(fake.keyFile)
        let configurations = [
            (
                "bq", "bigquery_query", "BigQuery jobs.query",
                try SourceConfiguration(
                    name: "bq", project: fake.project, analytics: "\(fake.project).analytics_123456", credentials: key,
                    origin: clock.now() - .minutes(30))
            ),
            (
                // Another property's report: bq reads 123456's events, and one body of events has one source.
                "rt", "analytics_realtime", "GA4 runRealtimeReport",
                try SourceConfiguration(
                    name: "rt", kind: .analyticsRealtime, project: fake.project, analytics: "", property: "654321",
                    credentials: key, origin: clock.now() - .minutes(30))
            ),
            (
                "crashes", "crashlytics_events", "Crashlytics events.list",
                try SourceConfiguration(
                    name: "crashes", kind: .crashlyticsAPI, project: fake.project, analytics: "",
                    app: "1:123456789012:ios:0123456789abcdef", credentials: key, origin: clock.now() - .minutes(30))
            ),
        ]
        for (_, _, _, c) in configurations {
            _ = try session.settingsWritePath().execute(.source(.add(c)), actor: "alice@test", code: nil)
        }
        let environment = [
            "ROLLOUT_BIGQUERY_URL": fake.origin, "ROLLOUT_ANALYTICS_URL": fake.origin,
            "ROLLOUT_CRASHLYTICS_URL": fake.origin,
            "CURL_CA_BUNDLE": fake.caFile,
        ]
        let waits = DelayRecorder()
        let sources = SessionSources(session: session, environment: environment) { waits.record($0) }
        let store = try RolloutStore(path: path, create: false)
        let before = try store.telemetryCounters().allTimeTotals()
        for (name, match, what, c) in configurations {
            try fake.fault(fault, match: match, count: 5)
            let r = try sources.pull(c, land: true)
            #expect(r.error?.kind == .badAnswer, "\(name) \(fault): \(String(describing: r.error))")
            #expect(
                r.error?.description.hasPrefix("source \(name): \(what): ") == true, "\(String(describing: r.error))")
            #expect(try sources.state(name)?.lastError == r.error?.message)
            // How the flood was seen: a plain body "as received", never "once inflated" (it was not compressed).
            if let how = ["giant_body": "as received", "declared_giant": "as declared", "gzip_bomb": "once inflated"][fault] {
                #expect(
                    r.error?.message.hasSuffix("the answer is larger than 32 MiB \(how); refused") == true,
                    "\(String(describing: r.error))")
            }
            try fake.clearFaults()
        }
        #expect(waits.delays.isEmpty, "a bad answer is not asked again: \(waits.delays)")
        #expect(try store.telemetryCounters().allTimeTotals() == before)
        #expect(try store.telemetryCounters().batches().isEmpty)
    }

    /// The realtime report's rows, read by the source: a malformed row, a minute outside the report's 30, a row
    /// repeated (its minute compared as a number), a count past `PullLedger.maximumCount`, and headers that are not the ones asked for are each a bad answer naming the field.
    @Test func aMalformedRealtimeReportNamesTheField() {
        func answer(_ rows: [JSONValue], metrics: [String] = ["eventCount", "activeUsers"]) -> JSONValue {
            [
                "dimensionHeaders": [
                    ["name": "minutesAgo"], ["name": "eventName"], ["name": "customUser:AppAttestCohort"],
                ],
                "metricHeaders": .array(metrics.map { ["name": .string($0)] }), "rows": .array(rows),
            ]
        }
        func row(_ ago: String, _ event: String, _ count: String, cohort: String = "enabled") -> JSONValue {
            [
                "dimensionValues": [["value": .string(ago)], ["value": .string(event)], ["value": .string(cohort)]],
                "metricValues": [["value": .string(count)], ["value": "1"]],
            ]
        }
        let cases: [(JSONValue, String)] = [
            (answer([row("0", "session_start", "many")]), "rows[0].metricValues"),
            (answer([row("0", "session_start", "-3")]), "rows[0].metricValues"),
            (answer([row("30", "session_start", "3")]), "rows[0] minutesAgo"),
            (answer([row("-1", "session_start", "3")]), "rows[0] minutesAgo"),
            (answer([row("2", "session_start", "3"), row("2", "session_start", "4")]), "rows[1]"),
            // One minute written two ways is a repeated row; counts past 10^12, alone or summed, are refused.
            (answer([row("3", "session_start", "600000000000"), row("03", "session_start", "600000000000")]), "rows[1]"),
            (answer([row("3", "session_start", "9223372036854775807")]), "rows[0].metricValues[0] (eventCount)"),
            (
                answer([
                    row("3", "session_start", "600000000000", cohort: "none"),
                    row("3", "session_start", "600000000000", cohort: "(not set)"),
                ]), "rows[1].metricValues[0] (eventCount)"
            ),
            (answer([row("2", "screen_view", "3")]), "rows[0] eventName"),
            (answer([["dimensionValues": [["value": "1"]]]]), "rows[0].dimensionValues"),
            (answer([], metrics: ["eventCount"]), "metricHeaders"),
        ]
        for (bad, field) in cases {
            var failure: SourceError?
            do {
                _ = try AnalyticsRealtimeSource.counts(
                    bad, source: "rt", cohortDimension: "customUser:AppAttestCohort", nowMinute: 100)
            } catch { failure = error }
            #expect(
                failure?.kind == .badAnswer
                    && failure?.description.hasPrefix("source rt: GA4's answer: \(field)") == true,
                "\(field): \(String(describing: failure))")
        }
    }
}
