import FirebaseFake
import Foundation
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
}
