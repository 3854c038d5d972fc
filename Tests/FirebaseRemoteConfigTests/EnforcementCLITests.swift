import FirebaseFake
import Foundation
import JSON
import TestSupport
import Testing

/// `rollout enforcement` and the kill's guard, through the built binary against the strict fake's App Check API.
@Suite(.serialized)
struct EnforcementCLITests {
    static func modes(_ fake: FakeFirebase) throws -> [String: String] {
        let state = try fake.control("GET", "/_fake/appcheck")
        var out: [String: String] = [:]
        for (k, v) in state.objectValue?.members ?? [] { out[k] = v["enforcementMode"]?.stringValue }
        return out
    }

    static func audit(_ fake: FakeFirebase) throws -> [JSONValue] {
        try fake.json(["audit", "show", "--limit", "100"]).arrayValue ?? []
    }

    @Test func showSetTheGateAndTheAuditTrail() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        let shown = try fake.json(["enforcement", "show"]).arrayValue ?? []
        #expect(shown.count == 4)
        #expect(shown.allSatisfy { $0["enforcementMode"]?.stringValue == "OFF" })

        // Metrics first: UNENFORCED needs no gate; requested and applied are both in the audit log.
        let metrics = try fake.rollout(["enforcement", "set", "firestore.googleapis.com", "unenforced", "--reason", "metrics"])
        #expect(metrics.status == 0, "\(metrics.stderr)")
        #expect(try Self.modes(fake)["firestore.googleapis.com"] == "UNENFORCED")
        let records = try Self.audit(fake).filter { ($0["action"]?.stringValue ?? "").contains("enforcement") }
        #expect(records.count == 2, "\(records)")
        let requested = records.filter { ($0["to"]?.stringValue ?? "").hasPrefix("requested (metrics)") }
        let applied = records.filter {
            $0["from"]?.stringValue == "OFF" && $0["to"]?.stringValue == "UNENFORCED"
                && ($0["detail"]?.stringValue ?? "").hasPrefix("applied (metrics); Firebase etag ")
        }
        #expect(requested.count == 1 && applied.count == 1, "\(records)")

        // ENFORCED at 10%: refused, exit 4, nothing sent.
        let early = try fake.rollout(["enforcement", "set", "firestore.googleapis.com", "enforced", "--reason", "too soon"])
        #expect(early.status == 4, "\(early.stderr)")
        #expect(early.stderr.contains("not 100%"), "\(early.stderr)")
        #expect(try Self.modes(fake)["firestore.googleapis.com"] == "UNENFORCED")

        // A dry run sends nothing; read-only refuses with 4; a bad mode is a usage error.
        let dry = try fake.rollout(["enforcement", "set", "firebasestorage.googleapis.com", "unenforced", "--reason", "r", "--dry-run"])
        #expect(dry.status == 0 && dry.stdout.contains("would set"), "\(dry.stdout)\(dry.stderr)")
        #expect(try Self.modes(fake)["firebasestorage.googleapis.com"] == nil)
        let readOnly = try fake.rollout(["enforcement", "set", "firebasestorage.googleapis.com", "unenforced", "--reason", "r", "--read-only"])
        #expect(readOnly.status == 4, "\(readOnly.stderr)")
        #expect(try fake.rollout(["enforcement", "set", "firestore.googleapis.com", "on", "--reason", "r"]).status == 2)
        #expect(try fake.rollout(["enforcement", "set", "firestore.googleapis.com", "off"]).status == 2)
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }

    @Test func enforcementOnAnotherStoreIsATypedRefusal() throws {
        let dir = try TestSupport.temporaryDirectory("enforcement-file")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(bin, ["init", "--store", store]).status == 0)
        let r = try TestSupport.run(bin, ["enforcement", "show", "--store", store])
        #expect(r.status == 4, "\(r.stderr)")
        #expect(r.stderr.contains("--store firebase:PROJECT"), "\(r.stderr)")
    }

    /// A kill while a service is ENFORCED would reject every user it switches off: the write path's enforcement
    /// policy sets the service UNENFORCED first (audited); when that cannot be done the kill is refused with the
    /// command to run, and nothing is published; a lower percentage is treated the same.
    @Test func aKillOrADecreaseFirstLowersEnforcement() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "100", "--reason", "done", "--force"]).status == 0)
        try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "ENFORCED"])
        try fake.control("POST", "/_fake/appcheck", ["service": "identitytoolkit.googleapis.com", "mode": "ENFORCED"])
        let head = try fake.headNumber()

        // The dry run says what the kill would do first.
        let dry = try fake.rollout(["kill", "--reason", "spike", "--dry-run"])
        #expect(dry.stdout.contains("first sets firestore.googleapis.com, identitytoolkit.googleapis.com UNENFORCED"), "\(dry.stdout)")

        // Lowering fails: the kill is refused (exit 4), says what to run, and publishes nothing.
        try fake.fault("bad_request", match: "appcheck_patch", count: 1)
        let refused = try fake.rollout(["kill", "--reason", "spike"])
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(refused.stderr.contains("rollout enforcement set firestore.googleapis.com unenforced"), "\(refused.stderr)")
        #expect(try fake.headNumber() == head)
        try fake.clearFaults()

        let kill = try fake.rollout(["kill", "--reason", "spike"])
        #expect(kill.status == 0, "\(kill.stderr)")
        var modes = try Self.modes(fake)
        #expect(modes["firestore.googleapis.com"] == "UNENFORCED" && modes["identitytoolkit.googleapis.com"] == "UNENFORCED")
        #expect(try fake.headNumber() == head + 1)
        let lowered = try Self.audit(fake).filter {
            ($0["action"]?.stringValue ?? "").hasPrefix("appcheck enforcement")
                && ($0["detail"]?.stringValue ?? "").hasPrefix("applied")
        }
        #expect(lowered.count == 2, "applied for each service: \(lowered)")
        #expect(try fake.rollout(["audit", "verify"]).status == 0)

        // A decrease takes the provider from users too.
        #expect(try fake.rollout(["resume", "--reason", "over"]).status == 0)
        try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "ENFORCED"])
        #expect(try fake.rollout(["set", "50", "--reason", "back off"]).status == 0)
        modes = try Self.modes(fake)
        #expect(modes["firestore.googleapis.com"] == "UNENFORCED")

        // The App Check API cannot be read: the kill goes through, and the audit log says so.
        #expect(try fake.rollout(["set", "100", "--reason", "again", "--force"]).status == 0)
        try fake.fault("unavailable", match: "appcheck_get", count: 50)
        let blind = try fake.rollout(["kill", "--reason", "again"], environment: ["ROLLOUT_FIREBASE_TIMEOUT": "2"])
        #expect(blind.status == 0, "\(blind.stderr)")
        let unread = try Self.audit(fake).filter { ($0["detail"]?.stringValue ?? "").hasPrefix("could not be read before a kill") }
        #expect(unread.count == 1, "\(unread)")
    }

    /// App Check answers 200 to a change it did not apply (the service still ENFORCED under the same etag): the
    /// kill is refused with the command to run and publishes nothing, `enforcement set` fails, and the audit log
    /// says "not applied", never "applied".
    @Test func aChangeAnswered200ButNotAppliedIsNeverTakenAsApplied() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "100", "--reason", "done", "--force"]).status == 0)
        try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "ENFORCED"])
        let head = try fake.headNumber()
        func enforcementRecords() throws -> [JSONValue] {
            try Self.audit(fake).filter { ($0["action"]?.stringValue ?? "").hasPrefix("appcheck enforcement") }
        }

        try fake.fault("ok_unapplied", match: "appcheck_patch", count: 1)
        let kill = try fake.rollout(["kill", "--reason", "incident"])
        #expect(try fake.stat("faults_pending") == 0, "the lie was told")
        #expect(kill.status == 4, "\(kill.stdout)\(kill.stderr)")
        #expect(kill.stderr.contains("rollout enforcement set firestore.googleapis.com unenforced"), "\(kill.stderr)")
        #expect(try fake.headNumber() == head, "nothing published")
        #expect(try Self.modes(fake)["firestore.googleapis.com"] == "ENFORCED")
        var records = try enforcementRecords()
        #expect(!records.contains { ($0["detail"]?.stringValue ?? "").hasPrefix("applied") }, "\(records)")
        #expect(records.first?["detail"]?.stringValue?.hasPrefix("not applied: App Check answered") == true, "\(records)")

        try fake.fault("ok_unapplied", match: "appcheck_patch", count: 1)
        let set = try fake.rollout(["enforcement", "set", "firestore.googleapis.com", "unenforced", "--reason", "lower"])
        #expect(set.status != 0, "\(set.stdout)\(set.stderr)")
        #expect(!set.stdout.contains("ENFORCED → ENFORCED"), "\(set.stdout)")
        #expect(try Self.modes(fake)["firestore.googleapis.com"] == "ENFORCED")
        records = try enforcementRecords()
        #expect(!records.contains { ($0["detail"]?.stringValue ?? "").hasPrefix("applied") }, "\(records)")
        #expect(records.first?["detail"]?.stringValue?.hasPrefix("not applied: App Check answered") == true, "\(records)")
        #expect(try fake.rollout(["audit", "verify"]).status == 0)

        // Told the truth, both go through.
        #expect(try fake.rollout(["kill", "--reason", "incident"]).status == 0)
        #expect(try Self.modes(fake)["firestore.googleapis.com"] == "UNENFORCED" && fake.headNumber() == head + 1)
    }

    /// The App Check API accepts the connection and never answers: the kill does not wait out the retries every
    /// other call has (5 attempts of 30 seconds); it reads once within a few seconds, goes ahead, and the audit
    /// log says enforcement could not be read.
    @Test func aKillDoesNotWaitOnASilentAppCheckAPI() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "100", "--reason", "done", "--force"]).status == 0)
        let head = try fake.headNumber()
        try fake.fault("delay_before", match: "appcheck_get", count: 20, seconds: 300)
        let started = Date()
        let kill = try fake.rollout(["kill", "--reason", "incident"])
        let took = Date().timeIntervalSince(started)
        try fake.clearFaults()
        #expect(kill.status == 0, "\(kill.stderr)")
        #expect(took < 25, "the kill waited \(took) s on the App Check API")
        #expect(try fake.headNumber() == head + 1)
        let unread = try Self.audit(fake).filter { ($0["detail"]?.stringValue ?? "").hasPrefix("could not be read before a kill") }
        #expect(unread.count == 1, "\(unread)")
    }

    static let firestore = "firestore.googleapis.com"

    /// The enforcement records of `service` whose detail starts with `prefix`.
    static func details(_ fake: FakeFirebase, _ service: String, _ prefix: String) throws -> [JSONValue] {
        try audit(fake).filter {
            ($0["action"]?.stringValue ?? "").hasPrefix("appcheck enforcement \(service)")
                && ($0["detail"]?.stringValue ?? "").hasPrefix(prefix)
        }
    }

    /// Arms a change whose outcome cannot be known: the read before it passes, the change meets `patch`, and every
    /// read to settle it is answered 503.
    static func armUnknown(_ fake: FakeFirebase, patch: String) throws {
        try fake.fault("delay_before", match: "appcheck_get", count: 1, seconds: 0)
        try fake.fault(patch, match: "appcheck_patch", count: 1)
        try fake.fault("unavailable", match: "appcheck_get", count: 20)
    }

    /// A change sent whose answer is lost, and the service cannot be read to settle it: the outcome is unknown, so
    /// the audit log says "answer lost, not yet known", never "not applied"; the next command that touches the
    /// service (`set` finding it in that mode, `show`, a kill) settles it once, as what the service shows.
    @Test func aChangeWhoseAnswerIsLostIsSettledByTheNextCommand() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        // Applied, and its answer dropped.
        try Self.armUnknown(fake, patch: "drop_after")
        let lost = try fake.rollout(["enforcement", "set", Self.firestore, "unenforced", "--reason", "metrics"])
        try fake.clearFaults()
        #expect(lost.status == 1, "\(lost.stdout)\(lost.stderr)")
        #expect(lost.stderr.contains("not yet known"), "\(lost.stderr)")
        #expect(try Self.modes(fake)[Self.firestore] == "UNENFORCED")
        #expect(try Self.details(fake, Self.firestore, "not applied").isEmpty)
        #expect(try Self.details(fake, Self.firestore, "answer lost, not yet known").count == 1)

        // The same change again finds it UNENFORCED: the open request is closed as applied, not passed over.
        let again = try fake.rollout(["enforcement", "set", Self.firestore, "unenforced", "--reason", "metrics"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("settled: ") && again.stdout.contains("UNENFORCED already"), "\(again.stdout)")
        #expect(try Self.details(fake, Self.firestore, "applied (settled later").count == 1)
        #expect(try fake.rollout(["enforcement", "show"]).status == 0)
        #expect(try Self.details(fake, Self.firestore, "applied").count == 1, "settled once")

        // Answered 503 and not applied, the reads failing: unknown too; `enforcement show` settles it as not applied.
        let storage = "firebasestorage.googleapis.com"
        try Self.armUnknown(fake, patch: "unavailable")
        let unknown = try fake.rollout(["enforcement", "set", storage, "unenforced", "--reason", "metrics"])
        try fake.clearFaults()
        #expect(unknown.status == 1, "\(unknown.stdout)\(unknown.stderr)")
        #expect(try Self.details(fake, storage, "not applied").isEmpty)
        let show = try fake.rollout(["enforcement", "show"])
        #expect(show.status == 0 && show.stderr.contains("settled: "), "\(show.stderr)")
        #expect(try Self.details(fake, storage, "not applied (settled later").count == 1)
        #expect(try Self.modes(fake)[storage] == nil)

        // A kill settles one from the reading it makes anyway.
        let auth = "identitytoolkit.googleapis.com"
        try Self.armUnknown(fake, patch: "drop_after")
        #expect(try fake.rollout(["enforcement", "set", auth, "unenforced", "--reason", "metrics"]).status == 1)
        try fake.clearFaults()
        #expect(try fake.rollout(["kill", "--reason", "drill"]).status == 0)
        #expect(try Self.details(fake, auth, "applied (settled later").count == 1)
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }

    /// `enforcement set` killed (SIGKILL) while Firebase holds back its answer to a change it applied: the request
    /// stays open in the audit log, and the next command settles it as applied, once.
    @Test func aChangeKilledInFlightIsSettledByTheNextCommand() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        try fake.fault("delay_after", match: "appcheck_patch", count: 1, seconds: 60)
        let killed = try FirebaseInterruptionTests.start(
            fake, ["enforcement", "set", Self.firestore, "unenforced", "--reason", "metrics"])
        try FirebaseInterruptionTests.waitUntil("Firebase to apply it") {
            try Self.modes(fake)[Self.firestore] == "UNENFORCED"
        }
        FirebaseInterruptionTests.kill9(killed)
        #expect(try Self.details(fake, Self.firestore, "applied").isEmpty)

        let show = try fake.rollout(["enforcement", "show"])
        #expect(show.status == 0 && show.stderr.contains("settled: "), "\(show.stderr)")
        #expect(try Self.details(fake, Self.firestore, "applied (settled later").count == 1)
        #expect(try fake.rollout(["enforcement", "show"]).status == 0)
        #expect(try Self.details(fake, Self.firestore, "applied").count == 1, "settled once")

        // Killed while Firebase still holds the change unapplied: it may yet be applied, so it is neither recorded
        // as not applied nor sent over by the next `set`.
        let storage = "firebasestorage.googleapis.com"
        try fake.fault("delay_before", match: "appcheck_patch", count: 1, seconds: 30)
        let held = try FirebaseInterruptionTests.start(
            fake, ["enforcement", "set", storage, "unenforced", "--reason", "metrics"])
        try FirebaseInterruptionTests.waitUntil("the request to be recorded") {
            try Self.audit(fake).contains {
                ($0["action"]?.stringValue ?? "").hasPrefix("appcheck enforcement \(storage)")
                    && ($0["to"]?.stringValue ?? "").hasPrefix("requested")
            }
        }
        FirebaseInterruptionTests.kill9(held)
        let over = try fake.rollout(["enforcement", "set", storage, "unenforced", "--reason", "metrics"])
        #expect(over.status == 1 && over.stderr.contains("may still be applied"), "\(over.stdout)\(over.stderr)")
        #expect(try fake.rollout(["enforcement", "show"]).status == 0)
        #expect(try Self.details(fake, storage, "not applied").isEmpty)
        #expect(try Self.details(fake, storage, "applied").isEmpty)
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }
}
