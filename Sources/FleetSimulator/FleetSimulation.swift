import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// A fleet of simulated devices running the codelab's client flow against a config store, in simulated time.
///
/// Each device starts with the config of the start cached, launches the app on its own daily curve, fetches
/// Remote Config on launch when its last fetch is older than the fetch interval (devices with real-time updates
/// also whenever a newer version exists, and within seconds of a publish while the app runs), and logs a
/// session. The App Check provider chain then runs as the codelab builds it: the
/// debug provider on simulators, DeviceCheck below iOS 14, and otherwise the custom provider, which reads
/// `AppAttestEnabled`: off means "App Attest is disabled" (no event), no hardware support means "unavailable"
/// (no event), on means a token: the first one attests a real P-256 key through Apple (modelled: capacity,
/// background failures) and the real App Check exchange, later ones are assertions; each attempt logs
/// `AppAttestSuccess` or `AppAttestFailure`. Every event and crash carries the cohort from `AppAttestCohort`.
///
/// Deterministic: one agenda ordered by (time, sequence), one seeded random stream per device, and nothing
/// read from the wall clock. The same scenario, options and config store give the same events in the same
/// order (see `FleetStatistics.eventDigest`). `advance(to:)` and `step()` may be called from a background
/// thread while other threads read `clock`, `statistics()` and `drainNotes()`.
public final class FleetSimulation: @unchecked Sendable {
    public let scenario: Scenario
    public let options: FleetOptions
    /// Simulated time; the console of the demo mode uses it as its clock.
    public let clock: SimulationClock
    public var start: Instant { options.start }
    public var end: Instant { options.start + options.duration }
    public var now: Instant { clock.now() }

    // The model.
    var parameters: FleetParameters
    var devices: [Device] = []
    var agenda = EventQueue()
    /// Devices in a session with real-time updates (notified of a publish), and how many others are in one.
    var inSessionRealtime: [Int32] = []
    var devicesInSessionOther = 0
    var clients: [Int32: SimulatedAppCheckClient] = [:]
    var apple: AppleAttestationService
    let config: FleetConfigView
    var announcedVersion = 0
    let osMajor: [UInt8]
    let osMinor: [UInt8]
    var appVersions: [String]
    var appCrashRates: [Double]
    var appIdentities: [AppIdentity]
    var newestRelease: (index: Int, time: Int64, adoptionPerHour: Double)?

    // The real App Check exchange (in process, or a server over HTTP) and the demo certificate authority standing
    // in for Apple's.
    let exchange: any AppAttestExchanging
    let authority: DemoCertificateAuthority
    let firebaseAppID: String
    let baseIdentity: AppIdentity
    let attestEnvironment: AppAttestEnvironment
    /// The device clock a credential certificate starts at: simulated time in process, the wall clock for a server
    /// (which checks certificates against its own clock).
    let certificateTime: @Sendable (Instant) -> Instant
    static let appIdentity = AppIdentity(teamId: "ROLLOUTSIM", bundleId: "dev.rollout.fleet")
    static let firebaseAppID = "1:000000000000:ios:f1ee7500000000000000"

    let writePath: WritePath
    let sink: any FleetTelemetrySink

    // Run state.
    let runLock = Lock()
    var finished = false
    var stats: FleetStatistics
    var digest = EventDigest()
    var sinceShare = 0
    let shareLock = Lock()
    var shared: FleetStatistics
    var notes: [SimulationNote] = []
    /// The newest App Check token a device received: not part of the statistics, which are the same for the same
    /// seed, while a token is signed by the exchange's own key.
    var newestToken: String?

    static let pollInterval: Int64 = 5_000_000
    static let refreshMargin: Int64 = 300_000_000

    /// Sets up the fleet, the exchange and the agenda; nothing happens until `advance` or `step`.
    ///
    /// - Parameters:
    ///   - config: where the fleet fetches from.
    ///   - sink: where events go, in time order.
    ///   - writePath: where the scenario's changes are published, as `simulator`: the commands give the store's
    ///     one write path with every policy (guardrail, step-up), like any operator's. Without one (in-memory
    ///     tests of the model) a policy-free path on `config` and the simulated clock is used.
    ///   - exchange: where devices get App Check tokens: the default is an exchange in this process with its own
    ///     demo authority (deterministic); `.remote` a server such as `rollout serve` (not deterministic: its
    ///     answers and timing are the server's).
    public init(
        scenario: Scenario, options: FleetOptions, config: any ConfigStore, sink: any FleetTelemetrySink,
        writePath: WritePath? = nil, exchange remote: FleetExchange = .inProcess
    ) throws {
        precondition(options.devices > 0 && options.devices <= Int(Int32.max), "a fleet has 1 to 2^31 devices")
        self.scenario = scenario
        self.options = options
        self.sink = sink
        parameters = scenario.parameters
        clock = SimulationClock(options.start)
        self.config = FleetConfigView(store: config, names: options.names)
        let t0 = options.start.microseconds
        apple = AppleAttestationService(capacity: parameters.appleCapacity, at: t0)

        osMajor = parameters.osVersions.map { UInt8($0.value.split(separator: ".")[0])! }
        osMinor = parameters.osVersions.map { UInt8($0.value.split(separator: ".")[1])! }
        appVersions = parameters.appVersions.map(\.value)
        appCrashRates = appVersions.map { _ in 0 }
        let identity: AppIdentity
        switch remote {
        case .inProcess:
            let state = InMemoryAppCheckState()
            authority = try DemoCertificateAuthority.loadOrCreate(in: state)
            firebaseAppID = FleetSimulation.firebaseAppID
            identity = FleetSimulation.appIdentity
            attestEnvironment = .production
            exchange = try AppCheckExchange(
                configuration: AppCheckConfiguration(
                    project: AppCheckProject(number: "000000000000", id: "rollout-fleet"),
                    apps: [
                        AppAttestApp(
                            appId: FleetSimulation.firebaseAppID, identity: FleetSimulation.appIdentity,
                            environment: .production, trustsDemoRoot: true, tokenTTL: parameters.tokenTTL)
                    ]),
                state: state, clock: clock)
            certificateTime = { $0 }
        case .remote(let server):
            authority = server.authority
            firebaseAppID = server.appId
            identity = server.identity
            attestEnvironment = server.environment
            exchange = server.exchange
            let wall = server.wall
            certificateTime = { _ in wall.now() }
        }
        baseIdentity = identity
        appIdentities = appVersions.map { _ in identity }

        let seed = scenario.rolloutSeed
        self.writePath = writePath ?? WritePath(store: config, clock: clock, names: options.names, newSeed: { seed })
        stats = FleetStatistics(now: options.start)
        stats.devices = options.devices
        shared = stats

        announcedVersion = try self.config.newest(at: t0)
        stats.templateVersion = announcedVersion
        for (i, item) in scenario.schedule.enumerated() {
            agenda.push(time: t0 + item.offset.microseconds, payload: Self.pack(Int32(i), .scenario, 0))
        }
        agenda.push(time: t0, payload: Self.pack(0, .poll, 0))
        createDevices()
        share()
    }

    // MARK: Driving

    /// Processes everything due up to `target` (at most `end`) and moves the clock there, or stops early once
    /// `yield` says so: asked between instants only (every `yieldEvery` of them), so where the clock stops every
    /// action due by it has run. The runner's wall-time budget for a step; the simulation never reads wall time.
    public func advance(to target: Instant, yieldingWhen yield: () -> Bool = { false }) throws {
        try runLock.withLock {
            let limit = min(target, end).microseconds
            var instants = 0
            var interrupted = false
            var reached = clock.now().microseconds
            while let next = agenda.nextTime, next <= limit {
                if next > reached {
                    instants += 1
                    if instants % Self.yieldEvery == 0, yield() {
                        interrupted = true
                        break
                    }
                    reached = next
                }
                try process(agenda.pop()!)
            }
            if !interrupted, limit > clock.now().microseconds { clock.set(Instant(microseconds: limit)) }
            try sink.reached(clock.now())
            if !interrupted, limit >= end.microseconds { try finish() }
            share()
        }
    }

    /// How many instants `advance` processes between two questions to its `yield`.
    static let yieldEvery = 16

    /// Processes the next action on the agenda (the clock moves to its time); false when the run is over.
    @discardableResult
    public func step() throws -> Bool {
        try runLock.withLock {
            guard !finished else { return false }
            guard let next = agenda.nextTime, next <= end.microseconds else {
                clock.set(end)
                try finish()
                share()
                return false
            }
            try process(agenda.pop()!)
            share()
            return true
        }
    }

    /// Runs to the end.
    public func run() throws { try advance(to: end) }

    /// Whether simulated time has reached the end.
    public var isFinished: Bool { runLock.withLock { finished } }

    /// Lands buffered events in the sink now.
    public func flush() throws { try runLock.withLock { try sink.flush(at: clock.now()) } }

    /// The totals as of the last processed action (cheap; any thread).
    /// The newest App Check token a device received (a JWT; against a server, one `rollout token verify` checks).
    public func lastToken() -> String? { shareLock.withLock { newestToken } }

    public func statistics() -> FleetStatistics { shareLock.withLock { shared } }

    /// Notes since the last call, oldest first (any thread).
    public func drainNotes() -> [SimulationNote] {
        shareLock.withLock {
            defer { notes.removeAll() }
            return notes
        }
    }

    /// Every device's state (for tests; copies the whole fleet).
    public func deviceSnapshots() -> [DeviceSnapshot] {
        runLock.withLock {
            devices.indices.map { i in
                let d = devices[i]
                return DeviceSnapshot(
                    index: i, installationID: installationID(i), osVersion: osVersion(d),
                    appVersion: appVersions[Int(d.app)], provider: provider(d), isSimulator: d.has(.simulator),
                    supportsAppAttest: !d.has(.unsupported), realtime: d.has(.realtime), isEligible: eligible(d),
                    fetchedVersion: Int(d.fetchedVersion), flag: d.has(.flagOn), cohort: d.cohort,
                    hasAttested: clients[Int32(i)]?.hasAttested ?? false, sessions: Int(d.session))
            }
        }
    }

    func finish() throws {
        guard !finished else { return }
        finished = true
        try sink.flush(at: end)
    }

    /// Copies the totals for readers on other threads.
    func share() {
        stats.now = clock.now()
        stats.eventDigest = digest.hex
        stats.events = digest.count
        stats.devicesInSession = inSessionRealtime.count + devicesInSessionOther
        let copy = stats
        shareLock.withLock { shared = copy }
        sinceShare = 0
    }

    /// A note from outside the model (auto-kill in the sink), at the current simulated time.
    public func noteExternal(_ text: String) { note(text, at: clock.now().microseconds) }

    func note(_ text: String, at t: Int64) {
        let n = SimulationNote(time: Instant(microseconds: t), text: text)
        shareLock.withLock { notes.append(n) }
    }

    // MARK: The agenda

    enum Action: UInt8 {
        case launch = 0
        case sessionEnd, crashEnd, nonfatalCrash, tokenRequest, realtimeFetch, intervalFetch
        /// Global: check the store for a new version and notify real-time listeners.
        case poll
        /// Global: the scenario's action with this index.
        case scenario
    }

    @inline(__always)
    static func pack(_ device: Int32, _ action: Action, _ tag: UInt32) -> UInt64 {
        UInt64(UInt32(bitPattern: device)) << 32 | UInt64(action.rawValue) << 24 | UInt64(tag & 0xFF_FFFF)
    }

    func schedule(_ i: Int, _ action: Action, at t: Int64) {
        agenda.push(time: t, payload: Self.pack(Int32(i), action, devices[i].session))
    }

    /// Schedules `action` during the device's current session, if the session lasts that long.
    func scheduleInSession(_ i: Int, _ action: Action, at t: Int64) {
        if t < devices[i].sessionEnd { schedule(i, action, at: t) }
    }

    /// Asks for a token at `t` in this session, unless a request is already pending by then: the app makes one
    /// `getToken` call at a time.
    func requestTokenLater(_ i: Int, at t: Int64) {
        let pending = devices[i].requestAt
        if pending > 0, pending <= t { return }
        guard t < devices[i].sessionEnd else { return }
        devices[i].requestAt = t
        schedule(i, .tokenRequest, at: t)
    }

    func process(_ e: EventQueue.Entry) throws {
        let t = e.time
        clock.set(Instant(microseconds: t))
        let index = Int(e.payload >> 32)
        let action = Action(rawValue: UInt8((e.payload >> 24) & 0xFF))!
        let tag = UInt32(e.payload & 0xFF_FFFF)
        sinceShare += 1
        switch action {
        case .poll: try poll(t)
        case .scenario: try perform(scenario.schedule[index], at: t)
        case .launch: try launch(index, at: t)
        default:
            // Anything but a launch belongs to one session; a stale one (its session is over) does nothing.
            guard devices[index].has(.inSession), devices[index].session & 0xFF_FFFF == tag else { return }
            switch action {
            case .sessionEnd: try endSession(index, at: t, crashed: false)
            case .crashEnd: try endSession(index, at: t, crashed: true)
            case .nonfatalCrash:
                stats.nonfatalCrashes += 1
                try emit(.crash(fatal: false), index, at: t)
            case .tokenRequest:
                // Only the device's pending request runs; one it replaced by an earlier one does nothing.
                guard devices[index].requestAt == t else { return }
                devices[index].requestAt = 0
                try requestToken(index, at: t)
            case .realtimeFetch: try fetchInSession(index, at: t)
            case .intervalFetch:
                if t - devices[index].lastFetch >= parameters.fetchInterval.microseconds {
                    try fetchInSession(index, at: t)
                }
                let next = devices[index].lastFetch + max(parameters.fetchInterval.microseconds, 1_000_000)
                scheduleInSession(index, .intervalFetch, at: next)
            default: break
            }
        }
        if sinceShare >= 4096 { share() }
    }
}
