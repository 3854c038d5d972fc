import FirebaseFake
import Foundation
import GoogleDataSources
import JSON
import SQLiteStore
import Telemetry
import TelemetrySources
import TestSupport
import TelemetryIngest
import Testing
import Timekeeping
import WebClient

/// BigQuery as a telemetry source, against the strict fake (fake_google_data.py inside the Firebase fake, over
/// HTTPS), landing in SQLite stores.
@Suite("BigQuery source", .serialized)
struct BigQuerySourceTests {
    static let now = ExportFleet.start + .minutes(40)

    /// google-api-python-client, built from its shipped bigquery.v2.json, with google-auth's service-account
    /// credentials fetching the token from the fake, runs rollout's own query text and parameters: jobs.query,
    /// jobComplete false then getQueryResults polls, pages by pageToken, an unknown job, a query without
    /// useLegacySql: false, and a missing parameter.
    @Test func googlesOwnClientAgreesWithTheFake() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 3, installations: 20, minutes: 5).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["pending_polls": 2])
        let dir = try TestSupport.temporaryDirectory("bq-client")
        let tables = try ExportTables(project: fake.project, analytics: "\(fake.project).analytics_123456")
        let sqlFile = dir.appendingPathComponent("query.sql").path
        try ExportAggregation.sql(tables).write(toFile: sqlFile, atomically: true, encoding: .utf8)
        let plan = PullPlan(now: Self.now, watermark: nil, origin: ExportFleet.start - .minutes(5), overlap: .minutes(10))
        let parameters = JSONValue.array(
            ExportAggregation.parameters(plan: plan, origin: ExportFleet.start - .minutes(5)).map {
                ["name": .string($0.name), "parameterType": ["type": .string($0.type.rawValue)], "parameterValue": ["value": .string($0.value)]]
            })
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/FirebaseFake/google_data_client_check.py").path
        let r = try TestSupport.run(
            try TestSupport.python(), [script, fake.origin, fake.keyFile, fake.project, sqlFile, parameters.compactText],
            environment: ["SSL_CERT_FILE": fake.caFile, "REQUESTS_CA_BUNDLE": fake.caFile, "HTTPLIB2_CA_CERTS": fake.caFile,
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"])
        #expect(r.status == 0, "\(r.stderr)")
        let seen = try JSONParser().parse(Array(r.stdout.utf8))
        #expect(seen["first_complete"]?.boolValue == false)
        // Two answers of jobComplete false from getQueryResults, then the complete one.
        #expect(seen["polls"]?.numberValue?.int64 == 3)
        #expect(seen["schema"]?.arrayValue?.compactMap(\.stringValue) == ExportAggregation.columns)
        let rows = seen["rows"]?.arrayValue ?? []
        #expect(rows.count == Int(seen["totalRows"]?.stringValue ?? "") && rows.count > 3)
        #expect(seen["pages"]?.numberValue?.int64 == Int64((rows.count + 2) / 3))
        // Every cell a string, as BigQuery sends scalars.
        #expect(rows.allSatisfy { ($0.arrayValue ?? []).allSatisfy { $0.stringValue != nil } })
        #expect(seen["unknown_job"]?["status"]?.numberValue?.int64 == 404)
        #expect(seen["unknown_job"]?["reason"]?.stringValue == "notFound")
        #expect(seen["legacy"]?["status"]?.numberValue?.int64 == 400)
        #expect(seen["missing_parameter"]?["message"]?.stringValue?.contains("origin_us") == true)

        // rollout's client reads the same rows.
        let clock = ManualClock(Self.now)
        let pulled = try FakeBigQuery(fake: fake, clock: clock).source().pull(plan)
        #expect(pulled.rows == rows.count)
    }

    /// The same fleet through `ingest --format ga4` and through a BigQuery pull gives the same counters, minute
    /// by minute, the same crash statistics and the same verdict level at every look.
    @Test func theSameFleetGivesTheSameCountersAndVerdictsAsIngest() throws {
        let levels = try Self.sameCountersAndVerdicts(ExportFleet(seed: 11, installations: 3000, minutes: 30, crashBoost: 2))
        print("verdict levels at each look (pulled = ingested): \(levels.map(\.0))")
        #expect(Set(levels.map(\.0)).count > 1, "the looks should see the verdict change as crashes accumulate")
    }

    /// The same for each scenario of the issue (steady, a crash regression, a bad build whose attestations are
    /// rejected, Apple throttling): equal counters and the same verdict level at every look, and the scenario's
    /// own reason seen through the pulled counters.
    @Test(arguments: ["steady", "crash-regression", "bad-build", "throttling"])
    func eachScenarioGivesTheSameCountersAndVerdictsAsIngest(_ scenario: String) throws {
        let fleet: ExportFleet
        switch scenario {
        case "crash-regression": fleet = ExportFleet(seed: 61, installations: 1000, minutes: 30, crashBoost: 3)
        case "bad-build": fleet = ExportFleet(seed: 62, installations: 1000, minutes: 30, trouble: .rejected)
        case "throttling": fleet = ExportFleet(seed: 63, installations: 1000, minutes: 30, trouble: .serverUnavailable)
        default: fleet = ExportFleet(seed: 64, installations: 1000, minutes: 30)
        }
        let looks = try Self.sameCountersAndVerdicts(fleet)
        print("\(scenario): verdict levels at each look (pulled = ingested): \(looks.map(\.0))")
        let reasons = looks.map(\.1)
        switch scenario {
        case "crash-regression":
            #expect(looks.contains { $0.0 == .halt && $0.1.contains("exposed users crash more than control") }, "\(reasons)")
        case "bad-build": #expect(looks.contains { $0.0 == .halt && $0.1.contains("attestations rejected for") }, "\(reasons)")
        case "throttling": #expect(reasons.contains { $0.contains("Apple is throttling attestations") }, "\(reasons)")
        default: #expect(!looks.contains { $0.0 == .halt || $0.0 == .watch }, "\(reasons)")
        }
    }

    /// Lands `fleet` through ingest and through a BigQuery pull of the fake, checks the counters (all time, and per
    /// minute at every look every 2 minutes), the crash statistics, the failure monitors and the verdict level at
    /// every look; returns the pulled store's verdict at each look (level, and every finding's text).
    static func sameCountersAndVerdicts(_ fleet: ExportFleet) throws -> [(VerdictLevel, String)] {
        let fake = try FakeFirebase(tls: true)
        try fleet.load(into: fake)
        let ingested = try temporaryStore("bq-ingest")
        try fleet.ingest(into: ingested, now: Self.now)
        let pulledStore = try temporaryStore("bq-pulled")
        let clock = ManualClock(Self.now)
        let source = try FakeBigQuery(fake: fake, clock: clock).source()
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        try pulledStore.commitPull(try source.pull(plan), at: Self.now)

        let a = try ingested.telemetryCounters().allTimeTotals()
        let b = try pulledStore.telemetryCounters().allTimeTotals()
        #expect(try named(a, ingested) == named(b, pulledStore))
        #expect(a.sum(.usersCrashed) > 0 && a.sum(.usersEntered) > 100 && a.sum(.attestationFailure) > 0)
        var looks: [(VerdictLevel, String)] = []
        for minutes in stride(from: Int64(2), through: 40, by: 2) {
            let now = ExportFleet.start + .minutes(minutes)
            let config = WatchConfiguration(since: ExportFleet.start)
            let x = try ingested.telemetryCounters().snapshot(config, now: now)
            let y = try pulledStore.telemetryCounters().snapshot(config, now: now)
            #expect(
                try x.series.map { try named($0.totals, ingested) } == y.series.map { try named($0.totals, pulledStore) },
                "look at +\(minutes) min")
            #expect(x.crash == y.crash, "look at +\(minutes) min")
            #expect(x.failureMonitors == y.failureMonitors, "look at +\(minutes) min")
            let context = RolloutContext(currentMicroPercent: 10_000_000)
            let vx = x.assess(context).verdict
            let vy = y.assess(context).verdict
            #expect(vx.level == vy.level, "look at +\(minutes) min: ingest \(vx) vs pulled \(vy)")
            looks.append((vy.level, vy.findings.map(\.text).joined(separator: " | ")))
        }
        return looks
    }

    /// Pulling again, or overlapping the previous pull, adds nothing; late rows in the overlap are added once.
    @Test func aRepullAddsNothingAndLateRowsCountOnce() throws {
        let fake = try FakeFirebase(tls: true)
        let fleet = ExportFleet(seed: 5, installations: 120, minutes: 20)
        try fleet.load(into: fake)
        let store = try temporaryStore("bq-repull")
        let clock = ManualClock(Self.now)
        let source = try FakeBigQuery(fake: fake, clock: clock).source()
        let first = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        let added = try store.commitPull(try source.pull(first), at: Self.now)
        #expect(!added.isEmpty)
        let before = try store.telemetryCounters().allTimeTotals()
        let batches = try store.telemetryCounters().batches().count

        #expect(try store.commitPull(try source.pull(first), at: Self.now).isEmpty)
        let overlap = PullPlan(now: Self.now + .minutes(1), watermark: first.nextWatermark, origin: source.origin, overlap: .minutes(30))
        #expect(overlap.from < first.nextWatermark)
        #expect(try store.commitPull(try source.pull(overlap), at: Self.now).isEmpty)
        #expect(try store.telemetryCounters().allTimeTotals() == before)
        #expect(try store.telemetryCounters().batches().count == batches)

        // Late rows: a new installation's session in a minute already pulled, inside the overlap.
        #expect(overlap.from < ExportFleet.start + .minutes(15))
        let late = ExportFleet.start + .minutes(15)
        let row: JSONValue = [
            "event_date": .string(ExportFleet.day(late.microseconds)), "event_timestamp": .number(JSONNumber(late.microseconds)),
            "event_name": "session_start", "user_pseudo_id": "late-one", "platform": "IOS",
            "event_params": .array([ExportFleet.param("AppAttestCohort", string: "enabled")]), "user_properties": [],
        ]
        try fake.control("POST", "/_fake/data/rows", ["table": .string("events_intraday_" + ExportFleet.day(late.microseconds)), "rows": [row]])
        let changes = try store.commitPull(try source.pull(overlap), at: Self.now)
        #expect(changes.values.reduce(0, +) == 2, "\(changes)")  // the session and the installation entering
        let after = try store.telemetryCounters().allTimeTotals()
        #expect(after.sum(.session, cohort: .enabled) == before.sum(.session, cohort: .enabled) + 1)
        #expect(after.sum(.usersEntered, cohort: .enabled) == before.sum(.usersEntered, cohort: .enabled) + 1)
    }

    /// With the Crashlytics realtime export configured, its crashes join the GA4 rows in the one query, and it alone
    /// counts them: Crashlytics logs each crash to the linked Analytics property as `app_exception` too, so here
    /// every iOS `app_exception` of the fleet has its Crashlytics row (another installation identifier, the same
    /// time, fatality and cohort key). The counters are those of `ingest --format ga4` of the GA4 rows without
    /// `app_exception` plus `ingest --format crashlytics` of the Crashlytics rows, except that installations enter
    /// a cohort by their GA4 events alone (a Crashlytics identifier is not another user): each crash once, each
    /// crashed installation once, no user twice. (Before, every crash counted twice and every crashed installation
    /// entered its cohort a second time.)
    @Test func theCrashlyticsExportJoinsTheQueryAndAloneCountsCrashes() throws {
        let fake = try FakeFirebase(tls: true)
        let fleet = ExportFleet(seed: 31, installations: 200, minutes: 20)
        try fleet.load(into: fake)
        func string(_ row: JSONValue, _ list: String, _ key: String) -> String? {
            row[list]?.arrayValue?.first { $0["key"]?.stringValue == key }?["value"]?["string_value"]?.stringValue
        }
        let exceptions = fleet.rows.filter { $0["event_name"]?.stringValue == "app_exception" }
        let crashes: [JSONValue] = exceptions.filter { $0["platform"]?.stringValue == "IOS" }.map { r in
            let fatal = r["event_params"]?.arrayValue?.first { $0["key"]?.stringValue == "fatal" }?["value"]?["int_value"]?.numberValue?.int64
            var row: [(String, JSONValue)] = [
                ("event_timestamp", r["event_timestamp"]!), ("installation_uuid", .string("uuid-" + r["user_pseudo_id"]!.stringValue!)),
                ("is_fatal", .bool(fatal != 0)), ("platform", "IOS"), ("issue_id", "issue-1"),
            ]
            if let cohort = string(r, "event_params", "AppAttestCohort") ?? string(r, "user_properties", "AppAttestCohort") {
                row.append(("custom_keys", [["key": "AppAttestCohort", "value": .string(cohort)]]))
            }
            return .object(JSONObject(row))
        }
        #expect(crashes.count > 20)
        try fake.control("POST", "/_fake/data/rows", ["table": "crashlytics", "rows": .array(crashes)])

        let window = EventTimeWindow(now: Self.now, rolloutStart: ExportFleet.start - .hours(1))
        func ingested(_ format: TelemetryFormat, _ rows: [JSONValue], _ label: String) throws -> [String: Int64] {
            let store = try temporaryStore(label)
            let ingest = TelemetryIngest(format: format, window: window)
            Array((rows.map(\.compactText).joined(separator: "\n") + "\n").utf8).withUnsafeBytes { ingest.feed($0) }
            ingest.finish()
            try store.telemetryCounters().commit(ingest.batch, source: "ingest", at: Self.now)
            return try named(store.telemetryCounters().allTimeTotals(), store)
        }
        let analytics = try ingested(.ga4, fleet.rows.filter { $0["event_name"]?.stringValue != "app_exception" }, "bq-ga4-part")
        let crashlytics = try ingested(.crashlytics, crashes, "bq-crash-part")
        var expected = analytics
        for (key, n) in crashlytics where !key.hasPrefix("usersEntered/") { expected[key, default: 0] += n }

        let pulled = try temporaryStore("bq-crash-pulled")
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source(
            crashlytics: "\(fake.project).firebase_crashlytics.com_example_IOS_REALTIME")
        try pulled.commitPull(try source.pull(PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))), at: Self.now)
        let got = try named(pulled.telemetryCounters().allTimeTotals(), pulled)
        #expect(got == expected)
        let crashCount = got.filter { $0.key.hasPrefix("crash/") }.values.reduce(0, +)
        #expect(crashCount == Int64(crashes.count), "each crash once")
        // As many crashed installations as GA4 alone finds, each once; and as many users as GA4 alone has.
        let ga4Alone = try temporaryStore("bq-ga4-alone")
        try fleet.ingest(into: ga4Alone, now: Self.now)
        let alone = try named(ga4Alone.telemetryCounters().allTimeTotals(), ga4Alone)
        func sum(_ totals: [String: Int64], _ prefix: String) -> Int64 { totals.filter { $0.key.hasPrefix(prefix) }.values.reduce(0, +) }
        #expect(sum(got, "usersCrashed/") == sum(alone, "usersCrashed/") && sum(got, "usersCrashed/") > 0)
        #expect(sum(got, "usersEntered/") == sum(analytics, "usersEntered/"))
        #expect(sum(got, "crash/") == sum(alone, "crash/"))
    }

    /// A daily table replaces its day's intraday table: both present count once.
    @Test func aDailyTableReplacesItsIntradayTable() throws {
        let fake = try FakeFirebase(tls: true)
        let fleet = ExportFleet(seed: 9, installations: 60, minutes: 10)
        try fleet.load(into: fake, intraday: true)
        try fleet.load(into: fake, intraday: false)
        let store = try temporaryStore("bq-daily")
        let ingested = try temporaryStore("bq-daily-ingest")
        try fleet.ingest(into: ingested, now: Self.now)
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        try store.commitPull(try source.pull(PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))), at: Self.now)
        #expect(
            try named(store.telemetryCounters().allTimeTotals(), store)
                == named(ingested.telemetryCounters().allTimeTotals(), ingested))
    }

    /// A 429 with Retry-After is waited out (the wait the server named, recorded instead of slept), and so are
    /// 5xx answers; a job that is not complete is polled.
    @Test func rateLimitsAreWaitedOutAndPendingJobsPolled() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 4, installations: 30, minutes: 5).load(into: fake)
        let bq = FakeBigQuery(fake: fake, clock: ManualClock(Self.now))
        let source = try bq.source()
        try fake.fault("rate_limited", match: "bigquery_query", count: 1, seconds: 7)
        try fake.fault("unavailable", match: "bigquery_results", count: 1)
        try fake.control("POST", "/_fake/data/options", ["pending_polls": 1])
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        let pull = try source.pull(plan)
        #expect(pull.rows > 0)
        // Retry-After 7 s, the pending job's first poll 1 s later, the 5xx backoff, the second poll 2 s later.
        #expect(bq.waits.delays.first == .seconds(Int64(7)))
        #expect(bq.waits.delays.count == 4)
        #expect(bq.waits.delays[1] == .seconds(Int64(1)) && bq.waits.delays[3] == .seconds(Int64(2)))
        #expect(try bq.stats()["queries"]?.numberValue?.int64 == 1)
    }

    /// Throttled through every attempt: the pull fails naming the source, nothing is written but the failure,
    /// the source is HOLD once silent for its limit, and it recovers when BigQuery answers again.
    @Test func aSourceThatStaysThrottledFailsWritesNothingAndRecovers() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 4, installations: 30, minutes: 5).load(into: fake)
        let bq = FakeBigQuery(fake: fake, clock: ManualClock(Self.now))
        let source = try bq.source(name: "ga4-export")
        let store = try temporaryStore("bq-throttled")
        try fake.fault("rate_limited", match: "bigquery_query", count: 10, seconds: 2)
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        var failure: SourceError?
        switch Result(catching: { () throws(SourceError) -> SourcePull in try source.pull(plan) }) {
        case .success: break
        case .failure(let e): failure = e
        }
        #expect(failure?.kind == .unavailable && failure?.description.hasPrefix("source ga4-export: ") == true)
        #expect(failure?.message.contains("429") == true, "\(String(describing: failure))")
        #expect(bq.waits.delays == Array(repeating: .seconds(Int64(2)), count: 3))
        try store.recordFailure(ledger: source.ledger.key, message: failure?.message ?? "", at: Self.now)
        #expect(try store.telemetryCounters().allTimeTotals().counts.isEmpty)
        #expect(try store.telemetryCounters().batches().isEmpty)
        let failed = try #require(try store.sourceState(source.ledger.key))
        #expect(failed.watermark == nil && failed.lastError?.contains("429") == true)
        #expect(
            failed.silence(source: "ga4-export", now: Self.now + .minutes(11), silentAfter: .minutes(10))
                == "source ga4-export has not answered yet: \(failure?.message ?? "")")

        // BigQuery answers again: the pull lands, the error is cleared, the source is no longer silent.
        try fake.clearFaults()
        try store.commitPull(try source.pull(plan), at: Self.now + .minutes(12))
        let recovered = try #require(try store.sourceState(source.ledger.key))
        #expect(recovered.lastError == nil && recovered.watermark == plan.nextWatermark)
        #expect(recovered.silence(source: "ga4-export", now: Self.now + .minutes(13), silentAfter: .minutes(10)) == nil)
        #expect(!(try store.telemetryCounters().allTimeTotals().counts.isEmpty))
    }

    /// A page token that leads back to a page already read is a bad answer: the pull fails and the store is
    /// untouched.
    @Test func aDuplicatedPageIsABadAnswer() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 8, installations: 80, minutes: 10).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["duplicate_page": true])
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        #expect {
            try source.pull(plan)
        } throws: { error in
            guard let e = error as? SourceError else { return false }
            return e.kind == .badAnswer && (e.message.contains("pageToken") || e.message.contains("totalRows"))
        }
    }

    /// The pull's failure, or nil when it landed.
    static func failure(_ source: BigQuerySource, _ plan: PullPlan) -> SourceError? {
        switch Result(catching: { () throws(SourceError) -> SourcePull in try source.pull(plan) }) {
        case .success: nil
        case .failure(let e): e
        }
    }

    /// Pages that hold no row but each name a new next page (the tester's fake paged without end): the first
    /// empty page that names another is a bad answer naming pageToken, and nothing more is asked.
    @Test func anEmptyPageThatNamesAnotherIsABadAnswer() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 8, installations: 80, minutes: 10).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["page_rows": 5, "empty_pages": 200])
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        let e = try #require(Self.failure(source, plan))
        #expect(e.kind == .badAnswer && e.message.contains("pageToken"), "\(e)")
        #expect(try fake.control("GET", "/_fake/data/stats")["pages"]?.numberValue?.int64 ?? 0 <= 3)
    }

    /// An answer whose pages are each far below the limit but hold more than 32 MiB together (120 hours of the
    /// benchmark's aggregation, about 300,000 rows) is refused as the page that crosses the limit arrives: a bad
    /// answer naming the limit and the earlier pages, not a pull that holds every page first. What was received
    /// stays within the limit, and the pages after the refused one are never asked for. (A source's own pulls ask
    /// for 6 hours at most, `PullPlan.longest`: this plan asks for the 120 hours at once, as a busier export's
    /// 6 hours could weigh.)
    @Test func anAnswerLargerThan32MiBInAllItsPagesIsRefusedAsItArrives() throws {
        let fake = try FakeFirebase(tls: true)
        try fake.control("POST", "/_fake/data/options", ["synthetic_per_minute": 10_000_000])
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source(origin: Self.now - .hours(120))
        source.client.pageRows = 10_000
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10), longest: 121 * 60)
        let e = try #require(Self.failure(source, plan))
        #expect(e.kind == .badAnswer, "\(e)")
        // The fake compresses its answers: the page is refused once inflated.
        #expect(
            e.message.hasPrefix("BigQuery jobs.getQueryResults: the answer is larger than ")
                && e.message.contains(
                    " once inflated, what is left of the 32 MiB a query's answers may hold after its "),
            "\(e)")
        #expect(source.client.call.bytesReceived <= SourceCaller.maximumAnswerBytes)
        #expect(
            source.client.call.bytesReceived > SourceCaller.maximumAnswerBytes - (4 << 20),
            "every page but the last was read")
        let stats = try fake.control("GET", "/_fake/data/stats")
        let served = stats["rows_served"]?.numberValue?.int64 ?? 0
        #expect(served < 300_000 && served > 200_000, "\(stats)")
    }

    /// Rows are checked as each page arrives: a row `ingest` would refuse (a cohort that is not enabled, control or
    /// none) on the first page fails the pull there, naming the row, and no later page is asked for.
    @Test func aBadRowFailsThePullAtItsPage() throws {
        let fake = try FakeFirebase(tls: true)
        var fleet = ExportFleet(seed: 8, installations: 80, minutes: 10)
        let t = ExportFleet.start.microseconds
        fleet.rows.append(
            [
                "event_date": .string(ExportFleet.day(t)), "event_timestamp": .number(JSONNumber(t)),
                "event_name": "session_start", "user_pseudo_id": "pseudo-beta", "platform": "IOS",
                "event_params": [ExportFleet.param("AppAttestCohort", string: "beta")], "user_properties": [],
            ])
        try fleet.load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["page_rows": 2])
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        let e = try #require(Self.failure(source, plan))
        #expect(e.kind == .badAnswer && e.message.hasPrefix("row 0: cohort: 'beta' is not enabled"), "\(e)")
        #expect(try fake.control("GET", "/_fake/data/stats")["pages"]?.numberValue?.int64 == 1)
    }

    /// Pages past `maximumPages`, and pages still coming when the pull's deadline has passed, fail the pull
    /// naming pageToken.
    @Test func pagingStopsAtThePageBoundAndTheDeadline() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 8, installations: 80, minutes: 10).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["page_rows": 5])
        let plan = PullPlan(now: Self.now, watermark: nil, origin: ExportFleet.start - .minutes(5), overlap: .minutes(10))

        let bounded = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        bounded.client.maximumPages = 3
        let e = try #require(Self.failure(bounded, plan))
        #expect(e.kind == .badAnswer && e.message.contains("pageToken") && e.message.contains("3"), "\(e)")

        // A one-minute deadline; the second page is throttled three times for 30 s: read past the deadline.
        let slow = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now), waitsMoveTheClock: true).source()
        slow.client.deadline = .minutes(1)
        try fake.fault("rate_limited", match: "bigquery_results", count: 3, seconds: 30)
        let late = try #require(Self.failure(slow, plan))
        #expect(late.kind == .unavailable && late.message.contains("pageToken"), "\(late)")
    }

    /// A server that answers `jobComplete: false` at once is not asked again at once: 1 s, then 2, 4, 8, 16 s
    /// between polls (waited through the source's sleeper, recorded here), and a job that never completes stops
    /// at the deadline after a bounded number of polls.
    @Test func aPendingJobIsPolledWithGrowingWaitsUntilTheDeadline() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 4, installations: 30, minutes: 5).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["pending_polls": 4])
        let bq = FakeBigQuery(fake: fake, clock: ManualClock(Self.now))
        let plan = PullPlan(now: Self.now, watermark: nil, origin: ExportFleet.start - .minutes(5), overlap: .minutes(10))
        #expect(try bq.source().pull(plan).rows > 0)
        #expect(bq.waits.delays == [1, 2, 4, 8, 16].map { Instant.Duration.seconds(Int64($0)) })

        try fake.control("POST", "/_fake/data/options", ["pending_polls": -1])
        let never = FakeBigQuery(fake: fake, clock: ManualClock(Self.now), waitsMoveTheClock: true)
        let before = try fake.control("GET", "/_fake/data/stats")["results"]?.numberValue?.int64 ?? 0
        let e = try #require(Self.failure(try never.source(), plan))
        #expect(e.kind == .unavailable && e.message.contains("did not complete"), "\(e)")
        let polls = (try fake.control("GET", "/_fake/data/stats")["results"]?.numberValue?.int64 ?? 0) - before
        // 1 + 2 + 4 + 8 + 16 s, then every 30 s to 300 s: about 15 polls, not thousands.
        #expect(polls > 5 && polls < 20, "\(polls) polls")
    }

    /// A job that reports `errors` while it still runs fails the pull with BigQuery's message.
    @Test func errorsOfARunningJobFailThePull() throws {
        let fake = try FakeFirebase(tls: true)
        try ExportFleet(seed: 4, installations: 30, minutes: 5).load(into: fake)
        try fake.control("POST", "/_fake/data/options", ["pending_polls": 1, "pending_errors": true])
        let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
        let plan = PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10))
        let e = try #require(Self.failure(source, plan))
        #expect(e.kind == .refused && e.message.contains("Division by zero"), "\(e)")
    }

    /// Counts past `PullLedger.maximumCount` (10^12), in one row or summed over two spellings of one key, are a bad
    /// answer naming n, never an overflow that traps the process.
    @Test func aCountPastTheBoundIsABadAnswer() {
        let plan = PullPlan(now: Self.now, watermark: nil, origin: ExportFleet.start, overlap: .minutes(10))
        let minute = String(plan.fromMinute)
        func rows(_ rows: [[String?]]) -> SourceError? {
            do {
                _ = try ExportAggregation.counts(QueryResult(columns: ExportAggregation.columns, rows: rows), plan: plan, source: "bq")
                return nil
            } catch { return error }
        }
        let max = String(Int64.max)
        let one = rows([[minute, "enabled", "attestationSuccess", "appAttest", "", max]])
        #expect(one?.kind == .badAnswer && one?.message.hasPrefix("row 0: n \(max) is more than") == true, "\(String(describing: one))")
        for n in [max, "600000000000"] {
            let two = rows([
                [minute, "enabled", "attestationSuccess", "appAttest", "", n],
                [minute, "enabled", "attestationSuccess", "app_attest", "", n],
            ])
            #expect(two?.kind == .badAnswer && two?.message.hasPrefix("row ") == true && two?.message.contains(": n") == true, "\(String(describing: two))")
        }
        let fine = rows([[minute, "enabled", "attestationSuccess", "appAttest", "", "1000000000000"]])
        #expect(fine == nil)
    }

    /// What is pulled grows with minutes × cohorts × kinds, not with events: ten times the events over the
    /// same minutes pull about as many rows.
    @Test func rowsPulledGrowWithMinutesAndCohortsNotEvents() throws {
        var figures: [(events: Int, rows: Int, bytes: Int)] = []
        for perInstallation in [4, 40] {
            let fake = try FakeFirebase(tls: true)
            let fleet = ExportFleet(seed: 21, installations: 300, minutes: 10, eventsPerInstallation: perInstallation)
            try fleet.load(into: fake)
            let source = try FakeBigQuery(fake: fake, clock: ManualClock(Self.now)).source()
            let pull = try source.pull(PullPlan(now: Self.now, watermark: nil, origin: source.origin, overlap: .minutes(10)))
            figures.append((fleet.events, pull.rows, pull.bytes))
        }
        print("BigQuery pull: \(figures.map { "\($0.events) events -> \($0.rows) rows, \($0.bytes) bytes" }.joined(separator: "; "))")
        #expect(figures[1].events > 9 * figures[0].events)
        // Bounded by minutes (16 pulled) × 3 cohorts × the kinds and details: far below the events.
        #expect(figures[1].rows < 2 * figures[0].rows)
        #expect(figures[1].rows <= 16 * 3 * 20)
    }
}

/// Counters keyed by what they count in words: a rejection's reason by its text, since each store numbers
/// reasons in the order it first saw them.
func named(_ totals: CounterTotals, _ store: RolloutStore) throws -> [String: Int64] {
    let counters = try store.telemetryCounters()
    var out: [String: Int64] = [:]
    for (k, v) in totals.counts where v != 0 {
        var name = "\(k.kind)/\(k.cohort)/\(k.provider)"
        if k.kind == .attestationFailure { name += "/" + (try counters.describe(FailureDetail(code: k.detail))) }
        if k.kind == .crash { name += k.detail == 1 ? "/fatal" : "/nonfatal" }
        out[name, default: 0] += v
    }
    return out
}
