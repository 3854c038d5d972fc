import FirebaseFake
import Foundation
import GoogleDataSources
import JSON
import SQLiteStore
import Telemetry
import TelemetryIngest
import TelemetrySources
import TestSupport
import Testing
import Timekeeping
import WebClient

/// The GA4 Data API's realtime report as a source, against the strict fake over HTTPS.
@Suite("GA4 realtime source", .serialized)
struct RealtimeSourceTests {
    static let property = "properties/123456"

    static func source(_ fake: FakeFirebase, waits: DelayRecorder = DelayRecorder()) throws -> AnalyticsRealtimeSource {
        let transport = fake.transport
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: transport, clock: SystemClock(),
            scope: AnalyticsRealtimeSource.scope)
        let call = SourceCaller(
            source: "ga4-realtime", project: fake.project, tokens: tokens, transport: transport, clock: SystemClock(),
            backoff: SourceBackoff(attempts: 3, base: .milliseconds(10), cap: .seconds(Int64(30))), sleep: { waits.record($0) })
        return AnalyticsRealtimeSource(name: "ga4-realtime", property: property, origin: fake.origin, call: call)
    }

    /// google-api-python-client, built from analyticsdata.v1beta.json, sends rollout's own request body: the fake
    /// answers with the documented headers, string values and property quota, and refuses an unknown dimension
    /// and a range beyond the last 30 minutes.
    @Test func googlesOwnClientAgreesWithTheFake() throws {
        let fake = try FakeFirebase(tls: true)
        let start = Instant(seconds: Int64(Date().timeIntervalSince1970) - 20 * 60)
        try ExportFleet(seed: 2, installations: 40, minutes: 15, start: start, cohortAsProperty: true).load(into: fake)
        let source = try Self.source(fake)
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/FirebaseFake/realtime_client_check.py").path
        let r = try TestSupport.run(
            try TestSupport.python(), [script, fake.origin, fake.keyFile, Self.property, source.request.compactText],
            environment: ["SSL_CERT_FILE": fake.caFile, "HTTPLIB2_CA_CERTS": fake.caFile,
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"])
        #expect(r.status == 0, "\(r.stderr)")
        let seen = try JSONParser().parse(Array(r.stdout.utf8))
        let report = seen["report"]
        #expect(report?["dimensionHeaders"]?.arrayValue?.count == 3)
        #expect(report?["metricHeaders"]?.arrayValue?.first?["type"]?.stringValue == "TYPE_INTEGER")
        #expect((report?["rows"]?.arrayValue?.count ?? 0) > 10)
        #expect(report?["propertyQuota"]?["tokensPerHour"]?["remaining"]?.numberValue != nil)
        #expect(seen["bad_dimension"]?["status"]?.numberValue?.int64 == 400)
        #expect(seen["too_far_back"]?["status"]?.numberValue?.int64 == 400)
    }

    /// Sessions, successes and crashes per minute and cohort equal what ingest reads from the same rows (the
    /// cohort a user property); a second pull lands nothing; the quota is stated.
    @Test func realtimeCountsMatchIngestAndRepullsAddNothing() throws {
        let fake = try FakeFirebase(tls: true)
        let start = Instant(seconds: Int64(Date().timeIntervalSince1970) - 25 * 60)
        let fleet = ExportFleet(seed: 12, installations: 150, minutes: 20, start: start, cohortAsProperty: true)
        try fleet.load(into: fake)
        let ingest = TelemetryIngest(format: .ga4, window: EventTimeWindow(now: Instant(seconds: Int64(Date().timeIntervalSince1970) + 60), rolloutStart: start))
        Array(fleet.ndjson.utf8).withUnsafeBytes { ingest.feed($0) }
        ingest.finish()
        var expected: [AggregateKey: Int64] = [:]
        ingest.batch.forEachCounter { minute, key, n in
            // Realtime reports carry no event parameters: every app_exception counts as a fatal crash.
            guard [.session, .attestationSuccess, .crash].contains(key.kind) else { return }
            expected[AggregateKey(minute: minute, cohort: key.cohort, kind: key.kind, detail: key.kind == .crash ? "fatal" : ""), default: 0] += n
        }
        let source = try Self.source(fake)
        var pull: SourcePull
        var pulls: Int64 = 0
        repeat {  // one report within one wall minute, so minutesAgo means the same minute to both sides
            let minute = Int64(Date().timeIntervalSince1970) / 60
            pull = try source.pull(now: Instant(seconds: Int64(Date().timeIntervalSince1970)))
            pulls += 1
            if Int64(Date().timeIntervalSince1970) / 60 == minute { break }
        } while true
        let got = pull.counts.filter { $0.key.kind != .attestationFailure }
        let want = expected.filter { pull.plan.fromMinute <= $0.key.minute }
        #expect(got == want, "pulled, not ingested: \(got.filter { want[$0.key] != $0.value }); ingested, not pulled: \(want.filter { got[$0.key] != $0.value })")
        // Each report costs the fake's 5 tokens; a pull that straddled a wall minute was made again.
        #expect(source.quota?.tokensPerHourRemaining == 5000 - 5 * pulls)
        print("GA4 realtime pull: \(fleet.events) events -> \(pull.rows) rows, \(pull.bytes) bytes, \(source.quota!)")

        let store = try temporaryStore("realtime")
        #expect(!(try store.commitPull(pull, at: pull.plan.through)).isEmpty)
        #expect(try store.commitPull(pull, at: pull.plan.through).isEmpty)
    }

    /// Below the reserve of tokens the source stops asking until the hour the quota was read in ends, then asks
    /// again.
    @Test func theQuotaIsRespected() throws {
        let fake = try FakeFirebase(tls: true)
        try fake.control("POST", "/_fake/data/realtime", ["tokens_per_hour": 54])
        let source = try Self.source(fake)
        let now = Instant(seconds: Int64(Date().timeIntervalSince1970))
        _ = try source.pull(now: now)
        #expect(source.quota?.exhausted == true)
        #expect {
            try source.pull(now: now)
        } throws: { error in
            (error as? SourceError)?.kind == .unavailable && "\(error)".contains("quota")
        }
        #expect(try fake.control("GET", "/_fake/data/stats")["realtime_requests"]?.numberValue?.int64 == 1)

        // The hour the quota was read in ends: the source asks again (it kept refusing for the whole session).
        try fake.control("POST", "/_fake/data/realtime", ["tokens_per_hour": 5000])
        let nextHour = Instant(seconds: (now.seconds / 3600 + 1) * 3600)
        #expect(throws: SourceError.self) { try source.pull(now: nextHour - .seconds(Int64(1))) }
        _ = try source.pull(now: nextHour)
        #expect(source.quota?.exhausted == false)
        #expect(try fake.control("GET", "/_fake/data/stats")["realtime_requests"]?.numberValue?.int64 == 2)
    }
}
