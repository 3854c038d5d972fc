import FirebaseFake
import Foundation
import GoogleDataSources
import JSON
import SQLiteStore
import Telemetry
import TelemetryIngest
import TelemetrySources
import TestSupport
import Timekeeping
import WebClient

/// A simulated fleet's events as rows of the GA4 BigQuery export (the schema `ingest --format ga4` reads):
/// sessions, attestation successes and failures (by class name, by DCError code, and rejections with a
/// reason), fatal and non-fatal `app_exception`s and config fetches, for installations in the three cohorts
/// (the cohort as an event parameter or only as a user property), a few rows of other platforms and events.
struct ExportFleet {
    var rows: [JSONValue] = []
    /// (table, rows) as the export lays them out: one table per UTC day, intraday until the daily one exists.
    var events: Int { rows.count }

    static let start = Instant(seconds: 1_780_000_020)

    /// What goes wrong for the exposed arm, beyond `crashBoost`: nothing, or most of its App Attest attempts fail
    /// with one class (a bad build's rejections, Apple's throttling).
    enum Trouble: String, CaseIterable, Sendable {
        case none, rejected, serverUnavailable
    }

    /// `installations` devices over `minutes` minutes; `crashBoost` multiplies the exposed arm's crash chance;
    /// `trouble` makes 70% of the exposed arm's attestation events failures of its class.
    init(
        seed: UInt64, installations: Int, minutes: Int, crashBoost: Double = 1, eventsPerInstallation: Int = 6,
        start: Instant = ExportFleet.start, cohortAsProperty: Bool = false, trouble: Trouble = .none
    ) {
        var random = SplitMix64(state: seed)
        func chance(_ p: Double) -> Bool { Double(random.next() % 1_000_000) / 1_000_000 < p }
        for i in 0..<installations {
            let id = "pseudo-\(seed)-\(i)"
            let cohortText = ["enabled", "control", "none", "Exposed", "control", "none"][random.below(6)]
            let exposed = cohortText.lowercased() != "control" && cohortText.lowercased() != "none"
            let asProperty = cohortAsProperty || random.below(5) == 0
            for _ in 0..<eventsPerInstallation {
                let t = start.microseconds + Int64(random.below(minutes * 60_000)) * 1000 + Int64(random.below(1000))
                var params: [JSONValue] = []
                var properties: [JSONValue] = []
                if asProperty { properties.append(Self.param("AppAttestCohort", string: cohortText)) } else {
                    params.append(Self.param("AppAttestCohort", string: cohortText))
                }
                let name: String
                let pick = random.below(10)
                if trouble != .none, exposed, (3...5).contains(pick), chance(0.7) {
                    name = "AppAttestFailure"
                    params.append(Self.param("provider", string: "appAttest"))
                    params.append(Self.param("error_class", string: trouble.rawValue))
                    if trouble == .rejected { params.append(Self.param("reason", string: "nonceMismatch")) }
                } else {
                    switch pick {
                    case 0, 1, 2: name = "session_start"
                    case 3, 4:
                        name = "AppAttestSuccess"
                        params.append(Self.param("provider", string: random.below(4) == 0 ? "deviceCheck" : "appAttest"))
                    case 5:
                        name = "AppAttestFailure"
                        params.append(Self.param("provider", string: "appAttest"))
                        switch random.below(3) {
                        case 0: params.append(Self.param("error_class", string: "serverUnavailable"))
                        case 1: params.append(Self.param("error_code", int: Int64(random.below(5))))
                        default:
                            params.append(Self.param("error_class", string: "rejected"))
                            params.append(Self.param("reason", string: ["nonceMismatch", "counterReplay"][random.below(2)]))
                        }
                    case 6:
                        guard chance(exposed ? min(1, 0.3 * crashBoost) : 0.3) else { continue }
                        name = "app_exception"
                        params.append(Self.param("fatal", int: random.below(4) == 0 ? 0 : 1))
                    case 7:
                        name = "AppAttestConfigFetch"
                        params.append(Self.param("template_version", int: Int64(7 + random.below(2))))
                    case 8: name = "screen_view"
                    default: name = "session_start"
                    }
                }
                rows.append(
                    [
                        "event_date": .string(Self.day(t)), "event_timestamp": .number(JSONNumber(t)),
                        "event_name": .string(name), "user_pseudo_id": .string(id),
                        "platform": .string(random.below(40) == 0 ? "ANDROID" : "IOS"),
                        "event_params": .array(params), "user_properties": .array(properties),
                        "device": ["operating_system_version": "iOS 17.4"], "app_info": ["version": "3.2.1"],
                    ])
            }
        }
    }

    static func param(_ key: String, string: String) -> JSONValue {
        ["key": .string(key), "value": ["string_value": .string(string)]]
    }

    static func param(_ key: String, int: Int64) -> JSONValue {
        ["key": .string(key), "value": ["int_value": .number(JSONNumber(int))]]
    }

    static func day(_ t: Int64) -> String {
        let (y, m, d) = ISO8601.civil(fromDays: BucketLevel.day.bucket(t))
        return String(format: "%04lld%02lld%02lld", y, m, d)
    }

    var ndjson: String { rows.map(\.compactText).joined(separator: "\n") + "\n" }

    /// Lands the rows through `rollout ingest --format ga4`'s reader and the store's commit.
    func ingest(into store: RolloutStore, now: Instant, since: Instant = ExportFleet.start - .hours(1)) throws -> BatchReceipt? {
        let ingest = TelemetryIngest(format: .ga4, window: EventTimeWindow(now: now, rolloutStart: since))
        Array(ndjson.utf8).withUnsafeBytes { ingest.feed($0) }
        ingest.finish()
        guard ingest.problems.isEmpty else { throw TestSupport.Failure("ingest: \(ingest.problems)") }
        return try store.telemetryCounters().commit(ingest.batch, source: "ingest", at: now)
    }

    /// Loads the rows into the fake's export tables: `intraday` days as `events_intraday_*`, others daily.
    func load(into fake: FakeFirebase, intraday: Bool = true) throws {
        var byTable: [String: [JSONValue]] = [:]
        for r in rows {
            byTable[(intraday ? "events_intraday_" : "events_") + r["event_date"]!.stringValue!, default: []].append(r)
        }
        for (table, rows) in byTable {
            try fake.control("POST", "/_fake/data/rows", ["table": .string(table), "rows": .array(rows)])
        }
    }
}

/// A BigQuery source on the fake, with its back-off waits recorded instead of slept.
final class FakeBigQuery {
    let fake: FakeFirebase
    let waits = DelayRecorder()
    let clock: ManualClock
    /// Whether a wait moves the clock by its length (as a real sleep moves the wall clock) besides being recorded.
    let waitsMoveTheClock: Bool

    init(fake: FakeFirebase, clock: ManualClock, waitsMoveTheClock: Bool = false) {
        self.fake = fake
        self.clock = clock
        self.waitsMoveTheClock = waitsMoveTheClock
    }

    func source(name: String = "bq", origin: Instant = ExportFleet.start - .minutes(5), crashlytics: String? = nil) throws
        -> BigQuerySource
    {
        let transport = fake.transport
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: transport, clock: SystemClock(),
            scope: BigQueryClient.scope)
        let recorder = waits
        let clock = clock
        let moves = waitsMoveTheClock
        let call = SourceCaller(
            source: name, project: fake.project, tokens: tokens, transport: transport, clock: clock,
            backoff: SourceBackoff(attempts: 4, base: .milliseconds(10), cap: .seconds(Int64(30))),
            timeout: .seconds(Int64(20)),
            sleep: {
                recorder.record($0)
                if moves { clock.advance(by: $0) }
            })
        let client = BigQueryClient(origin: fake.origin, project: fake.project, call: call, clock: clock)
        client.pageRows = 50
        return BigQuerySource(
            name: name,
            tables: try ExportTables(
                project: fake.project, analytics: "\(fake.project).analytics_123456", crashlytics: crashlytics),
            client: client, origin: origin)
    }

    func stats() throws -> JSONValue { try fake.control("GET", "/_fake/data/stats") }
}

func temporaryStore(_ label: String) throws -> RolloutStore {
    let dir = try TestSupport.temporaryDirectory(label)
    return try RolloutStore(path: dir.appendingPathComponent("store.db").path)
}
