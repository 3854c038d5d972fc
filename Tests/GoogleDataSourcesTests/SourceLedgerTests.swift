import Telemetry
import TelemetrySources
import Testing
import Timekeeping

/// What a source's ledger is kept under (the events it reads), which events overlap, and the rule `source add`
/// applies (`SourceConfiguration.overlap`): pure, without a store.
@Suite("Source ledgers and overlaps")
struct SourceLedgerTests {
    let origin = Instant(seconds: 1_780_000_000)

    func bigQuery(_ name: String, _ analytics: String, crashlytics: String? = nil, since: Instant? = nil) throws -> SourceConfiguration {
        try SourceConfiguration(
            name: name, project: "runner", analytics: analytics, crashlytics: crashlytics, origin: since ?? origin)
    }

    func realtime(_ name: String, _ property: String) throws -> SourceConfiguration {
        try SourceConfiguration(name: name, kind: .analyticsRealtime, project: "quota", analytics: "", property: property, origin: origin)
    }

    func crashes(_ name: String, project: String, app: String, since: Instant? = nil) throws -> SourceConfiguration {
        try SourceConfiguration(name: name, kind: .crashlyticsAPI, project: project, analytics: "", app: app, origin: since ?? origin)
    }

    @Test func aLedgerIsTheEventsNotTheNameNorTheProjectThatRunsTheQueries() throws {
        // The GA4 export of property 123456, whichever project holds it and runs the queries, and the property's
        // realtime report: one ledger.
        let a = try bigQuery("a", "prod.analytics_123456").ledger
        let b = try bigQuery("b", "copy.analytics_123456", crashlytics: "prod.firebase_crashlytics.com_x_IOS_REALTIME").ledger
        let rt = try realtime("rt", "123456").ledger
        #expect(a.key == "ga4-property:123456" && b.key == a.key && rt.key == a.key)
        #expect(SourceLedger.analyticsRealtime(property: "properties/123456") == rt)
        #expect(b.events == [.analyticsProperty("123456"), .crashlyticsExport("prod.firebase_crashlytics.com_x_IOS_REALTIME")])
        // Leading zeros say nothing: a dataset spelled with them is the property's, and a realtime property number
        // with them is refused (found by an explorer: `--ga4-property 01` beside `--ga4-property 1` counted twice).
        #expect(try bigQuery("z", "prod.analytics_000123456").ledger.key == "ga4-property:123456")
        #expect(throws: SourceConfigurationError.self) { try realtime("rt0", "0123456") }
        #expect(try bigQuery("z0", "prod.analytics_000").ledger.key == "ga4-export:prod.analytics_000")
        // A dataset whose name does not say its property is its own.
        #expect(try bigQuery("c", "prod.ga4_copy").ledger.key == "ga4-export:prod.ga4_copy")
        #expect(try bigQuery("d", "prod.analytics_12x").ledger.key == "ga4-export:prod.analytics_12x")
        // An app's crashes are the app's, whatever project the calls name.
        let app = "1:123456789012:ios:0123456789abcdef"
        #expect(try crashes("x", project: "prod", app: app).ledger.key == "crashlytics-app:" + app)
        #expect(try crashes("y", project: "123456789012", app: app).ledger.key == "crashlytics-app:" + app)
        for e in b.events + (try crashes("x", project: "prod", app: app).ledger.events) {
            #expect(SourceEvents(text: e.text) == e, "\(e.text)")
        }
        #expect(SourceEvents(text: "ga4-property:") == nil && SourceEvents(text: "other:1") == nil)
        #expect(SourceEvents(text: "crashlytics-app:prod") == nil)
    }

    @Test func aCrashlyticsTableAndAnAppOfTheSameProjectOverlap() {
        let table = SourceEvents.crashlyticsExport("prod.firebase_crashlytics.com_x_IOS_REALTIME")
        #expect(table.overlaps(.crashlyticsApp(project: "prod", app: "1:1:ios:a")))
        #expect(SourceEvents.crashlyticsApp(project: "prod", app: "1:1:ios:a").overlaps(table))
        #expect(!table.overlaps(.crashlyticsApp(project: "staging", app: "1:2:ios:a")))
        #expect(!table.overlaps(.crashlyticsExport("prod.firebase_crashlytics.com_y_IOS_REALTIME")))
        #expect(SourceEvents.crashlyticsApp(project: "prod", app: "1:1:ios:a").overlaps(.crashlyticsApp(project: "1", app: "1:1:ios:a")))
        #expect(!SourceEvents.crashlyticsApp(project: "prod", app: "1:1:ios:a").overlaps(.crashlyticsApp(project: "prod", app: "1:1:ios:b")))
        #expect(!SourceEvents.analyticsProperty("1").overlaps(.analyticsProperty("2")))
        #expect(!SourceEvents.analyticsProperty("1").overlaps(.analyticsExport("prod.analytics_1")))
    }

    @Test func aSourceOverEventsAnotherConfiguredSourceCountsIsRefused() throws {
        let bq = try bigQuery("bq", "prod.analytics_1", crashlytics: "prod.firebase_crashlytics.t")
        let configured = [bq]
        for (candidate, ours, theirs) in [
            (try bigQuery("bq2", "other.analytics_1"), SourceEvents.analyticsProperty("1"), SourceEvents.analyticsProperty("1")),
            (try realtime("rt", "1"), .analyticsProperty("1"), .analyticsProperty("1")),
            (
                try crashes("crashes", project: "prod", app: "1:1:ios:a"), .crashlyticsApp(project: "prod", app: "1:1:ios:a"),
                .crashlyticsExport("prod.firebase_crashlytics.t")
            ),
            (try bigQuery("bq3", "prod.analytics_2", crashlytics: "prod.firebase_crashlytics.t"), .crashlyticsExport("prod.firebase_crashlytics.t"), .crashlyticsExport("prod.firebase_crashlytics.t")),
        ] {
            let found = candidate.overlap(configured: configured, ledgers: [])
            #expect(found == .configured(source: candidate.name, other: "bq", ours: ours, theirs: theirs), "\(candidate.name)")
            #expect("\(found!)".contains("which source bq already counts") && "\(found!)".contains("nothing was stored"))
        }
        // Other events, and the source itself redefined, are not overlaps.
        #expect(try bigQuery("bq2", "prod.analytics_2").overlap(configured: configured, ledgers: []) == nil)
        #expect(try crashes("c", project: "staging", app: "1:2:ios:a").overlap(configured: configured, ledgers: []) == nil)
        #expect(try bigQuery("bq", "prod.analytics_1").overlap(configured: configured, ledgers: []) == nil)
    }

    @Test func eventsAnotherLedgerLandedAreCountedOnlyFromWhereItStopped() throws {
        let through = BucketLevel.minute.bucket((origin + .hours(2)).microseconds) + 1
        let end = BucketLevel.minute.start(through)
        let app = "1:1:ios:a"
        // A removed Crashlytics API source landed the app's crashes up to `end`.
        let api = SourceLedgerRecord(
            key: "crashlytics-app:" + app, watermark: end - .minutes(1), reads: [.crashlyticsApp(project: "prod", app: app): through])
        let table = "prod.firebase_crashlytics.t"
        // bq's own ledger, pulled up to an hour before.
        let own = SourceLedgerRecord(
            key: "ga4-property:1", watermark: origin + .hours(1), reads: [.analyticsProperty("1"): through - 60])
        let early = try bigQuery("bq", "prod.analytics_1", crashlytics: table)
        #expect(
            early.overlap(configured: [], ledgers: [api, own])
                == .landed(source: "bq", ledger: api.key, ours: .crashlyticsExport(table), theirs: api.reads.keys.first!, through: end))
        #expect("\(early.overlap(configured: [], ledgers: [api, own])!)".contains("--since \(end.iso8601) or later"))
        // From where the API source stopped (or later): nothing is counted twice.
        #expect(try bigQuery("bq", "prod.analytics_1", crashlytics: table, since: end).overlap(configured: [], ledgers: [api, own]) == nil)
        // Its own ledger pulled past that end, less the overlap: its next pull starts after it.
        let ahead = SourceLedgerRecord(key: own.key, watermark: end + .minutes(10), reads: own.reads)
        #expect(early.overlap(configured: [], ledgers: [api, ahead]) == nil)
        // Without the table, bq reads nothing the API source landed; the API source added again continues its own.
        #expect(try bigQuery("bq", "prod.analytics_1").overlap(configured: [], ledgers: [api, own]) == nil)
        #expect(try crashes("crashes", project: "prod", app: app).overlap(configured: [], ledgers: [api, own]) == nil)
        // The other way: the API after a table that bq's ledger read up to `end`.
        let withTable = SourceLedgerRecord(key: own.key, watermark: end, reads: [.analyticsProperty("1"): through, .crashlyticsExport(table): through])
        let found = try crashes("crashes", project: "prod", app: app).overlap(configured: [], ledgers: [withTable])
        #expect(
            found
                == .landed(
                    source: "crashes", ledger: own.key, ours: .crashlyticsApp(project: "prod", app: app),
                    theirs: .crashlyticsExport(table), through: end))
    }

    @Test func theEventsReadAreStoredAsTextAndKeepTheLaterEnd() {
        let ledger = SourceLedger.bigQuery(analytics: "p.analytics_7", crashlytics: "p.d.t")
        let reads = SourceLedgerRecord.reads([.analyticsProperty("7"): 50, .crashlyticsApp(project: "p", app: "1:2:ios:3"): 9], adding: ledger, through: 40)
        #expect(reads == [.analyticsProperty("7"): 50, .crashlyticsExport("p.d.t"): 40, .crashlyticsApp(project: "p", app: "1:2:ios:3"): 9])
        let text = SourceLedgerRecord.readsText(reads)
        #expect(text == "crashlytics-app:p/1:2:ios:3=9 crashlytics-export:p.d.t=40 ga4-property:7=50")
        #expect(SourceLedgerRecord.reads(text) == reads)
        #expect(SourceLedgerRecord.reads("nonsense ga4-property:7=x ga4-property:8=3") == [.analyticsProperty("8"): 3])
        #expect(SourceLedgerRecord.reads(nil).isEmpty)
    }
}
