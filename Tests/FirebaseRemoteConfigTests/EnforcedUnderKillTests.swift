import FirebaseFake
import Foundation
import JSON
import TestSupport
import Testing

/// App Check enforcement left on while the flag no longer gives App Attest to everyone: a colleague kills the flag
/// in the Firebase Console while Firestore is ENFORCED (or rollout's own kill could not read enforcement). Every user
/// without App Attest is rejected; the one assessment (status, status --check, watch) says so, HALT, with the
/// command that lowers the service. Through the built binary against the strict fake's App Check API.
@Suite(.serialized)
struct EnforcedUnderKillTests {
    static let firestore = "firestore.googleapis.com"

    /// At 100% with `mode` on Firestore (nil: never configured, OFF).
    static func everyoneWith(_ mode: String?) throws -> FakeFirebase {
        let fake = try FakeFirebase(template: existingTemplate)
        try #require(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        try #require(try fake.rollout(["set", "100", "--reason", "done", "--force"]).status == 0)
        if let mode {
            try fake.control("POST", "/_fake/appcheck", ["service": .string(firestore), "mode": .string(mode)])
        }
        return fake
    }

    /// The rollout's condition serves `"false"`: what a kill in the Firebase Console leaves.
    static func killInTheConsole(_ fake: FakeFirebase) throws {
        var head = try #require(try fake.head().objectValue)
        var parameters = try #require(head["parameters"]?.objectValue)
        var flag = try #require(parameters["AppAttestEnabled"]?.objectValue)
        var values = try #require(flag["conditionalValues"]?.objectValue)
        values["app_attest_rollout"] = ["value": "false"]
        flag["conditionalValues"] = .object(values)
        parameters["AppAttestEnabled"] = .object(flag)
        head["parameters"] = .object(parameters)
        head["version"] = nil
        try fake.publishAsColleague(.object(head), user: "carol@example.com", description: "console kill")
    }

    static func findings(_ json: JSONValue) -> [JSONValue] { json["assessment"]?["findings"]?.arrayValue ?? [] }

    @Test func enforcedUnderAConsoleKillHalts() throws {
        let fake = try Self.everyoneWith("ENFORCED")
        try Self.killInTheConsole(fake)

        let text = try fake.rollout(["status"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(
            text.stdout.contains(
                "✗ HALT: App Check enforces firestore.googleapis.com while the flag gives App Attest to nobody"),
            "\(text.stdout)")
        #expect(
            text.stdout.contains("run 'rollout enforcement set firestore.googleapis.com unenforced --reason TEXT'"),
            "\(text.stdout)")
        #expect(
            text.stdout.contains("App Check") && text.stdout.contains("ENFORCED: firestore.googleapis.com"),
            "\(text.stdout)")

        let json = try fake.json(["status"])
        let assessment = try #require(json["assessment"])
        #expect(assessment["level"]?.stringValue == "HALT", "\(assessment)")
        #expect(assessment["enforcement"]?["known"] == .bool(true), "\(assessment)")
        #expect(assessment["enforcement"]?["enforced"] == .array([.string(Self.firestore)]), "\(assessment)")

        // README's exit table: 7 for a HALT, from status --check and watch alike.
        let check = try fake.rollout(["status", "--check"])
        #expect(check.status == 7, "exit \(check.status): \(check.stdout) \(check.stderr)")
        let watch = try fake.rollout(["watch", "--looks", "1"])
        #expect(watch.status == 7, "exit \(watch.status): \(watch.stdout) \(watch.stderr)")
        #expect(watch.stdout.contains("App Check enforces firestore.googleapis.com"), "\(watch.stdout)")

        // The remedy named clears it.
        let lower = try fake.rollout(["enforcement", "set", Self.firestore, "unenforced", "--reason", "flag killed"])
        #expect(lower.status == 0, "\(lower.stderr)")
        let after = try fake.json(["status"])
        #expect(!Self.findings(after).contains { ($0["text"]?.stringValue ?? "").contains("App Check") }, "\(after)")
    }

    @Test func enforcedAtOneHundredPercentIsNoFinding() throws {
        let fake = try Self.everyoneWith("ENFORCED")
        let json = try fake.json(["status"])
        #expect(json["assessment"]?["enforcement"]?["enforced"] == .array([.string(Self.firestore)]), "\(json)")
        #expect(!Self.findings(json).contains { ($0["text"]?.stringValue ?? "").contains("App Check") }, "\(json)")
        #expect(json["assessment"]?["level"]?.stringValue != "HALT", "\(json)")
    }

    @Test(arguments: [nil, "OFF", "UNENFORCED"] as [String?])
    func notEnforcedUnderAKillIsNoFinding(_ mode: String?) throws {
        let fake = try Self.everyoneWith(mode)
        try Self.killInTheConsole(fake)
        let json = try fake.json(["status"])
        #expect(json["assessment"]?["enforcement"]?["known"] == .bool(true), "\(json)")
        #expect(json["assessment"]?["enforcement"]?["enforced"] == .array([]), "\(json)")
        #expect(!Self.findings(json).contains { ($0["text"]?.stringValue ?? "").contains("App Check") }, "\(json)")
        #expect(json["assessment"]?["level"]?.stringValue != "HALT", "\(json)")
    }

    /// App Check cannot be read: the state is shown as unknown, never claimed ENFORCED.
    @Test func unreadableEnforcementIsUnknown() throws {
        let fake = try Self.everyoneWith("ENFORCED")
        try Self.killInTheConsole(fake)
        try fake.fault("unavailable", match: "appcheck_get", count: 50)

        let text = try fake.rollout(["status"], environment: ["ROLLOUT_FIREBASE_TIMEOUT": "2"])
        #expect(text.status == 0, "\(text.stderr)")
        #expect(text.stdout.contains("unknown: could not be read"), "\(text.stdout)")
        #expect(!text.stdout.contains("App Check enforces"), "\(text.stdout)")

        let json = try fake.json(["status"])
        let enforcement = try #require(json["assessment"]?["enforcement"])
        #expect(enforcement["known"] == .bool(false), "\(enforcement)")
        #expect(enforcement["enforced"] == .array([]), "\(enforcement)")
        #expect(enforcement["failure"]?.stringValue != nil, "\(enforcement)")
        // Never read in this process: unknown, no finding (a credential that may not read App Check would otherwise
        // hold every verdict at WATCH); the read that works judges it (the tests above), and a read that fails after
        // one that saw ENFORCED holds (EnforcementFindingTests).
        #expect(!Self.findings(json).contains { ($0["text"]?.stringValue ?? "").contains("App Check") }, "\(json)")
    }
}
