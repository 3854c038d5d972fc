import Glibc
import Platform
import Rollout

/// A witness file's `fdatasync` of one write, run on a thread of its own once the write's transaction committed,
/// and waited for by the next write of the same connection before it commits: both stores' witnesses sync this
/// way (the SQLite store's `Witness`, the PostgreSQL store's `PostgresWitness`).
///
/// Why: a write synced its witness and its store's log one after the other before its callers were answered: two
/// serial syncs on the answer's path of every write. Run side by side they gain nothing on this machine's disk
/// (ext4 on a virtual disk: a 4 KiB `fdatasync` took 0.085 ms alone, two in a row 0.212 ms, and the second of two
/// started together finished after 0.228 ms: the flushes queue behind each other). So the witness is written
/// (`pwrite`, into the page cache, where every process reads it) as it always was, but synced after the commit:
/// the write is answered once its log synced, and the witness sync of write k overlaps the answer of k and the
/// forming and running of write k+1, which waits for it before it commits. That keeps the one order that
/// matters: the witness on disk is never more than one write behind the store on disk.
///
/// What a crash of the machine can leave on disk, on the SQLite store (whose witness is written before the
/// commit, in the same state as the seal):
/// - the witness's new slot synced, the WAL not (the slot reached the disk on its own): the store is at the
///   witness's previous state (accepted, as before);
/// - the WAL synced, the witness not: the store is one write ahead of the witness. Its seal records, under its HMAC,
///   the state the write started from (`StoreSeal.reseal`, the `from=` entry), and that is the witness's current
///   state: `StoreSeal.problem` accepts exactly this case (see there for what it refuses and why an attacker
///   gains nothing).
/// On the PostgreSQL store the witness names an audit record the chain must still hold, so a witness behind the
/// store is always accepted (`PostgresWitness`); it is advanced after COMMIT, and the sync bounds how far behind a
/// crash of the machine can leave it: one write.
/// A SIGKILL loses nothing here: the `pwrite` is in the kernel's page cache, which survives the process.
public final class WitnessSync: @unchecked Sendable {
    private let condition = Condition()
    /// The descriptor to sync and close (-1: none handed over).
    private var job: Int32 = -1
    /// Whether the descriptor handed over may be synced now (its write committed or rolled back).
    private var released = false
    /// A sync handed over and not finished.
    private var busy = false
    private var failure: String?
    private var threadRunning = false
    private var path = ""
    /// Writes waiting in `waitUntilSynced`, for tests.
    private var waiting = 0

    public init() {}

    /// The sync itself (tests replace it, `replaceSync`, to hold a sync back).
    private var sync: @Sendable (Int32) -> Int32 = { fdatasync($0) }

    /// Replaces the sync for the syncs handed over from now on (tests), once the one under way has finished.
    public func replaceSync(_ body: @escaping @Sendable (Int32) -> Int32) throws {
        try waitUntilSynced()
        condition.withLock { sync = body }
    }

    /// Hands `fd` (open on the witness at `path`, its new slot written) over, to be synced and closed once
    /// `release` is called (after the commit); the caller has waited for the previous sync (`waitUntilSynced`).
    public func hold(fd: Int32, path: String) {
        condition.withLock {
            precondition(!busy, "a witness sync was handed over before the previous one finished")
            job = fd
            busy = true
            released = false
            self.path = path
        }
    }

    /// Starts the sync handed over by `hold`, if any (the write's transaction has ended).
    public func release() {
        condition.withLock { releaseLocked() }
    }

    private func releaseLocked() {
        guard busy, !released else { return }
        released = true
        if !threadRunning {
            threadRunning = true
            detachThread { [self] in loop() }
        }
        condition.broadcast()
    }

    private func loop() {
        condition.lock()
        while true {
            while job < 0 || !released {
                // Idle for a while: the thread ends, the next sync starts another.
                if !condition.wait(seconds: 2), job < 0 || !released {
                    threadRunning = false
                    condition.unlock()
                    return
                }
            }
            let fd = job
            let sync = sync
            job = -1
            condition.unlock()
            let ok = sync(fd) == 0
            let error = errno
            close(fd)
            condition.lock()
            if !ok { failure = "cannot sync the witness \(path): \(String(cString: strerror(error)))" }
            busy = false
            condition.broadcast()
        }
    }

    /// Whether a sync is handed over and not finished, and how many writes wait for it (tests).
    public var isBusy: Bool { condition.withLock { busy } }
    public var waiters: Int { condition.withLock { waiting } }

    /// Waits until the sync handed over last has finished (starting it if nobody did); throws if it failed (the
    /// write that learns it fails, before it writes the witness or commits; the next write writes the witness
    /// again and syncs it anew).
    public func waitUntilSynced() throws {
        condition.lock()
        defer { condition.unlock() }
        releaseLocked()
        waiting += 1
        while busy { _ = condition.wait(seconds: 1) }
        waiting -= 1
        if let failure {
            self.failure = nil
            throw StoreError.unavailable(failure)
        }
    }
}
