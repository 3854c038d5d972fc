import CommandLineKit
import PostgresStore
import RemoteConfig
import Rollout
import Store
import Timekeeping

// The team store on PostgreSQL (`--store postgresql://...` or `postgres://...`), kept apart from the SQLite
// wiring so the two routes stay easy to see.

extension StoreLocation {
    /// Whether a store location names a PostgreSQL store: a libpq connection URI (`postgresql://` or
    /// `postgres://`; libpq takes what the URI leaves out from the `PG*` environment variables).
    public static func isPostgres(_ location: String) -> Bool {
        location.hasPrefix("postgresql://") || location.hasPrefix("postgres://")
    }
}

/// What a command works with on a PostgreSQL store: the open store, who acts, and the write path.
///
/// The write path has the core's own rules (validation, the reason for every increase, compare-and-swap, the
/// audit record in the same transaction) but no guardrail or step-up policy yet: telemetry, operators and
/// step-up state are not on PostgreSQL yet (a store without enrolled operators has no step-up on SQLite either).
public struct TeamSession {
    /// The connection string with any password masked, for messages.
    public let location: String
    public let config: PostgresConfigStore
    public let operatorID: String
    public let readOnly: Bool
    public let clock: any Clock

    public func writePath() -> WritePath {
        WritePath(
            store: config, clock: clock, policies: [], readOnly: readOnly, requireReasonForIncrease: true,
            newSeed: { Wiring.newSeed() })
    }
}

extension Wiring {
    /// The invocation's PostgreSQL store, or nil when `--store` names a file. Read-only under `--read-only` (the
    /// connection's transactions are READ ONLY). Creates and migrates nothing.
    public static func teamSession(_ invocation: Invocation) throws -> TeamSession? {
        let location = try StoreLocation.resolvedPath(invocation)
        guard StoreLocation.isPostgres(location) else { return nil }
        let readOnly = invocation.flag("--read-only")
        return TeamSession(
            location: PostgresConfigStore.redacted(location),
            config: try PostgresConfigStore(conninfo: location, readOnly: readOnly), operatorID: try operatorID(invocation),
            readOnly: readOnly, clock: SystemClock())
    }

    /// `rollout init` on PostgreSQL: the schema and version 1 (the same genesis as a new SQLite store).
    public static func createTeamStore(
        conninfo: String, seed: String, form: RemoteConfigTemplate.Form, operatorID: String, clock: any Clock = SystemClock()
    ) throws -> TeamSession {
        let store = try PostgresConfigStore.create(conninfo: conninfo) {
            try SQLiteConfigStore.genesis(seed: seed, form: form, actor: operatorID, time: clock.now())
        }
        return TeamSession(
            location: PostgresConfigStore.redacted(conninfo), config: store, operatorID: operatorID, readOnly: false, clock: clock)
    }
}
