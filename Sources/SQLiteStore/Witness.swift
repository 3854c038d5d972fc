import Crypto
import Glibc
import Platform
import Rollout
import StoreSupport

/// The witness file beside a store (`<store>.witness`, mode 0600): the chain head and state digest as of the
/// last write, and the one before it (a write that crashed before its commit leaves the store at that one).
///
/// It also keeps `pending` lines: states a write witnessed that the store did not show when the next write began.
/// A write killed inside SQLite's commit, after its frames reached the WAL but before the shared index was
/// updated, is invisible to the processes still running; so the next write starts from the state before it,
/// and if that one is killed too before its own frames are written, the first process to open the store again
/// recovers the WAL and finds the first write committed after all. Each such state stays acceptable while the
/// store has not moved past the state both writes started from (a later commit overwrites the orphaned frames).
public struct Witness: Sendable {
    public let path: String

    public static func path(forStore store: String) -> String { store + ".witness" }

    /// At most this many pending lines are kept, the newest.
    static let maximumPending = 8

    enum Content: Equatable {
        case missing
        case unreadable(String)
        case lines(current: String, previous: String?, pending: [String])
    }

    /// `sequence 12 hash <hex> state <hex>`.
    static func line(_ s: StoreSeal.State) -> String { "sequence \(s.sequence) hash \(s.hash) state \(s.digest)" }

    /// The file's two slots (format v2), each this long: a write overwrites the older slot in place and syncs
    /// it (`fdatasync`), which costs a third of creating, syncing and renaming a new file. A write torn by a
    /// crash spoils only the slot it was writing, whose check then fails; the other slot is the witness as it
    /// was, and the store is where it was, or (its WAL synced before the witness, `WitnessSync`) one write ahead.
    static let slotSize = 4096
    static let slotHeader = "rollout-witness-v2 generation "

    /// Where the newest intact slot is, for the next write.
    enum Layout: Equatable {
        /// A whole v2 file: the newest intact slot and its generation.
        case slots(newest: Int, generation: Int64)
        /// Anything else (no file, the v1 text of earlier versions, a cut file): the next write makes a new file.
        case other
    }

    func read() -> Content { readWithLayout().content }

    func readWithLayout() -> (content: Content, layout: Layout) {
        guard access(path, F_OK) == 0 else { return (.missing, .other) }
        guard let bytes = SmallFile.bytes(path) else { return (.unreadable("not readable"), .other) }
        let header = Array(Self.slotHeader.utf8)
        let slots = (0..<2).map { slot in bytes[min(bytes.count, slot * Self.slotSize)..<min(bytes.count, (slot + 1) * Self.slotSize)] }
        // v1 files are a few lines long; a file of exactly two slots is read as slots even if both headers are gone.
        guard slots.contains(where: { $0.starts(with: header) }) || bytes.count == 2 * Self.slotSize else {
            // The text of earlier versions (v1): the lines alone.
            guard String(validating: bytes, as: UTF8.self) != nil else { return (.unreadable("not readable text"), .other) }
            return (Self.parseLines(bytes[...]), .other)
        }
        var newest: (slot: Int, generation: Int64, content: Content)?
        for (slot, slice) in slots.enumerated() {
            guard let (generation, content) = Self.parseSlot(slice) else { continue }
            if newest.map({ generation > $0.generation }) ?? true { newest = (slot, generation, content) }
        }
        guard let newest else { return (.unreadable("neither slot is intact"), .other) }
        // The witness is unkeyed, so a generation may be anything: at the largest one the next write makes a new
        // file instead of overflowing.
        let whole = bytes.count == 2 * Self.slotSize && newest.generation < Int64.max
        return (newest.content, whole ? .slots(newest: newest.slot, generation: newest.generation) : .other)
    }

    /// The `current`, `previous` and `pending` lines of a witness text (over its bytes: this runs on every write).
    static func parseLines(_ bytes: ArraySlice<UInt8>) -> Content {
        var current: String?
        var previous: String?
        var pending: [String] = []
        var start = bytes.startIndex
        while start < bytes.endIndex {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.endIndex
            let line = bytes[start..<end]
            for (key, prefix) in linePrefixes where line.starts(with: prefix) {
                guard let value = String(validating: line.dropFirst(prefix.count), as: UTF8.self) else { continue }
                switch key {
                case 0: current = value
                case 1: previous = value
                default: pending.append(value)
                }
            }
            start = end + 1
        }
        guard let current else { return .unreadable("no 'current' line") }
        return .lines(current: current, previous: previous, pending: pending)
    }

    private static let linePrefixes = [Array("current ".utf8), Array("previous ".utf8), Array("pending ".utf8)].enumerated()
        .map { ($0.offset, $0.element) }

    /// One slot: its header line with the generation, the lines, and `check <sha256>` of the bytes before that
    /// line; nil unless all three hold (a slot never written, or cut or torn, is not intact).
    static func parseSlot(_ slot: ArraySlice<UInt8>) -> (Int64, Content)? {
        let header = Array(slotHeader.utf8)
        let check = Array("check ".utf8)
        guard slot.starts(with: header) else { return nil }
        // The check line: the first line that starts with "check ".
        var start = slot.startIndex
        while start < slot.endIndex, !slot[start...].starts(with: check) {
            guard let end = slot[start...].firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            start = end + 1
        }
        guard start + check.count + 64 <= slot.endIndex else { return nil }
        let digest = slot[(start + check.count)..<(start + check.count + 64)]
        guard SHA256.hex(slot[slot.startIndex..<start]).utf8.elementsEqual(digest),
            let firstEnd = slot.firstIndex(of: UInt8(ascii: "\n")),
            let generationText = String(validating: slot[(slot.startIndex + header.count)..<firstEnd], as: UTF8.self),
            let generation = Int64(generationText), firstEnd < start
        else { return nil }
        let content = parseLines(slot[(firstEnd + 1)..<start])
        guard case .lines = content else { return nil }
        return (generation, content)
    }

    /// A slot's bytes: the header, `body`, the check line, padded with line ends to `slotSize`.
    static func slot(generation: Int64, body: String) -> [UInt8] {
        var bytes = Array("\(slotHeader)\(generation)\n\(body)".utf8)
        bytes += Array("check \(SHA256.hex(bytes))\n".utf8)
        precondition(bytes.count <= slotSize, "a witness slot holds at most \(slotSize) bytes")
        return bytes + [UInt8](repeating: UInt8(ascii: "\n"), count: slotSize - bytes.count)
    }

    /// The witness's current line, for `audit verify` to print.
    public func currentLine() -> String? {
        if case .lines(let current, _, _) = read() { return current }
        return nil
    }

    /// Whether a witness with these lines allows a store at `line`.
    static func allows(_ line: String, current: String, previous: String?, pending: [String]) -> Bool {
        line == current || line == previous || pending.contains(line)
    }

    /// The lines a write from `before` to `line` keeps pending: when the witness's current state is not the one
    /// the store was at when this write began, that state may still reappear (see the type's comment), and so
    /// may the states kept pending by writes that began from the same state as this one.
    ///
    /// `lagging` is the state `before` was itself sealed from: a witness whose current line is that one is one
    /// write behind a store that synced its last commit while the witness's sync was lost to a crash (`WitnessSync`),
    /// not a witness of an orphaned commit, and its line is not kept.
    static func pending(
        after existing: Content, from before: String?, to line: String, previous: String?, lagging: String? = nil
    ) -> [String] {
        guard let before, case .lines(let current, let kept, let pending) = existing, current != before,
            current != lagging
        else { return [] }
        var lines = kept == before ? pending : []
        lines.append(current)
        lines.removeAll { $0 == line || $0 == previous }
        var unique: [String] = []
        for l in lines where !unique.contains(l) { unique.append(l) }
        return Array(unique.suffix(maximumPending))
    }

    /// Records `state` as current and `before` (the state the store was at when this write began) as previous,
    /// durably, before the caller commits; nothing is written when the witness already says so. A whole v2 file
    /// gets the new lines in its older slot, in place; any other file is replaced whole (temporary file, fsync,
    /// rename) by a v2 file whose first slot holds them.
    ///
    /// With `requireAllowed`, the witness as read must allow `before` (the check a write makes first, for a write
    /// that skipped the rest of it: see `RolloutStore.installSeal`); otherwise a `ConfigIntegrityProblem`.
    ///
    /// With `sync`, the previous write's sync handed to it is waited for first (so the witness on disk is never
    /// two writes behind), and with `deferSync` the new slot's `fdatasync` is handed to it instead of being waited
    /// for here, to run after the caller's commit (`WitnessSync.release`). A file replaced whole is synced here.
    func write(
        _ state: StoreSeal.State, before: StoreSeal.State? = nil, requireAllowed: Bool = false,
        lagging: String? = nil, sync: WitnessSync? = nil, deferSync: Bool = false
    ) throws {
        let line = Witness.line(state)
        let start = before.map(Witness.line)
        let previous = start.flatMap { $0 == line ? nil : $0 }
        let (existing, layout) = readWithLayout()
        if requireAllowed, let start {
            switch existing {
            case .missing:
                throw ConfigIntegrityProblem("witness", "\(path) is missing (deleted?)")
            case .unreadable(let why):
                throw ConfigIntegrityProblem("witness", "\(path) is unreadable: \(why)")
            case .lines(let current, let kept, let pending):
                if !Witness.allows(start, current: current, previous: kept, pending: pending) {
                    throw ConfigIntegrityProblem(
                        "witness",
                        "\(path) records \(current), but the store is at \(start): the store was replaced or its log rewritten")
                }
            }
        }
        let pending = Witness.pending(after: existing, from: start, to: line, previous: previous, lagging: lagging)
        try sync?.waitUntilSynced()
        if case .lines(let current, let kept, let keptPending) = existing, current == line,
            previous == nil || (kept == previous && keptPending == pending)
        {
            return
        }
        var body = "current \(line)\n"
        if let previous { body += "previous \(previous)\n" }
        for p in pending { body += "pending \(p)\n" }
        if case .slots(let newest, let generation) = layout {
            let fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 {
                let bytes = Witness.slot(generation: generation + 1, body: body)
                let offset = off_t((1 - newest) * Witness.slotSize)
                guard pwrite(fd, bytes, bytes.count, offset) == bytes.count else {
                    close(fd)
                    throw StoreError.unavailable("cannot write the witness \(path): \(String(cString: strerror(errno)))")
                }
                if deferSync, let sync {
                    sync.hold(fd: fd, path: path)
                    return
                }
                defer { close(fd) }
                guard fdatasync(fd) == 0 else {
                    throw StoreError.unavailable("cannot write the witness \(path): \(String(cString: strerror(errno)))")
                }
                return
            }
        }
        let bytes = Witness.slot(generation: 1, body: body)
            + [UInt8](repeating: UInt8(ascii: "\n"), count: Witness.slotSize)
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw StoreError.unavailable("cannot write the witness \(temporary): \(String(cString: strerror(errno)))")
        }
        let ok = Glibc.write(fd, bytes, bytes.count) == bytes.count && fsync(fd) == 0
        close(fd)
        guard ok, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw StoreError.unavailable("cannot write the witness \(path): \(String(cString: strerror(errno)))")
        }
    }
}
