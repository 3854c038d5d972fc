import Foundation
import Testing
import TestSupport

/// The k9s/lazygit habits of the 3 a.m. issue in a real terminal: `:` runs a change through the same dialogs as its
/// key, `/` filters the main log, the mouse wheel scrolls the help.
@Suite(.serialized)
struct ConsoleHabitsTests {
    @Test func thePaletteTheLogFilterAndTheWheel() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli("set", "20", "--reason", "start").status == 0)
        let session = try f.console(width: 120, height: 36)
        defer { session.close() }
        try session.waitFor("<= 20")
        #expect(try session.reportsMouse())

        // `:set 25` is `=` `25`: the confirm dialog, then the reason an increase asks for, then the publish.
        try session.press(":")
        try session.waitFor("rollout › Command")
        try session.type("se 25")
        try session.waitFor("Enter runs set PERCENT")
        try session.press("Enter")
        try session.waitFor("Confirm: set 25%")
        try session.press("y")
        try session.waitFor("Reason for the increase")
        try session.type("from the palette")
        try session.press("Enter")
        try session.waitFor("Published v3")
        let status = try f.statusJSON()
        #expect(status.contains("\"percentage\" : \"25\"") || status.contains("\"percentage\": \"25\""), "\(status)")

        // `/` keeps the log's lines that match, as typed; Enter keeps the filter, Esc clears it.
        try session.press("Escape")
        try session.press("/")
        try session.type("palette")
        try session.waitFor("1 match · Enter keeps")
        var screen = try session.screen()
        #expect(!screen.contains("“start”"), "\(screen)")
        try session.press("Enter")
        try session.waitFor("Log / palette 1 of")
        try session.press("Escape")
        screen = try session.waitForAbsence(of: "Log / palette")
        #expect(screen.contains("“start”"), "\(screen)")

        // The wheel scrolls the help three lines a notch.
        try session.press("?")
        try session.waitFor("lines 1–")
        try session.wheel(down: true, x: 10, y: 10)
        try session.waitFor("lines 4–")
        try session.wheel(down: false, x: 10, y: 10)
        try session.waitFor("lines 1–")
        try session.press("Escape")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }

    /// "Pre-filled input boxes append" (item 5): the `=` prompt opened on 41 and typing 150 gave '41150'. The value
    /// is pre-filled selected: typing replaces it, a cursor key keeps it to edit.
    @Test func typingReplacesThePrefilledPercentage() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli("set", "41", "--reason", "start").status == 0)
        let session = try f.console(width: 120, height: 36)
        defer { session.close() }
        try session.waitFor("<= 41")
        try session.press("=")
        try session.waitFor("Set the percentage")
        try session.type("15")
        try session.press("Enter")
        var screen = try session.waitFor("Confirm: set 15%")
        #expect(!screen.contains("4115"), "\(screen)")
        try session.press("Escape")
        try session.waitForAbsence(of: "Confirm: set 15%")
        // A cursor key first keeps the value: typing goes on after it.
        try session.press("=")
        try session.waitFor("Set the percentage")
        try session.press("End")
        try session.type(".5")
        try session.press("Enter")
        screen = try session.waitFor("Confirm: set 41.5%")
        try session.press("Escape")
        try session.press("q")
        #expect(try session.exitStatus() == 0)
    }
}
