import Foundation
import Testing
import TestSupport

/// "A deleted store goes unnoticed" (3 a.m. issue, item 4): `rm r.db` while a console has it open, then `K`
/// Enter: the console said "published" (■ KILLED) into the unlinked file, and `rollout status` then found no
/// store. A write now checks that the path still names the file it opened: the kill is refused, named, and
/// nothing claims to be published.
@Suite(.serialized)
struct StoreVanishedTests {
    @Test func aWriteIntoARemovedOrReplacedStoreIsRefused() throws {
        let (f, session) = try Self.consoleAt20()
        defer { session.close() }

        // The file is removed behind the console (its connection still reads the unlinked inode). The console's
        // refresh may notice first and refuse the key at once; if the dialog opens before it does, the write path
        // refuses the kill itself (`StoreIdentityTests` checks that refusal without a console).
        try FileManager.default.removeItem(atPath: f.store)
        try killThroughTheDialogIfItOpens(session)
        let screen = try session.waitFor("store was removed or replaced")
        #expect(!screen.contains("KILLED"), "\(screen)")

        // Another file moved to the same path is not the one the console opened: still refused.
        let other = f.directory.appendingPathComponent("other.db").path
        let created = try TestSupport.run(f.binary, ["init", "--store", other, "--operator", "bob@example.com"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(rename(other, f.store) == 0)
        try session.press("Escape")
        try killThroughTheDialogIfItOpens(session)
        _ = try session.waitFor("store was removed or replaced")
        let status = try f.statusJSON()
        #expect(!status.contains("\"state\": \"killed\""), "\(status)")
        try session.press("q")
    }

    /// A store at 20% and a console on it, showing it.
    private static func consoleAt20(width: Int = 100) throws -> (ConsoleEndToEndTests.Fixture, TerminalSession) {
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli("set", "20", "--reason", "start").status == 0)
        let session = try f.console(width: width)
        do {
            try session.waitFor("<= 20")
        } catch {
            session.close()
            throw error
        }
        return (f, session)
    }

    /// `K`, then Enter on the confirm dialog when it opens; the console may instead refuse `K` at once, or have
    /// turned read-only already (its refresh saw the loss first: the banner, and `K` opens nothing).
    private func killThroughTheDialogIfItOpens(_ session: TerminalSession) throws {
        try session.press("K")
        let screen = try session.waitUntil("the kill dialog, a refusal or the read-only banner") {
            $0.contains("Confirm: kill switch") || $0.contains("Refused, nothing was written")
                || $0.contains("READ-ONLY: the store was removed or replaced")
        }
        if screen.contains("Confirm: kill switch") { try session.press("Enter") }
    }

    /// The dialog open when the loss is noticed: it becomes a notice, and the Enter meant for Publish closes it
    /// (it used to land on the main screen and open the verdict pane over the banner; CI saw that race).
    @Test func aConfirmDialogOpenWhenTheStoreIsLostBecomesANotice() throws {
        let (f, session) = try Self.consoleAt20()
        defer { session.close() }
        try session.press("K")
        try session.waitFor("Confirm: kill switch")
        try FileManager.default.removeItem(atPath: f.store)
        var screen = try session.waitFor("Store lost: the change was dropped")
        #expect(!screen.contains("Confirm: kill switch"), "\(screen)")
        try session.press("Enter")
        screen = try session.waitUntil("the notice closed") { !$0.contains("Store lost: the change was dropped") }
        #expect(screen.contains("READ-ONLY"), "\(screen)")
        #expect(!screen.contains("Why: the verdict"), "\(screen)")
        #expect(!screen.contains("KILLED"), "\(screen)")
        #expect(!FileManager.default.fileExists(atPath: f.store))
        try session.press("q")
    }

    /// The read side: the console checks the store's identity on every refresh, so the loss shows without any key
    /// pressed, as a banner; from then on it is read-only, and a write key says why without asking for anything.
    @Test func aRemovedOrReplacedStoreTurnsTheConsoleReadOnlyWithABanner() throws {
        let (f, session) = try Self.consoleAt20(width: 160)
        defer { session.close() }
        #expect(!(try session.screen().contains("READ-ONLY")))

        try FileManager.default.removeItem(atPath: f.store)
        var screen = try session.waitFor("READ-ONLY: the store was removed or replaced (no file at that path any more)")
        try session.press("Escape")
        screen = try session.waitFor("quit and open the store again")
        #expect(screen.contains("READ-ONLY"), "\(screen)")
        try session.press("K")
        screen = try session.waitFor("Refused, nothing was written")
        #expect(!screen.contains("Confirm: kill switch"), "\(screen)")
        #expect(!FileManager.default.fileExists(atPath: f.store))

        // A store moved to the path later is not taken for the one opened: still read-only, and it is not touched.
        let other = f.directory.appendingPathComponent("other.db").path
        let created = try TestSupport.run(f.binary, ["init", "--store", other, "--operator", "bob@example.com"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(rename(other, f.store) == 0)
        func version() throws -> String {
            let json = try JSONSerialization.jsonObject(with: Data(try f.statusJSON().utf8)) as? [String: Any]
            let v = json?["version"] as? [String: Any]
            return "\(v?["versionNumber"] ?? "none") \(v?["etag"] ?? "none")"
        }
        let before = try version()
        #expect(before.hasPrefix("1 "), "\(before)")
        try session.press("+")
        _ = try session.waitFor("Refused, nothing was written")
        #expect(try version() == before)
        try session.press("q")
    }
}
