import Platform

/// One value waiting for a connection's next write, which takes it and writes it in its own transaction (both
/// stores keep the monitor's rollout start this way: `RolloutStartCache.cacheRolloutStartWithNextWrite`). A newer
/// value replaces one not taken yet.
public final class PendingWrite<Value: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var value: Value?

    public init() {}

    public func set(_ newValue: Value) { lock.withLock { value = newValue } }

    /// The value, now no longer pending; nil when none waits.
    public func take() -> Value? {
        lock.withLock {
            defer { value = nil }
            return value
        }
    }
}
