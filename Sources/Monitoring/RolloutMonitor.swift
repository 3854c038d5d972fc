import Glibc
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// The one assessment of a rollout: a function of the store's contents and the wall-clock instant.
///
/// It reads the config store's newest version and its rollout, when the rollout started, the guardrail
/// settings, the telemetry since the start, the store's simulation heartbeat (which decides telemetry time) and, on
/// a Firebase project, App Check enforcement (`enforcement`, a port the app layer implements), and judges them with
/// `TelemetrySnapshot.assess`. `rollout status`, `rollout telemetry`, `rollout watch`, the
/// console, the guardrail policy of the write path and auto-kill all call `status()`, so the same store at the
/// same instant gives the same level, reasons and counts everywhere (the guardrail's monitor alone reads no App
/// Check enforcement: see `enforcement`).
///
/// It knows the store only through the core's ports (`MonitoredStore`: config versions, telemetry counters,
/// guardrail settings, the simulation heartbeat, the start cache), so any store that implements them (the
/// SQLite file, PostgreSQL) is assessed by the same code.
///
/// One monitor lives as long as its reader (a console session keeps one), so the sequential statistics are
/// folded once per settled minute however often the screen refreshes.
public final class RolloutMonitor {
    public let store: any MonitoredStore
    public let config: any ConfigStore
    public let telemetry: any TelemetryCounters
    private let guardrails: any GuardrailSettingsStore
    private let heartbeat: any SimulationHeartbeat
    private let startStore: (any RolloutStartCache)?
    /// The wall clock.
    public let clock: Clock
    /// Telemetry time given by the caller (an in-process simulation's own clock); nil: from the store.
    public let telemetryClock: (any Clock)?
    public let names: RolloutNames

    /// App Check enforcement of the Firebase project the templates live in, read once per assessment (nil: the
    /// store has no App Check project). The app layer sets it on the monitors of status, watch, follow, plan run
    /// and the console, never on the write path's guardrail: the finding it adds is remedied by an increase to
    /// 100%, which the guardrail would otherwise refuse, and a kill must not wait on the App Check API.
    public var enforcement: (any EnforcementReader)?

    /// The start found for the newest version seen, so history is scanned once per new version.
    private var startCache: (version: Int, start: Instant?)?

    /// `config` is the file's own config store unless given (a Firebase store keeps its templates elsewhere).
    public init(
        store: any MonitoredStore, config: (any ConfigStore)? = nil, clock: Clock, telemetryClock: (any Clock)? = nil,
        names: RolloutNames = .standard
    ) throws {
        self.store = store
        self.clock = clock
        self.telemetryClock = telemetryClock
        self.names = names
        self.config = try config ?? store.monitoredConfig()
        telemetry = try store.telemetryCounters()
        guardrails = try store.guardrailSettingsStore()
        heartbeat = try store.simulationHeartbeat()
        startStore = try store.rolloutStartCache()
    }

    /// Everything the screen and `status` show, at one instant.
    public struct Status: Sendable {
        /// Telemetry time: the instant the figures are as of.
        public var now: Instant
        /// The wall-clock instant of the assessment.
        public var wallNow: Instant
        public var timeSource: TelemetryTimeSource
        public var current: StoredTemplate
        public var plan: RolloutPlan?
        /// When exposure last went from none to some (the first version of the current run of versions where the
        /// rollout was rolling or killed), in telemetry time; nil when it has not started.
        public var startedAt: Instant?
        public var settings: GuardrailSettings
        public var snapshot: TelemetrySnapshot
        public var assessment: Assessment

        /// The exposed percentage (0 when killed or not started).
        public var exposed: MicroPercent {
            guard let plan, plan.state == .rolling else { return .zero }
            return plan.percentage
        }
    }

    /// The telemetry timeline of this store (its simulation heartbeat, if any).
    public func timeline() throws -> TelemetryTimeline {
        try heartbeat.timeline()
    }

    /// A what-if: the assessment of the same store with a different start or exposed percentage. Shown only
    /// labelled as hypothetical; never used by a policy.
    public struct Hypothesis: Hashable, Sendable {
        public var since: Instant?
        public var exposed: MicroPercent?
        public init(since: Instant? = nil, exposed: MicroPercent? = nil) {
            self.since = since
            self.exposed = exposed
        }
    }

    public func status(_ hypothesis: Hypothesis? = nil) throws -> Status {
        let wall = clock.now()
        // Outside the store's read: a call to Google's API, bounded by the reader.
        let enforcement = self.enforcement?.reading(at: wall)
        return try store.reading {
            let timeline = try self.timeline()
            var (now, source) = timeline.now(atWall: wall)
            if let telemetryClock {
                now = telemetryClock.now()
                source = .liveSimulation
            }
            let current = try config.current()
            let plan = try? RolloutPlan.locate(in: current.template, names: names)
            let start = try hypothesis?.since ?? startedAt(current: current, timeline: timeline, now: now)
            let settings = try guardrails.guardrailSettings()
            // Without a running rollout the figures count from the current version (when it stopped, or the store
            // began): a fixed instant per version. "Now" moved with every refresh, so each one folded again, and
            // whether the minute in progress had events yet decided the verdict (issue 35: HOLD and OK in turns,
            // every simulated minute, after a rollback to 0%).
            let since = start ?? idleSince(current: current, timeline: timeline, now: now)
            let snapshot = try telemetry.snapshot(settings.watchConfiguration(since: since), now: now)
            let exposed =
                hypothesis?.exposed?.value ?? plan.flatMap { $0.state == .rolling ? $0.percentage.value : nil } ?? 0
            var context = settings.context(
                exposedMicroPercent: exposed, newestTemplateVersion: Int64(current.info.number), timeSource: source)
            context.started = start != nil
            context.servedOutsideRollout = plan.flatMap { servedOutsideRollout(current, plan: $0) }
            context.enforcement = enforcement
            // Sources answer on the wall clock (their pulls are real requests), whatever telemetry time is.
            context.sourceSilences = try store.sourceSilences(at: wall)
            // Staleness on a live simulation is judged against its pace: the simulation lands its data before each
            // heartbeat, and readers extrapolate its clock from the last heartbeat for up to `heartbeatTimeout` of
            // wall time at its pace. That extrapolation is not the data's age: at 3600x a machine that stalls for
            // a second is an hour of simulated time, and the fixed 10 minutes called the data stale with a bell.
            // Up to the console's fastest pace (`stalenessPaceLimit`): beyond it, five seconds of wall time were
            // hours of simulated time, and a record claiming such a pace turned data of any age into fresh data.
            if case .liveSimulation = source, let pace = timeline.record?.speed, pace > 1 {
                let bounded = min(pace, Self.stalenessPaceLimit)
                let lag = Int64(bounded * Double(TelemetryTimeline.heartbeatTimeout.microseconds))
                context.staleAfter = context.staleAfter + Instant.Duration(microseconds: lag)
            }
            return Status(
                now: now, wallNow: wall, timeSource: source, current: current, plan: plan, startedAt: start,
                settings: settings, snapshot: snapshot, assessment: snapshot.assess(context))
        }
    }

    /// The fastest pace whose heartbeat lag widens the staleness limit: the console's fastest step (3600x, five
    /// hours of simulated time per heartbeat timeout).
    public static let stalenessPaceLimit = 3600.0

    /// What the guardrail policy judges a proposal on.
    public func guardrailInput() throws -> GuardrailInput {
        let s = try status()
        return GuardrailInput(s.assessment, snapshot: s.snapshot, budget: s.settings.budget)
    }

    /// The guardrail as a write policy reading this monitor.
    public func guardrailPolicy() -> TelemetryGuardrail {
        nonisolated(unsafe) let monitor = self
        return TelemetryGuardrail(input: { _ in try monitor.guardrailInput() })
    }

    /// The actor of auto-kill publishes in the audit log.
    public static let autoKillActor = "guardrail (auto-kill)"
    public static let autoKillOrigin = "ROLLOUT_GUARDRAIL"

    /// With auto-kill on, a HALT verdict while the rollout is exposing anyone publishes a kill through `path`
    /// (reason `guardrail: ...`); returns what was done, or nil when nothing was needed.
    ///
    /// Safe with any number of watchers: the kill is a compare-and-swap on the version the HALT was judged on,
    /// so of several processes seeing the same HALT exactly one publishes; the others lose the race, and on
    /// their next look the rollout is killed already.
    public func autoKillIfHalted(using path: WritePath, actor: String = RolloutMonitor.autoKillActor) throws
        -> WritePath.Outcome?
    {
        try autoKillIfHalted(status(), using: path, actor: actor)
    }

    /// The same on a status already computed (so that the caller shows and acts on one assessment).
    public func autoKillIfHalted(_ s: Status, using path: WritePath, actor: String = RolloutMonitor.autoKillActor) throws
        -> WritePath.Outcome?
    {
        guard s.settings.autoKill, s.assessment.verdict.level == .halt, s.plan?.state == .rolling else { return nil }
        var request = WritePath.Request(
            intent: .rollout(.kill), actor: actor, reason: "guardrail: \(s.assessment.verdict.reason)",
            origin: Self.autoKillOrigin)
        request.basedOnETag = s.current.etag
        do {
            return try path.execute(request)
        } catch WritePath.Failure.conflict {
            // Someone published meanwhile (another watcher's kill); the next look decides on the newer version.
            return nil
        }
    }

    /// What serves the flag past a kill in `current`, described (nil: nothing but the rollout), once per version.
    private var outsideCache: (version: Int, served: String?)?

    private func servedOutsideRollout(_ current: StoredTemplate, plan: RolloutPlan) -> String? {
        if let outsideCache, outsideCache.version == current.info.number { return outsideCache.served }
        let past = RolloutPlan.servedPastKill(current.template, names: plan.names, seed: plan.seed)
        let served = past.possible > .zero ? past.description : nil
        outsideCache = (current.info.number, served)
        return served
    }

    /// The instant a rollout that is not running counts its figures from: its version's publish time on telemetry
    /// time, computed once per version.
    private var idleCache: (version: Int, since: Instant)?

    private func idleSince(current: StoredTemplate, timeline: TelemetryTimeline, now: Instant) -> Instant {
        if let idleCache, idleCache.version == current.info.number { return idleCache.since }
        let since = min(timeline.telemetryTime(ofWall: current.info.updateTime), now)
        idleCache = (current.info.number, since)
        return since
    }

    private func startedAt(current: StoredTemplate, timeline: TelemetryTimeline, now: Instant) throws -> Instant? {
        if let cached = startCache, cached.version == current.info.number { return cached.start }
        if startCache == nil {
            // A start is never later than the "now" it was computed at: a stored one after this "now" is not the
            // history's (a cache written by another clock, or a forged row), so the history is walked again.
            startCache = try loadPersistedStart().flatMap { cached in cached.start.map { $0 <= now } ?? true ? cached : nil }
        }
        if let cached = startCache, cached.version == current.info.number { return cached.start }
        // Walk back from the newest version while the rollout was running; stop at a version where it was not,
        // or at the version already scanned, whose start carries over.
        var start: Instant?
        var before: Int? = nil
        var walked = 0
        // Pages grow from 4: a reader usually finds the cached version one or two back, and each row read
        // carries its whole template.
        var limit = 4
        scan: while true {
            let page = try config.versions(limit: limit, before: before)
            limit = min(100, limit * 4)
            if page.isEmpty { break }
            for info in page {
                walked += 1
                if let cached = startCache, info.number == cached.version {
                    if cached.start != nil { start = cached.start }
                    break scan
                }
                let template = info.number == current.info.number ? current.template : try config.version(info.number).template
                guard let plan = try? RolloutPlan.locate(in: template, names: names), plan.state != .notStarted else { break scan }
                // Versions carry wall time; telemetry of a simulation carries simulated time. The timeline
                // interpolates a simulation's past at its average pace, which puts a version published after a
                // slow stretch (the fleet's start-up) seconds ahead of the simulated instant it was published at:
                // a start in the future. Never later than now.
                start = min(timeline.telemetryTime(ofWall: info.updateTime), now)
            }
            before = page.last!.number
        }
        startCache = (current.info.number, start)
        persistStart(version: current.info.number, start: start, walked: walked)
        return start
    }

    /// The most versions a walk reads before its result is kept at once, in a transaction of its own; a shorter
    /// walk's result rides on the process's next write, if any. A version read costs about 40 µs, a transaction of
    /// its own (its seal and two syncs) about 0.6 ms: a `rollout nudge` spent an eighth of its time caching the start
    /// of the version it was about to replace. A reader that never writes leaves the next one a walk of at most
    /// this many versions more.
    public static let walkKeptWithNextWrite = 16

    // The start is derived from the version history; the store keeps it (`RolloutStartCache`) so that a new
    // reader (every `rollout status`, every write) walks only the versions published since the last one.

    private func loadPersistedStart() throws -> (version: Int, start: Instant?)? {
        try startStore?.cachedRolloutStart()
    }

    /// Best effort: a busy or read-only store just means the next reader walks a little more history.
    private func persistStart(version: Int, start: Instant?, walked: Int) {
        guard !store.isReadOnly else { return }
        if walked <= Self.walkKeptWithNextWrite {
            startStore?.cacheRolloutStartWithNextWrite(version: version, start: start)
        } else {
            try? startStore?.cacheRolloutStart(version: version, start: start)
        }
    }
}

/// App Check enforcement as the monitor can know it: a port the app layer implements on a Firebase project's App
/// Check API (`AppCheckEnforcementReader`), bounded and cached there so an assessment never waits long on it.
public protocol EnforcementReader: AnyObject, Sendable {
    /// The modes as last read at or before `wall`, with why the latest read failed; never throws.
    func reading(at wall: Instant) -> EnforcementReading
}
