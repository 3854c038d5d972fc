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

/// The Crashlytics API's events.list as a source, against the strict fake over HTTPS.
@Suite("Crashlytics API source", .serialized)
struct CrashlyticsSourceTests {
    static let start = ExportFleet.start

    /// Crashlytics export rows (the schema `ingest --format crashlytics` reads) for `n` crashes over 30 minutes.
    static func crashes(seed: UInt64, n: Int) -> [JSONValue] {
        var random = SplitMix64(state: seed)
        return (0..<n).map { i in
            let t = start.microseconds + Int64(random.below(30 * 60_000)) * 1000
            var row: [(String, JSONValue)] = [
                ("event_timestamp", .number(JSONNumber(t))), ("installation_uuid", .string("inst-\(random.below(n / 2 + 1))-\(i % 3)")),
                ("is_fatal", .bool(random.below(4) != 0)), ("platform", "IOS"), ("issue_id", .string("issue-\(random.below(5))")),
            ]
            if random.below(5) != 0 {
                row.append(("custom_keys", [["key": "AppAttestCohort", "value": .string(["enabled", "control", "none"][random.below(3)])]]))
            }
            return .object(JSONObject(row))
        }
    }

    /// The source against the fake; with `clock`, each wait moves that clock by its length instead of sleeping.
    static func source(_ fake: FakeFirebase, clock: ManualClock? = nil) throws -> CrashlyticsEventsSource {
        let transport = fake.transport
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: transport, clock: SystemClock(),
            scope: CrashlyticsEventsSource.scope)
        let call = SourceCaller(
            source: "crashlytics", project: fake.project, tokens: tokens, transport: transport,
            clock: clock ?? SystemClock(), sleep: { clock?.advance(by: $0) })
        let source = CrashlyticsEventsSource(
            name: "crashlytics", project: fake.project, app: "1:123456789012:ios:0123456789abcdef", origin: fake.origin, call: call)
        source.pageSize = 25
        return source
    }

    /// google-api-python-client, built from firebasecrashlytics.v1alpha.json, lists the events of an interval
    /// page by page; a time that is not RFC 3339 is refused.
    @Test func googlesOwnClientAgreesWithTheFake() throws {
        let fake = try FakeFirebase(tls: true)
        try fake.control("POST", "/_fake/data/rows", ["table": "crashlytics", "rows": .array(Self.crashes(seed: 1, n: 40))])
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/FirebaseFake/crashlytics_client_check.py").path
        let r = try TestSupport.run(
            try TestSupport.python(),
            [
                script, fake.origin, fake.keyFile, "projects/\(fake.project)/apps/1:123456789012:ios:0123456789abcdef",
                Self.start.iso8601, (Self.start + .minutes(15)).iso8601,
            ],
            environment: ["SSL_CERT_FILE": fake.caFile, "HTTPLIB2_CA_CERTS": fake.caFile,
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"])
        #expect(r.status == 0, "\(r.stderr)")
        let seen = try JSONParser().parse(Array(r.stdout.utf8))
        let ids = seen["ids"]?.arrayValue ?? []
        #expect(ids.count > 7 && ids.count < 40)
        #expect(Set(ids).count == ids.count)
        #expect(seen["pages"]?.numberValue?.int64 == Int64((ids.count + 6) / 7))
        #expect(seen["first"]?["issue"]?["errorType"]?.stringValue != nil)
        #expect(seen["bad_time"]?["status"]?.numberValue?.int64 == 400)
    }

    /// Crashes per minute, cohort and fatality equal what `ingest --format crashlytics` counts from the same rows;
    /// a re-pull lands nothing.
    @Test func crashCountsMatchIngestAndRepullsAddNothing() throws {
        let fake = try FakeFirebase(tls: true)
        let rows = Self.crashes(seed: 7, n: 300)
        try fake.control("POST", "/_fake/data/rows", ["table": "crashlytics", "rows": .array(rows)])
        let ingest = TelemetryIngest(
            format: .crashlytics, window: EventTimeWindow(now: Self.start + .hours(1), rolloutStart: Self.start - .hours(1)))
        Array((rows.map(\.compactText).joined(separator: "\n") + "\n").utf8).withUnsafeBytes { ingest.feed($0) }
        ingest.finish()
        #expect(ingest.problems.isEmpty, "\(ingest.problems)")
        var expected: [AggregateKey: Int64] = [:]
        ingest.batch.forEachCounter { minute, key, n in
            expected[AggregateKey(minute: minute, cohort: key.cohort, kind: .crash, detail: key.detail == 1 ? "fatal" : "nonfatal"), default: 0] += n
        }
        let source = try Self.source(fake)
        let plan = PullPlan(now: Self.start + .minutes(40), watermark: nil, origin: Self.start - .minutes(1), overlap: .minutes(10))
        let pull = try source.pull(plan)
        #expect(pull.counts == expected)
        #expect(pull.rows == 300)
        let store = try temporaryStore("crashlytics")
        #expect(!(try store.commitPull(pull, at: plan.through)).isEmpty)
        #expect(try store.commitPull(try source.pull(plan), at: plan.through).isEmpty)
    }

    /// A server that keeps naming a next page (empty ones past the last event) is stopped at `maximumPages`, and
    /// pages still coming after the pull's deadline fail it: both name nextPageToken and land nothing.
    @Test func pagingStopsAtThePageBoundAndTheDeadline() throws {
        let fake = try FakeFirebase(tls: true)
        try fake.control("POST", "/_fake/data/rows", ["table": "crashlytics", "rows": .array(Self.crashes(seed: 7, n: 100))])
        try fake.control("POST", "/_fake/data/options", ["empty_pages": 60])
        let plan = PullPlan(now: Self.start + .minutes(40), watermark: nil, origin: Self.start - .minutes(1), overlap: .minutes(10))
        func failure(_ source: CrashlyticsEventsSource) -> SourceError? {
            switch Result(catching: { () throws(SourceError) -> SourcePull in try source.pull(plan) }) {
            case .success: nil
            case .failure(let e): e
            }
        }
        let bounded = try Self.source(fake)
        bounded.maximumPages = 10
        let e = try #require(failure(bounded))
        #expect(e.kind == .badAnswer && e.message.contains("nextPageToken") && e.message.contains("10"), "\(e)")
        #expect((try fake.control("GET", "/_fake/data/stats")["crashlytics_pages"]?.numberValue?.int64 ?? 0) <= 10)

        // A one-minute deadline; the first page is throttled three times for 30 s: the next page is not read.
        let clock = ManualClock(Self.start + .minutes(40))
        let slow = try Self.source(fake, clock: clock)
        slow.deadline = .minutes(1)
        try fake.fault("rate_limited", match: "crashlytics_events", count: 3, seconds: 30)
        let late = try #require(failure(slow))
        #expect(late.kind == .unavailable && late.message.contains("nextPageToken after page 1"), "\(late)")
    }
}
