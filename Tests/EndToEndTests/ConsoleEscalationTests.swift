import Foundation
import Testing
import TestSupport

/// Issue 35 in a real terminal, through `rollout demo`: nothing flaps after a rollback to 0% (item 2), and a
/// healthy rollout left at 100% does not reach a false HALT (item 11).
@Suite("demo: escalation without flapping, no false HALT at 100%", .serialized)
struct ConsoleEscalationTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    /// Watches the screen for `seconds` of wall time (polling, not sleeping), failing at once if `forbidden`
    /// shows; returns the last screen.
    static func watch(_ session: TerminalSession, seconds: TimeInterval, never forbidden: String) throws -> String {
        let deadline = Date(timeIntervalSinceNow: seconds)
        var screen = try session.screen()
        while Date() < deadline {
            screen = try session.screen()
            if screen.contains(forbidden) { return screen }
            usleep(50_000)
        }
        return screen
    }

    /// The demo's simulated time of day in the header, in seconds since midnight.
    static func simulatedSeconds(_ screen: String) -> Int? {
        guard let t = DemoControlsTests.simulatedTime(screen) else { return nil }
        let parts = t.split(separator: ":").compactMap { Int($0) }
        guard parts.count == 3 else { return nil }
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    }

    /// The simulated time, once the header shows it (within 15 s): a verdict that rose moments ago replaces the
    /// header with itself for six seconds (`ConsoleState.flashFor`), and a refusal or a publish is such a moment.
    static func simulatedSeconds(of session: TerminalSession) throws -> Int {
        let screen = try session.waitUntil("the header's simulated time", timeout: 15) { simulatedSeconds($0) != nil }
        return try #require(simulatedSeconds(screen), "\(screen)")
    }

    /// Item 2: after `=` `0` at speed 60 the rollout is not started; the figures counted from "now", which moved
    /// with each refresh, so the verdict said `HOLD data: no telemetry since the rollout started at …` whenever a
    /// simulated minute began and OK once its first event arrived: 26 log lines and bells in 30 s.
    @Test func aRollbackToZeroAtSpeed60DoesNotFlap() throws {
        let f = try Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "busy", "--devices",
            "3000", "--speed", "60",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitUntil("the first telemetry", timeout: 90) { !$0.contains("✓ 0 success") && $0.contains(" ● ") }
        try session.press("=")
        try session.waitFor("Set the percentage")
        try session.type("0")
        try session.press("Enter")
        try session.waitFor("Confirm", timeout: 30)
        try session.press("y")
        try session.waitFor("Published v", timeout: 30)
        // 25 s of wall time are 25 simulated minutes: the old console logged a HOLD at each of them.
        let screen = try Self.watch(session, seconds: 25, never: "no telemetry since the rollout started")
        #expect(!screen.contains("no telemetry since the rollout started"), "\(screen)")
        let holds = screen.split(separator: "\n").filter { $0.contains("‖ HOLD data") }
        #expect(holds.count <= 1, "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 11: the busy scenario (2% of sessions crash in both groups) taken to 100% once OK. The control group
    /// drains away; the old SPRT weighed each later crash at an earlier exposed share and reached HALT about an
    /// hour of simulated time later. Now the verdict compares against the control's rate before it left: OK.
    @Test func aHealthyRolloutAtFullStaysOkForTwoSimulatedHours() throws {
        let f = try Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "busy", "--devices",
            "6000", "--speed", "600",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitUntil("an OK verdict", timeout: 240) { $0.contains("✓ OK  no ") }
        // The guardrail assesses afresh when the change is confirmed. At the edge of enough data a look can still
        // say HOLD ("about 1 more users per arm needed") while the panel, past its hold-down, shows OK (seen in CI):
        // the refusal says so, and a few simulated minutes later there are more users. At most five tries.
        for attempt in 1...5 {
            try session.press("=")
            try session.waitFor("Set the percentage")
            try session.type("100")
            try session.press("Enter")
            try session.waitFor("Confirm", timeout: 30)
            try session.press("y")
            let answer = try session.waitUntil("the reason prompt or a refusal", timeout: 30) {
                $0.contains("Reason for the increase") || $0.contains("Refused by guardrail")
            }
            if answer.contains("Reason for the increase") { break }
            try #require(attempt < 5 && answer.contains("not enough data yet"), "\(answer)")
            let refusedAt = try Self.simulatedSeconds(of: session)
            try session.waitUntil("five more simulated minutes", timeout: 60) {
                guard let now = Self.simulatedSeconds($0) else { return false }
                return (now - refusedAt + 86_400) % 86_400 >= 300
            }
        }
        try session.type("full rollout")
        try session.press("Enter")
        var screen = try session.waitFor("Published v", timeout: 30)
        let start = try Self.simulatedSeconds(of: session)
        // Two simulated hours at 100% (at 600x twelve wall seconds, longer when the machine is busy).
        screen = try session.waitUntil("two simulated hours at 100%", timeout: 300) {
            if $0.contains("✗ HALT") { return true }
            guard let now = Self.simulatedSeconds($0) else { return false }
            return (now - start + 86_400) % 86_400 >= 7_200
        }
        #expect(!screen.contains("✗ HALT"), "\(screen)")
        screen = try session.waitUntil("the comparison against the control's old rate", timeout: 60) {
            $0.contains("control group gone since") || $0.contains("✗ HALT")
        }
        #expect(screen.contains("✓ OK  control group gone since"), "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 3: `--scenario bad-build` stayed `HOLD rejected failures at 71.2%` with no bell and no log line. The
    /// sustained rejections are HALT now: the header flashes, the bell rings, the log has one line for it.
    @Test func aBadBuildsRejectedAttestationsHaltWithOneBell() throws {
        let f = try Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "bad-build", "--devices",
            "6000", "--speed", "600",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        let screen = try session.waitUntil("HALT on rejected attestations", timeout: 300) {
            $0.contains("✗ HALT failures: attestations rejected for")
        }
        #expect(try session.bellRang(), "\(screen)")
        #expect(screen.contains("K kill now"), "\(screen)")
        let lines = screen.split(separator: "\n").filter { $0.contains("✗ HALT failures:") }
        #expect(lines.count == 1, "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 3: throttling changed the reason silently; now it is logged once as a HOLD with the pace to go on at.
    @Test func throttlingIsOneLoggedHoldWithThePace() throws {
        let f = try Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "throttling", "--speed",
            "600",
        ]
        let session = try TerminalSession(command, width: 200, height: 60)
        defer { session.close() }
        let screen = try session.waitUntil("the throttling HOLD in the log", timeout: 300) {
            $0.contains("‖ HOLD failures: Apple is throttling attestations")
        }
        let lines = screen.split(separator: "\n").filter { $0.contains("‖ HOLD failures: Apple is throttling") }
        #expect(lines.count == 1, "\(screen)")
        try session.press("v")
        let pane = try session.waitFor("Why: the verdict")
        #expect(pane.contains("then keep new attestations under"), "\(pane)")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 1: on a store `rollout simulate` writes to, the console's ticks run on simulated time, and a result
    /// expired within milliseconds (`✓ Published` never showed). Results stay until the next key and stay in the
    /// log after it.
    @Test func aResultStaysUntilTheNextKeyAndInTheLog() throws {
        let f = try Fixture(initialized: false)
        let simulation = try TerminalSession([
            f.binary, "simulate", "--scenario", "busy", "--devices", "3000", "--speed", "600", "--duration", "8h",
            "--store", f.store, "--quiet",
        ])
        defer { simulation.close() }
        let deadline = Date(timeIntervalSinceNow: 60)
        // The simulation initialises the store: the console opens once it has its first version.
        while Date() < deadline, try TestSupport.run(f.binary, ["history", "--store", f.store]).status != 0 {
            usleep(100_000)
        }
        let session = try TerminalSession(
            [f.binary, "console", "--store", f.store, "--operator", "ana@example.com"], width: 120, height: 40)
        defer { session.close() }
        try session.waitUntil("the simulation's telemetry", timeout: 90) { !$0.contains("✓ 0 success") && $0.contains(" ● ") }
        try session.press("=")
        try session.waitFor("Set the percentage")
        try session.type("20")
        try session.press("Enter")
        try session.waitFor("Confirm", timeout: 30)
        try session.press("y")
        var screen = try session.waitFor("Published v", timeout: 30)
        let count = { (screen: String) in screen.components(separatedBy: "Published v").count - 1 }
        #expect(count(screen) == 2, "the message and its log line: \(screen)")
        // Ten seconds of wall time are 100 simulated minutes: the message stays (polled, failing once it goes).
        let until = Date(timeIntervalSinceNow: 10)
        while Date() < until {
            screen = try session.screen()
            if count(screen) < 2 { break }
            usleep(100_000)
        }
        #expect(count(screen) == 2, "\(screen)")
        try session.press("?")
        try session.waitFor("Help")
        try session.press("Escape")
        screen = try session.waitUntil("the message gone, its log line kept", timeout: 10) { count($0) == 1 }
        #expect(screen.contains("· Published v"), "the log line: \(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 10: at 3600x a busy machine falls behind the speed by seconds of wall time, hours of simulated time;
    /// the fixed 10-minute limit called the data stale with a bell. Staleness on a live simulation is judged
    /// against its pace now (a few wall seconds' worth).
    @Test func aDemoAt3600xOnABusyMachineIsNotCalledStale() throws {
        let f = try Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "busy", "--devices",
            "20000", "--speed", "3600",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitUntil("the first telemetry", timeout: 120) { !$0.contains("✓ 0 success") && $0.contains(" ● ") }
        let screen = try Self.watch(session, seconds: 25, never: "STALE")
        #expect(!screen.contains("STALE") && !screen.contains("telemetry is stale"), "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// Item 8: a colleague's publish while the reason is typed sent the operator back to the confirm dialog with
    /// Cancel focused and the reason gone, without saying who changed what. The prompt stays, keeps the text, names
    /// the change, and the reason published is the one typed.
    @Test func aPublishWhileTypingAReasonKeepsItAndNamesWhoChangedWhat() throws {
        let f = try Fixture()
        try #require(f.cli(minutesAgo: 10, "set", "10", "--reason", "start").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 10", timeout: 30)
        try session.press("+")
        try session.waitFor("Confirm: nudge", timeout: 30)
        try session.press("y")
        try session.waitFor("Reason for the increase", timeout: 30)
        try session.type("steady for an hour")
        try #require(f.cli("set", "20", "--reason", "colleague", operatorID: "cy@example.com").status == 0)
        var screen = try session.waitFor("by cy@example.com", timeout: 30)
        #expect(screen.contains("Reason for the increase"), "\(screen)")
        #expect(screen.contains("steady for an hour"), "\(screen)")
        #expect(screen.contains("↻ Updated while open: the store moved from v"), "\(screen)")
        try session.type(", then more")
        try session.press("Enter")
        screen = try session.waitFor("Published v", timeout: 30)
        let history = try f.cli("history", "--limit", "1")
        #expect(history.stdout.contains("steady for an hour, then more"), "\(history.stdout)")
        #expect(history.stdout.contains("21%"), "\(history.stdout)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }
}
