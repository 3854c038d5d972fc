import AppCheck
import Foundation
import Rollout
import Testing
import Timekeeping

@testable import SQLiteStore

/// A write that finds the file exactly as this connection's own last commit left it skips the full seal check
/// (`RolloutStore.installSeal`); any change made in between by someone else, by this connection outside a
/// transaction, or to the witness, still sends the next write through the whole check and is refused.
@Suite struct SealFastPathTests {
    static let t0 = Instant(seconds: 1_780_000_000)
    static let app = "1:1234567890:ios:0123456789abcdef"

    /// A store with a debug token (a sealed table with a row) and one consumed token, and its App Check state.
    static func store() throws -> (StoreFixture, RolloutStore, AppCheckStateTables) {
        let f = try StoreFixture("fastpath")
        let (store, _) = try f.open()
        let state = try AppCheckStateTables(database: store.database)
        try state.addDebugToken(
            DebugTokenRecord(appId: app, digest: [UInt8](repeating: 5, count: 32), name: "ci", createdAt: t0))
        #expect(try state.consumeToken(id: "jti-0", expiresAt: t0 + .minutes(60)))
        return (f, store, state)
    }

    static func isRefusedAsCorrupt(_ body: () throws -> Void) -> Bool {
        do {
            try body()
            return false
        } catch StoreError.corrupt {
            return true
        } catch {
            return false
        }
    }

    @Test("consecutive writes of one connection run the full check once, and the store still verifies")
    func ownWritesSkipTheFullCheck() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        let before = store.sealChecks.full
        for i in 1...20 { #expect(try state.consumeToken(id: "jti-\(i)", expiresAt: Self.t0 + .minutes(60))) }
        #expect(try !state.consumeToken(id: "jti-3", expiresAt: Self.t0 + .minutes(60)))
        #expect(store.sealChecks.full == before)
        _ = try store.verify()
    }

    @Test("a per-request write rewrites only the seal's pages whose bytes changed, not its whole row")
    func sealIsUpdatedInPlace() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        #expect(try state.consumeToken(id: "jti-1", expiresAt: Self.t0 + .minutes(60)))
        // The seal row (its schema entries) spans more than a page: rewriting it whole would show in the WAL.
        let sealBytes = try store.withDatabase { db in
            try db.query("SELECT length(CAST(tables || mac || tally AS BLOB)) FROM store_seal WHERE id = 1").first?[0].int ?? 0
        }
        #expect(sealBytes > 4096)
        try store.withDatabase { db in try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        #expect(try state.consumeToken(id: "jti-2", expiresAt: Self.t0 + .minutes(60)))
        // Frames in the WAL now: those of that one commit. The token's two B-tree leaves (the table and its expiry
        // index) and the seal's page or two holding its `from` entry, MAC and tallies; a REPLACE of the seal row
        // wrote every page of it, its table leaf and the file header's free-list count too (6 here, against 3).
        let frames = try store.withDatabase { db in try db.query("PRAGMA wal_checkpoint(PASSIVE)").first?[1].int ?? -1 }
        #expect(frames >= 3 && frames <= 4, "one consumed token's commit wrote \(frames) pages")
        _ = try store.verify()
    }

    @Test("a sealed table changed by another connection between two writes is refused by the next write")
    func otherConnectionsChangeIsRefused() throws {
        let (f, store, state) = try Self.store()
        try SQLiteDatabase(path: f.path, create: false).execute("UPDATE appcheck_debug_tokens SET name = 'mallory'")
        let before = store.sealChecks.full
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-1", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before + 1)
    }

    @Test("a sealed row's bytes edited in the file itself, not through SQLite, between two writes are refused by the next write")
    func bytesEditedInTheFileAreRefused() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        let marker = "marker-" + String(repeating: "A", count: 24)
        try state.addDebugToken(
            DebugTokenRecord(appId: Self.app, digest: [UInt8](repeating: 6, count: 32), name: marker, createdAt: Self.t0))
        // The row into the file itself (an empty WAL), then writes of this connection's that take the fast path,
        // with the row's page in its cache.
        try store.withDatabase { db in try db.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        for i in 1...3 { #expect(try state.consumeToken(id: "jti-\(i)", expiresAt: Self.t0 + .minutes(60))) }
        let before = store.sealChecks.full
        #expect(try state.consumeToken(id: "jti-4", expiresAt: Self.t0 + .minutes(60)))
        #expect(store.sealChecks.full == before, "the fast path")
        // Someone with write access to the file rewrites the row's bytes in place (same length, same inode).
        let handle = try #require(FileHandle(forUpdatingAtPath: f.path))
        let bytes = try handle.readToEnd() ?? Data()
        var offsets: [Int] = []
        var from = bytes.startIndex
        while let r = bytes.range(of: Data(marker.utf8), in: from..<bytes.endIndex) {
            offsets.append(r.lowerBound)
            from = r.upperBound
        }
        try #require(!offsets.isEmpty, "the row is in the file")
        for offset in offsets {
            try handle.seek(toOffset: UInt64(offset))
            handle.write(Data(("marker-" + String(repeating: "B", count: 24)).utf8))
        }
        try handle.close()
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-5", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before + 1)
        #expect { try store.verify() } throws: { "\($0)".contains("appcheck_debug_tokens") }
    }

    @Test("a sealed table changed through this connection outside a transaction is refused by the next write")
    func ownConnectionsChangeOutsideATransactionIsRefused() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        try store.database.execute("UPDATE appcheck_debug_tokens SET name = 'mallory'")
        let before = store.sealChecks.full
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-1", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before + 1)
    }

    @Test("a schema change through this connection outside a transaction sends the next write through the full check")
    func ownSchemaChangeIsRefused() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        try store.database.execute("CREATE TABLE intruder (x)")
        let before = store.sealChecks.full
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-1", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before + 1)
    }

    @Test("an older witness put back between two writes is refused by the next write, which skipped the full check")
    func olderWitnessIsRefused() throws {
        let (f, store, state) = try Self.store()
        defer { withExtendedLifetime(f) {} }
        let old = try Data(contentsOf: URL(fileURLWithPath: store.witness.path))
        for i in 1...3 { #expect(try state.consumeToken(id: "jti-\(i)", expiresAt: Self.t0 + .minutes(60))) }
        try old.write(to: URL(fileURLWithPath: store.witness.path))
        let before = store.sealChecks.full
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-9", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before)
        // The refused write rolled back: the next one runs the full check, which refuses too.
        #expect(Self.isRefusedAsCorrupt { _ = try state.consumeToken(id: "jti-9", expiresAt: Self.t0 + .minutes(60)) })
        #expect(store.sealChecks.full == before + 1)
    }
}
