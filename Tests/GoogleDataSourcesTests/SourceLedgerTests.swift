import Telemetry
import TelemetrySources
import Testing
import Timekeeping

/// What a source's ledger is kept under (the events it reads) and how the events it read are stored: pure,
/// without a store.
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
