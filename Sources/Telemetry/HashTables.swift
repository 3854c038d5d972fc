/// Small open-addressing hash tables for the ingest hot path.
///
/// The native ingest must not allocate per event, and Swift's `Dictionary` hashes with SipHash and its
/// `String` keys would allocate; these tables take raw keys (a `UInt64`, or id bytes copied once into an arena)
/// and probe linearly. Both belong to one `TelemetryBatch` and are never shared across threads.

/// The hash key of this process's ingest tables, drawn once from the system's secure random source
/// (`SystemRandomNumberGenerator`: getrandom(2) on Linux).
///
/// Installation ids are chosen by whoever writes the telemetry; with a fixed hash, ids that share a slot can be
/// computed offline and turn every lookup of the open-addressing tables into a scan of the whole table. Keyed
/// per process, the slots cannot be predicted from outside.
let processHashKey: (UInt64, UInt64) = {
    var random = SystemRandomNumberGenerator()
    return (random.next(), random.next())
}()

/// A multiplicative finaliser that spreads a 64-bit key over the table (from the splitmix64 mixer).
@inline(__always)
func mix64(_ x: UInt64) -> UInt64 {
    var z = x &+ 0x9E37_79B9_7F4A_7C15
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}

/// Hashes id bytes with SipHash-1-3 (the standard library's `Hasher`, a keyed pseudo-random function) under
/// `key`, so that collisions cannot be chosen without the key.
@inline(__always)
func hashBytes(_ p: UnsafeRawPointer, _ n: Int, key: (UInt64, UInt64)) -> UInt64 {
    var hasher = Hasher()
    hasher.combine(key.0)
    hasher.combine(key.1)
    hasher.combine(bytes: UnsafeRawBufferPointer(start: p, count: n))
    return UInt64(bitPattern: Int64(hasher.finalize()))
}

/// A map from `UInt64` keys (never `UInt64.max`) to `Int64` counts.
///
/// Keys are minute counters (minute index and counter key); the minute comes from the event time, so the slot
/// mixes in the process's hash key too.
final class CountMap {
    private let salt = processHashKey.0
    private(set) var keys: UnsafeMutablePointer<UInt64>
    private(set) var values: UnsafeMutablePointer<Int64>
    private(set) var capacity: Int
    private(set) var count = 0
    private var mask: Int
    private static let empty = UInt64.max

    init(capacity: Int = 1024) {
        self.capacity = capacity
        mask = capacity - 1
        keys = .allocate(capacity: capacity)
        keys.initialize(repeating: Self.empty, count: capacity)
        values = .allocate(capacity: capacity)
        values.initialize(repeating: 0, count: capacity)
    }

    deinit {
        keys.deallocate()
        values.deallocate()
    }

    @inline(__always)
    func add(_ key: UInt64, _ delta: Int64) {
        var i = Int(truncatingIfNeeded: mix64(key ^ salt)) & mask
        while true {
            let k = keys[i]
            if k == key {
                values[i] &+= delta
                return
            }
            if k == Self.empty {
                keys[i] = key
                values[i] = delta
                count += 1
                if count * 2 > capacity { grow() }
                return
            }
            i = (i + 1) & mask
        }
    }

    func forEach(_ body: (UInt64, Int64) throws -> Void) rethrows {
        for i in 0..<capacity where keys[i] != Self.empty { try body(keys[i], values[i]) }
    }

    func removeAll() {
        if count == 0 { return }
        keys.update(repeating: Self.empty, count: capacity)
        count = 0
    }

    private func grow() {
        let oldKeys = keys
        let oldValues = values
        let oldCapacity = capacity
        capacity *= 2
        mask = capacity - 1
        keys = .allocate(capacity: capacity)
        keys.initialize(repeating: Self.empty, count: capacity)
        values = .allocate(capacity: capacity)
        values.initialize(repeating: 0, count: capacity)
        count = 0
        for i in 0..<oldCapacity where oldKeys[i] != Self.empty { add(oldKeys[i], oldValues[i]) }
        oldKeys.deallocate()
        oldValues.deallocate()
    }
}

/// A set of installation ids, each with its `InstallationDelta`; ids are copied once into an arena.
final class InstallationTable {
    /// The key of `hash`, this process's (fixed per process so that a parsed id's hash stays valid).
    let hashKey = processHashKey
    private var slots: UnsafeMutablePointer<Int32>  // entry index + 1; 0 is empty
    private var slotMask: Int
    private(set) var entries: UnsafeMutablePointer<InstallationDelta>
    private(set) var count = 0
    private var entryCapacity: Int
    private(set) var arena: UnsafeMutablePointer<UInt8>
    private var arenaCount = 0
    private var arenaCapacity: Int
    /// The entries the table is expected to reach (its owner's spill limit), 0 when unknown: once past 64Ki
    /// entries it grows straight to that many. The allocation is only address space until entries are written,
    /// and the table never holds an old and a new copy of its entries at once (doubling from half the limit
    /// would, for a moment, hold one and a half times the limit).
    var reserve = 0

    init() {
        slotMask = 4095
        slots = .allocate(capacity: slotMask + 1)
        slots.initialize(repeating: 0, count: slotMask + 1)
        entryCapacity = 1024
        entries = .allocate(capacity: entryCapacity)
        arenaCapacity = 64 * 1024
        arena = .allocate(capacity: arenaCapacity)
    }

    deinit {
        slots.deallocate()
        entries.deinitialize(count: count)
        entries.deallocate()
        arena.deallocate()
    }

    /// The index of the entry for `id`, created (with `fresh`) when missing.
    @inline(__always)
    func index(of id: UnsafeRawBufferPointer, fresh: (Int, Int32, UInt64) -> InstallationDelta) -> Int {
        index(of: id, hash: hash(id.baseAddress!, id.count), fresh: fresh)
    }

    /// The keyed hash of id bytes that `index(of:hash:fresh:)` expects.
    @inline(__always)
    func hash(_ p: UnsafeRawPointer, _ n: Int) -> UInt64 { hashBytes(p, n, key: hashKey) }

    /// `index(of:fresh:)` with the id's `hashBytes` already computed.
    @inline(__always)
    func index(of id: UnsafeRawBufferPointer, hash h: UInt64, fresh: (Int, Int32, UInt64) -> InstallationDelta) -> Int {
        let n = id.count
        let base = id.baseAddress!
        var i = Int(truncatingIfNeeded: h) & slotMask
        while true {
            let s = Int(slots[i])
            if s == 0 { break }
            let e = entries + (s - 1)
            if e.pointee.hash == h, Int(e.pointee.idLength) == n, memcmp(arena + e.pointee.idOffset, base, n) == 0 {
                return s - 1
            }
            i = (i + 1) & slotMask
        }
        if arenaCount + n > arenaCapacity { growArena(atLeast: arenaCount + n) }
        (arena + arenaCount).update(from: base.assumingMemoryBound(to: UInt8.self), count: n)
        if count == entryCapacity { growEntries() }
        (entries + count).initialize(to: fresh(arenaCount, Int32(n), h))
        arenaCount += n
        count += 1
        slots[i] = Int32(count)
        if count * 2 > slotMask + 1 { growSlots() }
        return count - 1
    }

    /// Loads what a lookup of `hash` will read first (its slot, and the entry and id bytes it points to), so
    /// that the cache misses of several lookups overlap; returns a value only so the loads are kept.
    @inline(__always)
    func touch(_ hash: UInt64) -> UInt64 {
        let s = Int(slots[Int(truncatingIfNeeded: hash) & slotMask])
        guard s != 0 else { return 0 }
        let e = entries + (s - 1)
        return e.pointee.hash ^ UInt64(arena[e.pointee.idOffset])
    }

    /// Loads a word of each cache line of entry `index` and the first byte of its id, and returns their sum
    /// (meaningless): read for many entries at once, their lines come from memory together.
    @inline(__always)
    func touch(entry index: Int) -> UInt64 {
        let e = UnsafeRawPointer(entries + index)
        let size = MemoryLayout<InstallationDelta>.size
        var sum = e.load(as: UInt64.self) &+ e.load(fromByteOffset: size - 8, as: UInt64.self)
        var line = 64
        while line < size - 8 {
            sum &+= e.load(fromByteOffset: line, as: UInt64.self)
            line += 64
        }
        return sum &+ UInt64(arena[entries[index].idOffset])
    }

    /// The id bytes of entry `index`.
    func id(_ index: Int) -> UnsafeRawBufferPointer {
        let e = entries + index
        return UnsafeRawBufferPointer(start: arena + e.pointee.idOffset, count: Int(e.pointee.idLength))
    }

    /// The entry indices in byte order of the ids.
    ///
    /// Sorted on keys that carry each id's first 16 bytes as two big-endian words, zero-padded: comparing the
    /// words orders ids as their bytes do (a zero pad sorts before any byte), so only ids equal in those words
    /// compare their whole bytes. Random installation ids almost never get there.
    func sortedOrder() -> [Int32] {
        var keys: [IDSortKey] = []
        keys.reserveCapacity(count)
        for i in 0..<count {
            let e = entries + i
            let bytes = UnsafeRawBufferPointer(start: arena + e.pointee.idOffset, count: Int(e.pointee.idLength))
            keys.append(IDSortKey(high: Self.word(bytes, 0), low: Self.word(bytes, 8), index: Int32(i)))
        }
        // The ids of a table are distinct, so the order needs no stability: an in-place introsort, without the
        // buffer copies of the standard library's stable merge sort.
        keys.withUnsafeMutableBufferPointer { buffer in
            IDSortKey.introsort(buffer) { a, b in
                if a.high != b.high { return a.high < b.high }
                if a.low != b.low { return a.low < b.low }
                return compareInstallationIDs(id(Int(a.index)), id(Int(b.index))) < 0
            }
        }
        return keys.map(\.index)
    }

    /// Bytes `offset..<offset + 8` of `bytes` as a big-endian word, zero where `bytes` ends.
    @inline(__always)
    static func word(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        if bytes.count >= offset + 8 {
            return UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        var w: UInt64 = 0
        for i in 0..<8 { w = w << 8 | UInt64(offset + i < bytes.count ? bytes[offset + i] : 0) }
        return w
    }

    func removeAll() {
        entries.deinitialize(count: count)
        count = 0
        arenaCount = 0
        slots.update(repeating: 0, count: slotMask + 1)
    }

    private func growArena(atLeast needed: Int) {
        var c = arenaCapacity * 2
        while c < needed { c *= 2 }
        let fresh = UnsafeMutablePointer<UInt8>.allocate(capacity: c)
        fresh.update(from: arena, count: arenaCount)
        arena.deallocate()
        arena = fresh
        arenaCapacity = c
    }

    private func growEntries() {
        let c = entryCapacity >= 1 << 16 && reserve > entryCapacity ? reserve : entryCapacity * 2
        let fresh = UnsafeMutablePointer<InstallationDelta>.allocate(capacity: c)
        fresh.moveInitialize(from: entries, count: count)
        entries.deallocate()
        entries = fresh
        entryCapacity = c
    }

    private func growSlots() {
        let c = (slotMask + 1) * 2
        slots.deallocate()
        slots = .allocate(capacity: c)
        slots.initialize(repeating: 0, count: c)
        slotMask = c - 1
        for index in 0..<count {
            var i = Int(truncatingIfNeeded: entries[index].hash) & slotMask
            while slots[i] != 0 { i = (i + 1) & slotMask }
            slots[i] = Int32(index + 1)
        }
    }
}

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The order of installation ids everywhere a batch meets the store: bytes, then length (SQLite's BINARY
/// collation, the order of `telemetry_installations`' key). Negative, zero or positive, as `memcmp`.
@inline(__always)
public func compareInstallationIDs(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
    let n = min(a.count, b.count)
    let c = n == 0 ? 0 : Int(memcmp(a.baseAddress!, b.baseAddress!, n))
    return c != 0 ? c : a.count - b.count
}

/// The sort key of one table entry: the id's first 16 bytes as two big-endian words, and the entry's index.
struct IDSortKey {
    var high: UInt64
    var low: UInt64
    var index: Int32

    /// Sorts `keys` in place by `less` (a strict weak order): quicksort with a median-of-three pivot, insertion
    /// sort for short ranges, and heapsort for a range that recursed too deep, so that no order of the input
    /// (an adversary's ids included) takes more than O(n log n). Not stable. `depth` (the default: 2·log₂ n) is
    /// how deep quicksort may go before heapsort takes over.
    static func introsort(
        _ keys: UnsafeMutableBufferPointer<IDSortKey>, depth limit: Int? = nil,
        by less: (IDSortKey, IDSortKey) -> Bool
    ) {
        guard keys.count > 1 else { return }
        var depth = limit ?? 2 * (Int.bitWidth - keys.count.leadingZeroBitCount)
        sort(keys, 0, keys.count, &depth, less)
    }

    private static func sort(
        _ k: UnsafeMutableBufferPointer<IDSortKey>, _ start: Int, _ end: Int, _ depth: inout Int,
        _ less: (IDSortKey, IDSortKey) -> Bool
    ) {
        var lo = start
        var hi = end
        while hi - lo > 16 {
            if depth == 0 {
                heapsort(k, lo, hi, less)
                return
            }
            depth -= 1
            // Median of three to k[lo], then partition (Hoare) around it.
            let mid = lo + (hi - lo) / 2
            if less(k[mid], k[lo]) { k.swapAt(mid, lo) }
            if less(k[hi - 1], k[lo]) { k.swapAt(hi - 1, lo) }
            if less(k[hi - 1], k[mid]) { k.swapAt(hi - 1, mid) }
            k.swapAt(lo, mid)
            let pivot = k[lo]
            var i = lo
            var j = hi
            while true {
                repeat { i += 1 } while i < hi && less(k[i], pivot)
                repeat { j -= 1 } while less(pivot, k[j])
                if i >= j { break }
                k.swapAt(i, j)
            }
            k.swapAt(lo, j)
            // Recurse into the smaller side, loop on the larger: the stack stays O(log n).
            if j - lo < hi - (j + 1) {
                var d = depth
                sort(k, lo, j, &d, less)
                lo = j + 1
            } else {
                var d = depth
                sort(k, j + 1, hi, &d, less)
                hi = j
            }
        }
        // Insertion sort of the short range left.
        if hi - lo > 1 {
            for i in (lo + 1)..<hi {
                let x = k[i]
                var j = i
                while j > lo, less(x, k[j - 1]) {
                    k[j] = k[j - 1]
                    j -= 1
                }
                k[j] = x
            }
        }
    }

    private static func heapsort(
        _ k: UnsafeMutableBufferPointer<IDSortKey>, _ lo: Int, _ hi: Int, _ less: (IDSortKey, IDSortKey) -> Bool
    ) {
        let n = hi - lo
        func siftDown(_ root: Int, _ size: Int) {
            var r = root
            while true {
                var child = 2 * r + 1
                if child >= size { return }
                if child + 1 < size, less(k[lo + child], k[lo + child + 1]) { child += 1 }
                if !less(k[lo + r], k[lo + child]) { return }
                k.swapAt(lo + r, lo + child)
                r = child
            }
        }
        for root in stride(from: n / 2 - 1, through: 0, by: -1) { siftDown(root, n) }
        for end in stride(from: n - 1, to: 0, by: -1) {
            k.swapAt(lo, lo + end)
            siftDown(0, end)
        }
    }
}
