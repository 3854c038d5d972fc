import Foundation
import Testing
import TestSupport

/// The keys and alerts of issue 18 in a real terminal: the verdict pane, y/n in dialogs, and the alert (header
/// flash, bell once, K kill now) when a demo's verdict rises to HALT.
@Suite("console: why, y/n and alerts in a real terminal", .serialized)
struct ConsoleAlertEndToEndTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    @Test func vAndEnterOpenTheVerdictPaneWithEachFindingsEvidence() throws {
        let f = try Fixture()
        try #require(f.cli(minutesAgo: 10, "set", "10", "--reason", "start").status == 0)
        try f.ingestTelemetry()
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("40 success")
        try session.press("v")
        var pane = try session.waitFor("Why: the verdict")
        #expect(pane.contains("1. ‖ HOLD  crashes"), "\(pane)")
        pane = try session.waitFor("Would change")
        #expect(pane.contains("Samples       0 exposed vs 0 control sessions"), "\(pane)")
        try session.press("Escape")
        try session.waitForAbsence(of: "Why: the verdict")
        try session.press("Enter")
        try session.waitFor("Why: the verdict")
        try session.waitFor("guardrails armed")
        try session.press("q")
        try session.waitForAbsence(of: "Why: the verdict")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    @Test func yPublishesAndNCancelsFromTheConfirmDialog() throws {
        let f = try Fixture()
        try #require(f.cli(minutesAgo: 10, "set", "10", "--reason", "start").status == 0)
        try f.ingestTelemetry()
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("40 success")
        try session.press("-")
        try session.waitFor("Confirm: nudge -1 point")
        try session.press("n")
        try session.waitFor("Cancelled; nothing was written.")
        #expect(try f.cli("history", "--limit", "1").stdout.contains("10%, rolling"), "n wrote nothing")
        try session.press("-")
        try session.waitFor("Confirm: nudge -1 point")
        try session.press("y")
        try session.waitFor("Published v")
        let history = try f.cli("history", "--limit", "1")
        #expect(history.stdout.contains("ana@example.com  INCREMENTAL_UPDATE  9%, rolling"), "\(history.stdout)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    /// The demo's crash regression reaches HALT: the header flashes it (on wall time), the footer offers the kill and says
    /// auto-kill is off, and the bell rang (once per rise; with --no-bell it does not ring).
    @Test(arguments: [false, true])
    func haltInADemoFlashesRingsAndOffersTheKill(noBell: Bool) throws {
        let f = try Fixture()
        let command =
            [
                f.binary, "demo", "--store", f.directory.appendingPathComponent("drill.db").path, "--operator",
                "ana@example.com", "--speed", "300", "--scenario",
                "crash-regression", "--devices", "6000", "--seed", "3",
            ] + (noBell ? ["--no-bell"] : [])
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 20", timeout: 30)
        // The flash runs on wall time although the demo's ticks run 300 times faster: seen, then off, then on
        // again a wall second later (judged on simulated time, its 6 s were 20 ms of wall time).
        let flashing = { (screen: String) in screen.split(separator: "\n").first?.contains("HALT ·") == true }
        // The header row alone, once two reads 40 ms apart agree: the flash's phases last one wall second each, and
        // a 300x demo redraws the rest of the screen every tick, which a settle of the whole screen would wait out.
        func waitForHeader(_ what: String, flashing want: Bool, timeout: TimeInterval) throws {
            let deadline = Date(timeIntervalSinceNow: timeout)
            while true {
                if flashing(try session.screen()) == want {
                    usleep(40_000)
                    if flashing(try session.screen()) == want { return }
                }
                guard Date() < deadline else { throw TestSupport.Failure("timed out after \(timeout)s waiting for \(what)") }
                usleep(20_000)
            }
        }
        try waitForHeader("the header flashes HALT", flashing: true, timeout: 120)
        try waitForHeader("the flash alternates off", flashing: false, timeout: 10)
        try waitForHeader("and on again, on wall time", flashing: true, timeout: 10)
        let screen = try session.waitFor("K kill now", timeout: 30)
        #expect(screen.contains("auto-kill off"), "\(screen)")
        #expect(screen.contains("✗ HALT"), "\(screen)")
        // The bell came with the first HALT frame, long before the frames waited for above.
        if noBell {
            #expect(try !session.bellRang())
        } else {
            #expect(try TestSupport.eventually(within: 10) { try session.bellRang() }, "the bell")
        }
        try session.press("v")
        let pane = try session.waitFor("Why: the verdict")
        #expect(pane.contains("SPRT on fatal crashes"), "\(pane)")
        try session.press("Escape")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
