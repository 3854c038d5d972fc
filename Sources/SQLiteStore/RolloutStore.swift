import Glibc
import Platform
import Rollout
import StoreSupport
import Timekeeping

/// The store file: one SQLite database that every domain keeps its tables in.
///
/// A store is created once, explicitly (`create: true`: `rollout init` and the drill stores of `simulate` and
/// `demo`, both through `Wiring`, and tests); every other open (`create: false`) refuses a missing path, a
/// directory, a zero-length file, a file that is not an SQLite database, an SQLite database that is not a rollout
/// store, and a schema newer than this program's, each with a message naming the path, and creates nothing. Even
/// with `create`, a missing store whose key, witness or write-ahead log is still there is refused (a new store
/// would take over the old key, write over the witness kept of the old one, or have SQLite replay the old log into
/// it); with `newPathOnly` so is any existing file, an empty one included (only `init` completes the empty file an
/// interrupted init leaves). Creation makes the file with private permissions (directory 0700, file 0600; SQLite
/// gives the `-wal` and `-shm` files the database file's mode).
///
/// Every table of every domain is created by the schema migrations (`PRAGMA user_version`, forward only), not on
/// first use, so a read-only connection (`access: .readOnly`) finds them all and never needs to write.
public final class RolloutStore: @unchecked Sendable {
    /// Marks a database as a rollout store (`PRAGMA application_id`, "ROLL").
    public static let applicationID: Int32 = 0x524F_4C4C

    /// How a store is opened.
    public enum Access: Sendable, Equatable {
        case readWrite
        /// Every write refused by the connection itself (`PRAGMA query_only`); nothing created or migrated.
        case readOnly
    }

    public let path: String
    /// The connection. One thread at a time: go through `withDatabase` when sharing the store.
    public let database: SQLiteDatabase
    /// The lock `withDatabase` and the config store hold while using the connection.
    public let lock = RecursiveLock()
    private var config: SQLiteConfigStore?

    /// Whether the connection refuses every write (`--read-only`, or a file this user cannot write); readers that
    /// cache derived data skip it.
    public var isReadOnly: Bool { database.isReadOnly }
    /// Why the connection refuses every write, nil when it writes.
    public var readOnlyCause: ReadOnlyCause? { database.readOnlyCause }

    /// Opens the store at `path`; with `create` (the default, for `init`, drills and tests) the file and its
    /// directory are created when missing and an empty file is claimed.
    ///
    /// Throws `StoreError.unavailable` with a message naming the path when the store is missing, empty (and
    /// `create` is not set), cannot be created, is not a rollout store, or has a newer schema.
    public init(path: String, create: Bool = true, access: Access = .readWrite, newPathOnly: Bool = false) throws {
        self.path = path
        guard !path.isEmpty else { throw StoreError.unavailable("the store path is empty (--store needs a file path)") }
        let isDirectory = Files.isDirectory(path)
        let exists = isDirectory != nil
        if isDirectory == true { throw StoreError.unavailable("\(path) is a directory, not a store file") }
        let creating = create && access == .readWrite
        var created = false
        if !exists {
            guard creating else {
                throw StoreError.unavailable("no store at \(path) (create one with 'rollout init --store \(path)')")
            }
            for leftover in [StoreKey.path(forStore: path), Witness.path(forStore: path), path + "-wal"]
            where Files.isDirectory(leftover) != nil {
                throw StoreError.unavailable(
                    "refused: there is no store at \(path), but \(leftover) is there (left by a removed store?); move it "
                        + "away or choose another path: nothing was created")
            }
            try RolloutStore.createDirectory(Path.directory(of: path))
            let fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            if fd >= 0 {
                close(fd)
                created = true
            } else if errno != EEXIST {
                throw StoreError.unavailable("cannot create the store \(path): \(String(cString: strerror(errno)))")
            }
        }
        if newPathOnly, !created {
            throw StoreError.unavailable(
                "refused: \(path) already exists (\(Files.size(path).map { "\($0) bytes" } ?? "not a file")); a new store "
                    + "is created only where there is none: nothing was created or changed")
        }
        try RolloutStore.checkHeader(path, allowEmpty: creating)
        do {
            database = try SQLiteDatabase(path: path, create: false, readOnly: access == .readOnly)
        } catch {
            throw StoreError.unavailable(
                error.message.hasPrefix(path) ? error.message : "cannot open the store \(path): \(error.message)")
        }
        // The file this connection has open: a write checks that the path still names it (see `installSeal`).
        var opened = stat()
        guard stat(path, &opened) == 0 else {
            throw StoreError.unavailable("the store \(path) vanished while it was being opened: nothing was read or written")
        }
        identity = (opened.st_dev, opened.st_ino)
        try RolloutStore.claim(database, path: path, allowNew: creating)
        witness = Witness(path: Witness.path(forStore: path))
        var key = try StoreKey.load(StoreKey.path(forStore: path))
        if key == nil, access == .readWrite, try !RolloutStore.isSealed(database) {
            // A new store, or one from before the seal: nothing is encrypted or sealed yet, so a new key loses nothing.
            key = try StoreKey.create(StoreKey.path(forStore: path))
        }
        self.key = key
        database.storeKey = key
        database.encryptsPrivateKeys = true
        try StoreSchema.migrate(self, key: key, witness: witness)
        if access == .readWrite { installSeal() }
        if created {
            // A missing one (ENOENT) is left alone.
            for suffix in ["-wal", "-shm"] { _ = chmod(path + suffix, 0o600) }
        }
    }

    /// The store key (`<store>.key`), nil when the file is missing.
    public let key: StoreKey?
    /// The device and inode of the file opened: a path removed or replaced behind a long-lived connection (the
    /// console's, a simulation's) would otherwise take writes into an unlinked file that nobody will read again.
    let identity: (device: UInt, inode: UInt)
    /// The witness file beside the store.
    public let witness: Witness

    /// How many write transactions ran the full seal check (the others found the file as this connection's own
    /// last commit left it: see `installSeal`). For tests.
    final class SealCheckCount: @unchecked Sendable {
        var full = 0
    }
    let sealChecks = SealCheckCount()
    /// The witness sync of this connection's last write, run after its WAL sync (`WitnessSync`).
    let witnessSync = WitnessSync()
    /// The monitor's rollout start waiting for this connection's next write (`cacheRolloutStartWithNextWrite`).
    let pendingRolloutStart = PendingWrite<(version: Int, start: Instant?)>()

    /// Why the path no longer names the store this connection opened, or nil while it does: checked before every
    /// write, and by a long-lived reader (the console) on every refresh, since its connection keeps reading an
    /// unlinked or replaced file as if nothing happened.
    ///
    /// The path must still name the same device and inode, and the file must still carry a rollout store's header:
    /// at least one header's length on disk, and the store's application id as this connection reads it (a file
    /// truncated or overwritten in place keeps its inode but not its header). The header is read through the
    /// connection, never through a second descriptor: closing one would drop SQLite's locks on the file.
    public func identityProblem() -> String? {
        if let problem = RolloutStore.identityProblem(path: path, identity: identity) { return problem }
        let id = try? withDatabase { try $0.query("PRAGMA application_id").first?.first?.int }
        guard id == Int64(RolloutStore.applicationID) else {
            return "the file no longer has a rollout store's header"
        }
        return nil
    }

    /// The status-change time (`st_ctime`, which no user can set back), size and inode of the store file and of
    /// its WAL: any write to either, through SQLite or not, changes the stamp. A write of this connection's skips
    /// the full seal check only while the stamp is the one its own last commit left (`installSeal`). (SQLite run
    /// as root gives a WAL it opens the database file's owner, `fchown`, which changes the status time too: after
    /// another connection opened the file, the next write checks the whole seal, which is only slower.)
    struct FileStamp: Equatable {
        let parts: [Int64]

        /// `file`: the store file's `stat` when the caller has just taken it (nil: it is taken here).
        init(store path: String, file: stat? = nil) {
            func part(_ s: stat?) -> [Int64] {
                s.map { [Int64($0.st_ctim.tv_sec), Int64($0.st_ctim.tv_nsec), Int64($0.st_size), Int64($0.st_ino)] } ?? [-1]
            }
            parts = part(file ?? RolloutStore.statOfFile(path)) + part(RolloutStore.statOfFile(path + "-wal"))
        }
    }

    /// The store file's `stat`, or nil when there is no file at the path.
    static func statOfFile(_ path: String) -> stat? {
        var s = stat()
        return stat(path, &s) == 0 ? s : nil
    }

    /// The device, inode and size part of `identityProblem()`, which needs no connection (a write checks it).
    static func identityProblem(path: String, identity: (device: UInt, inode: UInt)) -> String? {
        identityProblem(file: statOfFile(path), identity: identity)
    }

    /// The same on a `stat` of the path already taken (nil: no file there).
    static func identityProblem(file: stat?, identity: (device: UInt, inode: UInt)) -> String? {
        guard let now = file else { return "no file at that path any more" }
        guard now.st_dev == identity.device, now.st_ino == identity.inode else {
            return "another file is at that path now"
        }
        guard now.st_size >= 100 else { return "the file was truncated to \(now.st_size) bytes" }
        return nil
    }

    /// Whether the file already has a seal (a store of schema 2 or later).
    private static func isSealed(_ db: SQLiteDatabase) throws -> Bool {
        try db.hasTable("store_seal")
    }

    /// Every write transaction checks the seal first and re-seals before it commits.
    private func installSeal() {
        let key = key
        let witness = witness
        let path = path
        // The state each write starts from: the witness keeps it as "previous", since a crash between the
        // witness and the commit leaves the store there.
        nonisolated(unsafe) var startedFrom: StoreSeal.State?
        // The state this connection's last commit sealed, with the file's change counters as that commit left
        // them (`sealed`), and those of the transaction now open (`sealing`). When the counters are the same at the
        // start of the next write, nobody else changed the file in between (no other connection committed, no
        // schema change, no write of this connection outside a transaction), so the file is at exactly the state
        // this connection checked, changed and sealed: the full check (every sealed table digested, the chain
        // head's record re-hashed, the seal's HMAC) is skipped, and the witness is still checked as it is rewritten.
        // A per-request write otherwise spent most of its time checking what it had itself sealed a moment before.
        // The counters only see what goes through SQLite: bytes written into the file or its WAL directly leave
        // them as they were (and this connection's page cache holds the pages as it read them), so the files'
        // stamps after that commit (`FileStamp`) must be the same too.
        nonisolated(unsafe) var sealed: (counters: SQLiteDatabase.ChangeCounters, state: StoreSeal.State, files: FileStamp)?
        nonisolated(unsafe) var sealing: (counters: SQLiteDatabase.ChangeCounters, state: StoreSeal.State)?
        nonisolated(unsafe) var checkWitness = false
        // The state the store's seal names as the one its last write started from, when a full check found the
        // store one write ahead of its witness (a crash lost the witness's sync, see `WitnessSync`): the witness's
        // current line is then that state, which the next witness write must not keep as pending.
        nonisolated(unsafe) var lagging: String?
        // The witness's sync of this connection's last write, run after that write's WAL sync.
        let witnessSync = witnessSync
        let identity = identity
        let checks = sealChecks
        let pendingStart = pendingRolloutStart
        database.afterWrite = { _, committed in
            sealed = committed ? sealing.map { ($0.counters, $0.state, FileStamp(store: path)) } : nil
            sealing = nil
            // The WAL is synced (or the transaction rolled back): the witness written before the commit is synced
            // now, while the callers are answered and the next write gets ready (`WitnessSync`).
            witnessSync.release()
        }
        database.beforeWrite = { db in
            startedFrom = nil
            sealing = nil
            checkWitness = false
            lagging = nil
            // One stat of the store file for the identity check and the file stamp.
            let file = RolloutStore.statOfFile(path)
            if let problem = RolloutStore.identityProblem(file: file, identity: identity) {
                sealed = nil
                throw StoreError.unavailable(
                    "the store was removed or replaced while this process had it open (\(path): \(problem)): nothing "
                        + "was written; open it again ('rollout audit verify' checks the file now at that path)")
            }
            if let last = sealed, try db.changeCounters() == last.counters, FileStamp(store: path, file: file) == last.files {
                startedFrom = last.state
                checkWitness = true
                return
            }
            sealed = nil
            checks.full += 1
            // The full check reads the file as it is now, not the pages this connection cached before (a page
            // edited in the file directly would otherwise be checked, and sealed, as it was).
            db.releaseCachedPages()
            let (sealProblem, state) = try StoreSeal.check(db, key: key, witness: witness)
            var found = sealProblem
            if found == nil {
                do {
                    try SQLiteConfigStore.checkBeforeWriting(db)
                } catch let p as ConfigIntegrityProblem {
                    found = p
                }
            }
            if let problem = found {
                throw StoreError.corrupt(
                    "\(path) fails verification, so nothing is written: \(problem) (see 'rollout audit verify')")
            }
            startedFrom = state
            lagging = try StoreSeal.sealedFrom(db)
        }
        database.beforeCommit = { db in
            guard let key else {
                throw StoreError.unavailable("the store key \(StoreKey.path(forStore: path)) is missing: nothing is written")
            }
            // The monitor's rollout start rides on this write, under the seal it renews (best effort: a cache).
            if let entry = pendingStart.take() {
                try? RolloutStore.keepRolloutStart(version: entry.version, start: entry.start, in: db)
            }
            let state = try StoreSeal.reseal(db, key: key, from: startedFrom)
            do {
                // On the fast path (nobody else committed since this connection's last write, whose witness
                // sync `witnessSync` holds) the witness's sync runs after this commit's WAL sync; after anyone
                // else's commit, whose witness this connection never saw synced, it is synced here, before the
                // commit, as it always was.
                try witness.write(
                    state, before: startedFrom, requireAllowed: checkWitness, lagging: lagging, sync: witnessSync,
                    deferSync: checkWitness)
            } catch let problem as ConfigIntegrityProblem {
                throw StoreError.corrupt(
                    "\(path) fails verification, so nothing is written: \(problem) (see 'rollout audit verify')")
            }
            // Read with the write lock held: no other connection can commit before this transaction does.
            sealing = (try db.changeCounters(), state)
        }
    }

    /// Ends every wait of this store's connections for another connection's lock, now and from now on: a
    /// statement waiting for one fails with SQLITE_BUSY at once (a server stopping past its drain, whose last
    /// calls would otherwise each wait out the busy timeout while the process waits for them).
    public func abandonLockWaits() { database.lockWaits.cancel() }

    /// The whole check `rollout audit verify` runs: the config store's chain and versions, then the seal of every
    /// table that decides a write, the store key and the witness. Reads only.
    ///
    /// `configIntegrity` checks the config history when it lives elsewhere (a Firebase store's audit records name
    /// Firebase versions, which this file does not hold); by default the file's own versions are checked.
    public func verify(configIntegrity: (() throws -> ConfigIntegrityReport)? = nil) throws -> StoreIntegrityReport {
        let config = try configStore()
        return try withDatabase { db in
            // What is in the file now, not what this connection cached (see `FileStamp`).
            db.releaseCachedPages()
            return try db.transaction(immediate: false) {
                let report = try configIntegrity?() ?? config.verifyIntegrity()
                let (problem, state) = try StoreSeal.check(db, key: key, witness: witness)
                if let problem { throw problem }
                if let key, let problem = try StoreTally.problem(db, key: key) { throw problem }
                return StoreIntegrityReport(
                    config: report, sealedTables: StoreSeal.sealedTables, stateDigest: state.digest,
                    witnessPath: witness.path, witnessLine: Witness.line(state))
            }
        }
    }

    /// Runs `body` in one read transaction of the file as it is now, whose first step is the seal's check (every
    /// sealed table, the chain head's record, the HMAC), as `verify` does without the chain: for sealed rows that
    /// something acts on outside the store, where the next write's check would come too late (a telemetry source's
    /// access-token command is run, its project called, before its pull lands). This machine's witness is not
    /// checked: another process's writes move it on past this snapshot at any time (`rollout serve` writes per
    /// request); a row edited past rollout fails the digests or the HMAC whatever the witness says, and a file
    /// replaced by an older copy is the next write's and `audit verify`'s to name.
    public func readingSealed<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        try withDatabase { db in
            db.releaseCachedPages()
            return try db.transaction(immediate: false) {
                let (problem, _) = try StoreSeal.check(db, key: key, witness: nil)
                if let problem { throw StoreError.corrupt("\(path) fails verification: \(problem) (see 'rollout audit verify')") }
                return try body(db)
            }
        }
    }

    /// Runs `body` with the connection while holding the store's lock.
    public func withDatabase<T>(_ body: (SQLiteDatabase) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(database)
    }

    /// The config store on this file (tables created on first use; version 1 by `initializeIfEmpty`).
    public func configStore() throws -> SQLiteConfigStore {
        try withDatabase { db in
            if let config { return config }
            let store = try SQLiteConfigStore(database: db, lock: lock)
            config = store
            return store
        }
    }

    // MARK: Opening

    /// Makes the missing directories of `directory`, each with mode 0700.
    private static func createDirectory(_ directory: String) throws {
        do { try Files.makeDirectories(directory, mode: 0o700) } catch {
            throw StoreError.unavailable("cannot create the store directory \(error.path): \(error.reason)")
        }
    }

    /// Refuses, before SQLite touches the file, anything that is not an empty file, a fresh database or a rollout
    /// store: SQLite would otherwise switch another application's database to WAL.
    private static func checkHeader(_ path: String, allowEmpty: Bool) throws {
        // A file this process already has open was checked when it was opened, and reading it again through
        // another descriptor would drop SQLite's locks on it (see `SQLiteDatabase.isOpenInProcess`).
        if SQLiteDatabase.isOpenInProcess(path) { return }
        guard let header = try? Files.read(path, limit: 100) else {
            throw StoreError.unavailable("cannot read the store \(path): permission denied or missing")
        }
        guard !header.isEmpty else {
            if allowEmpty { return }
            throw StoreError.unavailable(
                "\(path) is an empty file (0 bytes), not a rollout store; remove it, or create a store with 'rollout init'")
        }
        guard header.count == 100, header.prefix(16).elementsEqual("SQLite format 3\0".utf8) else {
            throw StoreError.unavailable("\(path) is not an SQLite database (not a rollout store)")
        }
        let applicationID = header[68..<72].reduce(Int32(0)) { $0 << 8 | Int32($1) }
        let pages = header[28..<32].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        if applicationID != RolloutStore.applicationID, applicationID != 0 || pages > 1 {
            throw StoreError.unavailable("\(path) is another application's SQLite database, not a rollout store")
        }
    }

    /// Marks a fresh database as ours (only when creating), or refuses one that holds someone else's tables.
    private static func claim(_ db: SQLiteDatabase, path: String, allowNew: Bool) throws {
        do {
            if try db.query("PRAGMA application_id").first?.first?.int == Int64(RolloutStore.applicationID) { return }
            guard allowNew else {
                throw StoreError.unavailable(
                    "\(path) is an SQLite database but not a rollout store (create one with 'rollout init')")
            }
            try db.transaction {
                let id = try db.query("PRAGMA application_id").first?.first?.int ?? 0
                guard id != Int64(RolloutStore.applicationID) else { return }
                let tables = try db.query("SELECT count(*) FROM sqlite_master").first?.first?.int ?? 0
                guard id == 0, tables == 0 else {
                    throw StoreError.unavailable(
                        "\(path) is another application's SQLite database, not a rollout store")
                }
                try db.execute("PRAGMA application_id = \(RolloutStore.applicationID)")
            }
        }
    }
}

/// What `RolloutStore.verify` checked, when everything holds.
public struct StoreIntegrityReport: Sendable {
    public var config: ConfigIntegrityReport
    public var sealedTables: [String]
    /// The digest of the sealed tables and the chain head, as the witness records it.
    public var stateDigest: String
    public var witnessPath: String
    /// The witness line this store matches, to compare with a copy kept off the machine.
    public var witnessLine: String
}
