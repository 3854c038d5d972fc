import Rollout

/// Stored installations, many to a row: a block is a run of installations in id order, each as its id and its
/// `InstallationRecord`, in about 45 bytes for a real installation (the row per installation it replaces took 61
/// bytes in SQLite and most of a batch's write time: 5M installations cost 5M B-tree inserts).
///
/// `format byte (1)`, then per installation: `id length` varint, the id's bytes, a flags byte (bit 0: a fetch
/// time, bit 1: a template version, bit 2: a latest fatal crash), `cohort, provider, OS major, entered, crashed` as bytes, then varints:
/// `firstSeen` zigzag, `lastSeen` and `fetchedAt` as zigzags of their wrapping differences from `firstSeen`, and
/// `sessions` and `templateVersion` zigzag, then the latest fatal crash as a zigzag of its wrapping difference
/// from `firstSeen` (bit 2 is new: blocks written before it simply never set it). Every `Int64` round-trips exactly, and an installation's bytes do
/// not depend on its neighbours, so a block is split or joined by copying them. Decoding checks every length and
/// value and refuses what `encode` cannot have written (`InstallationBlockError`), so a damaged row is an error,
/// never a crash.
public enum InstallationBlock {
    public static let format: UInt8 = 1

    /// How many bytes of installations a block holds before it is split: small enough that a block fits one
    /// SQLite B-tree cell without an overflow page (about 1,000 bytes on 4 KiB pages), so that a batch that
    /// touches one installation rewrites about the page a row of its own would have.
    public static let targetBytes = 900

    /// Appends the encoding of one installation to `out` (a block's bytes after its format byte).
    public static func encode(id: UnsafeRawBufferPointer, _ r: InstallationRecord, to out: inout [UInt8]) {
        SpillCodec.varint(UInt64(id.count), to: &out)
        out.append(contentsOf: id)
        var flags: UInt8 = 0
        if r.fetchedAt != nil { flags |= 1 }
        if r.templateVersion != nil { flags |= 2 }
        if r.lastCrashAt != nil { flags |= 4 }
        out.append(flags)
        out.append(r.cohort.code)
        out.append(r.provider.rawValue)
        out.append(r.osMajor)
        out.append(r.enteredCohorts)
        out.append(r.crashedCohorts)
        SpillCodec.varint(SpillCodec.zigzag(r.firstSeen), to: &out)
        SpillCodec.varint(SpillCodec.zigzag(r.lastSeen &- r.firstSeen), to: &out)
        SpillCodec.varint(SpillCodec.zigzag(r.sessions), to: &out)
        if let t = r.fetchedAt { SpillCodec.varint(SpillCodec.zigzag(t &- r.firstSeen), to: &out) }
        if let v = r.templateVersion { SpillCodec.varint(SpillCodec.zigzag(v), to: &out) }
        if let t = r.lastCrashAt { SpillCodec.varint(SpillCodec.zigzag(t &- r.firstSeen), to: &out) }
    }

    /// The id of the installation encoded at the start of `bytes`, nil when they do not start with one.
    public static func id(atStartOf bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        guard let base = bytes.baseAddress else { return nil }
        var reader = ByteReader(base: base.assumingMemoryBound(to: UInt8.self), position: 0, end: bytes.count)
        guard let n = reader.varint(), n <= UInt64(bytes.count - reader.position) else { return nil }
        return UnsafeRawBufferPointer(start: base + reader.position, count: Int(n))
    }

    /// Reads a block's installations in order. `bytes` must stay valid while the reader is used.
    public struct Reader {
        private var reader: ByteReader
        /// Where the last installation read starts and ends in the block (for copying it unchanged).
        public private(set) var lastRange: Range<Int> = 0..<0

        public init(_ bytes: UnsafeRawBufferPointer) throws(InstallationBlockError) {
            guard let base = bytes.baseAddress, bytes.count > 0 else { throw InstallationBlockError("an empty block") }
            reader = ByteReader(base: base.assumingMemoryBound(to: UInt8.self), position: 0, end: bytes.count)
            guard reader.byte() == InstallationBlock.format else {
                throw InstallationBlockError("a block of an unknown format \(bytes[0])")
            }
        }

        public var atEnd: Bool { reader.position >= reader.end }

        /// The next installation, nil at the end of the block. The id points into the block's bytes.
        public mutating func next() throws(InstallationBlockError) -> (id: UnsafeRawBufferPointer, record: InstallationRecord)? {
            guard !atEnd else { return nil }
            let start = reader.position
            guard let n = reader.varint(), n <= UInt64(reader.end - reader.position) else {
                throw InstallationBlockError("an installation id runs past the end of its block")
            }
            let id = UnsafeRawBufferPointer(start: reader.base + reader.position, count: Int(n))
            reader.position += Int(n)
            guard let flags = reader.byte(), flags & ~7 == 0, let cohortCode = reader.byte(),
                let cohort = Cohort(code: cohortCode), let providerCode = reader.byte(),
                let provider = AttestationProvider(rawValue: providerCode), let osMajor = reader.byte(),
                let entered = reader.byte(), let crashed = reader.byte(),
                let first = reader.varint().map(SpillCodec.unzigzag), let last = reader.varint().map(SpillCodec.unzigzag),
                let sessions = reader.varint().map(SpillCodec.unzigzag)
            else { throw InstallationBlockError("an installation record is cut short or damaged") }
            let firstSeen = first
            var fetchedAt: Int64?
            var templateVersion: Int64?
            if flags & 1 != 0 {
                guard let t = reader.varint() else { throw InstallationBlockError("a fetch time is cut short") }
                fetchedAt = firstSeen &+ SpillCodec.unzigzag(t)
            }
            if flags & 2 != 0 {
                guard let v = reader.varint() else { throw InstallationBlockError("a template version is cut short") }
                templateVersion = SpillCodec.unzigzag(v)
            }
            var lastCrashAt: Int64?
            if flags & 4 != 0 {
                guard let t = reader.varint() else { throw InstallationBlockError("a crash time is cut short") }
                lastCrashAt = firstSeen &+ SpillCodec.unzigzag(t)
            }
            lastRange = start..<reader.position
            return (
                id,
                InstallationRecord(
                    firstSeen: firstSeen, lastSeen: firstSeen &+ last, cohort: cohort, provider: provider,
                    osMajor: osMajor, sessions: sessions, enteredCohorts: entered, crashedCohorts: crashed,
                    fetchedAt: fetchedAt, templateVersion: templateVersion, lastCrashAt: lastCrashAt)
            )
        }
    }
}

/// A stored block of installations could not be read.
public struct InstallationBlockError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = "telemetry installations: " + description }
}
