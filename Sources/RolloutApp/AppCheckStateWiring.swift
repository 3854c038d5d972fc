import AppCheck
import Glibc
import PostgresStore
import SQLiteStore

/// The App Check exchange's state of one store, whichever backend holds it: the commands that use it (`serve`,
/// `appcheck ...`, `token verify --consume`, `attest verify --trust-demo`, `simulate --exchange`) take the port.
public struct AppCheckStateSource {
    public let state: any AppCheckState
    /// Whether the connection refuses writes (`--read-only`): consuming a token or a challenge then fails.
    public let isReadOnly: Bool
    /// The store for messages (a PostgreSQL connection string with its password masked).
    public let label: String
    /// Ends the state store's waits for other connections' locks, now and from now on (`serve` past its drain).
    public let abandonLockWaits: @Sendable () -> Void
}

extension Wiring {
    /// A store location for messages: a PostgreSQL connection string with its password masked, a path as it is.
    public static func storeLabel(_ location: String) -> String {
        StoreLocation.isPostgres(location) ? PostgresConfigStore.redacted(location) : location
    }

    /// The App Check state at `location`: a PostgreSQL team store (`postgresql://...`, on a connection of its own,
    /// its private keys sealed with this machine's team store key) or an existing SQLite store file. Creates no
    /// store; read-only connections under `readOnly`.
    public static func appCheckState(location: String, readOnly: Bool, keyPath: String) throws -> AppCheckStateSource {
        if StoreLocation.isPostgres(location) {
            let config = try PostgresConfigStore(conninfo: location, readOnly: readOnly, sealing: try teamSealing(keyPath: keyPath))
            return AppCheckStateSource(
                state: PostgresAppCheckState(store: config, key: try teamStoreKey(create: false, at: keyPath).key),
                isReadOnly: readOnly,
                label: storeLabel(location),
                abandonLockWaits: { config.abandonLockWaits() })
        }
        let store = try RolloutStore(path: location, create: false, access: readOnly ? .readOnly : .readWrite)
        let tables = try AppCheckStateTables(database: store.database)
        return AppCheckStateSource(
            state: tables, isReadOnly: tables.isReadOnly, label: location,
            abandonLockWaits: { store.abandonLockWaits() })
    }
}
