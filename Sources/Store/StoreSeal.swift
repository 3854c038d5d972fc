import Crypto
import Foundation
import Rollout

/// The store's secret key: 32 random bytes in a file beside the store (`<store>.key`, mode 0600), never in the
/// store file itself.
///
/// It encrypts the step-up secrets at rest (AES-256-GCM) and keys the seal (HMAC-SHA-256), so that a copy of the
/// store file alone reveals no secret, and a consistent rewrite of the tables needs the key as well. A team that
/// shares a store shares this file the way it shares any credential (see README, "Store files").
public struct StoreKey: Sendable {
    public let bytes: [UInt8]
    /// Where it was read from.
    public let path: String

    /// `<store>.key`.
    public static func path(forStore store: String) -> String { store + ".key" }

    static let header = "rollout-store-key-v1 "

    /// The key at `path`; nil when there is no such file; an error naming the file when it is unreadable,
    /// malformed, or readable by others.
    public static func load(_ path: String) throws -> StoreKey? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        guard st.st_mode & 0o077 == 0 else {
            throw StoreError.unavailable("the store key \(path) is readable by others (chmod 600 \(path))")
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8),
            text.hasPrefix(header),
            let bytes = Hex.decode(
                String(text.dropFirst(header.count)).trimmingCharacters(in: .whitespacesAndNewlines)),
            bytes.count == AESGCM.keySize
        else { throw StoreError.unavailable("the store key \(path) is not a rollout store key") }
        return StoreKey(bytes: bytes, path: path)
    }

    /// Creates a new key file at `path` (mode 0600, never overwriting one).
    public static func create(_ path: String) throws -> StoreKey {
        let bytes = SecureRandom.bytes(AESGCM.keySize)
        let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw StoreError.unavailable("cannot create the store key \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let text = Array((header + Hex.encode(bytes) + "\n").utf8)
        guard write(fd, text, text.count) == text.count, fsync(fd) == 0 else {
            throw StoreError.unavailable("cannot write the store key \(path): \(String(cString: strerror(errno)))")
        }
        return StoreKey(bytes: bytes, path: path)
    }

    /// Encrypts a step-up secret for the row of `owner` (the owner is bound as associated data, so a secret
    /// moved to another operator's row does not open).
    public func sealSecret(_ secret: [UInt8], owner: String) -> [UInt8] {
        StoreKey.secretMagic + AESGCM.seal(secret, key: bytes, associatedData: Array("stepup secret \(owner)".utf8))
    }

    /// Decrypts what `sealSecret` made.
    public func openSecret(_ box: [UInt8], owner: String) throws -> [UInt8] {
        guard StoreKey.isSealedSecret(box) else {
            throw StoreError.corrupt("the step-up secret of \(owner) is not encrypted (written outside rollout?)")
        }
        do {
            return try AESGCM.open(
                Array(box.dropFirst(StoreKey.secretMagic.count)), key: bytes,
                associatedData: Array("stepup secret \(owner)".utf8))
        } catch {
            throw StoreError.corrupt(
                "the step-up secret of \(owner) does not decrypt with \(path): \(error) (another store's key?)")
        }
    }

    static let secretMagic = Array("RSE1".utf8)
    static func isSealedSecret(_ bytes: [UInt8]) -> Bool { bytes.starts(with: secretMagic) }

    /// HMAC-SHA-256 of `message` under this key, hex.
    func mac(_ message: String) -> String {
        Hex.encode(HMAC.authenticate(.sha256, key: bytes, message: Array(message.utf8)))
    }
}

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
/// authority), and the ramp plan with its pre-approval. The exchange's per-request
/// state (challenges, key counters, consumed tokens) is not sealed: a full digest per request would not scale.
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
            mac TEXT NOT NULL)
        """

    /// What the seal binds: each sealed table's digest and the chain head.
    struct State: Equatable {
        var tables: [String: String]
        var sequence: Int64
        var hash: String

        /// One canonical line: `table=digest` sorted, then the head.
        var text: String {
            tables.keys.sorted().map { "\($0)=\(tables[$0]!)" }.joined(separator: " ") + " head=\(sequence):\(hash)"
        }
        /// The state digest the witness and `audit verify` print.
        var digest: String { SHA256.hex(Array(text.utf8)) }
    }

    /// The current state of `db`'s sealed tables and chain head.
    static func current(_ db: SQLiteDatabase) throws -> State {
        var tables: [String: String] = [:]
        for table in sealedTables { tables[table] = try digest(of: table, in: db) }
        let head = try db.query("SELECT audit_sequence, audit_hash FROM config_head WHERE id = 1").first
        return State(tables: tables, sequence: head?[0].int ?? 0, hash: head?[1].string ?? AuditChain.genesis)
    }

    /// SHA-256 over the table's rows, each encoded with its column types, in sorted order.
    static func digest(of table: String, in db: SQLiteDatabase) throws -> String {
        // A table a later migration adds is sealed as absent until it exists.
        guard try !db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(table)]).isEmpty
        else { return "absent" }
        var rows: [String] = []
        for row in try db.query("SELECT * FROM \(table)") {
            rows.append(
                row.map { v -> String in
                    switch v {
                    case .null: "n"
                    case .integer(let i): "i\(i)"
                    case .real(let d): "r\(d.bitPattern)"
                    case .text(let t): "t\(t.utf8.count):\(t)"
                    case .blob(let b): "b" + Hex.encode(b)
                    }
                }.joined(separator: "|"))
        }
        return SHA256.hex(Array(rows.sorted().joined(separator: "\n").utf8))
    }

    /// Writes the seal of the current state (inside the caller's write transaction) and returns it.
    @discardableResult
    static func reseal(_ db: SQLiteDatabase, key: StoreKey) throws -> State {
        let state = try current(db)
        let tables = state.tables.keys.sorted().map { "\($0)=\(state.tables[$0]!)" }.joined(separator: " ")
        let mac = key.mac(state.text)
        // Most commits (telemetry) change nothing sealed: leave the row as it is.
        if let row = try db.query("SELECT tables, audit_sequence, audit_hash, mac FROM store_seal WHERE id = 1").first,
            row == [.text(tables), .integer(state.sequence), .text(state.hash), .text(mac)]
        {
            return state
        }
        try db.run(
            "INSERT OR REPLACE INTO store_seal (id, tables, audit_sequence, audit_hash, mac) VALUES (1, ?, ?, ?, ?)",
            [.text(tables), .integer(state.sequence), .text(state.hash), .text(mac)])
        return state
    }

    /// The first thing wrong with the seal of `db` (against the tables, the key and the witness), or nil.
    static func problem(_ db: SQLiteDatabase, key: StoreKey?, witness: Witness) throws -> ConfigIntegrityProblem? {
        guard
            let row = try db.query("SELECT tables, audit_sequence, audit_hash, mac FROM store_seal WHERE id = 1").first
        else { return ConfigIntegrityProblem("seal", "missing (store_seal deleted?)") }
        guard let tablesText = row[0].string, let sequence = row[1].int, let hash = row[2].string,
            let mac = row[3].string
        else { return ConfigIntegrityProblem("seal", "a column has an unexpected value (edited?)") }
        var sealed: [String: String] = [:]
        for pair in tablesText.split(separator: " ") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { sealed[String(parts[0])] = String(parts[1]) }
        }
        let now = try current(db)
        for table in sealedTables where sealed[table] != now.tables[table] {
            return ConfigIntegrityProblem(
                "table \(table)",
                "its rows differ from the sealed state (changed outside rollout: edited, inserted or deleted rows)")
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
        let sealedState = State(tables: sealed, sequence: sequence, hash: hash)
        if key.mac(sealedState.text) != mac {
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
            case .lines(let current, let previous):
                let line = Witness.line(now)
                // The previous line holds only when the last write did not commit (a crash between the two).
                if current != line, previous != line {
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
public struct Witness: Sendable {
    public let path: String

    public static func path(forStore store: String) -> String { store + ".witness" }

    enum Content {
        case missing
        case unreadable(String)
        case lines(current: String, previous: String?)
    }

    /// `sequence 12 hash <hex> state <hex>`.
    static func line(_ s: StoreSeal.State) -> String { "sequence \(s.sequence) hash \(s.hash) state \(s.digest)" }

    func read() -> Content {
        guard FileManager.default.fileExists(atPath: path) else { return .missing }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else { return .unreadable("not readable text") }
        var current: String?
        var previous: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("current ") { current = String(line.dropFirst("current ".count)) }
            if line.hasPrefix("previous ") { previous = String(line.dropFirst("previous ".count)) }
        }
        guard let current else { return .unreadable("no 'current' line") }
        return .lines(current: current, previous: previous)
    }

    /// The witness's current line, for `audit verify` to print.
    public func currentLine() -> String? {
        if case .lines(let current, _) = read() { return current }
        return nil
    }

    /// Replaces the file atomically (temporary file, fsync, rename) with `state` as current and `before` (the
    /// state the store was at when this write began) as previous; nothing is written when it already says so.
    func write(_ state: StoreSeal.State, before: StoreSeal.State? = nil) throws {
        let line = Witness.line(state)
        let previous = before.map(Witness.line).flatMap { $0 == line ? nil : $0 }
        if case .lines(let current, let kept) = read(), current == line, previous == nil || kept == previous { return }
        var text = "rollout-witness-v1\ncurrent \(line)\n"
        if let previous { text += "previous \(previous)\n" }
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw StoreError.unavailable("cannot write the witness \(temporary): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        let ok = Foundation.write(fd, bytes, bytes.count) == bytes.count && fsync(fd) == 0
        close(fd)
        guard ok, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw StoreError.unavailable("cannot write the witness \(path): \(String(cString: strerror(errno)))")
        }
    }
}
