/// The PostgreSQL store's schema: numbered migrations, forward only, recorded in `rollout_schema`.
///
/// Migrations run only when asked: by `rollout init` on an empty database and by `rollout store migrate`
/// (`PostgresSchema.migrate`); every other open refuses an older schema (asking for `store migrate`) and a newer
/// one (asking for a newer rollout). Each migration and its version row commit together, under an advisory lock,
/// so two migrating processes apply each step once.
public enum PostgresSchema {
    /// The schema this program reads and writes.
    public static var current: Int { migrations.count }

    /// Key of the advisory lock migrations and `init` hold.
    static let advisoryLock = "5282124"

    /// Step N (1-based) takes the schema from N-1 to N. Never edit a released step: append a new one.
    static let migrations: [String] = [
        """
        CREATE TABLE config_versions (
            number BIGINT PRIMARY KEY,
            etag TEXT NOT NULL UNIQUE,
            template TEXT NOT NULL,
            form TEXT NOT NULL,
            update_time BIGINT NOT NULL,
            update_user TEXT NOT NULL,
            update_origin TEXT NOT NULL,
            update_type TEXT NOT NULL,
            description TEXT NOT NULL,
            rollback_source BIGINT,
            audit_sequence BIGINT NOT NULL,
            audit_hash TEXT NOT NULL
        );
        CREATE TABLE config_audit (
            sequence BIGINT PRIMARY KEY,
            time BIGINT NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            from_state TEXT NOT NULL,
            to_state TEXT NOT NULL,
            reason TEXT NOT NULL,
            result TEXT NOT NULL,
            version BIGINT,
            detail TEXT NOT NULL,
            previous_hash TEXT NOT NULL,
            hash TEXT NOT NULL
        );
        CREATE TABLE config_head (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            version BIGINT NOT NULL,
            audit_sequence BIGINT NOT NULL,
            audit_hash TEXT NOT NULL
        );
        INSERT INTO config_head (id, version, audit_sequence, audit_hash) VALUES (1, 0, 0, repeat('0', 64));
        """,
        // 2: the other ports of the write path: guardrail settings, step-up, telemetry (the SQLite store's
        // tables, with the same columns; secrets are AES-256-GCM boxes under the team's store key).
        """
        CREATE TABLE guardrail_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE stepup_operators (
            id TEXT PRIMARY KEY,
            secret BYTEA NOT NULL,
            enrolled_at BIGINT NOT NULL,
            last_accepted_step BIGINT,
            failed_attempts INTEGER NOT NULL DEFAULT 0,
            locked_until BIGINT
        );
        CREATE TABLE stepup_enrolments (
            id TEXT PRIMARY KEY,
            secret BYTEA NOT NULL,
            created_at BIGINT NOT NULL,
            approved_by TEXT,
            failed_attempts INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE stepup_policy (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE store_key_check (id INTEGER PRIMARY KEY CHECK (id = 1), box BYTEA NOT NULL);
        CREATE TABLE telemetry_counters (
            level SMALLINT NOT NULL, bucket BIGINT NOT NULL, key BIGINT NOT NULL, count BIGINT NOT NULL,
            PRIMARY KEY (level, bucket, key));
        CREATE TABLE telemetry_presence (
            hour BIGINT NOT NULL, key BIGINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (hour, key));
        CREATE TABLE telemetry_installations (
            id TEXT PRIMARY KEY, first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL,
            cohort SMALLINT NOT NULL, provider SMALLINT NOT NULL, os_major SMALLINT NOT NULL,
            sessions BIGINT NOT NULL, entered SMALLINT NOT NULL, crashed SMALLINT NOT NULL,
            fetched_at BIGINT, template_version BIGINT);
        CREATE TABLE telemetry_reasons (id INTEGER PRIMARY KEY, reason TEXT NOT NULL UNIQUE);
        CREATE TABLE telemetry_batches (
            id BIGINT PRIMARY KEY, source TEXT NOT NULL, committed_at BIGINT NOT NULL, events BIGINT NOT NULL,
            installations BIGINT NOT NULL, earliest BIGINT, latest BIGINT);
        CREATE TABLE telemetry_meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
        INSERT INTO telemetry_meta (key, value) VALUES ('batch_sequence', 0);
        CREATE TABLE simulation_clock (
            id INTEGER PRIMARY KEY CHECK (id = 1), wall_start BIGINT NOT NULL, simulated_start BIGINT NOT NULL,
            speed DOUBLE PRECISION, wall_updated BIGINT NOT NULL, simulated_at_update BIGINT NOT NULL, running BOOLEAN NOT NULL);
        CREATE TABLE monitor_rollout_start (version BIGINT PRIMARY KEY, started_at BIGINT);
        """,
        // 3: the App Check exchange's state (`PostgresAppCheckState`): the SQLite store's `appcheck_*` tables, except
        // that a signing key's retirement is a column (no seal to keep rows immutable here) and every private key
        // (token signing keys, the demo authority's keys) is an AES-256-GCM box under the team's store key.
        """
        CREATE TABLE appcheck_project (
            id INTEGER PRIMARY KEY CHECK (id = 1), project_number TEXT NOT NULL, project_id TEXT NOT NULL);
        CREATE TABLE appcheck_apps (
            app_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, bundle_id TEXT NOT NULL,
            environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
            trusts_demo_root BOOLEAN NOT NULL, token_ttl_seconds BIGINT NOT NULL, position INTEGER NOT NULL);
        CREATE TABLE appcheck_challenges (
            challenge BYTEA PRIMARY KEY, app_id TEXT NOT NULL, expires_at BIGINT NOT NULL, used BOOLEAN NOT NULL DEFAULT false);
        CREATE INDEX appcheck_challenges_expiry ON appcheck_challenges (expires_at);
        CREATE TABLE appcheck_keys (
            app_id TEXT NOT NULL, key_id BYTEA NOT NULL, public_key BYTEA NOT NULL,
            counter BIGINT NOT NULL CHECK (counter BETWEEN 0 AND 4294967295), artifact_digest BYTEA NOT NULL UNIQUE,
            receipt BYTEA NOT NULL, environment TEXT NOT NULL, attested_at BIGINT NOT NULL, PRIMARY KEY (app_id, key_id));
        CREATE TABLE appcheck_consumed_tokens (token_id TEXT PRIMARY KEY, expires_at BIGINT NOT NULL);
        CREATE INDEX appcheck_consumed_tokens_expiry ON appcheck_consumed_tokens (expires_at);
        CREATE TABLE appcheck_signing_keys (
            kid TEXT PRIMARY KEY, private_key BYTEA NOT NULL, created_at BIGINT NOT NULL, retires_at BIGINT);
        CREATE TABLE appcheck_debug_tokens (
            digest BYTEA PRIMARY KEY, app_id TEXT NOT NULL, name TEXT NOT NULL, created_at BIGINT NOT NULL);
        CREATE TABLE appcheck_demo_authority (
            id INTEGER PRIMARY KEY CHECK (id = 1), root_certificate BYTEA NOT NULL, root_key BYTEA NOT NULL,
            intermediate_certificate BYTEA NOT NULL, intermediate_key BYTEA NOT NULL);
        """,
        // 4: the ramp plan and the pre-approval of its protected steps (`PostgresRampPlans`): the SQLite store's
        // `ramp_plan` and `ramp_plan_approval`, one row each, times in microseconds.
        """
        CREATE TABLE ramp_plan (
            id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, source TEXT NOT NULL, started_by TEXT NOT NULL,
            started_at BIGINT NOT NULL, phase TEXT NOT NULL, reached INTEGER NOT NULL, reached_at BIGINT, ok_since BIGINT,
            reason TEXT NOT NULL, revision BIGINT NOT NULL);
        CREATE TABLE ramp_plan_approval (
            id INTEGER PRIMARY KEY CHECK (id = 1), plan TEXT NOT NULL, plan_name TEXT NOT NULL, approved_by TEXT NOT NULL,
            steps TEXT NOT NULL, granted_at BIGINT NOT NULL, expires_at BIGINT NOT NULL);
        """,
        // 5: the state of a Firebase project on this store (`PostgresFirebaseState`): the project the database is
        // bound to, and the publish intents (the SQLite state file's `firebase_state` and `firebase_intents`).
        """
        CREATE TABLE firebase_state (id INTEGER PRIMARY KEY CHECK (id = 1), project TEXT NOT NULL);
        CREATE TABLE firebase_intents (
            id BIGINT PRIMARY KEY, created_us BIGINT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
            base_version BIGINT NOT NULL, if_match TEXT NOT NULL, content_sha256 TEXT, description TEXT NOT NULL,
            rollback_source BIGINT, update_origin TEXT NOT NULL,
            audit_time_us BIGINT NOT NULL, audit_actor TEXT NOT NULL, audit_action TEXT NOT NULL,
            audit_from TEXT NOT NULL, audit_to TEXT NOT NULL, audit_reason TEXT NOT NULL, audit_detail TEXT NOT NULL);
        """,
        // 6: the seal (`PostgresSeal`): the state of everything that decides a write, and its HMAC under a key
        // derived from the team store key. No row until the first write with the key seals the store.
        """
        CREATE TABLE store_seal (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL, mac TEXT NOT NULL);
        """,
        // 7: telemetry sources (`PostgresSourceState`): the configured sources (sealed, written by the settings write
        // path), and each source's watermark and pull ledger (written with its batch, like telemetry, not sealed).
        """
        CREATE TABLE source_config (name TEXT PRIMARY KEY, definition TEXT NOT NULL);
        CREATE TABLE source_state (
            source TEXT PRIMARY KEY, watermark BIGINT, last_success BIGINT, last_attempt BIGINT, last_error TEXT);
        CREATE TABLE source_ledger (
            source TEXT NOT NULL, minute BIGINT NOT NULL, dimensions TEXT NOT NULL, count BIGINT NOT NULL,
            PRIMARY KEY (source, minute, dimensions));
        """,
        // 8: the operators' security keys (`PostgresStepUpStore` as a `SecurityKeyStore`): the SQLite store's
        // `stepup_security_keys`; the credential is an AES-256-GCM box under the team's store key.
        """
        CREATE TABLE stepup_security_keys (
            id TEXT PRIMARY KEY, credential BYTEA NOT NULL,
            sign_count BIGINT NOT NULL CHECK (sign_count BETWEEN 0 AND 4294967295), enrolled_at BIGINT NOT NULL);
        """,
        // 9: the operators' phones (`PostgresStepUpStore` as a `PhoneStepUpStore`): the SQLite store's
        // `stepup_phones`; the number is an AES-256-GCM box under the team's store key, times in microseconds.
        """
        CREATE TABLE stepup_phones (
            id TEXT PRIMARY KEY, number BYTEA NOT NULL, enrolled_at BIGINT NOT NULL,
            failed_attempts INTEGER NOT NULL DEFAULT 0 CHECK (failed_attempts >= 0), locked_until BIGINT);
        """,
        // 10: each installation's latest fatal crash (`InstallationRecord.lastCrashAt`), whose hour is its crash mark in
        // `telemetry_presence` (windowed crash-free users); NULL for installations stored before it, until their next
        // fatal crash.
        """
        ALTER TABLE telemetry_installations ADD COLUMN last_crash BIGINT;
        """,
        // 11: room on every page of the installations for the next version of each row, so that a batch's update
        // of its installations is a heap-only (HOT) update: the row's new version on its own page, no new entry
        // in the primary key's index (a third of the WAL, a tenth of the time in `PostgresBench`). Pages
        // written from now on keep 60% free; the table takes about 2.5 times the space. (No other change: this
        // step can be renumbered freely.)
        """
        ALTER TABLE telemetry_installations SET (fillfactor = 40);
        """,
        // 12: installations many to a row, as in the SQLite store (`PostgresTelemetry`, `InstallationRanges`): blocks
        // of the core's `InstallationBlock` form keyed by partition (the batch's advisory-lock partition) and the upper
        // end of their id range, so that a batch rewrites about a hundred blocks instead of a row per installation.
        // After this step the rows of `telemetry_installations` move into blocks (`moveInstallationsToBlocks`, in the
        // same transaction) and that table stays empty: nothing reads it any more, and the steps before keep their text.
        // `revision` names one version of one block (from `telemetry_block_revision`, never given twice), so a writer
        // that remembers a block's bytes and revision reads them again only when someone else wrote the block since.
        """
        CREATE SEQUENCE IF NOT EXISTS telemetry_block_revision;
        CREATE TABLE IF NOT EXISTS telemetry_installation_blocks (
            part SMALLINT NOT NULL CHECK (part BETWEEN 0 AND 63), upper BYTEA NOT NULL,
            installations INTEGER NOT NULL CHECK (installations > 0), data BYTEA NOT NULL, revision BIGINT NOT NULL,
            PRIMARY KEY (part, upper)) WITH (fillfactor = 50);
        """,
        // 13: what a telemetry source landed kept under the events it reads (`SourceLedger.key`, in the `source`
        // column) instead of its name, and kept when the source is removed; `reads` holds the events each ledger
        // has landed up to which minute (`SourceConfiguration.overlap`). After this step the rows of each configured
        // source move to its ledger's key (`PostgresConfigStore.moveSourcesToLedgers`, in the same transaction).
        """
        ALTER TABLE source_state ADD COLUMN reads TEXT;
        """,
    ]

    /// Work a step needs beyond its SQL, run right after it in the same transaction.
    static func afterStep(_ step: Int, _ c: PGConnection) throws {
        if step == 12 { try PostgresTelemetry.moveInstallationsToBlocks(c) }
        if step == 13 { try PostgresConfigStore.moveSourcesToLedgers(c) }
    }

    /// The recorded schema version; nil when the database has no rollout schema at all.
    public static func version(_ c: PGConnection) throws -> Int? {
        guard try c.query("SELECT to_regclass('rollout_schema') IS NOT NULL").first?.first == "t" else { return nil }
        return try c.query("SELECT max(version) FROM rollout_schema").first?.first?.flatMap { Int($0) } ?? 0
    }

    /// Applies the missing steps in order; refuses a schema newer than this program's. Returns the steps applied.
    @discardableResult
    public static func migrate(_ c: PGConnection) throws -> [Int] {
        try c.execute("CREATE TABLE IF NOT EXISTS rollout_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        let found = try version(c) ?? 0
        if found > current {
            throw PostgresSchemaError.newer(found: found, supported: current)
        }
        var applied: [Int] = []
        for step in (found + 1)..<(current + 1) {
            try c.execute(migrations[step - 1])
            try afterStep(step, c)
            try c.query("INSERT INTO rollout_schema (version) VALUES ($1)", [String(step)])
            applied.append(step)
        }
        return applied
    }

    /// Runs `migrate` in its own transaction under the advisory lock (`rollout store migrate`).
    @discardableResult
    public static func migrate(conninfo: String) throws -> [Int] {
        try migrating(conninfo: conninfo) { _, applied in applied }
    }

    /// The one way into a schema that may need creating or upgrading (`init`, `store migrate`, `store copy`,
    /// adopting a Firebase project): a new session (`PostgresConfigStore.session`), one READ COMMITTED transaction
    /// under the schema's advisory lock, `migrate` (which refuses a newer schema), then `body` with the connection
    /// and the steps applied, committed together; rolled back whole when anything throws.
    ///
    /// Its lock waits are bounded as the store's are (`lockTimeoutMilliseconds`): a step's DDL that waits for a
    /// table another session holds (a `psql` left in a transaction) fails as a busy store instead of waiting, and
    /// instead of queueing every other session's statements on that table behind it; so does a wait for another
    /// migration's advisory lock that outlasts the bound.
    public static func migrating<T>(
        conninfo: String, lockTimeoutMilliseconds: Int = PostgresConfigStore.lockTimeoutMilliseconds,
        _ body: (PGConnection, [Int]) throws -> T
    ) throws -> T {
        try migrating(
            conninfo: conninfo, lockTimeoutMilliseconds: lockTimeoutMilliseconds, checkingBefore: { _ in false }
        ) { c, applied, _ in try body(c, applied) }
    }

    /// `migrating` with a check run under the advisory lock before the steps, its answer passed to `body`.
    static func migrating<T>(
        conninfo: String, lockTimeoutMilliseconds: Int = PostgresConfigStore.lockTimeoutMilliseconds,
        checkingBefore: (PGConnection) throws -> Bool, _ body: (PGConnection, [Int], Bool) throws -> T
    ) throws -> T {
        let c = try PostgresConfigStore.session(conninfo, lockTimeoutMilliseconds: lockTimeoutMilliseconds)
        try c.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        do {
            try c.query("SELECT pg_advisory_xact_lock($1)", [advisoryLock])
            let sealed = try checkingBefore(c)
            let value = try body(c, try migrate(c), sealed)
            try c.execute("COMMIT")
            return value
        } catch {
            try? c.execute("ROLLBACK")
            throw error
        }
    }
}

public enum PostgresSchemaError: Error, Sendable, Equatable, CustomStringConvertible {
    case newer(found: Int, supported: Int)

    public var description: String {
        switch self {
        case .newer(let f, let s): "the store's schema (\(f)) is newer than this program's (\(s)): upgrade rollout, nothing was migrated"
        }
    }
}
