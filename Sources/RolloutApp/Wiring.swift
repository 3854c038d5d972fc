import CommandLineKit
import Crypto
import RemoteConfig
import Rollout
import Store
import Timekeeping

/// What a store command works with: the open store, who acts, and the one write path built for them.
public struct StoreSession {
    /// The store file as resolved from `--store`, `$ROLLOUT_STORE` or the default.
    public let path: String
    public let store: RolloutStore
    public let config: any SessionConfigStore
    public let operatorID: String
    public let readOnly: Bool
    public let clock: any Clock

    /// The same session seen through another clock (a demo's simulated time).
    public func with(clock: any Clock) -> StoreSession {
        StoreSession(path: path, store: store, config: config, operatorID: operatorID, readOnly: readOnly, clock: clock)
    }

    /// The rollout with its telemetry and verdict, read from this store.
    public func monitor() throws -> RolloutMonitor { try RolloutMonitor(store: store, config: config, clock: clock) }

    /// The write path every change of this command goes through (read-only and policies enforced inside).
    public func writePath() throws -> WritePath {
        WritePath(
            store: config, clock: clock, policies: try Wiring.policies(for: self), readOnly: readOnly,
            newSeed: { Wiring.newSeed() })
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
        [try session.monitor().guardrailPolicy(), try StepUpWritePolicy(store: session.store, clock: session.clock)]
    }

    /// A fresh rollout seed: `rollout-` and 8 random hex digits.
    public static func newSeed() -> String { "rollout-" + Hex.encode(SecureRandom.bytes(4)) }

    /// Opens the invocation's store; a missing or empty store is created on first use with a random seed,
    /// except under `--read-only`, which never creates anything.
    public static func session(_ invocation: Invocation) throws -> StoreSession {
        if let firebase = try FirebaseWiring.session(invocation, create: false) { return firebase }
        return try session(
            path: StoreLocation.path(invocation), operatorID: try operatorID(invocation), readOnly: invocation.flag("--read-only"))
    }

    /// The same for a given store file (in-process users: the demo, benchmarks).
    public static func session(path: String, operatorID: String, readOnly: Bool = false, clock: any Clock = SystemClock())
        throws -> StoreSession
    {
        let session = try open(path: path, operatorID: operatorID, readOnly: readOnly, create: !readOnly, clock: clock)
        if !session.readOnly {
            try session.config.initializeIfEmpty {
                try SQLiteConfigStore.genesis(seed: newSeed(), actor: session.operatorID, time: session.clock.now())
            }
        }
        return session
    }

    /// Opens (with `create`, creating the file of) the invocation's store without adding a version.
    public static func open(_ invocation: Invocation, create: Bool) throws -> StoreSession {
        if let firebase = try FirebaseWiring.session(invocation, create: create) { return firebase }
        return try open(
            path: StoreLocation.path(invocation), operatorID: try operatorID(invocation), readOnly: invocation.flag("--read-only"),
            create: create, clock: SystemClock())
    }

    static func open(path: String, operatorID: String, readOnly: Bool, create: Bool, clock: any Clock) throws -> StoreSession {
        let store = try RolloutStore(path: path, create: create)
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
