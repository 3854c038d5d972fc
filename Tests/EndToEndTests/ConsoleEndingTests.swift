import Foundation
import SQLiteStore
import Testing
import TestSupport

/// The console ends as README's exit codes say however its end comes: a terminal that goes away without a SIGHUP
/// reaching the console is a hang-up (129), and Ctrl-C is 130 at once also while a publish waits for the store.
@Suite(.serialized)
struct ConsoleEndingTests {
    typealias Fixture = ConsoleEndToEndTests.Fixture

    /// A parent that traps HUP (here the pane's shell) is the only process the kernel signals when the terminal
    /// goes away; the console sees only its input hung up. It ends as a hang-up does instead of polling a dead
    /// terminal forever with the store open.
    @Test func aTerminalGoneWithoutAHangUpSignalEndsTheConsoleWith129() throws {
        let f = try Fixture()
        let session = try TerminalSession(
            [f.binary, "console", "--store", f.store, "--operator", "ana@example.com", "--read-only"], width: 100,
            height: 30, shellCatchesHangUp: true)
        defer { session.close() }
        try session.waitFor("AppAttestEnabled")
        let pid = try session.programPID()
        // A console that missed the end would run on after the test.
        defer { if kill(pid, 0) == 0 { kill(pid, SIGKILL) } }
        try session.hangUp()
        #expect(try session.exitStatus(timeout: 10) == 129)
    }

    /// A console at 10% whose confirmed nudge to 9% waits for the store's write lock, held by another connection.
    fileprivate static func publishWaitingForTheLock() throws -> (Fixture, TerminalSession, StoreWriteLock) {
        let f = try Fixture()
        try #require(f.cli("set", "10", "--reason", "start").status == 0)
        let session = try f.console(width: 100, height: 30)
        do {
            try session.waitFor("<= 10")
            try session.press("-")
            try session.waitFor("Confirm: nudge -1 point")
            let lock = try StoreWriteLock(f.store)
            do {
                try session.press("Tab", "Enter")
                try session.waitFor("waiting for the store")
                return (f, session, lock)
            } catch {
                lock.release()
                throw error
            }
        } catch {
            session.close()
            throw error
        }
    }

    /// A publish waiting for the store's write lock (another process holds it; the store waits up to its 10 s busy
    /// timeout) leaves the input thread free: the screen follows a resize at once, keys typed meanwhile are dropped
    /// as the publishing dialog says (Esc q does not quit once the publish answers), and the publish lands when the
    /// lock is free.
    @Test func aPublishWaitingForTheWriteLockLeavesTheScreenLiveAndDropsKeys() throws {
        let (f, session, lock) = try Self.publishWaitingForTheLock()
        defer { session.close() }
        defer { lock.release() }
        try session.press("Escape", "q")
        let live = try Self.expectLive(session, for: 2.5)
        #expect(live.contains("waiting for the store"), "\(live)")
        lock.release()
        try session.waitFor("<= 9")
        // Still running: the keys typed while publishing were dropped, not kept for later.
        try session.press("-")
        try session.waitFor("Confirm: nudge -1 point")
        try session.press("Escape", "q")
        #expect(try session.exitStatus() == 0)
        #expect(try f.statusJSON().contains("\"microPercent\": 9000000"))
    }

    /// Ctrl-C while a publish waits for the store's write lock ends the console at once with 130, the terminal
    /// restored; nothing is published.
    @Test func ctrlCWhileAPublishWaitsForTheWriteLockExits130AtOnce() throws {
        let (f, session, lock) = try Self.publishWaitingForTheLock()
        defer { session.close() }
        defer { lock.release() }
        try Self.expectLive(session, for: 2.5)
        try session.press("C-c")
        #expect(try session.exitStatus(timeout: 3) == 130)
        try session.waitFor("TERMINAL-RESTORED")
        lock.release()
        #expect(try f.statusJSON().contains("\"microPercent\": 10000000"))
    }

    /// Resizes the terminal to and fro for `seconds` (longer than the second after which the screen's clock reads
    /// the store again), each time waiting at most 3 s for a frame painted at the new width: a console whose input
    /// thread waits for the store paints none until the store answers.
    @discardableResult
    private static func expectLive(_ session: TerminalSession, for seconds: TimeInterval) throws -> String {
        let until = Date(timeIntervalSinceNow: seconds)
        var width = 100
        var screen = ""
        repeat {
            width = width == 110 ? 104 : 110
            try session.resize(width: width, height: 30)
            // A panel's top border reaches the last column only in a frame painted at this width (tmux crops or
            // pads the old one).
            screen = try session.waitUntil("a frame \(width) columns wide", timeout: 3) {
                $0.split(separator: "\n").contains { $0.count == width && $0.hasSuffix("┐") }
            }
        } while Date() < until
        return screen
    }
}

/// Another process's hold on a store's write lock, as `BEGIN EXCLUSIVE` in `sqlite3` takes it: a connection of
/// the test process, which is not the console's.
private final class StoreWriteLock {
    private let database: SQLiteDatabase
    private var held = true

    init(_ path: String) throws {
        database = try SQLiteDatabase(path: path, create: false)
        try database.execute("BEGIN EXCLUSIVE")
    }

    func release() {
        guard held else { return }
        held = false
        try? database.execute("ROLLBACK")
    }
}
