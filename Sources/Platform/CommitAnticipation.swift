#if canImport(Glibc)
import Glibc
#endif

/// Requests on their way to a group commit, counted exactly: a server marks the thread handling a request that
/// will write (`expecting`) when it starts, and the request's write takes the mark off when it queues for its group
/// (`arrived`, called by the group commit); a request that ends without writing drops its mark at the end.
///
/// A group's leader waits, briefly and boundedly, while marked requests are still on their way (`waitForArrivals`),
/// so that one transaction and one sync serve them too: PostgreSQL's `commit_delay` with `commit_siblings`, except
/// that the siblings counted are exactly those that will write and have not yet queued. A lone request never
/// waits (nobody else is marked), and a leader never waits for a request that is past its write (signing its
/// answer) or had not started when it began to wait.
///
/// Why: on a 2-core machine a group commit's fixed cost (its transaction, the seal and witness, two syncs) was
/// about as large as a request's own work, and groups formed from whoever happened to have queued while the
/// previous group synced: about two requests at 8 clients.
public enum CommitAnticipation {
    private static let condition = Condition()
    nonisolated(unsafe) private static var marked = 0
    /// Marks dropped so far (requests queued for their group, or ended without writing).
    nonisolated(unsafe) private static var arrivals: UInt64 = 0
    /// Leaders in `waitForArrivals`.
    nonisolated(unsafe) private static var waiting = 0
    /// The calling thread's mark: non-nil while its request is on its way to a write.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create")
        return key
    }()
    nonisolated(unsafe) private static let mark = UnsafeMutableRawPointer(bitPattern: 1)!

    /// Runs `body` (the handling of a request that will write) with the calling thread marked as on its way to a
    /// group commit; the mark is dropped when its write queues (`arrived`) or, at the latest, when `body` returns.
    public static func expecting<T>(_ body: () throws -> T) rethrows -> T {
        let marking = pthread_getspecific(key) == nil
        if marking {
            pthread_setspecific(key, mark)
            condition.withLock { marked += 1 }
        }
        defer { if marking { arrived() } }
        return try body()
    }

    /// The calling thread's write has queued (or its request ended): its mark, if any, is dropped, and a leader
    /// waiting for it is woken.
    public static func arrived() {
        guard pthread_getspecific(key) != nil else { return }
        pthread_setspecific(key, nil)
        condition.withLock {
            marked -= 1
            arrivals &+= 1
            if waiting > 0 { condition.broadcast() }
        }
    }

    /// Requests marked and not yet queued.
    public static var expected: Int { condition.withLock { marked } }

    /// Leaders waiting in `waitForArrivals` (tests).
    public static var leadersWaiting: Int { condition.withLock { waiting } }

    /// Waits until as many marks have been dropped as requests were on their way when it was called, at most
    /// `seconds`; returns at once when none was.
    ///
    /// Those counted are the requests already marked at the call: a request that starts while the leader waits
    /// joins the group if it queues in time, but does not hold the leader any longer. (The wait used to end only
    /// when no request at all was marked, so under steady load, each answer starting its client's next request,
    /// a wait could run to its bound.) Which requests arrive first does not matter: a later one that queues first
    /// is in the group all the same.
    public static func waitForArrivals(atMost seconds: Double) {
        guard seconds > 0 else { return }
        condition.withLock {
            guard marked > 0 else { return }
            let target = arrivals &+ UInt64(marked)
            let deadline = Deadline(secondsFromNow: seconds)
            waiting += 1
            defer { waiting -= 1 }
            while arrivals < target, condition.wait(until: deadline) {}
        }
    }
}
