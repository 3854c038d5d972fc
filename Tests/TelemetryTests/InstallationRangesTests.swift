import Rollout
import Telemetry
import Testing
import TestSupport

/// The PostgreSQL store's range-keyed installation blocks (`InstallationRanges.merge`), held here in a dictionary
/// as a table would hold them: after every round of merges the blocks hold exactly the model's installations, in
/// id order, every block within the target size, every id in the block its key range names, the last key the end.
@Suite("Installation ranges")
struct InstallationRangesTests {
    typealias Random = SplitMix64

    /// One group's blocks as a table keyed by `upper` would hold them, with the merge applied as UPDATE/INSERT.
    struct Table {
        var blocks: [[UInt8]: [UInt8]] = [:]

        var keys: [[UInt8]] { blocks.keys.sorted { $0.lexicographicallyPrecedes($1) } }

        /// The blocks a lookup of `ids` reads: for each, the first key at or after it.
        func lookup(_ ids: [[UInt8]]) -> [(upper: [UInt8], data: [UInt8])] {
            let keys = keys
            var found: [[UInt8]] = []
            for id in ids {
                if let k = keys.first(where: { !$0.lexicographicallyPrecedes(id) }), found.last != k { found.append(k) }
            }
            return found.map { ($0, blocks[$0]!) }
        }

        mutating func apply(_ written: [InstallationRanges.Written]) {
            for w in written {
                #expect((blocks[w.upper] != nil) == w.replacing, "an UPDATE of an existing key, an INSERT of a new one")
                blocks[w.upper] = w.data
            }
        }
    }

    @Test func mergesKeepEveryInstallationInItsRange() throws {
        var r = Random(state: 36)
        var table = Table()
        var model: [[UInt8]: InstallationRecord] = [:]
        for round in 0..<40 {
            // A few new ids and some stored ones, in id order; some ids long, so some blocks split unevenly.
            var ids = Set<[UInt8]>()
            for _ in 0..<(1 + r.below(60)) {
                let n = r.below(3) == 0 ? 1 + r.below(200) : 4 + r.below(12)
                ids.insert((0..<n).map { _ in UInt8(0x21 + r.below(90)) })
            }
            let stored = Array(model.keys)
            for _ in 0..<r.below(30) where !stored.isEmpty { ids.insert(stored[r.below(stored.count)]) }
            let sorted = ids.sorted { $0.lexicographicallyPrecedes($1) }
            let before = model
            let written = try InstallationRanges.merge(
                stored: table.lookup(sorted), ids: sorted.enumerated().map { ($0.element, $0.offset) }
            ) { index, previous in
                let id = sorted[index]
                #expect(previous == before[id], "round \(round): the stored record is the one given")
                var record = previous ?? InstallationRecord(
                        firstSeen: Int64(round), lastSeen: Int64(round), cohort: .enabled, provider: .appAttest, osMajor: 17, sessions: 0,
                        enteredCohorts: 0, crashedCohorts: 0, fetchedAt: nil, templateVersion: nil)
                record.sessions += 1
                record.lastSeen = Int64(round)
                model[id] = record
                return record
            }
            table.apply(written)
            // The table holds the model, each id in the range of its key, blocks within the target.
            var previousKey: [UInt8]?
            var all: [([UInt8], InstallationRecord)] = []
            for key in table.keys {
                let entries = try InstallationBlockTests.decode(table.blocks[key]!)
                #expect(!entries.isEmpty)
                #expect(table.blocks[key]!.count <= InstallationBlock.targetBytes + 1 || entries.count == 1, "round \(round): block size")
                for (id, _) in entries {
                    #expect(!key.lexicographicallyPrecedes(id), "round \(round): an id after its block's key")
                    if let previousKey { #expect(previousKey.lexicographicallyPrecedes(id), "round \(round): an id in an earlier range") }
                }
                previousKey = key
                all += entries
            }
            #expect(table.keys.last == InstallationRanges.end)
            #expect(all.map(\.0) == model.keys.sorted { $0.lexicographicallyPrecedes($1) }, "round \(round): ids")
            for (id, record) in all { #expect(model[id] == record) }
        }
        #expect(table.blocks.count > 10, "blocks were split")
    }

    /// An installation the merge does not settle is carried over byte for byte; a block none of whose
    /// installations changed comes back with the same bytes (the store then skips writing it).
    @Test func untouchedInstallationsAreCarriedOverUnchanged() throws {
        let ids = (0..<30).map { Array("id-\($0 < 10 ? "0" : "")\($0)".utf8) }
        let record = InstallationRecord(
            firstSeen: 5, lastSeen: 9, cohort: .control, provider: .appAttest, osMajor: 17, sessions: 2, enteredCohorts: 1,
            crashedCohorts: 0, fetchedAt: nil, templateVersion: nil)
        let first = try InstallationRanges.merge(stored: [], ids: ids.enumerated().map { ($0.element, $0.offset) }) { _, _ in record }
        #expect(first.count == 1 && first[0].upper == InstallationRanges.end && !first[0].replacing && first[0].installations == 30)
        let again = try InstallationRanges.merge(stored: [(first[0].upper, first[0].data)], ids: [(ids[7], 0)]) { _, previous in
            #expect(previous == record)
            return previous!
        }
        #expect(again.count == 1)
        #expect(again.first?.upper == InstallationRanges.end && again.first?.installations == 30 && again.first?.replacing == true)
        #expect(again.first?.data == first[0].data)
    }
}
