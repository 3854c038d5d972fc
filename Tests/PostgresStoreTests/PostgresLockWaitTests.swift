import Foundation
@testable import PostgresStore
import RemoteConfig
import Rollout
import RolloutApp
import Testing
import TestSupport
import Timekeeping

/// A write that finds the chain head locked by another session waits for it, unless its store abandons lock
/// waits (`PostgresConfigStore.abandonLockWaits`, what `serve` does past its drain): the statement waiting is
/// cancelled and the transaction rolls back, and no transaction begins afterwards.
struct PostgresLockWaitTests {
    @Test func aWriteWaitingForTheHeadLockEndsWhenItsWaitsAreAbandoned() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let before = try store.current().info.number
        // Another session holds the chain head's row, as a publish in progress does.
        let holder = try PGConnection(conninfo)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT version FROM config_head WHERE id = 1 FOR UPDATE")
        nonisolated(unsafe) let path = WritePath(
            store: store, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "unused" })
        let request = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@test", reason: "waits", origin: "TEST")
        let write = BackgroundCall { Result { _ = try path.execute(request) } }
        // The write is waiting for the row lock (bounded wait for the server to show it).
        let probe = try PGConnection(conninfo)
        #expect(
            try TestSupport.eventually {
                try probe.query(
                    "SELECT count(*) FROM pg_stat_activity "
                        + "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).first?.first == "1"
            }, "no session waits for the head lock")
        #expect(write.result(within: 0) == nil)
        store.abandonLockWaits()
        let ended = try #require(write.result(), "the write still waits after its waits were abandoned")
        #expect(throws: PostgresError.self) { try ended.get() }
        if case .failure(let e as PostgresError) = ended { #expect(e.sqlState == "57014", "\(e)") }
        // From now on no transaction begins on the store's connection, lock or no lock.
        #expect(throws: StoreError.self) { try store.atomically {} }
        try holder.execute("ROLLBACK")
        #expect(throws: StoreError.self) { try store.atomically {} }
        // Nothing was written; another connection writes as usual.
        let other = try PostgresConfigStore(conninfo: conninfo)
        #expect(try other.current().info.number == before)
        let otherPath = WritePath(store: other, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "unused" })
        guard case .published = try otherPath.execute(request) else {
            throw TestSupport.Failure("the set published nothing")
        }
        #expect(try other.current().info.number == before + 1)
    }

    /// A write that waits for the head lock longer than the store's lock timeout fails with 55P03, which the CLI
    /// reports as a busy store (as the SQLite store's busy wait does), and writes nothing; once the other session
    /// lets go, the same store writes.
    @Test func aWriteWaitingLongerThanTheLockTimeoutFailsAsABusyStore() throws {
        let (fresh, conninfo) = try PostgresStoreTests.freshStore()
        let before = try fresh.current().info.number
        let store = try PostgresConfigStore(conninfo: conninfo, lockTimeoutMilliseconds: 200)
        let holder = try PGConnection(conninfo)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT version FROM config_head WHERE id = 1 FOR UPDATE")
        let path = WritePath(store: store, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "unused" })
        let request = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@test", reason: "busy", origin: "TEST")
        // On a thread of its own: without the bound it would wait for as long as the holder holds.
        nonisolated(unsafe) let unsafePath = path
        let write = BackgroundCall { Result { _ = try unsafePath.execute(request) } }
        let rollback = { try holder.execute("ROLLBACK") }
        guard let error = try Self.failure(of: write, "the write", on: "the head lock", release: rollback) else {
            return
        }
        #expect(error.sqlState == "55P03" && error.isLockTimeout, "\(error)")
        #expect(StoreFault(error)?.isBusy == true)
        #expect(StoreFault(PostgresError(sqlState: "57014", message: "cancelled"))?.isBusy == false)
        // The session's default bound is the SQLite store's busy timeout.
        #expect(try fresh.connection.query("SHOW lock_timeout").first?.first == "10s")
        try holder.execute("ROLLBACK")
        #expect(try store.current().info.number == before)
        guard case .published = try path.execute(request) else {
            throw TestSupport.Failure("the set published nothing")
        }
        #expect(try fresh.current().info.number == before + 1)
    }

    /// A migration (`init`, `store migrate`, `store copy`, adopting a Firebase project) bounds its lock waits as the
    /// store does: one that waits longer than the bound for the schema's advisory lock (another migration, here a
    /// session holding it) fails as a busy store, writes nothing, and runs once the lock is let go.
    @Test func aMigrationWaitingLongerThanTheLockTimeoutFailsAsABusyStore() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let bound = try PostgresSchema.migrating(conninfo: conninfo) { c, _ in
            try c.query("SHOW lock_timeout").first?.first
        }
        #expect(bound == "10s")
        let holder = try PGConnection(conninfo)
        _ = try holder.query("SELECT pg_advisory_lock($1)", [PostgresSchema.advisoryLock])
        let migration = BackgroundCall {
            Result {
                try PostgresSchema.migrating(conninfo: conninfo, lockTimeoutMilliseconds: 200) { c, applied in
                    try c.execute("CREATE TABLE written_by_the_migration (n INTEGER)")
                    return applied
                }
            }
        }
        let unlock = { _ = try holder.query("SELECT pg_advisory_unlock($1)", [PostgresSchema.advisoryLock]) }
        guard
            let error = try Self.failure(of: migration, "the migration", on: "the advisory lock", release: unlock)
        else { return }
        #expect(error.isLockTimeout && StoreFault(error)?.isBusy == true, "\(error)")
        #expect(try holder.query("SELECT to_regclass('written_by_the_migration') IS NULL").first?.first == "t")
        try unlock()
        let applied = try PostgresSchema.migrating(conninfo: conninfo, lockTimeoutMilliseconds: 200) { _, s in s }
        #expect(applied == [])
    }

    /// The App Check state's reading connection (a request's reads in `serve`) has the store's bound too: a read of
    /// a table another session holds exclusively (a `psql` session's LOCK TABLE, a migration's DDL) fails as a busy
    /// store instead of holding the request for as long as the other session holds the table.
    @Test func anAppCheckReadWaitingLongerThanTheLockTimeoutFailsAsABusyStore() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let state = PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: conninfo, lockTimeoutMilliseconds: 200), key: nil)
        let digest = [UInt8](repeating: 7, count: 32)
        #expect(try state.hasDebugToken(appId: "1:1:ios:a", digest: digest) == false)
        let holder = try PGConnection(conninfo)
        try holder.execute("BEGIN")
        try holder.execute("LOCK TABLE appcheck_debug_tokens IN ACCESS EXCLUSIVE MODE")
        nonisolated(unsafe) let unsafeState = state
        let read = BackgroundCall { Result { try unsafeState.hasDebugToken(appId: "1:1:ios:a", digest: digest) } }
        let rollback = { try holder.execute("ROLLBACK") }
        guard let error = try Self.failure(of: read, "the read", on: "the table", release: rollback) else { return }
        #expect(error.isLockTimeout && StoreFault(error)?.isBusy == true, "\(error)")
        try holder.execute("ROLLBACK")
        #expect(try state.hasDebugToken(appId: "1:1:ios:a", digest: digest) == false)
    }

    /// The PostgreSQL error a call run on a thread of its own (with a 200 ms lock timeout) ended with. A call still
    /// waiting after `BackgroundCall`'s bound is recorded as an issue, after `release` lets the other session's lock
    /// go (nil: the test ends there); a call that returned, or failed otherwise, fails the test.
    static func failure<T>(
        of call: BackgroundCall<Result<T, any Error>>, _ what: String, on lock: String,
        release: () throws -> Void
    ) throws -> PostgresError? {
        guard let ended = call.result() else {
            try release()
            Issue.record("\(what) still waits for \(lock), far past its 200 ms lock timeout")
            return nil
        }
        guard case .failure(let failure) = ended, let error = failure as? PostgresError else {
            throw TestSupport.Failure("\(what) did not fail with a PostgreSQL error: \(ended)")
        }
        return error
    }
}
