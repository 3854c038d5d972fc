import Glibc
import Platform

/// Pause and speed of a live simulation, changed from another thread (the demo console's `p`, `>`, `<`) and
/// consulted by `SimulationRunner` on every step.
///
/// The speed moves along a fixed ladder (`ladder`); a speed given on the command line that is not on it stays
/// until the first `>` or `<`, which go to the next rung above or below it. The runner re-anchors its pacing at
/// every change, so simulated time never jumps: pausing stops it, resuming continues from where it stood.
public final class SimulationControl: @unchecked Sendable {
    /// `1x`, `10x`, `60x`, `600x`, `3600x`, `max`: from watching events arrive one by one to hours per second.
    public static let ladder: [SimulationSpeed] = [
        .factor(1), .factor(10), .factor(60), .factor(600), .factor(3600), .maximum,
    ]

    /// A consistent reading of the controls.
    public struct State: Hashable, Sendable {
        public var speed: SimulationSpeed
        public var paused: Bool
        /// Counts changes, so that a reader sees a change even when it comes back to the same values.
        public var generation: Int
        public var isFastest: Bool { speed == SimulationControl.ladder.last }
        public var isSlowest: Bool {
            SimulationControl.rank(speed) <= SimulationControl.rank(SimulationControl.ladder[0])
        }
    }

    private let lock = Lock()
    private var current: State
    private var pace: Double?

    /// The pace the runner manages, in simulated seconds per wall second, when it is slower than the speed (the
    /// machine cannot keep up); nil at `max`, before the first step and after every change until the runner has
    /// measured the new pace (so a screen never shows the paused pace, 0, beside the speed just chosen).
    public var achieved: Double? {
        get { lock.withLock { pace } }
        set { lock.withLock { pace = newValue } }
    }

    public init(speed: SimulationSpeed, paused: Bool = false) {
        current = State(speed: speed, paused: paused, generation: 0)
    }

    public var state: State { lock.withLock { current } }

    /// Pauses a running simulation, or resumes a paused one; returns the new state.
    @discardableResult public func togglePause() -> State {
        lock.withLock {
            current.paused.toggle()
            current.generation += 1
            pace = nil
            return current
        }
    }

    /// The next rung of the ladder above the current speed (unchanged at `max`); returns the new state.
    @discardableResult public func faster() -> State {
        lock.withLock {
            let r = Self.rank(current.speed)
            if let next = Self.ladder.first(where: { Self.rank($0) > r }) {
                current.speed = next
                current.generation += 1
                pace = nil
            }
            return current
        }
    }

    /// The next rung of the ladder below the current speed (unchanged at `1x`); returns the new state.
    @discardableResult public func slower() -> State {
        lock.withLock {
            let r = Self.rank(current.speed)
            if let next = Self.ladder.last(where: { Self.rank($0) < r }) {
                current.speed = next
                current.generation += 1
                pace = nil
            }
            return current
        }
    }

    /// Orders speeds: factors by their value, `max` above all.
    static func rank(_ speed: SimulationSpeed) -> Double {
        switch speed {
        case .factor(let f): f
        case .maximum: .infinity
        }
    }
}
