import Glibc
import Platform
import Rollout
import StoreSupport

/// The witness's `fdatasync` of one write, run on a thread of its own while the write's transaction commits, and
/// waited for by the next write of the same connection before it touches the witness.
///
/// Why: a write used to sync the witness and then the WAL, one after the other, before its callers were answered
/// (two serial syncs per group commit). The witness is now written (`pwrite`, in the page cache at once, so every
/// process reads it) before the commit as it always was, but its sync runs beside the WAL's: the answer waits for
/// the WAL sync only, and the witness sync of write k overlaps the commit of k, the answer, and the forming and
/// running of write k+1. Write k+1 waits for it before it writes the witness (and so before it commits), which keeps
/// the one order that matters: the witness on disk is never more than one write behind the store on disk.
///
/// What a crash can leave on disk, with write k's witness being synced while its WAL is synced:
/// - both synced, or neither: the store and the witness agree (current, or the store at the witness's previous);
/// - the witness synced, the WAL not: the store is at the witness's previous state (accepted, as before);
/// - the WAL synced, the witness not: the store is one write ahead of the witness. Its seal records, under its HMAC,
///   the state the write started from (`StoreSeal.reseal`, the `from=` entry), and that is the witness's current
///   state: `StoreSeal.problem` accepts exactly this case (see there for what it refuses and why an attacker
///   gains nothing).
/// A SIGKILL loses nothing here: the `pwrite` is in the kernel's page cache before the commit, which survives the
/// process. Only a crash of the machine can leave the witness behind, by one write at most.
final class WitnessSync: @unchecked Sendable {
    private let condition = Condition()
    /// The descriptor to sync and close (-1: none handed over).
    private var job: Int32 = -1
    /// A sync handed over and not finished.
    private var busy = false
    private var failure: String?
    private var threadRunning = false
    private var path = ""
    /// Syncs finished, for tests.
    private(set) var completed = 0

    /// Writes waiting in `waitUntilSynced`, for tests.
    private var waiting = 0

    /// The sync itself (tests replace it to hold a sync back; set before the first write).
    var sync: @Sendable (Int32) -> Int32 = { fdatasync($0) }

    /// Hands `fd` (open on the witness at `path`, its new slot written) over to be synced and closed; the caller
    /// has waited for the previous sync (`waitUntilSynced`).
    func start(fd: Int32, path: String) {
        condition.withLock {
            precondition(!busy, "a witness sync was started before the previous one finished")
            job = fd
            busy = true
            self.path = path
            if !threadRunning {
                threadRunning = true
                detachThread { [self] in loop() }
            }
            condition.broadcast()
        }
    }

    private func loop() {
        condition.lock()
        while true {
            while job < 0 {
                // Idle for a while: the thread ends, the next sync starts another.
                if !condition.wait(seconds: 2), job < 0 {
                    threadRunning = false
                    condition.unlock()
                    return
                }
            }
            let fd = job
            job = -1
            condition.unlock()
            let ok = sync(fd) == 0
            let error = errno
            close(fd)
            condition.lock()
            if !ok { failure = "cannot sync the witness \(path): \(String(cString: strerror(error)))" }
            busy = false
            completed += 1
            condition.broadcast()
        }
    }

    /// Whether a sync is under way, and how many writes wait for it (tests).
    var isBusy: Bool { condition.withLock { busy } }
    var waiters: Int { condition.withLock { waiting } }

    /// Waits until the sync handed over last has finished; throws if it failed (the write that learns it
    /// fails, before it writes the witness or commits; the next write writes the witness again and syncs it anew).
    func waitUntilSynced() throws {
        condition.lock()
        defer { condition.unlock() }
        waiting += 1
        while busy { _ = condition.wait(seconds: 1) }
        waiting -= 1
        if let failure {
            self.failure = nil
            throw StoreError.unavailable(failure)
        }
    }
}
