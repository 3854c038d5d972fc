import Foundation
import Testing
import TestSupport

/// A demo runs the console on simulated time, but people and security stay on the wall clock: an enrolled
/// operator's code, computed by pyotp from the wall clock, is accepted for a protected change while the fleet
/// runs at 60×.
@Suite("demo: step-up on the wall clock", .serialized)
struct DemoStepUpTests {
    @Test func aProtectedChangeInADemoAt60xTakesAWallClockCodeFromPyotp() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        let python = try TestSupport.python()
        // A drill store: made by a short simulation (which sets the steady scenario's 10%).
        let sim = try TestSupport.run(
            f.binary,
            ["simulate", "--scenario", "steady", "--devices", "200", "--speed", "max", "--duration", "2m", "--store", f.store, "--quiet"])
        try #require(sim.status == 0, "\(sim.stderr)")

        // Enrol ana with pyotp's codes.
        let started = try TestSupport.run(f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--store", f.store], stdin: "")
        let uri = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = String(try #require(uri.split(separator: "secret=").last?.split(separator: "&").first))
        func pyotp(stepsAhead: Int = 0) throws -> String {
            let r = try TestSupport.run(
                python, ["-c", "import pyotp, sys, time; print(pyotp.TOTP(sys.argv[1]).at(time.time() + 30 * int(sys.argv[2])))", base32, String(stepsAhead)])
            try #require(r.status == 0, "\(r.stderr)")
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let confirmed = try TestSupport.run(
            f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--code", try pyotp(), "--store", f.store])
        try #require(confirmed.status == 0, "\(confirmed.stderr)")

        let command = [f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--speed", "60", "--scenario", "steady", "--devices", "2000"]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 10", timeout: 20)
        // Undo the last change (the simulator's 10%): a rollback, which step-up protects.
        try session.press("u")
        try session.waitFor("Confirm: roll back the last change")
        try session.press("Tab", "Enter")
        try session.waitUntil("the step-up code prompt") { $0.lowercased().contains("code") && !$0.contains("Confirm:") }
        // Enrolment used this step's code (a code is accepted once): the next step's, inside the ±1 step window.
        try session.type(try pyotp(stepsAhead: 1))
        try session.press("Enter")
        let deadline = Date().addingTimeInterval(20)
        var status = ""
        while Date() < deadline {
            status = try f.statusJSON()
            if status.contains("\"updateType\": \"ROLLBACK\"") { break }
            usleep(200_000)
        }
        let screen = (try? session.screen()) ?? ""
        #expect(status.contains("\"updateType\": \"ROLLBACK\""), "\(screen)")
        let audit = try f.cli("audit", "show", "--json").stdout
        #expect(audit.contains("step-up accepted"))
        #expect(!audit.contains("step-up refused"))
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
