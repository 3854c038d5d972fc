import CommandLineKit
import FirebaseRemoteConfig
import WebClient
import Glibc
import Monitoring
import PostgresStore
import RemoteConfig
import Rollout
import SQLiteStore
import Timekeeping

/// What a session needs of its config store beyond `ConfigStore`: creation (`init`) and `audit verify`. The
/// embedded SQLite store and the Firebase store both provide them.
public protocol SessionConfigStore: ConfigStore {
    @discardableResult
    func initializeIfEmpty(_ genesis: () throws -> PublishRequest) throws -> Bool
    func verifyIntegrity() throws -> ConfigIntegrityReport
}

extension SessionConfigStore {
    /// `init` on a store that takes its rollout once (a Firebase project's state): the genesis as the first
    /// publish, refused when the store already holds a rollout. `label` names the store in that refusal.
    func adoptOnce(label: String, seed: String, form: RemoteConfigTemplate.Form, actor: String, time: Instant) throws {
        guard try initializeIfEmpty({ try SQLiteConfigStore.genesis(seed: seed, form: form, actor: actor, time: time) })
        else {
            throw StoreError.unavailable(
                "the state store of \(label) already holds its rollout (version \(try current().info.number)); "
                    + "init only adopts a project once")
        }
    }
}

extension SQLiteConfigStore: SessionConfigStore {}
extension FirebaseConfigStore: SessionConfigStore {}

/// `--store firebase:PROJECT_ID` (or `ROLLOUT_STORE=firebase:...`): the template in Firebase Remote Config, the
/// rest of the session's state in a state store (`--state PATH`, default per project).
///
/// Credentials: `--access-token-command CMD`, else a service-account key file (`--credentials FILE`, else
/// `$GOOGLE_APPLICATION_CREDENTIALS`). The API origin: `$ROLLOUT_FIREBASE_URL`, else `$FIREBASE_REMOTE_CONFIG_URL`,
/// else Google's. `$ROLLOUT_FIREBASE_TIMEOUT` sets each call's timeout in seconds (default 30).
public enum FirebaseWiring {
    public static let scheme = "firebase:"
    /// How often the console asks Firebase for the newest version. A colleague's publish shows within this time;
    /// Firebase's clients fetch config far less often (the SDK's default minimum fetch interval is 12 hours), so
    /// seeing it sooner changes nothing, while 12 reads a minute per open console stay well inside the API's
    /// per-project quota. The CLI always reads fresh.
    public static let consolePollInterval = Instant.Duration.seconds(Int64(5))

    /// The global options of the Firebase store (listed with `--store`).
    public static let options: [Option] = [
        .value(
            "--state", name: "PATH",
            help:
                "With --store firebase:PROJECT: the state store (audit log, telemetry, operators): a file (default per project) or a PostgreSQL team store (postgresql://...)."
        ),
        .value(
            "--credentials", name: "FILE",
            help: "With --store firebase:...: a service-account key file (else $GOOGLE_APPLICATION_CREDENTIALS)."),
        .value(
            "--access-token-command", name: "CMD",
            help:
                "With --store firebase:...: a command printing an OAuth access token (e.g. gcloud auth print-access-token)."
        ),
    ]

    /// The project of a `firebase:PROJECT` store location, nil for any other location.
    public static func project(of location: String) throws -> String? {
        guard location.hasPrefix(scheme) else { return nil }
        let project = String(location.dropFirst(scheme.count))
        // Project ids: 6–30 lowercase letters, digits, hyphens; project numbers: digits.
        guard !project.isEmpty, project.count <= 64,
            project.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") })
        else {
            throw CommandError(
                "'\(location)' is not a Firebase store: expected firebase:PROJECT_ID (lowercase letters, digits, hyphens)",
                exit: .usage)
        }
        return project
    }

    /// The Firebase session of the invocation, or nil when its store is not `firebase:...` (the hook in `Wiring`).
    static func session(_ invocation: Invocation, create: Bool) throws -> StoreSession? {
        guard let project = try project(of: StoreLocation.path(invocation)) else { return nil }
        // A PostgreSQL state store is a team session (`teamSession`); a command that reaches here does not run there.
        if let conninfo = postgresState(invocation) {
            throw CommandError(
                "'\(invocation.commandLine)' does not run with a PostgreSQL state store yet (--state \(PostgresConfigStore.redacted(conninfo)) needs a state file): "
                    + "nothing was read or written")
        }
        let readOnly = invocation.flag("--read-only")
        let clock = SystemClock()
        let state = try stateStore(invocation, project: project, create: create, readOnly: readOnly)
        let store = try configStore(
            project: project, state: try state.configStore(), invocation: invocation, clock: clock)
        if invocation.path.last == "console" { store.pollInterval = consolePollInterval }
        // Settle publishes an interrupted process left without their audit record before anything reads the log.
        // Best effort: a publish settles them again (and fails if it cannot), `audit verify` names what is left.
        if !readOnly && !create { _ = try? store.reconcile() }
        return StoreSession(
            path: store.label, store: state, config: store, operatorID: try Wiring.operatorID(invocation),
            readOnly: readOnly, clock: clock,
            enforcement: try appCheckClient(project: project, invocation: invocation, clock: clock))
    }

    /// The opener of a Firebase session with a state file: the state file's ports, the templates in Firebase, the
    /// console's picture polling Firebase on a client of its own. Nil when the store is not `firebase:...`.
    static func rolloutSession(_ invocation: Invocation) throws -> RolloutSession? {
        guard let session = try session(invocation, create: false) else { return nil }
        return session.rolloutSession(console: { clock in
            try consoleSource(invocation, session: session, clock: clock)
        })
    }

    /// The `--state` location of a `firebase:` store when it names a PostgreSQL store (a libpq URI or
    /// keyword/value string), else nil.
    public static func postgresState(_ invocation: Invocation) -> String? {
        guard StoreLocation.path(invocation).hasPrefix(scheme), let state = invocation.value("--state"),
            StoreLocation.isPostgres(state)
        else { return nil }
        return state
    }

    /// `--store firebase:PROJECT --state postgresql://...`: the templates in Firebase, everything else on the
    /// PostgreSQL team store (the audit chain naming Firebase's versions and the publish intents through
    /// `PostgresFirebaseState`; operators, step-up, guardrail settings, telemetry and App Check state through the
    /// team store's own ports, as for `--store postgresql://...`). Nil for any other invocation. Only `init`
    /// (`create`) creates the schema and binds the database to the project.
    public static func teamSession(_ invocation: Invocation, create: Bool = false) throws -> TeamSession? {
        guard let project = try project(of: StoreLocation.path(invocation)), let conninfo = postgresState(invocation) else {
            return nil
        }
        let readOnly = invocation.flag("--read-only")
        let clock = SystemClock()
        // Adopting creates the team store key when this machine has none: the state store is sealed with it.
        let keyPath = Wiring.teamStoreKeyPath(invocation.environment)
        if create, !readOnly { _ = try Wiring.teamStoreKey(create: true, at: keyPath) }
        let state = try PostgresFirebaseState.open(
            conninfo: conninfo, project: project, create: create, readOnly: readOnly,
            sealing: try Wiring.teamSealing(keyPath: keyPath))
        let store = try configStore(project: project, state: state, invocation: invocation, clock: clock)
        if invocation.path.last == "console" { store.pollInterval = consolePollInterval }
        // As on a state file: settle what an interrupted process left behind before anything reads the log.
        if !readOnly && !create { _ = try? store.reconcile() }
        return TeamSession(
            location: "\(store.label), state \(PostgresConfigStore.redacted(conninfo))", config: state.store,
            operatorID: try Wiring.operatorID(invocation), readOnly: readOnly, clock: clock, keyPath: keyPath,
            stepUp: PostgresStepUpStore(store: state.store, key: try Wiring.teamStoreKey(create: false, at: keyPath).key),
            firebase: store,
            enforcement: try appCheckClient(project: project, invocation: invocation, clock: clock))
    }

    /// `rollout init --store firebase:PROJECT --state postgresql://...`: binds the database to the project and adopts
    /// the project's template (the rollout added as one publish); nil for any other invocation.
    public static func adoptWithTeamState(_ invocation: Invocation, seed: String, form: RemoteConfigTemplate.Form) throws
        -> TeamSession?
    {
        guard let team = try teamSession(invocation, create: true), let firebase = team.firebase else { return nil }
        try firebase.adoptOnce(label: firebase.label, seed: seed, form: form, actor: team.operatorID, time: team.clock.now())
        return team
    }

    /// The state store of `project`: `--state PATH`, else `firebase-PROJECT.db` in the per-user directory. Only
    /// `init` (`create`) creates and binds it; every other command refuses a missing one, creating nothing.
    static func stateStore(_ invocation: Invocation, project: String, create: Bool, readOnly: Bool) throws
        -> RolloutStore
    {
        let path =
            invocation.value("--state").flatMap { $0.isEmpty ? nil : $0 }
            ?? StoreLocation.directory(environment: invocation.environment) + "/"
            + FirebaseState.defaultFileName(project: project)
        return try FirebaseState.open(path: path, project: project, create: create, readOnly: readOnly)
    }

    /// The console's data source on a Firebase session, or nil for any other store: its own state-store connection
    /// and Firebase client for the fetch thread, polling every `consolePollInterval`.
    static func consoleSource(_ invocation: Invocation, session: StoreSession, clock: any Clock) throws
        -> StoreConsoleSource
    {
        guard let project = try project(of: session.path) else {
            throw CommandError("\(session.path) is not a Firebase store")
        }
        let state = try RolloutStore(path: session.store.path, create: false)
        let store = try configStore(
            project: project, state: try state.configStore(), invocation: invocation, clock: SystemClock())
        store.pollInterval = consolePollInterval
        return StoreConsoleSource(
            monitor: try RolloutMonitor(store: state, config: store, clock: clock)
                .readingEnforcement(of: session.enforcement),
            stepUp: SQLiteStepUpStore(store: state), plans: SQLiteRampPlans(store: state), storeLabel: session.path,
            operatorID: session.operatorID,
            readOnly: session.readOnly, project: project, autoKill: session)
    }

    /// The Firebase config store for `project`, with the invocation's credentials and endpoint.
    public static func configStore(
        project: String, state: any FirebaseStateStore, invocation: Invocation, clock: any Clock
    )
        throws -> FirebaseConfigStore
    {
        do {
            let api = try googleAPI(project: project, invocation: invocation, clock: clock)
            let client = RemoteConfigClient(
                endpoint: try RemoteConfigEndpoint.from(environment: invocation.environment), project: project,
                tokens: try api.tokens(ServiceAccountAssertion.remoteConfigScope), transport: api.transport,
                policy: api.policy)
            return FirebaseConfigStore(client: client, state: state, clock: clock)
        } catch let e as FirebaseError {
            throw CommandError("\(e)", exit: .usage)
        } catch let e as CredentialsError {
            throw CommandError("\(e)")
        }
    }

    /// The App Check API of `project` (`projects.services`: enforcement), with the invocation's credentials;
    /// `FIREBASE_APPCHECK_URL` overrides Google's endpoint.
    public static func appCheckClient(project: String, invocation: Invocation, clock: any Clock) throws
        -> AppCheckServicesClient
    {
        do {
            let api = try googleAPI(project: project, invocation: invocation, clock: clock)
            let caller = GoogleAPICaller(
                project: project, tokens: try api.tokens(AppCheckServicesClient.scope), transport: api.transport,
                policy: api.policy)
            return AppCheckServicesClient(
                endpoint: try AppCheckEndpoint.from(environment: invocation.environment), project: project,
                caller: caller)
        } catch let e as FirebaseError {
            throw CommandError("\(e)", exit: .usage)
        } catch let e as CredentialsError {
            throw CommandError("\(e)")
        }
    }

    /// What every Google API call of an invocation shares: the transport (TLS, CA bundle), the retry policy and
    /// timeout (`ROLLOUT_FIREBASE_TIMEOUT`), and the credentials (`--access-token-command`, else a service-account
    /// key file), giving tokens for a scope.
    struct GoogleAPI {
        var transport: CurlTransport
        var policy: RetryPolicy
        var tokens: (_ scope: String) throws -> AccessTokenProvider
    }

    static func googleAPI(project: String, invocation: Invocation, clock: any Clock) throws -> GoogleAPI {
        let env = invocation.environment
        var policy = RetryPolicy()
        if let t = env["ROLLOUT_FIREBASE_TIMEOUT"], !t.isEmpty {
            guard let s = Double(t), s > 0, s <= 600 else {
                throw CommandError("ROLLOUT_FIREBASE_TIMEOUT must be seconds between 0 and 600", exit: .usage)
            }
            policy.timeout = .seconds(s)
        }
        let transport = CurlTransport(caFile: CurlTransport.caFile(environment: env))
        let timeout = policy.timeout
        if let command = invocation.value("--access-token-command") ?? env["ROLLOUT_ACCESS_TOKEN_COMMAND"],
            !command.isEmpty
        {
            return GoogleAPI(transport: transport, policy: policy) { _ in CommandTokenProvider(command: command, clock: clock) }
        }
        if let file = invocation.value("--credentials") ?? env["GOOGLE_APPLICATION_CREDENTIALS"], !file.isEmpty {
            let key = try ServiceAccountKey.load(path: file)
            return GoogleAPI(transport: transport, policy: policy) { scope in
                try ServiceAccountTokenProvider(key: key, transport: transport, clock: clock, timeout: timeout, scope: scope)
            }
        }
        throw CommandError(
            "firebase:\(project) needs credentials: --credentials FILE (or $GOOGLE_APPLICATION_CREDENTIALS) or --access-token-command CMD",
            exit: .usage)
    }
}
