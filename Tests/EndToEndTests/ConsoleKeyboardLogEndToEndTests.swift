import Foundation
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The main screen's log from the keyboard, and `--no-mouse`, in a real terminal against a real store.
@Suite("console: the log from the keyboard and --no-mouse in a real terminal", .serialized)
struct ConsoleKeyboardLogEndToEndTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    /// Tab focuses the log, ↓ selects the older change, Enter opens its drill-down; Esc returns to the log with the
    /// same change selected, Esc again leaves the log (Enter is the verdict's again).
    @Test func tabFocusesTheLogAndEnterOpensTheSelectedChange() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "first step").status == 0)
        try #require(f.cli("set", "20", "--reason", "second step").status == 0)
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 20")
        try session.press("Tab")
        try session.waitFor("Enter open · Esc leave")
        try session.press("Down", "Enter")
        let pane = try session.waitFor("What v2 changed against v1:")
        #expect(pane.contains("first step") && pane.contains("<= 10"), "\(pane)")
        try session.press("Escape")
        try session.waitForAbsence(of: "What v2 changed against v1:")
        try session.press("Enter")
        try session.waitFor("What v2 changed against v1:")
        try session.press("Escape")
        try session.waitFor("Enter open · Esc leave")
        try session.press("Escape")
        try session.waitForAbsence(of: "Enter open · Esc leave")
        try session.press("Enter")
        try session.waitFor("Why: the verdict")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }

    /// With `--no-mouse` the console does not ask the terminal for clicks (tmux records the pane's mouse mode) and a
    /// click on a change in the log opens nothing; without it, the same click opens the version.
    @Test func noMouseLeavesClicksToTheTerminal() throws {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "first step").status == 0)
        for mouse in [false, true] {
            let session = try f.console(mouse ? [] : ["--no-mouse"], width: 90, height: 30)
            defer { session.close() }
            try session.waitFor("<= 10")
            #expect(try session.reportsMouse() == mouse, "mouse reporting with\(mouse ? "" : " --no-mouse")")
            let row = try #require(try session.position(of: "first step"))
            try session.click(x: row.x, y: row.y)
            if mouse {
                try session.waitFor("What v2 changed against v1:")
                try session.press("Escape")
            } else {
                usleep(1_000_000)
                let screen = try session.screen()
                #expect(!screen.contains("What v2 changed against v1:"), "a click opened the version: \(screen)")
            }
            try session.press("q")
            #expect(try session.exitStatus(timeout: 20) == 0)
        }
    }

    /// PgDn, PgUp, End and Home page and jump through a history longer than the screen, and `=` says why it does
    /// nothing: a letter is no percentage (the parser's words, as `rollout set` says them), and the current value
    /// is no change.
    @Test func listPagingKeysAndTheValuePromptsMessages() throws {
        let f = try Fixture()
        for percent in 1...20 {
            try #require(f.cli("set", String(percent), "--reason", "step \(percent)").status == 0)
        }
        // 20 rows: a page of the list is 15 entries.
        let session = try f.console(width: 100, height: 20)
        defer { session.close() }
        try session.waitFor("<= 20")
        try session.press("h")
        try session.waitFor("entry 1 of 20")
        try session.press("PageDown")
        try session.waitFor("entry 16 of 20")
        try session.press("End")
        let last = try session.waitFor("entry 20 of 20")
        #expect(last.contains("▶ v2 ") && last.contains("step 1 "), "the oldest change, selected and in sight: \(last)")
        #expect(!last.contains("v21 "), "the newest has scrolled away: \(last)")
        try session.press("PageUp")
        try session.waitFor("entry 5 of 20")
        try session.press("Home")
        try session.waitFor("entry 1 of 20")
        try session.press("Escape")
        try session.waitForAbsence(of: "entry 1 of 20")

        try session.press("=")
        try session.type("x")
        try session.press("Enter")
        try session.waitFor("'x' is not a percentage")
        try session.press("BSpace")
        try session.type("20")
        try session.press("Enter")
        try session.waitFor("already at 20%: nothing to change")
        try session.press("Escape", "q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
