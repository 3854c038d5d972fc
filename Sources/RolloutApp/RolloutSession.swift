import AppCheck
import Console
import FirebaseRemoteConfig
import Monitoring
import PostgresStore
import RampPlans
import Rollout
import SecurityKey
import StepUp
import SQLiteStore
import Telemetry
import TelemetrySources
import Timekeeping

/// One session of the core's ports, whichever backend holds them: what every command, the console, `watch`,
/// `plan run` and `serve` work with.
///
/// Each backend has one opener that builds it (`StoreSession.rolloutSession` for a store file and Firebase with a
/// state file, `TeamSession.rolloutSession` for PostgreSQL and Firebase with a PostgreSQL state), and
/// `Wiring.session(_:)` is the one place that picks the backend. Callers never ask which backend they hold; an
/// operation a backend cannot do is a typed refusal of its port (`SessionRefusal`).
public struct RolloutSession {
    /// The store for messages and JSON: a path, a PostgreSQL connection string with its password masked, or
    /// `firebase:PROJECT` (with its state store when that is PostgreSQL).
    public let label: String
    /// The store as `status` and the console header show it (the label, with its kind where that helps).
    public let displayLabel: String
    /// Who acts.
    public let operatorID: String
    /// Why this session refuses every write (`--read-only`, or a connection that refuses every write), nil when it
    /// writes.
    public let readOnlyCause: ReadOnlyCause?
    public var readOnly: Bool { readOnlyCause != nil }
    /// Wall time: step-up, lockouts, audit times.
    public let clock: any Clock
    /// Where the templates live (versions, compare-and-swap, the audit chain).
    public let templates: any ConfigStore
    /// Operators, enrolments, the step-up policy and lockouts.
    public let stepUp: any StepUpStore
    /// The ramp plan and its pre-approval.
    public let plans: any RampPlanStore
    /// The settings write path's tables (operators, step-up policy, guardrail settings, App Check registrations).
    public let settings: any SettingsBackend
    /// What the monitor reads: telemetry counters, guardrail settings, the rollout start cache.
    public let monitored: any MonitoredStore
    /// The simulation heartbeat: telemetry time of a store a simulation writes into.
    public let heartbeat: any SimulationHeartbeat

    let ports: Ports

    /// What differs per backend beyond the ports above, each built by the backend's opener.
    struct Ports {
        var writePath: () throws -> WritePath
        var planSession: () -> PlanSession
        /// The App Check API of the Firebase project whose templates this session holds; nil elsewhere.
        var appCheckServices: () -> AppCheckServicesClient?
        /// Counters on a connection of their own (`serve`'s intake, so batches do not queue behind the monitor).
        var separateTelemetryCounters: () throws -> any TelemetryCounters
        var appCheckState: () throws -> AppCheckStateSource
        var isDrillStore: () throws -> Bool
        var verifyConfigIntegrity: () throws -> Void
        var verifyAudit: () throws -> AuditVerification
        var consoleSource: (_ project: String?, _ clock: any Clock) throws -> any RolloutConsoleSource
        var telemetryClock: () throws -> any Clock
        /// Where telemetry sources keep their watermarks and ledgers (`SessionSources`).
        var sourceState: () throws -> any SourceStateStore
        /// Why the store file is no longer the one this session opened (`PATH: problem`: removed, replaced,
        /// truncated), nil while it is; always nil for a store with no file to lose (PostgreSQL).
        var storeLost: () -> String?
        /// Ends the waits of the session's store connection for other connections' locks (`abandonLockWaits`).
        var abandonLockWaits: () -> Void
    }

    /// The rollout with its telemetry and verdict, read from this store (with App Check enforcement on a Firebase
    /// project).
    public func monitor() throws -> RolloutMonitor {
        try RolloutMonitor(store: monitored, config: templates, clock: clock)
            .readingEnforcement(of: ports.appCheckServices())
    }

    /// The same on a simulation's own telemetry time (a simulation running in this process).
    public func monitor(telemetryClock: any Clock) throws -> RolloutMonitor {
        try RolloutMonitor(store: monitored, config: templates, clock: clock, telemetryClock: telemetryClock)
    }

    /// The write path every rollout change goes through (read-only, validation, guardrail and step-up inside).
    public func writePath() throws -> WritePath { try ports.writePath() }

    /// The settings write path (operators, step-up policy, guardrail settings, App Check registrations).
    public func settingsWritePath() -> SettingsWritePath { SettingsWritePath(backend: settings, clock: clock) }

    /// What the plan commands and the runner work with on this store.
    public var planSession: PlanSession {
        var plan = ports.planSession()
        plan.enforcement = { try self.enforcement() }
        return plan
    }

    /// App Check enforcement of the Firebase project this session's templates live in; any other store refuses
    /// (`SessionRefusal.unsupported`, exit 4): enforcement is a Firebase project's setting.
    public func enforcement() throws -> EnforcementPath {
        guard let client = ports.appCheckServices() else {
            throw SessionRefusal(
                .unsupported,
                "refused: App Check enforcement is a Firebase project's setting: run it with --store firebase:PROJECT; nothing was read or written")
        }
        return EnforcementPath(session: self, client: client)
    }

    /// The telemetry counters `ingest` lands batches in.
    public func telemetryCounters() throws -> any TelemetryCounters { try monitored.telemetryCounters() }

    /// The same counters on a connection of their own, for a server taking batches while it monitors.
    public func separateTelemetryCounters() throws -> any TelemetryCounters { try ports.separateTelemetryCounters() }

    /// The App Check exchange's state of this store.
    public func appCheckState() throws -> AppCheckStateSource { try ports.appCheckState() }

    /// Whether simulations write into this store (a drill store of `simulate` or `demo`).
    public func isDrillStore() throws -> Bool { try ports.isDrillStore() }

    /// `audit verify`: the chain, the versions, the seal and the witness; throws a `ConfigIntegrityProblem` or
    /// `AuditVerificationFailure` naming what fails.
    public func verifyAudit() throws -> AuditVerification { try ports.verifyAudit() }

    /// Telemetry time: the wall clock, or a live simulation's time on a drill store (the console's ticks).
    public func telemetryClock() throws -> any Clock { try ports.telemetryClock() }

    /// The console's picture of this store; `project` names it in the header (nil: the store's own name).
    public func consoleSource(project: String? = nil) throws -> any RolloutConsoleSource {
        let source = try ports.consoleSource(project, clock)
        guard let client = ports.appCheckServices() else { return source }
        return EnforcementConsoleSource(inner: source, client: client, clock: clock)
    }

    /// Ends the waits of this session's store connection for locks other connections hold, now and from now on:
    /// a call waiting for one fails at once, and so does every later call that meets one (`serve` stopping past
    /// its drain); the PostgreSQL store's separate telemetry counters' connections with it. The App Check state's
    /// connections are its own (`AppCheckStateSource.abandonLockWaits`).
    public func abandonLockWaits() { ports.abandonLockWaits() }

    /// The headless loop of `watch` and `follow` (no plan) or `plan run` (`plan`) on this store; read-only sessions
    /// only look. A look on a store file that was removed or replaced meanwhile fails, naming it.
    public func headlessLoop(plan: Bool = false) throws -> HeadlessLoop {
        try HeadlessLoop(planSession: planSession, plan: plan, storeLost: ports.storeLost)
    }
}

/// The console's picture of a store, and the assessment it is drawn from (for the console's stale limit).
public protocol RolloutConsoleSource: ConsoleDataSource {
    func status() throws -> RolloutMonitor.Status
}

extension StoreConsoleSource: RolloutConsoleSource {}
extension PostgresConsoleSource: RolloutConsoleSource {}

extension RolloutSession: ConsoleWriteSession {
    public var consoleConfig: any ConfigStore { templates }
    public func verifyConfigIntegrity() throws { try ports.verifyConfigIntegrity() }
    public func approveTwoPersonRequest(
        _ id: String, device: () throws -> SecurityKeyDevice, pin: String?, timeoutMilliseconds: Int?,
        cancellation: SecurityKeyCancellation?
    ) throws -> WritePath.Outcome {
        try StepUpMethods.approveRequest(
            id, session: self, device: device, pin: pin, timeoutMilliseconds: timeoutMilliseconds,
            cancellation: cancellation, notice: { _ in })
    }
}

/// What `audit verify` found intact, whichever backend.
public struct AuditVerification: Sendable {
    public var auditRecords: Int
    public var versions: Int
    public var headHash: String
    /// The newest record's sequence number.
    public var headSequence: Int64
    /// The tables whose contents match the seal.
    public var sealedTables: [String]
    /// What the seal is checked with ("the store key", "the team store key").
    public var sealKey: String
    /// The digest of the sealed state, where the backend records one.
    public var stateDigest: String?
    /// The database's own integrity check, where the backend has one.
    public var databaseIntegrityChecked: Bool
    /// The witness file beside the store (or its key) and its line.
    public var witnessPath: String
    public var witnessLine: String
}

/// `audit verify` cannot check something as this connection (the PostgreSQL viewer role may not read every sealed
/// table): a failure to report, never a seal shown as checked.
public struct AuditVerificationFailure: Error, CustomStringConvertible, Sendable {
    public var description: String
}

/// An operation the session refuses, nothing written: a write refused because of access (`--read-only`, or a
/// role the store does not allow to write, the PostgreSQL viewer), or an operation this backend cannot do. The same
/// outcome on every backend (the CLI's exit 4).
public struct SessionRefusal: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable, Equatable {
        /// The connection is read-only (`--read-only`, or a read-only file).
        case readOnly
        /// The store refused this role the write (PostgreSQL: insufficient privilege).
        case permissionDenied
        /// The backend cannot do this: a simulation (`simulate`, `demo`) writes only into a drill store file, never
        /// into a team store or a Firebase project.
        case unsupported
    }

    public var kind: Kind
    public var description: String

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }
}

extension SessionRefusal {
    /// The access refusal a backend's error stands for (a read-only connection, a role the store does not let
    /// write), nil for any other error: what lets every backend's refusal end the same way.
    public init?(_ error: any Error) {
        switch error {
        case let r as SessionRefusal: self = r
        case let e as SQLiteError where e.isReadOnly: self.init(.readOnly, e.message)
        case let e as PostgresStoreError: self.init(.readOnly, e.description)
        case let e as PostgresError where e.isReadOnlyRefusal: self.init(.readOnly, e.description)
        case let e as PostgresError where e.sqlState == "42501":
            self.init(
                .permissionDenied,
                "refused: this role may not change the store, nothing was written (\(e.message)); "
                    + "run it as a role that may write (docs/POSTGRES.md)")
        default: return nil
        }
    }
}

/// A backend's failure other than a refusal, as the CLI reports it: a busy store (try again) or a store error.
public struct StoreFault: Error, CustomStringConvertible, Sendable {
    /// Another process (another session) held the store's write lock, or a lock the write needed, too long.
    public var isBusy: Bool
    public var description: String

    /// The fault a backend's error stands for; nil for an error that is not a backend's.
    public init?(_ error: any Error) {
        switch error {
        case let e as SQLiteError:
            isBusy = e.isBusy
            description = e.message
        case let e as PostgresError:
            isBusy = e.isLockTimeout
            description = e.description
        default: return nil
        }
    }
}

extension AppCheckStateSource {
    /// Refuses a write before it is tried when the connection is read-only (the same refusal its write would be).
    public func refuseWritesIfReadOnly() throws {
        if isReadOnly {
            throw SessionRefusal(.readOnly, "refused: \(label) is open read-only (--read-only); nothing was written")
        }
    }
}
