import CSQLite
import Glibc
import Platform
import Rollout
import StoreSupport

/// A thin, strict wrapper over the SQLite C API: the only code that calls `sqlite3_*`.
///
/// Every domain's tables (config versions, audit, telemetry, App Check state, operators) use this one wrapper.
/// Statements are cached by their SQL text; a connection belongs to one thread at a time (callers serialise).
public final class SQLiteDatabase: @unchecked Sendable {
    public let path: String
    private var handle: OpaquePointer?
    private var fileID: OpenDatabaseFiles.FileID?
    private var cache: [String: SQLiteStatement] = [:]
    /// Why this connection refuses every write, nil when it writes: `--read-only` (`PRAGMA query_only`), or a file
    /// this user cannot write, which SQLite opened read-only (`sqlite3_db_readonly`; its first write would fail with
    /// "attempt to write a readonly database"). Either way `transaction` refuses before taking the write lock.
    public let readOnlyCause: ReadOnlyCause?
    /// Whether this connection refuses every write (`readOnlyCause`): the property read-only sessions get, instead
    /// of a flag checked in places.
    public var isReadOnly: Bool { readOnlyCause != nil }
    /// Runs at the start of every outermost write transaction, after the write lock is taken and before the
    /// transaction's body (the store's integrity check: writes refuse to run on a store that fails it).
    public var beforeWrite: ((SQLiteDatabase) throws -> Void)?
    /// Runs at the end of every outermost write transaction, just before its commit (the store's seal).
    public var beforeCommit: ((SQLiteDatabase) throws -> Void)?
    /// Runs after an outermost write transaction committed, or after one rolled back (`committed` false).
    var afterWrite: ((SQLiteDatabase, _ committed: Bool) -> Void)?
    /// The store key of the file this connection belongs to (set by `RolloutStore`): step-up secrets are
    /// encrypted with it. Nil for a bare connection, which then cannot store secrets.
    public internal(set) var storeKey: StoreKey?
    /// Whether this connection is a rollout store's (set by `RolloutStore`): the App Check private keys are then
    /// kept encrypted with `storeKey`, and a plaintext one is refused. A bare connection (no store, no key: tests
    /// and benchmarks of the tables alone) keeps them as they are.
    public internal(set) var encryptsPrivateKeys = false
    /// What the open write transaction changed in the tallied tables (`StoreTally`), folded into the seal just
    /// before it commits; undone with a savepoint or transaction that rolls back.
    var tallyDelta: [String: StoreTally.Value] = [:]
    /// The tables the open write transaction may have written, as SQLite's authorizer names them when it
    /// prepares each statement (triggers included), plus `"*"` after any schema change. It over-approximates
    /// (a statement that matched no row still counts) and never misses a write: the seal re-digests exactly these.
    var writtenTables: Set<String> = [] {
        didSet { if writtenTables.isEmpty { writeEpoch &+= 1 } }
    }
    /// Counts the times `writtenTables` was emptied, so that a statement adds its tables once per transaction
    /// instead of hashing them at every step.
    private(set) var writeEpoch = 0
    /// While `prepare` compiles a statement: the tables it writes.
    private var preparing: Set<String>?

    /// Ends this connection's waits for another connection's lock when cancelled (shared by a store's connections:
    /// `RolloutStore.abandonLockWaits`).
    public let lockWaits: Cancellation
    /// The busy handler's state (`sqliteBusyHandler`), kept alive with the connection.
    private let busyWait: BusyWait
    /// How many times a statement of this connection found the file locked and waited (tests).
    public var lockWaitCount: Int { busyWait.callCount }

    /// Opens (and with `create`, creates) the database at `path` with WAL, a busy timeout and full durability.
    ///
    /// An existing file that is not an SQLite database is refused before SQLite touches it. With `readOnly` the
    /// connection never creates the file and refuses every change (`PRAGMA query_only`). A statement that finds
    /// the file locked by another connection waits up to `busyTimeoutMilliseconds` for it, or until `lockWaits` is
    /// cancelled, and then fails with SQLITE_BUSY.
    public init(
        path: String, create: Bool = true, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 10_000,
        lockWaits: Cancellation = Cancellation()
    ) throws(SQLiteError) {
        _ = Self.processSettings
        self.path = path
        self.lockWaits = lockWaits
        busyWait = BusyWait(limit: Double(max(0, busyTimeoutMilliseconds)) / 1000, cancellation: lockWaits)
        // Only the 16-byte header is read: a store with millions of telemetry rows opens as fast as a new one.
        // Never for a file this process already has open: closing any descriptor of a file drops every POSIX
        // lock the process holds on it, SQLite's included.
        if !OpenDatabaseFiles.shared.isOpen(path) {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            var header = [UInt8](repeating: 0, count: 16)
            let count = fd >= 0 ? read(fd, &header, 16) : 0
            if fd >= 0 { close(fd) }
            guard count <= 0 || (count == 16 && header == Array("SQLite format 3\0".utf8)) else {
                throw SQLiteError(code: SQLITE_NOTADB, message: "\(path) is not an SQLite database")
            }
        }
        var flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        handle = db
        guard rc == SQLITE_OK else {
            let message = db.map { SQLiteDatabase.message(sqlite3_errmsg($0), rc: rc, on: $0) } ?? "cannot open"
            sqlite3_close_v2(db)
            handle = nil
            throw SQLiteError(code: rc, message: "\(path): \(message)")
        }
        readOnlyCause = readOnly ? .requested : sqlite3_db_readonly(db, "main") == 1 ? .storeFileNotWritable(path) : nil
        fileID = OpenDatabaseFiles.shared.retain(path)
        sqlite3_busy_handler(db, sqliteBusyHandler, Unmanaged.passUnretained(busyWait).toOpaque())
        sqlite3_set_authorizer(db, sqliteAuthorizer, Unmanaged.passUnretained(self).toOpaque())
        sqlite3_extended_result_codes(db, 1)
        if readOnly {
            // Before anything else: from here on no statement of this connection can change the file.
            try execute("PRAGMA query_only=ON")
        } else {
            try execute("PRAGMA journal_mode=WAL")
        }
        try execute("PRAGMA synchronous=FULL")
        try execute("PRAGMA foreign_keys=ON")
    }

    /// SQLite's process-wide settings (`rollout_sqlite_configure`), applied once before the first connection.
    private static let processSettings: Void = { _ = rollout_sqlite_configure() }()

    deinit {
        cache.removeAll()
        sqlite3_close_v2(handle)
        if let fileID { OpenDatabaseFiles.shared.release(fileID) }
    }

    /// Whether this process holds an SQLite connection to the file at `path`.
    ///
    /// Code that wants to read such a file directly must not: opening and closing another descriptor of it drops
    /// the POSIX advisory locks SQLite holds (they belong to the process, not the descriptor), after which another
    /// process may checkpoint and delete the WAL under the live connection and its commits are lost.
    public static func isOpenInProcess(_ path: String) -> Bool { OpenDatabaseFiles.shared.isOpen(path) }

    /// Runs one or more statements that return no rows.
    public func execute(_ sql: String) throws(SQLiteError) {
        var error: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &error)
        if rc != SQLITE_OK {
            let message = Self.message(error.map { UnsafePointer($0) } ?? sqlite3_errmsg(handle), rc: rc, on: handle)
            sqlite3_free(error)
            throw SQLiteError(code: rc, message: message)
        }
    }

    /// Whether the main schema has a table named `name`. One cached statement for every name, read inside the
    /// caller's transaction, so the answer is never from a stale copy of the schema.
    public func hasTable(_ name: String) throws(SQLiteError) -> Bool {
        let s = try prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
        try s.bind(.text(name), at: 1)
        let found = try s.step()
        s.reset()
        return found
    }

    /// The names of every table, in one scan of the schema (`hasTable` scans it once per name).
    public func tableNames() throws(SQLiteError) -> Set<String> {
        var names: Set<String> = []
        for row in try query("SELECT name FROM sqlite_master WHERE type = 'table'") {
            if let name = row[0].string { names.insert(name) }
        }
        return names
    }

    /// Runs `sql` (the `CREATE TABLE IF NOT EXISTS` statements of `tables`) unless every one of them exists:
    /// SQLite parses a CREATE statement in full even when the table is there, and every open of a store would
    /// otherwise parse a dozen of them.
    public func createTables(_ tables: [String], _ sql: String) throws(SQLiteError) {
        for table in tables {
            if try !hasTable(table) {
                try execute(sql)
                return
            }
        }
    }

    /// A cached prepared statement for `sql`, reset and with its bindings cleared.
    public func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        if let s = cache[sql] {
            s.reset()
            return s
        }
        var stmt: OpaquePointer?
        preparing = []
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        let writes = preparing ?? []
        preparing = nil
        guard rc == SQLITE_OK, let stmt else { throw error(rc) }
        let s = SQLiteStatement(stmt, database: self, writes: writes)
        cache[sql] = s
        return s
    }

    /// Runs `sql` with `parameters` and returns every row.
    @discardableResult
    public func query(_ sql: String, _ parameters: [SQLiteValue] = []) throws(SQLiteError) -> [[SQLiteValue]] {
        let s = try prepare(sql)
        try s.bind(parameters)
        var rows: [[SQLiteValue]] = []
        while try s.step() { rows.append(s.row()) }
        s.reset()
        return rows
    }

    /// Runs a statement that returns no rows.
    public func run(_ sql: String, _ parameters: [SQLiteValue] = []) throws(SQLiteError) {
        let s = try prepare(sql)
        try s.bind(parameters)
        while try s.step() {}
        s.reset()
    }

    /// Runs `body` in a transaction; `BEGIN IMMEDIATE` takes the write lock up front so that read-then-write
    /// sequences (compare-and-swap) cannot be interleaved by another process.
    ///
    /// Inside an open transaction it nests as a savepoint: the body's changes commit with the outer transaction,
    /// or roll back alone when the body throws. A read-only connection refuses an immediate (write) transaction
    /// with `SQLiteError.readOnly` before taking any lock; an outermost write transaction runs `beforeWrite` first.
    public func transaction<T>(immediate: Bool = true, _ body: () throws -> T) throws -> T {
        if immediate, isReadOnly { throw SQLiteError.readOnly(self) }
        if isInTransaction {
            savepoints += 1
            let name = "nested\(savepoints)"
            defer { savepoints -= 1 }
            try run("SAVEPOINT \(name)")
            let tallyBefore = tallyDelta
            do {
                let value = try body()
                try run("RELEASE \(name)")
                return value
            } catch {
                tallyDelta = tallyBefore
                try? execute("ROLLBACK TO \(name)")
                try? execute("RELEASE \(name)")
                throw error
            }
        }
        // Cached statements: each of these would otherwise be parsed again on every transaction.
        try run(immediate ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED")
        tallyDelta = [:]
        writtenTables = []
        do {
            if immediate, let beforeWrite { try beforeWrite(self) }
            let value = try body()
            if immediate, let beforeCommit { try beforeCommit(self) }
            try run("COMMIT")
            tallyDelta = [:]
            if immediate, let afterWrite { afterWrite(self, true) }
            return value
        } catch {
            tallyDelta = [:]
            try? execute("ROLLBACK")
            if immediate, let afterWrite { afterWrite(self, false) }
            throw error
        }
    }

    /// What tells whether the file changed since this connection last looked: `PRAGMA data_version` (changes when
    /// any other connection, in any process, commits), `PRAGMA schema_version` (changes with any schema change,
    /// this connection's included) and the rows this connection changed (its writes outside a transaction too).
    /// Equal values at the start of two write transactions mean that nobody but this connection's own
    /// transactions changed the file in between.
    struct ChangeCounters: Equatable {
        var data: Int64
        var schema: Int64
        var ownRows: Int64
    }

    func changeCounters() throws(SQLiteError) -> ChangeCounters {
        let data = try query("PRAGMA data_version").first?[0].int ?? -1
        let schema = try query("PRAGMA schema_version").first?[0].int ?? -1
        return ChangeCounters(data: data, schema: schema, ownRows: sqlite3_total_changes64(handle))
    }

    /// Frees the pages this connection holds cached and does not use now: the next reads come from the file.
    func releaseCachedPages() { sqlite3_db_release_memory(handle) }

    /// Whether a transaction is open on this connection.
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }
    private var savepoints = 0

    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    public var changes: Int { Int(sqlite3_changes(handle)) }

    func error(_ rc: Int32) -> SQLiteError {
        SQLiteError(code: rc, message: Self.message(sqlite3_errmsg(handle), rc: rc, on: handle))
    }

    /// SQLite's message for `rc`; for a failure of the file system underneath (an I/O error, a full disk, a file
    /// it cannot open), the operating system's reason too: "disk I/O error" alone did not tell the on-call
    /// engineer that the disk was full.
    static func message(_ text: UnsafePointer<CChar>?, rc: Int32, on db: OpaquePointer?) -> String {
        let message = text.map { String(cString: $0) } ?? "SQLite error \(rc)"
        let primary = rc & 0xff
        guard primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN, let db else { return message }
        let code = sqlite3_system_errno(db)
        guard code != 0, let reason = strerror(code).map({ String(cString: $0) }), !message.contains(reason) else { return message }
        return message + " (" + reason + ")"
    }

    /// What the authorizer reports while SQLite compiles a statement (also when it re-compiles one after a
    /// schema change, or inside `execute`): a row write names its table; any schema change counts as all.
    fileprivate func authorized(_ action: Int32, _ first: UnsafePointer<CChar>?) {
        let table: String
        switch action {
        case SQLITE_INSERT, SQLITE_UPDATE, SQLITE_DELETE:
            guard let first else { return }
            table = String(cString: first)
        case SQLITE_READ, SQLITE_SELECT, SQLITE_FUNCTION, SQLITE_PRAGMA, SQLITE_TRANSACTION, SQLITE_SAVEPOINT,
            SQLITE_RECURSIVE:
            return
        default:
            table = "*"
        }
        preparing?.insert(table)
        writtenTables.insert(table)
    }
}

/// The connection's authorizer: allows everything, and tells the connection which tables a statement writes.
/// What `sqlite3_busy_timeout` does, and an end to it: while another connection holds the lock a statement needs,
/// SQLite calls the handler, which sleeps a little longer each time (1, 2, 5, 10, 15, 20, then 25 ms) and asks for
/// another try, until the limit has passed since the first call of this wait, or at once when the connection's
/// `lockWaits` is cancelled (a server stopping past its drain: the calls still waiting for a lock fail now instead
/// of each waiting out its timeout, one after another).
///
/// SQLite's own handler goes on to 50 and 100 ms. A lock is taken by whoever tries while it is free, in no order,
/// so a writer that looks every 100 ms while others keep taking it between its looks can wait out the whole
/// limit: eight processes nudging one store at once on a loaded machine, one gave up after 10 s ("the store is
/// busy"). Looking every 25 ms at most, it tries four times as often while it waits.
final class BusyWait: @unchecked Sendable {
    let limit: Double
    let cancellation: Cancellation
    /// When the current wait began, set at its first call (`count` 0).
    private var began = Deadline.now
    private let counting = Lock()
    private var calls = 0
    /// How many times SQLite has called the handler on this connection (tests: a statement is waiting).
    var callCount: Int { counting.withLock { calls } }
    private static let delays: [Double] = [1, 2, 5, 10, 15, 20, 25].map { $0 / 1000 }

    init(limit: Double, cancellation: Cancellation) {
        self.limit = limit
        self.cancellation = cancellation
    }

    /// Whether SQLite should try again; `count` is the number of calls before this one in the same wait. Only the
    /// connection's own thread calls it, from inside SQLite.
    func retry(_ count: Int) -> Bool {
        counting.withLock { calls += 1 }
        let now = Deadline.now
        if count == 0 { began = now }
        let left = limit - now.seconds(since: began)
        guard left > 0, !cancellation.isCancelled else { return false }
        let delay = min(Self.delays[min(count, Self.delays.count - 1)], left)
        return !cancellation.wait(seconds: delay)
    }
}

private func sqliteBusyHandler(_ context: UnsafeMutableRawPointer?, _ count: Int32) -> Int32 {
    guard let context else { return 0 }
    return Unmanaged<BusyWait>.fromOpaque(context).takeUnretainedValue().retry(Int(count)) ? 1 : 0
}

private func sqliteAuthorizer(
    _ context: UnsafeMutableRawPointer?, _ action: Int32, _ first: UnsafePointer<CChar>?,
    _ second: UnsafePointer<CChar>?, _ database: UnsafePointer<CChar>?, _ trigger: UnsafePointer<CChar>?
) -> Int32 {
    if let context { Unmanaged<SQLiteDatabase>.fromOpaque(context).takeUnretainedValue().authorized(action, first) }
    return SQLITE_OK
}

/// A value bound to or read from SQLite.
public enum SQLiteValue: Hashable, Sendable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    public var int: Int64? { if case .integer(let v) = self { v } else { nil } }
    public var double: Double? {
        switch self {
        case .real(let v): v
        case .integer(let v): Double(v)
        default: nil
        }
    }
    public var string: String? { if case .text(let v) = self { v } else { nil } }
    public var bytes: [UInt8]? {
        switch self {
        case .blob(let v): v
        case .text(let v): Array(v.utf8)
        default: nil
        }
    }
}

extension SQLiteValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// A prepared statement owned by its database's cache.
public final class SQLiteStatement {
    private let stmt: OpaquePointer
    private unowned let database: SQLiteDatabase
    /// The tables this statement writes (from the authorizer when it was prepared).
    private let writes: Set<String>
    /// The `writeEpoch` in which `writes` was last added to the connection's written tables.
    private var reportedEpoch = -1

    init(_ stmt: OpaquePointer, database: SQLiteDatabase, writes: Set<String>) {
        self.stmt = stmt
        self.database = database
        self.writes = writes
    }

    deinit { sqlite3_finalize(stmt) }

    public func reset() {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    public func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        for (i, v) in values.enumerated() { try bind(v, at: Int32(i + 1)) }
    }

    /// Binds UTF-8 bytes as text (copied), without making a `String` of them.
    public func bind(text bytes: UnsafeRawBufferPointer, at index: Int32) throws(SQLiteError) {
        // A null pointer would bind NULL.
        guard let base = bytes.baseAddress, bytes.count > 0 else { return try bind(.text(""), at: index) }
        let rc = sqlite3_bind_text(
            stmt, index, base.assumingMemoryBound(to: CChar.self), Int32(bytes.count), rollout_sqlite_transient())
        guard rc == SQLITE_OK else { throw database.error(rc) }
    }

    /// Binds an integer, or NULL for nil.
    public func bind(_ value: Int64?, at index: Int32) throws(SQLiteError) {
        let rc = value.map { sqlite3_bind_int64(stmt, index, $0) } ?? sqlite3_bind_null(stmt, index)
        guard rc == SQLITE_OK else { throw database.error(rc) }
    }

    public func bind(_ value: SQLiteValue, at index: Int32) throws(SQLiteError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(stmt, index)
        case .integer(let v): rc = sqlite3_bind_int64(stmt, index, v)
        case .real(let v): rc = sqlite3_bind_double(stmt, index, v)
        case .text(var v):
            // Its UTF-8 bytes with their length: a C string would end at the first NUL.
            rc = v.withUTF8 { b in
                guard let base = b.baseAddress, b.count > 0 else {
                    return sqlite3_bind_text(stmt, index, "", 0, rollout_sqlite_transient())
                }
                return sqlite3_bind_text(
                    stmt, index, UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(b.count),
                    rollout_sqlite_transient())
            }
        case .blob(let v):
            rc = v.withUnsafeBytes { sqlite3_bind_blob(stmt, index, $0.baseAddress, Int32($0.count), rollout_sqlite_transient()) }
        }
        guard rc == SQLITE_OK else { throw database.error(rc) }
    }

    /// Advances; true while a row is available.
    public func step() throws(SQLiteError) -> Bool {
        if !writes.isEmpty, reportedEpoch != database.writeEpoch {
            database.writtenTables.formUnion(writes)
            reportedEpoch = database.writeEpoch
        }
        let rc = sqlite3_step(stmt)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let e = database.error(rc)
            sqlite3_reset(stmt)
            throw e
        }
    }

    public var columnCount: Int32 { sqlite3_column_count(stmt) }

    public func int(_ i: Int32) -> Int64 { sqlite3_column_int64(stmt, i) }
    public func double(_ i: Int32) -> Double { sqlite3_column_double(stmt, i) }
    public func isNull(_ i: Int32) -> Bool { sqlite3_column_type(stmt, i) == SQLITE_NULL }
    public func text(_ i: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, i) else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: Int(sqlite3_column_bytes(stmt, i))), as: UTF8.self)
    }
    public func blob(_ i: Int32) -> [UInt8] { withBytes(i) { Array($0) } }

    /// The column's bytes (a blob's, or a text's UTF-8), valid only during `body`: no copy.
    public func withBytes<R, E: Error>(_ i: Int32, _ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let p = sqlite3_column_blob(stmt, i)
        let n = Int(sqlite3_column_bytes(stmt, i))
        return try body(UnsafeRawBufferPointer(start: n > 0 ? p : nil, count: n > 0 ? n : 0))
    }

    /// Binds bytes as a blob (copied).
    public func bind(blob bytes: UnsafeRawBufferPointer, at index: Int32) throws(SQLiteError) {
        // A null pointer would bind NULL: an empty blob is bound as a zero-length blob.
        let rc =
            bytes.count > 0
            ? sqlite3_bind_blob(stmt, index, bytes.baseAddress, Int32(bytes.count), rollout_sqlite_transient())
            : sqlite3_bind_zeroblob(stmt, index, 0)
        guard rc == SQLITE_OK else { throw database.error(rc) }
    }

    public func value(_ i: Int32) -> SQLiteValue {
        switch sqlite3_column_type(stmt, i) {
        case SQLITE_INTEGER: .integer(int(i))
        case SQLITE_FLOAT: .real(double(i))
        case SQLITE_TEXT: .text(text(i))
        case SQLITE_BLOB: .blob(blob(i))
        default: .null
        }
    }

    public func row() -> [SQLiteValue] { (0..<columnCount).map(value) }
}

/// An SQLite failure with its result code.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public var code: Int32
    public var message: String
    public var description: String { message }
    public var isBusy: Bool { code & 0xff == SQLITE_BUSY || code & 0xff == SQLITE_LOCKED }
    /// A write on a read-only connection (ours, or SQLite's own `SQLITE_READONLY`).
    public var isReadOnly: Bool { code & 0xff == SQLITE_READONLY }

    /// The refusal of a write transaction on a read-only connection, saying why it is read-only.
    public static func readOnly(_ db: SQLiteDatabase) -> SQLiteError {
        let message =
            switch db.readOnlyCause ?? .requested {
            case .requested: "refused: \(db.path) is open read-only (--read-only); nothing was written"
            case let cause: "refused: \(cause); nothing was written"
            }
        return SQLiteError(code: SQLITE_READONLY, message: message)
    }
    public var isConstraint: Bool { code & 0xff == SQLITE_CONSTRAINT }
}

/// The database files this process has connections to, by device and inode (see `isOpenInProcess`).
final class OpenDatabaseFiles: @unchecked Sendable {
    struct FileID: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    static let shared = OpenDatabaseFiles()
    private let lock = Lock()
    /// Open counts per file: a handful of entries, kept in an array (a dictionary keyed by a type of ours costs a
    /// conformance scan of the whole binary when its metadata is first built, on every process start).
    private var counts: [(id: FileID, count: Int)] = []

    /// Identifies a file without opening it (stat takes no descriptor, so it cannot drop locks).
    static func id(_ path: String) -> FileID? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return FileID(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }

    func isOpen(_ path: String) -> Bool {
        guard let id = OpenDatabaseFiles.id(path) else { return false }
        return lock.withLock { counts.contains { $0.id == id && $0.count > 0 } }
    }

    func retain(_ path: String) -> FileID? {
        guard let id = OpenDatabaseFiles.id(path) else { return nil }
        lock.withLock {
            if let i = counts.firstIndex(where: { $0.id == id }) { counts[i].count += 1 } else { counts.append((id, 1)) }
        }
        return id
    }

    func release(_ id: FileID) {
        lock.withLock {
            guard let i = counts.firstIndex(where: { $0.id == id }) else { return }
            counts[i].count -= 1
            if counts[i].count <= 0 { counts.remove(at: i) }
        }
    }
}
