import Foundation
@testable import PostgresStore
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import StoreConformance
import Telemetry
import TelemetrySources
import Testing
import TestSupport
import Timekeeping

/// The built `rollout` binary on a real PostgreSQL server: many processes nudging one store over the Unix socket
/// and loopback TCP, writers killed with SIGKILL at random moments, a server restart during a burst, and `store
/// copy` from an SQLite store.
@Suite(.serialized)
struct PostgresCLITests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-cli")
        key = directory.appendingPathComponent("team.key").path
    }

    @discardableResult
    func rollout(_ arguments: [String], store: String? = nil, operator id: String = "ana@test") throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + (store.map { ["--store", $0] } ?? []),
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": id, "NO_COLOR": "1"])
    }

    func verifyJSON(_ store: String) throws -> [String: Any] {
        let r = try rollout(["audit", "verify", "--json"], store: store)
        #expect(r.status == 0, "\(r.stderr)")
        return try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any] ?? [:]
    }

    /// The versions, newest first, and the nudges' audit: contiguous numbers, each version +0.1 on the one before.
    func checkHistory(_ conninfo: String, base: Int, expectedNudges: Int? = nil) throws -> Int {
        let store = try PostgresConfigStore(conninfo: conninfo)
        let report = try store.verify()
        let numbers = try store.versions(limit: 100_000, before: nil).map(\.number)
        #expect(numbers == Array((1...numbers.count).reversed()), "versions are not contiguous")
        #expect(Set(numbers).count == numbers.count)
        #expect(report.versions == numbers.count)
        let nudges = numbers.count - base
        if let expectedNudges { #expect(nudges == expectedNudges) }
        // Every version after the base is one nudge on the one before: no lost or doubled update.
        var previous = try RolloutPercent.of(store.version(base))
        for n in (base + 1)...max(base + 1, numbers.count) where n <= numbers.count {
            let p = try RolloutPercent.of(store.version(n))
            #expect(p == previous + 100_000, "version \(n): \(p) after \(previous)")
            previous = p
        }
        return nudges
    }

    // MARK: Must show

    /// 8 processes × 100 `nudge +0.1 --retry`, four over the Unix socket and four over loopback TCP: exactly +80
    /// points, versions contiguous, `audit verify` intact.
    @Test func eightProcessesTimesAHundredNudges() throws {
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let (socket, tcp) = server.uris(of: conninfo)
        let tcpURI = try #require(tcp)
        #expect(try rollout(["init", "--seed", "pg-burst"], store: socket).status == 0)
        #expect(try rollout(["set", "5", "--reason", "start"], store: tcpURI).status == 0)
        let script = """
            for i in $(seq 1 100); do "$0" nudge +0.1 --retry --reason burst --store "$1" >/dev/null || echo "failed $?" >&2; done
            """
        let lock = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        let binary = try TestSupport.rolloutBinary()
        let env = ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "burst@test"]
        DispatchQueue.concurrentPerform(iterations: 8) { w in
            do {
                let r = try TestSupport.run("/bin/sh", ["-c", script, binary, w % 2 == 0 ? socket : tcpURI], environment: env)
                if r.status != 0 || !r.stderr.isEmpty { lock.withLock { failures.append("writer \(w): \(r.stderr)") } }
            } catch {
                lock.withLock { failures.append("writer \(w): \(error)") }
            }
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect(try checkHistory(conninfo, base: 2, expectedNudges: 800) == 800)
        #expect(try RolloutPercent.of(PostgresConfigStore(conninfo: conninfo).current()) == 85 * 1_000_000)
        #expect(try verifyJSON(socket)["versions"] as? Int == 802)
    }

    /// Writers killed with SIGKILL at random moments (120 kills): every version that landed is whole and one
    /// nudge on the one before; every writer that was not killed succeeded or said why.
    @Test func writersKilledAtRandomMoments() throws {
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let (socket, tcp) = server.uris(of: conninfo)
        #expect(try rollout(["init", "--seed", "pg-kill"], store: socket).status == 0)
        #expect(try rollout(["set", "5", "--reason", "start"], store: socket).status == 0)
        let binary = try TestSupport.rolloutBinary()
        // The window: a little more than one uncontended write, so kills fall before, during and after the commit.
        let t = Date()
        #expect(try rollout(["nudge", "+0.1", "--reason", "timing"], store: socket).status == 0)
        let window = max(0.05, Date().timeIntervalSince(t) * 1.5)
        var killed = 0
        var finished = 0
        var unclear: [String] = []
        var rng = SystemRandomNumberGenerator()
        while killed < 120 {
            var processes: [(Process, Pipe)] = []
            for w in 0..<4 {
                let p = Process()
                p.executableURL = URL(fileURLWithPath: binary)
                p.arguments = ["nudge", "+0.1", "--retry", "--reason", "drill", "--store", w % 2 == 0 ? socket : (tcp ?? socket)]
                p.environment = ProcessInfo.processInfo.environment.merging(["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "drill@test"]) { $1 }
                let err = Pipe()
                p.standardError = err
                p.standardOutput = FileHandle.nullDevice
                try p.run()
                processes.append((p, err))
            }
            for (p, _) in processes.prefix(3) {
                usleep(UInt32(Double.random(in: 0...window, using: &rng) * 1_000_000 / 3))
                kill(p.processIdentifier, SIGKILL)
            }
            for (p, err) in processes {
                let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                p.waitUntilExit()
                if p.terminationReason == .uncaughtSignal {
                    killed += 1
                } else {
                    finished += 1
                    if p.terminationStatus != 0, message.isEmpty { unclear.append("exit \(p.terminationStatus) without a message") }
                }
            }
        }
        #expect(unclear.isEmpty, "\(unclear)")
        let nudges = try checkHistory(conninfo, base: 2)
        #expect(nudges >= finished - unclear.count)
        _ = try verifyJSON(socket)
        print("kill drill: \(killed) writers killed, \(finished) finished, \(nudges) nudges landed")
    }

    /// A restart of the server during a burst of publishes: clients report the lost connection or succeed
    /// (retrying conflicts), and the store has no lost, doubled or half-written version.
    @Test func serverRestartDuringABurst() throws {
        let server = try PostgresServer(tcp: false)
        let conninfo = try server.freshDatabase()
        let (socket, _) = server.uris(of: conninfo)
        #expect(try rollout(["init", "--seed", "pg-restart"], store: socket).status == 0)
        #expect(try rollout(["set", "5", "--reason", "start"], store: socket).status == 0)
        let binary = try TestSupport.rolloutBinary()
        let lock = NSLock()
        nonisolated(unsafe) var outcomes: [Int32: Int] = [:]
        nonisolated(unsafe) var unclear: [String] = []
        nonisolated(unsafe) var succeeded = 0
        nonisolated(unsafe) var messages: Set<String> = []
        nonisolated(unsafe) var restarted = false
        nonisolated(unsafe) var attempts = 0
        let group = DispatchGroup()
        for w in 0..<6 {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                // Until the restart is over and three more publishes after it (at most 200): a fixed count let a
                // fast burst end before the server went down, and then the restart reached no client.
                var after = 0
                for _ in 0..<200 {
                    if lock.withLock({ restarted }) {
                        after += 1
                        if after > 3 { break }
                    }
                    lock.withLock { attempts += 1 }
                    let r = try? TestSupport.run(
                        binary, ["nudge", "+0.1", "--retry", "--reason", "burst", "--store", socket],
                        environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "w\(w)@test"])
                    lock.withLock {
                        guard let r else { unclear.append("did not run"); return }
                        outcomes[r.status, default: 0] += 1
                        if r.status == 0 {
                            succeeded += 1
                        } else if r.stderr.isEmpty {
                            unclear.append("exit \(r.status) silent")
                        } else {
                            messages.insert(String(r.stderr.split(separator: "\n").first ?? "").prefix(120).description)
                        }
                    }
                    // A client that failed waits a moment before its next publish, as a person would.
                    if r?.status != 0 { usleep(300_000) }
                }
            }
        }
        // Restart once the burst is under way (a few versions landed), down for two seconds and then until a
        // client has reported the outage (at most a minute): on a loaded machine the clients' processes can take
        // longer than any fixed outage to start, and then the outage fell between their connection attempts.
        let store = try PostgresConfigStore(conninfo: conninfo)
        do {
            defer { lock.withLock { restarted = true } }
            while try store.current().info.number < 8 { usleep(20_000) }
            try server.restart(downFor: 2, orUntil: { lock.withLock { outcomes[1, default: 0] > 0 } }, atMost: 60)
        }
        group.wait()
        #expect(unclear.isEmpty, "\(unclear)")
        #expect(outcomes.keys.allSatisfy { $0 == 0 || $0 == 1 }, "\(outcomes)")
        #expect(outcomes[1, default: 0] > 0, "the restart reached no client: \(outcomes)")
        let nudges = try checkHistory(conninfo, base: 2)
        // A client whose connection dropped after its commit reached the server may report failure although its
        // version landed; never the other way round.
        #expect(nudges >= succeeded && nudges <= attempts, "\(nudges) landed of \(attempts), \(succeeded) reported success")
        _ = try verifyJSON(socket)
        print("restart drill: \(outcomes) exit codes, \(nudges) nudges landed; messages: \(messages.sorted())")
    }

    // MARK: store copy

    /// Ramp plans run on PostgreSQL: on a store without a plan, `plan status` and `plan abort` say that no plan was
    /// started (exit 1), not "no store at postgresql://…, create one with init" (the store exists), and nothing on
    /// the server changes. (PostgresRampPlansTests runs the plan commands themselves.)
    @Test func planCommandsOnAPostgreSQLStoreWithoutAPlanSaySo() throws {
        let server = try PostgresServer.get()
        let conninfo = server.uris(of: try server.freshDatabase()).socket
        #expect(try rollout(["init", "--seed", "pg-plan"], store: conninfo).status == 0)
        let before = try rollout(["audit", "verify", "--json"], store: conninfo).stdout
        for arguments in [["plan", "status"], ["plan", "abort", "--reason", "x"]] {
            let r = try rollout(arguments, store: conninfo)
            #expect(r.status == 1, "\(arguments): \(r.stderr)")
            #expect(r.stderr.contains("no plan was started in this store"), "\(r.stderr)")
            #expect(!r.stderr.contains("create one with"), "\(r.stderr)")
        }
        #expect(try rollout(["audit", "verify", "--json"], store: conninfo).stdout == before)
    }

    /// libpq's keyword/value form names the same store as its URI: `--store "host=… dbname=…"` is PostgreSQL,
    /// never a file of that name (which `init` would otherwise create, directories and all).
    @Test func aKeywordValueConnectionStringIsThePostgreSQLStore() throws {
        let server = try PostgresServer.get()
        let keywords = try server.freshDatabase()
        let uri = server.uris(of: keywords).socket
        #expect(try rollout(["init", "--seed", "pg-keywords"], store: keywords).status == 0)
        #expect(try rollout(["set", "3", "--reason", "start"], store: keywords).status == 0)
        let status = try rollout(["status", "--json"], store: uri)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("\"versionNumber\": 2"), "\(status.stdout)")
        #expect(!FileManager.default.fileExists(atPath: "host="), "a file or directory named after the string")
        #expect(!FileManager.default.fileExists(atPath: keywords))
    }

    @Test func storeCopyMovesAnSQLiteStoreAllOrNothing() throws {
        let server = try PostgresServer.get()
        let file = directory.appendingPathComponent("rollout.db").path
        #expect(try rollout(["init", "--seed", "copy-seed"], store: file).status == 0)
        #expect(try rollout(["set", "10", "--reason", "start"], store: file).status == 0)
        #expect(try rollout(["nudge", "+2.5", "--reason", "more"], store: file).status == 0)
        #expect(try rollout(["policy", "set", "guardrails.auto-kill", "on"], store: file).status == 0)
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events = (0..<50).map { i in
            #"{"t":\#(now - Int64(i) * 1_000_000),"i":"inst-\#(i % 7)","k":"session","c":"\#(i % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
        }.joined(separator: "\n") + "\n"
        let eventsFile = directory.appendingPathComponent("events.ndjson")
        try events.write(to: eventsFile, atomically: true, encoding: .utf8)
        let ingested = try rollout(["ingest", eventsFile.path], store: file)
        #expect(ingested.status == 0, "\(ingested.stderr)")
        let fileReport = try verifyJSON(file)

        let target = try server.freshDatabase()
        let (uri, _) = server.uris(of: target)
        let copy = try rollout(["store", "copy", "--from", file, "--to", uri])
        #expect(copy.status == 0, "\(copy.stderr)")
        #expect(copy.stdout.contains("3 versions"), "\(copy.stdout)")
        let pgReport = try verifyJSON(uri)
        #expect(pgReport["headHash"] as? String == fileReport["headHash"] as? String)
        #expect(pgReport["auditRecords"] as? Int == fileReport["auditRecords"] as? Int)
        #expect(pgReport["versions"] as? Int == 3)
        let history = try rollout(["history"], store: uri)
        #expect(history.status == 0 && history.stdout.contains("12.5"), "\(history.stdout)")
        let settings = try PostgresGuardrailSettings(store: try PostgresConfigStore(conninfo: target)).guardrailSettings()
        #expect(settings.autoKill)
        #expect(try PostgresTelemetry(store: try PostgresConfigStore(conninfo: target)).installationCount() == 7)
        #expect(try PostgresTelemetry(store: try PostgresConfigStore(conninfo: target)).batches().count == 1)
        // The same guardrail verdict on both ends (the copied telemetry and settings, judged by the same monitor).
        let onFile = try rollout(["nudge", "+0.5", "--reason", "after the move"], store: file)
        let onPostgres = try rollout(["nudge", "+0.5", "--reason", "after the move"], store: uri)
        #expect(onPostgres.status == onFile.status && onPostgres.stderr == onFile.stderr, "\(onFile.stderr) / \(onPostgres.stderr)")
        let fileStatus = try JSONSerialization.jsonObject(with: Data(try rollout(["status", "--json"], store: file).stdout.utf8)) as? [String: Any]
        let pgStatus = try JSONSerialization.jsonObject(with: Data(try rollout(["status", "--json"], store: uri).stdout.utf8)) as? [String: Any]
        #expect(
            (fileStatus?["assessment"] as? [String: Any])?["level"] as? String == (pgStatus?["assessment"] as? [String: Any])?["level"] as? String
                && (pgStatus?["assessment"] as? [String: Any])?["level"] != nil)
        // The copy continues the chain: a kill on PostgreSQL (never blocked) verifies.
        let after = try rollout(["kill", "--reason", "after the move"], store: uri)
        #expect(after.status == 0, "\(after.stderr) \(after.stdout)")
        #expect(try verifyJSON(uri)["versions"] as? Int == 4)

        // A non-empty target is refused and left as it was.
        let again = try rollout(["store", "copy", "--from", file, "--to", uri])
        #expect(again.status != 0 && again.stderr.contains("already holds"), "\(again.stderr)")
        #expect(try verifyJSON(uri)["versions"] as? Int == 4)

        // A source that fails verification copies nothing: the target stays an empty database.
        let sqlite = try TestSupport.run("/usr/bin/sqlite3", [file, "UPDATE config_versions SET description = 'edited' WHERE number = 2"])
        if sqlite.status == 0 {
            let empty = try server.freshDatabase()
            let refused = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: empty).socket])
            #expect(refused.status != 0, "\(refused.stdout)")
            #expect(try PostgresSchema.version(PGConnection(empty)) == nil)
        }
    }

    /// The telemetry sources go with the counters they landed: `store copy` carries the configured sources and every
    /// ledger (a removed source's too), so that the same pull on the team store adds nothing.
    @Test func storeCopyCarriesTheSourcesAndTheirLedgers() throws {
        let server = try PostgresServer.get()
        let file = directory.appendingPathComponent("sources.db").path
        #expect(try rollout(["init", "--seed", "copy-sources"], store: file).status == 0)
        let bq = ["--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1"]
        #expect(try rollout(["source", "add", "bq"] + bq, store: file).status == 0)
        let p = SourceStateConformance.plan(nil)
        let pull = SourceStateConformance.pull(p, SourceStateConformance.counts(p))
        let crashes = SourceLedger.crashlyticsAPI(project: "demo-rollout", app: "1:123456789012:ios:0123456789abcdef")
        var removed = SourceStateConformance.pull(p, SourceStateConformance.counts(p).filter { $0.key.kind == .crash }, source: "crashes")
        removed.ledger = crashes
        let (ledgers, totals, configurations): ([SourceLedgerRecord], CounterTotals, [SourceConfiguration])
        do {
            let store = try RolloutStore(path: file, create: false)
            try store.commitPull(pull, at: SourceStateConformance.now)
            try store.commitPull(removed, at: SourceStateConformance.now)
            ledgers = try store.sourceLedgers()
            totals = try store.telemetryCounters().allTimeTotals()
            configurations = try store.withDatabase { try SourceConfigTable.load(from: $0) }
        }
        #expect(ledgers.map(\.key) == [crashes.key, SourceStateConformance.ledger.key])

        let target = try server.freshDatabase()
        let copy = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
        #expect(copy.status == 0, "\(copy.stderr)")
        let team = try PostgresConfigStore(conninfo: target)
        #expect(try team.sourceLedgers() == ledgers)
        #expect(try PostgresSourceConfig(store: team).load() == configurations)
        #expect(try PostgresTelemetry(store: team).allTimeTotals() == totals)
        #expect(try team.commitPull(pull, at: SourceStateConformance.now + .minutes(1)).isEmpty)
        #expect(try team.commitPull(removed, at: SourceStateConformance.now + .minutes(1)).isEmpty)
        #expect(try PostgresTelemetry(store: team).allTimeTotals() == totals)
        #expect(try rollout(["audit", "verify"], store: server.uris(of: target).socket).status == 0)
    }

    /// The console's picture of a PostgreSQL store is woken by `NOTIFY`: with its fallback poll set to an hour, a
    /// colleague's publish (another process) still reaches the next picture, and only a notification can have
    /// brought it. (`TwoConsolesTests` shows the same in two real terminals, where a time bound cannot tell a
    /// wake-up from the five-second fallback.)
    @Test func aColleaguesPublishWakesTheConsolePictureWithoutThePoll() throws {
        let server = try PostgresServer.get()
        let conninfo = server.uris(of: try server.freshDatabase()).socket
        try #require(try rollout(["init", "--seed", "wake"], store: conninfo).status == 0)
        try #require(try rollout(["set", "10", "--reason", "start"], store: conninfo).status == 0)

        let team = try Wiring.teamSession(conninfo: conninfo, operatorID: "ana@test", keyPath: key)
        let source = try PostgresConsoleSource(team: team, conninfo: conninfo, project: "test", fallback: 3_600)
        let before = try source.snapshot().header.templateVersion
        #expect(before != nil)
        // Unchanged and not notified: the same picture, no wake-up.
        #expect(try source.snapshot().header.templateVersion == before)
        #expect(source.wakeUps == 0)

        let published = try rollout(["set", "12", "--reason", "colleague"], store: conninfo, operator: "carl@test")
        try #require(published.status == 0, "\(published.stderr)")
        // The notification arrives at the listener's connection shortly after the commit: bounded by a condition.
        var after = before
        let deadline = Date().addingTimeInterval(30)
        while after == before, Date() < deadline {
            after = try source.snapshot().header.templateVersion
            if after == before { usleep(20_000) }
        }
        #expect(after != before, "the colleague's publish never reached the picture")
        #expect(source.wakeUps == 1)
    }
}

/// The rollout percentage of a stored template, in micro-percent.
enum RolloutPercent {
    static func of(_ stored: StoredTemplate) throws -> Int64 {
        guard let plan = try RolloutPlan.locate(in: stored.template) else { throw TestSupport.Failure("no rollout") }
        return plan.percentage.value
    }
}
