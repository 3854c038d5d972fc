import Foundation
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The rest of issue 18 in a real terminal against a real store: the drill-down and its roll-back, the `/` filter,
/// a confirm dialog that follows a colleague's publish, the guardrail's refusal in a live demo, and an idle console
/// that writes nothing.
@Suite("console: drill-down, filter, live dialog and idle output in a real terminal", .serialized)
struct ConsoleDrillDownEndToEndTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    @Test func enterOnAHistoryRowShowsTheVersionsDiffAndRollsBackToIt() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "first step").status == 0)
        try #require(f.cli("set", "20", "--reason", "second step").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 20")
        try session.press("h")
        // The list itself (the main screen's log shows the same reasons).
        try session.waitFor("entry 1 of 2")
        // The second row is the first step (v2, newest first).
        try session.press("Down", "Enter")
        var pane = try session.waitFor("What v2 changed against v1:")
        #expect(pane.contains("first step"), "\(pane)")
        #expect(pane.contains("by bob@example.com"), "\(pane)")
        #expect(pane.contains("~ condition") && pane.contains("<= 10"), "the core's diff of the condition: \(pane)")
        try session.press("Escape")
        try session.waitFor("entry 2 of 2")
        try session.press("Enter")
        try session.waitFor("What v2 changed against v1:")
        try session.press("r")
        pane = try session.waitFor("Confirm: roll back to v2")
        #expect(pane.contains("20% → 10%"), "\(pane)")
        try session.press("y")
        try session.waitFor("Published v4")
        try session.waitFor("<= 10")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    @Test func slashFiltersTheAuditLog() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "first step").status == 0)
        try #require(f.cli("set", "15", "--reason", "after the review", operatorID: "carol@example.com").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 15")
        try session.press("a")
        try session.waitFor("chain ✓ verified")
        try session.press("/")
        try session.type("carol")
        let screen = try session.waitFor("1 of 3 match")
        #expect(screen.contains("carol@example.com"), "\(screen)")
        #expect(!screen.contains("first step"), "\(screen)")
        try session.press("Enter")
        try session.press("Enter")
        try session.waitFor("after the review")
        try session.waitFor("What v3 changed against v2:")
        try session.press("Escape")
        try session.waitFor("/ edits")
        try session.press("Escape")
        try session.waitForAbsence(of: "Audit log")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    @Test func anOpenConfirmDialogFollowsAColleaguesPublishAndKeepsTheReason() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "start").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 10")
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        try session.press("y")
        try session.waitFor("Reason for the increase")
        try session.type("steady all morning")
        // A colleague publishes from another process while the reason prompt is open.
        try #require(f.cli("set", "20", "--reason", "from elsewhere", operatorID: "carol@example.com").status == 0)
        let updated = try session.waitFor("Updated while open")
        #expect(updated.contains("the store moved from v2 to v3"), "\(updated)")
        #expect(updated.contains("20% → 21%"), "re-judged on the new version: \(updated)")
        try session.press("y")
        try session.waitFor("steady all morning")
        try session.press("Enter")
        try session.waitFor("Published v4")
        try session.waitFor("<= 21")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    @Test func mouseClicksPressDialogButtonsAndOpenListRows() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "first step").status == 0)
        let session = try f.console(width: 90, height: 30)
        defer { session.close() }
        try session.waitFor("<= 10")
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        let publish = try #require(try session.position(of: "[ Publish ]"))
        try session.click(x: publish.x + 2, y: publish.y)
        try session.waitFor("Reason for the increase")
        try session.press("Escape")
        try session.waitForAbsence(of: "Reason for the increase")
        try session.press("+")
        try session.waitFor("Confirm: nudge +1 point")
        let cancel = try #require(try session.position(of: "Cancel"))
        try session.click(x: cancel.x, y: cancel.y)
        try session.waitFor("Cancelled; nothing was written.")

        try session.press("h")
        try session.waitFor("entry 1 of 1")
        let row = try #require(try session.position(of: "v2 "))
        try session.click(x: row.x, y: row.y)
        try session.waitFor("What v2 changed against v1:")
        try session.press("Escape", "Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    /// The refusal of issue 18: in a live demo on HOLD, confirming an increase says at once that the guardrail
    /// refused it and that nothing was written, without asking for a reason first.
    @Test func theGuardrailsRefusalShowsInALiveDemo() throws {
        let f = try Fixture()
        let tmp = f.directory.appendingPathComponent("tmp")
        try FileManager.default.createDirectory(at: tmp, withIntermediateDirectories: true)
        // A 3,000-device fleet stays HOLD "not enough data yet": the guardrail refuses increases.
        let session = try TerminalSession(
            [
                "sh", "-c",
                "\(TerminalSession.quote(f.binary)) demo --devices 3000 --speed 120 --operator ana@example.com",
            ],
            width: 120, height: 40, environment: ["TMPDIR": tmp.path])
        defer { session.close() }
        try session.waitFor("not enough data yet", timeout: 30)
        try session.press("+")
        try session.waitFor("refuses this change")
        try session.press("y")
        let screen = try session.waitFor("Refused by guardrail")
        #expect(screen.contains("nothing was written"), "\(screen)")
        #expect(!screen.contains("Reason for the increase"), "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    /// An idle console writes nothing: once the first frame is up and nothing changes in the store, the terminal
    /// receives 0 bytes (no clock, no age ticking in the header).
    @Test func anIdleConsoleWritesNothing() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "start").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 10")
        // Let the first snapshots settle (the first frame, then the staleness the empty telemetry gives).
        usleep(1_500_000)
        // The chart's columns are wall-clock minutes, so once a minute its markers move one column left: that is
        // the screen changing, not idling. The 4 s window is kept inside one minute; a window that still crossed
        // one (a slow machine between the reads) is measured again, once.
        let capture = f.directory.appendingPathComponent("idle-output")
        try session.captureOutput(to: capture)
        func captured() -> Data { (try? Data(contentsOf: capture)) ?? Data() }
        var written = Data()
        for _ in 0..<2 {
            let second = Int(Date().timeIntervalSince1970) % 60
            if second > 54 { usleep(UInt32(61 - second) * 1_000_000) }
            let minute = Int(Date().timeIntervalSince1970) / 60
            let before = captured().count
            usleep(4_000_000)
            written = captured().dropFirst(before)
            if written.isEmpty || Int(Date().timeIntervalSince1970) / 60 == minute { break }
        }
        #expect(
            written.isEmpty,
            "an idle console wrote \(written.count) bytes in 4 s: \(String(decoding: written, as: UTF8.self).debugDescription)"
        )
        // The capture works: a key that changes the screen is seen.
        try session.press("?")
        try session.waitFor("Help")
        // tmux hands the output to the capture's `cat` on its own time: waited for, 10 s at most.
        let seenBy = Date().addingTimeInterval(10)
        while captured().isEmpty, Date() < seenBy { usleep(20_000) }
        #expect(!captured().isEmpty, "the capture saw nothing even when the screen changed")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
