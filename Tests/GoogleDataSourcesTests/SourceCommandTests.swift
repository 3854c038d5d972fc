import FirebaseFake
import Foundation
import JSON
import Telemetry
import TestSupport
import Testing
import Timekeeping

/// `rollout source …` and `rollout follow` with the built binary against the fake over HTTPS.
@Suite("source commands", .serialized)
struct SourceCommandTests {
    struct CLI {
        let fake: FakeFirebase
        let dir: URL
        var environment: [String: String] {
            [
                "ROLLOUT_OPERATOR": "ana@example.com", "NO_COLOR": "1", "HOME": dir.path,
                "XDG_STATE_HOME": dir.appendingPathComponent("xdg").path, "ROLLOUT_BIGQUERY_URL": fake.origin,
                "CURL_CA_BUNDLE": fake.caFile, "SSL_CERT_FILE": fake.caFile, "ROLLOUT_ANALYTICS_URL": fake.origin,
                "ROLLOUT_CRASHLYTICS_URL": fake.origin,
            ]
        }

        func run(_ store: String, _ arguments: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run(try TestSupport.rolloutBinary(), arguments + ["--store", store], environment: environment)
        }
    }

    /// The same fleet through `rollout ingest --format ga4` and through `source add` + `follow --looks 1` gives the
    /// same counters in `telemetry --json`; a second `follow` adds nothing; `--read-only` refuses `source add` with
    /// 4 and writes nothing; a failing source is HOLD naming it. On a store file and on a PostgreSQL team store.
    @Test(arguments: ["file", "postgresql"]) func followPullsWhatIngestReads(_ backend: String) throws {
        let fake = try FakeFirebase(tls: true)
        let dir = try TestSupport.temporaryDirectory("source-cli")
        let cli = CLI(fake: fake, dir: dir)
        let begun = Date()
        let start = Instant(seconds: Int64(begun.timeIntervalSince1970) - 40 * 60)
        let fleet = ExportFleet(seed: 17, installations: 200, minutes: 30, start: start)
        try fleet.load(into: fake)
        let file = dir.appendingPathComponent("export.ndjson").path
        try fleet.ndjson.write(toFile: file, atomically: true, encoding: .utf8)

        func store(_ name: String) throws -> String {
            guard backend == "postgresql" else { return dir.appendingPathComponent("\(name).db").path }
            let server = try PostgresServer.get()
            return server.uris(of: try server.freshDatabase()).socket
        }
        let ingested = try store("ingested")
        let pulled = try store("pulled")
        for store in [ingested, pulled] { #expect(try cli.run(store, ["init", "--seed", "s"]).status == 0) }
        let i = try cli.run(ingested, ["ingest", file, "--format", "ga4", "--quiet"])
        #expect(i.status == 0, "\(i.stderr)")

        let add = [
            "source", "add", "bq", "--bigquery", fake.project, "--analytics", "\(fake.project).analytics_123456",
            "--source-credentials", fake.keyFile, "--since", (start - .minutes(5)).iso8601,
        ]
        let refused = try cli.run(pulled, add + ["--read-only"])
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(try cli.run(pulled, ["source", "list", "--json"]).stdout.contains("\"bq\"") == false)
        let added = try cli.run(pulled, add)
        #expect(added.status == 0, "\(added.stderr)")
        let tested = try cli.run(pulled, ["source", "test", "bq"])
        #expect(tested.status == 0 && tested.stdout.contains("rows in"), "\(tested.stdout) \(tested.stderr)")

        let follow = try cli.run(pulled, ["follow", "--looks", "1", "--interval", "0.01"])
        #expect([0, 5, 6, 7].contains(follow.status), "\(follow.stdout) \(follow.stderr)")
        #expect(follow.stdout.contains("source bq: "), "\(follow.stdout)")
        // The fleet's newest minute ended about 10 minutes ago: the data's age is shown.
        // `source list` says how old the newest landed minute is, in the source's terms (BigQuery: the export's lag).
        // Both ages grow with the seconds this test has taken so far (many processes on a loaded machine).
        let listed = try cli.run(pulled, ["source", "list"])
        let age = try JSONParser().parse(try cli.run(pulled, ["source", "list", "--json"]).stdout).arrayValue?.first?["dataAgeSeconds"]
        // Without delay the age lies within 540...660 s ("9 min" or "10 min"); each second taken since adds one.
        let late = Int64(Date().timeIntervalSince(begun)) + 1
        let minutes = (9...((660 + late) / 60)).map { "\($0) min" }
        #expect(minutes.contains { follow.stdout.contains("newest data \($0) old") }, "\(follow.stdout)")
        #expect(minutes.contains { listed.stdout.contains("export lag \($0)") }, "\(listed.stdout)")
        #expect((540...(660 + late)).contains(age?.numberValue?.int64 ?? 0), "\(String(describing: age))")
        // What the figures say with the rollout started before the fleet (a hypothetical start, the same on both).
        func counts(_ store: String) throws -> [JSONValue?] {
            let t = try cli.run(store, ["telemetry", "--json", "--since", (start - .minutes(1)).iso8601, "--percent", "10"])
            let j = try JSONParser().parse(t.stdout)
            return [j["cohorts"], j["failuresByClass"], j["crash"], j["perMinute"]]
        }
        let a = try counts(ingested)
        #expect(a.allSatisfy { $0 != nil })
        #expect((a[0]?["enabled"]?["sessions"]?.numberValue?.int64 ?? 0) > 50, "\(String(describing: a[0]))")
        // The rates per minute are over the last 1, 5 and 15 minutes of the wall clock: both stores are read
        // within one wall minute (again when a minute began in between), then compared.
        func sameAsIngested() throws -> Bool {
            for _ in 0..<3 {
                let minute = Int64(Date().timeIntervalSince1970) / 60
                let (x, y) = (try counts(ingested), try counts(pulled))
                if Int64(Date().timeIntervalSince1970) / 60 == minute { return x == y }
            }
            return false
        }
        #expect(try sameAsIngested())

        // Again: nothing more (every source is pulled on the first look of a new `follow`).
        let again = try cli.run(pulled, ["follow", "--looks", "1", "--interval", "0.01"])
        #expect(again.stdout.contains("0 counters changed"), "\(again.stdout)")
        #expect(try sameAsIngested())

        // Throttled through every retry: the pull fails, the source is HOLD with its reason once silent.
        try fake.fault("rate_limited", match: "bigquery_query", count: 20, seconds: 0)
        let throttled = try cli.run(pulled, ["follow", "--looks", "1", "--interval", "0.01"])
        print(follow.stdout + throttled.stdout)
        #expect(throttled.stdout.contains("source bq: ") && throttled.stdout.contains("failed: BigQuery jobs.query: HTTP 429"), "\(throttled.stdout)")
        #expect(try sameAsIngested())
        // Not yet silent (its last success is recent): the failure is shown, the verdict is the store's.
        let list = try cli.run(pulled, ["source", "list", "--json"])
        #expect(list.stdout.contains("HTTP 429"), "\(list.stdout)")
        #expect(try JSONParser().parse(list.stdout).arrayValue?.first?["silence"]?.isNull == true)
        #expect(try cli.run(pulled, ["source", "remove", "bq", "--read-only"]).status == 4)
        #expect(try cli.run(pulled, ["source", "remove", "bq"]).status == 0)
        #expect(try cli.run(pulled, ["source", "list"]).stdout.contains("No sources"))
    }

    /// A GA4 realtime source through the CLI: `follow` pulls the report and shows the property's quota.
    @Test func followPullsTheRealtimeReportAndShowsItsQuota() throws {
        let fake = try FakeFirebase(tls: true)
        let dir = try TestSupport.temporaryDirectory("source-cli-rt")
        let cli = CLI(fake: fake, dir: dir)
        let start = Instant(seconds: Int64(Date().timeIntervalSince1970) - 20 * 60)
        try ExportFleet(seed: 23, installations: 50, minutes: 15, start: start, cohortAsProperty: true).load(into: fake)
        let store = dir.appendingPathComponent("rt.db").path
        #expect(try cli.run(store, ["init", "--seed", "s"]).status == 0)
        let added = try cli.run(
            store,
            ["source", "add", "rt", "--ga4-property", "123456", "--quota-project", fake.project, "--source-credentials", fake.keyFile])
        #expect(added.status == 0, "\(added.stderr)")
        #expect(try cli.run(store, ["source", "list"]).stdout.contains("ga4-realtime property 123456"))
        let follow = try cli.run(store, ["follow", "--looks", "1", "--interval", "0.01"])
        print(follow.stdout)
        #expect(follow.stdout.contains("source rt: ") && follow.stdout.contains("quota: 4995 tokens left this hour"), "\(follow.stdout) \(follow.stderr)")
        #expect(!follow.stdout.contains("failed"), "\(follow.stdout)")
    }

    /// A Crashlytics API source through the CLI: `follow` (and `watch`, on its schedule) lands the crash events,
    /// `source list` names it; a read-only `watch` pulls nothing.
    @Test(arguments: ["follow", "watch"]) func followPullsCrashlyticsEvents(_ command: String) throws {
        let fake = try FakeFirebase(tls: true)
        let dir = try TestSupport.temporaryDirectory("source-cli-crash")
        let cli = CLI(fake: fake, dir: dir)
        let now = Instant(seconds: Int64(Date().timeIntervalSince1970))
        var rows: [JSONValue] = []
        for i in 0..<12 {
            let at: Instant = now - .minutes(Int64(i + 1))
            let cohort: JSONValue = .string(i % 2 == 0 ? "enabled" : "control")
            let key: JSONValue = ["key": "AppAttestCohort", "value": cohort]
            let row: [(String, JSONValue)] = [
                ("event_timestamp", .number(JSONNumber(at.microseconds))), ("installation_uuid", .string("i-\(i)")),
                ("is_fatal", .bool(i % 3 != 0)), ("platform", "IOS"), ("custom_keys", .array([key])),
            ]
            rows.append(.object(JSONObject(row)))
        }
        try fake.control("POST", "/_fake/data/rows", ["table": "crashlytics", "rows": .array(rows)])
        let store = dir.appendingPathComponent("c.db").path
        #expect(try cli.run(store, ["init", "--seed", "s"]).status == 0)
        let added = try cli.run(
            store,
            [
                "source", "add", "crashes", "--crashlytics-app", "1:123456789012:ios:0123456789abcdef", "--quota-project",
                fake.project, "--source-credentials", fake.keyFile, "--since", (now - .hours(1)).iso8601,
            ])
        #expect(added.status == 0, "\(added.stderr)")
        #expect(try cli.run(store, ["source", "list"]).stdout.contains("crashlytics-api app 1:123456789012:ios:0123456789abcdef"))
        if command == "watch" {
            #expect([0, 5, 6, 7].contains(try cli.run(store, ["watch", "--looks", "1", "--interval", "0.01", "--read-only"]).status))
            #expect(try cli.run(store, ["source", "list", "--json"]).stdout.contains("\"watermark\": null"))
            let watch = try cli.run(store, ["watch", "--looks", "1", "--interval", "0.01"])
            #expect([0, 5, 6, 7].contains(watch.status), "\(watch.stderr)")
        } else {
            let follow = try cli.run(store, ["follow", "--looks", "1", "--interval", "0.01"])
            #expect(
                follow.stdout.contains("source crashes: ") && follow.stdout.contains("12 crash events"),
                "\(follow.stdout) \(follow.stderr)")
        }
        let t = try JSONParser().parse(
            try cli.run(store, ["telemetry", "--json", "--since", (now - .hours(1)).iso8601, "--percent", "10"]).stdout)
        #expect(t["cohorts"]?["enabled"]?["fatalCrashes"]?.numberValue?.int64 == 4, "\(String(describing: t["cohorts"]))")
        #expect(t["cohorts"]?["control"]?["fatalCrashes"]?.numberValue?.int64 == 4)
    }

    /// What a source landed is counted once (`SourceLedger`): removed and added again, it goes on from its ledger
    /// instead of counting the export again; a second source over the same events (another BigQuery source, the
    /// property's realtime report, the Crashlytics API beside a Crashlytics table of the same project) is refused
    /// with 2 and nothing is stored; a Crashlytics table whose crashes a removed API source landed is accepted only
    /// from where that source stopped. On a store file and on a PostgreSQL team store.
    @Test(arguments: ["file", "postgresql"]) func aSourceAddedAgainOrTwiceCountsOnce(_ backend: String) throws {
        let fake = try FakeFirebase(tls: true)
        let dir = try TestSupport.temporaryDirectory("source-cli-once")
        let cli = CLI(fake: fake, dir: dir)
        let start = Instant(seconds: Int64(Date().timeIntervalSince1970) - 40 * 60)
        try ExportFleet(seed: 29, installations: 200, minutes: 30, start: start).load(into: fake)
        let store: String
        if backend == "postgresql" {
            let server = try PostgresServer.get()
            store = server.uris(of: try server.freshDatabase()).socket
        } else {
            store = dir.appendingPathComponent("once.db").path
        }
        #expect(try cli.run(store, ["init", "--seed", "s"]).status == 0)
        let credentials = ["--source-credentials", fake.keyFile]
        let since = ["--since", (start - .minutes(5)).iso8601]
        let bigQuery = ["--bigquery", fake.project, "--analytics", "\(fake.project).analytics_123456"] + credentials
        func sessions() throws -> [Int64?] {
            let t = try JSONParser().parse(
                try cli.run(store, ["telemetry", "--json", "--since", (start - .minutes(1)).iso8601, "--percent", "10"]).stdout)
            return ["enabled", "control"].map { t["cohorts"]?[$0]?["sessions"]?.numberValue?.int64 }
        }
        func follow() throws {
            let f = try cli.run(store, ["follow", "--looks", "1", "--interval", "0.01"])
            #expect([0, 5, 6, 7].contains(f.status) && !f.stdout.contains("failed"), "\(f.stdout) \(f.stderr)")
        }
        func names() throws -> [String] {
            try JSONParser().parse(try cli.run(store, ["source", "list", "--json"]).stdout).arrayValue?.compactMap {
                $0["name"]?.stringValue
            } ?? []
        }

        #expect(try cli.run(store, ["source", "add", "bq"] + bigQuery + since).status == 0)
        try follow()
        let once = try sessions()
        #expect(once.allSatisfy { ($0 ?? 0) > 50 }, "\(once)")
        try follow()
        #expect(try sessions() == once)

        // Removed and added again (the same definition): it continues its ledger, nothing is counted again.
        #expect(try cli.run(store, ["source", "remove", "bq"]).status == 0)
        let readded = try cli.run(store, ["source", "add", "bq"] + bigQuery + since)
        #expect(readded.status == 0 && readded.stdout.contains("continues the ledger ga4-property:123456"), "\(readded.stdout) \(readded.stderr)")
        try follow()
        let again = try sessions()
        #expect(again == once, "removed and added again, the source counted the export again: \(again), not \(once)")

        // A second source over the same export, or the same property's realtime report: refused, nothing stored.
        for (name, arguments) in [
            ("bq2", bigQuery + since),
            ("rt", ["--ga4-property", "123456", "--quota-project", fake.project] + credentials),
        ] {
            let second = try cli.run(store, ["source", "add", name] + arguments)
            #expect(
                second.status == 2 && second.stderr.contains("the events of GA4 property 123456, which source bq already counts")
                    && second.stderr.contains("nothing was stored"),
                "\(name): \(second.status) \(second.stderr)")
        }
        #expect(try names() == ["bq"])
        try follow()
        #expect(try sessions() == once)

        // The Crashlytics API for an app of the project, then bq with the project's Crashlytics table: the same
        // crashes (a table's name does not say its app), refused while the API source is configured.
        let app = "1:\(fake.projectNumber):ios:0123456789abcdef"
        let crashes = ["--crashlytics-app", app, "--quota-project", fake.project] + credentials + since
        #expect(try cli.run(store, ["source", "add", "crashes"] + crashes).status == 0)
        try follow()
        let table = ["--crashlytics", "\(fake.project).firebase_crashlytics.com_example_app_IOS_REALTIME"]
        let both = try cli.run(store, ["source", "add", "bq"] + bigQuery + table + since)
        #expect(both.status == 2 && both.stderr.contains("which source crashes already counts"), "\(both.stderr)")
        // Removed, the API source's ledger says up to when it landed those crashes: the table is counted only
        // from there.
        #expect(try cli.run(store, ["source", "remove", "crashes"]).status == 0)
        let early = try cli.run(store, ["source", "add", "bq"] + bigQuery + table + since)
        #expect(
            early.status == 2 && early.stderr.contains("the ledger crashlytics-app:\(app) landed"),
            "\(early.status) \(early.stderr)")
        let from = try #require(early.stderr.components(separatedBy: "--since ").dropFirst().first?.split(separator: " ").first)
        #expect(try cli.run(store, ["source", "list", "--json"]).stdout.contains("firebase_crashlytics") == false)
        let later = try cli.run(store, ["source", "add", "bq"] + bigQuery + table + ["--since", String(from)])
        #expect(later.status == 0, "\(later.stderr)")
        #expect(try names() == ["bq"])
    }
}
