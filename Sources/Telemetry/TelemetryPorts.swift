import Rollout
import Timekeeping

// The ports of the telemetry side of a store, defined in the core so that every store (the SQLite file, the
// PostgreSQL team store) implements the same operations and passes the same conformance suite
// (Tests/StoreConformance). The monitor, the ingest, the simulator's sink and the settings write path use only
// these; no SQL appears above them.

/// What one landed batch added.
public struct BatchReceipt: Hashable, Sendable {
    public var id: Int64
    public var source: String
    public var committedAt: Instant
    public var events: Int
    public var installations: Int
    public var earliest: Instant?
    public var latest: Instant?

    public init(
        id: Int64, source: String, committedAt: Instant, events: Int, installations: Int, earliest: Instant?,
        latest: Instant?
    ) {
        self.id = id
        self.source = source
        self.committedAt = committedAt
        self.events = events
        self.installations = installations
        self.earliest = earliest
        self.latest = latest
    }
}

/// The telemetry counters of a store: time-bucketed counters, per-installation state, presence marks, the
/// catalog of rejection reasons and the log of batches.
///
/// Rules every implementation keeps (checked by `TelemetryCountersConformance`):
/// - `commit` lands a batch whole or not at all, in one transaction, and returns what it added; an empty batch
///   writes nothing and returns nil. Landing the same events in one batch or in several gives the same counters.
/// - `snapshot` reads in one read transaction (a batch landing meanwhile is seen whole or not at all) and equals
///   the fold of the landed events (`RolloutWatch`) for the same configuration and instant.
/// - `batches` lists every landed batch oldest first, with increasing ids.
public protocol TelemetryCounters: AnyObject {
    /// Lands `batch` as one transaction and returns what it added. An empty batch writes nothing.
    @discardableResult
    func commit(_ batch: TelemetryBatch, source: String, at committedAt: Instant) throws -> BatchReceipt?
    /// The dashboard query: everything the console's panels need, as of `now`, for `configuration`'s rollout.
    func snapshot(_ configuration: WatchConfiguration, now: Instant) throws -> TelemetrySnapshot
    /// Counter rows of `level` with `from ≤ bucket < to`, one look per bucket that has rows, oldest first (the
    /// console's charts read up to a day of minute rows here; what retention dropped is simply absent).
    func counterLooks(_ level: BucketLevel, from: Int64, to: Int64) throws -> [CounterLook]
    /// The newest event time landed, nil before the first.
    func newestEvent() throws -> Instant?
    /// The stored state of one installation.
    func installation(_ id: String) throws -> InstallationRecord?
    /// How many installations have been seen.
    func installationCount() throws -> Int
    /// Every landed batch, oldest first.
    func batches() throws -> [BatchReceipt]
    /// Every counter ever landed (the day rows, kept for ever).
    func allTimeTotals() throws -> CounterTotals
    /// The rejection reason of a failure counter's detail (nil for Apple's classes).
    func reason(of detail: FailureDetail) throws -> String?
    /// A failure detail in words: the class, or `rejected:REASON`.
    func describe(_ detail: FailureDetail) throws -> String
}

/// The guardrail settings of a store (`rollout policy set guardrails.* / budget.* / telemetry.*`).
///
/// Reads give the defaults for keys never set and create nothing. `saveGuardrailSetting` stores one value that
/// `GuardrailSettings.set` accepts (and refuses any other, writing nothing); callers go through the settings
/// write path, which judges and audits the change in the same transaction (`ConfigStore.atomically`). A
/// read-only store refuses the write.
public protocol GuardrailSettingsStore: AnyObject {
    func guardrailSettings() throws -> GuardrailSettings
    func saveGuardrailSetting(_ key: String, _ value: String) throws
}

/// The simulation heartbeat of a store: the clock of the simulation writing into it, if any, so that a reader
/// on the wall clock (a console in another terminal) can tell telemetry time (`TelemetryTimeline`).
///
/// At most one record; `publishSimulationClock` replaces it, `clearSimulationClock` removes it. Reading a store
/// no simulation ever wrote into gives nil and creates nothing.
public protocol SimulationHeartbeat: AnyObject {
    func simulationClock() throws -> SimulationClockRecord?
    func publishSimulationClock(_ record: SimulationClockRecord) throws
    func clearSimulationClock() throws
}

extension SimulationHeartbeat {
    /// The telemetry timeline of this store (its simulation heartbeat, if any).
    public func timeline() throws -> TelemetryTimeline { TelemetryTimeline(record: try simulationClock()) }
}

/// Where the monitor keeps the rollout start it derived from the version history, so that a new reader walks
/// only the versions published since. Pure cache: losing it costs a longer walk, never a different answer.
/// Writes are best effort (a read-only store keeps nothing); the store keeps only the newest entry.
public protocol RolloutStartCache: AnyObject {
    /// The newest cached (version, start), nil when none.
    func cachedRolloutStart() throws -> (version: Int, start: Instant?)?
    /// Keeps (version, start) now, in a write transaction of its own.
    func cacheRolloutStart(version: Int, start: Instant?) throws
    /// Keeps (version, start) with the next write this process makes to the store (in that write's transaction,
    /// under its seal), or never, if it makes none: a write's assessment caches the start without a transaction
    /// and a sync of its own, and a reader (`rollout status`) writes nothing.
    func cacheRolloutStartWithNextWrite(version: Int, start: Instant?)
}

/// Everything the monitor reads from one store, through its ports. `reading` runs a whole assessment under
/// the store's own exclusion (one connection, one thread at a time) when it has one.
public protocol MonitoredStore: AnyObject {
    /// The store's own config store (a Firebase store keeps its templates elsewhere: the caller passes that).
    func monitoredConfig() throws -> any ConfigStore
    func telemetryCounters() throws -> any TelemetryCounters
    func guardrailSettingsStore() throws -> any GuardrailSettingsStore
    func simulationHeartbeat() throws -> any SimulationHeartbeat
    /// Nil when the store keeps no cache (the start is derived from the history each time).
    func rolloutStartCache() throws -> (any RolloutStartCache)?
    /// Whether every write is refused (readers that cache derived data skip it).
    var isReadOnly: Bool { get }
    func reading<T>(_ body: () throws -> T) throws -> T
    /// Each configured telemetry source that has not answered for its limit at the wall instant `now` (or never
    /// has), in words ("source X silent since …"): the assessment makes each a HOLD (`RolloutContext.sourceSilences`).
    /// Empty when the store has no sources.
    func sourceSilences(at now: Instant) throws -> [String]
}

// MARK: The heartbeat's values

/// A running simulation's clock as published in the store, so that a reader on the wall clock (a console in
/// another terminal) can tell the simulated time.
///
/// The simulation writes a record when it starts, about once a second of wall time while it runs, and when it
/// stops: the anchor (`wallUpdated`, `simulatedAtUpdate`) and the speed. A reader extrapolates from the anchor
/// at the speed, but never more than `staleAfter` of wall time ahead: a simulation that stopped publishing
/// (killed, or slower than its speed) must not run ahead of its own data. Readers go through
/// `TelemetryTimeline`, which also decides when a simulation is no longer followed (ended, or silent).
public struct SimulationClockRecord: Hashable, Sendable {
    /// Wall time when the run started, and simulated time at that moment.
    public var wallStart: Instant
    public var simulatedStart: Instant
    /// Simulated seconds per wall second; nil when the simulation runs as fast as it can.
    public var speed: Double?
    /// Wall time of the last update, and simulated time at that update.
    public var wallUpdated: Instant
    public var simulatedAtUpdate: Instant
    /// False once the run has ended or was stopped.
    public var running: Bool

    public init(
        wallStart: Instant, simulatedStart: Instant, speed: Double?, wallUpdated: Instant, simulatedAtUpdate: Instant,
        running: Bool
    ) {
        self.wallStart = wallStart
        self.simulatedStart = simulatedStart
        self.speed = speed
        self.wallUpdated = wallUpdated
        self.simulatedAtUpdate = simulatedAtUpdate
        self.running = running
    }

    /// The fastest pace a simulation runs at (`rollout simulate --speed` takes up to this). A store's record with a
    /// faster one is refused when written and not followed when read: no simulation of rollout's wrote it.
    public static let maximumSpeed: Double = 1_000_000

    /// Whether `speed` is one a simulation runs at: none (as fast as it can), 0 (paused), or a pace up to
    /// `maximumSpeed`.
    public var hasValidSpeed: Bool { speed.map { $0.isFinite && $0 >= 0 && $0 <= Self.maximumSpeed } ?? true }

    /// Why a record with `speed` is not written.
    public static func speedRefusal(_ speed: Double?) -> SimulationSpeedOutOfRange { SimulationSpeedOutOfRange(speed: speed) }

    /// The simulated time at wall time `wall`.
    public func simulatedTime(atWall wall: Instant, staleAfter: Instant.Duration = .seconds(Int64(5))) -> Instant {
        let elapsed = max(0, (wall - wallUpdated).microseconds)
        guard running else { return simulatedAtUpdate + Instant.Duration(microseconds: elapsed) }
        let fast = min(elapsed, staleAfter.microseconds)
        let slow = elapsed - fast
        let scaled = Int64((Double(fast) * (speed ?? 0)).rounded())
        return simulatedAtUpdate + Instant.Duration(microseconds: scaled + slow)
    }
}

/// A simulation clock record whose pace no simulation runs at (above `SimulationClockRecord.maximumSpeed`).
public struct SimulationSpeedOutOfRange: Error, Sendable, Equatable, CustomStringConvertible {
    public var speed: Double?
    public var description: String {
        "a simulation's speed is at most \(Int(SimulationClockRecord.maximumSpeed))x, not \(speed.map { "\($0)" } ?? "none")x: the clock is not written"
    }
}

/// Telemetry time for a store: the wall clock, or a simulation's time while it is alive.
///
/// People and security never use this (TOTP windows, lockouts, TTLs and audit timestamps run on the wall
/// clock); it only places "now" among a simulation's own events. A simulation is alive while its heartbeat
/// (the record's `wallUpdated`, written about twice a second) is at most `heartbeatTimeout` old; once it ended
/// or went silent, readers stop following it: time is frozen at its last simulated instant and the assessment
/// says so (HOLD).
public struct TelemetryTimeline: Hashable, Sendable {
    public static let heartbeatTimeout = Instant.Duration.seconds(Int64(5))
    /// How far ahead of a reader's wall clock a heartbeat may be (the writer's clock a little ahead) and still be
    /// followed. A heartbeat further ahead was written by no simulation that is running now: followed, it kept a
    /// forged clock "live" for as long as it was ahead.
    public static let heartbeatSkew = Instant.Duration.seconds(Int64(2))
    public var record: SimulationClockRecord?

    /// A record with a pace no simulation runs at (`SimulationClockRecord.hasValidSpeed`) is not followed: wall time.
    public init(record: SimulationClockRecord?) { self.record = record.flatMap { $0.hasValidSpeed ? $0 : nil } }

    /// Telemetry time and its source at wall time `wall`.
    ///
    /// A heartbeat from more than `heartbeatSkew` in the future is not a live simulation's: the simulation is
    /// taken as stopped and wall time is used.
    public func now(atWall wall: Instant) -> (now: Instant, source: TelemetryTimeSource) {
        guard let r = record, r.wallUpdated - wall <= Self.heartbeatSkew else { return (wall, .wall) }
        if !r.running { return (r.simulatedAtUpdate, .finishedSimulation(endedAt: r.wallUpdated)) }
        if wall - r.wallUpdated > Self.heartbeatTimeout {
            return (r.simulatedAtUpdate, .lostSimulation(lastHeartbeat: r.wallUpdated))
        }
        return (r.simulatedTime(atWall: wall, staleAfter: Self.heartbeatTimeout), .liveSimulation)
    }

    /// A wall-clock instant (a version's publish time) placed on telemetry time: before the simulation began
    /// at the wall's pace from its start, during it along the line from its start to its last heartbeat (its
    /// pace), after it frozen at its end. Without a simulation it is the instant itself.
    public func telemetryTime(ofWall t: Instant) -> Instant {
        guard let r = record else { return t }
        if t <= r.wallStart { return r.simulatedStart - (r.wallStart - t) }
        if t >= r.wallUpdated { return r.running ? r.simulatedAtUpdate + (t - r.wallUpdated) : r.simulatedAtUpdate }
        let span = Double((r.wallUpdated - r.wallStart).microseconds)
        let simulated = Double((r.simulatedAtUpdate - r.simulatedStart).microseconds)
        let share = Double((t - r.wallStart).microseconds) / span
        return r.simulatedStart + Instant.Duration(microseconds: Int64((simulated * share).rounded()))
    }
}
