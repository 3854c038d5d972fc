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
/// answer) or has not started.
///
/// Why: on a 2-core machine a group commit's fixed cost (its transaction, the seal and witness, two syncs) was
/// about as large as a request's own work, and groups formed from whoever happened to have queued while the
/// previous group synced: about two requests at 8 clients.
public enum CommitAnticipation {
    private static let condition = Condition()
    nonisolated(unsafe) private static var marked = 0
    /// The calling thread's mark: non-nil while its request is on its way to a write.
    nonisolated(unsafe) private static let key: pthread_key_t = {
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
            if marked == 0 { condition.broadcast() }
        }
    }

    /// Requests marked and not yet queued.
    public static var expected: Int { condition.withLock { marked } }

    /// Waits while marked requests are on their way, at most `seconds`; returns at once when none is.
    public static func waitForArrivals(atMost seconds: Double) {
        guard seconds > 0 else { return }
        condition.withLock {
            guard marked > 0 else { return }
            let deadline = Condition.deadline(secondsFromNow: seconds)
            while marked > 0, condition.wait(until: deadline) {}
        }
    }
}
