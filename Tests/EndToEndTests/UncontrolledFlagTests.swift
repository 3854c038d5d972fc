import FirebaseFake
import Foundation
import JSON
import RemoteConfig
import Rollout
import Testing
import TestSupport

/// A rollout that no longer controls its flag: someone set `AppAttestEnabled`'s default to `"true"` in the Firebase
/// Console while it rolled at 10%. Every installation gets the flag, whatever the band says; `init` and every
/// publish of rollout refuse to make such a template, but nothing stops another editor of the project.
@Suite("A flag served by something other than the rollout", .serialized)
struct UncontrolledFlagTests {
    static func rollingWithDefaultTrue() throws -> FakeFirebase {
        let fake = try FakeFirebase(template: existingTemplate)
        try #require(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        try #require(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        var head = try #require(try fake.head().objectValue)
        var parameters = try #require(head["parameters"]?.objectValue)
        var flag = try #require(parameters["AppAttestEnabled"]?.objectValue)
        flag["defaultValue"] = ["value": "true"]
        parameters["AppAttestEnabled"] = .object(flag)
        head["parameters"] = .object(parameters)
        head["version"] = nil
        try fake.publishAsColleague(.object(head), user: "carol@example.com", description: "console edit")
        return fake
    }

    @Test func statusSaysWhoGetsTheFlagAndHolds() throws {
        let fake = try Self.rollingWithDefaultTrue()
        let text = try fake.rollout(["status"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(
            text.stdout.contains("[0, 10] by the rollout; past it, \"true\" for 89.999998% of installations that a kill would leave on"),
            "\(text.stdout)")
        #expect(text.stdout.contains("HOLD exposure: the rollout does not control the flag"), "\(text.stdout)")

        let json = try fake.json(["status"])
        let assessment = try #require(json["assessment"])
        #expect(assessment["servedOutsideRollout"]?.stringValue == "89.999998%", "\(assessment)")
        #expect(assessment["level"]?.stringValue == "HOLD", "\(assessment)")
        let findings = assessment["findings"]?.arrayValue ?? []
        #expect(
            findings.contains { $0["topic"]?.stringValue == "exposure" && $0["level"]?.stringValue == "HOLD" },
            "\(findings)")

        // `status --check` holds too: a script that raises on OK does not raise.
        #expect(try fake.rollout(["status", "--check"]).status != 0)
    }

    @Test func aKillThatLeavesTheFlagOnPublishesButExitsOne() throws {
        let fake = try Self.rollingWithDefaultTrue()
        let before = try fake.headNumber()
        let kill = try fake.rollout(["kill", "--reason", "spike"])
        #expect(kill.status == 1, "exit \(kill.status): \(kill.stdout) \(kill.stderr)")
        #expect(kill.stdout.contains("published version \(before + 1)"), "the kill still narrows what is served: \(kill.stdout)")
        #expect(kill.stderr.contains("is still \"true\" for 89.999998% of installations"), "\(kill.stderr)")
        #expect(try fake.headNumber() == before + 1)

        // Killed already: no change, and still exit 1 with the same words.
        let again = try fake.rollout(["kill", "--reason", "spike"])
        #expect(again.status == 1, "\(again.stdout) \(again.stderr)")
        #expect(again.stdout.contains("no change"), "\(again.stdout)")
        #expect(again.stderr.contains("is still \"true\""), "\(again.stderr)")
        #expect(try fake.headNumber() == before + 1)
    }

    @Test func aRolloutTheFlagFollowsHasNoSuchFinding() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        try #require(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        try #require(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        let json = try fake.json(["status"])
        #expect(json["assessment"]?["servedOutsideRollout"] == .null, "\(json)")
        let kill = try fake.rollout(["kill", "--reason", "spike"])
        #expect(kill.status == 0, "\(kill.stderr)")
        #expect(!kill.stderr.contains("still"), "\(kill.stderr)")
    }
}
