import Foundation
import Rollout
import SQLiteStore
import TelemetryFixtures
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry
@testable import TelemetryIngest

/// Issue 17: a batch spills its installations to sorted runs once its table reaches `spillLimit`, and merges
/// them when it lands; the result must be the one of a batch that kept every installation in memory.
@Suite("ingest spill")
struct IngestSpillTests {
    /// Seeded: the same events for the same seed.
    typealias Random = SplitMix64

    /// Random events over `ids` installations, out of time order, with unknown providers and OS versions and
    /// equal times mixed in (what the latest-event fields are most sensitive to).
    static func fill(_ batches: [TelemetryBatch], seed: UInt64, events: Int, ids: Int, zeroBytes: Bool = false) {
        var r = Random(state: seed)
        // Ids of different lengths, some prefixes of others, so that byte order and length order both matter;
        // every fourth longer than the 16 bytes the sort and the merge compare as two words first, sharing those
        // 16 bytes with others; with `zeroBytes`, some of those end in NUL bytes (equal words, different ids).
        let names = (0..<ids).map { i in
            guard i % 4 == 3 else { return String(repeating: "f", count: i % 3) + "id\(i % 7)-\(i)" }
            let shared = "fid-0123456789a" + String(i % 2)
            let tail = zeroBytes && i % 8 == 7 ? String(repeating: "\0", count: 1 + i % 3) : "-\(i)"
            return i % 12 == 3 ? String(shared.prefix(14 + i % 3)) + tail : shared + tail
        }
        let base = t0.microseconds
        for _ in 0..<events {
            let id = names[r.below(ids)]
            let time = base + Int64(r.below(40)) * 15_000_000 + Int64(r.below(2))
            let kind = CounterKind(rawValue: UInt8(1 + r.below(5)))!
            let cohort = Cohort.allCases[r.below(3)]
            let provider = AttestationProvider.allCases[r.below(AttestationProvider.allCases.count)]
            let detail: UInt16 =
                switch kind {
                case .crash: UInt16(r.below(2))
                case .attestationFailure: batches[0].failureDetail(.serverUnavailable)
                default: 0
                }
            let os: UInt8 = r.below(3) == 0 ? 0 : UInt8(12 + r.below(6))
            let version = Int64(r.below(4))
            var bytes = id
            bytes.withUTF8 { p in
                for b in batches {
                    b.record(
                        time: time, id: UnsafeRawBufferPointer(p), kind: kind, cohort: cohort, provider: provider,
                        detail: detail, osMajor: os, templateVersion: version)
                }
            }
        }
    }

    /// Every public field of a delta, and its per-cohort first times.
    static func fields(_ d: InstallationDelta) -> [String] {
        var out = [
            "\(d.firstSeen)", "\(d.lastSeen)", "\(d.cohort)", "\(d.provider)", "\(d.osMajor)", "\(d.sessions)",
            "\(d.fetchedAt)", "\(d.templateVersion)", "\(String(describing: d.latestFatalCrash))",
        ]
        for c in Cohort.allCases {
            out += ["\(String(describing: d.entered(c)))", "\(String(describing: d.crashed(c)))"]
        }
        return out
    }

    static func installations(_ b: TelemetryBatch) throws -> [(String, [String])] {
        var out: [(String, [String])] = []
        try b.forEachInstallation { out.append(($0, fields($1))) }
        return out
    }

    /// A batch that never spills and one that keeps at most `limit` installations in memory (given spill files
    /// unless `spillFiles` is false): the tests record the same events into both.
    static func pair(limit: Int, spillFiles: Bool = true) -> (whole: TelemetryBatch, limited: TelemetryBatch) {
        let whole = TelemetryBatch()
        whole.spillLimit = .max
        let limited = TelemetryBatch()
        limited.spillLimit = limit
        if spillFiles { limited.spillToTemporaryFiles() }
        return (whole, limited)
    }

    /// `limited`'s installations read back are `whole`'s: the same ids in the same order, each with the same fields
    /// (a difference is recorded with its id and `context`). Returns them.
    @discardableResult
    static func expectSameInstallations(
        _ limited: TelemetryBatch, as whole: TelemetryBatch, _ context: String = ""
    ) throws -> [(String, [String])] {
        let expected = try installations(whole)
        let merged = try installations(limited)
        #expect(merged.map(\.0) == expected.map(\.0), "\(context)")
        for (a, b) in zip(merged, expected) where a.1 != b.1 {
            Issue.record("\(context) \(a.0): merged \(a.1), in memory \(b.1)")
        }
        #expect(limited.installationCount == whole.installationCount, "\(context)")
        return merged
    }

    /// Every field of a delta, internal ones too (what `merge` reads), but not the table position and hash.
    static func allFields(_ d: InstallationDelta) -> [String] {
        fields(d) + [
            "\(d.firstProvider)", "\(d.firstOSMajor)", "\(d.providerAt)", "\(d.osMajorAt)", "\(d.enteredAt)",
            "\(d.crashedAt)", "\(d.lastCrashAt)",
        ]
    }

    @Test("a spilled record reads back as the delta it was made from, extreme values and sentinels included")
    func codecRoundTrip() throws {
        var r = Random(state: 42)
        let extremes: [Int64] = [.min, .min + 1, -1, 0, 1, .max - 1, .max, 1_780_000_000_000_000]
        func time() -> Int64 {
            r.below(3) == 0 ? extremes[r.below(extremes.count)] : 1_780_000_000_000_000 + Int64(r.below(1 << 30))
        }
        var deltas: [(id: [UInt8], delta: InstallationDelta)] = []
        for i in 0..<2_000 {
            var d = InstallationDelta(
                idOffset: i, idLength: 9, hash: r.next(), time: time(), cohort: Cohort.allCases[r.below(3)])
            d.lastSeen = time()
            d.provider = AttestationProvider.allCases[r.below(AttestationProvider.allCases.count)]
            d.firstProvider = AttestationProvider.allCases[r.below(AttestationProvider.allCases.count)]
            d.osMajor = UInt8(r.below(256))
            d.firstOSMajor = UInt8(r.below(256))
            d.providerAt = r.below(2) == 0 ? .min : time()
            d.osMajorAt = r.below(2) == 0 ? .min : time()
            d.sessions = r.below(2) == 0 ? 0 : time()
            d.enteredAt = (r.below(2) == 0 ? .max : time(), r.below(2) == 0 ? .max : time(), time())
            d.crashedAt = (time(), r.below(2) == 0 ? .max : time(), r.below(2) == 0 ? .max : time())
            d.fetchedAt = r.below(2) == 0 ? .min : time()
            d.templateVersion = r.below(2) == 0 ? 0 : time()
            d.lastCrashAt = r.below(2) == 0 ? .min : time()
            // Ids of any length, the empty one and one longer than a read chunk's slack included.
            let length = i == 0 ? 0 : i == 1 ? 300_000 : r.below(40)
            deltas.append(((0..<length).map { _ in UInt8(r.below(256)) }, d))
        }
        var bytes: [UInt8] = []
        for (id, d) in deltas { id.withUnsafeBytes { SpillCodec.encode(d, id: $0, to: &bytes) } }
        try bytes.withUnsafeBufferPointer { buffer in
            var reader = ByteReader(base: buffer.baseAddress!, position: 0, end: buffer.count)
            for (id, d) in deltas {
                let n = try #require(SpillCodec.idLength(&reader))
                #expect(Array(buffer[reader.position..<reader.position + n]) == id)
                reader.position += n
                let back = try #require(SpillCodec.decodeDelta(&reader))
                #expect(Self.allFields(back) == Self.allFields(d))
            }
            #expect(reader.position == buffer.count)
        }
        // A record cut anywhere does not decode.
        var one: [UInt8] = []
        deltas[7].id.withUnsafeBytes { SpillCodec.encode(deltas[7].delta, id: $0, to: &one) }
        for cut in 0..<one.count {
            let decoded = one.withUnsafeBufferPointer { buffer -> InstallationDelta? in
                var reader = ByteReader(base: buffer.baseAddress!, position: 0, end: cut)
                guard let n = SpillCodec.idLength(&reader), reader.position + n <= cut else { return nil }
                reader.position += n
                return SpillCodec.decodeDelta(&reader)
            }
            #expect(decoded == nil, "cut at \(cut) of \(one.count) decoded")
        }
    }

    @Test("the spill's sort orders any input: random, sorted, reversed, few distinct keys, organ pipe")
    func introsortOrdersAnyInput() {
        var r = Random(state: 7)
        for n in [0, 1, 2, 3, 16, 17, 100, 1_000, 20_000] {
            let shapes: [(String, (Int) -> UInt64)] = [
                ("random", { _ in r.next() }), ("sorted", { UInt64($0) }), ("reversed", { UInt64(n - $0) }),
                ("few", { _ in r.next() % 3 }), ("organ", { UInt64(min($0, n - $0)) }),
            ]
            for (name, value) in shapes {
                let input = (0..<n).map { IDSortKey(high: value($0), low: r.next() % 2, index: Int32($0)) }
                let expected = input.map { [$0.high, $0.low] }.sorted { $0.lexicographicallyPrecedes($1) }
                // The default depth, and depth 0 and 1: heapsort from the start or after one partition.
                for depth in [nil, 0, 1] as [Int?] {
                    var keys = input
                    keys.withUnsafeMutableBufferPointer { b in
                        IDSortKey.introsort(b, depth: depth) { ($0.high, $0.low) < ($1.high, $1.low) }
                    }
                    #expect(keys.map { [$0.high, $0.low] } == expected, "\(name), \(n) keys, depth \(String(describing: depth))")
                    #expect(Set(keys.map(\.index)).count == n, "\(name), \(n) keys: not a permutation")
                }
            }
        }
    }

    /// Native lines for `concurrentRecording`: random events, escaped ids, rejection reasons, a duplicate key and
    /// bad lines among them.
    static func nativeLines(seed: UInt64, count: Int) -> [UInt8] {
        var r = Random(state: seed)
        let base = t0.microseconds
        var text = ""
        let kinds = [
            #""k":"session""#, #""k":"success","p":"appAttest""#, #""k":"failure","e":"serverUnavailable""#,
            #""k":"failure","e":"rejected:bad key","p":"deviceCheck""#, #""k":"failure","e":"rejected:replay""#,
            #""k":"fetch","v":7"#, #""k":"crash","fatal":true"#, #""k":"crash","fatal":false"#,
        ]
        for i in 0..<count {
            let n = r.below(300)
            let id = r.below(5) == 0 ? #"fid-\u00e9\u0041-\#(n)"# : "fid-\(n)"
            let t = base + Int64(r.below(3_600)) * 1_000_000
            let cohort = ["enabled", "control", "none"][r.below(3)]
            switch r.below(40) {
            case 0: text += "not json\n"
            case 1: text += #"{"t":\#(t),"i":"\#(id)","k":"session","k":"session","c":"\#(cohort)"}"# + "\n"
            default:
                text += #"{"t":\#(t),"i":"\#(id)",\#(kinds[r.below(kinds.count)]),"c":"\#(cohort)","os":"17.\#(i % 3)"}"# + "\n"
            }
        }
        return Array(text.utf8)
    }

    @Test("recording on a second thread leaves the batch exactly as recording in place", arguments: 0..<6)
    func concurrentRecordingIsExact(seed: Int) throws {
        let window = EventTimeWindow(now: t0 + .hours(2), rolloutStart: t0)
        let bytes = Self.nativeLines(seed: UInt64(seed), count: 5_000 + seed * 3_000)
        var r = Random(state: UInt64(seed) &+ 99)
        func run(_ concurrent: Bool) -> TelemetryIngest {
            let ingest = TelemetryIngest(format: .native, window: window, concurrentRecording: concurrent)
            ingest.batch.spillLimit = seed % 2 == 0 ? .max : 40 + seed  // with and without spilled runs
            var at = 0
            var chunks = Random(state: UInt64(seed))
            bytes.withUnsafeBytes { all in
                while at < all.count {
                    let n = min(all.count - at, 1 + chunks.below(9_000))
                    ingest.feed(UnsafeRawBufferPointer(rebasing: all[at..<at + n]))
                    at += n
                }
            }
            ingest.finish()
            return ingest
        }
        _ = r.next()
        let inPlace = run(false)
        let threaded = run(true)
        #expect(threaded.lines == inPlace.lines)
        #expect(threaded.recorded == inPlace.recorded && threaded.batchEvents == inPlace.batch.eventCount)
        #expect(threaded.problems == inPlace.problems && threaded.warnings == inPlace.warnings)
        #expect(threaded.batch.reasons == inPlace.batch.reasons)
        #expect(threaded.batch.eventCount == inPlace.batch.eventCount)
        #expect(threaded.batch.spilledRuns == inPlace.batch.spilledRuns)
        var counters: [[Int64]] = []
        inPlace.batch.forEachCounter { counters.append([$0, Int64($1.packed), $2]) }
        var threadedCounters: [[Int64]] = []
        threaded.batch.forEachCounter { threadedCounters.append([$0, Int64($1.packed), $2]) }
        #expect(threadedCounters.sorted { $0.lexicographicallyPrecedes($1) } == counters.sorted { $0.lexicographicallyPrecedes($1) })
        var expected: [(String, [String])] = []
        try inPlace.batch.forEachInstallation { expected.append(($0, Self.allFields($1))) }
        var got: [(String, [String])] = []
        try threaded.batch.forEachInstallation { got.append(($0, Self.allFields($1))) }
        #expect(got.map(\.0) == expected.map(\.0))
        #expect(got.map(\.1) == expected.map(\.1))
        #expect(expected.contains { $0.0.contains("\u{e9}") }, "no escaped id was read")
        #expect(inPlace.problemCount > 0 && inPlace.warningCount > 0 && inPlace.batch.reasons.count == 2)
    }

    struct Stop: Error {}

    @Test("a landing that fails part-way stops the merge thread, and the batch merges whole again after it")
    func failingBodyStopsTheMerge() throws {
        let batch = TelemetryBatch()
        batch.spillLimit = 50
        batch.spillToTemporaryFiles()
        Self.fill([batch], seed: 5, events: 60_000, ids: 30_000)
        #expect(batch.spilledRuns > 10)
        let whole = try Self.installations(batch)
        #expect(whole.count > 3 * MergedChunk.capacity)
        for stopAt in [0, 1, MergedChunk.capacity - 1, MergedChunk.capacity, 2 * MergedChunk.capacity + 7] {
            var seen = 0
            #expect(throws: Stop.self) {
                try batch.forEachInstallationID { _, _ in
                    if seen == stopAt { throw Stop() }
                    seen += 1
                }
            }
            #expect(seen == stopAt)
        }
        #expect(try Self.installations(batch).map(\.1) == whole.map(\.1))
        #expect(batch.installationCount == whole.count)
    }

    @Test("random batches give the same installations, in the same order, with any spill limit", arguments: 0..<40)
    func equivalence(seed: Int) throws {
        var r = Random(state: UInt64(seed) &* 7919)
        let limit = 1 + r.below(9)
        let (whole, spilled) = Self.pair(limit: limit)
        Self.fill(
            [whole, spilled], seed: UInt64(seed), events: 200 + r.below(800), ids: limit + 1 + r.below(60), zeroBytes: true)
        #expect(whole.spilledRuns == 0)
        #expect(spilled.spilledRuns > 0, "limit \(limit) spilled nothing")
        let merged = try Self.expectSameInstallations(spilled, as: whole, "seed \(seed), limit \(limit):")
        #expect(spilled.eventTotals() == whole.eventTotals())
        // Read back twice (a retried transaction merges again): the same.
        #expect(try Self.installations(spilled).map(\.1) == merged.map(\.1))
    }

    @Test("a spilled batch lands in the store exactly like one kept in memory, over several batches")
    func storeEquivalence() throws {
        let plain = try temporaryTables()
        let spilling = try temporaryTables()
        for round in 0..<4 {
            let (whole, spilled) = Self.pair(limit: 3 + round)
            Self.fill([whole, spilled], seed: UInt64(100 + round), events: 600, ids: 45)
            #expect(spilled.spilledRuns > 0)
            let a = try #require(try plain.commit(whole, source: "r\(round)", at: t0 + .minutes(20)))
            let b = try #require(try spilling.commit(spilled, source: "r\(round)", at: t0 + .minutes(20)))
            #expect(a == b)
        }
        for table in [
            "telemetry_installation_blocks ORDER BY last_id", "telemetry_counters ORDER BY level, bucket, key",
            "telemetry_presence ORDER BY hour, key", "telemetry_meta ORDER BY key",
        ] {
            let x = try plain.database.query("SELECT * FROM \(table)").map { "\($0)" }
            let y = try spilling.database.query("SELECT * FROM \(table)").map { "\($0)" }
            #expect(!x.isEmpty)
            #expect(x.count == y.count, "\(table): \(x.count) rows kept in memory, \(y.count) spilled")
            if let i = (0..<min(x.count, y.count)).first(where: { x[$0] != y[$0] }) {
                Issue.record("\(table) differs at row \(i): in memory \(x[i]), spilled \(y[i])")
            }
        }
        #expect(try plain.allTimeTotals() == (try spilling.allTimeTotals()))
    }

    @Test("a spill that cannot be written keeps its table whole: the batch merges exactly as one kept in memory")
    func failedSpill() throws {
        for failAfter in [0, 2, 5] {
            let (whole, spilled) = Self.pair(limit: 7)
            var r = Random(state: UInt64(failAfter) + 9)
            let names = (0..<90).map { "id-\($0)" }
            for i in 0..<900 {
                if spilled.spilledRuns == failAfter { spilled.spillsFail = true }
                let e = event(Int64(r.below(600)), names[r.below(names.count)], i % 3 == 0 ? .sessionStart : .attestationSuccess, Cohort.allCases[r.below(3)])
                whole.record(e)
                spilled.record(e)
            }
            #expect(spilled.spilledRuns == failAfter)
            #expect(spilled.installations.count > 7, "the table grew in memory after the failed spill")
            try Self.expectSameInstallations(spilled, as: whole, "failing after \(failAfter) runs:")
        }
    }

    @Test("a batch given no spill files (made outside an ingest) keeps its installations in memory past the limit")
    func noSpillFiles() throws {
        let (whole, bare) = Self.pair(limit: 7, spillFiles: false)
        for i in 0..<300 {
            let e = event(Int64(i % 600), "id-\(i % 90)", i % 3 == 0 ? .sessionStart : .attestationSuccess, .enabled)
            whole.record(e)
            bare.record(e)
        }
        #expect(bare.spilledRuns == 0)
        #expect(bare.installations.count > 7)
        try Self.expectSameInstallations(bare, as: whole)
    }

    @Test("ids longer than the spill's 256 KiB write buffer spill and merge back whole (a batch made in code)")
    func idsLongerThanTheSpillBuffer() throws {
        let (whole, spilled) = Self.pair(limit: 2)
        // Long ids between short ones, the same long id twice (merged across runs), and one longer than the buffer
        // by more than a record's fixed bytes.
        let long = (0..<3).map { String(repeating: "x", count: 300_000 + $0 * 70_000) + "-\($0)" }
        let ids = ["a", long[0], "b", long[1], long[0], "c", long[2], "d"]
        for (i, id) in ids.enumerated() {
            let e = event(Int64(i), id, i % 2 == 0 ? .sessionStart : .attestationSuccess, .enabled)
            whole.record(e)
            spilled.record(e)
        }
        #expect(spilled.spilledRuns > 0)
        #expect(try Self.expectSameInstallations(spilled, as: whole).count == 7)
    }

    @Test("the table stays at the spill limit however many installations come, and removeAll drops the runs")
    func boundedTable() throws {
        let b = TelemetryBatch()
        b.spillLimit = 100
        b.spillToTemporaryFiles()
        for i in 0..<1_050 {
            b.record(event(Int64(i % 50), "fid-\(i)", .sessionStart, .enabled))
            #expect(b.installations.count < 100)
        }
        #expect(b.spilledRuns == 10)
        #expect(b.installationCount == 1_050)
        #expect(b.installationBound == 1_050)
        var ids: [String] = []
        try b.forEachInstallation { id, _ in ids.append(id) }
        #expect(ids == (0..<1_050).map { "fid-\($0)" }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        b.removeAll()
        #expect(b.spilledRuns == 0)
        #expect(b.installationCount == 0)
    }
}
