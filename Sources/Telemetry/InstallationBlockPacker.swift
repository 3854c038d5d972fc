/// Cuts a run of installations in id order into blocks (`InstallationBlock`) of about `InstallationBlock.targetBytes`:
/// the part of merging installations into stored blocks that does not depend on where the blocks are stored (the
/// SQLite store's `InstallationBlockWriter` and the PostgreSQL store's range-keyed blocks both use it).
///
/// Installations are gathered encoded; once twice the target is gathered, a block of about the target is cut off the
/// front, and `flush` writes the rest as few blocks of about equal size as keep each within the target (an
/// installation bigger than the target alone in its block). Each block goes to `emit` with the id of its last
/// installation, its number of installations, its bytes (format byte first) and whether it is the last block of a
/// `flush`; the id and bytes are valid only during the call.
public struct InstallationBlockPacker {
    public typealias Emit = (
        _ lastID: UnsafeRawBufferPointer, _ installations: Int, _ block: UnsafeRawBufferPointer, _ lastOfFlush: Bool
    ) throws -> Void

    /// Installations gathered for the next blocks, encoded, and where each starts.
    private var pending: [UInt8] = []
    private var starts: [Int] = []
    private var block: [UInt8] = []

    public init() {
        pending.reserveCapacity(3 * InstallationBlock.targetBytes)
        block.reserveCapacity(3 * InstallationBlock.targetBytes)
    }

    /// Whether nothing is gathered.
    public var isEmpty: Bool { starts.isEmpty }

    /// Adds the record of `id` (ids in increasing order), cutting off a block when enough is gathered.
    public mutating func put(_ id: UnsafeRawBufferPointer, _ record: InstallationRecord, emit: Emit) throws {
        starts.append(pending.count)
        InstallationBlock.encode(id: id, record, to: &pending)
        while pending.count >= 2 * InstallationBlock.targetBytes {
            let end = fitting(from: 0, within: InstallationBlock.targetBytes)
            try write(records: 0..<end, last: false, emit: emit)
            let shift = byteEnd(end)
            pending.removeFirst(shift)
            starts.removeFirst(end)
            for i in starts.indices { starts[i] -= shift }
        }
    }

    /// Adds one installation already encoded (an installation of a stored block carried over unchanged).
    public mutating func append<Bytes: Collection<UInt8>>(encoded: Bytes) {
        starts.append(pending.count)
        pending.append(contentsOf: encoded)
    }

    /// Writes everything gathered, as few blocks of about equal size as keep each within the target.
    public mutating func flush(emit: Emit) throws {
        guard !starts.isEmpty else { return }
        let target = InstallationBlock.targetBytes
        let parts = max(1, (pending.count + target - 1) / target)
        // Each part takes whole installations up to its share of the bytes, give or take one installation.
        let share = min(target, (pending.count + parts - 1) / parts + pending.count / starts.count)
        var first = 0
        while first < starts.count {
            let end = fitting(from: first, within: share)
            try write(records: first..<end, last: end == starts.count, emit: emit)
            first = end
        }
        pending.removeAll(keepingCapacity: true)
        starts.removeAll(keepingCapacity: true)
    }

    /// Where the gathered installation `i` starts (the end of the bytes for `i == starts.count`).
    private func byteEnd(_ i: Int) -> Int { i < starts.count ? starts[i] : pending.count }

    /// The end of the run of gathered installations from `first` whose bytes fit in `limit` (at least one).
    private func fitting(from first: Int, within limit: Int) -> Int {
        var end = first + 1
        while end < starts.count, byteEnd(end + 1) - starts[first] <= limit { end += 1 }
        return end
    }

    /// Emits the gathered installations `records` as one block.
    private mutating func write(records: Range<Int>, last: Bool, emit: Emit) throws {
        let from = starts[records.lowerBound]
        let to = byteEnd(records.upperBound)
        block.removeAll(keepingCapacity: true)
        block.append(InstallationBlock.format)
        block.append(contentsOf: pending[from..<to])
        let lastStart = starts[records.upperBound - 1]
        let count = records.count
        let block = self.block
        try pending.withUnsafeBytes { bytes throws in
            guard let id = InstallationBlock.id(atStartOf: UnsafeRawBufferPointer(rebasing: bytes[lastStart...])) else {
                throw InstallationBlockError("a block to write ends in a damaged installation")
            }
            try block.withUnsafeBytes { try emit(id, count, $0, last) }
        }
    }
}

/// Installations kept in blocks keyed by the upper end of their id range, the PostgreSQL store's form: within one
/// group of installations (a partition), the block keyed `upper` holds the installations with ids after the
/// previous block's key and up to `upper`, and the last block's key is `InstallationRanges.end` (one byte 0xFF,
/// after every UTF-8 id), so that every id has exactly one block once its group has any. A block is found with
/// `upper >= id ORDER BY upper LIMIT 1`; it is rewritten under the same key, and a block that outgrew the target is
/// split: its last part keeps the key, the others are new blocks keyed by their last id (all after the previous
/// block's key), so blocks are never deleted and never overlap.
public enum InstallationRanges {
    /// The key of a group's last block: 0xFF never occurs in UTF-8, so it sorts after every id (bytes, then length).
    public static let end: [UInt8] = [0xFF]

    /// A block to store: `replacing` when it keeps the key of the stored block it came from (an update), false for
    /// a new key (an insert).
    public struct Written: Equatable, Sendable {
        public var upper: [UInt8]
        public var installations: Int
        public var data: [UInt8]
        public var replacing: Bool
    }

    /// Merges the installations `ids` (increasing, each with its index into the caller's list) into the stored
    /// blocks of one group that hold them (`stored`, increasing keys, each the block of at least one of the ids;
    /// none when the group has no block yet). `settle(index, previous)` gives an installation's new record from
    /// its stored one; installations of the blocks that are not in `ids` are carried over byte for byte.
    public static func merge(
        stored: [(upper: [UInt8], data: [UInt8])], ids: [(id: [UInt8], index: Int)],
        settle: (_ index: Int, _ previous: InstallationRecord?) throws -> InstallationRecord
    ) throws -> [Written] {
        var out: [Written] = []
        var packer = InstallationBlockPacker()
        var next = 0
        func emitting(upper: [UInt8]?) -> InstallationBlockPacker.Emit {
            { lastID, n, bytes, last in
                if last, let upper {
                    out.append(Written(upper: upper, installations: n, data: Array(bytes), replacing: true))
                } else {
                    out.append(Written(upper: last ? end : Array(lastID), installations: n, data: Array(bytes), replacing: false))
                }
            }
        }
        for block in stored {
            let emit = emitting(upper: block.upper)
            try block.data.withUnsafeBytes { bytes throws in
                var reader = try InstallationBlock.Reader(bytes)
                var carried = false
                while let (storedID, record) = try reader.next() {
                    let range = reader.lastRange
                    var taken = false
                    // The batch's ids before this stored one are new; the one equal to it settles from it.
                    while next < ids.count {
                        let c = ids[next].id.withUnsafeBytes { compareInstallationIDs($0, storedID) }
                        if c > 0 { break }
                        let index = ids[next].index
                        try ids[next].id.withUnsafeBytes { id in try packer.put(id, try settle(index, c == 0 ? record : nil), emit: emit) }
                        next += 1
                        if c == 0 {
                            taken = true
                            break
                        }
                    }
                    if !taken { packer.append(encoded: bytes[range]) }
                    carried = true
                }
                if !carried { throw InstallationBlockError("a stored block holds no installation") }
            }
            // The batch's ids after the block's last installation and up to its key.
            while next < ids.count, ids[next].id.lexicographicallyPrecedes(block.upper) || ids[next].id == block.upper {
                let index = ids[next].index
                try ids[next].id.withUnsafeBytes { id in try packer.put(id, try settle(index, nil), emit: emit) }
                next += 1
            }
            try packer.flush(emit: emit)
        }
        if next < ids.count {
            guard stored.isEmpty else { throw InstallationBlockError("an installation after its group's last block") }
            // A group with no block yet: its blocks up to the end key.
            let emit = emitting(upper: nil)
            while next < ids.count {
                let index = ids[next].index
                try ids[next].id.withUnsafeBytes { id in try packer.put(id, try settle(index, nil), emit: emit) }
                next += 1
            }
            try packer.flush(emit: emit)
        }
        return out
    }
}

extension InstallationRanges {
    /// FNV-1a (32 bits) of an installation id's bytes: the PostgreSQL store's partition of an installation is this
    /// modulo its number of partitions, the same in every process.
    @inline(__always) public static func fnv1a(_ id: UnsafeRawBufferPointer) -> UInt32 {
        var h: UInt32 = 2_166_136_261
        for byte in id { h = (h ^ UInt32(byte)) &* 16_777_619 }
        return h
    }

    /// The installations of `batch` in `groups` groups (`fnv1a` of the id modulo `groups`), in id order within each,
    /// each with its index into the deltas returned: the input of `merge` for every group of a batch. Here, in the
    /// core: it is the batch's work, whatever store the groups go to.
    public static func grouped(_ batch: TelemetryBatch, groups: Int) throws -> (
        groups: [[(id: [UInt8], index: Int)]], deltas: [InstallationDelta]
    ) {
        var out = [[(id: [UInt8], index: Int)]](repeating: [], count: groups)
        var deltas: [InstallationDelta] = []
        deltas.reserveCapacity(batch.installationBound)
        try batch.forEachInstallationID { id, delta in
            out[Int(fnv1a(id) % UInt32(groups))].append((Array(id), deltas.count))
            deltas.append(delta)
        }
        return (out, deltas)
    }

    /// `merge` with each installation settled by `settlement` from `deltas[index]` (a batch landing), in the core
    /// for the same reason as `grouped`.
    public static func merge(
        stored: [(upper: [UInt8], data: [UInt8])], ids: [(id: [UInt8], index: Int)], deltas: [InstallationDelta],
        settlement: inout BatchSettlement
    ) throws -> [Written] {
        try merge(stored: stored, ids: ids) { index, previous in settlement.settle(deltas[index], previous: previous) }
    }
}
