import Telemetry

/// The installations of the store, as blocks of `InstallationBlock` in `telemetry_installation_blocks`, keyed by
/// the largest id of each block: the installations of a block are those with ids after the previous block's key
/// and up to its own.
enum InstallationBlocks {
    static let schema = """
        CREATE TABLE IF NOT EXISTS telemetry_installation_blocks(
            last_id BLOB PRIMARY KEY NOT NULL, installations INTEGER NOT NULL, data BLOB NOT NULL) WITHOUT ROWID;
        """

    /// The stored record of `id`, if any.
    static func record(_ id: String, in db: SQLiteDatabase) throws -> InstallationRecord? {
        var id = id
        let s = try db.prepare(
            "SELECT data FROM telemetry_installation_blocks WHERE last_id >= ? ORDER BY last_id LIMIT 1")
        defer { s.reset() }
        return try id.withUTF8 { id throws -> InstallationRecord? in
            let key = UnsafeRawBufferPointer(id)
            try s.bind(blob: key, at: 1)
            guard try s.step() else { return nil }
            return try s.withBytes(0) { bytes throws -> InstallationRecord? in
                var reader = try InstallationBlock.Reader(bytes)
                while let (stored, record) = try reader.next() {
                    let c = compareInstallationIDs(stored, key)
                    if c == 0 { return record }
                    if c > 0 { break }
                }
                return nil
            }
        }
    }

    /// How many installations the store holds.
    static func count(in db: SQLiteDatabase) throws -> Int {
        Int(try db.query("SELECT coalesce(sum(installations), 0) FROM telemetry_installation_blocks")[0][0].int ?? 0)
    }

    /// Every stored installation in id order; the id's bytes are valid only during `body`.
    static func forEach(in db: SQLiteDatabase, _ body: (UnsafeRawBufferPointer, InstallationRecord) throws -> Void) throws {
        let s = try db.prepare("SELECT data FROM telemetry_installation_blocks ORDER BY last_id")
        defer { s.reset() }
        while try s.step() {
            try s.withBytes(0) { bytes throws in
                var reader = try InstallationBlock.Reader(bytes)
                while let (id, record) = try reader.next() { try body(id, record) }
            }
        }
    }
}

/// Merges a stream of installations in id order into the stored blocks, inside the caller's transaction.
///
/// For each id, `previous(_:)` finds its stored record: the block that may hold it is read once and deleted,
/// its installations before the id are carried over unchanged, and `put(_:_:)` adds the id's new record. The
/// installations gathered are written as blocks of about `InstallationBlock.targetBytes` (a block that outgrew
/// it is split in equal parts); once no stored block is at or after the ids to come (a first ingest, new ids past
/// the last one) nothing more is read. A last block under half full is taken in and refilled, so that batches of
/// new ids do not leave a trail of small blocks. `finish()` writes what is left.
final class InstallationBlockWriter {
    private let seek: SQLiteStatement
    private let lastBlock: SQLiteStatement
    private let delete: SQLiteStatement
    private let insert: SQLiteStatement
    /// The stored block being merged (deleted already): its bytes and its installations not yet carried over.
    private var stored: [UInt8] = []
    private var storedEntries: [(id: Range<Int>, bytes: Range<Int>, record: InstallationRecord)] = []
    private var storedNext = 0
    private var storedKey: [UInt8]?
    /// No stored block is at or after the ids to come.
    private var pastStored = false
    /// Installations gathered for the next blocks (the core's packer: how blocks are cut is the same on every store).
    private var packer = InstallationBlockPacker()

    init(_ db: SQLiteDatabase) throws {
        seek = try db.prepare(
            "SELECT last_id, data FROM telemetry_installation_blocks WHERE last_id >= ? ORDER BY last_id LIMIT 1")
        lastBlock = try db.prepare(
            "SELECT last_id, data FROM telemetry_installation_blocks ORDER BY last_id DESC LIMIT 1")
        delete = try db.prepare("DELETE FROM telemetry_installation_blocks WHERE last_id = ?")
        insert = try db.prepare(
            "INSERT INTO telemetry_installation_blocks(last_id, installations, data) VALUES (?, ?, ?)")
    }

    /// The stored record of `id` (ids must come in increasing order, each followed by `put`).
    func previous(_ id: UnsafeRawBufferPointer) throws -> InstallationRecord? {
        if let key = storedKey, key.withUnsafeBytes({ compareInstallationIDs(id, $0) }) > 0 {
            try carryOverStored(upTo: nil)
            try flush()
        }
        if storedKey == nil, !pastStored { try load(atOrAfter: id) }
        guard storedKey != nil else { return nil }
        return try carryOverStored(upTo: id)
    }

    /// Adds the new record of `id`.
    func put(_ id: UnsafeRawBufferPointer, _ record: InstallationRecord) throws {
        try packer.put(id, record, emit: write)
    }

    /// Writes every block still gathered.
    func finish() throws {
        if storedKey != nil { try carryOverStored(upTo: nil) }
        try flush()
    }

    /// Carries the stored block's installations before `id` over (all of them for nil) and returns the one with
    /// this id, taking it out.
    @discardableResult
    private func carryOverStored(upTo id: UnsafeRawBufferPointer?) throws -> InstallationRecord? {
        while storedNext < storedEntries.count {
            let e = storedEntries[storedNext]
            let c = id.map { id in stored.withUnsafeBytes { compareInstallationIDs(UnsafeRawBufferPointer(rebasing: $0[e.id]), id) } } ?? -1
            if c > 0 { return nil }
            storedNext += 1
            if c == 0 { return e.record }
            packer.append(encoded: stored[e.bytes])
        }
        if id == nil { storedKey = nil }
        return nil
    }

    /// Reads (and deletes) the first stored block at or after `id`; with none, the last block when it is under
    /// half full.
    private func load(atOrAfter id: UnsafeRawBufferPointer) throws {
        seek.reset()
        try seek.bind(blob: id, at: 1)
        var found = try seek.step()
        var statement = seek
        let adopting = !found
        if !found {
            pastStored = true
            seek.reset()
            lastBlock.reset()
            found = try lastBlock.step() && lastBlock.withBytes(1) { $0.count } <= InstallationBlock.targetBytes / 2
            statement = lastBlock
        }
        defer { statement.reset() }
        guard found else { return }
        let key = statement.blob(0)
        stored = statement.blob(1)
        statement.reset()
        storedEntries.removeAll(keepingCapacity: true)
        storedNext = 0
        try stored.withUnsafeBytes { bytes throws in
            var reader = try InstallationBlock.Reader(bytes)
            let base = bytes.baseAddress!
            while let (id, record) = try reader.next() {
                let start = id.baseAddress! - base
                storedEntries.append((start..<start + id.count, reader.lastRange, record))
            }
        }
        try key.withUnsafeBytes { try delete.bind(blob: $0, at: 1) }
        while try delete.step() {}
        delete.reset()
        storedKey = key
        // A last block taken in: its installations all come before the ids to come, and gather with them.
        if adopting { try carryOverStored(upTo: nil) }
    }

    /// Writes everything gathered.
    private func flush() throws {
        try packer.flush(emit: write)
    }

    /// Inserts one block cut by the packer, keyed by its last installation's id.
    private func write(_ lastID: UnsafeRawBufferPointer, _ installations: Int, _ block: UnsafeRawBufferPointer, _: Bool) throws {
        insert.reset()
        try insert.bind(blob: lastID, at: 1)
        try insert.bind(Int64(installations), at: 2)
        try insert.bind(blob: block, at: 3)
        while try insert.step() {}
        insert.reset()
    }
}
