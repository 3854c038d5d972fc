/// Reads of sealed state that something acts on outside the store.
extension PostgresConfigStore {
    /// Runs `body` in one read-only snapshot whose first step checks the seal, as `verifySeal` does: for sealed rows
    /// that something acts on outside the store, where the next write's check would come too late (a telemetry
    /// source's access-token command is run, its project is called, by a pull that itself takes no head lock).
    /// Throws a `PostgresSealProblem` naming what differs, or that the seal cannot be checked here (no team store
    /// key). This machine's witness is not checked: another process's writes move it on past this snapshot at any
    /// time; a row written past rollout fails the seal whatever the witness says, and a store rolled back is the
    /// next write's and `audit verify`'s to name.
    public func sealedRead<T>(_ body: () throws -> T) throws -> T {
        try consistentRead {
            let (now, early) = try PostgresSeal.current(connection)
            if let early { throw early }
            let (sealed, problem) = try PostgresSeal.check(connection, now: now, key: sealing?.key)
            if let problem { throw problem }
            guard sealing?.key != nil else {
                throw PostgresSealProblem(
                    "seal", "cannot be checked: the team store key \(sealing?.keyPath ?? "(none)") is missing (set ROLLOUT_STORE_KEY; docs/POSTGRES.md)")
            }
            guard sealed else {
                throw PostgresSealProblem(
                    "seal", "missing: store_seal was deleted, or the store was never written with the team store key since schema 6")
            }
            return try body()
        }
    }
}
