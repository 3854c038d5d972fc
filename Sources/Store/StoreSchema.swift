import Rollout

/// The store's schema version (`PRAGMA user_version`) and its forward-only migrations.
///
/// Each migration brings the schema from version `n - 1` to `n` and runs, with the version bump, in one write
/// transaction. Every domain's tables are created here, so that no reader ever has to create one (a read-only
/// connection cannot). A store with a newer schema than this program knows is refused, never downgraded; a store
/// with an older schema is upgraded by the first read-write open and refused by a read-only one.
public enum StoreSchema {
    /// The schema version this program writes.
    public static let current: Int64 = 7

    /// Migration `i` brings version `i` to `i + 1`; it gets the store key and the witness of the store.
    static let migrations: [@Sendable (SQLiteDatabase, StoreKey?, Witness) throws -> Void] = [
        // 1: every table of the first release (stores before versioning had some of them: all IF NOT EXISTS).
        { db, _, _ in
            try SQLiteConfigStore.createSchema(in: db)
            try TelemetryTables.createSchema(in: db)
            try AppCheckStateTables.createSchema(in: db)
            try OperatorTables.createSchema(in: db)
            try GuardrailSettingsTable.createSchema(in: db)
            try SimulationClockTable.createSchema(in: db)
            try db.execute(
                "CREATE TABLE IF NOT EXISTS monitor_rollout_start (version INTEGER PRIMARY KEY, started_at INTEGER)")
        },
        // 2: step-up secrets encrypted with the store key; the seal and its witness.
        { db, key, witness in
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to encrypt the step-up secrets")
            }
            try db.execute(StoreSeal.schema)
            for table in ["stepup_operators", "stepup_enrolments"] {
                for row in try db.query("SELECT id, secret FROM \(table)") {
                    guard let id = row[0].string, let secret = row[1].bytes, !StoreKey.isSealedSecret(secret) else {
                        continue
                    }
                    try db.run(
                        "UPDATE \(table) SET secret = ? WHERE id = ?",
                        [.blob(key.sealSecret(secret, owner: id)), .text(id)])
                }
            }
            try witness.write(try StoreSeal.reseal(db, key: key))
        },
        // 3: the ramp plan and its state.
        // 3: the ramp plan (a sealed table: the seal is renewed with it).
        { db, key, witness in
            try RampPlanTable.createSchema(in: db)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the ramp plan table")
            }
            try StoreSeal.addTallyColumn(db)
            try witness.write(try StoreSeal.reseal(db, key: key))
        },
        // 4: the tally of the per-request App Check tables, started from their rows and sealed.
        { db, key, witness in
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the App Check state")
            }
            try StoreSeal.addTallyColumn(db)
            db.tallyDelta = StoreTally.adding(try StoreTally.recompute(db, key: key), to: [:])
            try db.run("UPDATE store_seal SET tally = '' WHERE id = 1")
            try witness.write(try StoreSeal.reseal(db, key: key))
            db.tallyDelta = [:]
        },
        // 5: the pre-approval of a plan's protected steps (sealed).
        { db, key, witness in
            try RampPlanTable.createApprovalSchema(in: db)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the plan pre-approval table")
            }
            try witness.write(try StoreSeal.reseal(db, key: key))
        },
        // 6: the materialised rollout fold (derived telemetry, not sealed).
        { db, _, _ in try FoldTable.createSchema(in: db) },
        // 7: installations in blocks (derived telemetry, not sealed): every row of the old table, in id order.
        { db, _, _ in
            try db.execute(InstallationBlocks.schema)
            guard try db.hasTable("telemetry_installations") else { return }
            let rows = try db.prepare(
                "SELECT id, first_seen, last_seen, cohort, provider, os_major, sessions, entered, crashed, fetched_at, "
                    + "template_version FROM telemetry_installations ORDER BY id")
            let blocks = try InstallationBlockWriter(db)
            while try rows.step() {
                try rows.withBytes(0) { id throws in
                    _ = try blocks.previous(id)
                    try blocks.put(id, TelemetryTables.record(rows, from: 1))
                }
            }
            rows.reset()
            try blocks.finish()
            try db.execute("DROP TABLE telemetry_installations")
        },
    ]

    /// The schema version of `db`.
    public static func version(of db: SQLiteDatabase) throws -> Int64 {
        try db.query("PRAGMA user_version").first?.first?.int ?? 0
    }

    /// Brings `store` to the current schema, or refuses it (newer schema; older schema on a read-only connection).
    static func migrate(_ store: RolloutStore, key: StoreKey?, witness: Witness) throws {
        try store.withDatabase { db in
            let found = try version(of: db)
            if found == current { return }
            if found > current {
                throw StoreError.unavailable(
                    "\(store.path) has schema version \(found), newer than this rollout understands (\(current)); "
                        + "use a newer rollout")
            }
            if db.isReadOnly {
                throw StoreError.unavailable(
                    "\(store.path) has schema version \(found) and needs an upgrade to \(current), which a read-only "
                        + "session cannot do; open it once without --read-only (e.g. 'rollout audit verify')")
            }
            try db.transaction {
                let now = try version(of: db)
                guard now < current else { return }
                for step in Int(now)..<Int(current) { try migrations[step](db, key, witness) }
                try db.execute("PRAGMA user_version = \(current)")
            }
        }
    }
}
