import Glibc
import Platform
import Timekeeping

/// The simulation's virtual time, readable from any thread.
///
/// The simulation moves it as it processes its agenda; the console of the demo mode uses it as its `Clock`, so
/// that data ages, windows and staleness are measured in simulated time. Only the simulation sets it.
public final class SimulationClock: Clock, @unchecked Sendable {
    private let lock = Lock()
    private var current: Instant

    public init(_ start: Instant) { current = start }

    public func now() -> Instant { lock.withLock { current } }

    func set(_ instant: Instant) { lock.withLock { current = instant } }
}
