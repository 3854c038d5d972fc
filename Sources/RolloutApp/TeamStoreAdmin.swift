import CommandLineKit
import PostgresStore
import Rollout
import SQLiteStore
import StoreCopy

// The team store's own administration (`rollout store migrate`, `rollout store copy`): commands about one backend by
// nature (its schema; a file copied into it), kept here so that the executable only parses and prints.

extension Wiring {
    /// What `store migrate` did: the schema steps applied (none when it was current) and the schema now.
    public struct Migration {
        public let applied: [Int]
        public let schema: Int
    }

    /// `rollout store migrate`: the missing schema migrations of the invocation's PostgreSQL store (or a Firebase
    /// project's PostgreSQL state store), forward only. A file store is a usage error (it migrates when opened);
    /// `--read-only` is refused like any write.
    public static func migrateTeamStore(_ invocation: Invocation) throws -> Migration {
        let location = try FirebaseWiring.postgresState(invocation) ?? StoreLocation.resolvedPath(invocation)
        guard StoreLocation.isPostgres(location) else {
            throw CommandError(
                "store migrate is for PostgreSQL stores (--store postgresql://...); a file store migrates when opened",
                exit: .usage)
        }
        guard !invocation.flag("--read-only") else { throw WritePath.Failure.readOnly(.requested) }
        let key = try teamStoreKey(create: false, at: teamStoreKeyPath(invocation.environment)).key
        return Migration(
            applied: try PostgresSchema.migrate(
                conninfo: location, sealKey: key.map { PostgresSealKey(teamKey: $0.bytes, path: $0.path) }),
            schema: PostgresSchema.current)
    }

    /// What `store copy` did: the copy's report, and the team store key it created (its path; nil when this
    /// machine had one).
    public struct TeamStoreCopy {
        public let report: PostgresStoreCopy.Report
        public let createdKey: String?
    }

    /// `rollout store copy --from FILE --to URI`: an SQLite store copied into an empty PostgreSQL database, all or
    /// nothing (see `PostgresStoreCopy`), sealed with the team store key (created when this machine has none).
    /// `to` must name a PostgreSQL database (a usage error otherwise).
    public static func copyToTeamStore(
        from path: String, to conninfo: String, invocation: Invocation,
        progress: (_ done: Int64, _ total: Int64) -> Void
    ) throws -> TeamStoreCopy {
        guard StoreLocation.isPostgres(conninfo) else {
            throw invocation.usageError("store copy needs --to postgresql://...")
        }
        guard !invocation.flag("--read-only") else { throw WritePath.Failure.readOnly(.requested) }
        let source = try RolloutStore(path: path, create: false, access: .readOnly)
        var createdKey: String?
        let report = try PostgresStoreCopy.copy(
            from: source, to: conninfo,
            teamKey: {
                let (key, created) = try teamStoreKey(create: true, at: teamStoreKeyPath(invocation.environment))
                if created { createdKey = key?.path }
                return key
            },
            progress: progress)
        return TeamStoreCopy(report: report, createdKey: createdKey)
    }
}
