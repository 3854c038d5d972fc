import Rollout

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reading a spilled run of installations back failed.
public struct SpillError: Error, CustomStringConvertible {
    public var description: String
    package init(description: String) { self.description = description }
}

/// Where a `TelemetryBatch` writes one sorted run of installations and reads it back: the port of the spill, so
/// that this module knows no disk (`TelemetryIngest` gives unnamed temporary files). Written once, front to
/// back, then rewound and read, possibly on another thread than the one that wrote it.
package protocol SpillFile: AnyObject {
    /// Appends `bytes`; false when they could not be written.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool
    /// Ends the writing; false when what was written cannot be read back.
    func finishWriting() -> Bool
    /// Moves back to the first byte.
    func rewind() throws(SpillError)
    /// Reads up to `buffer.count` bytes; 0 at the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(SpillError) -> Int
}

/// One sorted run of installations in a `SpillFile`, each installation as `SpillCodec` encodes it.
final class SpillRun {
    let file: any SpillFile
    let count: Int
    init(file: any SpillFile, count: Int) {
        self.file = file
        self.count = count
    }
}

/// One table being written as a sorted run, on a thread of its own (`start`) or in place (`run`); `result` is the
/// run, or nil when it could not be written, once `join` returned.
final class SpillJob: @unchecked Sendable {
    let table: InstallationTable
    private(set) var result: SpillRun?
    private var thread: WorkerThread?

    private let failing: Bool
    private let makeFile: @Sendable () -> (any SpillFile)?
    /// The sum of the words `run` loaded ahead of encoding (`InstallationTable.touch(entry:)`), kept so that those loads
    /// are not optimised away; it means nothing.
    private(set) var touched: UInt64 = 0

    init(table: InstallationTable, makeFile: @escaping @Sendable () -> (any SpillFile)?, failing: Bool = false) {
        self.table = table
        self.makeFile = makeFile
        self.failing = failing
    }

    /// Starts writing on a new thread; false when none could be started.
    func start() -> Bool {
        thread = WorkerThread.start { [self] in run() }
        return thread != nil
    }

    func join() {
        thread?.join()
        thread = nil
    }

    /// Writes the table, sorted by id, to a file of `makeFile` (none: the run cannot be written).
    func run() {
        guard !failing, let file = makeFile() else { return }
        // The records are gathered in 256 KiB chunks and written whole.
        let run = SpillRun(file: file, count: table.count)
        let chunk = 256 << 10
        var capacity = chunk + 4096
        var buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        defer { buffer.deallocate() }
        var used = 0
        var ok = true
        func flush() {
            ok = ok && (used == 0 || file.write(UnsafeRawBufferPointer(start: buffer, count: used)))
            used = 0
        }
        // In id order the entries are scattered over the table, and each read of one waited for memory: a batch's
        // entries (three cache lines each) and ids are first loaded together, loads the processor overlaps, then
        // encoded from the cache.
        let order = table.sortedOrder()
        let batch = 16
        var touched: UInt64 = 0
        var start = 0
        while start < order.count, ok {
            let end = min(start + batch, order.count)
            for k in start..<end { touched &+= table.touch(entry: Int(order[k])) }
            for k in start..<end {
                let i = Int(order[k])
                let id = table.id(i)
                let room = id.count + SpillCodec.maxFixedBytes
                if used + room > capacity {
                    flush()
                    if room > capacity {  // an id longer than any ingest takes (a batch made in code)
                        buffer.deallocate()
                        capacity = room
                        buffer = .allocate(capacity: capacity)
                    }
                }
                var writer = ByteWriter(buffer + used)
                SpillCodec.encode(table.entries[i], id: id, to: &writer)
                used = writer.position - buffer
            }
            if used >= chunk { flush() }
            start = end
        }
        flush()
        self.touched = touched
        guard ok, file.finishWriting() else { return }
        result = run
    }
}

/// The encoding of one installation in a spilled run: its id and its `InstallationDelta`, in about a third of
/// the delta's size in memory (the merge reads every byte back, so the bytes are the cost).
///
/// `id length, id bytes, presence flags, cohort, provider, first provider, OS major, first OS major`, then
/// LEB128 varints: `firstSeen` zigzag, and every other time as the zigzag of its wrapping difference from
/// `firstSeen` (exact for any `Int64`, small for real times), present only when its flag says it is not the
/// sentinel ("never"); `sessions` and `templateVersion` zigzag, present when not zero; last, the latest fatal
/// crash's time like the other times. The table position
/// (`idOffset`) and the hash are not kept: nothing after the spill uses them.
enum SpillCodec {
    /// The most bytes a record takes beside its id: a length varint, 2 flag bytes, 5 bytes, 13 varints.
    static let maxFixedBytes = 5 + 2 + 5 + 13 * 10

    private enum Flag {
        static let providerAt: UInt16 = 1 << 0
        static let osMajorAt: UInt16 = 1 << 1
        static let entered = (UInt16(1) << 2, UInt16(1) << 3, UInt16(1) << 4)
        static let crashed = (UInt16(1) << 5, UInt16(1) << 6, UInt16(1) << 7)
        static let fetchedAt: UInt16 = 1 << 8
        static let sessions: UInt16 = 1 << 9
        static let templateVersion: UInt16 = 1 << 10
        static let lastCrashAt: UInt16 = 1 << 11
        static let known: UInt16 = (1 << 12) - 1
    }

    /// Appends the record of `delta` with `id` to `out`.
    static func encode(_ d: InstallationDelta, id: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: id.count + maxFixedBytes))
        let written = out.withUnsafeMutableBufferPointer { b in
            var w = ByteWriter(b.baseAddress! + start)
            encode(d, id: id, to: &w)
            return w.position - (b.baseAddress! + start)
        }
        out.removeLast(id.count + maxFixedBytes - written)
    }

    /// Writes the record of `delta` with `id` at `out`, which has room for `id.count + maxFixedBytes` bytes.
    @inline(__always)  // at the spill's call, reads the table entry in place instead of copying it out first
    static func encode(_ d: InstallationDelta, id: UnsafeRawBufferPointer, to out: inout ByteWriter) {
        out.varint(UInt64(id.count))
        out.append(id)
        var flags: UInt16 = 0
        if d.providerAt != .min { flags |= Flag.providerAt }
        if d.osMajorAt != .min { flags |= Flag.osMajorAt }
        if d.enteredAt.0 != .max { flags |= Flag.entered.0 }
        if d.enteredAt.1 != .max { flags |= Flag.entered.1 }
        if d.enteredAt.2 != .max { flags |= Flag.entered.2 }
        if d.crashedAt.0 != .max { flags |= Flag.crashed.0 }
        if d.crashedAt.1 != .max { flags |= Flag.crashed.1 }
        if d.crashedAt.2 != .max { flags |= Flag.crashed.2 }
        if d.fetchedAt != .min { flags |= Flag.fetchedAt }
        if d.sessions != 0 { flags |= Flag.sessions }
        if d.templateVersion != 0 { flags |= Flag.templateVersion }
        if d.lastCrashAt != .min { flags |= Flag.lastCrashAt }
        out.append(UInt8(truncatingIfNeeded: flags))
        out.append(UInt8(truncatingIfNeeded: flags >> 8))
        out.append(d.cohort.code)
        out.append(d.provider.rawValue)
        out.append(d.firstProvider.rawValue)
        out.append(d.osMajor)
        out.append(d.firstOSMajor)
        let base = d.firstSeen
        func time(_ t: Int64, _ flag: UInt16) {
            if flags & flag != 0 { out.varint(zigzag(t &- base)) }
        }
        out.varint(zigzag(base))
        out.varint(zigzag(d.lastSeen &- base))
        time(d.providerAt, Flag.providerAt)
        time(d.osMajorAt, Flag.osMajorAt)
        time(d.enteredAt.0, Flag.entered.0)
        time(d.enteredAt.1, Flag.entered.1)
        time(d.enteredAt.2, Flag.entered.2)
        time(d.crashedAt.0, Flag.crashed.0)
        time(d.crashedAt.1, Flag.crashed.1)
        time(d.crashedAt.2, Flag.crashed.2)
        time(d.fetchedAt, Flag.fetchedAt)
        if flags & Flag.sessions != 0 { out.varint(zigzag(d.sessions)) }
        if flags & Flag.templateVersion != 0 { out.varint(zigzag(d.templateVersion)) }
        time(d.lastCrashAt, Flag.lastCrashAt)
    }

    /// Reads the length of the next record's id at `reader`; nil when the bytes are not a record.
    static func idLength(_ reader: inout ByteReader) -> Int? {
        guard let n = reader.varint(), n <= UInt64(Int32.max) else { return nil }
        return Int(n)
    }

    /// Decodes the rest of a record (after its id); nil when the bytes are not one `encode` wrote.
    static func decodeDelta(_ reader: inout ByteReader) -> InstallationDelta? {
        var d = InstallationDelta(idOffset: 0, idLength: 0, hash: 0, time: 0, cohort: .none)
        return decodeDelta(&reader, into: &d) ? d : nil
    }

    /// Decodes the rest of a record (after its id) into `d`, every field of it; false when the bytes are not one
    /// `encode` wrote. The merge decodes in place: a returned optional was copied twice on its way to the source.
    static func decodeDelta(_ reader: inout ByteReader, into d: inout InstallationDelta) -> Bool {
        guard let low = reader.byte(), let high = reader.byte() else { return false }
        let flags = UInt16(low) | UInt16(high) << 8
        guard flags & ~Flag.known == 0, let cohortCode = reader.byte(), let cohort = Cohort(code: cohortCode),
            let providerCode = reader.byte(), let provider = AttestationProvider(rawValue: providerCode),
            let firstProviderCode = reader.byte(), let firstProvider = AttestationProvider(rawValue: firstProviderCode),
            let osMajor = reader.byte(), let firstOSMajor = reader.byte(),
            let base = reader.varint().map(unzigzag), let last = reader.varint().map(unzigzag)
        else { return false }
        d = InstallationDelta(idOffset: 0, idLength: 0, hash: 0, time: base, cohort: cohort)
        d.lastSeen = base &+ last
        d.provider = provider
        d.firstProvider = firstProvider
        d.osMajor = osMajor
        d.firstOSMajor = firstOSMajor
        var ok = true
        func time(_ flag: UInt16, absent: Int64) -> Int64 {
            guard flags & flag != 0 else { return absent }
            guard let v = reader.varint() else {
                ok = false
                return absent
            }
            return base &+ unzigzag(v)
        }
        d.providerAt = time(Flag.providerAt, absent: .min)
        d.osMajorAt = time(Flag.osMajorAt, absent: .min)
        d.enteredAt = (
            time(Flag.entered.0, absent: .max), time(Flag.entered.1, absent: .max), time(Flag.entered.2, absent: .max)
        )
        d.crashedAt = (
            time(Flag.crashed.0, absent: .max), time(Flag.crashed.1, absent: .max), time(Flag.crashed.2, absent: .max)
        )
        d.fetchedAt = time(Flag.fetchedAt, absent: .min)
        if flags & Flag.sessions != 0 {
            guard let v = reader.varint() else { return false }
            d.sessions = unzigzag(v)
        }
        if flags & Flag.templateVersion != 0 {
            guard let v = reader.varint() else { return false }
            d.templateVersion = unzigzag(v)
        }
        d.lastCrashAt = time(Flag.lastCrashAt, absent: .min)
        return ok
    }

    @inline(__always)
    static func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }

    @inline(__always)
    static func unzigzag(_ u: UInt64) -> Int64 { Int64(bitPattern: u >> 1) ^ -Int64(bitPattern: u & 1) }

    @inline(__always)
    static func varint(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }
}

/// Writes bytes and varints at a pointer its user made room at: the spill's records, written without an
/// array's uniqueness and capacity checks at every byte.
struct ByteWriter {
    private(set) var position: UnsafeMutablePointer<UInt8>
    init(_ position: UnsafeMutablePointer<UInt8>) { self.position = position }

    @inline(__always)
    mutating func append(_ byte: UInt8) {
        position.pointee = byte
        position += 1
    }

    @inline(__always)
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        UnsafeMutableRawPointer(position).copyMemory(from: base, byteCount: bytes.count)
        position += bytes.count
    }

    @inline(__always)
    mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        append(UInt8(v))
    }
}

/// Reads bytes and varints from a buffer, refusing to read past its end.
struct ByteReader {
    var base: UnsafePointer<UInt8>
    var position: Int
    var end: Int

    @inline(__always)
    mutating func byte() -> UInt8? {
        guard position < end else { return nil }
        defer { position += 1 }
        return base[position]
    }

    /// A LEB128 varint of at most 10 bytes.
    @inline(__always)
    mutating func varint() -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while position < end, shift < 70 {
            let b = base[position]
            position += 1
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return shift == 63 && b > 1 ? nil : result }
            shift += 7
        }
        return nil
    }
}

/// The current installation of one source of the merge: a spilled run, or the in-memory table in id order.
final class MergeSource {
    private let run: SpillRun?
    private let table: InstallationTable?
    private var order: [Int32] = []
    private var remaining: Int
    /// The run's bytes read so far and not yet decoded: `buffer[cursor..<filled]`.
    private var buffer: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private var cursor = 0
    private var filled = 0
    private var atEnd = false
    private(set) var id: UnsafeRawPointer
    private(set) var idLength = 0
    /// The id's first 16 bytes as two big-endian words, zero past its end (`InstallationTable.word`): two ids
    /// whose keys differ are in the order of their keys, so the merge compares bytes only where the keys tie.
    private(set) var key: (high: UInt64, low: UInt64) = (0, 0)
    private(set) var delta: InstallationDelta
    var valid: Bool
    /// The position of the source in the order the events came (runs in order, then the table).
    let position: Int

    init(run: SpillRun, position: Int) throws {
        self.run = run
        table = nil
        remaining = run.count
        capacity = 256 << 10
        buffer = .allocate(capacity: capacity)
        id = UnsafeRawPointer(buffer)
        delta = InstallationDelta(idOffset: 0, idLength: 0, hash: 0, time: 0, cohort: .none)
        valid = true
        self.position = position
        try run.file.rewind()
        try advance()
    }

    init(table: InstallationTable, position: Int) {
        run = nil
        self.table = table
        order = table.sortedOrder()
        remaining = order.count
        capacity = 1
        buffer = .allocate(capacity: 1)
        id = UnsafeRawPointer(buffer)
        delta = InstallationDelta(idOffset: 0, idLength: 0, hash: 0, time: 0, cohort: .none)
        valid = true
        self.position = position
        order.reverse()  // popped from the end
        try! advance()  // reads memory only
    }

    deinit { buffer.deallocate() }

    /// Moves to the next installation of the source (`valid` false at its end).
    func advance() throws {
        guard remaining > 0 else {
            valid = false
            return
        }
        remaining -= 1
        if let table {
            let i = Int(order.removeLast())
            let bytes = table.id(i)
            id = bytes.baseAddress ?? UnsafeRawPointer(buffer)
            idLength = bytes.count
            delta = table.entries[i]
            setKey()
            return
        }
        try ensure(5)
        var reader = ByteReader(base: buffer, position: cursor, end: filled)
        guard let n = SpillCodec.idLength(&reader) else { throw malformed() }
        let idStart = reader.position - cursor
        try ensure(idStart + n + SpillCodec.maxFixedBytes)
        guard cursor + idStart + n <= filled else { throw malformed() }
        reader = ByteReader(base: buffer, position: cursor + idStart + n, end: filled)
        guard SpillCodec.decodeDelta(&reader, into: &delta) else { throw malformed() }
        id = UnsafeRawPointer(buffer + cursor + idStart)
        idLength = n
        cursor = reader.position
        setKey()
    }

    @inline(__always)
    private func setKey() {
        let bytes = UnsafeRawBufferPointer(start: id, count: idLength)
        key = (InstallationTable.word(bytes, 0), InstallationTable.word(bytes, 8))
    }

    /// Makes at least `n` unread bytes available in the buffer, unless the run ends first.
    private func ensure(_ n: Int) throws {
        guard filled - cursor < n, !atEnd else { return }
        let kept = filled - cursor
        if n > capacity {
            var c = capacity
            while c < n { c *= 2 }
            let fresh = UnsafeMutablePointer<UInt8>.allocate(capacity: c)
            fresh.update(from: buffer + cursor, count: kept)
            buffer.deallocate()
            buffer = fresh
            capacity = c
        } else if kept > 0 {
            memmove(buffer, buffer + cursor, kept)
        }
        cursor = 0
        filled = kept
        let file = run!.file
        while filled < capacity {
            let free = UnsafeMutableRawBufferPointer(start: buffer + filled, count: capacity - filled)
            let got = try file.read(into: free)
            filled += got
            if got == 0 {
                atEnd = true
                break
            }
        }
    }

    private func malformed() -> SpillError {
        SpillError(
            description: "reading a spilled run of installations back failed: "
                + (atEnd ? "the file ended early" : "its bytes are not a run this process wrote"))
    }

    func idEquals(_ other: MergeSource) -> Bool {
        key == other.key && idLength == other.idLength && (idLength <= 16 || memcmp(id + 16, other.id + 16, idLength - 16) == 0)
    }

    /// Id byte order, then the order the sources came in.
    func precedes(_ other: MergeSource) -> Bool {
        if key.high != other.key.high { return key.high < other.key.high }
        if key.low != other.key.low { return key.low < other.key.low }
        let mine = UnsafeRawBufferPointer(start: id, count: idLength)
        let theirs = UnsafeRawBufferPointer(start: other.id, count: other.idLength)
        let c = compareInstallationIDs(mine, theirs)
        return c != 0 ? c < 0 : position < other.position
    }
}

/// Installations merged from the spilled runs, with their ids, waiting for the thread that lands them.
final class MergedChunk {
    static let capacity = 4096
    let deltas = UnsafeMutablePointer<InstallationDelta>.allocate(capacity: MergedChunk.capacity)
    private(set) var idEnds = [Int](repeating: 0, count: MergedChunk.capacity)
    private(set) var ids: [UInt8] = []
    private(set) var count = 0

    init() { ids.reserveCapacity(MergedChunk.capacity * 32) }
    deinit { deltas.deallocate() }

    var isFull: Bool { count == MergedChunk.capacity }

    func append(_ id: UnsafeRawBufferPointer, _ delta: InstallationDelta) {
        ids.append(contentsOf: id)
        (deltas + count).initialize(to: delta)
        idEnds[count] = ids.count
        count += 1
    }

    /// Calls `body` with each installation in the order appended.
    func forEach(_ body: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) rethrows {
        try ids.withUnsafeBytes { all in
            var start = 0
            for i in 0..<count {
                let end = idEnds[i]
                try body(UnsafeRawBufferPointer(rebasing: all[start..<end]), deltas[i])
                start = end
            }
        }
    }

    func removeAll() {
        deltas.deinitialize(count: count)
        count = 0
        ids.removeAll(keepingCapacity: true)
    }
}

/// Merges a batch's spilled runs on a thread of its own, a few thousand installations ahead of the thread that
/// lands them (`TelemetryBatch.forEachInstallationID`): reading and decoding the runs then overlaps with the
/// store's writes. The installations come out exactly in the merge's order.
final class MergeAhead: @unchecked Sendable {
    private let chunks: Handoff<MergedChunk>
    /// What the merge returned or threw; read after the thread is joined.
    private var result: Result<Int, any Error> = .success(0)
    private var thread: WorkerThread?

    private struct Cancelled: Error {}

    /// Starts `merge`, which hands each installation to the closure it is given (on the merging thread); nil
    /// when no thread can be started.
    init?(chunks: Int = 3, merge: @escaping @Sendable (_ emit: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) throws -> Int) {
        self.chunks = Handoff((0..<chunks).map { _ in MergedChunk() })
        guard let t = WorkerThread.start({ [self] in produce(merge) }) else { return nil }
        thread = t
    }

    private func produce(
        _ merge: (_ emit: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) throws -> Int
    ) {
        var chunk = chunks.takeSpare()
        result = Result {
            try merge { id, delta in
                guard let c = chunk else { throw Cancelled() }
                c.append(id, delta)
                if c.isFull {
                    chunks.hand(c)
                    chunk = chunks.takeSpare()
                }
            }
        }
        if let c = chunk {
            if c.count > 0 { chunks.hand(c) } else { chunks.giveBack(c, consumed: false) }
        }
        chunks.close()
    }

    /// Calls `body` for every installation in merge order, then returns what the merge returned (or throws what
    /// it threw). If `body` throws, the merge is stopped and the error rethrown.
    func consume(_ body: (UnsafeRawBufferPointer, InstallationDelta) throws -> Void) throws -> Int {
        defer {
            chunks.cancel()
            thread?.join()
            thread = nil
        }
        while let chunk = chunks.next() {
            defer {
                chunk.removeAll()
                chunks.giveBack(chunk)
            }
            try chunk.forEach(body)
        }
        thread?.join()
        thread = nil
        return try result.get()
    }
}
