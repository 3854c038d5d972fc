import FirebaseFake
import FirebaseRemoteConfig
import WebClient
import Foundation
import JSON
import RemoteConfig
import Rollout
import TestSupport
import Testing
import Timekeeping

/// A `rollout` process killed (SIGKILL) between its publish to Firebase and its audit record in the state store:
/// the publish intent it committed first lets the next command settle it, and nothing is applied twice.
@Suite(.serialized)
struct FirebaseInterruptionTests {
    /// Starts the built binary on the fake without waiting for it.
    static func start(_ fake: FakeFirebase, _ arguments: [String]) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = arguments + ["--state", fake.stateLocation]
        p.environment = fake.environment(operator: "ana@example.com")
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        return p
    }

    static func waitUntil(_ what: String, timeout: TimeInterval = 20, _ predicate: () throws -> Bool) throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while try !predicate() {
            guard Date() < deadline else { throw TestSupport.Failure("timed out waiting for \(what)") }
            usleep(20_000)
        }
    }

    static func kill9(_ p: Process) {
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }

    static func audit(_ fake: FakeFirebase) throws -> [JSONValue] {
        try fake.json(["audit", "show", "--limit", "100"]).arrayValue ?? []
    }

    @Test func aPublishKilledBeforeItsAuditRecordIsSettledByTheNextCommand() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        #expect(try fake.headNumber() == 3)

        // Firebase applies the nudge and holds its answer back; the process dies waiting for it.
        try fake.fault("delay_after", match: "publish", count: 1, seconds: 60)
        let killed = try Self.start(fake, ["nudge", "+1", "--reason", "killed mid-publish"])
        try Self.waitUntil("Firebase to apply the nudge") { try fake.headNumber() == 4 }
        Self.kill9(killed)
        #expect(killed.terminationReason == .uncaughtSignal)

        // Version 4 exists in Firebase without its audit record; a read-only verify (which settles nothing) says so.
        let pending = try fake.rollout(["audit", "verify", "--read-only"])
        #expect(pending.status == 1, "\(pending.stdout)")
        #expect(
            pending.stderr.contains("publish intent 1")
                && pending.stderr.contains("a nudge +1 by ana@example.com on version 3")
                && pending.stderr.contains("is not settled yet"), "\(pending.stderr)")
        #expect(!(try Self.audit(fake)).isEmpty)  // (a read-write command: this one settles it)

        // The next command settled it: the record names version 4 and its ETag, exactly once.
        let records = try Self.audit(fake)
        let four = records.filter { $0["version"]?.numberValue?.int64 == 4 }
        #expect(four.count == 1)
        #expect(four.first?["result"]?.stringValue == "published")
        #expect(four.first?["reason"]?.stringValue == "killed mid-publish")
        let detail = four.first?["detail"]?.stringValue ?? ""
        #expect(
            detail.contains("settled after an interruption (publish intent 1)")
                && detail.contains("firebase version 4 etag etag-\(fake.projectNumber)-4"), "\(detail)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stderr)")
        #expect(verify.stdout.hasPrefix("audit log intact: 3 records, 3 versions checked"), "\(verify.stdout)")
        let history = try fake.json(["history", "--limit", "1"]).arrayValue ?? []
        #expect(history.first?["updateUser"]?.stringValue == "ana@example.com")

        // Nothing is sent again: the next nudge is version 5, on top of the killed one's 11%.
        #expect(try fake.rollout(["nudge", "+1", "--reason", "after"]).status == 0)
        #expect(try fake.headNumber() == 5 && fake.versions().count == 5)
        #expect(try fake.json(["status"])["rollout"]?["percentage"]?.stringValue == "12")
        #expect(try Self.audit(fake).filter { $0["result"]?.stringValue == "published" }.count == 4)
    }

    @Test func aPublishKilledBeforeFirebaseAppliedItIsRecordedAsNotPublished() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        // The request reaches Firebase and is held there; the process dies; a colleague publishes from the
        // Firebase console meanwhile, so the held request meets a stale ETag and is refused.
        try fake.fault("delay_before", match: "publish", count: 1, seconds: 2)
        let killed = try Self.start(fake, ["nudge", "+1", "--reason", "never landed"])
        try Self.waitUntil("the nudge to reach Firebase") { try fake.stat("faults_pending") == 0 }
        Self.kill9(killed)
        var doc = try fake.head().objectValue!
        doc["version"] = nil
        var params = doc["parameters"]!.objectValue!
        params["welcome_message"] = ["defaultValue": ["value": "Hello"], "valueType": "STRING"]
        doc["parameters"] = .object(params)
        #expect(try fake.publishAsColleague(.object(doc)) == 4)
        try Self.waitUntil("the held request to be refused") { try fake.stat("conflict") == 1 }
        #expect(try fake.headNumber() == 4)

        let records = try Self.audit(fake)
        let settled = records.filter { ($0["detail"]?.stringValue ?? "").contains("not published") }
        #expect(settled.count == 1)
        #expect(settled.first?["result"]?.stringValue == "recorded")
        #expect(settled.first?["reason"]?.stringValue == "never landed")
        #expect(
            settled.first?["detail"]?.stringValue?.contains(
                "not published: interrupted before Firebase applied it (publish intent 1, on version 3; version 4 is someone else's)"
            )
                == true, "\(String(describing: settled.first))")
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
        #expect(try fake.json(["status"])["rollout"]?["percentage"]?.stringValue == "10")
    }

    /// A dead process's publish that is neither found in Firebase nor excluded by a newer version (its request may
    /// still be applied) stays pending for `inFlightHorizon`, then is recorded as not published; an intent of a
    /// process that still runs is left to it.
    @Test func anUnfoundPublishOfADeadProcessStaysPendingUntilTheHorizon() throws {
        let fake = try FakeFirebase(template: try RolloutPlan.initialTemplate(seed: "s").json.prettyText)
        let clock = ManualClock(Instant(secondsSince1970: Date().timeIntervalSince1970))
        let store = try fake.store(clock: clock)
        let base = try store.current()
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        func intent(pid: Int32) -> PublishIntent {
            PublishIntent(
                created: clock.now(), host: FirebaseConfigStore.thisProcess.host, pid: pid,
                baseNumber: base.info.number,
                ifMatch: base.etag, contentDigest: "0", description: "lost", rollbackSource: nil, origin: "TEST",
                audit: AuditEntry(
                    time: clock.now(), actor: "ana@test", action: "set", reason: "lost", result: .published))
        }
        let dead = try store.begin(intent(pid: gone.processIdentifier))
        _ = try store.begin(intent(pid: getppid()))  // a process that runs: the test runner's parent
        #expect(try store.reconcile() == [])
        #expect(try store.pendingIntents().count == 2)
        clock.advance(by: .minutes(9))
        #expect(try store.reconcile() == [])
        clock.advance(by: .minutes(2))
        let settled = try store.reconcile()
        // After the horizon both are settled: the running process had ten minutes to do it itself.
        #expect(settled.count == 2 && settled.first == .notPublished(intent: dead))
        #expect(try store.pendingIntents().isEmpty)
        let records = try store.auditRecords(limit: 10, before: nil)
        #expect(records.count == 2 && records.allSatisfy { $0.entry.result == .recorded })
        #expect(records.last?.entry.detail.contains("not published") == true)
        #expect(records.last?.entry.detail.contains("not found 10 minutes later") == true)
        #expect(try fake.headNumber() == 1)
        _ = try store.verifyIntegrity()
    }

    /// An intent an older rollout left for a rollback it sent with Firebase's `:rollback` (no content digest, the
    /// version it restored) is still settled: by the version Firebase marked as that rollback, wherever it landed.
    @Test func anOlderRolloutsRollbackIntentIsStillSettled() throws {
        let fake = try FakeFirebase(template: try RolloutPlan.initialTemplate(seed: "s").json.prettyText)
        let store = try fake.store()
        _ = try RemoteConfigClientTests.nudge(store, 5)
        let base = try store.current()
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let now = SystemClock().now()
        let id = try store.begin(
            PublishIntent(
                created: now, host: FirebaseConfigStore.thisProcess.host, pid: gone.processIdentifier,
                baseNumber: base.info.number, ifMatch: base.etag, contentDigest: nil, description: "back",
                rollbackSource: 1, origin: "ROLLOUT_CLI",
                audit: AuditEntry(
                    time: now, actor: "ana@test", action: "rollback to 1", reason: "back", result: .published)))
        #expect(try fake.publishAsColleague(base.template.strippingVersionInfo().json) == 3)
        // The older rollout's `:rollback`, which has no precondition, landed on top of the colleague's version.
        let token = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(), clock: SystemClock()
        ).token(refresh: false)
        let sent = try CurlTransport().send(
            HTTPRequest(
                method: "POST", url: fake.origin + "/v1/projects/\(fake.project)/remoteConfig:rollback",
                headers: [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")],
                body: Array(#"{"versionNumber": "1"}"#.utf8), timeout: .seconds(Int64(5))))
        #expect(try sent.status == 200 && fake.headNumber() == 4)

        #expect(try store.reconcile() == [.published(intent: id, version: 4)])
        let record = try #require(try store.auditRecords(limit: 1, before: nil).first)
        #expect(record.entry.version == 4 && record.entry.action == "rollback to 1")
        #expect(
            record.entry.detail.contains("published on top of version 3, not 2")
                && record.entry.detail.contains("settled after an interruption (publish intent \(id))"),
            "\(record.entry.detail)")
        #expect(try store.pendingIntents().isEmpty)
        _ = try store.verifyIntegrity()
    }
}

/// Firebase keeps the newest 300 versions: an interrupted publish whose version was purged before anyone settled
/// it is recorded as unknown, never as "not published", and a purged version is named as purged.
@Suite(.serialized)
struct FirebasePurgedVersionTests {
    @Test func anInterruptedPublishWhoseVersionWasPurgedIsRecordedAsUnknown() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        try fake.fault("delay_after", match: "publish", count: 1, seconds: 60)
        let killed = try FirebaseInterruptionTests.start(fake, ["nudge", "+1", "--reason", "killed mid-publish"])
        try FirebaseInterruptionTests.waitUntil("Firebase to apply the nudge") { try fake.headNumber() == 4 }
        FirebaseInterruptionTests.kill9(killed)
        try fake.clearFaults()

        // Colleagues publish 300 versions from the Firebase console before anyone runs rollout again.
        let template = try fake.head()  // (the fake drops its version object)
        for i in 0..<300 { try fake.publishAsColleague(template, description: "console edit \(i)") }
        #expect(try fake.headNumber() == 304)
        #expect(try fake.versions().count == 300)

        let status = try fake.rollout(["status"])
        #expect(status.status == 0, "\(status.stderr)")
        let records = try FirebaseInterruptionTests.audit(fake)
        let unknown = records.filter { ($0["detail"]?.stringValue ?? "").contains("outcome unknown") }
        #expect(unknown.count == 1, "\(records)")
        let detail = unknown.first?["detail"]?.stringValue ?? ""
        #expect(detail.contains("Firebase purged version 4") && detail.contains("the oldest it keeps is 5"), "\(detail)")
        #expect(unknown.first?["result"]?.stringValue == "recorded")
        #expect(!records.contains { ($0["detail"]?.stringValue ?? "").contains("not published") }, "\(records)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")

        // Asking for a purged version names the purge.
        let rollback = try fake.rollout(["rollback", "3", "--reason", "back"])
        #expect(rollback.status != 0)
        #expect(rollback.stderr.contains("Firebase no longer keeps version 3"), "\(rollback.stderr)")
        #expect(try fake.headNumber() == 304)
    }
}
