import Foundation
import Testing
import TestSupport

/// `rollout demo`'s own keys in a real terminal: `p` pauses and resumes the simulation, `>` and `<` walk its speed
/// ladder, the header shows simulated beside wall time; a console that drives no simulation says so.
@Suite("demo: pause and speed", .serialized)
struct DemoControlsTests {
    /// The header's text after "sim ": the simulated time of day, `HH:MM:SS`.
    static func simulatedTime(_ screen: String) -> String? {
        guard let line = screen.split(separator: "\n").first, let r = line.range(of: "sim ") else { return nil }
        return String(line[r.upperBound...].prefix(8))
    }

    @Test func pauseStopsSimulatedTimeWithoutStaleDataAndSpeedWalksTheLadder() throws {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "steady", "--devices",
            "400", "--speed", "60",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        // Simulated time beside wall time, with the speed, while the simulation drives the screen.
        var screen = try session.waitUntil("the header with simulated and wall time", timeout: 60) {
            $0.contains(" 60x · wall ") && $0.contains("<= 10")
        }
        // Pause only once telemetry has arrived: before the first event the console has no data to judge (it says
        // NO DATA), which is not what this test is about.
        screen = try session.waitUntil("the first telemetry", timeout: 60) {
            !$0.contains("✓ 0 success") && $0.contains(" ● ")
        }
        #expect(screen.contains("p pause") && screen.contains("< > speed"), "\(screen)")

        try session.press("p")
        screen = try session.waitFor("Simulation paused")
        // The header says so once it shows the time again: a verdict that rose just before (CI caught HOLD, "no
        // crash comparison yet") flashes it for six seconds.
        screen = try session.waitUntil("the header to say PAUSED", timeout: 15) { $0.contains("‖ PAUSED sim ") }
        // Paused longer than a heartbeat may be missed (5 s): simulated time stands still and the data is not
        // called stale, because the heartbeat goes on and says the simulation runs at speed 0.
        // Read from a header that shows the time: the header flashes instead while an alert is new.
        let header = { (what: String) in try session.waitUntil(what, timeout: 15) { Self.simulatedTime($0) != nil } }
        usleep(1_500_000)
        let pausedAt = Self.simulatedTime(try header("the paused header"))
        usleep(6_000_000)
        screen = try header("the paused header, later")
        #expect(Self.simulatedTime(screen) == pausedAt, "\(screen)")
        #expect(!screen.contains("STALE") && !screen.contains("stopped answering"), "\(screen)")

        try session.press("p")
        screen = try session.waitForAbsence(of: "PAUSED")
        try session.press("<")
        screen = try session.waitFor("Simulation speed 10x")
        screen = try session.waitUntil("the header to show 10x", timeout: 15) { $0.contains(" 10x · wall ") }
        try session.press("<")
        try session.press("<")
        screen = try session.waitFor("Already at the slowest speed, 1x")
        try session.press(">")
        try session.press(">")
        try session.press(">")
        screen = try session.waitFor(" 600x")
        try session.press("?")
        // The help opens on its cheat sheet, the simulation's keys in it; End shows the full descriptions. Each wait
        // is for the last line of what it waits for, not a heading: a capture can fall between two writes of one
        // frame (CI caught the heading drawn and the lines under it not yet).
        screen = try session.waitFor("click      button, row, change")
        #expect(screen.contains("p          pause the simulation"), "\(screen)")
        #expect(screen.contains("<          slower"), "\(screen)")
        try session.press("End")
        screen = try session.waitFor("faster: next speed of 1x 10x 60x 600x 3600x max")
        #expect(screen.contains("The demo's simulation"), "\(screen)")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    @Test func aConsoleOnAStoreAloneHasNoSimulationToControl() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        let session = try TerminalSession(
            [f.binary, "console", "--store", f.store, "--operator", "ana@example.com"], width: 120, height: 40)
        defer { session.close() }
        var screen = try session.waitFor("AppAttestEnabled", timeout: 30)
        #expect(!screen.contains("wall ") && !screen.contains("p pause"), "\(screen)")
        try session.press("p")
        screen = try session.waitFor("No simulation drives this console: p, > and < work in 'rollout demo'")
        try session.press(">")
        #expect(try session.screen().contains("No simulation drives this console"))
        try session.press("?")
        screen = try session.waitFor("Look around")
        #expect(!screen.contains("The demo's simulation"), "\(screen)")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    /// The default demo's scenario: OK (with the default power floor, 50%) after about an hour of simulated time,
    /// which the demo's 600x makes six seconds of wall time on a machine that keeps up.
    @Test func theDefaultDemoScenarioReachesOKWithinAnHourAndAQuarterOfSimulatedTime() throws {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
        let run = try TestSupport.run(
            f.binary,
            [
                "simulate", "--scenario", "busy", "--speed", "max", "--duration", "75m", "--start",
                "2026-05-20T12:00:00Z", "--store", f.store, "--quiet",
            ])
        try #require(run.status == 0, "\(run.stderr)")
        let status = try TestSupport.run(f.binary, ["status", "--store", f.store, "--json"])
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any], "\(status.stdout)")
        let guardrail = try #require(object["guardrail"] as? [String: Any])
        let findings = try #require(guardrail["findings"] as? [[String: Any]])
        // The only thing short of OK is that the simulation has ended (a finished run is frozen, so HOLD).
        let crashes = findings.filter { $0["topic"] as? String == "crashes" }
        #expect(!crashes.isEmpty && crashes.allSatisfy { $0["level"] as? String == "OK" }, "\(findings)")
        let others = findings.filter { $0["level"] as? String != "OK" && $0["topic"] as? String != "data" }
        #expect(others.isEmpty, "\(findings)")
    }
}
