import CommandLineKit
import Crypto
import RemoteConfig
import Rollout
import Store
import Timekeeping

/// What a store command works with: the open store, who acts, and the one write path built for them.
struct StoreSession {
    /// The store file as resolved from `--store`, `$ROLLOUT_STORE` or the default.
    let path: String
    let store: RolloutStore
    let config: SQLiteConfigStore
    let operatorID: String
    let readOnly: Bool
    let clock: any Clock

    /// The same session seen through another clock (a demo's simulated time).
    func with(clock: any Clock) -> StoreSession {
        StoreSession(path: path, store: store, config: config, operatorID: operatorID, readOnly: readOnly, clock: clock)
    }

    /// The rollout with its telemetry and verdict, read from this store.
    func monitor() throws -> RolloutMonitor { try RolloutMonitor(store: store, clock: clock) }

    /// The write path every change of this command goes through (read-only and policies enforced inside).
    func writePath() throws -> WritePath {
        WritePath(
            store: config, clock: clock, policies: try Wiring.policies(for: self), readOnly: readOnly,
            newSeed: { Wiring.newSeed() })
    }
}

/// Builds the pieces a command needs from its invocation: the only place that picks real adapters (the SQLite
/// store, the system clock, the secure random source) and the write policies.
enum Wiring {
    /// `updateOrigin` of versions published from the CLI.
    static let origin = "ROLLOUT_CLI"

    /// The policies every write passes through, in order: the telemetry guardrail (verdict and attestation
    /// budget), then step-up verification.
    static func policies(for session: StoreSession) throws -> [WritePolicy] {
        [try session.monitor().guardrailPolicy(), try StepUpWritePolicy(store: session.store, clock: session.clock)]
    }

    /// A fresh rollout seed: `rollout-` and 8 random hex digits.
    static func newSeed() -> String { "rollout-" + Hex.encode(SecureRandom.bytes(4)) }

    /// Opens the invocation's store; a missing or empty store is created on first use with a random seed,
    /// except under `--read-only`, which never creates anything.
    static func session(_ invocation: Invocation) throws -> StoreSession {
        let session = try open(invocation, create: !invocation.flag("--read-only"))
        if !session.readOnly {
            try session.config.initializeIfEmpty {
                try SQLiteConfigStore.genesis(seed: newSeed(), actor: session.operatorID, time: session.clock.now())
            }
        }
        return session
    }

    /// Opens (with `create`, creating the file of) the invocation's store without adding a version.
    static func open(_ invocation: Invocation, create: Bool) throws -> StoreSession {
        let operatorID = try self.operatorID(invocation)
        let path = StoreLocation.path(invocation)
        let store = try RolloutStore(path: path, create: create)
        return StoreSession(
            path: path, store: store, config: try store.configStore(), operatorID: operatorID,
            readOnly: invocation.flag("--read-only"),
            clock: SystemClock())
    }

    /// `--operator`, `$ROLLOUT_OPERATOR` or `user@host`, checked to be one printable line.
    static func operatorID(_ invocation: Invocation) throws -> String {
        let id = StoreLocation.operatorID(invocation)
        guard id.count <= 256, !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw invocation.usageError("the operator id must be one printable line of at most 256 characters")
        }
        return id
    }
}
