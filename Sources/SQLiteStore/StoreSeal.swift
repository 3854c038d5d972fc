import Crypto
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
/// Sealed tables: `SealedTables.all` (every table that decides a write, the one list both stores seal), but the key
/// check the file has not got. The exchange's per-request state (challenges, key counters, consumed tokens)
/// grows with the traffic, so a full digest per request would not scale: it is sealed by its tally instead
/// (`StoreTally`, updated in O(1) per changed row), which the seal's HMAC and the witness cover and
/// `rollout audit verify` recomputes.
///
/// A seal written under an older list (before a table joined it) has no entry for that table: its check leaves
/// the table out (the HMAC covers the entries the seal has, so none can be removed without the key), and the next
/// write seals it (see `check`).
public enum StoreSeal {
    /// The file checks its key by the seal's HMAC: it has no `store_key_check` table.
    public static let sealedTables = SealedTables.sealed(without: ["store_key_check"])

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
    ///
    /// Its lines (`entries`, `text`) and `digest` are built once per state and shared by its copies: a group commit
    /// needs them for the seal's row and MAC, the `from` entry (the state it started from, whose digest the previous
    /// commit's witness line already computed) and the witness's lines, and building the several KiB of text each
    /// time was 2-3% of `rollout serve`'s CPU. Setting any part makes them be built again.
    struct State: Equatable {
        var tables: [String: String] { didSet { lines = Lines() } }
        var sequence: Int64 { didSet { lines = Lines() } }
        var hash: String { didSet { lines = Lines() } }
        /// The tallies of the per-request tables.
        var tally: [String: StoreTally.Value] { didSet { lines = Lines() } }
        /// Every object of the schema (see `schemaEntries`); none for a seal made before schema 8.
        var schema: SchemaEntries { didSet { lines = Lines() } }
        private var lines = Lines()

        init(
            tables: [String: String], sequence: Int64, hash: String, tally: [String: StoreTally.Value] = [:],
            schema: SchemaEntries = SchemaEntries()
        ) {
            self.tables = tables
            self.sequence = sequence
            self.hash = hash
            self.tally = tally
            self.schema = schema
        }

        static func == (a: State, b: State) -> Bool {
            a.sequence == b.sequence && a.hash == b.hash && a.tables == b.tables && a.tally == b.tally && a.schema == b.schema
        }

        /// The `tables` column of `store_seal`: `table=digest` for every sealed table, sorted, then the schema's
        /// entries, sorted.
        var entries: String { lines.entries { Self.entries(tables, schema) } }

        /// One canonical line: the entries, then the head, then the tallies.
        var text: String {
            lines.text {
                var out = entries
                out.reserveCapacity(out.utf8.count + 400)
                out += " head=\(sequence):"
                out += hash
                out += " tally="
                out += StoreTally.text(tally)
                return out
            }
        }

        /// The state digest the witness and `audit verify` print.
        var digest: String { lines.digest { SHA256.hex(Array(text.utf8)) } }

        private static func entries(_ tables: [String: String], _ schema: SchemaEntries) -> String {
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

        /// The built lines of one state, shared by its copies (a new one whenever a part is set).
        private final class Lines: @unchecked Sendable {
            typealias Built = (entries: String?, text: String?, digest: String?)
            private let lock = Lock()
            private var built: Built = (nil, nil, nil)

            private func once(_ slot: WritableKeyPath<Built, String?>, _ build: () -> String) -> String {
                if let done = lock.withLock({ built[keyPath: slot] }) { return done }
                let value = build()
                lock.withLock { built[keyPath: slot] = value }
                return value
            }

            func entries(_ build: () -> String) -> String { once(\.entries, build) }
            func text(_ build: () -> String) -> String { once(\.text, build) }
            func digest(_ build: () -> String) -> String { once(\.digest, build) }
        }
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
        // (And every table a seal written under an older list left out, `check`: this write seals it.)
        for table in sealedTables where db.writtenTables.contains(table) || start.tables[table] == nil {
            tables[table] = try digest(of: table, in: db)
        }
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
    ///
    /// A write that changes the state also records, under the HMAC, the state it started from: the `tables`
    /// column ends with `from=<sequence>:<hash>:<digest>` of `start` (the witness line of that state, see
    /// `fromEntry`). That entry is not part of the state (`State.text`, its digest, the witness line): it only
    /// lets `problem` accept a store exactly one write ahead of its witness (`WitnessSync`). Writes without a
    /// `start` (the migrations) record none.
    @discardableResult
    static func reseal(_ db: SQLiteDatabase, key: StoreKey, from start: State? = nil) throws -> State {
        let state = try start.map { try current(db, from: $0) } ?? current(db)
        let entries = state.entries
        let tally = StoreTally.text(state.tally)
        // Most commits (telemetry) change nothing sealed: leave the row as it is (its `from` entry too).
        if let row = try db.query("SELECT tables, audit_sequence, audit_hash, mac, tally FROM store_seal WHERE id = 1")
            .first, let stored = row[0].string, Self.withoutFrom(stored) == entries,
            Array(row[1...2]) == [.integer(state.sequence), .text(state.hash)], row[4] == .text(tally),
            row[3] == .text(key.mac(stored + " head=\(state.sequence):\(state.hash) tally=" + tally))
        {
            return state
        }
        var tables = entries
        // (States are equal exactly when their texts, and so their witness lines, are.)
        if let start, start != state { tables += " " + fromEntry(start) }
        // The HMAC covers the line as `problem` rebuilds it from the row: the stored entries (with `from`), the
        // head, the tallies; without a `from` entry that is `state.text`, as before.
        let mac = key.mac(tables + " head=\(state.sequence):\(state.hash) tally=" + tally)
        // An upsert, not a REPLACE: a REPLACE deletes the row and inserts it again, so every write freed and
        // reallocated the row's overflow pages (the schema entries make it several KiB) and rewrote the leaf and the
        // file header's free-list count. The upsert updates the row, and a row whose record keeps its size (the
        // usual case: only the `from` entry, the MAC and the tallies change, in fixed-width or slowly growing text)
        // is overwritten in place: SQLite writes only the pages whose bytes differ, one or two instead of four, in
        // the WAL of every group commit.
        try db.run(
            "INSERT INTO store_seal (id, tables, audit_sequence, audit_hash, mac, tally) VALUES (1, ?, ?, ?, ?, ?) "
                + "ON CONFLICT (id) DO UPDATE SET tables = excluded.tables, audit_sequence = excluded.audit_sequence, "
                + "audit_hash = excluded.audit_hash, mac = excluded.mac, tally = excluded.tally",
            [.text(tables), .integer(state.sequence), .text(state.hash), .text(mac), .text(tally)])
        return state
    }

    /// The `tables` entry recording the state a write started from: `from=<sequence>:<hash>:<digest>`.
    static func fromEntry(_ start: State) -> String { "from=\(start.sequence):\(start.hash):\(start.digest)" }

    /// The witness line of the state named by a `from` entry's value.
    static func line(fromEntry value: String) -> String? {
        let parts = value.utf8.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let text = parts.map { String(decoding: $0, as: UTF8.self) }
        return "sequence \(text[0]) hash \(text[1]) state \(text[2])"
    }

    /// A stored `tables` text split into the entries of the state and the value of its `from` entry, if any
    /// (always the last entry, at most ~160 bytes long: only the end of the text is searched).
    static func splitFrom(_ tables: String) -> (entries: Substring, from: Substring?) {
        let marker = Array(" from=".utf8)
        let u = tables.utf8
        var i = u.endIndex
        let stop = u.index(u.endIndex, offsetBy: -200, limitedBy: u.startIndex) ?? u.startIndex
        while i > stop {
            i = u.index(before: i)
            if u[i...].starts(with: marker) { return (tables[..<i], tables[u.index(i, offsetBy: marker.count)...]) }
        }
        return (tables[...], nil)
    }

    /// A stored `tables` text without its `from` entry (the entries of the state alone).
    static func withoutFrom(_ tables: String) -> Substring { splitFrom(tables).entries }

    /// The witness line of the state the sealed state was written from (its `from` entry), if the seal has one.
    static func sealedFrom(_ db: SQLiteDatabase) throws -> String? {
        guard let tables = try db.query("SELECT tables FROM store_seal WHERE id = 1").first?.first?.string,
            let from = splitFrom(tables).from
        else { return nil }
        return line(fromEntry: String(from))
    }

    /// The first thing wrong with the seal of `db` (against the tables, the key and the witness), or nil.
    static func problem(_ db: SQLiteDatabase, key: StoreKey?, witness: Witness) throws -> ConfigIntegrityProblem? {
        try check(db, key: key, witness: witness).problem
    }

    /// The current state of `db`, and the first thing wrong with its seal (nil when it holds): one digest of the
    /// sealed tables serves both the check and the state a write starts from.
    ///
    /// A seal written before a table joined `sealedTables` has no entry for it: the state is then the one that
    /// seal covers (without that table), which is the state its witness line names; the next write seals the
    /// table (`current(_:from:)` digests every table its start lacks).
    ///
    /// Without `schema` (`StoreSchema.migrate`, before its steps change the schema) the schema is not compared:
    /// it is taken as sealed.
    /// `witness: nil` checks the seal without this machine's witness (what a reader's snapshot may lag behind: a
    /// write committed since by another process has moved it on).
    static func check(_ db: SQLiteDatabase, key: StoreKey?, witness: Witness?, schema: Bool = true) throws -> (
        problem: ConfigIntegrityProblem?, state: State
    ) {
        var now = try current(db, schema: schema)
        let problem = try problem(db, now: &now, key: key, witness: witness, schema: schema)
        return (problem, now)
    }

    private static func problem(_ db: SQLiteDatabase, now: inout State, key: StoreKey?, witness: Witness?, schema: Bool)
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
        // A table the seal has no entry for joined the list after the seal was written: not covered yet.
        for table in sealedTables where sealed[table] == nil { now.tables[table] = nil }
        for table in sealedTables where sealed[table] != nil && sealed[table] != now.tables[table] {
            return ConfigIntegrityProblem(
                "table \(table)",
                "its rows differ from the sealed state (changed outside rollout: edited, inserted or deleted rows)")
        }
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
        guard let witness else { return nil }
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
                //
                // And the store may be exactly one write ahead of the witness: its WAL synced, the witness's sync
                // (run after it, `WitnessSync`) lost to a crash of the machine. The seal says so itself: its
                // `from` entry, under the HMAC, names the state the last write started from, and that is the
                // witness's current line. Nothing else is accepted: a store two writes ahead names a state the
                // witness never recorded as current; a witness ahead of the store by more than one write names
                // the store's state nowhere; a store rolled back to an older copy names, as its `from`, a state
                // older than the witness's current one. What an attacker who copies and restores the file
                // (without the key, so unable to write a seal) gains: nothing. A copy passes this rule only if the
                // witness still stands at the state that copy was written from, that is, if no write happened
                // since the copy was taken, and then the copy holds everything the live store holds (no consumed
                // token or redeemed challenge of it is forgotten). Every older copy is refused as before; the
                // one-write-back copy the previous line accepts was accepted before this rule too.
                let oneAhead = sealed["from"].flatMap(Self.line(fromEntry:)).map { $0 == current && $0 != line } ?? false
                if !oneAhead, !Witness.allows(line, current: current, previous: previous, pending: pending) {
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
