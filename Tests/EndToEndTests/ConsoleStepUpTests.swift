import Foundation
import StepUp
import Testing
import TestSupport
import Timekeeping

/// A protected change in the console: the write path asks for a fresh one-time code, the console opens a masked
/// prompt, a wrong code is refused (and audited) and the prompt opens again, the right code publishes.
@Suite("step-up in the console", .serialized)
struct ConsoleStepUpTests {
    @Test func aLargeIncreaseNeedsAFreshCodeTypedIntoTheMaskedPrompt() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli("set", "5", "--reason", "start").status == 0)

        // Enrol ana: the first call prints the otpauth URI, the second confirms with a current code.
        let started = try TestSupport.run(f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--store", f.store], stdin: "")
        let uri = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = try #require(uri.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(base32)))
        func code() -> String { TOTP.standard.code(secret: secret, at: SystemClock().now()) }
        let confirmed = try TestSupport.run(
            f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--code", code(), "--store", f.store])
        try #require(confirmed.status == 0, "\(confirmed.stderr)")

        let session = try f.console()
        defer { session.close() }
        try session.waitFor("<= 5")
        try session.press("=")
        try session.waitFor("Set the percentage")
        try session.press("BSpace")  // the field starts with the current value
        try session.type("30")
        try session.press("Enter")
        try session.waitFor("Confirm: set 30%")
        try session.press("Tab", "Enter")
        try session.waitFor("Reason for the increase")
        try session.type("second wave")
        try session.press("Enter")
        try session.waitUntil("the step-up code prompt") { $0.lowercased().contains("code") && $0.contains("30") }

        // A wrong code: refused, nothing written, the prompt comes back.
        let wrong = ["000000", "111111", "222222"].first { w in (-1...2).allSatisfy { TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: SystemClock().now()) + $0) != w } }!
        try session.type(wrong)
        let typed = try session.screen()
        #expect(!typed.contains(wrong), "the code must be masked")
        try session.press("Enter")
        try session.waitUntil("the refusal of the wrong code") { $0.contains("wrong") || $0.contains("refused") }
        #expect(try f.statusJSON().contains("\"microPercent\": 5000000"))

        // The enrolment used this time step's code, and a code is accepted once: the next step's code is within
        // the ±1 step window and fresh.
        let next = TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: SystemClock().now()) + 1)
        try session.type(next)
        try session.press("Enter")
        try session.waitFor("<= 30")
        #expect(try f.statusJSON().contains("\"microPercent\": 30000000"))
        let audit = try f.cli("audit", "show", "--json").stdout
        #expect(audit.contains("step-up refused") && audit.contains("step-up accepted"))
        #expect(!audit.contains(String(base32)))
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }
}
