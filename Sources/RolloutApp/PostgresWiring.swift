import AppCheck
import CommandLineKit
import Console
import FirebaseRemoteConfig
import WebClient
import Glibc
import Platform
import Monitoring
import PostgresStore
import RemoteConfig
import Rollout
import SecurityKey
import StepUp
import SQLiteStore
import StoreSupport
import Telemetry
import TelemetrySources
import Terminal
import Timekeeping

// The team store on PostgreSQL (`--store postgresql://...` or `postgres://...`), kept apart from the SQLite
// wiring so the two routes stay easy to see.

extension StoreLocation {
    /// Whether a store location names a PostgreSQL store: a libpq connection URI (`postgresql://` or
    /// `postgres://`), or a keyword/value connection string (`host=/run/postgresql dbname=rollout`) whose every
    /// word is a libpq keyword with a value. libpq takes what either leaves out from the `PG*` environment
    /// variables. Anything else is a store file's path.
    public static func isPostgres(_ location: String) -> Bool {
        if location.hasPrefix("postgresql://") || location.hasPrefix("postgres://") { return true }
        let words = location.split(whereSeparator: { $0 == " " || $0 == "\t" })
        return !words.isEmpty
            && words.allSatisfy { word in
                guard let equals = word.firstIndex(of: "=") else { return false }
                return libpqKeywords.contains(String(word[..<equals]))
            }
    }

    /// libpq's connection parameter keywords (PostgreSQL 15, "Parameter Key Words").
    static let libpqKeywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding", "connect_timeout",
        "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
        "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
        "gssencmode", "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslrootcert",
        "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version",
        "krbsrvname", "gsslib", "service", "target_session_attrs",
    ]
}

/// A PostgreSQL store opened (also the state store behind `firebase:` with `--state postgresql://...`): the open
/// store, who acts, and the write path. Commands never see it: its opener, `rolloutSession`, gives them the
/// backend's ports as a `RolloutSession`.
///
/// The write path has the core's own rules (validation, the reason for every increase, compare-and-swap, the
/// audit record in the same transaction) and the step-up policy on the store's operators.
public struct TeamSession {
    /// The connection string with any password masked, for messages.
    public let location: String
    public let config: PostgresConfigStore
    public let operatorID: String
    public let readOnly: Bool
    public let clock: any Clock
    /// Where this machine's team store key is (the session seals and unseals with it).
    public let keyPath: String

    /// The step-up state on this store, its secrets sealed with the team store key.
    public let stepUp: PostgresStepUpStore

    /// The Firebase store when the templates live in Firebase Remote Config and this store is its state store
    /// (`--store firebase:PROJECT --state postgresql://...`, `FirebaseWiring.teamSession`); nil otherwise.
    public var firebase: FirebaseConfigStore? = nil

    /// Where the templates live: Firebase when `firebase` is set, else this store.
    public var templates: any ConfigStore { firebase ?? config }

    /// The App Check API of that Firebase project (see `StoreSession.enforcement`).
    public var enforcement: AppCheckServicesClient? = nil

    /// The rollout with its telemetry and verdict, read from this store (the same `RolloutMonitor` as SQLite's).
    public func monitor() throws -> RolloutMonitor {
        try RolloutMonitor(store: config, config: firebase, clock: clock).readingEnforcement(of: enforcement)
    }

    /// The write path with the same policies as on SQLite, in the same order: the telemetry guardrail (verdict
    /// and attestation budget), then step-up (a store without enrolled operators has no step-up).
    public func writePath() throws -> WritePath {
        WritePath(
            store: templates, clock: clock,
            policies: [
                // The guardrail's monitor reads no App Check enforcement (`RolloutMonitor.enforcement`).
                try RolloutMonitor(store: config, config: firebase, clock: clock).guardrailPolicy(),
                StepUpWritePolicy(
                    store: stepUp, clock: clock, preApprovals: PostgresRampPlans(store: config), securityKeys: stepUp,
                    phones: stepUp, storeIdentity: try stepUp.storeIdentity()),
            ] + (enforcement.map { [EnforcementPolicy(client: $0, clock: clock)] } ?? []), readOnly: readOnly,
            requireReasonForIncrease: try stepUp.stepUpPolicy().reasonForIncrease, newSeed: { Wiring.newSeed() })
    }
}

extension Wiring {
    /// The PostgreSQL store at `conninfo` (a libpq URI), acting as `operatorID`, with the team store key of this
    /// machine (at `keyPath`, `teamStoreKeyPath` of the invocation's environment). Creates and migrates nothing.
    public static func teamSession(
        conninfo: String, operatorID: String, readOnly: Bool = false, clock: any Clock = SystemClock(),
        keyPath: String
    ) throws -> TeamSession {
        let config = try PostgresConfigStore(conninfo: conninfo, readOnly: readOnly, sealing: try teamSealing(keyPath: keyPath))
        return TeamSession(
            location: PostgresConfigStore.redacted(conninfo), config: config, operatorID: operatorID, readOnly: readOnly,
            clock: clock, keyPath: keyPath, stepUp: PostgresStepUpStore(store: config, key: try StoreKey.load(keyPath)))
    }

    /// The monitor of the invocation's store, whichever backend (`rollout telemetry`).
    public static func monitor(_ invocation: Invocation) throws -> RolloutMonitor { try session(invocation).monitor() }

    /// What `rollout ingest` lands batches in, whichever backend: the telemetry counters, the monitor (the
    /// accepted event window, auto-kill), the clock, and the write path for auto-kill.
    public struct TelemetryTarget {
        public let counters: any TelemetryCounters
        public let monitor: RolloutMonitor
        public let clock: any Clock
        public let readOnly: Bool
        public let writePath: () throws -> WritePath
    }

    public static func telemetryTarget(_ invocation: Invocation) throws -> TelemetryTarget {
        let session = try session(invocation)
        return TelemetryTarget(
            counters: try session.telemetryCounters(), monitor: try session.monitor(), clock: session.clock,
            readOnly: session.readOnly, writePath: session.writePath)
    }

    /// Where the team store key lives: `$ROLLOUT_STORE_KEY`, else `~/.config/rollout/team-store.key`.
    /// Read from the invocation's environment (`environment`; in-process users pass the process's).
    public static func teamStoreKeyPath(_ environment: [String: String] = Environment.current) -> String {
        if let path = environment["ROLLOUT_STORE_KEY"], !path.isEmpty { return path }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? CurrentUser.home
        return home + "/.config/rollout/team-store.key"
    }

    /// How this machine seals a PostgreSQL store: the seal key derived from the team store key (nil when the file
    /// is missing: every write is then refused, naming the file), and the witnesses in `rollout-witness/` beside it.
    public static func teamSealing(keyPath path: String) throws -> PostgresSealing {
        let key = try StoreKey.load(path)
        let directory = Path.directory(of: path)
        return PostgresSealing(
            key: key.map { PostgresSealKey(teamKey: $0.bytes, path: $0.path) }, keyPath: path,
            witnessDirectory: (directory.isEmpty ? "." : directory) + "/rollout-witness")
    }

    /// The team store key (nil when the file is missing and `create` is false), and whether it was just created.
    /// It seals the step-up secrets of a PostgreSQL store; every operator's machine holds the same file.
    public static func teamStoreKey(create: Bool, at path: String) throws -> (key: StoreKey?, created: Bool) {
        if let key = try StoreKey.load(path) { return (key, false) }
        guard create else { return (nil, false) }
        try? Files.makeDirectories(Path.directory(of: path), mode: 0o700)
        return (try StoreKey.create(path), true)
    }

    /// Before an enrolment on a PostgreSQL store: creates the team store key when this machine has none and the
    /// store has never recorded one (its first secret). Returns the created key's path (nil: nothing created, also
    /// for a file store). A store that recorded a key keeps refusing any other key, so none is made up for it.
    public static func teamStoreKeyForEnrolment(_ invocation: Invocation) throws -> String? {
        let location = try FirebaseWiring.postgresState(invocation) ?? StoreLocation.resolvedPath(invocation)
        let keyPath = teamStoreKeyPath(invocation.environment)
        guard StoreLocation.isPostgres(location), !invocation.flag("--read-only"),
            try teamStoreKey(create: false, at: keyPath).key == nil
        else {
            return nil
        }
        let config = try PostgresConfigStore(conninfo: location, readOnly: false)
        guard try !PostgresStepUpStore(store: config, key: nil).hasKeyCheck() else { return nil }
        let (key, created) = try teamStoreKey(create: true, at: keyPath)
        return created ? key?.path : nil
    }

    /// `rollout init` on PostgreSQL: the schema and version 1 (the same genesis as a new SQLite store), sealed
    /// with the team store key, which is created when this machine has none (`createdKey`: its path then).
    public static func createTeamStore(
        conninfo: String, seed: String, form: RemoteConfigTemplate.Form, operatorID: String, keyPath: String,
        clock: any Clock = SystemClock()
    ) throws -> (team: TeamSession, createdKey: String?) {
        let (key, created) = try teamStoreKey(create: true, at: keyPath)
        let store = try PostgresConfigStore.create(conninfo: conninfo, sealing: try teamSealing(keyPath: keyPath)) {
            try SQLiteConfigStore.genesis(seed: seed, form: form, actor: operatorID, time: clock.now())
        }
        let team = TeamSession(
            location: PostgresConfigStore.redacted(conninfo), config: store, operatorID: operatorID, readOnly: false, clock: clock,
            keyPath: keyPath, stepUp: PostgresStepUpStore(store: store, key: key))
        return (team, created ? key?.path : nil)
    }
}

// MARK: The console on either store

/// What the console's executor (`StoreConsoleExecutor`) needs of a session, whichever store holds it: the SQLite
/// session and the PostgreSQL team session both provide it.
public protocol ConsoleWriteSession {
    var consoleConfig: any ConfigStore { get }
    var operatorID: String { get }
    var readOnly: Bool { get }
    func writePath() throws -> WritePath
    func monitor() throws -> RolloutMonitor
    /// The ramp plan's session on this store (the console's plan keys).
    var planSession: PlanSession { get }
    /// Throws a `ConfigIntegrityProblem` naming what fails verification.
    func verifyConfigIntegrity() throws
    /// `rollout approve REQUEST` from the console: this operator's security key approves another operator's
    /// pending two-person request and the write path publishes it (`StepUpMethods.approveRequest`).
    func approveTwoPersonRequest(
        _ id: String, device: () throws -> SecurityKeyDevice, pin: String?, timeoutMilliseconds: Int?,
        cancellation: SecurityKeyCancellation?
    ) throws -> WritePath.Outcome
}

extension ConsoleWriteSession {
    /// A session that is not a `RolloutSession` cannot look its requests up: refused, nothing written.
    public func approveTwoPersonRequest(
        _ id: String, device: () throws -> SecurityKeyDevice, pin: String?, timeoutMilliseconds: Int?,
        cancellation: SecurityKeyCancellation?
    ) throws -> WritePath.Outcome {
        throw SessionRefusal(.unsupported, "approving a two-person request needs a rollout session; use 'rollout approve \(id)'")
    }
}

extension StoreSession: ConsoleWriteSession {
    public var consoleConfig: any ConfigStore { config }
    public func verifyConfigIntegrity() throws { _ = try config.verifyIntegrity() }
}

extension TeamSession: ConsoleWriteSession {
    public var consoleConfig: any ConfigStore { templates }
    public func verifyConfigIntegrity() throws {
        if let firebase {
            _ = try firebase.verifyIntegrity()
            return
        }
        do {
            _ = try config.verify()
            do {
                _ = try config.verifySeal()
            } catch let e as PostgresError where e.sqlState == "42501" {
                // A role that may not read every sealed table (the viewer) cannot check the seal: the chain it can.
            }
        } catch StoreError.corrupt(let why) {
            throw ConfigIntegrityProblem("audit log", why)
        } catch let p as PostgresSealProblem {
            throw ConfigIntegrityProblem(p.subject, p.problem)
        }
    }
}

/// The console's picture of a PostgreSQL store, woken by `LISTEN`/`NOTIFY`: the picture is computed again as
/// soon as a publish or a telemetry batch is announced (a colleague's change shows within the next refresh, a
/// quarter of a second), and otherwise once per `fallback` (the clock moves the data age and the windows; a lost
/// listener connection degrades to this polling). Between wake-ups the previous picture is shown as it was.
public final class PostgresConsoleSource: ConsoleDataSource, @unchecked Sendable {
    private let inner: StoreConsoleSource
    private let conninfo: String
    private let fallback: Double
    private let lock = Lock()
    private var listener: PostgresChangeListener?
    private var last: (model: ConsoleModel, at: Deadline)?
    /// How many pictures were computed because of a notification (tests, diagnostics).
    public private(set) var wakeUps = 0

    public init(team: TeamSession, conninfo: String, project: String, fallback: Double = 5) throws {
        inner = StoreConsoleSource(
            monitor: try team.monitor(), stepUp: team.stepUp, plans: PostgresRampPlans(store: team.config),
            storeLabel: team.firebase.map { $0.label } ?? "postgresql " + team.location, operatorID: team.operatorID,
            readOnly: team.readOnly, project: project, autoKill: team)
        self.conninfo = conninfo
        self.fallback = fallback
        listener = try? PostgresChangeListener(conninfo: conninfo)
    }

    public func snapshot() throws -> ConsoleModel {
        try lock.withLock {
            var notified = false
            if let l = listener {
                do {
                    while try l.next(timeout: 0) != nil { notified = true }
                } catch {
                    listener = nil  // polling from now on; try to listen again at the next fallback
                }
            }
            if let last, !notified, Deadline.now.seconds(since: last.at) < fallback { return last.model }
            if listener == nil { listener = try? PostgresChangeListener(conninfo: conninfo) }
            if notified { wakeUps += 1 }
            let model = try inner.snapshot()
            last = (model, Deadline.now)
            return model
        }
    }

    public func status() throws -> RolloutMonitor.Status { try inner.status() }
}

// MARK: Settings (operators, step-up policy, guardrail settings)

extension TeamSession {
    /// The settings write path on this store: the same intents, rules and audit records as on SQLite, each in one
    /// transaction under the chain-head row lock (`PostgresConfigStore.atomically`).
    public func settingsWritePath() -> SettingsWritePath {
        SettingsWritePath(backend: PostgresSettingsBackend(team: self), clock: clock)
    }
}

/// The PostgreSQL team store's settings: `PostgresStepUpStore` and `PostgresGuardrailSettings` on the config
/// store's connection, so an intent's reads, its step-up attempt, its change and its audit records commit together
/// (the nested calls join the one transaction).
public struct PostgresSettingsBackend: SettingsBackend {
    public let team: TeamSession

    public init(team: TeamSession) { self.team = team }

    public var readOnlyCause: ReadOnlyCause? { team.readOnly || team.config.isReadOnly ? .requested : nil }

    public func transaction<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        try team.config.atomically { try body(tables) }
    }

    public func reading<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        try team.config.consistentRead { try body(tables) }
    }

    public func sealedReading<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        do {
            return try team.config.sealedRead { try body(tables) }
        } catch let problem as PostgresSealProblem {
            throw StoreError.corrupt("the team store fails verification: \(problem) (see 'rollout audit verify')")
        }
    }

    private var tables: PostgresSettingsTables {
        PostgresSettingsTables(
            config: team.config, stepUp: team.stepUp, guardrails: PostgresGuardrailSettings(store: team.config),
            keyPath: team.keyPath)
    }
}

struct PostgresSettingsTables: SettingsTables {
    let config: PostgresConfigStore
    let stepUp: PostgresStepUpStore
    let guardrails: PostgresGuardrailSettings
    let keyPath: String

    func stepUpPolicy() throws -> StepUpPolicy { try stepUp.stepUpPolicy() }
    func saveStepUpPolicy(_ policy: StepUpPolicy) throws { try stepUp.saveStepUpPolicy(policy) }
    func guardrailSettings() throws -> GuardrailSettings { try guardrails.guardrailSettings() }
    func saveGuardrailSetting(_ key: String, _ value: String) throws { try guardrails.saveGuardrailSetting(key, value) }
    func isEnforced() throws -> Bool { try stepUp.isEnforced() }
    func operators() throws -> [OperatorRecord] { try stepUp.operators() }
    func operatorRecord(_ id: OperatorID) throws -> OperatorRecord? { try stepUp.operatorRecord(id) }
    func saveOperator(_ record: OperatorRecord) throws { try stepUp.save(record) }
    func removeOperator(_ id: OperatorID) throws { try stepUp.remove(id) }
    func saveSecurityKey(_ credential: SecurityKeyCredential) throws { try stepUp.saveSecurityKeyRow(credential) }
    func savePhone(_ enrolment: PhoneEnrolment) throws { try stepUp.savePhoneRow(enrolment) }
    func pendingEnrolments() throws -> [PendingEnrolment] { try stepUp.pendingEnrolments() }
    func pendingEnrolment(_ id: OperatorID) throws -> PendingEnrolment? { try stepUp.pendingEnrolment(id) }
    func savePending(_ enrolment: PendingEnrolment) throws { try stepUp.savePending(enrolment) }
    func removePending(_ id: OperatorID) throws { try stepUp.removePending(id) }
    func operatorStandings() throws -> [OperatorStanding] { try stepUp.operatorStandings() }
    func pendingStandings() throws -> [PendingStanding] { try stepUp.pendingStandings() }
    func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision {
        try stepUp.authorize(change, by: actor, code: code, at: clock, audit: audit)
    }
    func sourceConfigurations() throws -> [SourceConfiguration] { try PostgresSourceConfig(store: config).load() }
    func saveSource(_ configuration: SourceConfiguration) throws { try PostgresSourceConfig(store: config).save(configuration) }
    func removeSource(_ name: String) throws { try PostgresSourceConfig(store: config).remove(name) }
    func sourceLedgers() throws -> [SourceLedgerRecord] { try PostgresSourceConfig(store: config).ledgers() }
    func appendAudit(_ entry: Rollout.AuditEntry) throws { _ = try config.appendAudit(entry) }
    func auditRecords(limit: Int, before: Int64?) throws -> [Rollout.AuditRecord] {
        try config.auditRecords(limit: limit, before: before)
    }
    func appCheckState() throws -> any AppCheckState {
        // On the config store's connection: its writes join the intent's transaction. Private keys are sealed
        // with this machine's team store key, as every other writer of these tables seals them.
        PostgresAppCheckState(store: config, key: try Wiring.teamStoreKey(create: false, at: keyPath).key)
    }
}

extension TeamSession {
    /// The opener of a PostgreSQL session (also Firebase's PostgreSQL state store behind `firebase:`): every port on
    /// the team store's connection, the templates in Firebase when `firebase` is set.
    public var rolloutSession: RolloutSession {
        let team = self
        let config = config
        // The connections opened for the separate telemetry counters, whose lock waits the session abandons too.
        let separate = SeparateStores()
        return RolloutSession(
            label: location, displayLabel: location + " (PostgreSQL)", operatorID: operatorID,
            readOnlyCause: readOnly ? .requested : nil, clock: clock,
            templates: templates, stepUp: stepUp, plans: PostgresRampPlans(store: config),
            settings: PostgresSettingsBackend(team: self), monitored: config, heartbeat: PostgresHeartbeat(store: config),
            ports: RolloutSession.Ports(
                writePath: writePath,
                planSession: { planSession },
                appCheckServices: { [enforcement] in enforcement },
                separateTelemetryCounters: {
                    let store = try PostgresConfigStore(conninfo: config.conninfo, readOnly: team.readOnly)
                    return try separate.add(store).telemetryCounters()
                },
                appCheckState: {
                    try Wiring.appCheckState(location: config.conninfo, readOnly: team.readOnly, keyPath: team.keyPath)
                },
                isDrillStore: { false },
                verifyConfigIntegrity: verifyConfigIntegrity,
                verifyAudit: verifyAudit,
                consoleSource: { project, _ in
                    try PostgresConsoleSource(
                        team: team, conninfo: config.conninfo, project: project ?? team.firebase?.client.project ?? "team")
                },
                telemetryClock: { team.clock },
                sourceState: { config },
                storeLost: { nil },
                abandonLockWaits: {
                    config.abandonLockWaits()
                    separate.abandonLockWaits()
                }))
    }

    /// The stores a session opened on connections of their own (`separateTelemetryCounters`).
    final class SeparateStores: @unchecked Sendable {
        private let lock = Lock()
        private var stores: [PostgresConfigStore] = []
        func add(_ store: PostgresConfigStore) -> PostgresConfigStore {
            lock.withLock { stores.append(store) }
            return store
        }
        func abandonLockWaits() { lock.withLock { stores }.forEach { $0.abandonLockWaits() } }
    }

    /// `audit verify` on this store: the chain (behind Firebase, every published record naming the Firebase version
    /// it produced), then the seal of the tables that decide a write under the team store key, and this machine's
    /// witness.
    func verifyAudit() throws -> AuditVerification {
        let chain: (auditRecords: Int, versions: Int)
        do {
            if let firebase {
                let r = try firebase.verifyIntegrity()
                chain = (r.auditRecords, r.versions)
            } else {
                let r = try config.verify()
                chain = (r.auditRecords, r.versions)
            }
            let seal: PostgresConfigStore.SealReport
            do {
                seal = try config.verifySeal()
            } catch let e as PostgresError where e.sqlState == "42501" {
                throw AuditVerificationFailure(
                    description: "the seal cannot be checked as this role, which may not read every sealed table "
                        + "(\(e.message)): run it as the writer or the owner role")
            }
            return AuditVerification(
                auditRecords: chain.auditRecords, versions: chain.versions, headHash: seal.headHash,
                headSequence: seal.headSequence, sealedTables: seal.sealedTables, sealKey: "the team store key",
                stateDigest: nil, databaseIntegrityChecked: false, witnessPath: seal.witnessPath,
                witnessLine: "record \(seal.headSequence) is in the chain, unchanged")
        } catch let p as PostgresSealProblem {
            throw ConfigIntegrityProblem(p.subject, p.problem)
        }
    }
}
