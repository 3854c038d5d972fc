import Glibc
import Platform
import Telemetry
import Timekeeping

/// Drives a simulation against the wall clock: paces it at its speed, lands telemetry at least once a second
/// of wall time, and publishes its clock into a store for readers on the wall clock.
///
/// The edge where wall time enters: the simulation itself never reads it. `run` blocks until the end or until
/// `stop()` (from any thread: a signal handler, the console quitting).
public final class SimulationRunner: @unchecked Sendable {
    public let simulation: FleetSimulation
    public let speed: SimulationSpeed
    public let wall: any Clock
    /// Where the clock is published (the store's `SimulationHeartbeat` port); nil in-process, where readers use
    /// `simulation.clock` directly.
    public let clockStore: (any SimulationHeartbeat)?
    /// Pause and speed changed while it runs (the demo console's keys); nil runs at `speed` throughout.
    public let control: SimulationControl?
    private let sleep: @Sendable (Instant.Duration) -> Void
    private let lock = Lock()
    private var stopped = false

    public init(
        simulation: FleetSimulation, speed: SimulationSpeed, wall: any Clock,
        clockStore: (any SimulationHeartbeat)? = nil,
        control: SimulationControl? = nil,
        sleep: @escaping @Sendable (Instant.Duration) -> Void = { d in usleep(UInt32(clamping: d.microseconds)) }
    ) {
        self.simulation = simulation
        self.speed = speed
        self.wall = wall
        self.clockStore = clockStore
        self.control = control
        self.sleep = sleep
    }

    /// The wall time one step of the model may take before the runner lands its data and heartbeat.
    static let stepBudget = Instant.Duration.milliseconds(Int64(200))

    /// Asks `run` to return at its next step (telemetry is flushed, the clock record marked stopped).
    public func stop() { lock.withLock { stopped = true } }
    public var isStopped: Bool { lock.withLock { stopped } }

    /// Runs to the end (or `stop()`); `progress` is called about twice a second of wall time and at the end,
    /// with the totals and the notes since the last call.
    public func run(progress: (FleetStatistics, [SimulationNote]) -> Void = { _, _ in }) throws {
        // The anchor of the current pace: the start, or the last change of `control` (pause: factor 0).
        var wallStart = wall.now()
        var simulatedStart = simulation.now
        func pace(_ speed: SimulationSpeed, paused: Bool) -> Double? {
            if paused { return 0 }
            if case .factor(let f) = speed { return f }
            return nil
        }
        var controls = control?.state
        var factor: Double? = pace(controls?.speed ?? speed, paused: controls?.paused ?? false)
        // The pace readers extrapolate with: the speed, or the slower pace the machine manages (see below).
        var achieved = factor
        // Until the pace is measured (at the start and after each change of speed) readers extrapolate at the
        // wall's pace at most: a first step that takes seconds (a large fleet's start) at the speed asked for put
        // their clocks hours ahead of the data, which looked stale, and then ran backwards.
        var measured = false
        func record(running: Bool) throws {
            guard let clockStore else { return }
            let published = measured ? achieved : achieved.map { min($0, 1) }
            let r = SimulationClockRecord(
                wallStart: wallStart, simulatedStart: simulatedStart, speed: published, wallUpdated: wall.now(),
                simulatedAtUpdate: simulation.now, running: running)
            try clockStore.publishSimulationClock(r)
        }
        // One step of the model towards `target`, cut short once it has taken `stepBudget` of wall time, so that
        // data and heartbeat keep flowing while the model works through a busy stretch. Bounded by wall time, not
        // by the simulated time the machine was thought to manage: before the pace was measured that was the full
        // speed, and a large fleet's first minutes at 3600x took longer than readers wait for a heartbeat.
        func step(to target: Instant) throws {
            let budgetEnd = wall.now() + Self.stepBudget
            try simulation.advance(to: target, yieldingWhen: { [wall] in wall.now() >= budgetEnd })
        }
        try record(running: true)
        var lastFlush = wallStart
        var paceMark = (wall: wallStart, simulated: simulatedStart)
        var lastReport = wallStart
        let second = Instant.Duration.seconds(Int64(1))
        do {
            while !isStopped, !simulation.isFinished {
                if let control, control.state.generation != controls?.generation {
                    // Re-anchored at the change: simulated time continues from where it stands at the new pace, and
                    // the heartbeat says so at once (paused: speed 0, so readers' time stops and data stays fresh).
                    controls = control.state
                    try simulation.flush()
                    wallStart = wall.now()
                    simulatedStart = simulation.now
                    factor = pace(controls!.speed, paused: controls!.paused)
                    achieved = factor
                    measured = false
                    control.achieved = achieved
                    paceMark = (wallStart, simulatedStart)
                    try record(running: true)
                }
                if factor == 0 {
                    sleep(.milliseconds(Int64(50)))
                } else if let factor {
                    let elapsed = Double((wall.now() - wallStart).microseconds)
                    let target = simulatedStart + Instant.Duration(microseconds: Int64(elapsed * factor))
                    try step(to: target)
                    let w = wall.now()
                    // The pace actually run over the last half second or more is what readers extrapolate with, so
                    // that their clocks do not run ahead of the data (which would make it look stale) when the
                    // machine is slower than the speed.
                    if w - paceMark.wall >= .milliseconds(500) {
                        let pace =
                            Double((simulation.now - paceMark.simulated).microseconds)
                            / Double((w - paceMark.wall).microseconds)
                        achieved = pace >= factor * 0.98 ? factor : pace
                        measured = true
                        control?.achieved = achieved
                        paceMark = (w, simulation.now)
                    }
                    let behind = Instant.Duration(microseconds: max(5_000_000, Int64((achieved ?? factor) * 1_000_000)))
                    if target - simulation.now > behind {
                        // More than a second of wall time behind: go on from here at the pace the machine manages
                        // rather than race to catch up.
                        wallStart = w
                        simulatedStart = simulation.now
                    }
                    // Data lands at least every simulated minute (and every second of wall time): at high speeds a
                    // second of wall time is more than the store's stale limit of simulated time.
                    if w - lastFlush >= min(second, Instant.Duration(microseconds: Int64(60_000_000 / factor))) {
                        try simulation.flush()
                        try record(running: true)
                        lastFlush = w
                    }
                    // Small steps keep the events close to their wall time without busy waiting.
                    if !simulation.isFinished, simulation.now >= target {
                        sleep(.milliseconds(Int64(factor >= 10 ? 20 : 100)))
                    }
                } else {
                    // As fast as possible: a heartbeat per simulated minute (or per step, when a minute takes longer
                    // than one) keeps readers' mapping of wall time (a publish from another terminal) onto simulated
                    // time within a minute.
                    try step(to: simulation.now + .minutes(1))
                    try record(running: true)
                }
                let w = wall.now()
                if w - lastReport >= .milliseconds(500) {
                    try record(running: true)
                    progress(simulation.statistics(), simulation.drainNotes())
                    lastReport = w
                }
            }
            try simulation.flush()
        } catch {
            try? record(running: false)
            throw error
        }
        try record(running: false)
        progress(simulation.statistics(), simulation.drainNotes())
    }
}
