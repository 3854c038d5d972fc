import Foundation

/// A stand-in for `fdatasync` that blocks until `release()`: a test hands `sync` to a witness's sync thread
/// (`WitnessSync.replaceSync`) to hold a write's witness sync back, and sees what the next write does meanwhile.
/// Tests call `release()` in a `defer` as well: a thread stuck in the sync would keep the test process alive.
public final class HeldSync: @unchecked Sendable {
    private let gate = NSCondition()
    private var open = false

    public init() {}

    /// Waits until released, then syncs `fd`.
    public func sync(_ fd: Int32) -> Int32 {
        gate.lock()
        while !open { _ = gate.wait(until: Date().addingTimeInterval(1)) }
        gate.unlock()
        return fdatasync(fd)
    }

    public func release() {
        gate.lock()
        open = true
        gate.broadcast()
        gate.unlock()
    }
}

/// `body` run on a thread of its own, and waits for it with a bound (never a fixed sleep).
public final class BackgroundCall<Value: Sendable>: @unchecked Sendable {
    private let done = NSCondition()
    private var value: Value?
    private var finished = false

    public init(_ body: @escaping @Sendable () -> Value) {
        Thread.detachNewThread { [self] in
            let v = body()
            done.lock()
            value = v
            finished = true
            done.broadcast()
            done.unlock()
        }
    }

    /// Waits until `condition` holds or the call has returned, for at most `seconds`.
    public func wait(until condition: () -> Bool, seconds: Double = 20) {
        let deadline = Date().addingTimeInterval(seconds)
        done.lock()
        defer { done.unlock() }
        while !condition(), !finished, Date() < deadline { _ = done.wait(until: Date().addingTimeInterval(0.01)) }
    }

    /// The call's value once it returned, waiting at most `seconds`; nil if it did not return by then.
    public func result(within seconds: Double = 20) -> Value? {
        let deadline = Date().addingTimeInterval(seconds)
        done.lock()
        defer { done.unlock() }
        while !finished, Date() < deadline { _ = done.wait(until: deadline) }
        return value
    }
}
