import Timekeeping

/// What the demo keys ask of the simulation that drives the screen (`p`, `>`, `<`).
public enum SimulationCommand: Hashable, Sendable {
    case togglePause
    case faster
    case slower
}

/// The simulation driving the screen, as the header shows it: its speed, whether it is paused, and the wall time
/// beside it (the console's ticks run on the simulation's time while it drives the screen).
public struct SimulationStatus: Hashable, Sendable {
    /// `60x`, `max`.
    public var speed: String
    public var paused: Bool
    /// Wall time when the status was read.
    public var wall: Instant
    /// No rung above (`>` does nothing) / below (`<` does nothing).
    public var isFastest: Bool
    public var isSlowest: Bool

    public init(speed: String, paused: Bool, wall: Instant, isFastest: Bool = false, isSlowest: Bool = false) {
        self.speed = speed
        self.paused = paused
        self.wall = wall
        self.isFastest = isFastest
        self.isSlowest = isSlowest
    }
}

/// The port to a simulation running in this process (`rollout demo`); a console on a store alone has none.
///
/// Called on the run loop's thread: both calls must return at once (read or set a few values under a lock).
public protocol ConsoleSimulationControl: Sendable {
    func status() -> SimulationStatus
    /// Carries out the command and returns the status after it.
    func perform(_ command: SimulationCommand) -> SimulationStatus
}
