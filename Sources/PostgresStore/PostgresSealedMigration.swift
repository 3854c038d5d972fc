import Rollout

extension PostgresSchema {
    /// `rollout store migrate` on a store that may be sealed: in the one transaction of `migrating`, the seal is
    /// checked against the state before the missing steps (the sealed tables that schema has), then the steps run,
    /// then the store is sealed again with `key` (a new step changes the schema, the catalog and the sealed tables).
    /// A sealed store that fails its check, or a sealed store without the key, is refused and nothing is migrated;
    /// an unsealed store migrates as before (its first write with the key seals it).
    public static func migrate(conninfo: String, sealKey: PostgresSealKey?) throws -> [Int] {
        try migrating(conninfo: conninfo, checkingBefore: { c in try sealedBeforeMigrating(c, key: sealKey) }) {
            c, applied, sealed in
            if sealed, !applied.isEmpty, let sealKey { _ = try PostgresSeal.renew(c, key: sealKey) }
            return applied
        }
    }

    /// Whether the store on `c` is sealed (checked against its sealed state under `key`); throws when it is sealed
    /// and fails, or is sealed and `key` is nil. Before any step of this run: only the sealed tables it has.
    static func sealedBeforeMigrating(_ c: PGConnection, key: PostgresSealKey?) throws -> Bool {
        guard (try version(c) ?? 0) >= 6, (try c.query("SELECT 1 FROM store_seal WHERE id = 1").first) != nil else {
            return false
        }
        // Writers queue behind the head lock, so nothing changes between this check and the new seal.
        try c.query("SELECT 1 FROM config_head WHERE id = 1 FOR UPDATE")
        let existing = try PostgresSeal.sealedTables.filter { table in
            try c.query("SELECT to_regclass($1) IS NOT NULL", [table]).first?.first == "t"
        }
        let (now, early) = try PostgresSeal.current(c, tables: existing)
        let (_, problem) = try PostgresSeal.check(c, now: now, key: key)
        if let found = early ?? problem {
            throw StoreError.corrupt(
                "the store fails verification, so nothing is migrated: \(found) (see 'rollout audit verify')")
        }
        guard key != nil else {
            throw StoreError.unavailable(
                "the store is sealed: migrating seals it again, which needs the team store key (set ROLLOUT_STORE_KEY "
                    + "to the team's key file; docs/POSTGRES.md), so nothing is migrated")
        }
        return true
    }
}
