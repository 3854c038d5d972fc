import Crypto
import Telemetry

/// The materialised rollout fold (`RolloutFold`): one row, derived from the telemetry counters.
///
/// Derived data, not sealed (the counters it is derived from are not sealed either). The row carries the SHA-256
/// of its bytes, so a row that was truncated or edited by hand without recomputing the digest is not trusted: it
/// is read as absent and the next reader folds from the rollout start again (and stores the result). Deleting the
/// row is always safe: the same refold. A consistent rewrite (bytes and digest) is as trusted as a rewrite of the
/// counters themselves: telemetry is input, not evidence.
public enum FoldTable {
    public static let schema = """
        CREATE TABLE IF NOT EXISTS telemetry_fold(
            id INTEGER PRIMARY KEY CHECK (id = 1), state BLOB NOT NULL, digest BLOB NOT NULL)
        """

    public static func createSchema(in db: SQLiteDatabase) throws(SQLiteError) {
        try db.createTables(["telemetry_fold"], schema)
    }

    /// The stored fold; nil when there is none or its bytes do not match their digest or do not decode.
    public static func load(from db: SQLiteDatabase) throws(SQLiteError) -> RolloutFold? {
        let s = try db.prepare("SELECT state, digest FROM telemetry_fold WHERE id = 1")
        defer { s.reset() }
        guard try s.step() else { return nil }
        let state = s.blob(0)
        guard SHA256.hash(state) == s.blob(1) else { return nil }
        return try? RolloutFold(decoding: state)
    }

    /// Replaces the stored fold (inside the caller's write transaction).
    public static func save(_ fold: RolloutFold, in db: SQLiteDatabase) throws(SQLiteError) {
        let state = fold.encoded()
        try db.run(
            "INSERT OR REPLACE INTO telemetry_fold(id, state, digest) VALUES (1, ?, ?)",
            [.blob(state), .blob(SHA256.hash(state))])
    }

    /// Drops the stored fold: the next reader folds from the start.
    public static func clear(in db: SQLiteDatabase) throws(SQLiteError) {
        try db.run("DELETE FROM telemetry_fold")
    }
}
