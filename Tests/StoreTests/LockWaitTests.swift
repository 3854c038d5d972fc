import Foundation
import SQLiteStore
import Testing
import TestSupport

/// A statement that finds the store locked by another connection waits for it (the busy timeout), unless its
/// store abandons lock waits (`RolloutStore.abandonLockWaits`): `serve` does when its drain ends, so that the
/// calls still waiting fail now instead of each waiting out its timeout while the process waits for them (a stop
/// with the store locked took two drains, 19.5 s for a 10 s drain).
@Suite struct LockWaitTests {
    /// Holds the write lock of `path` on a connection of its own (until it ends its transaction).
    static func holdWriteLock(_ path: String) throws -> SQLiteDatabase {
        let holder = try SQLiteDatabase(path: path, create: false)
        try holder.execute("BEGIN IMMEDIATE")
        return holder
    }

    /// A file with an empty table `t`, its write lock held by `holder`, and an insert by `waiter` (on a thread of
    /// its own, `insert`) waiting for that lock, with a timeout no test waits out.
    struct WaitingWrite {
        let setup: SQLiteDatabase
        let holder: SQLiteDatabase
        let waiter: SQLiteDatabase
        let insert: BackgroundCall<Result<Void, any Error>>
        /// The rows of `t` as the setup connection reads them.
        var rows: SQLiteValue? { try? setup.query("SELECT count(*) FROM t").first?.first }

        init(in dir: URL) throws {
            let path = dir.appendingPathComponent("w.db").path
            setup = try SQLiteDatabase(path: path)
            try setup.execute("CREATE TABLE t (x INTEGER)")
            holder = try LockWaitTests.holdWriteLock(path)
            waiter = try SQLiteDatabase(path: path, create: false, busyTimeoutMilliseconds: 600_000)
            let waiter = waiter
            insert = BackgroundCall {
                Result { try waiter.execute("BEGIN IMMEDIATE; INSERT INTO t VALUES (1); COMMIT") }
            }
            #expect(TestSupport.eventually { waiter.lockWaitCount > 0 }, "the insert never waited for the lock")
        }
    }

    @Test func aWaitForALockEndsWhenItsWaitsAreAbandoned() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let w = try WaitingWrite(in: dir)
        #expect(w.insert.result(within: 0) == nil, "the insert ended while the lock was held")
        // Only the abandonment can end this wait in time.
        w.waiter.lockWaits.cancel()
        let abandoned = try #require(w.insert.result(), "the wait did not end when abandoned")
        #expect(throws: SQLiteError.self) { try abandoned.get() }
        // From now on a locked file fails at once: the handler no longer waits.
        let calls = w.waiter.lockWaitCount
        #expect(throws: SQLiteError.self) { try w.waiter.execute("BEGIN IMMEDIATE") }
        #expect(w.waiter.lockWaitCount == calls + 1, "one call, which gave up")
        // Nothing was written, and the file is usable once the lock is released.
        try w.holder.execute("ROLLBACK")
        #expect(w.rows == .integer(0))
        let other = try SQLiteDatabase(path: w.setup.path, create: false)
        try other.execute("INSERT INTO t VALUES (2)")
        #expect(w.rows == .integer(1))
    }

    /// Without an abandonment a wait still ends when the lock is released: the handler retries.
    @Test func aWaitForALockEndsWhenTheLockIsReleased() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let w = try WaitingWrite(in: dir)
        try w.holder.execute("COMMIT")
        let inserted = try #require(w.insert.result(), "the wait did not end when the lock was released")
        #expect(throws: Never.self) { try inserted.get() }
        #expect(w.rows == .integer(1))
    }

    /// A store's connections share one abandonment: the App Check state's reader, opened on the store's
    /// connection, gives up with it.
    @Test func aStoreAbandonsTheWaitsOfItsConnections() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let binary = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(binary, ["init", "--store", path]).status == 0)
        let store = try RolloutStore(path: path, create: false)
        let holder = try Self.holdWriteLock(path)
        defer { try? holder.execute("ROLLBACK") }
        #expect(!store.database.lockWaits.isCancelled)
        store.abandonLockWaits()
        #expect(store.database.lockWaits.isCancelled)
        let calls = store.database.lockWaitCount
        // With the lock held and its waits abandoned, a write fails after one call of the handler, which gives up.
        #expect(throws: (any Error).self) { try store.database.transaction(immediate: true) {} }
        #expect(store.database.lockWaitCount == calls + 1)
    }
}
