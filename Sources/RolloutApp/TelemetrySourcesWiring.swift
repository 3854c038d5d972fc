import CommandLineKit
import GoogleDataSources
import Platform
import Rollout
import Telemetry
import TelemetrySources
import Timekeeping
import WebClient

/// Telemetry sources in a session: the configured sources (settings tables), their state and ledger (the
/// session's `SourceStateStore`, one port every store implements), and the pulls, which land through the store's
/// telemetry commit as `rollout ingest` does. `rollout source …`, `rollout follow`, `watch`, `plan run` and the
/// console use it; the executable only parses and prints.
/// What one pull did, for printing.
public struct SourcePullReport: Sendable {
    public var source: String
    /// The source's kind, which names its data's age (export lag, processing delay, realtime data age).
    public var kind: SourceConfiguration.Kind
    public var window: (from: Instant, through: Instant)
    /// Nil when the pull failed (then `error` says why).
    public var rows: Int?
    public var bytes: Int
    public var note: String
    /// Counters changed (keys), and the events they add up to.
    public var changedKeys: Int
    public var addedEvents: Int64
    public var waits: [Instant.Duration]
    public var error: SourceError?
    /// The end of the newest minute the source had data for, and how old that is at the pull: the export's lag
    /// (BigQuery), the processing delay (Crashlytics) or the realtime report's freshness.
    public var newestData: Instant?
    public var dataAge: Instant.Duration?
}

/// The sources of one session.
public struct SessionSources {
    let session: RolloutSession
    let environment: [String: String]
    /// The realtime sources made so far, kept so that the quota each report states is respected by the next pull,
    /// and what the session learnt about landing.
    private let memory = SessionMemory()

    /// Shared by the pulls of a loop, which run side by side: every access holds `lock`.
    final class SessionMemory: @unchecked Sendable {
        let lock = Lock()
        var realtime: [String: AnalyticsRealtimeSource] = [:]
        /// The store refused this session a landing (a role that may not write): later looks do not pull.
        var landingRefused: SessionRefusal?
    }

    /// How a pull waits out a 429/5xx before trying again (a test passes one that moves its manual clock).
    let sleep: (@Sendable (Instant.Duration) -> Void)?

    /// Recorded answers every call is served from instead of Google's APIs (`rollout demo --source recorded`).
    let recorded: RecordedAnswers?

    /// The longest a pull may take (its calls, waits and answers): past it the pull is given up, recorded as
    /// failed and tried again at its next interval. A pull that does not end would otherwise hold up whoever
    /// pulls (the headless loop's looks, the console's pulls).
    public var pullTimeLimit: Instant.Duration = .seconds(Int64(120))

    public init(
        session: RolloutSession, environment: [String: String], sleep: (@Sendable (Instant.Duration) -> Void)? = nil,
        recorded: RecordedAnswers? = nil
    ) {
        self.session = session
        self.environment = environment
        self.sleep = sleep
        self.recorded = recorded
    }

    /// The configured sources, as stored (to show them).
    public func configurations() throws -> [SourceConfiguration] {
        try session.settingsWritePath().read { try $0.sourceConfigurations() }
    }

    /// The configured sources to pull: read after the store's seal is checked in the same snapshot. A source runs
    /// its access-token command and calls its project before its pull lands (and on the team store a landing
    /// takes no head lock and checks no seal), so a row written past rollout (`sqlite3`, a database login with the
    /// writer role) must be refused here, not at the next write.
    public func pulledConfigurations() throws -> [SourceConfiguration] {
        try session.settingsWritePath().readSealed { try $0.sourceConfigurations() }
    }

    /// The source `name`, to pull (`pulledConfigurations`).
    public func configuration(_ name: String) throws -> SourceConfiguration {
        guard try configurations().contains(where: { $0.name == name }),
            let c = try pulledConfigurations().first(where: { $0.name == name })
        else {
            throw CommandError("no source named \(name) ('rollout source list' shows them)")
        }
        return c
    }

    /// The state of the source `name`'s ledger (nil when no source has that name, or its ledger was never pulled).
    public func state(_ name: String) throws -> SourceState? {
        guard let c = try configurations().first(where: { $0.name == name }) else { return nil }
        return try state(c)
    }

    /// The state of `c`'s ledger (`SourceLedger`: kept under the events it reads), nil before its first pull.
    public func state(_ c: SourceConfiguration) throws -> SourceState? {
        try session.ports.sourceState().sourceState(c.ledger.key)
    }

    /// The caller of `c`'s API with its credentials and the CA bundle of the environment.
    func caller(_ c: SourceConfiguration, scope: String, clock: any Clock) throws -> SourceCaller {
        if let recorded {
            return SourceCaller(source: c.name, project: c.project, tokens: RecordedAnswers.Token(), transport: recorded, clock: clock)
        }
        let transport = CurlTransport(
            caFile: CurlTransport.caFile(environment: environment), bodyLimit: SourceCaller.maximumAnswerBytes)
        let tokens: any AccessTokenProvider
        switch c.credentials {
        case .accessTokenCommand(let command): tokens = CommandTokenProvider(command: command, clock: clock)
        case .serviceAccountFile(let file):
            tokens = try ServiceAccountTokenProvider(
                key: try ServiceAccountKey.load(path: file), transport: transport, clock: clock, scope: scope)
        case .applicationDefault:
            guard let file = environment["GOOGLE_APPLICATION_CREDENTIALS"], !file.isEmpty else {
                throw CommandError(
                    "source \(c.name) uses the application default credentials, and GOOGLE_APPLICATION_CREDENTIALS is not set")
            }
            tokens = try ServiceAccountTokenProvider(
                key: try ServiceAccountKey.load(path: file), transport: transport, clock: clock, scope: scope)
        }
        return SourceCaller(source: c.name, project: c.project, tokens: tokens, transport: transport, clock: clock, sleep: sleep)
    }

    /// The realtime source of `c` (made once per session): its API origin `$ROLLOUT_ANALYTICS_URL`, else Google's.
    func realtimeSource(_ c: SourceConfiguration, clock: any Clock) throws -> AnalyticsRealtimeSource {
        if let made = memory.lock.withLock({ memory.realtime[c.name] }) { return made }
        let origin = environment["ROLLOUT_ANALYTICS_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "https://analyticsdata.googleapis.com"
        try WebURL.checkScheme(origin, what: "ROLLOUT_ANALYTICS_URL")
        let source = AnalyticsRealtimeSource(
            name: c.name, property: c.property ?? "", origin: origin,
            call: try caller(c, scope: AnalyticsRealtimeSource.scope, clock: clock))
        memory.lock.withLock { memory.realtime[c.name] = source }
        return source
    }

    /// The BigQuery source of `c`: its API origin `$ROLLOUT_BIGQUERY_URL` (else Google's), the CA bundle of the
    /// environment, its credentials.
    func source(_ c: SourceConfiguration, clock: any Clock) throws -> BigQuerySource {
        let call = try caller(c, scope: BigQueryClient.scope, clock: clock)
        let origin = environment["ROLLOUT_BIGQUERY_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "https://bigquery.googleapis.com"
        try WebURL.checkScheme(origin, what: "ROLLOUT_BIGQUERY_URL")
        let client = BigQueryClient(origin: origin, project: c.project, location: c.location, call: call, clock: clock)
        let tables = try ExportTables(project: c.project, analytics: c.analytics, crashlytics: c.crashlytics, location: c.location)
        return BigQuerySource(name: c.name, tables: tables, client: client, origin: c.origin)
    }

    /// Pulls `c` once from its watermark; with `land`, commits what changed (else only reports what was pulled).
    /// A failed pull is recorded in the source's state (when landing) and reported, never thrown.
    ///
    /// The pull is abandoned where it is once `stop` is cancelled (its waits end, a transfer in flight is aborted)
    /// or after `pullTimeLimit`: nothing of it lands, and only the time limit is recorded as a failure (a stop is
    /// not the source's fault).
    public func pull(_ c: SourceConfiguration, land: Bool, stop: Cancellation? = nil) throws -> SourcePullReport {
        let clock = session.clock
        let now = clock.now()
        let stateStore = try session.ports.sourceState()
        let plan = PullPlan(now: now, watermark: try stateStore.sourceState(c.ledger.key)?.watermark, origin: c.origin, overlap: c.overlap)
        var report = SourcePullReport(
            source: c.name, kind: c.kind, window: (plan.from, plan.through), rows: nil, bytes: 0, note: "", changedKeys: 0, addedEvents: 0,
            waits: [], error: nil, newestData: nil, dataAge: nil)
        // The stored list, not read under the seal again: it can only keep this pull from running, and the sources
        // were just read under the seal by whoever passed `c` (`due`, `configuration`).
        if let shared = try configurations().filter({ $0.name < c.name }).sorted(by: { $0.name < $1.name })
            .lazy.compactMap({ other in c.overlap(configured: [other], ledgers: []).map { (other, $0) } }).first
        {
            // Two sources over some of the same events, configured before `source add` refused such a pair (a store
            // upgraded from then): only the first by name pulls. The second's pulls would count those events again
            // (events of its own beside them), or, over one ledger in another shape (an export and the realtime
            // report of one property), take back each other's rows at every pull.
            let (other, overlap) = shared
            guard case .configured(_, _, let ours, _) = overlap else { return report }
            report.error = SourceError(
                .configuration, source: c.name,
                "not pulled: it reads \(ours), which source \(other.name) reads too (a pair configured before such a "
                    + "pair was refused), and only one of them may count those events; 'rollout source remove "
                    + "\(c.name)' (what it landed stays counted), then add it again over its other events, if any")
            // Over a ledger of its own, the refusal is the source's state (`source list`, and HOLD once silent);
            // a ledger it shares is the other source's, which pulls it.
            if land && other.ledger.key != c.ledger.key {
                try stateStore.recordFailure(ledger: c.ledger.key, message: report.error!.message, at: clock.now())
            }
            return report
        }
        let caller: SourceCaller
        let pulling: () throws(SourceError) -> SourcePull
        do {
            (caller, pulling) = try connect(c, plan: plan, now: now)
        } catch {
            // A source that cannot be called as configured fails like one that does not answer: recorded, HOLD
            // once silent, and the loop goes on with the other sources.
            let e = error as? SourceError ?? SourceError(.configuration, source: c.name, "\(error)")
            report.error = e
            if land { try stateStore.recordFailure(ledger: c.ledger.key, message: e.message, at: clock.now()) }
            return report
        }
        if c.kind == .analyticsRealtime {
            report.window = (AnalyticsRealtimeSource.plan(now: now).from, AnalyticsRealtimeSource.plan(now: now).through)
        }
        let waitsBefore = caller.waits.count
        let bound = Cancellation(parent: stop, seconds: Double(pullTimeLimit.microseconds) / 1e6)
        caller.cancellation = bound
        defer { caller.cancellation = nil }
        do {
            let pull = try pulling()
            report.rows = pull.rows
            report.bytes = pull.bytes
            if let minute = pull.counts.keys.filter({ $0.kind != .usersEntered && $0.kind != .usersCrashed }).map(\.minute).max() {
                let end = BucketLevel.minute.start(minute + 1)
                report.newestData = end
                report.dataAge = Instant.Duration(microseconds: max(0, (now - end).microseconds))
            }
            report.note = pull.note
            if land {
                let changes = try stateStore.commitPull(pull, at: clock.now())
                report.changedKeys = changes.count
                report.addedEvents = changes.filter { $0.key.kind != .usersEntered && $0.key.kind != .usersCrashed }.values.reduce(0, +)
            }
        } catch let e as SourceError {
            report.error = e
            let stopped = e.kind == .cancelled && stop?.isCancelled == true
            if land && !stopped { try stateStore.recordFailure(ledger: c.ledger.key, message: e.message, at: clock.now()) }
        }
        report.waits = Array(caller.waits.dropFirst(waitsBefore))
        return report
    }

    /// The caller of `c` and its pull of `plan` (the realtime report pulls its own last 30 minutes at `now`).
    func connect(_ c: SourceConfiguration, plan: PullPlan, now: Instant) throws -> (SourceCaller, () throws(SourceError) -> SourcePull) {
        let clock = session.clock
        switch c.kind {
        case .bigQuery:
            let source = try self.source(c, clock: clock)
            return (source.client.call, { () throws(SourceError) -> SourcePull in try source.pull(plan) })
        case .crashlyticsAPI:
            let origin = environment["ROLLOUT_CRASHLYTICS_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "https://firebasecrashlytics.googleapis.com"
            try WebURL.checkScheme(origin, what: "ROLLOUT_CRASHLYTICS_URL")
            let source = CrashlyticsEventsSource(
                name: c.name, project: c.project, app: c.app ?? "", origin: origin,
                call: try self.caller(c, scope: CrashlyticsEventsSource.scope, clock: clock))
            return (source.call, { () throws(SourceError) -> SourcePull in try source.pull(plan) })
        case .analyticsRealtime:
            let source = try realtimeSource(c, clock: clock)
            return (source.call, { () throws(SourceError) -> SourcePull in try source.pull(now: now) })
        }
    }

    /// The sources a loop follows.
    func followed() throws -> [SourceConfiguration] { try pulledConfigurations() }

    /// Pulls every source whose last attempt is at least its interval old (all of them with `all`).
    ///
    /// A session that may not write pulls nothing and follows the store alone: a read-only one is not asked, and
    /// when the store refuses this role the landing (the PostgreSQL viewer), the refusal is kept and said by
    /// `silences` (the sources stay HOLD here, as they would be unpulled).
    public func pullDue(all: Bool = false) throws -> [SourcePullReport] {
        try pull(try due(all: all))
    }

    /// The sources `pullDue` would pull now.
    public func due(all: Bool = false) throws -> [SourceConfiguration] {
        guard !session.readOnly, memory.lock.withLock({ memory.landingRefused == nil }) else { return [] }
        let now = session.clock.now()
        let followed: [SourceConfiguration]
        do {
            followed = try self.followed()
        } catch {
            // A role that may not read the sealed tables (the PostgreSQL viewer) cannot check the seal, and does not
            // land pulls either: kept, as a landing it was refused (later looks do not pull).
            guard let refusal = SessionRefusal(error) else { throw error }
            memory.lock.withLock { memory.landingRefused = refusal }
            return []
        }
        return try followed.filter { c in
            let last = try state(c)?.lastAttempt
            return all || last.map({ now - $0 >= c.every }) ?? true
        }
    }

    /// Pulls `sources` one after the other, landing what they bring; once `stop` is cancelled the pull in flight
    /// is abandoned and the rest are not started.
    public func pull(_ sources: [SourceConfiguration], stop: Cancellation? = nil) throws -> [SourcePullReport] {
        var reports: [SourcePullReport] = []
        for c in sources {
            if stop?.isCancelled == true { break }
            guard let report = try pullLanding(c, stop: stop) else { return reports }
            reports.append(report)
        }
        return reports
    }

    /// Pulls `c` and lands what it brings, as `pull(_:stop:)` does for each source; nil when the store refused
    /// this session the landing (kept: later looks do not pull).
    public func pullLanding(_ c: SourceConfiguration, stop: Cancellation? = nil) throws -> SourcePullReport? {
        do {
            return try pull(c, land: true, stop: stop)
        } catch {
            guard let refusal = SessionRefusal(error) else { throw error }
            memory.lock.withLock { memory.landingRefused = refusal }
            return nil
        }
    }

    /// The reasons to HOLD the sources give: each source with no successful pull for its `silentAfter` (or never),
    /// as every assessment of the store judges them (`MonitoredStore.sourceSilences`, a HOLD finding of the
    /// verdict), and a landing this session was refused.
    public func silences() throws -> [String] {
        let silent = try session.monitored.sourceSilences(at: session.clock.now())
        guard !silent.isEmpty, let note = landingNote() else { return silent }
        return silent + [note]
    }

    /// Why this session does not pull the sources (the store refused it a landing), nil when it does.
    public func landingNote() -> String? {
        memory.lock.withLock { memory.landingRefused }.map {
            "this session does not pull the sources: \($0.description)"
        }
    }
}

extension RolloutSession {
    /// The session's telemetry sources.
    public func sources(environment: [String: String]) -> SessionSources {
        SessionSources(session: self, environment: environment)
    }
}
