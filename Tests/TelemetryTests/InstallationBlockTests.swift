import Foundation
import Rollout
import SQLiteStore
import Telemetry
import TelemetryFixtures
import TestSupport
import Testing
import Timekeeping

@Suite("Installation blocks")
struct InstallationBlockTests {
    typealias Random = SplitMix64

    static func sample(_ r: inout Random) -> InstallationRecord {
        let times: [Int64] = [.min, .max, 0, -1, 1_780_000_000_000_000, 1_780_000_000_000_000 + Int64(r.below(1 << 30))]
        func time() -> Int64 { times[r.below(times.count)] }
        return InstallationRecord(
            firstSeen: time(), lastSeen: time(), cohort: Cohort.allCases[r.below(3)],
            provider: AttestationProvider(rawValue: UInt8(r.below(3))) ?? .unspecified, osMajor: UInt8(r.below(256)),
            sessions: [0, 1, Int64.max, Int64.min, Int64(r.below(1000))][r.below(5)],
            enteredCohorts: UInt8(r.below(256)), crashedCohorts: UInt8(r.below(256)),
            fetchedAt: r.below(3) == 0 ? nil : time(), templateVersion: r.below(3) == 0 ? nil : time(),
            lastCrashAt: r.below(3) == 0 ? nil : time())
    }

    static func decode(_ block: [UInt8]) throws -> [([UInt8], InstallationRecord)] {
        try block.withUnsafeBytes { bytes in
            var reader = try InstallationBlock.Reader(bytes)
            var out: [([UInt8], InstallationRecord)] = []
            while let (id, r) = try reader.next() { out.append((Array(id), r)) }
            return out
        }
    }

    @Test("every field round-trips exactly, extreme values and odd ids included")
    func roundTrip() throws {
        var r = Random(state: 11)
        var block: [UInt8] = [InstallationBlock.format]
        var expected: [([UInt8], InstallationRecord)] = []
        let ids: [[UInt8]] = [[], [0], Array("fid-1".utf8), [0xFF, 0x00, 0x80], [UInt8](repeating: 0x41, count: 3000)]
        for i in 0..<200 {
            let id = i < ids.count ? ids[i] : Array("id-\(i)".utf8)
            let record = Self.sample(&r)
            id.withUnsafeBytes { InstallationBlock.encode(id: $0, record, to: &block) }
            expected.append((id, record))
        }
        let decoded = try Self.decode(block)
        #expect(decoded.count == expected.count)
        for (a, b) in zip(decoded, expected) {
            #expect(a.0 == b.0)
            #expect(a.1 == b.1)
        }
    }

    @Test("a damaged block is an error, never a crash or a made-up installation past its end")
    func damage() throws {
        var r = Random(state: 5)
        var block: [UInt8] = [InstallationBlock.format]
        for i in 0..<20 {
            let id = Array("fid-\(i)-abcdef".utf8)
            id.withUnsafeBytes { InstallationBlock.encode(id: $0, Self.sample(&r), to: &block) }
        }
        let whole = try Self.decode(block)
        #expect(whole.count == 20)
        #expect(throws: InstallationBlockError.self) { try Self.decode([]) }
        #expect(throws: InstallationBlockError.self) { try Self.decode([2] + block.dropFirst()) }
        var errors = 0
        // Every truncation: the installations before the cut, then an error (or a clean end at a boundary).
        for cut in 1..<block.count {
            do {
                let part = try Self.decode(Array(block[0..<cut]))
                #expect(part.count < whole.count)
                #expect(zip(part, whole).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 })
            } catch is InstallationBlockError { errors += 1 }
        }
        #expect(errors > block.count / 2)
        // Random bytes flipped: whatever is read stays within the block.
        for _ in 0..<2000 {
            var bad = block
            for _ in 0..<(1 + r.below(4)) { bad[1 + r.below(bad.count - 1)] = UInt8(r.below(256)) }
            if let part = try? Self.decode(bad) { #expect(part.reduce(0) { $0 + $1.0.count } < bad.count) }
        }
    }

    /// The blocks of a store, checked: keys in order and equal to each block's last id, counts right, sizes
    /// within the target (beside blocks of one installation), ids increasing across blocks.
    static func checkedBlocks(_ tables: TelemetryTables) throws -> (blocks: Int, installations: [String: InstallationRecord]) {
        var all: [String: InstallationRecord] = [:]
        var previous: [UInt8]?
        let rows = try tables.database.query(
            "SELECT last_id, installations, data FROM telemetry_installation_blocks ORDER BY last_id")
        for row in rows {
            let key = try #require(row[0].bytes)
            let data = try #require(row[2].bytes)
            let records = try decode(data)
            #expect(Int64(records.count) == row[1].int)
            #expect(records.last?.0 == key)
            #expect(data.count - 1 <= InstallationBlock.targetBytes || records.count == 1, "a block of \(data.count) bytes")
            for (id, r) in records {
                if let previous {
                    #expect(
                        previous.withUnsafeBytes { p in id.withUnsafeBytes { compareInstallationIDs(p, $0) } } < 0)
                }
                previous = id
                all[String(decoding: id, as: UTF8.self)] = r
            }
        }
        return (rows.count, all)
    }

    @Test("batches of new and known ids merge into the blocks exactly as records one by one", arguments: 0..<6)
    func merging(seed: Int) throws {
        var r = Random(state: UInt64(seed) &+ 1)
        let tables = try temporaryTables()
        var expected: [String: InstallationRecord] = [:]
        let pool = (0..<3000).map { i in
            i % 97 == 0 ? String(repeating: "x", count: 1200) + "\(i)" : "fid-\(r.below(1 << 40))-\(i)"
        }
        for round in 0..<12 {
            // Small and large batches, ids anywhere in the range (before, between and after the stored ones).
            let size = round % 3 == 0 ? 1 + r.below(2000) : 1 + r.below(60)
            var events: [TelemetryEvent] = []
            for i in 0..<size {
                let id = pool[r.below(min(pool.count, 200 + round * 250))]
                let kind: TelemetryEventKind =
                    [.sessionStart, .crash(fatal: true), .configFetch(templateVersion: 3), .attestationSuccess][i % 4]
                events.append(event(Int64(r.below(3600)), id, kind, Cohort.allCases[r.below(3)]))
            }
            let b = batch(events)
            var settlement = BatchSettlement(batch: b, reasonCodes: [], retention: TelemetryRetention(), storedNewest: nil)
            try b.forEachInstallation { id, delta in expected[id] = settlement.settle(delta, previous: expected[id]) }
            try tables.commit(b, source: "r\(round)", at: t0 + .hours(2))
            let (blocks, stored) = try Self.checkedBlocks(tables)
            #expect(stored == expected, "round \(round)")
            #expect(try tables.installationCount() == expected.count)
            for id in expected.keys.prefix(50) { #expect(try tables.installation(id) == expected[id]) }
            #expect(try tables.installation("fid-missing") == nil)
            // No trail of small blocks: at most about twice the blocks the bytes need.
            let bytes = try tables.database.query("SELECT sum(length(data)) FROM telemetry_installation_blocks")[0][0].int!
            #expect(blocks <= 2 * (Int(bytes) / InstallationBlock.targetBytes + 1) + 3, "\(blocks) blocks for \(bytes) bytes")
        }
    }

    @Test("a store of schema 6 keeps every installation when its rows become blocks")
    func migration() throws {
        let directory = try TestSupport.temporaryDirectory("blocks-migration")
        let path = directory.appendingPathComponent("old.db").path
        var r = Random(state: 3)
        var expected: [String: InstallationRecord] = [:]
        do {
            let store = try RolloutStore(path: path)
            try store.withDatabase { db in
                try db.execute(
                    """
                    DROP TABLE telemetry_installation_blocks;
                    CREATE TABLE telemetry_installations(
                        id TEXT PRIMARY KEY NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
                        cohort INTEGER NOT NULL, provider INTEGER NOT NULL, os_major INTEGER NOT NULL,
                        sessions INTEGER NOT NULL, entered INTEGER NOT NULL, crashed INTEGER NOT NULL,
                        fetched_at INTEGER, template_version INTEGER) WITHOUT ROWID;
                    PRAGMA user_version = 6;
                    """)
                for i in 0..<2500 {
                    let id = "fid-\(r.below(1 << 30))-\(i)"
                    // Schema 6's rows have no latest fatal crash: it reads back as nil.
                    var x = Self.sample(&r)
                    x.lastCrashAt = nil
                    expected[id] = x
                    try db.run(
                        "INSERT INTO telemetry_installations VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        [
                            .text(id), .integer(x.firstSeen), .integer(x.lastSeen), .integer(Int64(x.cohort.code)),
                            .integer(Int64(x.provider.rawValue)), .integer(Int64(x.osMajor)), .integer(x.sessions),
                            .integer(Int64(x.enteredCohorts)), .integer(Int64(x.crashedCohorts)),
                            x.fetchedAt.map { .integer($0) } ?? .null, x.templateVersion.map { .integer($0) } ?? .null,
                        ])
                }
            }
        }
        let store = try RolloutStore(path: path)
        try store.withDatabase { db in
            #expect(try StoreSchema.version(of: db) == StoreSchema.current)
            #expect(try !db.hasTable("telemetry_installations"))
            let tables = try TelemetryTables(database: db)
            let (_, stored) = try Self.checkedBlocks(tables)
            #expect(stored == expected)
        }
    }
}
