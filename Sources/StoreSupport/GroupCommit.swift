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
/// `commit` gets the operations in arrival order and returns one outcome per operation, in that order. It decides
/// each operation inside the transaction, in order, so a group's outcomes are those of running its operations one
/// after another: the group changes how often the disk syncs, never what an operation decides. When `commit`
/// throws (the transaction did not commit), every operation of the group fails with that error: none of them is
/// answered as done.
public final class GroupCommit<Operation, Outcome>: @unchecked Sendable {
    public typealias Commit = ([Operation]) throws -> [Result<Outcome, any Error>]

    private final class Ticket {
        let operation: Operation
        var outcome: Result<Outcome, any Error>?
        init(_ operation: Operation) { self.operation = operation }
    }

    private let condition = Condition()
    private var queue: [Ticket] = []
    private var committing = false
    private let maximumGroup: Int
    private let commit: Commit
    /// Groups committed and operations in them, for benchmarks and tests.
    private var groups = 0
    private var operations = 0

    public init(maximumGroup: Int = 512, commit: @escaping Commit) {
        self.maximumGroup = max(1, maximumGroup)
        self.commit = commit
    }

    /// Runs `operation` in the next group to commit; returns its outcome once that group has committed.
    public func run(_ operation: Operation) throws -> Outcome {
        let ticket = Ticket(operation)
        condition.lock()
        queue.append(ticket)
        while ticket.outcome == nil {
            if committing {
                _ = condition.wait(seconds: 1)
                continue
            }
            committing = true
            let group = Array(queue.prefix(maximumGroup))
            queue.removeFirst(group.count)
            condition.unlock()
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
            condition.lock()
            for (t, outcome) in zip(group, outcomes) { t.outcome = outcome }
            groups += 1
            operations += group.count
            committing = false
            condition.broadcast()
        }
        condition.unlock()
        return try ticket.outcome!.get()
    }

    /// Operations queued for the next group (not yet taken by a leader).
    public var queued: Int { condition.withLock { queue.count } }

    /// Groups committed so far and the operations they held.
    public var statistics: (groups: Int, operations: Int) { condition.withLock { (groups, operations) } }
}

/// A `commit` that broke its contract.
public enum GroupCommitError: Error, CustomStringConvertible {
    case outcomeCount(expected: Int, got: Int)
    public var description: String {
        switch self {
        case .outcomeCount(let e, let g): "internal: a group of \(e) operations committed with \(g) outcomes"
        }
    }
}
