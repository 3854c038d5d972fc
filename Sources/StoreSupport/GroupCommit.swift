import Glibc
import Platform

/// Group commit: many threads' small writes land in one durable transaction, and each thread returns only once
/// the transaction holding its write has committed.
///
/// A caller of `run` queues its operation. If no group is being committed, it becomes the leader: it takes every
/// queued operation (up to `maximumGroup`, its own among them), runs `commit` on them outside the queue's lock
/// (one transaction, one sync to disk), hands each waiting thread its outcome and wakes them. Operations that
/// arrive while a group commits queue up and form the next group, so the number of syncs follows the rate at which
/// the disk can sync, not the rate of requests; a lone caller commits alone at once (no timer, no added wait).
///
/// A leader waits, at most `anticipation` seconds, while requests marked as on their way to a write
/// (`CommitAnticipation`: a server marks the requests that will write) have not yet queued, so that they share its
/// group; a lone caller, or one whose siblings are all queued or past their writes, commits at once.
///
/// `commit` gets the operations in arrival order and returns one outcome per operation, in that order. It decides
/// each operation inside the transaction, in order, so a group's outcomes are those of running its operations one
/// after another: the group changes how often the disk syncs, never what an operation decides. When `commit`
/// throws (the transaction did not commit), every operation of the group fails with that error: none of them is
/// answered as done.
public final class GroupCommit<Operation, Outcome>: @unchecked Sendable {
    public typealias Commit = ([Operation]) throws -> [Result<Outcome, any Error>]

    /// One caller's operation, its outcome, and the semaphore its thread sleeps on.
    ///
    /// Each waiting thread is woken by itself, exactly once: with its outcome (its group committed), or to lead
    /// the next group. A condition variable broadcast woke every waiter at the end of each group, those queued
    /// for the next group too, which all went back to sleep but one: on a 2-core machine with 16 serving threads
    /// that was up to 15 useless context switches per group on the path of the next group's commit.
    private final class Ticket {
        let operation: Operation
        var outcome: Result<Outcome, any Error>?
        private let semaphore: UnsafeMutablePointer<sem_t>
        init(_ operation: Operation) {
            self.operation = operation
            semaphore = .allocate(capacity: 1)
            sem_init(semaphore, 0, 0)
        }
        deinit {
            sem_destroy(semaphore)
            semaphore.deallocate()
        }
        func wake() { sem_post(semaphore) }
        func sleep() { while sem_wait(semaphore) != 0, errno == EINTR {} }
    }

    private let lock = Lock()
    private var queue: [Ticket] = []
    /// A leader is committing a group, or has been handed the lead and is about to.
    private var committing = false
    private let maximumGroup: Int
    /// The longest a leader waits for marked requests still on their way (`CommitAnticipation`), in seconds.
    private let anticipation: Double
    private let commit: Commit
    /// Groups committed and operations in them, for benchmarks and tests.
    private var groups = 0
    private var operations = 0

    public init(maximumGroup: Int = 512, anticipation: Double = 0, commit: @escaping Commit) {
        self.maximumGroup = max(1, maximumGroup)
        self.anticipation = max(0, anticipation)
        self.commit = commit
    }

    /// Runs `operation` in the next group to commit; returns its outcome once that group has committed.
    public func run(_ operation: Operation) throws -> Outcome {
        let ticket = Ticket(operation)
        lock.lock()
        queue.append(ticket)
        let leads = !committing
        committing = true
        lock.unlock()
        // Queued: a leader waiting for this caller may take the group now.
        CommitAnticipation.arrived()
        if !leads {
            // Woken once: with the outcome, or with the lead (then first in the queue).
            ticket.sleep()
            if let outcome = lock.withLock({ ticket.outcome }) { return try outcome.get() }
        }
        // This caller leads: its own operation is the first queued. Requests on their way to a write join first.
        CommitAnticipation.waitForArrivals(atMost: anticipation)
        lock.lock()
        precondition(queue.first === ticket, "a group's leader is the first of its group")
        let group = Array(queue.prefix(maximumGroup))
        queue.removeFirst(group.count)
        lock.unlock()
        var outcomes: [Result<Outcome, any Error>]
        do {
            outcomes = try commit(group.map(\.operation))
            if outcomes.count != group.count {
                let error = GroupCommitError.outcomeCount(expected: group.count, got: outcomes.count)
                outcomes = group.map { _ in .failure(error) }
            }
        } catch {
            outcomes = group.map { _ in .failure(error) }
        }
        lock.lock()
        for (t, outcome) in zip(group, outcomes) { t.outcome = outcome }
        groups += 1
        operations += group.count
        // Operations that queued meanwhile: the first of them leads the next group at once (woken first, so that
        // group's commit starts before this group's callers are answered); none: the next caller leads.
        let next = queue.first
        if next == nil { committing = false }
        lock.unlock()
        next?.wake()
        for t in group where t !== ticket { t.wake() }
        return try ticket.outcome!.get()
    }

    /// Operations queued for the next group (not yet taken by a leader).
    public var queued: Int { lock.withLock { queue.count } }

    /// Groups committed so far and the operations they held.
    public var statistics: (groups: Int, operations: Int) { lock.withLock { (groups, operations) } }
}

/// How long the per-request stores' group leaders wait for marked requests (`CommitAnticipation`), in seconds:
/// about the time a request's work before its write (parsing, one or two signature verifications) takes on a busy
/// 2-core machine. A group's sync and fixed work cost about as much CPU as a request's own, and the wait holds only
/// callers already queued, never a core (the requests waited for are running).
public let requestCommitAnticipation = 0.001

/// A `commit` that broke its contract.
public enum GroupCommitError: Error, CustomStringConvertible {
    case outcomeCount(expected: Int, got: Int)
    public var description: String {
        switch self {
        case .outcomeCount(let e, let g): "internal: a group of \(e) operations committed with \(g) outcomes"
        }
    }
}
