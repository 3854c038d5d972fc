import AppCheck
import Foundation
import Rollout
import Testing
import TestSupport
import Timekeeping

@testable import SQLiteStore

/// A write's witness sync runs beside its WAL sync (`WitnessSync`), so a crash of the machine can leave the store
/// exactly one write ahead of its witness on disk. That store is accepted (its seal names, under the HMAC, the
/// state it was written from, which is the witness's current one); a store two writes ahead, a witness ahead of
/// the store, and a store rolled back are still refused.
@Suite struct WitnessLagTests {
    static let t0 = SealFastPathTests.t0

    static func consume(_ state: AppCheckStateTables, _ id: String) throws -> Bool {
        try state.consumeToken(id: id, expiresAt: t0 + .minutes(60))
    }

    /// The witness as the disk holds it after every sync of `store` finished.
    static func syncedWitness(_ store: RolloutStore) throws -> Data {
        try store.witnessSync.waitUntilSynced()
        return try Data(contentsOf: URL(fileURLWithPath: store.witness.path))
    }

    /// Whether opening `path`, verifying it or writing to it is refused as a damaged store (the integrity check's
    /// `ConfigIntegrityProblem` or `StoreError.corrupt`; any other error is not a refusal).
    static func isRefused(_ path: String) -> Bool {
        do {
            let store = try RolloutStore(path: path, create: false)
            _ = try store.verify()
            _ = try consume(try AppCheckStateTables(database: store.database), "jti-after")
            return false
        } catch is ConfigIntegrityProblem {
            return true
        } catch StoreError.corrupt {
            return true
        } catch {
            return false
        }
    }

    @Test("a store one write ahead of its witness (the witness's sync lost to a crash) opens, verifies and writes, keeping nothing pending")
    func oneWriteAheadIsAccepted() throws {
        let (f, store, state) = try SealFastPathTests.store()
        defer { withExtendedLifetime(f) {} }
        #expect(try Self.consume(state, "jti-1"))
        let witnessBefore = try Self.syncedWitness(store)
        #expect(try Self.consume(state, "jti-2"))
        _ = try Self.syncedWitness(store)
        // The crash: the WAL of jti-2's write synced, its witness slot not.
        try witnessBefore.write(to: URL(fileURLWithPath: store.witness.path))

        let reopened = try RolloutStore(path: f.path, create: false)
        let report = try reopened.verify()
        let again = try AppCheckStateTables(database: reopened.database)
        // The first write after the crash (a write that changes nothing would rewrite the witness too).
        #expect(try Self.consume(again, "jti-3"))
        try reopened.witnessSync.waitUntilSynced()
        guard case .lines(let current, let previous, let pending) = reopened.witness.read() else {
            Issue.record("unreadable witness")
            return
        }
        #expect(previous == report.witnessLine)
        #expect(current != report.witnessLine)
        #expect(pending.isEmpty, "the lagging witness's state was kept pending: a rollback to it would pass")
        #expect(try !Self.consume(again, "jti-2"), "the answered consumption survived")
        _ = try reopened.verify()
    }

    @Test("a store two writes ahead of its witness is refused")
    func twoWritesAheadIsRefused() throws {
        let (f, store, state) = try SealFastPathTests.store()
        defer { withExtendedLifetime(f) {} }
        let witnessBefore = try Self.syncedWitness(store)
        #expect(try Self.consume(state, "jti-1"))
        #expect(try Self.consume(state, "jti-2"))
        _ = try Self.syncedWitness(store)
        try witnessBefore.write(to: URL(fileURLWithPath: store.witness.path))
        #expect(Self.isRefused(f.path))
    }

    @Test("a store rolled back under its witness (a witness two writes ahead of it) is refused")
    func rollbackIsRefused() throws {
        let f: StoreFixture
        let files = ["", "-wal"]
        var copies: [String: Data] = [:]
        do {
            let (fixture, store, state) = try SealFastPathTests.store()
            f = fixture
            #expect(try Self.consume(state, "jti-1"))
            _ = try Self.syncedWitness(store)
            try store.withDatabase { db in try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
            for suffix in files { copies[suffix] = try Data(contentsOf: URL(fileURLWithPath: f.path + suffix)) }
            #expect(try Self.consume(state, "jti-2"))
            #expect(try Self.consume(state, "jti-3"))
            _ = try Self.syncedWitness(store)
        }
        // Every connection closed: the copy taken before jti-2 and jti-3 put back.
        try? FileManager.default.removeItem(atPath: f.path + "-shm")
        for suffix in files { try copies[suffix]!.write(to: URL(fileURLWithPath: f.path + suffix)) }
        #expect(Self.isRefused(f.path))
    }

    @Test("a write is answered once its WAL synced, and the next write commits only after that write's witness synced")
    func nextWriteWaitsForTheWitnessSync() throws {
        let (f, store, state) = try SealFastPathTests.store()
        defer { withExtendedLifetime(f) {} }
        let reader = try SQLiteDatabase(path: f.path, create: false, readOnly: true)
        // Opened by root, SQLite gives the WAL the database file's owner, which changes the WAL's status time: the
        // store's next write then checks the whole seal first (`RolloutStore.FileStamp`), and syncs its witness
        // before its commit. The one after it is back on the fast path this test is about.
        #expect(try Self.consume(state, "jti-0b"))
        let held = HeldSync()
        defer { held.release() }
        // (After the sync of the fixture's last write finished: that one is not held back.)
        try store.witnessSync.replaceSync(held.sync)
        // Answered while its witness sync is held back.
        #expect(try Self.consume(state, "jti-1"))
        #expect(store.witnessSync.isBusy)
        let second = BackgroundCall { try? Self.consume(state, "jti-2") }
        // The second write reaches the wait (bounded), and has committed nothing yet.
        second.wait(until: { store.witnessSync.waiters > 0 })
        #expect(store.witnessSync.waiters == 1)
        #expect(try reader.query("SELECT 1 FROM appcheck_consumed_tokens WHERE token_id = 'jti-2'").isEmpty)
        #expect(try !reader.query("SELECT 1 FROM appcheck_consumed_tokens WHERE token_id = 'jti-1'").isEmpty)
        held.release()
        #expect(second.result() == true)
        #expect(try !reader.query("SELECT 1 FROM appcheck_consumed_tokens WHERE token_id = 'jti-2'").isEmpty)
        try store.witnessSync.waitUntilSynced()
        _ = try store.verify()
    }
}
