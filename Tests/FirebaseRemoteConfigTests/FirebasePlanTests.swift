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
}
