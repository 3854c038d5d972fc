import FirebaseFake
import Foundation
import JSON
import RemoteConfig
import Rollout
import Testing
import TestSupport

/// `rollout console --store firebase:PROJECT` in a real terminal (tmux), on the strict fake of Firebase.
///
/// The console polls Firebase every 5 s (`FirebaseWiring.consolePollInterval`: a colleague's publish shows within
/// that time, at 12 reads a minute, far inside the API's quota; apps fetch config far less often), so every wait
/// for a colleague's publish allows one poll interval plus slack for a loaded machine.
@Suite("rollout console on Firebase in a real terminal", .serialized)
struct FirebaseConsoleTests {
    static let poll: TimeInterval = 5

    /// The fake after `init` and `set 10` (version 3), and the console on it as ana@example.com.
    static func start() throws -> (FakeFirebase, TerminalSession) {
        let fake = try FakeFirebase(template: existingTemplate)
        let adopt = try fake.rollout(["init", "--seed", "rollout-2026"], operator: "bob@example.com")
        try #require(adopt.status == 0, "\(adopt.stderr)")
        try #require(try fake.rollout(["set", "10", "--reason", "start"], operator: "bob@example.com").status == 0)
        var environment: [String: String?] = [:]
        for (k, v) in fake.environment(operator: "ana@example.com") { environment[k] = v }
        let session = try TerminalSession(
            [try TestSupport.rolloutBinary(), "console", "--state", fake.statePath], width: 120, height: 40,
            environment: environment)
        return (fake, session)
    }

    /// The colleague's edit in the Firebase console: the rollout set to `percent` on top of the head.
    static func colleagueSets(_ fake: FakeFirebase, percent: Int64, description: String) throws -> Int {
        let head = try RemoteConfigTemplate(json: try fake.head())
        let change = try RolloutPlan.apply(
            .set(MicroPercent(percent: percent)), to: head.strippingVersionInfo(), newSeed: "unused")
        return try fake.publishAsColleague(change.template.json, user: "carol@example.com", description: description)
    }

    @Test func theHeaderNamesTheProjectAndVersionAndAColleaguesPublishShowsWithinAPoll() throws {
        let (fake, session) = try Self.start()
        defer { session.close() }
        let first = try session.waitFor("<= 10", timeout: 20)
        #expect(first.contains("firebase:\(fake.project)"), "\(first)")
        #expect(first.contains("v3") && first.contains("etag-1234"), "the Firebase version and ETag: \(first)")

        // A publish made in the Firebase console (not through rollout) shows within a poll.
        #expect(try Self.colleagueSets(fake, percent: 15, description: "from the Firebase console") == 4)
        let started = Date()
        let after = try session.waitFor("<= 15", timeout: Self.poll + 10)
        #expect(after.contains("v4"), "\(after)")
        print(
            "firebase console: a colleague's publish showed after \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
        )

        // A second rollout client's change too, with its operator in the log.
        #expect(try fake.rollout(["nudge", "+5", "--reason", "from the CLI"], operator: "bob@example.com").status == 0)
        let cli = try session.waitFor("<= 20", timeout: Self.poll + 10)
        #expect(cli.contains("v5") && cli.contains("bob@example.com"), "\(cli)")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }

    @Test func aColleaguesPublishWhileTheConfirmDialogIsOpenShowsTheConflictAndReappliesOnTop() throws {
        let (fake, session) = try Self.start()
        defer { session.close() }
        try session.waitFor("<= 10", timeout: 20)
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")

        // While the dialog is open, a colleague publishes 15% from the Firebase console.
        #expect(try Self.colleagueSets(fake, percent: 15, description: "carol's change") == 4)
        try session.press("Tab", "Enter")
        try session.waitFor("Reason for the increase")
        try session.type("canary healthy")
        try session.press("Enter")
        let conflict = try session.waitFor("Conflict: someone published first", timeout: 20)
        #expect(conflict.contains("prepared on v3"), "\(conflict)")
        #expect(conflict.contains("v4") && conflict.contains("carol@example.com"), "\(conflict)")
        #expect(conflict.contains("re-applied on top: 16%"), "\(conflict)")
        // Nothing of ours was published.
        #expect(try fake.headNumber() == 4)

        // Re-apply on top: a fresh confirm dialog on v4, then the publish as version 5.
        try session.press("Tab", "Enter")
        try session.waitFor("Confirm: nudge +1 point")
        try session.press("Tab", "Enter")
        try session.waitUntil("the reason prompt or the publish") {
            $0.contains("Reason for the increase") || $0.contains("<= 16")
        }
        if try session.screen().contains("Reason for the increase") {
            // The reason typed before the conflict is kept for the re-apply.
            #expect(try session.screen().contains("canary healthy"))
            try session.press("Enter")
        }
        try session.waitFor("<= 16", timeout: 20)
        #expect(try fake.headNumber() == 5)
        let head = try fake.head()
        #expect(head["version"]?["description"]?.stringValue == "canary healthy")
        #expect(
            try RolloutPlan.locate(in: try RemoteConfigTemplate(json: head))?.percentage == MicroPercent(percent: 16))
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }

    /// The condition panel shows each App Check service's enforcement on a Firebase project, ENFORCED first, and
    /// until when a change just made may still be taking effect (Firebase applies it within 15 minutes); a change
    /// made with `rollout enforcement set` shows at the next read of the services.
    @Test func theConditionPanelShowsEnforcementAndItsPropagationWindow() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        try #require(try fake.rollout(["init", "--seed", "rollout-2026"], operator: "bob@example.com").status == 0)
        _ = try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "UNENFORCED"])
        var environment: [String: String?] = [:]
        for (k, v) in fake.environment(operator: "ana@example.com") { environment[k] = v }
        let session = try TerminalSession(
            [try TestSupport.rolloutBinary(), "console", "--state", fake.statePath], width: 120, height: 40,
            environment: environment)
        let first = try session.waitFor("App Check", timeout: 20)
        let firstRow = first.split(separator: "\n").first { $0.contains("App Check") }.map(String.init) ?? ""
        print("console app check row: \(firstRow)")
        #expect(firstRow.contains("firestore UNENFORCED (applies by "), "\(firstRow.filter(\.isASCII))")
        let set = try fake.rollout(
            ["enforcement", "set", "firebasestorage.googleapis.com", "unenforced", "--reason", "metrics"],
            operator: "bob@example.com")
        try #require(set.status == 0, "\(set.stderr)")
        // The services are read again within 30 s.
        func appCheckRow(_ screen: String) -> String {
            screen.split(separator: "\n").first { $0.contains("App Check") }.map(String.init) ?? ""
        }
        let after = try session.waitUntil("the storage service in the App Check row", timeout: 45) {
            let row = appCheckRow($0)
            return row.contains("firebasestorage UNENFORCED") || row.contains(" +1")
        }
        // Both UNENFORCED now: by name, firebasestorage first; firestore beside it or counted.
        let row = appCheckRow(after)
        print("console app check row after: \(row)")
        #expect(row.contains("firebasestorage UNENFORCED (by ") || row.contains("firebasestorage UNENFORCED (applies by "), "\(row.filter(\.isASCII))")
        #expect(row.contains("firestore UNENFORCED") || row.contains(" +1"), "\(row.filter(\.isASCII))")
    }
}
