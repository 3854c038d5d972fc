import FirebaseFake
import Foundation
import GoogleDataSources
import RolloutApp
import SQLiteStore
import TelemetrySources
import TestSupport
import Testing
import Timekeeping

/// Two sources over some of the same events, configured before `source add` refused such a pair (an upgraded
/// store): found by an explorer, both pulled, so the events they share counted twice for good (a Crashlytics table
/// read by two BigQuery sources), or, sharing one ledger in two shapes (an export and the realtime report), each
/// pull took back the other's rows. Only the first by name pulls now; the second says why, in its report and, over
/// a ledger of its own, in its state.
@Suite("overlapping pairs", .serialized)
struct OverlappingPairTests {
    @Test func ofAPairOverTheSameEventsOnlyTheFirstByNamePulls() throws {
        let fake = try FakeFirebase(tls: true)
        let clock = SystemClock()
        let start = clock.now() - .minutes(25)
        try ExportFleet(seed: 43, installations: 120, minutes: 20, start: start).load(into: fake)
        let dir = try TestSupport.temporaryDirectory("overlapping-pair")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-pair", operatorID: "alice@test", clock: clock)
        let table = "\(fake.project).firebase_crashlytics.com_example_IOS_REALTIME"
        let pair = [
            try SourceConfiguration(
                name: "bq", project: fake.project, analytics: "\(fake.project).analytics_123456", crashlytics: table,
                credentials: .serviceAccountFile(fake.keyFile), origin: start - .minutes(5)),
            try SourceConfiguration(
                name: "bq2", project: fake.project, analytics: "\(fake.project).analytics_654321", crashlytics: table,
                credentials: .serviceAccountFile(fake.keyFile), origin: start - .minutes(5)),
        ]
        #expect(pair[1].overlap(configured: [pair[0]], ledgers: []) != nil, "source add refuses this pair")
        // Stored as an older rollout's `source add` did (in a transaction of the store, which seals it).
        let store = try RolloutStore(path: path)
        try store.withDatabase { db in try db.transaction { for c in pair { try SourceConfigTable.save(c, in: db) } } }

        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let sources = session.sources(environment: ["ROLLOUT_BIGQUERY_URL": fake.origin, "CURL_CA_BUNDLE": fake.caFile])
        let reports = try sources.pull(try sources.due(all: true))
        let first = try #require(reports.first { $0.source == "bq" })
        let second = try #require(reports.first { $0.source == "bq2" })
        #expect(first.error == nil && first.addedEvents > 0, "\(String(describing: first.error))")
        let refusal = try #require(second.error?.message)
        #expect(refusal.contains("not pulled") && refusal.contains("which source bq reads too"), "\(refusal)")
        #expect(second.rows == nil && second.addedEvents == 0)
        #expect(try sources.state("bq2")?.lastError?.contains("not pulled") == true)
        #expect(try sources.state("bq")?.lastError == nil)
    }
}
