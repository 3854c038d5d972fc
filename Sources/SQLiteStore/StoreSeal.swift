import Crypto
import FoundationEssentials
import Glibc
import Platform
import Rollout
import StoreSupport

/// The seal: a keyed digest of every table that decides a write, bound to the audit chain's head, kept in the
/// store (`store_seal`) and, unkeyed, in a witness file beside it (`<store>.witness`).
///
/// Every write transaction of a `RolloutStore` re-seals just before it commits (the tables' digests, the chain
/// head, an HMAC over both under the store key) and rewrites the witness; every write transaction first checks
/// the seal, and refuses to run on a store whose sealed tables were changed behind rollout's back, whose seal was
/// rewritten without the key, or whose chain head differs from the witness (a consistent rewrite of the chain and
/// its head inside the file). `rollout audit verify` runs the same check and prints the witness line, to compare
/// with a copy kept elsewhere.
///
/// Sealed tables: the step-up operators, pending enrolments and policy, the guardrail settings, and the App
/// Check configuration (project, apps, signing keys and their retirements, debug tokens, demo certificate
/// authority), and the ramp plan with its pre-approval. The exchange's per-request state (challenges, key counters, consumed tokens)
/// grows with the traffic, so a full digest per request would not scale: it is sealed by its tally instead
/// (`StoreTally`, updated in O(1) per changed row), which the seal's HMAC and the witness cover and
/// `rollout audit verify` recomputes.
public enum StoreSeal {
    public static let sealedTables = [
        "stepup_operators", "stepup_enrolments", "stepup_policy", "guardrail_settings", "appcheck_project",
        "appcheck_apps", "appcheck_signing_keys", "appcheck_signing_key_retirements", "appcheck_debug_tokens",
        "appcheck_demo_authority", "ramp_plan", "ramp_plan_approval",
    ]

    static let schema = """
        CREATE TABLE IF NOT EXISTS store_seal (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            tables TEXT NOT NULL,
            audit_sequence INTEGER NOT NULL,
            audit_hash TEXT NOT NULL,
            mac TEXT NOT NULL,
            tally TEXT NOT NULL DEFAULT '')
        """

    /// What the seal binds: each sealed table's digest, the schema, and the chain head.
    struct State: Equatable {
        var tables: [String: String]
        var sequence: Int64
        var hash: String
        /// The tallies of the per-request tables.
        var tally: [String: StoreTally.Value] = [:]
        /// Every object of the schema (see `schemaEntries`); none for a seal made before schema 8.
        var schema = SchemaEntries()

        /// The `tables` column of `store_seal`: `table=digest` for every sealed table, sorted, then the schema's
        /// entries, sorted.
        var entries: String {
            // Appended into one string: every write builds this line several times (its MAC, the witness).
            var out = ""
            out.reserveCapacity(tables.count * 100 + schema.text.utf8.count + 1)
            for table in tables.keys.sorted() {
                if !out.isEmpty { out += " " }
                out += table
                out += "="
                out += tables[table]!
            }
            if !schema.text.isEmpty {
                out += " "
                out += schema.text
            }
            return out
        }

        /// One canonical line: the entries, then the head, then the tallies.
        var text: String {
            var out = entries
            out.reserveCapacity(out.utf8.count + 400)
            out += " head=\(sequence):"
            out += hash
            out += " tally="
            out += StoreTally.text(tally)
            return out
        }
        /// The state digest the witness and `audit verify` print.
        var digest: String { SHA256.hex(Array(text.utf8)) }
    }

    /// The schema's entries (`schema:<type>:<name>` = digest of the object's table and SQL) and their
    /// `key=digest` text in sorted order, made once per read of the schema: every write builds the state's text
    /// several times.
    struct SchemaEntries: Equatable {
        let entries: [String: String]
        let text: String

        init(_ entries: [String: String] = [:]) {
            self.entries = entries
            text = entries.keys.sorted().map { "\($0)=\(entries[$0]!)" }.joinedText(" ")
        }

        static func == (a: SchemaEntries, b: SchemaEntries) -> Bool { a.entries == b.entries }
    }

    /// The current state of `db`'s sealed tables, schema and chain head; without `schema`, the state as a seal
    /// made before schema 8 saw it (no schema entries).
    static func current(_ db: SQLiteDatabase, schema: Bool = true) throws -> State {
        var tables: [String: String] = [:]
        // Which sealed tables hold rows, in one statement: most are empty in most stores (the exchange's and the
        // plan's tables until they are used), and a `SELECT *` prepared for each cost every write a twelfth of
        // its instructions.
        let existing = try db.tableNames()
        for table in sealedTables where !existing.contains(table) { tables[table] = absent }
        let present = sealedTables.filter { existing.contains($0) }
        let holding = present.isEmpty ? [] : try db.query(
            "SELECT " + present.map { "EXISTS (SELECT 1 FROM \($0))" }.joinedText(", ")
        ).first ?? []
        for (i, table) in present.enumerated() {
            let empty = i < holding.count && holding[i].int == 0
            tables[table] = empty ? digest(ofRows: []) : try rowsDigest(of: table, in: db)
        }
        let head = try db.query("SELECT audit_sequence, audit_hash FROM config_head WHERE id = 1").first
        return State(
            tables: tables, sequence: head?[0].int ?? 0, hash: head?[1].string ?? AuditChain.genesis,
            tally: StoreTally.adding(db.tallyDelta, to: try sealedTally(db)),
            schema: schema ? SchemaEntries(try schemaEntries(db)) : SchemaEntries())
    }

    /// One entry per object of the main schema (`sqlite_schema`: tables, indexes, views, triggers, SQLite's own
    /// automatic indexes): the key `schema:<type>:<name>` (the name escaped, see `escape`) and the SHA-256 of the
    /// object's table and full SQL text.
    ///
    /// The full text covers everything SQLite runs on a write besides rollout's own statements: a trigger's body,
    /// a view's INSTEAD OF trigger, a CHECK constraint, a DEFAULT expression, a generated column, an index on an
    /// expression, as well as edits made through `PRAGMA writable_schema` (SQLite compiles the schema from this
    /// text when it opens the file). Temporary triggers live in a connection's own `temp` schema, which no other
    /// process can reach.
    static func schemaEntries(_ db: SQLiteDatabase) throws -> [String: String] {
        var out: [String: String] = [:]
        let rows = try db.prepare("SELECT type, name, tbl_name, sql FROM main.sqlite_schema")
        defer { rows.reset() }
        // Hashed from the column bytes: this runs at the start of every write.
        var bytes: [UInt8] = []
        while try rows.step() {
            bytes.removeAll(keepingCapacity: true)
            rows.withBytes(2) { bytes += $0 }
            bytes.append(UInt8(ascii: "\n"))
            if rows.isNull(3) {
                bytes.append(UInt8(ascii: "n"))
            } else {
                bytes.append(UInt8(ascii: "t"))
                rows.withBytes(3) { bytes += $0 }
            }
            out[schemaKey(type: rows.text(0), name: rows.text(1))] = SHA256.hex(bytes)
        }
        return out
    }

    /// `schema:<type>:<name>`, with every byte of the name outside `[A-Za-z0-9_.-]` written `%XX`, so that a
    /// name chosen by someone else cannot break the `tables` column's `key=value key=value` syntax.
    static func schemaKey(type: String, name: String) -> String {
        "schema:\(escape(type)):\(escape(name))"
    }

    static func escape(_ text: String) -> String {
        if text.utf8.allSatisfy(isPlain) { return text }
        var out = ""
        for b in text.utf8 {
            if isPlain(b) {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out += "%" + Hex.encode([b]).uppercased()
            }
        }
        return out
    }

    private static func isPlain(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"):
            true
        default: false
        }
    }

    /// What `escape` wrote, back (a malformed escape is kept as it is).
    static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var rest = Array(text.utf8)[...]
        while let b = rest.first {
            if b == UInt8(ascii: "%"), rest.count >= 3, let hi = Hex.value(of: rest[rest.startIndex + 1]),
                let lo = Hex.value(of: rest[rest.startIndex + 2])
            {
                bytes.append(UInt8(hi) << 4 | UInt8(lo))
                rest = rest.dropFirst(3)
            } else {
                bytes.append(b)
                rest = rest.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The object a schema key names, as a person reads it (`trigger t`, `index x on table y`).
    static func describe(schemaKey key: String, table: String? = nil) -> String {
        let parts = key.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3 else { return key }
        let name = unescape(parts[2])
        let on = table.flatMap { $0 == name ? nil : " on table \($0)" } ?? ""
        return "\(parts[1]) \(name)\(on)"
    }

    /// Whether the file's seal covers the schema (it was made by schema 8 or later).
    static func coversSchema(_ db: SQLiteDatabase) throws -> Bool {
        guard try db.hasTable("store_seal"),
            let tables = try db.query("SELECT tables FROM store_seal WHERE id = 1").first?.first?.string
        else { return false }
        return tables.contains(" schema:") || tables.hasPrefix("schema:")
    }

    /// The first difference between the sealed schema and the file's, or nil.
    static func schemaProblem(_ db: SQLiteDatabase, sealed: [String: String], now: [String: String]) throws
        -> ConfigIntegrityProblem?
    {
        let sealedSchema = sealed.filter { $0.key.hasPrefix("schema:") }
        guard sealedSchema != now else { return nil }
        var tables: [String: String] = [:]
        for row in try db.query("SELECT type, name, tbl_name FROM main.sqlite_schema") {
            if let type = row[0].string, let name = row[1].string {
                tables[schemaKey(type: type, name: name)] = row[2].string
            }
        }
        for key in now.keys.sorted() where sealedSchema[key] == nil {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key, table: tables[key]))",
                "not part of the schema rollout sealed: added outside rollout (a trigger, view, index or table runs or "
                    + "changes what rollout's own writes do)")
        }
        for key in sealedSchema.keys.sorted() where now[key] == nil {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key))", "in the sealed schema but missing: dropped outside rollout")
        }
        for key in now.keys.sorted() where sealedSchema[key] != now[key] {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key, table: tables[key]))",
                "its definition differs from the sealed schema: changed outside rollout")
        }
        return nil
    }

    /// Adds the tally column to a seal made before schema 4 (the seal is rewritten with it by the caller).
    static func addTallyColumn(_ db: SQLiteDatabase) throws {
        let columns = try db.query("PRAGMA table_info(store_seal)").compactMap { $0[1].string }
        if !columns.contains("tally") {
            try db.execute("ALTER TABLE store_seal ADD COLUMN tally TEXT NOT NULL DEFAULT ''")
        }
    }

    /// The tallies as last sealed (zero for a store sealed before tallies, or never sealed).
    static func sealedTally(_ db: SQLiteDatabase) throws -> [String: StoreTally.Value] {
        guard let row = try db.query("SELECT tally FROM store_seal WHERE id = 1").first, let text = row[0].string else {
            return [:]
        }
        return StoreTally.parse(text) ?? [:]
    }

    /// A table a later migration adds is sealed as absent until it exists.
    static let absent = "absent"

    /// SHA-256 over the table's rows, each encoded with its column types, in sorted order.
    static func digest(of table: String, in db: SQLiteDatabase) throws -> String {
        try db.hasTable(table) ? rowsDigest(of: table, in: db) : absent
    }

    /// The digest of an existing table's rows.
    private static func rowsDigest(of table: String, in db: SQLiteDatabase) throws -> String {
        digest(ofRows: try db.query("SELECT * FROM \(table)").map(encode))
    }

    /// The digest of rows encoded with `encode`, in sorted order (no rows: the digest of nothing).
    static func digest(ofRows rows: [String]) -> String {
        SHA256.hex(Array(rows.sorted().joinedText("\n").utf8))
    }

    /// One row, each value with its type.
    static func encode(_ row: [SQLiteValue]) -> String {
        row.map { v -> String in
            switch v {
            case .null: "n"
            case .integer(let i): "i\(i)"
            case .real(let d): "r\(d.bitPattern)"
            case .text(let t): "t\(t.utf8.count):\(t)"
            case .blob(let b): "b" + Hex.encode(b)
            }
        }.joinedText("|")
    }

    /// The current state, from the state the open write transaction started at: only the sealed tables the
    /// transaction may have written (`SQLiteDatabase.writtenTables`) are digested again; the others cannot have
    /// changed, since the transaction has held the write lock since `start` was taken.
    static func current(_ db: SQLiteDatabase, from start: State) throws -> State {
        // Any schema change (CREATE, DROP, ALTER) counts as "*": the schema is read again only then.
        if db.writtenTables.contains("*") { return try current(db) }
        var tables = start.tables
        for table in sealedTables where db.writtenTables.contains(table) { tables[table] = try digest(of: table, in: db) }
        let head = try db.query("SELECT audit_sequence, audit_hash FROM config_head WHERE id = 1").first
        let state = State(
            tables: tables, sequence: head?[0].int ?? 0, hash: head?[1].string ?? AuditChain.genesis,
            tally: StoreTally.adding(db.tallyDelta, to: try sealedTally(db)), schema: start.schema)
        #if DEBUG
            // Debug builds (the test suite) prove the shortcut on every write: it must equal the full digest.
            let full = try current(db)
            guard state == full else {
                throw StoreError.corrupt(
                    "internal: the incremental seal differs from the full one (tables written: \(db.writtenTables.sorted()))")
            }
        #endif
        return state
    }

    /// Writes the seal of the current state (inside the caller's write transaction) and returns it; `start`,
    /// the state the transaction began at, spares re-digesting the tables it did not write.
    @discardableResult
    static func reseal(_ db: SQLiteDatabase, key: StoreKey, from start: State? = nil) throws -> State {
        let state = try start.map { try current(db, from: $0) } ?? current(db)
        let tables = state.entries
        let mac = key.mac(state.text)
        let tally = StoreTally.text(state.tally)
        // Most commits (telemetry) change nothing sealed: leave the row as it is.
        if let row = try db.query("SELECT tables, audit_sequence, audit_hash, mac, tally FROM store_seal WHERE id = 1")
            .first,
            row == [.text(tables), .integer(state.sequence), .text(state.hash), .text(mac), .text(tally)]
        {
            return state
        }
        try db.run(
            "INSERT OR REPLACE INTO store_seal (id, tables, audit_sequence, audit_hash, mac, tally) VALUES (1, ?, ?, ?, ?, ?)",
            [.text(tables), .integer(state.sequence), .text(state.hash), .text(mac), .text(tally)])
        return state
    }

    /// The first thing wrong with the seal of `db` (against the tables, the key and the witness), or nil.
    static func problem(_ db: SQLiteDatabase, key: StoreKey?, witness: Witness) throws -> ConfigIntegrityProblem? {
        try check(db, key: key, witness: witness).problem
    }

    /// The current state of `db`, and the first thing wrong with its seal (nil when it holds): one digest of the
    /// sealed tables serves both the check and the state a write starts from.
    ///
    /// Without `schema` (`StoreSchema.migrate`, before its steps change the schema) the schema is not compared:
    /// it is taken as sealed.
    static func check(_ db: SQLiteDatabase, key: StoreKey?, witness: Witness, schema: Bool = true) throws -> (
        problem: ConfigIntegrityProblem?, state: State
    ) {
        let now = try current(db, schema: schema)
        return (try problem(db, now: now, key: key, witness: witness, schema: schema), now)
    }

    private static func problem(_ db: SQLiteDatabase, now: State, key: StoreKey?, witness: Witness, schema: Bool)
        throws -> ConfigIntegrityProblem?
    {
        guard
            let row = try db.query("SELECT tables, audit_sequence, audit_hash, mac, tally FROM store_seal WHERE id = 1")
                .first
        else { return ConfigIntegrityProblem("seal", "missing (store_seal deleted?)") }
        guard let tablesText = row[0].string, let sequence = row[1].int, let hash = row[2].string,
            let mac = row[3].string, let tallyText = row[4].string, let sealedTally = StoreTally.parse(tallyText)
        else { return ConfigIntegrityProblem("seal", "a column has an unexpected value (edited?)") }
        var sealed: [String: String] = [:]
        // Split as bytes: a `String` split walks grapheme clusters, 0.4M instructions for this one line of hex.
        for pair in tablesText.utf8.split(separator: UInt8(ascii: " ")) {
            guard let eq = pair.firstIndex(of: UInt8(ascii: "=")) else { continue }
            sealed[String(decoding: pair[..<eq], as: UTF8.self)] =
                String(decoding: pair[pair.index(after: eq)...], as: UTF8.self)
        }
        for table in sealedTables where sealed[table] != now.tables[table] {
            return ConfigIntegrityProblem(
                "table \(table)",
                "its rows differ from the sealed state (changed outside rollout: edited, inserted or deleted rows)")
        }
        var now = now
        if schema {
            if let problem = try schemaProblem(db, sealed: sealed, now: now.schema.entries) { return problem }
        } else {
            // The schema taken as sealed, for the witness line (`StoreSchema.migrate` compares it on its own).
            now.schema = SchemaEntries(sealed.filter { $0.key.hasPrefix("schema:") })
        }
        if sequence != now.sequence || hash != now.hash {
            return ConfigIntegrityProblem(
                "chain head",
                "record \(now.sequence) is not the sealed head (record \(sequence)): the log or its head was rewritten")
        }
        guard let key else {
            return ConfigIntegrityProblem(
                "seal",
                "cannot be checked: the store key \(StoreKey.path(forStore: db.path)) is missing (restore it; see README 'Store files')"
            )
        }
        // The HMAC covers the sealed line as `State.text` wrote it: the stored entries, the head, the tallies.
        if key.mac(tablesText + " head=\(sequence):\(hash) tally=" + StoreTally.text(sealedTally)) != mac {
            return ConfigIntegrityProblem(
                "seal",
                "its HMAC does not match under \(key.path) (the seal was rewritten without the key, or another store's key)"
            )
        }
        do {
            switch witness.read() {
            case .missing:
                return ConfigIntegrityProblem("witness", "\(witness.path) is missing (deleted?)")
            case .unreadable(let why):
                return ConfigIntegrityProblem("witness", "\(witness.path) is unreadable: \(why)")
            case .lines(let current, let previous, let pending):
                let line = Witness.line(now)
                // The previous line holds when the last write did not commit (a crash between the two); a pending
                // one when a killed write's commit reappeared later (see `Witness`).
                if !Witness.allows(line, current: current, previous: previous, pending: pending) {
                    return ConfigIntegrityProblem(
                        "witness",
                        "\(witness.path) records \(current), but the store is at \(line): the store was replaced or its log rewritten"
                    )
                }
            }
        }
        return nil
    }
}

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
    /// was, and the store is where it was too, since the commit follows the witness.
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
    static func pending(
        after existing: Content, from before: String?, to line: String, previous: String?
    ) -> [String] {
        guard let before, case .lines(let current, let kept, let pending) = existing, current != before else { return [] }
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
    func write(_ state: StoreSeal.State, before: StoreSeal.State? = nil) throws {
        let line = Witness.line(state)
        let start = before.map(Witness.line)
        let previous = start.flatMap { $0 == line ? nil : $0 }
        let (existing, layout) = readWithLayout()
        let pending = Witness.pending(after: existing, from: start, to: line, previous: previous)
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
                defer { close(fd) }
                let bytes = Witness.slot(generation: generation + 1, body: body)
                let offset = off_t((1 - newest) * Witness.slotSize)
                guard pwrite(fd, bytes, bytes.count, offset) == bytes.count, fdatasync(fd) == 0 else {
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

/// The tally of the per-request tables (App Check challenges, key counters, consumed tokens): for each table
/// the number of rows and the sum, modulo 2^256, of HMAC-SHA-256 under the store key of every row.
///
/// A sum of keyed row hashes is a multiset digest that a write updates in O(1) per row it changes (subtract the
/// old row's hash, add the new one's), in the same transaction, so that a request costs the same with a
/// thousand rows or ten million; the seal binds the result (HMAC) and the witness records it. Without the key
/// no one can compute a row's hash, so an edited, inserted or deleted row leaves the sum off by an amount no
/// later write can cancel (each write moves stored and true sums alike): `rollout audit verify`, which
/// recomputes every sum (O(rows)), names the table for ever after. Per-write checks cannot recompute a sum, so
/// unlike the small sealed tables a write does not refuse such a store; `audit verify` names it.
public enum StoreTally {
    public static let tables = ["appcheck_challenges", "appcheck_consumed_tokens", "appcheck_keys"]

    /// A table's tally: its row count and the sum of its rows' keyed hashes (four 64-bit limbs, little end first).
    public struct Value: Equatable, Sendable {
        var rows: Int64 = 0
        var sum: [UInt64] = [0, 0, 0, 0]

        mutating func add(_ h: [UInt64]) {
            addLimbs(h)
            rows += 1
        }

        mutating func subtract(_ h: [UInt64]) {
            var borrow: UInt64 = 0
            for i in 0..<4 {
                let (a, o1) = sum[i].subtractingReportingOverflow(h[i])
                let (b, o2) = a.subtractingReportingOverflow(borrow)
                sum[i] = b
                borrow = (o1 ? 1 : 0) + (o2 ? 1 : 0)
            }
            rows -= 1
        }

        /// Adds another tally (a transaction's delta: a negative count and a sum modulo 2^256).
        mutating func add(_ other: Value) {
            addLimbs(other.sum)
            rows += other.rows
        }

        private mutating func addLimbs(_ h: [UInt64]) {
            var carry: UInt64 = 0
            for i in 0..<4 {
                let (a, o1) = sum[i].addingReportingOverflow(h[i])
                let (b, o2) = a.addingReportingOverflow(carry)
                sum[i] = b
                carry = (o1 ? 1 : 0) + (o2 ? 1 : 0)
            }
        }

        /// `rows:` and the sum as 64 hex digits, most significant limb first.
        var text: String {
            let bigEndian = (sum[3].bigEndian, sum[2].bigEndian, sum[1].bigEndian, sum[0].bigEndian)
            return "\(rows):" + withUnsafeBytes(of: bigEndian) { Hex.encode($0) }
        }
    }

    /// The keyed hash of one row of `table`, as limbs.
    static func hash(_ table: String, _ row: [SQLiteValue], key: StoreKey) -> [UInt64] {
        let mac = HMAC.authenticate(
            .sha256, key: key.bytes, message: Array("tally \(table)\n\(StoreSeal.encode(row))".utf8))
        return (0..<4).map { i in mac[(i * 8)..<(i * 8 + 8)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
    }

    static func text(_ tally: [String: Value]) -> String {
        tables.map { "\($0)=\((tally[$0] ?? Value()).text)" }.joinedText(",")
    }

    /// What `text` wrote; empty text is a store sealed before tallies (all zero); nil when malformed.
    static func parse(_ text: String) -> [String: Value]? {
        guard !text.isEmpty else { return [:] }
        // Over the bytes: `table=rows:hex,...`, read at the start of every write.
        let bytes = Array(text.utf8)
        var out: [String: Value] = [:]
        var start = 0
        while start <= bytes.count {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: ",")) ?? bytes.count
            let part = bytes[start..<end]
            guard let eq = part.firstIndex(of: UInt8(ascii: "=")), eq > part.startIndex,
                let colon = part[(eq + 1)...].firstIndex(of: UInt8(ascii: ":")),
                let table = String(validating: part[part.startIndex..<eq], as: UTF8.self),
                let rowsText = String(validating: part[(eq + 1)..<colon], as: UTF8.self), let rows = Int64(rowsText)
            else { return nil }
            let hex = part[(colon + 1)...]
            guard hex.count == 64 else { return nil }
            var limbs: [UInt64] = []
            for i in (0..<4).reversed() {
                var v: UInt64 = 0
                for b in hex.dropFirst(i * 16).prefix(16) {
                    guard let d = Hex.value(of: b) else { return nil }
                    v = v << 4 | UInt64(d)
                }
                limbs.append(v)
            }
            out[table] = Value(rows: rows, sum: limbs)
            start = end + 1
        }
        return out
    }

    static func adding(_ delta: [String: Value], to base: [String: Value]) -> [String: Value] {
        var out = base
        for (table, d) in delta {
            var v = out[table] ?? Value()
            v.add(d)
            out[table] = v
        }
        return out
    }

    /// Every tallied table's tally recomputed from its rows (`audit verify`, the migration that starts them).
    static func recompute(_ db: SQLiteDatabase, key: StoreKey) throws -> [String: Value] {
        var out: [String: Value] = [:]
        for table in tables {
            var v = Value()
            let s = try db.prepare("SELECT * FROM \(table)")
            defer { s.reset() }
            while try s.step() { v.add(hash(table, s.row(), key: key)) }
            out[table] = v
        }
        return out
    }

    /// The first tallied table whose rows differ from its sealed tally, or nil.
    static func problem(_ db: SQLiteDatabase, key: StoreKey) throws -> ConfigIntegrityProblem? {
        let sealed = try StoreSeal.sealedTally(db)
        let found = try recompute(db, key: key)
        for table in tables where (sealed[table] ?? Value()) != found[table] {
            return ConfigIntegrityProblem(
                "table \(table)",
                "its rows differ from its sealed tally (\((sealed[table] ?? Value()).rows) rows sealed, "
                    + "\(found[table]!.rows) found: edited, inserted or deleted outside rollout)")
        }
        return nil
    }
}

extension SQLiteDatabase {
    /// Runs `body` (a change to rows of a tallied `table` that `whereClause` selects) and moves the table's
    /// tally from the rows before to the rows after. Without a store key (a bare connection) there is no seal
    /// to keep, and it just runs `body`.
    func tallied<T>(
        _ table: String, where whereClause: String, _ parameters: [SQLiteValue], _ body: () throws -> T
    ) throws -> T {
        guard let key = storeKey else { return try body() }
        let sql = "SELECT * FROM \(table) WHERE \(whereClause)"
        let before = try query(sql, parameters)
        let value = try body()
        let after = try query(sql, parameters)
        guard before != after else { return value }
        var d = tallyDelta[table] ?? StoreTally.Value()
        for row in before { d.subtract(StoreTally.hash(table, row, key: key)) }
        for row in after { d.add(StoreTally.hash(table, row, key: key)) }
        tallyDelta[table] = d
        return value
    }
}
