import Crypto
import Glibc
import PostgresStore
import Rollout
import SQLiteStore
import StoreSupport
import Telemetry
import Timekeeping

/// `rollout store copy --from FILE --to postgresql://...`: moves an existing SQLite store to a PostgreSQL team
/// store, all or nothing.
///
/// The source must pass its own `audit verify` first; it is read in one read transaction, that check included (one
/// snapshot of the file). The target database must hold no rollout data: an empty database, or one with the schema
/// and no rows but those the migrations write (`claimEmptyTarget`, which locks every table of the schema until the
/// copy commits). Everything is written in one transaction under the
/// migrations' advisory lock: the schema, every version and audit record exactly as stored (same numbers, etags,
/// times, hashes: the chain and the digests its records pin are the same on both ends), the chain head, the
/// guardrail settings, the step-up policy, operators and pending enrolments, security keys and phones (each secret,
/// credential or number opened with the file's key and sealed again with the team's key, bound to the same
/// operator; a key's signature counter and a phone's lockout as they are), and the telemetry tables (counters,
/// presence, installations, the reason catalog, the batch log). Before it commits the copy is checked with the
/// same checks as `audit verify` and compared with the source's report; any failure rolls everything back. The App
/// Check exchange state is copied too (every `appcheck_*` row, the per-request state included, so a challenge or
/// token id used before the move stays used after it), with the signing keys' and the demo authority's private
/// keys sealed with the team's key (`PostgresAppCheckState`'s boxes).
///
/// The ramp plan and its pre-approval are copied as they are (state, revision, the approval's plan id), so a
/// plan running on the file goes on at its step on PostgreSQL. So are the telemetry sources: their configurations
/// and every source ledger with its state (`SourceLedger`), removed sources' included, so that a source pulling on
/// the team store goes on from what the file's sources landed (which the copied counters hold) instead of counting
/// it again.
///
/// It reads one adapter and writes another, so it is a module of its own beside the wiring: the adapters never
/// import each other (it uses the PostgreSQL adapter's `package` helpers for the target's tables).
public enum PostgresStoreCopy {
    public struct Report: Sendable {
        public var versions: Int
        public var auditRecords: Int
        public var headHash: String
        public var operators: Int
        public var pendingEnrolments: Int
        public var securityKeys: Int = 0
        public var phones: Int = 0
        public var settings: Int
        public var telemetryBatches: Int
        public var installations: Int
        public var counterRows: Int
        /// The App Check tables copied and their rows (tables without rows left out).
        public var appCheck: [(table: String, rows: Int)]
        /// The name of the ramp plan copied (with its pre-approval, if any), nil when the source has none.
        public var plan: String?
        /// Tables of the source that hold rows and are not copied.
        public var skipped: [String]
    }

    /// The source's tables that are copied, for the progress total (`appcheck_signing_key_retirements` becomes a
    /// column of the signing keys).
    static let copiedTables = [
        "config_audit", "config_versions", "config_head", "guardrail_settings", "stepup_policy", "stepup_operators", "stepup_enrolments",
        "stepup_security_keys", "stepup_phones", "telemetry_counters", "telemetry_presence", "telemetry_installation_blocks", "telemetry_reasons", "telemetry_batches",
    ] + appCheckTables + ["ramp_plan", "ramp_plan_approval", "source_config", "source_state", "source_ledger"]
    static let appCheckTables = [
        "appcheck_project", "appcheck_apps", "appcheck_challenges", "appcheck_keys", "appcheck_consumed_tokens", "appcheck_signing_keys",
        "appcheck_debug_tokens", "appcheck_demo_authority",
    ]

    /// Copies `source` into the empty database at `conninfo`. `progress(done, total)` is called as rows land (in
    /// chunks), counting the rows of every copied table.
    public static func copy(
        from source: RolloutStore, to conninfo: String, teamKey: () throws -> StoreKey?,
        progress: (_ done: Int64, _ total: Int64) -> Void = { _, _ in }
    ) throws -> Report {
        try copy(from: source, to: conninfo, teamKey: teamKey, progress: progress, afterReading: { _ in })
    }

    /// `copy`, with `afterReading(table)` called right after each of the source's tables is read (a test commits
    /// into the source file there, between two reads).
    ///
    /// The source is read in one read transaction, its verification included: one snapshot of the file (WAL), so
    /// that an `ingest`, a pull or a write committing into the file meanwhile is in none of the copy or in all of
    /// it (never a batch in the log whose counters the copy lacks).
    package static func copy(
        from source: RolloutStore, to conninfo: String, teamKey: () throws -> StoreKey?,
        progress: (_ done: Int64, _ total: Int64) -> Void, afterReading: (_ table: String) throws -> Void
    ) throws -> Report {
        try source.withDatabase { db in
            try db.transaction(immediate: false) {
                try copy(
                    from: source, snapshot: db, to: conninfo, teamKey: teamKey, progress: progress, afterReading: afterReading)
            }
        }
    }

    /// The copy, inside the read transaction on `db` (the source's connection) that `copy` holds.
    private static func copy(
        from source: RolloutStore, snapshot db: SQLiteDatabase, to conninfo: String, teamKey: () throws -> StoreKey?,
        progress: (_ done: Int64, _ total: Int64) -> Void, afterReading: (_ table: String) throws -> Void
    ) throws -> Report {
        let sourceReport = try source.verify()
        func exists(_ table: String) throws -> Bool {
            try db.hasTable(table)
        }
        func rows(_ table: String, _ columns: String, order: String) throws -> [[SQLiteValue]] {
            let found = try exists(table) ? db.query("SELECT \(columns) FROM \(table) ORDER BY \(order)") : []
            try afterReading(table)
            return found
        }
        var total: Int64 = 0
        for table in copiedTables where try exists(table) {
            // Installations are stored many to a row; they are copied (and counted) one by one.
            total +=
                table == "telemetry_installation_blocks"
                ? Int64(try TelemetryTables.installationCount(in: db))
                : try db.query("SELECT count(*) FROM \(table)").first?.first?.int ?? 0
        }
        var done: Int64 = 0
        func landed(_ n: Int) {
            done += Int64(n)
            progress(done, total)
        }
        func text(_ v: SQLiteValue) -> String? {
            switch v {
            case .null: nil
            case .integer(let i): String(i)
            case .real(let d): String(d)
            case .text(let t): t
            case .blob(let b): Hex.encode(b)
            }
        }

        return try PostgresSchema.migrating(conninfo: conninfo) { c, _ in
            try claimEmptyTarget(c)

            /// Inserts `source` in chunks through `unnest` of one array per column; `select` reads the unnested
            /// columns `c1...cN` (default: as they are), e.g. `decode(c2, 'hex')` for a blob sent as hex text.
            func insert(
                _ table: String, _ columns: String, _ source: [[SQLiteValue]], casts: [String], select: String = "*", chunk: Int = 2000
            ) throws {
                guard !source.isEmpty else { return }
                let n = casts.count
                var start = 0
                while start < source.count {
                    let part = source[start..<min(source.count, start + chunk)]
                    let arrays: [String?] = (0..<n).map { i in
                        casts[i] == "text[]"
                            ? PGArray.optionalText(part.map { text($0[i]) })
                            : "{" + part.map { text($0[i]) ?? "NULL" }.joined(separator: ",") + "}"
                    }
                    let unnest = (0..<n).map { "$\($0 + 1)::\(casts[$0])" }.joined(separator: ", ")
                    let names = (1...n).map { "c\($0)" }.joined(separator: ", ")
                    try c.query("INSERT INTO \(table) (\(columns)) SELECT \(select) FROM unnest(\(unnest)) AS u(\(names))", arrays)
                    start += chunk
                    landed(part.count)
                }
            }

            // The team key seals every secret of the copy (step-up secrets, App Check private keys); recorded in
            // store_key_check the first time one is sealed.
            var sealingKey: StoreKey?
            func teamKeyForSecrets(_ what: String) throws -> StoreKey {
                if let sealingKey { return sealingKey }
                guard let team = try teamKey() else {
                    throw StoreError.unavailable("no team store key to seal \(what) with (set ROLLOUT_STORE_KEY)")
                }
                try c.query(
                    "INSERT INTO store_key_check (id, box) VALUES (1, decode($1, 'hex'))",
                    [Hex.encode(team.sealSecret(PostgresStepUpStore.keyCheckText, owner: "store key check"))])
                sealingKey = team
                return team
            }

            // The config history, byte for byte.
            let versionColumns = PostgresConfigStore.versionColumns
            let auditColumns = PostgresConfigStore.auditColumns
            try insert(
                "config_audit", auditColumns, try rows("config_audit", auditColumns, order: "sequence"),
                casts: ["bigint[]", "bigint[]", "text[]", "text[]", "text[]", "text[]", "text[]", "text[]", "bigint[]", "text[]", "text[]", "text[]"])
            try insert(
                "config_versions", versionColumns, try rows("config_versions", versionColumns, order: "number"),
                casts: ["bigint[]", "text[]", "text[]", "text[]", "bigint[]", "text[]", "text[]", "text[]", "text[]", "bigint[]", "bigint[]", "text[]"])
            guard let head = try rows("config_head", "version, audit_sequence, audit_hash", order: "id").first else {
                throw StoreError.corrupt("the source has no chain head")
            }
            try c.query(
                "UPDATE config_head SET version = $1, audit_sequence = $2, audit_hash = $3 WHERE id = 1",
                [text(head[0]), text(head[1]), text(head[2])])
            landed(1)

            // Settings and step-up.
            let settings = try rows("guardrail_settings", "key, value", order: "key")
            try insert("guardrail_settings", "key, value", settings, casts: ["text[]", "text[]"])
            try insert("stepup_policy", "key, value", try rows("stepup_policy", "key, value", order: "key"), casts: ["text[]", "text[]"])
            let operators = try rows(
                "stepup_operators", "id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until", order: "id")
            let pending = try rows("stepup_enrolments", "id, secret, created_at, approved_by, failed_attempts", order: "id")
            let securityKeys = try rows("stepup_security_keys", "id, credential, sign_count, enrolled_at", order: "id")
            let phones = try rows("stepup_phones", "id, number, enrolled_at, failed_attempts, locked_until", order: "id")
            if !operators.isEmpty || !pending.isEmpty || !securityKeys.isEmpty || !phones.isEmpty {
                guard let fileKey = source.key else {
                    throw StoreError.unavailable(
                        "the source's store key \(StoreKey.path(forStore: source.path)) is missing: its step-up secrets cannot be copied")
                }
                let team = try teamKeyForSecrets("the step-up secrets")
                func resealed(_ row: [SQLiteValue]) throws -> [SQLiteValue] {
                    guard let owner = row[0].string, let box = row[1].bytes else { throw StoreError.corrupt("a step-up row is unreadable") }
                    var out = row
                    out[1] = .text(Hex.encode(team.sealSecret(try fileKey.openSecret(box, owner: owner), owner: owner)))
                    return out
                }
                for row in try operators.map(resealed) {
                    try c.query(
                        "INSERT INTO stepup_operators (id, secret, enrolled_at, last_accepted_step, failed_attempts, locked_until) "
                            + "VALUES ($1, decode($2, 'hex'), $3, $4, $5, $6)", row.map(text))
                }
                for row in try pending.map(resealed) {
                    try c.query(
                        "INSERT INTO stepup_enrolments (id, secret, created_at, approved_by, failed_attempts) VALUES ($1, decode($2, 'hex'), $3, $4, $5)",
                        row.map(text))
                }
                // The signature counter is carried: a copy that reset it would accept a cloned key's old counter.
                for row in try securityKeys.map(resealed) {
                    try c.query(
                        "INSERT INTO stepup_security_keys (id, credential, sign_count, enrolled_at) VALUES ($1, decode($2, 'hex'), $3, $4)",
                        row.map(text))
                }
                for row in try phones.map(resealed) {
                    try c.query(
                        "INSERT INTO stepup_phones (id, number, enrolled_at, failed_attempts, locked_until) "
                            + "VALUES ($1, decode($2, 'hex'), $3, $4, $5)", row.map(text))
                }
                landed(operators.count + pending.count + securityKeys.count + phones.count)
            }

            // Telemetry.
            let counters = try rows("telemetry_counters", "level, bucket, key, count", order: "level, bucket, key")
            try insert("telemetry_counters", "level, bucket, key, count", counters, casts: ["smallint[]", "bigint[]", "bigint[]", "bigint[]"])
            try insert(
                "telemetry_presence", "hour, key, count", try rows("telemetry_presence", "hour, key, count", order: "hour, key"),
                casts: ["bigint[]", "bigint[]", "bigint[]"])
            var installations: [(id: [UInt8], record: InstallationRecord)] = []
            try TelemetryTables.forEachInstallation(in: db) { id, r in installations.append((Array(id.utf8), r)) }
            try PostgresTelemetry.storeInstallations(installations, on: c)
            landed(installations.count)
            try insert("telemetry_reasons", "id, reason", try rows("telemetry_reasons", "id, reason", order: "id"), casts: ["integer[]", "text[]"])
            let batchColumns = "id, source, committed_at, events, installations, earliest, latest"
            let batches = try rows("telemetry_batches", batchColumns, order: "id")
            try insert("telemetry_batches", batchColumns, batches, casts: ["bigint[]", "text[]", "bigint[]", "bigint[]", "bigint[]", "bigint[]", "bigint[]"])
            if try exists("telemetry_meta"),
                let newest = try db.query("SELECT value FROM telemetry_meta WHERE key = 'newest_event'").first?.first?.int
            {
                try c.query("INSERT INTO telemetry_meta (key, value) VALUES ('newest_event', $1)", [String(newest)])
            }
            try c.query(
                "UPDATE telemetry_meta SET value = (SELECT coalesce(max(id), 0) FROM telemetry_batches) WHERE key = 'batch_sequence'")

            // The telemetry sources and their ledgers, row for row.
            try insert("source_config", "name, definition", try rows("source_config", "name, definition", order: "name"), casts: ["text[]", "text[]"])
            let stateColumns = "source, watermark, last_success, last_attempt, last_error, reads"
            try insert(
                "source_state", stateColumns, try rows("source_state", stateColumns, order: "source"),
                casts: ["text[]", "bigint[]", "bigint[]", "bigint[]", "text[]", "text[]"])
            let ledgerColumns = "source, minute, dimensions, count"
            try insert(
                "source_ledger", ledgerColumns, try rows("source_ledger", ledgerColumns, order: "source, minute, dimensions"),
                casts: ["text[]", "bigint[]", "text[]", "bigint[]"])

            // The App Check exchange state, row for row; blobs travel as hex text, private keys sealed.
            var appCheck: [(table: String, rows: Int)] = []
            func copied(_ table: String, _ n: Int) { if n > 0 { appCheck.append((table, n)) } }
            let project = try rows("appcheck_project", "id, project_number, project_id", order: "id")
            try insert("appcheck_project", "id, project_number, project_id", project, casts: ["integer[]", "text[]", "text[]"])
            copied("appcheck_project", project.count)
            let appColumns = "app_id, team_id, bundle_id, environment, trusts_demo_root, token_ttl_seconds, position"
            let apps = try rows("appcheck_apps", appColumns, order: "position")
            try insert("appcheck_apps", appColumns, apps, casts: ["text[]", "text[]", "text[]", "text[]", "boolean[]", "bigint[]", "integer[]"])
            copied("appcheck_apps", apps.count)
            let challenges = try rows("appcheck_challenges", "challenge, app_id, expires_at, used", order: "challenge")
            try insert(
                "appcheck_challenges", "challenge, app_id, expires_at, used", challenges, casts: ["text[]", "text[]", "bigint[]", "boolean[]"],
                select: "decode(c1, 'hex'), c2, c3, c4")
            copied("appcheck_challenges", challenges.count)
            let keyColumns = "app_id, key_id, public_key, counter, artifact_digest, receipt, environment, attested_at"
            let keys = try rows("appcheck_keys", keyColumns, order: "app_id, key_id")
            try insert(
                "appcheck_keys", keyColumns, keys,
                casts: ["text[]", "text[]", "text[]", "bigint[]", "text[]", "text[]", "text[]", "bigint[]"],
                select: "c1, decode(c2, 'hex'), decode(c3, 'hex'), c4, decode(c5, 'hex'), decode(c6, 'hex'), c7, c8")
            copied("appcheck_keys", keys.count)
            let consumed = try rows("appcheck_consumed_tokens", "token_id, expires_at", order: "token_id")
            try insert("appcheck_consumed_tokens", "token_id, expires_at", consumed, casts: ["text[]", "bigint[]"])
            copied("appcheck_consumed_tokens", consumed.count)
            let debugColumns = "digest, app_id, name, created_at"
            let debug = try rows("appcheck_debug_tokens", debugColumns, order: "digest")
            try insert(
                "appcheck_debug_tokens", debugColumns, debug, casts: ["text[]", "text[]", "text[]", "bigint[]"],
                select: "decode(c1, 'hex'), c2, c3, c4")
            copied("appcheck_debug_tokens", debug.count)
            let signing =
                try exists("appcheck_signing_keys")
                ? try db.query(
                    "SELECT k.kid, k.private_key, k.created_at, r.retires_at FROM appcheck_signing_keys k "
                        + "LEFT JOIN appcheck_signing_key_retirements r ON r.kid = k.kid ORDER BY k.created_at, k.kid") : []
            if !signing.isEmpty {
                let team = try teamKeyForSecrets("the App Check signing keys")
                for row in signing {
                    guard let kid = row[0].string, let box = row[1].bytes else { throw StoreError.corrupt("an App Check signing key row is unreadable") }
                    let der = try AppCheckStateTables.openSigningKey(box, kid: kid, in: db)
                    try c.query(
                        "INSERT INTO appcheck_signing_keys (kid, private_key, created_at, retires_at) VALUES ($1, decode($2, 'hex'), $3, $4)",
                        [kid, Hex.encode(PostgresAppCheckState.seal(der, PostgresAppCheckState.signingRole(kid), team)), text(row[2]), text(row[3])])
                }
                landed(signing.count)
            }
            copied("appcheck_signing_keys", signing.count)
            if let demo = try rows(
                "appcheck_demo_authority", "root_certificate, root_key, intermediate_certificate, intermediate_key", order: "id"
            ).first {
                let team = try teamKeyForSecrets("the demo authority's keys")
                guard let rc = demo[0].bytes, let rkBox = demo[1].bytes, let ic = demo[2].bytes, let ikBox = demo[3].bytes else {
                    throw StoreError.corrupt("the demo authority row is unreadable")
                }
                let rk = try AppCheckStateTables.openDemoKey(rkBox, .root, in: db)
                let ik = try AppCheckStateTables.openDemoKey(ikBox, .intermediate, in: db)
                try c.query(
                    "INSERT INTO appcheck_demo_authority (id, root_certificate, root_key, intermediate_certificate, intermediate_key) "
                        + "VALUES (1, decode($1, 'hex'), decode($2, 'hex'), decode($3, 'hex'), decode($4, 'hex'))",
                    [
                        Hex.encode(rc), Hex.encode(PostgresAppCheckState.seal(rk, PostgresAppCheckState.demoRootRole, team)), Hex.encode(ic),
                        Hex.encode(PostgresAppCheckState.seal(ik, PostgresAppCheckState.demoIntermediateRole, team)),
                    ])
                landed(1)
                copied("appcheck_demo_authority", 1)
            }

            // The ramp plan (its state and revision as they are) and the pre-approval of its protected steps.
            let plan = try RampPlanTable.load(from: db)
            if let plan {
                try PostgresRampPlans.insert(plan, revision: plan.revision, c)
                landed(1)
            }
            if let approval = try RampPlanTable.approval(in: db) {
                try PostgresRampPlans.insert(approval, c)
                landed(1)
            }

            // What stays behind: tables of a newer source that this copy does not know.
            var skipped: [String] = []
            for table in try db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").compactMap({ $0.first?.string })
            where table.hasPrefix("ramp_") && !copiedTables.contains(table)
            {
                if try !db.query("SELECT 1 FROM \"\(table)\" LIMIT 1").isEmpty { skipped.append(table) }
            }

            // The copy passes the same checks as `audit verify`, and is the same chain, before it commits.
            let copied = try PostgresConfigStore.check(c)
            guard copied.versions == sourceReport.config.versions, copied.auditRecords == sourceReport.config.auditRecords,
                copied.headHash == sourceReport.config.headHash
            else {
                throw StoreError.corrupt(
                    "the copy does not match the source (\(copied.versions) versions, head \(copied.headHash); the source has "
                        + "\(sourceReport.config.versions), head \(sourceReport.config.headHash)): nothing was copied")
            }
            // Sealed in the same transaction with the team key (the command creates it when missing), as `init`
            // seals a new store; without one (a library caller) the first write with the key seals it.
            if let team = try sealingKey ?? teamKey() {
                _ = try PostgresSeal.renew(c, key: PostgresSealKey(teamKey: team.bytes, path: team.path))
            }
            return Report(
                versions: copied.versions, auditRecords: copied.auditRecords, headHash: copied.headHash, operators: operators.count,
                pendingEnrolments: pending.count, securityKeys: securityKeys.count, phones: phones.count, settings: settings.count, telemetryBatches: batches.count,
                installations: installations.count, counterRows: counters.count, appCheck: appCheck, plan: plan?.name, skipped: skipped)
        }
    }

    /// The rows the migrations themselves write (`PostgresSchema`): a target that holds these and nothing else is
    /// empty. (`rollout_schema` is checked on its own: the steps applied, 1 to the current one.)
    static let rowsOfTheMigrations: [String: [String]] = [
        "config_head": ["(1,0,0,\(String(repeating: "0", count: 64)))"],
        "telemetry_meta": ["(batch_sequence,0)"],
    ]

    /// Locks every table of the rollout schema (found in the catalog: the tables of `config_head`'s schema) against
    /// writes until the copy's transaction ends, then refuses, naming the tables, a target where any of them holds a
    /// row beyond what the migrations write. A row planted beforehand (a writer's debug token, step-up policy,
    /// source or counter) would otherwise be kept beside the copy and sealed with it; the lock keeps anyone from
    /// inserting one between this check and COMMIT. Run by the owner (LOCK needs more than the writer's grants).
    static func claimEmptyTarget(_ c: PGConnection) throws {
        let tables = try c.query(
            """
            SELECT quote_ident(n.nspname) || '.' || quote_ident(t.relname), t.relname FROM pg_class t
              JOIN pg_namespace n ON n.oid = t.relnamespace
              WHERE t.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'config_head'::regclass)
                AND t.relkind IN ('r', 'p')
              ORDER BY t.relname COLLATE "C"
            """
        ).compactMap { row -> (qualified: String, name: String)? in
            guard let qualified = row[0], let name = row[1] else { return nil }
            return (qualified, name)
        }
        // SHARE ROW EXCLUSIVE conflicts with every INSERT, UPDATE and DELETE (and with another copy), not with reads.
        try c.execute("LOCK TABLE \(tables.map(\.qualified).joined(separator: ", ")) IN SHARE ROW EXCLUSIVE MODE")
        if let n = try c.query("SELECT max(number) FROM config_versions").first?.first ?? nil {
            throw StoreError.unavailable(
                "the target already holds a rollout store (version \(n)); store copy only fills an empty database: nothing was written")
        }
        var holding: [String] = []
        for table in tables {
            if table.name == "rollout_schema" {
                let steps = try c.query("SELECT version FROM rollout_schema ORDER BY version").compactMap { ($0.first ?? nil).flatMap { Int($0) } }
                if steps != Array(1...PostgresSchema.current) { holding.append(table.name) }
                continue
            }
            let expected = rowsOfTheMigrations[table.name] ?? []
            let found = try c.query("SELECT t::text FROM \(table.qualified) t ORDER BY 1 LIMIT \(expected.count + 1)").map { $0.first ?? nil }
            if found != expected { holding.append(table.name) }
        }
        guard holding.isEmpty else {
            throw StoreError.unavailable(
                "the target holds rollout data already (rows in \(holding.joined(separator: ", "))); store copy only fills an "
                    + "empty database (new, or with the schema and no rows): nothing was written")
        }
    }
}
