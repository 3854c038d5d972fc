import Glibc

/// A request to abandon work in progress, shared between whoever asks (a stop signal, a deadline) and the work,
/// which checks it between steps, waits on it instead of sleeping, and hands it to whatever blocks on the
/// network (libcurl's progress callback aborts a transfer once it is set).
///
/// With `parent`, it is also cancelled when the parent is; with `seconds`, once that much monotonic time has
/// passed since it was made (a bound on the work, whatever the network does).
public final class Cancellation: @unchecked Sendable {
    private let condition = Condition()
    private var cancelled = false
    private let parent: Cancellation?
    private let deadline: Deadline?
    /// How often a wait looks at the parent and the deadline (a parent's `cancel` does not wake a child's wait).
    static let slice = 0.1

    public init(parent: Cancellation? = nil, seconds: Double? = nil) {
        self.parent = parent
        deadline = seconds.map { Deadline(secondsFromNow: $0) }
    }

    public func cancel() {
        condition.withLock {
            cancelled = true
            condition.broadcast()
        }
    }

    /// Whether this one was cancelled (or its parent), or its deadline has passed.
    public var isCancelled: Bool {
        if condition.withLock({ cancelled }) || parent?.isCancelled == true { return true }
        return deadline?.hasPassed ?? false
    }

    /// Whether the deadline (not a `cancel`) ended it.
    public var timedOut: Bool {
        guard let deadline, !condition.withLock({ cancelled }), parent?.isCancelled != true else { return false }
        return deadline.hasPassed
    }

    /// Waits `seconds`, or less when cancelled meanwhile; returns whether it is cancelled.
    @discardableResult
    public func wait(seconds: Double) -> Bool {
        let end = Deadline(secondsFromNow: seconds)
        while !isCancelled {
            let left = end.secondsLeft
            if left <= 0 { return false }
            let step = parent == nil && deadline == nil ? left : min(left, Self.slice)
            condition.withLock {
                if !cancelled { _ = condition.wait(seconds: step) }
            }
        }
        return true
    }
}
