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
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli("set", "20", "--reason", "start").status == 0)
        let session = try f.console()
        defer { session.close() }
        try session.waitFor("<= 20")

        // The file is removed behind the console (its connection still reads the unlinked inode).
        try FileManager.default.removeItem(atPath: f.store)
        try session.press("K")
        try session.waitFor("Confirm: kill switch")
        try session.press("Enter")
        let screen = try session.waitFor("store was removed or replaced")
        #expect(!screen.contains("KILLED"), "\(screen)")

        // Another file moved to the same path is not the one the console opened: still refused.
        let other = f.directory.appendingPathComponent("other.db").path
        let created = try TestSupport.run(f.binary, ["init", "--store", other, "--operator", "bob@example.com"])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(rename(other, f.store) == 0)
        try session.press("K")
        try session.waitFor("Confirm: kill switch")
        try session.press("Enter")
        _ = try session.waitFor("store was removed or replaced")
        let status = try f.statusJSON()
        #expect(!status.contains("\"state\": \"killed\""), "\(status)")
        try session.press("q")
    }
}
