import Foundation
import Testing
import TestSupport
import Timekeeping

/// A demo runs the console on simulated time, but people and security stay on the wall clock: an enrolled
/// operator's code, computed by pyotp from the wall clock, is accepted for a protected change while the fleet
/// runs at 60×.
@Suite("demo: step-up on the wall clock", .serialized)
struct DemoStepUpTests {
    @Test func aProtectedChangeInADemoAt60xTakesAWallClockCodeFromPyotp() throws {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
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
        try session.waitFor("<= 10", timeout: 60)
        // Undo the last change (the simulator's 10%): a rollback, which step-up protects.
        try session.press("u")
        try session.waitFor("Confirm: roll back to v")
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

        // Undo again (back to 10%, a rollback too), with three wrong codes: the lockout lasts 15 minutes of wall
        // time, stamped on the wall clock (not the simulation's, which runs an hour a minute ahead).
        try session.press("u")
        try session.waitFor("Confirm: roll back to v")
        try session.press("Tab", "Enter")
        try session.waitFor("Reason for the increase")
        try session.type("drill")
        try session.press("Enter")
        try session.waitUntil("the step-up code prompt") { $0.contains("Code from your authenticator") }
        var valid: Set<String> = []
        for ahead in -1...3 { valid.insert(try pyotp(stepsAhead: ahead)) }
        let wrong = ["000000", "111111", "222222", "333333", "444444", "555555"].filter { !valid.contains($0) }.prefix(3)
        for (i, code) in wrong.enumerated() {
            try session.type(code)
            try session.press("Enter")
            try session.waitUntil("refusal \(i + 1)") { _ in
                ((try? f.cli("audit", "show", "--json").stdout) ?? "").components(separatedBy: "wrong code for ana@example.com").count > i + 1
            }
        }
        let records = try #require(
            try JSONSerialization.jsonObject(with: Data(f.cli("audit", "show", "--json").stdout.utf8)) as? [[String: Any]])
        let locked = try #require(records.last { ($0["reason"] as? String ?? "").contains("locked out until") || ($0["detail"] as? String ?? "").contains("locked out until") })
        let stamped = try #require((locked["time"] as? String).flatMap(ISO8601.parse))
        let text = (locked["detail"] as? String ?? "") + " " + (locked["reason"] as? String ?? "")
        let until = try #require(text.components(separatedBy: "locked out until ").dropFirst().first.flatMap { ISO8601.parse(String($0.prefix(24))) })
        #expect(abs((until - stamped).seconds - 15 * 60) <= 2, "\(stamped) → \(until)")
        #expect(abs((stamped - SystemClock().now()).seconds) < 120, "the audit time \(stamped) is not wall time")
        try session.press("Escape")
        try session.waitForAbsence(of: "Code from your authenticator")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
