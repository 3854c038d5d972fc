import AppCheck
import FoundationEssentials
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
    private var parameters: FleetParameters
    private var devices: [Device] = []
    private var agenda = EventQueue()
    /// Devices in a session with real-time updates (notified of a publish), and how many others are in one.
    private var inSessionRealtime: [Int32] = []
    private var devicesInSessionOther = 0
    private var clients: [Int32: SimulatedAppCheckClient] = [:]
    private var apple: AppleAttestationService
    private let config: FleetConfigView
    private var announcedVersion = 0
    private let osMajor: [UInt8]
    private let osMinor: [UInt8]
    private var appVersions: [String]
    private var appCrashRates: [Double]
    private var appIdentities: [AppIdentity]
    private var newestRelease: (index: Int, time: Int64, adoptionPerHour: Double)?

    // The real App Check exchange (in process, or a server over HTTP) and the demo certificate authority standing
    // in for Apple's.
    private let exchange: any AppAttestExchanging
    private let authority: DemoCertificateAuthority
    private let firebaseAppID: String
    private let baseIdentity: AppIdentity
    private let attestEnvironment: AppAttestEnvironment
    /// The device clock a credential certificate starts at: simulated time in process, the wall clock for a server
    /// (which checks certificates against its own clock).
    private let certificateTime: @Sendable (Instant) -> Instant
    static let appIdentity = AppIdentity(teamId: "ROLLOUTSIM", bundleId: "dev.rollout.fleet")
    static let firebaseAppID = "1:000000000000:ios:f1ee7500000000000000"

    private let writePath: WritePath
    private let sink: any FleetTelemetrySink

    // Run state.
    private let runLock = Lock()
    private var finished = false
    private var stats: FleetStatistics
    private var digest = EventDigest()
    private var sinceShare = 0
    private let shareLock = Lock()
    private var shared: FleetStatistics
    private var notes: [SimulationNote] = []
    /// The newest App Check token a device received: not part of the statistics, which are the same for the same
    /// seed, while a token is signed by the exchange's own key.
    private var newestToken: String?

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

    /// Processes everything due up to `target` (at most `end`) and moves the clock there.
    public func advance(to target: Instant) throws {
        try runLock.withLock {
            let limit = min(target, end).microseconds
            while let next = agenda.nextTime, next <= limit {
                try process(agenda.pop()!)
            }
            if limit > clock.now().microseconds { clock.set(Instant(microseconds: limit)) }
            try sink.reached(clock.now())
            if limit >= end.microseconds { try finish() }
            share()
        }
    }

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

    private func finish() throws {
        guard !finished else { return }
        finished = true
        try sink.flush(at: end)
    }

    /// Copies the totals for readers on other threads.
    private func share() {
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

    private func note(_ text: String, at t: Int64) {
        let n = SimulationNote(time: Instant(microseconds: t), text: text)
        shareLock.withLock { notes.append(n) }
    }

    // MARK: Devices

    private func createDevices() {
        let p = parameters
        let osWeights = p.osVersions.map(\.weight)
        let appWeights = p.appVersions.map(\.weight)
        let offsetWeights = p.utcOffsets.map(\.weight)
        let t0 = options.start.microseconds
        devices.reserveCapacity(options.devices)
        agenda.reserve(options.devices + scenario.schedule.count + 64)
        for i in 0..<options.devices {
            var rng = SimulationRandom(seed: options.seed, stream: 1, index: UInt64(i))
            var d = Device(rng: rng)
            d.os = UInt8(rng.pick(weights: osWeights))
            d.app = UInt8(rng.pick(weights: appWeights))
            d.utcOffset = Int8(p.utcOffsets[rng.pick(weights: offsetWeights)].value)
            if rng.chance(p.simulators) { d.set(.simulator) }
            if rng.chance(p.attestUnsupported) { d.set(.unsupported) }
            if rng.chance(p.realtime) { d.set(.realtime) }
            d.sessionRate = Float(0.25 + 1.5 * rng.unit())
            // The installed base has the config of the start cached from some launch before it: at most the fetch
            // interval plus a typical gap between launches ago.
            let gap = 86_400_000_000 / (p.sessionsPerDay * Double(d.sessionRate))
            d.lastFetch = t0 - Int64(rng.unit() * (Double(p.fetchInterval.microseconds) + gap))
            d.rng = rng
            devices.append(d)
            if eligible(d) { stats.eligibleDevices += 1 }
            if announcedVersion > 0 { activate(i, version: announcedVersion) }
            let first = nextLaunch(i, after: t0)
            agenda.push(time: first, payload: Self.pack(Int32(i), .launch, 0))
        }
    }

    private func installationID(_ i: Int) -> String { InstallationID.make(seed: options.seed, index: i) }

    private func osVersion(_ d: Device) -> String {
        "\(osMajor[Int(d.os)]).\(Int(osMinor[Int(d.os)]) + Int(d.osUpdates))"
    }

    private func provider(_ d: Device) -> AttestationProvider {
        if d.has(.simulator) { return .debug }
        return osMajor[Int(d.os)] < 14 ? .deviceCheck : .appAttest
    }

    private func eligible(_ d: Device) -> Bool { provider(d) == .appAttest && !d.has(.unsupported) }

    /// The next launch after `t` on the device's daily curve (thinning a Poisson process).
    private func nextLaunch(_ i: Int, after t: Int64) -> Int64 {
        let peak = DailyCurve.maximum
        let perDay = parameters.sessionsPerDay * Double(devices[i].sessionRate) * peak
        let meanGap = 86_400_000_000 / perDay
        var x = t
        let offset = Int64(devices[i].utcOffset) * 3_600_000_000
        for _ in 0..<10_000 {
            x += Int64(devices[i].rng.exponential(mean: meanGap)) + 1
            if devices[i].rng.unit() * peak < DailyCurve.level(atMicros: x + offset) { break }
        }
        return x
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

    private func schedule(_ i: Int, _ action: Action, at t: Int64) {
        agenda.push(time: t, payload: Self.pack(Int32(i), action, devices[i].session))
    }

    /// Schedules `action` during the device's current session, if the session lasts that long.
    private func scheduleInSession(_ i: Int, _ action: Action, at t: Int64) {
        if t < devices[i].sessionEnd { schedule(i, action, at: t) }
    }

    /// Asks for a token at `t` in this session, unless a request is already pending by then: the app makes one
    /// `getToken` call at a time.
    private func requestTokenLater(_ i: Int, at t: Int64) {
        let pending = devices[i].requestAt
        if pending > 0, pending <= t { return }
        guard t < devices[i].sessionEnd else { return }
        devices[i].requestAt = t
        schedule(i, .tokenRequest, at: t)
    }

    private func process(_ e: EventQueue.Entry) throws {
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

    // MARK: Sessions

    private func launch(_ i: Int, at t: Int64) throws {
        let p = parameters
        let previous = devices[i].lastLaunch == .min ? options.start.microseconds : devices[i].lastLaunch
        devices[i].lastLaunch = t
        devices[i].session &+= 1
        let elapsedDays = Double(t - previous) / 86_400_000_000

        if p.osUpgradesPerDay > 0, devices[i].rng.chance(1 - exp(-p.osUpgradesPerDay * elapsedDays)),
            devices[i].osUpdates < 30
        {
            devices[i].osUpdates += 1
            stats.osUpgrades += 1
            if clients[Int32(i)]?.hasAttested == true, devices[i].rng.chance(p.upgradeInvalidatesKey) {
                devices[i].set(.keyInvalid)
            }
        }
        if let release = newestRelease, Int(devices[i].app) != release.index {
            let hours = Double(t - max(release.time, previous)) / 3_600_000_000
            if devices[i].rng.chance(1 - exp(-release.adoptionPerHour * hours)) {
                devices[i].app = UInt8(release.index)
                stats.appUpdates += 1
            }
        }
        // A launch fetches once the cached config is older than the fetch interval; a real-time listener also
        // learns at connect time that a newer version exists, and fetches it regardless of the interval.
        let stale = t - devices[i].lastFetch >= p.fetchInterval.microseconds
        let behind = devices[i].has(.realtime) ? Int32(try config.newest(at: t)) != devices[i].fetchedVersion : false
        if stale || behind {
            _ = try fetch(i, at: t)
        }

        devices[i].set(.inSession)
        if devices[i].has(.realtime) {
            devices[i].realtimeSlot = Int32(inSessionRealtime.count)
            inSessionRealtime.append(Int32(i))
        } else {
            devicesInSessionOther += 1
        }
        stats.sessions += 1
        try emit(.sessionStart, i, at: t)

        let length = max(20_000_000, Int64(devices[i].rng.exponential(mean: Double(p.sessionLength.microseconds))))
        let runsAppAttest = devices[i].has(.flagOn) && eligible(devices[i])
        let crashRate = p.crashRate + (runsAppAttest ? p.exposedCrashRate : 0) + appCrashRates[Int(devices[i].app)]
        if devices[i].rng.chance(crashRate) {
            devices[i].sessionEnd = t + max(1, Int64(devices[i].rng.unit() * Double(length)))
            schedule(i, .crashEnd, at: devices[i].sessionEnd)
        } else {
            devices[i].sessionEnd = t + length
            schedule(i, .sessionEnd, at: devices[i].sessionEnd)
        }
        if devices[i].rng.chance(p.nonfatalRate) {
            let span = Double(devices[i].sessionEnd - t)
            scheduleInSession(i, .nonfatalCrash, at: t + Int64(devices[i].rng.unit() * span))
        }
        if runsAppAttest {
            // The app's first backend call after launch asks App Check for a token.
            requestTokenLater(i, at: t + Int64(devices[i].rng.uniform(0.5, 3) * 1_000_000))
        }
        scheduleInSession(i, .intervalFetch, at: devices[i].lastFetch + max(p.fetchInterval.microseconds, 1_000_000))
    }

    private func endSession(_ i: Int, at t: Int64, crashed: Bool) throws {
        if crashed {
            stats.fatalCrashes += 1
            try emit(.crash(fatal: true), i, at: t)
        }
        devices[i].clear(.inSession)
        devices[i].requestAt = 0
        if devices[i].has(.realtime) {
            let slot = Int(devices[i].realtimeSlot)
            let last = inSessionRealtime.removeLast()
            if slot < inSessionRealtime.count {
                inSessionRealtime[slot] = last
                devices[Int(last)].realtimeSlot = Int32(slot)
            }
            devices[i].realtimeSlot = -1
        } else {
            devicesInSessionOther -= 1
        }
        agenda.push(time: nextLaunch(i, after: t), payload: Self.pack(Int32(i), .launch, 0))
    }

    // MARK: Remote Config

    /// Fetches and activates the newest version; true when the flag turned on.
    private func fetch(_ i: Int, at t: Int64) throws -> Bool {
        let version = try config.newest(at: t)
        stats.templateVersion = max(stats.templateVersion, version)
        let wasOn = devices[i].has(.flagOn)
        if Int32(version) != devices[i].fetchedVersion { activate(i, version: version) }
        devices[i].lastFetch = t
        stats.configFetches += 1
        try emit(.configFetch(templateVersion: Int64(version)), i, at: t)
        return !wasOn && devices[i].has(.flagOn)
    }

    /// Activates `version` (the newest the config view has read): the flag and cohort it gives this device.
    private func activate(_ i: Int, version: Int) {
        let wasOn = devices[i].has(.flagOn)
        let values = config.values(for: installationID(i))
        devices[i].fetchedVersion = Int32(version)
        devices[i].cohort = values.cohort
        if values.flag { devices[i].set(.flagOn) } else { devices[i].clear(.flagOn) }
        if eligible(devices[i]), values.flag != wasOn { stats.exposedDevices += values.flag ? 1 : -1 }
    }

    /// A fetch while the app runs (real-time update or fetch interval): when the flag turns on, the app's next
    /// backend call asks for a token.
    private func fetchInSession(_ i: Int, at t: Int64) throws {
        if try fetch(i, at: t), eligible(devices[i]) {
            let delay = max(1_000_000, Int64(devices[i].rng.exponential(mean: 30_000_000)))
            requestTokenLater(i, at: t + delay)
        }
    }

    /// Checks the store for a new version; real-time listeners in a session fetch it within seconds.
    private func poll(_ t: Int64) throws {
        let version = try config.newest(at: t)
        if version != announcedVersion {
            announcedVersion = version
            stats.templateVersion = max(stats.templateVersion, version)
            for d in inSessionRealtime {
                let i = Int(d)
                let delay = Int64(devices[i].rng.uniform(1, 20) * 1_000_000)
                scheduleInSession(i, .realtimeFetch, at: t + delay)
            }
        }
        if t + Self.pollInterval <= end.microseconds {
            agenda.push(time: t + Self.pollInterval, payload: Self.pack(0, .poll, 0))
        }
    }

    // MARK: App Check

    /// The custom provider's `getToken` for an eligible device with the flag on.
    private func requestToken(_ i: Int, at t: Int64) throws {
        guard devices[i].has(.flagOn), eligible(devices[i]) else { return }
        if devices[i].tokenExpiry - Self.refreshMargin > t { return }
        if devices[i].backoffUntil > t {
            requestTokenLater(i, at: devices[i].backoffUntil)
            return
        }
        stats.tokenRequests += 1
        let key = Int32(i)
        if let client = clients[key], client.hasAttested {
            if devices[i].has(.keyInvalid) {
                // The OS update invalidated the key: the SDK drops it and attests a new one next time.
                devices[i].clear(.keyInvalid)
                clients[key] = nil
                try fail(i, .invalidKey, at: t)
                return
            }
            if let failure = draw(parameters.assertionFailures, i) {
                if failure == .invalidKey { clients[key] = nil }
                try fail(i, failure, at: t)
                return
            }
            try exchangeToken(i, client, at: t)
            return
        }
        guard apple.serve(at: t, capacity: parameters.appleCapacity) else {
            stats.throttled += 1
            try fail(i, .serverUnavailable, at: t)
            return
        }
        if let failure = draw(parameters.attestationFailures, i) {
            if failure == .invalidKey { clients[key] = nil }
            try fail(i, failure, at: t)
            return
        }
        let client: SimulatedAppCheckClient
        if let existing = clients[key] {
            client = existing
        } else {
            let identity = appIdentities[Int(devices[i].app)]
            let started = options.cryptoStopwatch?()
            let attestKey = try SimulatedAppAttestKey(authority: authority, app: identity, environment: attestEnvironment)
            if let started, let stop = options.cryptoStopwatch { stats.cryptoNanoseconds += stop() - started }
            client = SimulatedAppCheckClient(key: attestKey, appId: firebaseAppID)
            clients[key] = client
            stats.keysGenerated += 1
        }
        try exchangeToken(i, client, at: t)
    }

    /// One real exchange: an attestation the first time, an assertion afterwards.
    private func exchangeToken(_ i: Int, _ client: SimulatedAppCheckClient, at t: Int64) throws {
        let attesting = !client.hasAttested
        let started = options.cryptoStopwatch?()
        let result: Result<AppCheckToken, AppCheckClientError>
        do {
            result = .success(try client.token(from: exchange, at: certificateTime(Instant(microseconds: t))))
        } catch {
            result = .failure(error)
        }
        if let started, let stop = options.cryptoStopwatch { stats.cryptoNanoseconds += stop() - started }
        switch result {
        case .success(let token):
            if attesting { stats.attestations += 1 } else { stats.assertions += 1 }
            shareLock.withLock { newestToken = token.token }
            devices[i].tokenExpiry = t + token.ttl.microseconds
            devices[i].backoffLevel = 0
            try emit(.attestationSuccess, i, at: t)
            requestTokenLater(i, at: devices[i].tokenExpiry - Self.refreshMargin)
        case .failure(let error):
            // The SDK keeps its key after a rejection and attests it again next time.
            if case .device = error { throw error }
            try fail(i, .rejected(reason: error.code), at: t)
        }
    }

    /// A background failure of one class, drawn with the given rates (DCError code order), or nil.
    private func draw(_ rates: [Double], _ i: Int) -> AttestationErrorClass? {
        let total = rates.reduce(0, +)
        guard total > 0 else { return nil }
        var u = devices[i].rng.unit()
        guard u < total else { return nil }
        for (code, rate) in rates.enumerated() {
            if u < rate { return AttestationErrorClass(dcErrorCode: Int64(code)) }
            u -= rate
        }
        return nil
    }

    /// Logs `AppAttestFailure` and retries: after `serverUnavailable` with the SDK's doubling back-off, after
    /// anything else at the app's next backend call.
    private func fail(_ i: Int, _ failure: AttestationErrorClass, at t: Int64) throws {
        stats.failures[failure.description, default: 0] += 1
        try emit(.attestationFailure(failure), i, at: t)
        if failure == .serverUnavailable {
            let p = parameters
            let doubled = Double(p.backoffInitial.microseconds) * pow(2, Double(devices[i].backoffLevel))
            let wait = min(doubled, Double(p.backoffMaximum.microseconds)) * devices[i].rng.uniform(0.75, 1.25)
            devices[i].backoffLevel = min(devices[i].backoffLevel + 1, 30)
            devices[i].backoffUntil = t + Int64(wait)
            requestTokenLater(i, at: devices[i].backoffUntil)
        } else {
            let delay = max(1_000_000, Int64(devices[i].rng.exponential(mean: 60_000_000)))
            requestTokenLater(i, at: t + delay)
        }
    }

    // MARK: Events

    private func emit(_ kind: TelemetryEventKind, _ i: Int, at t: Int64) throws {
        let d = devices[i]
        let event = TelemetryEvent(
            time: Instant(microseconds: t), installationID: installationID(i), kind: kind, cohort: d.cohort,
            provider: provider(d), osVersion: osVersion(d), appVersion: appVersions[Int(d.app)])
        digest.add(event)
        try sink.record(event)
    }

    // MARK: The scenario

    private func perform(_ item: ScheduledAction, at t: Int64) throws {
        switch item.action {
        case .parameter(let name, let value):
            do {
                try parameters.set(name, value)
                note("\(name) \(value)", at: t)
            } catch {
                note("scenario line \(item.line): \(error)", at: t)
            }
        case .rollout(let p): publish(.set(p), item, at: t)
        case .kill: publish(.kill, item, at: t)
        case .resume: publish(.resume, item, at: t)
        case .release(let r):
            let identity: AppIdentity
            if let appID = r.appID, let dot = appID.firstIndex(of: ".") {
                identity = AppIdentity(
                    teamId: String(appID[..<dot]), bundleId: String(appID[appID.index(after: dot)...]))
            } else {
                identity = baseIdentity
            }
            if let existing = appVersions.firstIndex(of: r.version) {
                appCrashRates[existing] = r.crashRate
                appIdentities[existing] = identity
                newestRelease = (existing, t, r.adoptionPerHour)
            } else if appVersions.count < Int(UInt8.max) {
                appVersions.append(r.version)
                appCrashRates.append(r.crashRate)
                appIdentities.append(identity)
                newestRelease = (appVersions.count - 1, t, r.adoptionPerHour)
            }
            note("app \(item.action) released", at: t)
        }
    }

    /// A scripted change through the write path, as the scenario's operator.
    private func publish(_ operation: RolloutOperation, _ item: ScheduledAction, at t: Int64) {
        var request = WritePath.Request(
            intent: .rollout(operation), actor: options.actor,
            reason: "scenario \(scenario.name), line \(item.line)", origin: "ROLLOUT_SIMULATOR")
        request.retryOnConflict = true
        do {
            // A drill provokes what the guardrail exists to stop (a nudge into throttling): where the guardrail
            // refuses, the simulator overrides it with the scenario line as the reason, as an operator may, and the
            // write path audits the override. Step-up is never lifted (and may ask a code for the override).
            let preview = try writePath.preview(request)
            request.overrideGuardrail = preview.reports.contains {
                if case .refuse = $0.decision { $0.policy == TelemetryGuardrail.policyName } else { false }
            }
            switch try writePath.execute(request) {
            case .published(let stored, let proposal, _):
                stats.publishedChanges += 1
                note("published version \(stored.info.number): \(proposal.summary)", at: t)
            case .unchanged(_, let proposal):
                note("\(operation): nothing to change (\(proposal.summary))", at: t)
            }
        } catch {
            stats.refusedChanges += 1
            note("scenario line \(item.line), \(operation) not published: \(error)", at: t)
        }
        config.invalidate()
    }
}

/// One device's state: 80 bytes, so that a million devices fit comfortably in memory.
struct Device {
    struct Traits: OptionSet {
        let rawValue: UInt8
        static let simulator = Traits(rawValue: 1)
        static let unsupported = Traits(rawValue: 2)
        static let realtime = Traits(rawValue: 4)
        static let inSession = Traits(rawValue: 8)
        static let flagOn = Traits(rawValue: 16)
        static let keyInvalid = Traits(rawValue: 32)
    }

    var rng: SimulationRandom
    var lastFetch: Int64 = .min
    var lastLaunch: Int64 = .min
    var sessionEnd: Int64 = 0
    var tokenExpiry: Int64 = 0
    var backoffUntil: Int64 = .min
    /// When the pending token request runs (0: none pending).
    var requestAt: Int64 = 0
    var session: UInt32 = 0
    var fetchedVersion: Int32 = 0
    var realtimeSlot: Int32 = -1
    var sessionRate: Float = 1
    var traits = Traits()
    var os: UInt8 = 0
    var osUpdates: UInt8 = 0
    var app: UInt8 = 0
    var utcOffset: Int8 = 0
    var backoffLevel: UInt8 = 0
    var cohort = Cohort.none

    init(rng: SimulationRandom) { self.rng = rng }

    @inline(__always) func has(_ t: Traits) -> Bool { traits.contains(t) }
    @inline(__always) mutating func set(_ t: Traits) { traits.insert(t) }
    @inline(__always) mutating func clear(_ t: Traits) { traits.remove(t) }
}

/// How app launches spread over a local day: quiet at night, busiest in the evening, averaging 1.
enum DailyCurve {
    static let amplitude = 0.7
    static let peakHour = 19.0
    static let maximum = 1 + amplitude

    /// The launch-rate multiplier at local time `micros` (an offset from the epoch already in local time).
    static func level(atMicros micros: Int64) -> Double {
        let day: Int64 = 86_400_000_000
        let hour = Double(((micros % day) + day) % day) / 3_600_000_000
        return 1 + amplitude * cos(2 * Double.pi * (hour - peakHour) / 24)
    }
}

/// Where a simulated fleet's devices get their App Check tokens.
public enum FleetExchange: Sendable {
    /// An exchange in the simulating process, with its own demo authority, in simulated time.
    case inProcess
    /// A server reached over HTTP (`rollout serve`), which must trust `authority` for `appId`.
    case remote(RemoteFleetExchange)
}

/// A server the devices attest and assert against: its API, the demo authority it trusts (the devices' keys are
/// certified by it, as Apple certifies real ones), the app the devices are, and the wall clock their credential
/// certificates start at.
public struct RemoteFleetExchange: Sendable {
    public var exchange: any AppAttestExchanging
    public var authority: DemoCertificateAuthority
    public var appId: String
    public var identity: AppIdentity
    public var environment: AppAttestEnvironment
    public var wall: any Clock

    public init(
        exchange: any AppAttestExchanging, authority: DemoCertificateAuthority, appId: String, identity: AppIdentity,
        environment: AppAttestEnvironment, wall: any Clock
    ) {
        self.exchange = exchange
        self.authority = authority
        self.appId = appId
        self.identity = identity
        self.environment = environment
        self.wall = wall
    }
}
