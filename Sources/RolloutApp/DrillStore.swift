import CommandLineKit
import Platform
import Rollout
import SQLiteStore
import Timekeeping

extension Wiring {
    /// Makes sure a simulation may write into the store at `path` (`simulate`, `demo`), then opens its session as
    /// `actor` on the wall clock: where nothing is yet, a new drill store (on `seed`; see `createDrillStore`, which
    /// refuses a zero-length file or a leftover key or witness); an existing store must be a drill store, or
    /// `onOrdinaryStore` (`--on-ordinary-store`) is given and recorded in its audit log by `operatorID`.
    ///
    /// Simulations write into a store file: the drill store is the demo's and the drills' own, never a team's or a
    /// Firebase project's (`SessionRefusal.unsupported`, before anything is created).
    public static func drillSession(
        path: String, seed: String, actor: String, operatorID: () throws -> String, command: String, scenario: String,
        onOrdinaryStore: Bool, start: Instant?, clock: any Clock
    ) throws -> RolloutSession {
        if StoreLocation.isPostgres(path) || path.hasPrefix(FirebaseWiring.scheme) {
            throw SessionRefusal(
                .unsupported,
                "refused: '\(command)' writes simulated telemetry into a drill store file, and \(storeLabel(path)) is not "
                    + "a file; give --store a new file path (created as a drill store): nothing was created")
        }
        do {
            if Files.isDirectory(path) == nil {
                // A new store gets the scenario's rollout seed, so that runs on fresh stores assign the same cohorts.
                _ = try createDrillStore(
                    path: path, seed: seed, operatorID: actor, time: start ?? clock.now(), by: command)
            } else {
                let store = try RolloutStore(path: path, create: false)
                if try !store.withDatabase({ try DrillStoreMark.isDrill($0) }) {
                    guard onOrdinaryStore else {
                        throw CommandError(
                            "refused: \(path) is not a drill store, and '\(command)' writes simulated telemetry and scripted "
                                + "changes into it; give a new --store path (created as a drill store), or --on-ordinary-store "
                                + "(recorded in the audit log)", exit: .refused)
                    }
                    _ = try store.configStore().appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: try operatorID(), action: "\(command) on an ordinary store",
                            reason: "--on-ordinary-store", result: .recorded,
                            detail: "scenario \(scenario): simulated telemetry and scripted changes as simulator"))
                }
            }
            return try session(path: path, operatorID: actor, clock: clock).rolloutSession()
        } catch let e as CommandError {
            throw e
        } catch {
            throw CommandError("\(error)")
        }
    }
}
