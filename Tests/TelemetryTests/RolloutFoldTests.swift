import Foundation
import Rollout
import SQLiteStore
import TelemetryFixtures
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry

/// The materialised fold (`RolloutFold`, `FoldTable`): advanced by each commit, it must give exactly what a reader
/// folding from the rollout start gives.
@Suite("Materialised rollout fold")
struct RolloutFoldTests {
    /// Events of `minutes` for a rollout with crashes leaning to the exposed side and some attestation failures.
    func minuteEvents(_ m: Int64, rng: inout Xoshiro256) -> [TelemetryEvent] {
        var events: [TelemetryEvent] = []
        for i in 0..<(10 + Int(rng.next() % 30)) {
            let cohort: Cohort = [.enabled, .control, .none][Int(rng.next() % 3)]
            let id = "i\(rng.next() % 400)"
            let s = m * 60 + Int64(rng.next() % 60)
            events.append(event(s, id, .sessionStart, cohort))
            if rng.uniform() < (cohort == .enabled ? 0.2 : 0.08) {
                events.append(event(s, id, .crash(fatal: true), cohort))
            }
            if cohort == .enabled {
                let failure: TelemetryEventKind =
                    i % 2 == 0 ? .attestationFailure(.serverUnavailable) : .attestationFailure(.invalidKey)
                events.append(event(s, id, rng.uniform() < 0.85 ? .attestationSuccess : failure, cohort))
            }
            if rng.uniform() < 0.1 { events.append(event(s, id, .configFetch(templateVersion: 3), cohort)) }
        }
        return events
    }

    /// The stored fold, its bytes, and the snapshot of a reader that starts from it.
    func storedAndCold(_ tables: TelemetryTables, _ config: WatchConfiguration, now: Instant) throws
        -> (stored: [UInt8], warm: TelemetrySnapshot, cold: [UInt8], coldSnapshot: TelemetrySnapshot)
    {
        let stored = try #require(try FoldTable.load(from: tables.database)).encoded()
        let reader = try TelemetryTables(database: tables.database, retention: tables.retention)
        let warm = try reader.snapshot(config, now: now)
        #expect(reader.foldsFromStart == 0)
        try reader.discardFold()
        let coldSnapshot = try reader.snapshot(config, now: now)
        #expect(reader.foldsFromStart == 1)
        let cold = try #require(try FoldTable.load(from: tables.database)).encoded()
        return (stored, warm, cold, coldSnapshot)
    }

    func expectSame(_ a: TelemetrySnapshot, _ b: TelemetrySnapshot) {
        #expect(a.totals == b.totals)
        #expect(a.preRollout == b.preRollout)
        #expect(a.crash == b.crash)
        #expect(a.failureMonitors == b.failureMonitors)
        #expect(a.settledThrough == b.settledThrough)
        #expect(a.series.map(\.totals) == b.series.map(\.totals))
        #expect(a.windows.map(\.totals) == b.windows.map(\.totals))
        #expect(a.activity == b.activity)
        #expect(a.fetchedVersions == b.fetchedVersions)
    }

    @Test("advanced by each commit, in random batch orders with late events, it equals a fold from the start")
    func randomisedOrders() throws {
        for seed in UInt64(1)...6 {
            var rng = Xoshiro256(seed: seed)
            let tables = try temporaryTables()
            let config = WatchConfiguration(since: t0 + .minutes(5))
            let minutes = Int64(50 + rng.next() % 40)
            // Events per minute, then cut into batches in time order with some events held back (late data: a
            // few minutes behind, sometimes far behind, into minutes the fold has passed).
            var stream: [TelemetryEvent] = []
            for m in 0..<minutes { stream += minuteEvents(m, rng: &rng) }
            stream.sort { $0.time < $1.time }
            var held: [TelemetryEvent] = []
            var batches: [[TelemetryEvent]] = []
            var current: [TelemetryEvent] = []
            for e in stream {
                if rng.uniform() < 0.03 { held.append(e) } else { current.append(e) }
                if rng.uniform() < 0.04 {
                    if !held.isEmpty, rng.uniform() < 0.5 {
                        current += held
                        held = []
                    }
                    batches.append(current)
                    current = []
                }
            }
            batches.append(current + held)

            var materialised = false
            for (i, events) in batches.enumerated() where !events.isEmpty {
                try tables.commit(batch(events), source: "b\(i)", at: t0)
                // A reader materialises the fold once, part way through; from then on each commit advances it.
                if !materialised, i >= batches.count / 4, let newest = try tables.newestEvent() {
                    let reader = try TelemetryTables(database: tables.database)
                    _ = try reader.snapshot(config, now: newest)
                    materialised = try FoldTable.load(from: tables.database) != nil
                }
            }
            #expect(materialised, "seed \(seed): a fold was stored")
            let newest = try #require(try tables.newestEvent())
            for now in [newest, newest + .minutes(3), newest + .hours(1)] {
                let r = try storedAndCold(tables, config, now: now)
                #expect(r.stored == r.cold, "seed \(seed): the stored fold equals a fold from the start")
                expectSame(r.warm, r.coldSnapshot)
            }
        }
    }

    @Test("a new rollout start or new settings fold again; the stored fold follows the newest")
    func configurationChanges() throws {
        var rng = Xoshiro256(seed: 9)
        let tables = try temporaryTables()
        for m in Int64(0)..<30 { try tables.commit(batch(minuteEvents(m, rng: &rng)), source: "m\(m)", at: t0) }
        let now = t0 + .minutes(31)
        let first = WatchConfiguration(since: t0)
        _ = try TelemetryTables(database: tables.database).snapshot(first, now: now)
        var restarted = WatchConfiguration(since: t0 + .minutes(12))
        let reader = try TelemetryTables(database: tables.database)
        _ = try reader.snapshot(restarted, now: now)
        #expect(reader.foldsFromStart == 1)
        #expect(try FoldTable.load(from: tables.database)?.configuration == restarted)
        restarted.crash.harmRatio = 2
        _ = try reader.snapshot(restarted, now: now)
        #expect(reader.foldsFromStart == 2)
        for m in Int64(30)..<45 { try tables.commit(batch(minuteEvents(m, rng: &rng)), source: "m\(m)", at: t0) }
        let r = try storedAndCold(tables, restarted, now: t0 + .minutes(50))
        #expect(r.stored == r.cold)
        expectSame(r.warm, r.coldSnapshot)
        #expect(r.warm.crash.configuration.harmRatio == 2)
    }

    @Test("a stored fold that was edited, truncated or deleted is not trusted: the reader folds again")
    func tampering() throws {
        var rng = Xoshiro256(seed: 4)
        let tables = try temporaryTables()
        let config = WatchConfiguration(since: t0)
        for m in Int64(0)..<20 { try tables.commit(batch(minuteEvents(m, rng: &rng)), source: "m\(m)", at: t0) }
        let now = t0 + .minutes(25)
        let reference = try TelemetryTables(database: tables.database).snapshot(config, now: now)
        let db = tables.database
        let edits = [
            "UPDATE telemetry_fold SET state = substr(state, 1, length(state) - 1) || x'00'",  // one byte edited
            "UPDATE telemetry_fold SET state = substr(state, 1, 40)",  // truncated
            "DELETE FROM telemetry_fold",
        ]
        for edit in edits {
            _ = try TelemetryTables(database: db).snapshot(config, now: now)
            #expect(try FoldTable.load(from: db) != nil)
            try db.execute(edit)
            #expect(try FoldTable.load(from: db) == nil, "\(edit)")
            let reader = try TelemetryTables(database: db)
            expectSame(try reader.snapshot(config, now: now), reference)
            #expect(reader.foldsFromStart == 1)
        }
        // A commit on top of an untrusted fold leaves it to the next reader, which stores a good one again.
        try db.execute(edits[0])
        try tables.commit(batch(minuteEvents(20, rng: &rng)), source: "m20", at: t0)
        #expect(try FoldTable.load(from: db) == nil)
        _ = try TelemetryTables(database: db).snapshot(config, now: now)
        #expect(try FoldTable.load(from: db) != nil)
    }

    @Test("late data: the commit folds the stored fold again, and a long-lived reader continues from it")
    func lateDataLongLivedReader() throws {
        var rng = Xoshiro256(seed: 6)
        let tables = try temporaryTables()
        let config = WatchConfiguration(since: t0)
        var late: [TelemetryEvent] = []
        for m in Int64(0)..<30 {
            var events = minuteEvents(m, rng: &rng)
            if m == 4 { late = Array(events.suffix(5)); events.removeLast(5) }
            try tables.commit(batch(events), source: "m\(m)", at: t0)
        }
        let now = t0 + .minutes(33)
        let console = try TelemetryTables(database: tables.database)
        _ = try console.snapshot(config, now: now)
        #expect(console.foldsFromStart == 1)
        try tables.commit(batch(late), source: "late", at: t0)
        let after = try console.snapshot(config, now: now + .seconds(Int64(5)))
        #expect(console.foldsFromStart == 1, "the console took the fold the late batch's commit made")
        let fresh = try TelemetryTables(database: tables.database)
        try fresh.discardFold()
        expectSame(after, try fresh.snapshot(config, now: now + .seconds(Int64(5))))
        #expect(after.totals == (try tables.allTimeTotals()))
    }

    @Test("a reader whose clock is behind the folded minutes does not use the fold")
    func readerBehind() throws {
        var rng = Xoshiro256(seed: 5)
        let tables = try temporaryTables()
        let config = WatchConfiguration(since: t0)
        for m in Int64(0)..<20 { try tables.commit(batch(minuteEvents(m, rng: &rng)), source: "m\(m)", at: t0) }
        _ = try TelemetryTables(database: tables.database).snapshot(config, now: t0 + .minutes(21))
        let stored = try #require(try FoldTable.load(from: tables.database))
        let early = t0 + .minutes(10)
        #expect(!stored.isUsable(for: config, at: early))
        let reader = try TelemetryTables(database: tables.database)
        let behind = try reader.snapshot(config, now: early)
        #expect(reader.foldsFromStart == 1)
        #expect(behind.settledThrough! <= early)
    }

    @Test("the encoding round-trips and refuses every truncation")
    func encoding() throws {
        var rng = Xoshiro256(seed: 2)
        let config = WatchConfiguration(since: t0)
        let tables = try temporaryTables()
        for m in Int64(0)..<10 { try tables.commit(batch(minuteEvents(m, rng: &rng)), source: "m\(m)", at: t0) }
        _ = try tables.snapshot(config, now: t0 + .minutes(15))
        let fold = try #require(try FoldTable.load(from: tables.database))
        let bytes = fold.encoded()
        #expect(try RolloutFold(decoding: bytes).encoded() == bytes)
        // Stored as folded to the newest event (9:59 into minute 9): minutes 0–6 are settled there, not 7–9.
        #expect(fold.watch.crash.looks == 7)
        #expect(fold.cursorMinute == BucketLevel.minute.bucket(t0.microseconds) + 7)
        for n in stride(from: 0, to: bytes.count, by: max(1, bytes.count / 97)) {
            #expect(throws: FoldDecodingError.self) { try RolloutFold(decoding: Array(bytes.prefix(n))) }
        }
        #expect(throws: FoldDecodingError.self) { try RolloutFold(decoding: bytes + [0]) }
    }
}
