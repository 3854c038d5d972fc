import CommandLineKit
import Console
import Crypto
import FirebaseRemoteConfig
import WebClient
import Monitoring
import RemoteConfig
import Rollout
import StepUp
import SQLiteStore
import TelemetrySources
import Timekeeping

/// A store file opened (also Firebase's state file behind `firebase:`): the open store, who acts, and the one
/// write path built for them. Commands never see it: its opener, `rolloutSession`, gives them the backend's ports
/// as a `RolloutSession` (in-process users such as tests and benchmarks still open it by path).
public struct StoreSession {
    /// The store file as resolved from `--store`, `$ROLLOUT_STORE` or the default.
    public let path: String
    public let store: RolloutStore
    public let config: any SessionConfigStore
    public let operatorID: String
    public let readOnly: Bool
    public let clock: any Clock
    /// The App Check API of the Firebase project whose templates this session holds (nil for a store file):
    /// every change that takes the App Attest provider from users first lowers ENFORCED services
    /// (`EnforcementPolicy`).
    public var enforcement: AppCheckServicesClient? = nil

    /// The same session seen through another clock (a demo's simulated time).
    public func with(clock: any Clock) -> StoreSession {
        StoreSession(
            path: path, store: store, config: config, operatorID: operatorID, readOnly: readOnly, clock: clock,
            enforcement: enforcement)
    }

    /// The rollout with its telemetry and verdict, read from this store (with App Check enforcement on a Firebase
    /// project).
    public func monitor() throws -> RolloutMonitor {
        try RolloutMonitor(store: store, config: config, clock: clock).readingEnforcement(of: enforcement)
    }

    /// The write path every change of this command goes through (read-only and policies enforced inside).
    public func writePath() throws -> WritePath {
        let stepUp = try store.withDatabase { try OperatorTables.policy(in: $0) }
        return WritePath(
            store: config, clock: clock, policies: try Wiring.policies(for: self), readOnlyCause: store.readOnlyCause,
            requireReasonForIncrease: stepUp.reasonForIncrease, newSeed: { Wiring.newSeed() })
    }
}

/// Builds the pieces a command needs from its invocation: the only place that picks real adapters (the SQLite
/// store, the system clock, the secure random source) and the write policies.
public enum Wiring {
    /// `updateOrigin` of versions published from the CLI.
    public static let origin = "ROLLOUT_CLI"

    /// The policies every write passes through, in order: the telemetry guardrail (verdict and attestation
    /// budget), then step-up verification.
    public static func policies(for session: StoreSession) throws -> [WritePolicy] {
        // The guardrail's monitor reads no App Check enforcement (`RolloutMonitor.enforcement`).
        [
            try RolloutMonitor(store: session.store, config: session.config, clock: session.clock).guardrailPolicy(),
            try StepUpWritePolicy(store: session.store, clock: session.clock),
        ]
            + (session.enforcement.map { [EnforcementPolicy(client: $0, clock: session.clock)] } ?? [])
    }

    /// A fresh rollout seed: `rollout-` and 8 random hex digits.
    public static func newSeed() -> String { "rollout-" + Hex.encode(SecureRandom.bytes(4)) }

    /// Opens the invocation's existing store, read-only under `--read-only` (the connection refuses every write):
    /// the one place that picks the backend. `--store firebase:PROJECT` with a PostgreSQL `--state`, or with a state
    /// file; `--store postgresql://...`; else a store file.
    ///
    /// Never creates anything: a missing, empty or foreign store is an error naming it (`rollout init` creates
    /// stores); `--store ""` is a usage error.
    public static func session(_ invocation: Invocation) throws -> RolloutSession {
        if let team = try FirebaseWiring.teamSession(invocation) { return team.rolloutSession }
        if let firebase = try FirebaseWiring.rolloutSession(invocation) { return firebase }
        let location = try StoreLocation.resolvedPath(invocation)
        let operatorID = try operatorID(invocation)
        let readOnly = invocation.flag("--read-only")
        if StoreLocation.isPostgres(location) {
            return try teamSession(
                conninfo: location, operatorID: operatorID, readOnly: readOnly,
                keyPath: teamStoreKeyPath(invocation.environment)
            ).rolloutSession
        }
        return try session(path: location, operatorID: operatorID, readOnly: readOnly).rolloutSession()
    }

    /// The same for a given store file (in-process users: the demo, benchmarks). The store must exist.
    public static func session(path: String, operatorID: String, readOnly: Bool = false, clock: any Clock = SystemClock())
        throws -> StoreSession
    {
        let session = try open(path: path, operatorID: operatorID, readOnly: readOnly, clock: clock)
        // A store file without a version (an init killed before its first version) is not a rollout yet: say so
        // instead of drawing a seed.
        if try session.config.versions(limit: 1, before: nil).isEmpty {
            throw StoreError.unavailable(
                "\(path) has no version yet (its init did not finish): run 'rollout init --store \(path)' to complete it")
        }
        return session
    }

    /// Creates a new store at `path` holding version 1 (the rollout's starting template on `seed`): `rollout
    /// init` (and benchmarks).
    ///
    /// Refuses a store that has a version. A file left by an init that was killed before its first version (a
    /// zero-length file, or a rollout store with no version) is completed, so a crash never leaves a path that
    /// neither init nor the other commands accept; every other file, and a key or witness left without its store,
    /// is refused by `RolloutStore`.
    public static func createStore(
        path: String, seed: String, form: RemoteConfigTemplate.Form = .client, operatorID: String,
        clock: any Clock = SystemClock()
    ) throws -> StoreSession {
        try create(path: path, seed: seed, form: form, operatorID: operatorID, time: clock.now(), clock: clock)
    }

    /// Creates the drill store of `simulate` or `demo` (`command`), the way `rollout init` creates a store, and
    /// marks it as a drill store.
    ///
    /// Only where nothing is yet: an existing file (an empty one included), or a key or witness without its
    /// store, is refused with a one-line error naming the path, and nothing is created or changed. A zero-length
    /// file is not a store to complete here: it may be what is left of a store emptied behind its operators' back,
    /// and a new store in its place would have step-up off and a new witness. `init` is the only command that
    /// completes an interrupted init.
    public static func createDrillStore(
        path: String, seed: String, operatorID: String, time: Instant, by command: String
    ) throws -> RolloutStore {
        let session = try create(
            path: path, seed: seed, form: .client, operatorID: operatorID, time: time, clock: SystemClock(),
            newPathOnly: true)
        try session.store.withDatabase { try DrillStoreMark.mark($0, at: time, by: command) }
        return session.store
    }

    /// The one way a store file is created: `createStore` and `createDrillStore` (see `RolloutStore` for what
    /// every creation refuses).
    private static func create(
        path: String, seed: String, form: RemoteConfigTemplate.Form, operatorID: String, time: Instant,
        clock: any Clock, newPathOnly: Bool = false
    ) throws -> StoreSession {
        guard !path.isEmpty else { throw StoreError.unavailable("the store path is empty (--store needs a file path)") }
        let store = try RolloutStore(path: path, create: true, access: .readWrite, newPathOnly: newPathOnly)
        let session = StoreSession(
            path: path, store: store, config: try store.configStore(), operatorID: operatorID, readOnly: false, clock: clock)
        let created = try session.config.initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: seed, form: form, actor: operatorID, time: time)
        }
        guard created else {
            throw StoreError.unavailable(
                "a store already exists at \(path) (version \(try session.config.current().info.number)); init only creates new stores")
        }
        return session
    }

    /// What `rollout init` made: the new store's session, and the team store key it created (its path; nil when
    /// none was created).
    public struct Created {
        public let session: RolloutSession
        public let createdKey: String?
    }

    /// `rollout init` for the invocation's store, whichever backend (the same choice as `session(_:)`): a new store
    /// file, a new PostgreSQL team store (sealed with the team store key, created when this machine has none), or
    /// the adoption of a Firebase project's template (the rollout added to it as one publish) with a new state
    /// store (a file, or a PostgreSQL database bound to the project).
    public static func createStore(_ invocation: Invocation, seed: String, form: RemoteConfigTemplate.Form) throws
        -> Created
    {
        if let team = try FirebaseWiring.adoptWithTeamState(invocation, seed: seed, form: form) {
            return Created(session: team.rolloutSession, createdKey: nil)
        }
        if let firebase = try FirebaseWiring.session(invocation, create: true) {
            try firebase.config.adoptOnce(
                label: firebase.path, seed: seed, form: form, actor: firebase.operatorID, time: firebase.clock.now())
            return Created(session: firebase.rolloutSession(), createdKey: nil)
        }
        let location = try StoreLocation.resolvedPath(invocation)
        let operatorID = try operatorID(invocation)
        if StoreLocation.isPostgres(location) {
            let (team, createdKey) = try createTeamStore(
                conninfo: location, seed: seed, form: form, operatorID: operatorID,
                keyPath: teamStoreKeyPath(invocation.environment))
            return Created(session: team.rolloutSession, createdKey: createdKey)
        }
        return Created(
            session: try createStore(path: location, seed: seed, form: form, operatorID: operatorID).rolloutSession(),
            createdKey: nil)
    }

    /// Opens an existing store (never creates one: see `create`).
    static func open(path: String, operatorID: String, readOnly: Bool, clock: any Clock) throws -> StoreSession {
        let store = try RolloutStore(path: path, create: false, access: readOnly ? .readOnly : .readWrite)
        return StoreSession(
            path: path, store: store, config: try store.configStore(), operatorID: operatorID, readOnly: readOnly, clock: clock)
    }

    /// `--operator`, `$ROLLOUT_OPERATOR` or `user@host`, checked to be one printable line.
    public static func operatorID(_ invocation: Invocation) throws -> String {
        let id = StoreLocation.operatorID(invocation)
        guard id.count <= 256, !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw invocation.usageError("the operator id must be one printable line of at most 256 characters")
        }
        return id
    }
}

extension StoreSession {
    /// The opener of a store file's session (also Firebase's state file behind `firebase:`): every port on the one
    /// SQLite store, the templates in `config`. `console` replaces the console's picture (Firebase polls its own
    /// client; nil: the store file's picture, headed `project`).
    public func rolloutSession(
        project: String = "embedded", console: ((_ clock: any Clock) throws -> any RolloutConsoleSource)? = nil
    ) -> RolloutSession {
        let store = store
        let config = config
        return RolloutSession(
            label: path, displayLabel: path, operatorID: operatorID,
            readOnlyCause: store.readOnlyCause ?? (readOnly ? .requested : nil), clock: clock,
            templates: config, stepUp: SQLiteStepUpStore(store: store), plans: SQLiteRampPlans(store: store),
            settings: SQLiteSettingsBackend(session: self), monitored: store, heartbeat: store,
            ports: RolloutSession.Ports(
                writePath: writePath,
                planSession: { planSession },
                appCheckServices: { [enforcement] in enforcement },
                separateTelemetryCounters: { try store.telemetryCounters() },
                appCheckState: { try Wiring.appCheckState(location: store.path, readOnly: readOnly, keyPath: "") },
                isDrillStore: { try store.withDatabase { try DrillStoreMark.isDrill($0) } },
                verifyConfigIntegrity: { _ = try config.verifyIntegrity() },
                verifyAudit: {
                    let full = try store.verify(configIntegrity: config.verifyIntegrity)
                    return AuditVerification(
                        auditRecords: full.config.auditRecords, versions: full.config.versions,
                        headHash: full.config.headHash, headSequence: full.config.headSequence,
                        sealedTables: full.sealedTables, sealKey: "the store key", stateDigest: full.stateDigest,
                        databaseIntegrityChecked: true, witnessPath: full.witnessPath, witnessLine: full.witnessLine)
                },
                consoleSource: { header, clock in
                    if let console { return try console(clock) }
                    return try StoreConsoleSource(
                        path: path, clock: clock, operatorID: operatorID, readOnly: readOnly,
                        project: header ?? project, autoKill: self)
                },
                // Ticked by the console's input thread: a connection of its own that never waits for a lock.
                telemetryClock: { try StoreSimulationClock(path: store.path, wall: clock) },
                sourceState: { store },
                storeLost: { store.identityProblem().map { "\(path): \($0)" } },
                abandonLockWaits: { store.abandonLockWaits() }))
    }
}
