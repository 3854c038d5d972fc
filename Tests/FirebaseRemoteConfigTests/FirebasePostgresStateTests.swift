import FirebaseFake
import FirebaseRemoteConfig
import WebClient
import Foundation
import JSON
import PostgresStore
import Rollout
import SQLiteStore
import StoreConformance
import TestSupport
import Testing
import Timekeeping

/// `--store firebase:PROJECT --state postgresql://...`: the strict Firebase fake holds the templates, a real
/// PostgreSQL server (an `initdb` in a temporary directory, Unix socket) the state store: the audit chain naming
/// Firebase's versions, the publish intents, operators, step-up, guardrails and telemetry.
@Suite(.serialized)
struct FirebasePostgresStateTests {
    /// A fake whose `rollout` runs use a fresh PostgreSQL database as `--state` (libpq's keyword/value form unless
    /// `uri`), with a team store key of its own.
    static func fakeOnPostgres(uri: Bool = false) throws -> (FakeFirebase, conninfo: String) {
        let fake = try FakeFirebase(template: existingTemplate)
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        fake.stateLocation = uri ? server.uris(of: conninfo).socket : conninfo
        return (fake, conninfo)
    }

    static func keyEnvironment(_ fake: FakeFirebase) -> [String: String] {
        ["ROLLOUT_STORE_KEY": fake.directory.appendingPathComponent("team.key").path]
    }

    static func audit(_ fake: FakeFirebase) throws -> [JSONValue] {
        let r = try fake.rollout(["audit", "show", "--limit", "1000", "--json"], environment: keyEnvironment(fake))
        guard r.status == 0 else { throw TestSupport.Failure("audit show: \(r.stderr)") }
        return try JSONParser().parse(r.stdout).arrayValue ?? []
    }

    static func auditCount(_ conninfo: String) throws -> Int {
        Int((try PGConnection(conninfo).query("SELECT count(*) FROM config_audit").first?.first ?? nil) ?? "-1") ?? -1
    }

    // (The conformance suite of the config port runs with the state on PostgreSQL in FirebaseConformanceTests.)

    // MARK: The port, on both adapters

    static let t0 = Instant(seconds: 1_780_000_000)

    static func intent(base: Int = 3, actor: String = "ana@test") -> PublishIntent {
        PublishIntent.sample(base: base, actor: actor, at: t0)
    }

    /// One intent, one transaction: an intent reads back as written; removing it and appending its record commit
    /// together or not at all; a second settlement of one intent finds it gone.
    @Test(arguments: ["sqlite", "postgresql"])
    func theStatePortKeepsIntentsAndTheChainInOneTransaction(_ backend: String) throws {
        let directory = try TestSupport.temporaryDirectory("firebase-state-port")
        defer { try? FileManager.default.removeItem(at: directory) }
        let state: any FirebaseStateStore =
            backend == "sqlite"
            ? try FirebaseState.open(
                path: directory.appendingPathComponent("state.db").path, project: "p-one", create: true
            )
            .configStore()
            : try PostgresFirebaseState.open(
                conninfo: try PostgresServer.get().freshDatabase(), project: "p-one", create: true)
        #expect(try state.publishIntents().isEmpty)
        let first = try state.atomically { try state.insertPublishIntent(Self.intent()) }
        let second = try state.atomically { try state.insertPublishIntent(Self.intent(base: 4, actor: "bob@test")) }
        var one = Self.intent()
        one.id = first
        var two = Self.intent(base: 4, actor: "bob@test")
        two.id = second
        #expect(try state.publishIntents() == [one, two])
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try state.atomically {
                #expect(try state.removePublishIntent(first))
                try state.appendAudit(Self.intent().audit)
                throw Boom()
            }
        }
        #expect(try state.publishIntents().map(\.id) == [first, second])
        #expect(try state.auditRecords(limit: 10, before: nil).isEmpty)
        try state.atomically {
            guard try state.removePublishIntent(first) else { return }
            try state.appendAudit(Self.intent().audit)
        }
        #expect(try state.removePublishIntent(first) == false)
        #expect(try state.publishIntents() == [two])
        #expect(try state.verifiedAuditChain().map(\.entry) == [Self.intent().audit])
        #expect(state.isReadOnly == false)
    }

    /// With a shared state store, an interrupted publish of a process on another machine is not left for the
    /// in-flight horizon: its owner holds a lease on its connection, so while that process lives the intent is
    /// its own to settle, and once its connection is gone (the process died) the next command settles it.
    @Test func anotherHostsInterruptedPublishIsSettledOnceItsConnectionIsGone() throws {
        let fake = try FakeFirebase(template: try RolloutPlan.initialTemplate(seed: "s").json.prettyText)
        let conninfo = try PostgresServer.get().freshDatabase()
        let mine = try fake.store(
            state: try PostgresFirebaseState.open(conninfo: conninfo, project: fake.project, create: true))
        let base = try mine.current()
        // Another machine's process records an intent on version 1, on a connection of its own.
        var owner: PostgresFirebaseState? = try PostgresFirebaseState.open(
            conninfo: conninfo, project: fake.project, create: false)
        let now = Instant(secondsSince1970: Date().timeIntervalSince1970)
        let intent = PublishIntent(
            created: now, host: "another-host.example", pid: 4242, baseNumber: base.info.number, ifMatch: base.etag,
            contentDigest: "0", description: "lost", rollbackSource: nil, origin: "TEST",
            audit: AuditEntry(time: now, actor: "bob@test", action: "set", reason: "lost", result: .published))
        let id = try owner!.atomically { try owner!.insertPublishIntent(intent) }
        // A colleague publishes version 2 from the Firebase console: the intent can no longer land.
        #expect(try fake.publishAsColleague(base.template.strippingVersionInfo().json) == 2)

        // Its owner is connected: the intent is left to it, and a read-only verify does not call it interrupted.
        let viewer = try PostgresFirebaseState.open(
            conninfo: conninfo, project: fake.project, create: false, readOnly: true)
        #expect(try viewer.publishIntentOwnerIsConnected(id) == true)
        #expect(try mine.reconcile() == [])
        _ = try fake.store(state: viewer).verifyIntegrity()
        #expect(try owner!.publishIntentOwnerIsConnected(id) == true)

        // The process dies: its connection closes and the server drops the lease.
        owner = nil
        let deadline = Date(timeIntervalSinceNow: 10)
        while try viewer.publishIntentOwnerIsConnected(id) == true, Date() < deadline { usleep(20_000) }
        #expect(try viewer.publishIntentOwnerIsConnected(id) == false)
        #expect { try fake.store(state: viewer).verifyIntegrity() } throws: { "\($0)".contains("publish intent \(id)") }
        #expect(try mine.reconcile() == [.notPublished(intent: id)])
        let last = try mine.auditRecords(limit: 1, before: nil).first
        #expect(last?.entry.result == .recorded)
        #expect(last?.entry.detail.contains("version 2 is someone else's") == true, "\(String(describing: last))")
        #expect(try mine.state.publishIntents().isEmpty)
        _ = try mine.verifyIntegrity()
    }

    // MARK: The CLI

    @Test func nudgeThroughFirebaseWithPostgresStatePublishesAndAuditsTheFirebaseVersion() throws {
        let (fake, conninfo) = try Self.fakeOnPostgres()
        let env = Self.keyEnvironment(fake)
        // Before init: nothing is created, the error names the adoption.
        let early = try fake.rollout(["status"], environment: env)
        #expect(
            early.status == 1 && early.stderr.contains("is not yet the state store of firebase:demo-rollout"),
            "\(early.stderr)")
        #expect(try PGConnection(conninfo).query("SELECT to_regclass('rollout_schema') IS NULL").first?.first == "t")

        let created = try fake.rollout(["init", "--seed", "rollout-2026"], environment: env)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.contains("created store firebase:demo-rollout, state host="), "\(created.stdout)")
        #expect(try fake.headNumber() == 2)
        let nudge = try fake.rollout(["nudge", "+2.5", "--reason", "ramp"], environment: env)
        #expect(nudge.status == 0, "\(nudge.stderr)")
        #expect(try fake.headNumber() == 3)
        #expect(try FirebaseCLITests.percentage(fake) == "2.5")

        // The audit records are on PostgreSQL and name the Firebase versions and ETags.
        let records = try Self.audit(fake)
        let three = records.filter { $0["version"]?.numberValue?.int64 == 3 }
        #expect(three.count == 1 && three.first?["result"]?.stringValue == "published")
        #expect(
            three.first?["detail"]?.stringValue?.contains("firebase version 3 etag etag-\(fake.projectNumber)-3")
                == true)
        #expect(try Self.auditCount(conninfo) == records.count && records.count == 2)
        // The database is bound to the project, holds no template version and no open intent.
        let c = try PGConnection(conninfo)
        #expect(try c.query("SELECT project FROM firebase_state").first?.first == "demo-rollout")
        #expect(try c.query("SELECT count(*) FROM config_versions").first?.first == "0")
        #expect(try c.query("SELECT count(*) FROM firebase_intents").first?.first == "0")
        // History shows the operator for the versions this state store's operators published.
        let history = try fake.json(["history", "--limit", "1"]).arrayValue ?? []
        #expect(history.first?["updateUser"]?.stringValue == "ana@example.com")

        let verify = try fake.rollout(["audit", "verify"], environment: env)
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("audit log intact: 2 records, 2 versions checked"), "\(verify.stdout)")

        // --read-only refuses the write: nothing sent to Firebase, nothing written to PostgreSQL.
        let puts = try fake.stat("publish")
        let readOnly = try fake.rollout(["nudge", "+1", "--reason", "no", "--read-only"], environment: env)
        #expect(readOnly.status != 0 && readOnly.stderr.contains("read-only"), "\(readOnly.status) \(readOnly.stderr)")
        #expect(try fake.headNumber() == 3 && (try fake.stat("publish")) == puts)
        #expect(try Self.auditCount(conninfo) == 2)
        // So does the read-only connection itself (below the write path).
        let state = try PostgresFirebaseState.open(
            conninfo: conninfo, project: fake.project, create: false, readOnly: true)
        let readOnlyStore = try fake.store(state: state)
        #expect(throws: PostgresStoreError.self) { try readOnlyStore.publish(try Self.request(readOnlyStore)) }
        #expect(try fake.headNumber() == 3 && (try Self.auditCount(conninfo)) == 2)

        // Another project's state, or a team store holding templates, is refused.
        let other = try fake.rollout(["status", "--store", "firebase:other-project"], environment: env)
        #expect(
            other.status == 1 && other.stderr.contains("is the state store of firebase:demo-rollout"), "\(other.stderr)"
        )
        let initAgain = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["init", "--store", conninfo],
            environment: env.merging(["ROLLOUT_OPERATOR": "x@y"]) { a, _ in a })
        #expect(
            initAgain.status != 0 && initAgain.stderr.contains("state store of firebase:demo-rollout"),
            "\(initAgain.stderr)")
        // The read-only commands that take the config store work on this route too.
        let diff = try fake.rollout(["diff", "2", "3"], environment: env)
        #expect(diff.status == 0 && diff.stdout.contains("2.5"), "\(diff.stderr)")
    }

    /// The session's other ports come from the PostgreSQL team store, as for `--store postgresql://...`: guardrail
    /// settings, step-up enrolment (sealed under the team key) and telemetry, each audited on the one chain.
    @Test func settingsEnrolmentAndTelemetryLandOnThePostgresState() throws {
        let (fake, conninfo) = try Self.fakeOnPostgres(uri: true)
        let env = Self.keyEnvironment(fake)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"], environment: env).status == 0)
        let c = try PGConnection(conninfo)
        func count(_ table: String) throws -> Int {
            Int((try c.query("SELECT count(*) FROM \(table)").first?.first ?? nil) ?? "") ?? -1
        }
        let audit = try count("config_audit")

        let set = try fake.rollout(["policy", "set", "guardrails.auto-kill", "on"], environment: env)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(
            try PostgresGuardrailSettings(store: PostgresConfigStore(conninfo: conninfo)).guardrailSettings().autoKill)
        #expect(try count("config_audit") == audit + 1)
        let ro = try fake.rollout(["policy", "set", "guardrails.auto-kill", "off", "--read-only"], environment: env)
        #expect(ro.status == 4, "\(ro.stderr)")

        let enrol = try fake.rollout(["operator", "enroll", "--qr", "none"], environment: env)
        #expect(enrol.status == 0, "\(enrol.stderr)")
        #expect(try count("stepup_enrolments") == 1)
        #expect(FileManager.default.fileExists(atPath: env["ROLLOUT_STORE_KEY"]!), "the team store key was created")

        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events =
            (0..<20).map {
                #"{"t":\#(now - Int64($0) * 1_000_000),"i":"fb-\#($0)","k":"session","c":"\#($0 % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
            }.joined(separator: "\n") + "\n"
        let input = fake.directory.appendingPathComponent("events.ndjson")
        try events.write(to: input, atomically: true, encoding: .utf8)
        let ingest = try fake.rollout(["ingest", input.path, "--quiet"], environment: env)
        #expect(ingest.status == 0, "\(ingest.stderr)")
        let installations = try c.query("SELECT sum(installations) FROM telemetry_installation_blocks").first?.first ?? nil
        #expect(try count("telemetry_batches") == 1 && installations == "20")
        // The App Check exchange's state too.
        let app = try fake.rollout(
            [
                "appcheck", "app", "add", "1:1234567890:ios:0123456789abcdef", "--project-number", fake.projectNumber,
                "--project-id", fake.project, "--team", "ABCDE12345", "--bundle", "com.example.firebase",
            ], environment: env)
        #expect(app.status == 0, "\(app.stderr)")
        #expect(try count("appcheck_apps") == 1)
        // `store migrate` takes the state store too (nothing to do on a current one).
        let migrate = try fake.rollout(["store", "migrate"], environment: env)
        #expect(migrate.status == 0 && migrate.stdout.contains("is current"), "\(migrate.stderr)")
        // Nothing of it went to Firebase or to a state file.
        #expect(try fake.headNumber() == 2)
        #expect(!FileManager.default.fileExists(atPath: fake.statePath))
        #expect(try fake.rollout(["audit", "verify"], environment: env).status == 0)
    }

    /// A ramp plan on this route lives on the PostgreSQL state (`ramp_plan`), as on `--store postgresql://...`:
    /// the runner publishes its step to Firebase (outside the plan's transaction: Firebase's publish commits its
    /// intent first) and records the step; `status` and the plan read Firebase's template; the chain verifies.
    @Test func aRampPlanRunsOnThePostgresState() throws {
        let (fake, conninfo) = try Self.fakeOnPostgres(uri: true)
        let env = Self.keyEnvironment(fake)
        func json(_ arguments: [String]) throws -> JSONValue {
            let r = try fake.rollout(arguments + ["--json"], environment: env)
            guard r.status == 0 else { throw TestSupport.Failure("\(arguments) failed (\(r.status)): \(r.stderr)") }
            return try JSONParser().parse(r.stdout)
        }
        try #require(try fake.rollout(["init", "--seed", "rollout-plan"], environment: env).status == 0)
        let head = try fake.headNumber()
        let file = fake.directory.appendingPathComponent("ramp.plan").path
        try "name ramp\nstep 5% hold 1h\nstep 10%\n".write(toFile: file, atomically: true, encoding: .utf8)
        let started = try fake.rollout(["plan", "start", file], environment: env)
        #expect(started.status == 0, "\(started.stderr)")
        let c = try PGConnection(conninfo)
        #expect(try c.query("SELECT count(*) FROM ramp_plan").first?.first == "1")
        let run = try fake.rollout(["plan", "run", "--looks", "1"], environment: env)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("published version \(head + 1): plan 'ramp' step 1/2: 5%"), "\(run.stdout)")
        #expect(try fake.headNumber() == head + 1)
        #expect(try json(["status"])["rollout"]?["percentage"]?.stringValue == "5")
        // A second look waits at step 1 (its hold), publishing nothing.
        #expect(try fake.rollout(["plan", "run", "--looks", "1"], environment: env).status == 0)
        #expect(try fake.headNumber() == head + 1)
        #expect(try json(["plan", "status"])["step"]?.numberValue?.int64 == 1)
        #expect(try fake.rollout(["plan", "pause", "--reason", "lunch"], environment: env).status == 0)
        #expect(try json(["plan", "status"])["phase"]?.stringValue == "paused")
        // Read-only: the plan is shown, its change refused as every access refusal is (exit 4).
        let ro = try fake.rollout(["plan", "resume", "--reason", "back", "--read-only"], environment: env)
        #expect(ro.status == 4, "\(ro.status) \(ro.stderr)")
        #expect(try json(["plan", "status", "--read-only"])["phase"]?.stringValue == "paused")
        // Nothing of it in a state file; the audit chain (with the plan's records) verifies.
        #expect(!FileManager.default.fileExists(atPath: fake.statePath))
        let verify = try fake.rollout(["audit", "verify"], environment: env)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
    }

    /// A kill publish of the newest version (for the read-only check).
    static func request(_ store: FirebaseConfigStore) throws -> PublishRequest {
        let current = try store.current()
        return PublishRequest(
            template: current.template, ifMatch: .etag(current.etag), updateUser: "ana@example.com",
            updateOrigin: "TEST",
            updateType: .incremental, description: "read-only", time: current.info.updateTime,
            audit: AuditEntry(
                time: current.info.updateTime, actor: "ana@example.com", action: "set", reason: "no", result: .published
            ))
    }

    @Test func twoProcessesNudgingWithRetryOnOnePostgresStateLandEverySteps() throws {
        let (fake, conninfo) = try Self.fakeOnPostgres(uri: true)
        let env = Self.keyEnvironment(fake)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"], environment: env).status == 0)
        let perProcess = 30
        let group = DispatchGroup()
        let lock = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        let started = Date()
        for p in 0..<2 {
            group.enter()
            DispatchQueue.global().async {
                for i in 0..<perProcess {
                    do {
                        let r = try fake.rollout(
                            ["nudge", "+0.1", "--retry", "--reason", "ramp \(p)/\(i)"], operator: "op\(p)@example.com",
                            environment: env)
                        if r.status != 0 { lock.withLock { failures.append("op\(p) #\(i): \(r.status) \(r.stderr)") } }
                    } catch {
                        lock.withLock { failures.append("op\(p) #\(i): \(error)") }
                    }
                }
                group.leave()
            }
        }
        group.wait()
        print(
            "2 × \(perProcess) nudges through firebase: with PostgreSQL state: \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
        )
        #expect(failures.isEmpty, "\(failures.prefix(3))")
        #expect(try FirebaseCLITests.percentage(fake) == "6")
        let head = 2 + 2 * perProcess
        #expect(try fake.headNumber() == head)
        #expect(try fake.versions().count == head)
        let verify = try fake.rollout(["audit", "verify", "--json"], environment: env)
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(try JSONParser().parse(verify.stdout)["versions"]?.numberValue?.int64 == Int64(head - 1))
        let published = try Self.audit(fake).filter { $0["result"]?.stringValue == "published" }.compactMap {
            $0["version"]?.numberValue?.int64
        }
        #expect(published.count == head - 1)
        #expect(Set(published) == Set((2...head).map(Int64.init)))
        #expect(try PGConnection(conninfo).query("SELECT count(*) FROM firebase_intents").first?.first == "0")
    }

    @Test func aPublishKilledBeforeItsAuditRecordIsSettledFromThePostgresState() throws {
        let (fake, conninfo) = try Self.fakeOnPostgres()
        let env = Self.keyEnvironment(fake)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"], environment: env).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"], environment: env).status == 0)
        #expect(try fake.headNumber() == 3)

        // Firebase applies the nudge and holds its answer back; the process dies waiting for it.
        try fake.fault("delay_after", match: "publish", count: 1, seconds: 60)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = ["nudge", "+1", "--reason", "killed mid-publish", "--state", fake.stateLocation]
        p.environment = fake.environment(operator: "ana@example.com").merging(env) { _, b in b }
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        try FirebaseInterruptionTests.waitUntil("Firebase to apply the nudge") { try fake.headNumber() == 4 }
        FirebaseInterruptionTests.kill9(p)
        #expect(p.terminationReason == .uncaughtSignal)
        // The intent row is on PostgreSQL, committed before the PUT.
        let open = try PGConnection(conninfo).query("SELECT id, base_version, audit_actor FROM firebase_intents")
        #expect(open.count == 1 && open.first?[1] == "3" && open.first?[2] == "ana@example.com", "\(open)")

        let pending = try fake.rollout(["audit", "verify", "--read-only"], environment: env)
        #expect(pending.status == 1, "\(pending.stdout)")
        #expect(
            pending.stderr.contains("publish intent 1")
                && pending.stderr.contains("a nudge +1 by ana@example.com on version 3")
                && pending.stderr.contains("is not settled yet"), "\(pending.stderr)")

        // The next read-write command settles it: the record names version 4 and its ETag, exactly once.
        let records = try Self.audit(fake)
        let four = records.filter { $0["version"]?.numberValue?.int64 == 4 }
        #expect(four.count == 1 && four.first?["result"]?.stringValue == "published")
        #expect(four.first?["reason"]?.stringValue == "killed mid-publish")
        let detail = four.first?["detail"]?.stringValue ?? ""
        #expect(
            detail.contains("settled after an interruption (publish intent 1)")
                && detail.contains("firebase version 4 etag etag-\(fake.projectNumber)-4"), "\(detail)")
        #expect(try PGConnection(conninfo).query("SELECT count(*) FROM firebase_intents").first?.first == "0")
        let verify = try fake.rollout(["audit", "verify"], environment: env)
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("audit log intact: 3 records, 3 versions checked"), "\(verify.stdout)")
        // Nothing was sent twice: the next nudge is version 5.
        #expect(try fake.rollout(["nudge", "+1", "--reason", "next"], environment: env).status == 0)
        #expect(try fake.headNumber() == 5)
    }
}
