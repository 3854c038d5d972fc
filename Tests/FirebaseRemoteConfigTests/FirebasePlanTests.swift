import FirebaseFake
import Foundation
import JSON
import TestSupport
import Testing

/// A ramp plan behind `--store firebase:PROJECT` (the plan in the state store), through the built binary against
/// the strict fake: the runner publishes its step to Firebase (its publish commits its intent first, outside the
/// plan's transaction) and records the step; the audit log verifies.
@Suite(.serialized)
struct FirebasePlanTests {
    @Test func aPlanStepIsPublishedToFirebase() throws {
        let fake = try FakeFirebase()
        let adopt = try fake.rollout(["init", "--seed", "rollout-plan"])
        try #require(adopt.status == 0, "\(adopt.stderr)")
        let head = try fake.headNumber()
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("fb-\(UUID().uuidString).plan").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try "name ramp\nstep 5% hold 1h\nstep 10%\n".write(toFile: file, atomically: true, encoding: .utf8)
        let started = try fake.rollout(["plan", "start", file])
        #expect(started.status == 0, "\(started.stderr)")
        let run = try fake.rollout(["plan", "run", "--looks", "1"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("published version \(head + 1): plan 'ramp' step 1/2: 5%"), "\(run.stdout)")
        #expect(try fake.headNumber() == head + 1)
        #expect(try fake.json(["status"])["rollout"]?["percentage"]?.stringValue == "5")
        // A second look waits at step 1 (its hold), publishing nothing.
        #expect(try fake.rollout(["plan", "run", "--looks", "1"]).status == 0)
        #expect(try fake.headNumber() == head + 1)
        let status = try fake.json(["plan", "status"])
        #expect(status["step"]?.numberValue?.int64 == 1, "\(status)")
        #expect(try fake.rollout(["plan", "pause", "--reason", "lunch"]).status == 0)
        #expect(try fake.json(["plan", "status"])["phase"]?.stringValue == "paused")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
    }

    /// A plan that ends with `step enforce SERVICE` waits at its 100% step like at any other step until the verdict
    /// is OK (nothing sent while it is not); the same plan on a store file is refused at `plan start` with exit 4
    /// (enforcement is a Firebase project's).
    @Test func aPlanEndsWithEnforcement() throws {
        let fake = try FakeFirebase()
        try #require(try fake.rollout(["init", "--seed", "rollout-plan"]).status == 0)
        let set = try fake.rollout(["set", "100", "--reason", "everyone"])
        try #require(set.status == 0, "\(set.stderr)")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("fb-\(UUID().uuidString).plan").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        try "name finish\nstep 100%\nstep enforce firestore.googleapis.com\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        let started = try fake.rollout(["plan", "start", file])
        #expect(started.status == 0, "\(started.stderr)")
        #expect(started.stdout.contains("100% → enforce firestore.googleapis.com"), "\(started.stdout)")
        let head = try fake.headNumber()

        // Look 1 adopts the published 100%; then the plan judges the 100% step like any other: no telemetry is
        // HOLD, and the plan waits (on hold wait) without asking for enforcement.
        let run = try fake.rollout(["plan", "run", "--looks", "2", "--interval", "0.01"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("HOLD"), "\(run.stdout)")
        #expect(try EnforcementCLITests.modes(fake)["firestore.googleapis.com"] == nil)
        let waiting = try fake.json(["plan", "status"])
        #expect(waiting["step"]?.numberValue?.int64 == 1 && waiting["phase"]?.stringValue == "running", "\(waiting)")
        #expect(waiting["enforce"]?.arrayValue?.first?.stringValue == "firestore.googleapis.com", "\(waiting)")
        #expect(try fake.headNumber() == head)
        #expect(try fake.rollout(["audit", "verify"]).status == 0)

        let dir = try TestSupport.temporaryDirectory("plan-enforce-file")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(bin, ["init", "--store", store]).status == 0)
        let refused = try TestSupport.run(bin, ["plan", "start", file, "--store", store])
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(refused.stderr.contains("--store firebase:PROJECT"), "\(refused.stderr)")
        #expect(try TestSupport.run(bin, ["plan", "status", "--store", store]).stdout.contains("finish") == false)
    }

    /// A healthy fleet's history, as native events: installations entering throughout `[from, to)` (seconds since
    /// the epoch), each then opening a session every ten minutes with a successful attestation and a fetch of
    /// `version`; one crash in fifty sessions, the same in both groups.
    static func healthyEvents(from: Int64, to: Int64, enabled: Int, control: Int, version: Int, prefix: String) -> String {
        var lines: [String] = []
        var n = 0
        for (cohort, count) in [("enabled", enabled), ("control", control)] where count > 0 {
            let p = cohort == "enabled" ? "appAttest" : "deviceCheck"
            for i in 0..<count {
                let id = "\(prefix)-\(cohort)-\(i)"
                let enter = from + Int64(i) * (to - from - 600) / Int64(count)
                for second in stride(from: enter, to: to, by: 600) {
                    let t = second * 1_000_000
                    lines.append(#"{"t":\#(t),"i":"\#(id)","k":"session","c":"\#(cohort)","os":"17.4","app":"3.2.1"}"#)
                    lines.append(#"{"t":\#(t + 1),"i":"\#(id)","k":"success","c":"\#(cohort)","p":"\#(p)","os":"17.4","app":"3.2.1"}"#)
                    lines.append(#"{"t":\#(t + 2),"i":"\#(id)","k":"fetch","c":"\#(cohort)","v":\#(version),"os":"17.4","app":"3.2.1"}"#)
                    n += 1
                    if n % 50 == 0 {
                        lines.append(#"{"t":\#(t + 3),"i":"\#(id)","k":"crash","c":"\#(cohort)","os":"17.4","app":"3.2.1"}"#)
                    }
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The ramp's last stage end to end: a fleet healthy at 50% (with its control group) and then for most of an hour
    /// at 100%, a plan that ends with `step enforce`: the runner sets the service ENFORCED through the enforcement
    /// gate (100% with an OK verdict for `enforcement.ok-for-minutes`), audited as requested and applied, and the
    /// plan is done; a kill afterwards first sets the service UNENFORCED.
    @Test func aHealthyRampEndsWithEnforcement() throws {
        let fake = try FakeFirebase()
        let now = Int64(Date().timeIntervalSince1970)
        // The history is published with shifted times: 50% two hours ago, 100% an hour ago.
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": -7300])
        try #require(try fake.rollout(["init", "--seed", "rollout-end"]).status == 0)
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": -7200])
        let half = try fake.rollout(["set", "50", "--reason", "half"])
        try #require(half.status == 0, "\(half.stderr)")
        let at50 = try fake.headNumber()
        let events = fake.directory.appendingPathComponent("events.ndjson")
        try Self.healthyEvents(from: now - 7190, to: now - 3490, enabled: 5000, control: 5000, version: at50, prefix: "a")
            .write(to: events, atomically: true, encoding: .utf8)
        let first = try fake.rollout(["ingest", events.path, "--quiet"])
        try #require(first.status == 0, "\(first.stderr)")
        // 100% as published 58 minutes ago, judged on the telemetry of then (libfaketime for the binary).
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": -3480])
        let full = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["set", "100", "--reason", "everyone", "--state", fake.stateLocation],
            environment: fake.environment(operator: "ana@example.com").merging(["FAKETIME_DONT_FAKE_MONOTONIC": "1"]) { a, _ in a },
            fakeTime: "-58m")
        try #require(full.status == 0, "\(full.stderr)")
        let at100 = try fake.headNumber()
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": 0])
        try Self.healthyEvents(from: now - 3470, to: now - 30, enabled: 5000, control: 0, version: at100, prefix: "b")
            .write(to: events, atomically: true, encoding: .utf8)
        let second = try fake.rollout(["ingest", events.path, "--quiet"])
        try #require(second.status == 0, "\(second.stderr)")
        let status = try fake.json(["status"])
        let verdict = status["assessment"]?["level"]?.stringValue
        print("end of ramp: \(verdict ?? "no verdict"): \(status["assessment"]?["reason"]?.stringValue ?? "")")
        try #require(verdict == "OK", "the healthy fleet at 100% must be OK: \(status)")
        #expect(try fake.rollout(["policy", "set", "enforcement.ok-for-minutes", "30"]).status == 0)

        let file = fake.directory.appendingPathComponent("end.plan").path
        try "name end\nstep 100%\nstep enforce firestore.googleapis.com\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        #expect(try fake.rollout(["plan", "start", file]).status == 0)
        let run = try fake.rollout(["plan", "run", "--looks", "3", "--interval", "0.01"])
        #expect(run.status == 0, "\(run.stderr)")
        print("end of ramp: \(run.stdout)")
        #expect(run.stdout.contains("firestore.googleapis.com ENFORCED"), "\(run.stdout)")
        #expect(try EnforcementCLITests.modes(fake)["firestore.googleapis.com"] == "ENFORCED")
        let done = try fake.json(["plan", "status"])
        #expect(done["phase"]?.stringValue == "done", "\(done)")
        let records = try EnforcementCLITests.audit(fake).filter {
            ($0["action"]?.stringValue ?? "").contains("enforcement")
        }
        #expect(
            records.contains { ($0["to"]?.stringValue ?? "").hasPrefix("requested (plan 'end' step 2/2") },
            "requested: \(records)")
        #expect(
            records.contains {
                $0["from"]?.stringValue == "OFF" && $0["to"]?.stringValue == "ENFORCED"
                    && ($0["detail"]?.stringValue ?? "").hasPrefix("applied (plan 'end' step 2/2")
            }, "applied: \(records)")
        #expect(try fake.headNumber() == at100, "enforcement publishes no template")

        // A kill now first lowers enforcement, so it never locks out the users it switches off.
        let kill = try fake.rollout(["kill", "--reason", "drill"])
        #expect(kill.status == 0, "\(kill.stderr)")
        #expect(try EnforcementCLITests.modes(fake)["firestore.googleapis.com"] == "UNENFORCED")
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }

    /// A fleet healthy at 50% (published two hours ago, with its control group) and then at 100%, which is published
    /// now: the verdict is OK, and the flag has been at 100% for no time at all.
    static func healthyAndFullJustNow(_ fake: FakeFirebase) throws {
        let now = Int64(Date().timeIntervalSince1970)
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": -7300])
        try #require(try fake.rollout(["init", "--seed", "rollout-end"]).status == 0)
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": -7200])
        try #require(try fake.rollout(["set", "50", "--reason", "half"]).status == 0)
        _ = try fake.control("POST", "/_fake/clock", ["offset_seconds": 0])
        let at50 = try fake.headNumber()
        let events = fake.directory.appendingPathComponent("events.ndjson")
        try (Self.healthyEvents(from: now - 7190, to: now - 3490, enabled: 5000, control: 5000, version: at50, prefix: "a")
            + Self.healthyEvents(from: now - 3470, to: now - 30, enabled: 5000, control: 0, version: at50 + 1, prefix: "b"))
            .write(to: events, atomically: true, encoding: .utf8)
        let ingest = try fake.rollout(["ingest", events.path, "--quiet"])
        try #require(ingest.status == 0, "\(ingest.stderr)")
        let full = try fake.rollout(["set", "100", "--reason", "everyone", "--override-guardrail"])
        try #require(full.status == 0, "\(full.stderr)")
        let status = try fake.json(["status"])
        try #require(status["assessment"]?["level"]?.stringValue == "OK", "\(status)")
    }

    /// The gate counts "OK at 100%" from when the flag reached 100%, not from the version before it: with 50%
    /// published two hours ago and 100% just now, ENFORCED is refused (exit 4, "0 min" at 100%) until
    /// `enforcement.ok-for-minutes` have passed, by `enforcement set` and by a plan's enforce step alike.
    @Test func theGateCountsFromWhenTheFlagReached100() throws {
        let fake = try FakeFirebase()
        try Self.healthyAndFullJustNow(fake)
        #expect(try fake.rollout(["policy", "set", "enforcement.ok-for-minutes", "60"]).status == 0)
        let dry = try fake.rollout(
            ["enforcement", "set", "firestore.googleapis.com", "enforced", "--reason", "ramp done", "--dry-run"])
        #expect(dry.status == 4, "\(dry.stdout)\(dry.stderr)")
        #expect(dry.stderr.contains("OK at 100% for 0 min, less than the 1 h 0 min required"), "\(dry.stderr)")

        let file = fake.directory.appendingPathComponent("end.plan").path
        try "name end\nstep 100%\nstep enforce firestore.googleapis.com\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try fake.rollout(["plan", "start", file]).status == 0)
        let run = try fake.rollout(["plan", "run", "--looks", "3", "--interval", "0.01"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("for 0 min"), "\(run.stdout)")
        #expect(try EnforcementCLITests.modes(fake)["firestore.googleapis.com"] == nil)
        #expect(try fake.json(["plan", "status"])["phase"]?.stringValue == "running")
    }

    /// A 503 from App Check on a plan's enforce step makes the runner wait and try again (like a refusal of the
    /// gate), not end with exit 1; a permanent error (400) still ends it.
    @Test func aTransientAppCheckErrorMakesThePlanWait() throws {
        let fake = try FakeFirebase()
        try Self.healthyAndFullJustNow(fake)
        #expect(try fake.rollout(["policy", "set", "enforcement.ok-for-minutes", "0"]).status == 0)
        let file = fake.directory.appendingPathComponent("end.plan").path
        try "name end\nstep 100%\nstep enforce firestore.googleapis.com\nstep enforce firebasestorage.googleapis.com\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try fake.rollout(["plan", "start", file]).status == 0)

        try fake.fault("unavailable", match: "appcheck_patch", count: 1)
        let waited = try fake.rollout(["plan", "run", "--looks", "3", "--interval", "0.01"])
        #expect(try fake.stat("faults_pending") == 0, "the 503 was met")
        #expect(waited.status == 0, "\(waited.stdout)\(waited.stderr)")
        #expect(waited.stdout.contains("waiting: App Check could not be asked"), "\(waited.stdout)")
        #expect(try EnforcementCLITests.modes(fake)["firestore.googleapis.com"] == nil)
        #expect(try fake.json(["plan", "status"])["phase"]?.stringValue == "running")

        try fake.fault("bad_request", match: "appcheck_patch", count: 1)
        let ended = try fake.rollout(["plan", "run", "--looks", "2", "--interval", "0.01"])
        #expect(ended.status == 1, "\(ended.stdout)\(ended.stderr)")

        let done = try fake.rollout(["plan", "run", "--looks", "5", "--interval", "0.01"])
        #expect(done.status == 0, "\(done.stdout)\(done.stderr)")
        let modes = try EnforcementCLITests.modes(fake)
        #expect(modes["firestore.googleapis.com"] == "ENFORCED" && modes["firebasestorage.googleapis.com"] == "ENFORCED", "\(modes)")
        #expect(try fake.json(["plan", "status"])["phase"]?.stringValue == "done")
        #expect(try fake.rollout(["audit", "verify"]).status == 0)
    }
}
