import Crypto
import Rollout
import StoreSupport

/// The store's schema version (`PRAGMA user_version`) and its forward-only migrations.
///
/// Each migration brings the schema from version `n - 1` to `n` and runs, with the version bump, in one write
/// transaction. Every domain's tables are created here, so that no reader ever has to create one (a read-only
/// connection cannot). A store with a newer schema than this program knows is refused, never downgraded; a store
/// with an older schema is upgraded by the first read-write open and refused by a read-only one.
public enum StoreSchema {
    /// The schema version this program writes.
    public static let current: Int64 = 11

    /// Migration `i` brings version `i` to `i + 1`; it gets the store key and the witness of the store (nil when
    /// `ReferenceSchema` runs them on an empty database in memory to learn what they create).
    static let migrations: [@Sendable (SQLiteDatabase, StoreKey?, Witness?) throws -> Void] = [
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
            try witness?.write(try StoreSeal.reseal(db, key: key))
        },
        // 3: the ramp plan and its state.
        // 3: the ramp plan (a sealed table: the seal is renewed with it).
        { db, key, witness in
            try RampPlanTable.createSchema(in: db)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the ramp plan table")
            }
            try StoreSeal.addTallyColumn(db)
            try witness?.write(try StoreSeal.reseal(db, key: key))
        },
        // 4: the tally of the per-request App Check tables, started from their rows and sealed.
        { db, key, witness in
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the App Check state")
            }
            try StoreSeal.addTallyColumn(db)
            db.tallyDelta = StoreTally.adding(try StoreTally.recompute(db, key: key), to: [:])
            try db.run("UPDATE store_seal SET tally = '' WHERE id = 1")
            try witness?.write(try StoreSeal.reseal(db, key: key))
            db.tallyDelta = [:]
        },
        // 5: the pre-approval of a plan's protected steps (sealed).
        { db, key, witness in
            try RampPlanTable.createApprovalSchema(in: db)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the plan pre-approval table")
            }
            try witness?.write(try StoreSeal.reseal(db, key: key))
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
        // 8: the schema sealed (every table, index, view and trigger, by its full SQL text), and the App Check
        // private keys encrypted with the store key. `migrate` has already refused, before this or any earlier
        // step ran a statement, a file holding a trigger, a view or an object rollout never creates.
        { db, key, witness in
            guard let key else {
                throw StoreError.unavailable(
                    "the store key is missing; it is needed to encrypt the App Check private keys and seal the schema")
            }
            try AppCheckStateTables.encryptPrivateKeys(in: db, key: key)
            guard let witness else { return }
            if let problem = try ReferenceSchema.difference(db) { throw ReferenceSchema.refusal(db.path, problem) }
            try witness.write(try StoreSeal.reseal(db, key: key))
        },
        // 9: the operators' security keys (sealed).
        { db, key, witness in
            try db.execute(SecurityKeyTables.schema)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the security key table")
            }
            try witness?.write(try StoreSeal.reseal(db, key: key))
        },
        // 10: the operators' phones for step-up by SMS or voice (sealed).
        { db, key, witness in
            try db.execute(PhoneTables.schema)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the phone table")
            }
            try witness?.write(try StoreSeal.reseal(db, key: key))
        },
        // 11: the telemetry sources' tables (created on first use before; `source_config` is sealed), and what a
        // source landed kept under the events it reads instead of its name (`SourceTables.migrate`).
        { db, key, witness in
            try SourceTables.migrate(db)
            guard let key else {
                throw StoreError.unavailable("the store key is missing; it is needed to seal the telemetry sources' tables")
            }
            try witness?.write(try StoreSeal.reseal(db, key: key))
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
            if let cause = db.readOnlyCause {
                // Read-only by request: --read-only, or a command that only reads the file (the source of `store
                // copy`, where no --read-only was given), so the advice names the command that upgrades it.
                let why =
                    cause == .requested
                    ? "this session only reads the file (--read-only, or the source of 'store copy')"
                    : "\(cause)"
                let who = cause == .requested ? "" : " as a user who can write it"
                throw StoreError.unavailable(
                    "\(store.path) has schema version \(found) and needs an upgrade to \(current), which a read-only "
                        + "session cannot do: \(why). Upgrade it first\(who) with 'rollout audit verify --store \(store.path)' "
                        + "(without --read-only, it upgrades the file), then run this command again")
            }
            try db.transaction {
                let now = try version(of: db)
                guard now < current else { return }
                // Before any statement of a migration: one of them could fire a trigger planted in the file, and the
                // new seal would then cover what it did. A seal made before schema 8 did not cover the schema, so the
                // file's objects are compared with those rollout's migrations create, whatever that seal says.
                if let problem = try ReferenceSchema.foreignObject(db) {
                    throw ReferenceSchema.refusal(store.path, problem)
                }
                // The store's own seal is checked first, so that the new seal does not launder rows changed behind
                // rollout's back: a store of schema 7 against the seal it made, and a store whose seal covers the
                // schema (schema 8 or later: a later migration, or a version number lowered by hand to make the
                // migrations run again) against its seal and its tallies (the fourth migration recomputes them).
                // The schema itself is compared above and after the steps, since the steps change it. Older seals
                // are renewed by their own migrations, as before.
                let sealsSchema = try StoreSeal.coversSchema(db)
                if now == 7 || sealsSchema {
                    let sealProblem = try StoreSeal.check(db, key: key, witness: witness, schema: false).problem
                    let tallyProblem =
                        sealsSchema && sealProblem == nil
                        ? try key.flatMap { try StoreTally.problem(db, key: $0) } : nil
                    if let problem = sealProblem ?? tallyProblem { throw ReferenceSchema.refusal(store.path, problem) }
                }
                for step in Int(now)..<Int(current) { try migrations[step](db, key, witness) }
                try db.execute("PRAGMA user_version = \(current)")
            }
        }
    }
}

/// The schema rollout's own migrations create, learnt by running them on an empty database in memory: what a
/// store's schema is compared with when it is first sealed (migration 8), since until then no seal covered it.
///
/// Once sealed, the schema is checked against the seal (`StoreSeal.schemaProblem`) before every write; this
/// reference only decides whether a store may be sealed at all. Rollout never creates a trigger or a view, so any
/// is refused; so is a table or index it never creates (`telemetry_installations`, which migration 7 converts and
/// drops, is accepted before the migrations), and after them every object must match its reference definition
/// (whitespace aside: `ALTER TABLE ADD COLUMN` writes its own). Optional tables: `store_drill` (compared in
/// full); by name only, the Firebase state tables (`firebase_state`, `firebase_intents`: the adapter that creates
/// them is not the store's to import), `stepup_attempts` and SQLite's `sqlite_sequence`, which stores from before
/// schema versioning hold (rollout no longer uses them), and SQLite's `sqlite_stat1`/`sqlite_stat4` of an
/// `ANALYZE`. Triggers are refused whatever table they are on, so a definition accepted by name can at worst
/// refuse rollout's rows (a CHECK) or fill a column rollout leaves out (a DEFAULT), and only in these tables.
enum ReferenceSchema {
    struct Object: Sendable {
        var type: String
        var name: String
        var table: String
        var sql: String?
    }

    /// Every object of a new store of the current schema, by `StoreSeal.schemaKey`, and `store_drill`.
    static let objects: [String: Object] = {
        do {
            let db = try SQLiteDatabase(path: ":memory:")
            let key = StoreKey(bytes: SecureRandom.bytes(AESGCM.keySize), path: "(reference schema)")
            try db.transaction {
                for step in StoreSchema.migrations { try step(db, key, nil) }
                try db.execute(DrillStoreMark.schema)
            }
            return try objects(in: db)
        } catch {
            fatalError("internal: rollout's own migrations fail on an empty database: \(error)")
        }
    }()

    /// Tables that may be missing: created on first use.
    static let optionalTables: Set<String> = ["store_drill", "firebase_state", "firebase_intents"]
    /// Tables created by a migration after the eighth: a store sealed by migration 8 has not got them yet, and the
    /// later migration creates them and renews the seal.
    static let laterTables: Set<String> = [
        "stepup_security_keys", "stepup_phones", "source_config", "source_state", "source_ledger",
    ]
    /// Tables accepted by name (see the type's comment).
    static let namedOnly: Set<String> = [
        "firebase_state", "firebase_intents", "stepup_attempts", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4",
    ]
    /// Tables of older schemas that a migration still converts.
    static let historical: Set<String> = ["telemetry_installations"]

    static func objects(in db: SQLiteDatabase) throws -> [String: Object] {
        var out: [String: Object] = [:]
        for row in try db.query("SELECT type, name, tbl_name, sql FROM main.sqlite_schema") {
            guard let type = row[0].string, let name = row[1].string else { continue }
            out[StoreSeal.schemaKey(type: type, name: name)] = Object(
                type: type, name: name, table: row[2].string ?? "", sql: row[3].string)
        }
        return out
    }

    /// Before the migrations: the first object that no version of rollout creates (any trigger or view).
    static func foreignObject(_ db: SQLiteDatabase) throws -> ConfigIntegrityProblem? {
        let reference = objects
        for (key, object) in try objects(in: db).sorted(by: { $0.key < $1.key }) {
            if object.type == "table", namedOnly.contains(object.name) || historical.contains(object.name) { continue }
            if object.type == "index", object.sql == nil, object.name.hasPrefix("sqlite_autoindex_"),
                historical.contains(object.table)
            {
                continue
            }
            if let known = reference[key], known.type == object.type, known.table == object.table,
                object.type == "table" || object.type == "index"
            {
                continue
            }
            return foreign(object)
        }
        return nil
    }

    /// After the migrations: the first object that differs from the reference, or a reference object missing.
    static func difference(_ db: SQLiteDatabase) throws -> ConfigIntegrityProblem? {
        let reference = objects
        let found = try objects(in: db)
        for (key, object) in found.sorted(by: { $0.key < $1.key }) {
            if object.type == "table", namedOnly.contains(object.name) { continue }
            guard let known = reference[key], known.type == object.type, known.table == object.table else {
                return foreign(object)
            }
            if known.sql.map(normalized) != object.sql.map(normalized) {
                return ConfigIntegrityProblem(
                    "schema: \(describe(object))",
                    "its definition is not the one rollout creates (changed outside rollout): \(object.sql ?? "no SQL")"
                )
            }
        }
        for (key, known) in reference.sorted(by: { $0.key < $1.key })
        where found[key] == nil && !optionalTables.contains(known.table) && !laterTables.contains(known.table) {
            return ConfigIntegrityProblem("schema: \(describe(known))", "missing (dropped outside rollout)")
        }
        return nil
    }

    static func foreign(_ object: Object) -> ConfigIntegrityProblem {
        ConfigIntegrityProblem(
            "schema: \(describe(object))",
            "not created by rollout (added outside rollout: a trigger or view runs its own statements inside rollout's "
                + "writes): \(object.sql ?? "no SQL")")
    }

    static func describe(_ o: Object) -> String {
        o.table == o.name ? "\(o.type) \(o.name)" : "\(o.type) \(o.name) on table \(o.table)"
    }

    /// The SQL with every run of whitespace one space, and none beside `(`, `)` or `,`.
    static func normalized(_ sql: String) -> String {
        var out: [UInt8] = []
        var pendingSpace = false
        let tight: Set<UInt8> = [UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: ",")]
        for b in sql.utf8 {
            if b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D {
                pendingSpace = true
                continue
            }
            if pendingSpace, let last = out.last, !tight.contains(last), !tight.contains(b) { out.append(0x20) }
            pendingSpace = false
            out.append(b)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The error that stops the migration: nothing is written.
    static func refusal(_ path: String, _ problem: ConfigIntegrityProblem) -> StoreError {
        StoreError.corrupt(
            "\(path) fails verification, so nothing is written: \(problem) (see 'rollout audit verify' and README "
                + "'Store files')")
    }
}
