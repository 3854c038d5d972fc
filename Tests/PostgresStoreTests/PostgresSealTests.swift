import Foundation
@testable import PostgresStore
import RemoteConfig
import Rollout
import StepUp
import SQLiteStore
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// The seal and the witness of the PostgreSQL team store, through the built `rollout` binary, against the roles of
/// docs/POSTGRES.md exactly as documented: the writer role (and the owner) change rows with psql, without the team
/// store key; `audit verify` names what differs and the next write refuses to run (as the SQLite store's door
/// tests, `GateStepUpTests`, check for a file).
@Suite(.serialized)
struct PostgresSealTests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-seal")
        key = directory.appendingPathComponent("team.key").path
    }

    func rollout(_ arguments: [String], store: String, key keyPath: String? = nil, faketime: String? = nil) throws
        -> TestSupport.ProcessResult
    {
        let binary = try TestSupport.rolloutBinary()
        return try TestSupport.run(
            binary, arguments + ["--store", store],
            environment: ["ROLLOUT_STORE_KEY": keyPath ?? key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"],
            fakeTime: faketime)
    }

    /// Runs `sql` with psql as the role of `conninfo` (a keyword/value string); fails the test when psql does.
    /// A server of the test's own, without autovacuum: no transaction but the test's runs on it, so a connection
    /// whose row fingerprints hold keeps its caches (`PostgresSeal.stillNames` also refuses them while a transaction
    /// that began before a listed row was written is still open, which another suite's, on the shared server, may be).
    static func quietServer() throws -> PostgresServer {
        let server = try PostgresServer(tcp: false)
        let admin = try server.freshDatabase()
        try psql(admin, "ALTER SYSTEM SET autovacuum = off")
        try psql(admin, "SELECT pg_reload_conf()")
        return server
    }

    static func psql(_ conninfo: String, _ sql: String) throws {
        let r = try TestSupport.run("/usr/bin/psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql])
        try #require(r.status == 0, "psql: \(r.stderr) for \(sql)")
    }

    static func writer(_ conninfo: String) -> String {
        conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")
    }

    /// A store made by `rollout init` (sealed with the team key it creates), with the documented roles; its
    /// keyword/value conninfo (for psql) and its URI (for the binary).
    func initialized(_ seed: String) throws -> (conninfo: String, uri: String) {
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let uri = server.uris(of: conninfo).socket
        let r = try rollout(["init", "--seed", seed], store: uri)
        try #require(r.status == 0, "\(r.stderr)")
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        return (conninfo, uri)
    }

    /// Enrols `ana@test` through the binary; her secret.
    func enrolAna(_ uri: String) throws -> TOTPSecret {
        let started = try rollout(["operator", "enroll", "--qr", "none"], store: uri)
        try #require(started.status == 0, "\(started.stderr)")
        let line = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = try #require(line.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(base32)))
        let step = TOTP.standard.step(at: SystemClock().now())
        let confirmed = try rollout(
            ["operator", "enroll", "--code", TOTP.standard.code(secret: secret, step: step)], store: uri)
        try #require(confirmed.status == 0, "\(confirmed.stderr)")
        return secret
    }

    func versionCount(_ conninfo: String) throws -> Int {
        try PostgresConfigStore(conninfo: conninfo).versions(limit: 10_000, before: nil).count
    }

    /// Reproduction ("Every door", item 3): the writer role forges the chain with plain SQL. With psql as
    /// `rollout_writer` it appends a 100% version, its audit record (a valid link of the hash chain, with the
    /// version's digest) and the chain head, attributed to the enrolled operator ana@test. The chain alone still
    /// verifies (that was all `audit verify` checked); now `audit verify` fails naming the chain head, and the next
    /// `rollout kill` and `rollout set` are refused with nothing written.
    @Test func writerForgingAVersionWithItsRecordAndHeadIsDetectedAndRefused() throws {
        let (conninfo, uri) = try initialized("pg-seal-forge")
        // The documented writer role runs sealed writes and checks the seal (it reads pg_control_system too).
        let asWriter = uri.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")
        let started = try rollout(["set", "5", "--reason", "start"], store: asWriter)
        try #require(started.status == 0, "\(started.stderr)")
        let intact = try rollout(["audit", "verify"], store: asWriter)
        #expect(intact.status == 0 && intact.stdout.contains("sealed tables match the seal"), "\(intact.stderr)")
        // The viewer may not read the sealed secrets: it is told so, never shown a seal it did not check.
        let viewer = try rollout(
            ["audit", "verify"], store: uri.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer"))
        #expect(viewer.status == 1 && viewer.stderr.contains("cannot be checked as this role"), "\(viewer.stderr)")
        _ = try enrolAna(uri)

        let owner = try PGConnection(conninfo)
        let head = try #require(try owner.query("SELECT version, audit_sequence, audit_hash FROM config_head").first)
        let number = Int(head[0]!)! + 1
        let sequence = Int64(head[1]!)! + 1
        let row = try #require(
            try owner.query("SELECT template, form FROM config_versions WHERE number = $1", [head[0]]).first)
        let template = row[0]!.replacingOccurrences(of: "<= 5\"", with: "<= 100\"")
        let form = try #require(RemoteConfigTemplate.Form(rawValue: row[1]!))
        let info = VersionInfo(
            number: number, etag: "etag-\(number)-0123456789abcdef", updateTime: SystemClock().now(),
            updateUser: "ana@test",
            updateOrigin: "CLI", updateType: .incremental, description: "ramp")
        let entry = AuditEntry(
            time: info.updateTime, actor: "ana@test", action: "set", from: "5%", to: "100%", reason: "ramp",
            result: .published,
            version: number, detail: VersionDigest.label + VersionDigest.hex(info, form: form, templateText: template))
        let hash = AuditChain.hash(sequence: sequence, entry: entry, previousHash: head[2]!)
        let t = "$forged$"
        try Self.psql(
            Self.writer(conninfo),
            """
            INSERT INTO config_audit (sequence, time, actor, action, from_state, to_state, reason, result, version, detail, previous_hash, hash)
            VALUES (\(sequence), \(info.updateTime.microseconds), 'ana@test', 'set', '5%', '100%', 'ramp', 'published', \(number),
                    \(t)\(entry.detail)\(t), '\(head[2]!)', '\(hash)');
            INSERT INTO config_versions (number, etag, template, form, update_time, update_user, update_origin, update_type, description, rollback_source, audit_sequence, audit_hash)
            VALUES (\(number), '\(info.etag)', \(t)\(template)\(t), '\(form.rawValue)', \(info.updateTime.microseconds), 'ana@test', 'CLI',
                    'INCREMENTAL_UPDATE', 'ramp', NULL, \(sequence), '\(hash)');
            UPDATE config_head SET version = \(number), audit_sequence = \(sequence), audit_hash = '\(hash)' WHERE id = 1;
            """)
        // The forgery is real: the store serves 100%, and the hash chain with its version digests still verifies.
        let store = try PostgresConfigStore(conninfo: conninfo)
        #expect(try RolloutPercent.of(store.current()) == 100 * 1_000_000)
        #expect(try store.verify().versions == number)

        let verify = try rollout(["audit", "verify"], store: uri)
        #expect(verify.status == 1, "\(verify.stdout)")
        #expect(verify.stderr.contains("chain head: record \(sequence) is not the sealed one"), "\(verify.stderr)")
        for write in [["kill", "--reason", "after the forgery"], ["set", "50", "--reason", "after the forgery"]] {
            let refused = try rollout(write, store: uri)
            #expect(refused.status != 0 && !refused.stdout.contains("published"), "\(write): \(refused.stdout)")
            #expect(
                refused.stderr.contains("fails verification, so nothing is written: chain head"), "\(refused.stderr)")
        }
        #expect(try versionCount(conninfo) == number)
        #expect(try rollout(["audit", "verify"], store: uri).status == 1)
    }

    /// Reproduction: `DELETE FROM stepup_operators` as the writer turned step-up off, undetected. Now `audit verify`
    /// names the table and `set 100` without a code is refused for the store, not let through.
    @Test func writerDeletingTheOperatorsIsDetectedAndStepUpIsNotTurnedOff() throws {
        let (conninfo, uri) = try initialized("pg-seal-operators")
        _ = try enrolAna(uri)
        let before = try rollout(["set", "100", "--reason", "all in"], store: uri)
        #expect(before.status == 4, "step-up asks for a code: \(before.stderr)")

        try Self.psql(Self.writer(conninfo), "DELETE FROM stepup_operators")
        let verify = try rollout(["audit", "verify"], store: uri)
        #expect(
            verify.status == 1 && verify.stderr.contains("table stepup_operators: its rows differ"), "\(verify.stderr)")
        let versions = try versionCount(conninfo)
        let refused = try rollout(["set", "100", "--reason", "all in"], store: uri)
        #expect(refused.status != 0 && !refused.stdout.contains("published"), "\(refused.stdout)")
        #expect(
            refused.stderr.contains("fails verification, so nothing is written: table stepup_operators"),
            "\(refused.stderr)")
        #expect(try versionCount(conninfo) == versions)
        #expect(try RolloutPercent.of(PostgresConfigStore(conninfo: conninfo).current()) == 0)
    }

    /// The tables that joined the seal with the one list both stores seal (`SealedTables`): the monitor's cache of
    /// the rollout start and the simulation clock were writable by the writer role undetected (a forged start in
    /// the future silenced auto-kill; a forged heartbeat moved telemetry time hours ahead). Each edit as the writer
    /// is named by `audit verify` and refuses the next write, with nothing written.
    @Test func writerForgingTheRolloutStartOrTheSimulationClockIsRefused() throws {
        let edits: [(label: String, sql: String, names: String)] = [
            (
                "rollout start moved to tomorrow",
                "INSERT INTO monitor_rollout_start (version, started_at) SELECT max(number), 99999999999999999 FROM config_versions "
                    + "ON CONFLICT (version) DO UPDATE SET started_at = excluded.started_at",
                "table monitor_rollout_start"
            ),
            (
                "simulation heartbeat hours ahead",
                "INSERT INTO simulation_clock (id, wall_start, simulated_start, speed, wall_updated, simulated_at_update, running) "
                    + "VALUES (1, 0, 0, 10000, 99999999999999999, 99999999999999999, true)",
                "table simulation_clock"
            ),
        ]
        for (index, edit) in edits.enumerated() {
            let (conninfo, uri) = try initialized("pg-seal-joined-\(index)")
            try #require(try rollout(["set", "10", "--reason", "start"], store: uri).status == 0)
            try #require(try rollout(["status"], store: uri).status == 0)
            try #require(try rollout(["audit", "verify"], store: uri).status == 0)
            try Self.psql(Self.writer(conninfo), edit.sql)
            let verify = try rollout(["audit", "verify"], store: uri)
            #expect(verify.status == 1 && verify.stderr.contains(edit.names), "\(edit.label): \(verify.stderr)")
            let versions = try versionCount(conninfo)
            let refused = try rollout(["kill", "--reason", "after tampering"], store: uri)
            #expect(
                refused.status != 0 && refused.stderr.contains("fails verification, so nothing is written: \(edit.names)"),
                "\(edit.label): \(refused.stderr)")
            #expect(try versionCount(conninfo) == versions, "\(edit.label)")
        }
    }

    /// The monitor's cache of the rollout start on the team store: a nudge keeps the start its assessment derived in
    /// its own publish's transaction (no transaction of its own), a `rollout status` that walked a version or two
    /// writes nothing, and the table keeps one row; the seal covers it all.
    @Test func theRolloutStartRidesOnTheNextWriteAndKeepsOneRow() throws {
        let (conninfo, uri) = try initialized("pg-rollout-start")
        try #require(try rollout(["set", "10", "--reason", "start"], store: uri).status == 0)
        func cached() throws -> [[String?]] {
            try PGConnection(conninfo).query("SELECT version, started_at IS NOT NULL FROM monitor_rollout_start ORDER BY version")
        }
        // (Increases: the guardrail assesses them, and a decrease needs no start.)
        for step in ["+1", "+1", "+1"] {
            let before = try PostgresConfigStore(conninfo: conninfo).current().info.number
            let nudge = try rollout(["nudge", step, "--reason", "ramp"], store: uri)
            try #require(nudge.status == 0, "\(nudge.stderr)")
            let rows = try cached()
            #expect(rows == [[String(before), "t"]], "after the nudge from version \(before): \(rows)")
        }
        let kept = try cached()
        let status = try rollout(["status"], store: uri)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(try cached() == kept, "a status that walked two versions wrote the cache")
        let verify = try rollout(["audit", "verify"], store: uri)
        #expect(verify.status == 0, "\(verify.stderr)")
    }

    /// Tamper suite: a populated store (versions, guardrail settings, an operator, a pending enrolment, the App
    /// Check project, app, debug token and signing key, a ramp plan), copied into a fresh database per edit. Each
    /// edit, made with psql as the writer role or as the owner without the team key, is named by `audit verify`
    /// (exit 1) and refuses the next `rollout kill` with nothing written; it stays visible afterwards.
    @Test func everyEditOfTheSealedStateIsNamedAndRefused() throws {
        let server = try PostgresServer.get()
        let (base, uri) = try initialized("pg-seal-tamper")
        for command in [
            ["set", "5", "--reason", "start"],
            ["policy", "set", "guardrails.auto-kill", "on"],
            [
                "appcheck", "app", "add", "1:123456789:ios:abc", "--project-number", "123456789", "--project-id",
                "demo",
                "--team", "ABCDE12345", "--bundle", "com.example.app",
            ],
            ["appcheck", "debug-token", "add", "--app", "1:123456789:ios:abc", "--name", "ci"],
            ["appcheck", "keys", "rotate"],
        ] {
            let r = try rollout(command, store: uri)
            try #require(r.status == 0, "\(command): \(r.stderr)")
        }
        let plan = directory.appendingPathComponent("tamper.plan").path
        try "name tamper\nstep 5% hold 1h\nstep 10%\n".write(toFile: plan, atomically: true, encoding: .utf8)
        try #require(try rollout(["plan", "start", plan], store: uri).status == 0)
        // An old seal (and its head) to replay later, then one more write. (The connection closes at once: the
        // base is a template below.)
        let oldSeal = try #require(try PGConnection(base).query("SELECT state, mac FROM store_seal").first)
        try #require(try rollout(["set", "6", "--reason", "more"], store: uri).status == 0)
        // Bob starts an enrolment (left pending), then ana enrols (step-up on).
        let bob = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["operator", "enroll", "--qr", "none", "--store", uri],
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "bob@test"])
        try #require(bob.status == 0, "\(bob.stderr)")
        _ = try enrolAna(uri)
        try #require(try rollout(["audit", "verify"], store: uri).status == 0)
        let baseName = try #require(
            base.split(separator: " ").first { $0.hasPrefix("dbname=") }?.dropFirst("dbname=".count))

        let emptyDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        let q = "$v$"
        // (label, who: writer or owner, SQL, the subject audit verify names)
        let cases: [(String, Bool, String, String)] = [
            ("delete the operators", true, "DELETE FROM stepup_operators", "table stepup_operators"),
            (
                "reset an operator's last accepted step (replay a code)", true,
                "UPDATE stepup_operators SET last_accepted_step = NULL", "table stepup_operators"
            ),
            (
                "change an operator's failed-attempt count", true, "UPDATE stepup_operators SET failed_attempts = 3",
                "table stepup_operators"
            ),
            (
                "approve a pending enrolment", true, "UPDATE stepup_enrolments SET approved_by = 'ana@test'",
                "table stepup_enrolments"
            ),
            ("delete a pending enrolment", true, "DELETE FROM stepup_enrolments", "table stepup_enrolments"),
            (
                "raise the step-up threshold", true,
                "INSERT INTO stepup_policy (key, value) VALUES ('increase-over', '99') ON CONFLICT (key) DO UPDATE SET value = '99'",
                "table stepup_policy"
            ),
            ("turn auto-kill off", true, "UPDATE guardrail_settings SET value = 'off'", "table guardrail_settings"),
            (
                "insert a guardrail setting", true,
                "INSERT INTO guardrail_settings (key, value) VALUES ('budget.per-second', '100000') ON CONFLICT (key) DO UPDATE SET value = '100000'",
                "table guardrail_settings"
            ),
            (
                "replace the key check (owner)", false, "UPDATE store_key_check SET box = '\\x00'",
                "table store_key_check"
            ),
            (
                "move the App Check project", true, "UPDATE appcheck_project SET project_id = 'evil'",
                "table appcheck_project"
            ),
            (
                "register an app", true,
                "INSERT INTO appcheck_apps VALUES ('1:1:ios:evil', 'EVILTEAM00', 'com.evil', 'development', true, 86400, 9)",
                "table appcheck_apps"
            ),
            ("delete the signing keys", true, "DELETE FROM appcheck_signing_keys", "table appcheck_signing_keys"),
            (
                "backdate a signing key", true, "UPDATE appcheck_signing_keys SET created_at = 0",
                "table appcheck_signing_keys"
            ),
            (
                "add a debug token", true,
                "INSERT INTO appcheck_debug_tokens VALUES ('\\x00ff', '1:123456789:ios:abc', 'evil', 0)",
                "table appcheck_debug_tokens"
            ),
            (
                "plant a demo authority", true,
                "INSERT INTO appcheck_demo_authority VALUES (1, '\\x00', '\\x00', '\\x00', '\\x00')",
                "table appcheck_demo_authority"
            ),
            ("abort the ramp plan", true, "UPDATE ramp_plan SET phase = 'aborted'", "table ramp_plan"),
            (
                "forge a pre-approval of the plan's steps", true,
                "INSERT INTO ramp_plan_approval VALUES (1, 'x', 'tamper', 'ana@test', '1,2', 0, 9999999999999999)",
                "table ramp_plan_approval"
            ),
            (
                "forge a publish intent", true,
                "INSERT INTO firebase_intents VALUES (1, 0, 'h', 1, 1, '*', NULL, 'd', NULL, 'CLI', 0, 'ana@test', 'set', '', '', '', '')",
                "table firebase_intents"
            ),
            (
                "bind the store to a Firebase project (owner)", false, "INSERT INTO firebase_state VALUES (1, 'evil')",
                "table firebase_state"
            ),
            (
                "move the head back one record", true,
                "UPDATE config_head SET audit_sequence = audit_sequence - 1, audit_hash = (SELECT hash FROM config_audit "
                    + "WHERE sequence = (SELECT audit_sequence - 1 FROM config_head))", "chain head"
            ),
            (
                "replay an older seal", true,
                "UPDATE store_seal SET state = \(q)\(oldSeal[0]!)\(q), mac = '\(oldSeal[1]!)'", "chain head"
            ),
            (
                "rewrite the seal to match deleted operators", true,
                "DELETE FROM stepup_operators; UPDATE store_seal SET state = regexp_replace(state, "
                    + "'table stepup_operators=[0-9a-f]+', 'table stepup_operators=\(emptyDigest)')",
                "seal: its HMAC does not match"
            ),
            ("delete the seal (owner)", false, "DELETE FROM store_seal", "seal"),
            (
                "add a trigger (owner)", false,
                "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'; "
                    + "CREATE TRIGGER keep BEFORE INSERT ON config_audit FOR EACH ROW EXECUTE FUNCTION keep()",
                "catalog"
            ),
            (
                "add a rule (owner)", false, "CREATE RULE quiet AS ON INSERT TO stepup_operators DO INSTEAD NOTHING",
                "catalog"
            ),
            (
                "hide the operators by row-level security (owner)", false,
                "ALTER TABLE stepup_operators ENABLE ROW LEVEL SECURITY", "catalog"
            ),
            (
                "change a column default (owner)", false,
                "ALTER TABLE config_audit ALTER COLUMN reason SET DEFAULT 'ok'", "catalog"
            ),
            (
                "grant the writer DELETE on the audit log (owner)", false,
                "GRANT DELETE ON config_audit TO rollout_writer", "privileges"
            ),
            (
                "grant TRUNCATE on the seal to everyone (owner)", false, "GRANT TRUNCATE ON store_seal TO PUBLIC",
                "privileges"
            ),
            (
                "edit the newest version's description (owner)", false,
                "UPDATE config_versions SET description = 'edited' WHERE number = (SELECT max(number) FROM config_versions)",
                "does not match its audit record"
            ),
        ]
        #expect(cases.count >= 20)
        var report: [String] = []
        for (index, (label, asWriter, sql, subject)) in cases.enumerated() {
            let name = "\(baseName)_t\(index)"
            try Self.psql(server.adminConninfo, "CREATE DATABASE \(name) TEMPLATE \(baseName)")
            let conninfo = base.replacingOccurrences(of: "dbname=\(baseName)", with: "dbname=\(name)")
            let copy = server.uris(of: conninfo).socket
            // This machine sees the copy first (its witness records the head), as an operator would have.
            try #require(
                try rollout(["audit", "verify"], store: copy).status == 0,
                "\(label): the copy verifies before tampering")
            try Self.psql(asWriter ? Self.writer(conninfo) : conninfo, sql)
            let verify = try rollout(["audit", "verify"], store: copy)
            #expect(verify.status == 1 && verify.stderr.contains(subject), "\(label): \(verify.stderr)")
            let versions = try versionCount(conninfo)
            let write = try rollout(["kill", "--reason", "after tampering"], store: copy)
            #expect(write.status != 0 && !write.stdout.contains("published"), "\(label): the write went through")
            #expect(write.stderr.contains("fails verification, so nothing is written"), "\(label): \(write.stderr)")
            #expect(try versionCount(conninfo) == versions, "\(label)")
            #expect(try rollout(["audit", "verify"], store: copy).status == 1, "\(label): hidden by the next write")
            report.append(
                "\(index + 1). \(label) → \(verify.stderr.dropFirst("rollout: ".count).prefix(150)) | kill: exit \(write.status)"
            )
        }
        print(report.joined(separator: "\n"))
    }

    /// The witness: the owner rolls the database back to an earlier state (deletes the newest version and audit
    /// record and restores the head and seal row of that time, as restoring a snapshot does). The store is
    /// consistent and sealed, so a machine that never saw the later state cannot tell; the machine whose witness
    /// recorded the later record names it, and refuses to write.
    /// What a publish through the write path costs in round trips to the server: three on a sealed store (the
    /// version read before the transaction, ended by a sync point, then BEGIN with the head lock, the seal's state,
    /// the etag and the witness's record; the writes with the state to seal; the seal with COMMIT), seven before
    /// the writes and reads were folded into those round trips; two on a bare connection (five before). The seal
    /// and the witness still hold, and the witness file is rewritten in place (the same inode) once it has its
    /// fixed size.
    /// Counted from a connection's fourth write on: its second and third each prepare a state query once (the
    /// one that also reads the catalog's fingerprint, then the one that reads the fingerprint alone), one more
    /// round trip each, once per connection.
    @Test func aPublishCostsThreeRoundTripsOnASealedStore() throws {
        let server = try Self.quietServer()
        defer { server.stop() }
        let witnesses = directory.appendingPathComponent("witness-trips").path
        let sealing = PostgresSealing(
            key: PostgresSealKey(teamKey: Array(repeating: 9, count: 32), path: key), keyPath: key,
            witnessDirectory: witnesses)
        let sealed = try PostgresConfigStore.create(conninfo: try server.freshDatabase(), sealing: sealing) {
            try PostgresStoreTests.genesis(seed: "trips")
        }
        let bare = try PostgresConfigStore.create(conninfo: try server.freshDatabase()) {
            try PostgresStoreTests.genesis(seed: "trips-bare")
        }
        func nudge(_ store: PostgresConfigStore, _ step: Int64) throws -> Int {
            let path = WritePath(store: store, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "trips" })
            let before = store.roundTrips
            let outcome = try path.execute(
                WritePath.Request(intent: .rollout(.nudge(MicroPercent(step))), actor: "ana@test", reason: "trips", origin: "TEST"))
            guard case .published = outcome else {
                Issue.record("nothing published: \(outcome)")
                return -1
            }
            return store.roundTrips - before
        }
        for store in [sealed, bare] {
            _ = try WritePath(store: store, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "trips" }).execute(
                WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@test", reason: "start", origin: "TEST"))
            #expect(try nudge(store, 100_000) == (store === sealed ? 4 : 3), "the third write prepares its state query")
        }
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: witnesses).first { $0.hasSuffix(".witness") })
        func inodeAndSize() -> (UInt64, Int64) {
            var status = stat()
            guard stat(witnesses + "/" + file, &status) == 0 else { return (0, 0) }
            return (UInt64(status.st_ino), Int64(status.st_size))
        }
        let (inode, size) = inodeAndSize()
        #expect(size == 512)
        #expect(try nudge(sealed, 1_000_000) == 3)
        #expect(try nudge(sealed, -500_000) == 3)
        #expect(try nudge(bare, 1_000_000) == 2)
        #expect(try sealed.verify().versions == 5)
        #expect(try sealed.verifySeal().headSequence == 5)
        #expect(inodeAndSize() == (inode, 512))
    }

    /// The witness's `fdatasync` runs after COMMIT, off the publish's path (`WitnessSync`): a publish is answered
    /// while its witness sync is held back, the witness file already names its record, and the connection's next
    /// publish commits only after that sync finished, so on disk the witness is never more than one write behind.
    @Test func aPublishIsAnsweredBeforeItsWitnessSyncAndTheNextWaitsForIt() throws {
        let witnesses = directory.appendingPathComponent("witness-lag").path
        let conninfo = try PostgresServer.get().freshDatabase()
        let store = try PostgresConfigStore.create(
            conninfo: conninfo,
            sealing: PostgresSealing(
                key: PostgresSealKey(teamKey: Array(repeating: 5, count: 32), path: key), keyPath: key,
                witnessDirectory: witnesses)
        ) { try PostgresStoreTests.genesis(seed: "lag") }
        nonisolated(unsafe) let path = WritePath(store: store, clock: ManualClock(PostgresStoreTests.t0), newSeed: { "lag" })
        @Sendable func nudge(_ step: Int64) throws -> Bool {
            let outcome = try path.execute(
                WritePath.Request(intent: .rollout(.nudge(MicroPercent(step))), actor: "ana@test", reason: "lag", origin: "TEST"))
            if case .published = outcome { return true }
            return false
        }
        // Two writes first: the witness file has its fixed size and is rewritten in place from now on.
        #expect(try nudge(100_000))
        #expect(try nudge(100_000))
        let held = HeldSync()
        defer { held.release() }
        try store.witnessSync.replaceSync(held.sync)
        let reader = try PGConnection(conninfo)
        func headSequence() throws -> String? { try reader.query("SELECT audit_sequence FROM config_head").first?.first ?? nil }
        // Answered while its witness sync is held back; the witness already names the record it committed.
        #expect(try nudge(100_000))
        #expect(store.witnessSync.isBusy)
        let committed = try #require(try headSequence())
        let seen = try #require(try store.witness()?.read())
        #expect(String(seen.sequence) == committed)
        let second = BackgroundCall { try? nudge(100_000) }
        // The next write reaches the wait (bounded) and has committed nothing yet.
        second.wait(until: { store.witnessSync.waiters > 0 })
        #expect(store.witnessSync.waiters == 1)
        #expect(try headSequence() == committed)
        held.release()
        #expect(second.result() == true)
        #expect(try headSequence() == String(Int(committed)! + 1))
        try store.witnessSync.waitUntilSynced()
        #expect(try store.verifySeal().headSequence == Int64(committed)! + 1)
        #expect(try store.witness()?.read()?.sequence == Int64(committed)! + 1)
    }
    /// by that write, which seals the catalog it checked: the next write is refused naming the catalog.
    /// A trigger the owner adds while a write is open (after its seal check, before its COMMIT) is not sealed
    @Test func aCatalogChangeDuringAWriteIsNamedByTheNextWrite() throws {
        let conninfo = try PostgresServer.get().freshDatabase()
        let sealing = PostgresSealing(
            key: PostgresSealKey(teamKey: Array(repeating: 7, count: 32), path: key), keyPath: key,
            witnessDirectory: directory.appendingPathComponent("witness").path)
        let store = try PostgresConfigStore.create(conninfo: conninfo, sealing: sealing) { try PostgresStoreTests.genesis(seed: "catalog") }
        try store.atomically {
            try Self.psql(
                conninfo,
                "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; "
                    + "CREATE TRIGGER keep BEFORE INSERT ON stepup_operators FOR EACH ROW EXECUTE FUNCTION keep()")
        }
        #expect { try store.atomically {} } throws: { "\($0)".contains("catalog: a trigger") }
        #expect { try store.verifySeal() } throws: { "\($0)".contains("catalog") }
    }

    /// A long-lived connection (a console, `serve`) keeps the catalog's digest and privilege check while the
    /// catalog's fingerprint stays the same: every change of the owner's below, made after the connection
    /// started using its cache, is still named by its next write, including the ones that change one catalog
    /// row alone (a column's NOT NULL, a column's grant, the body of a trigger's function).
    @Test func aLongLivedConnectionStillNamesEveryCatalogChange() throws {
        let cases: [(label: String, setup: String?, sql: String, subject: String)] = [
            ("drop a NOT NULL", nil, "ALTER TABLE config_audit ALTER COLUMN reason DROP NOT NULL", "catalog"),
            ("change a column default", nil, "ALTER TABLE config_audit ALTER COLUMN reason SET DEFAULT 'ok'", "catalog"),
            ("grant a column of the audit log", nil, "GRANT UPDATE (reason) ON config_audit TO PUBLIC", "privileges"),
            ("grant DELETE on the versions", nil, "GRANT DELETE ON config_versions TO PUBLIC", "privileges"),
            ("add a rule", nil, "CREATE RULE quiet AS ON INSERT TO stepup_operators DO INSTEAD NOTHING", "catalog"),
            ("enable row-level security", nil, "ALTER TABLE stepup_operators ENABLE ROW LEVEL SECURITY", "catalog"),
            ("add a check constraint", nil, "ALTER TABLE config_audit ADD CONSTRAINT c CHECK (length(reason) >= 0)", "catalog"),
            (
                "replace a sealed trigger's function",
                "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; "
                    + "CREATE TRIGGER keep BEFORE INSERT ON stepup_operators FOR EACH ROW EXECUTE FUNCTION keep()",
                "CREATE OR REPLACE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'", "catalog"
            ),
            (
                "add a second trigger to a table that has one",
                "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; "
                    + "CREATE TRIGGER keep BEFORE INSERT ON stepup_operators FOR EACH ROW EXECUTE FUNCTION keep()",
                "CREATE TRIGGER keep2 BEFORE INSERT ON stepup_operators FOR EACH ROW EXECUTE FUNCTION keep()", "catalog"
            ),
            (
                // Deletes one pg_trigger row and writes no other catalog row (pg_class keeps relhastriggers): no row
                // version of the fingerprint is newer than the cache, only its count tells.
                "drop a sealed trigger",
                "CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'; "
                    + "CREATE TRIGGER keep BEFORE INSERT ON stepup_operators FOR EACH ROW EXECUTE FUNCTION keep()",
                "DROP TRIGGER keep ON stepup_operators", "catalog"
            ),
        ]
        for (index, (label, setup, sql, subject)) in cases.enumerated() {
            let conninfo = try PostgresServer.get().freshDatabase()
            let sealing = PostgresSealing(
                key: PostgresSealKey(teamKey: Array(repeating: 7, count: 32), path: key), keyPath: key,
                witnessDirectory: directory.appendingPathComponent("witness-long-\(index)").path)
            let store = try PostgresConfigStore.create(conninfo: conninfo, sealing: sealing) {
                try PostgresStoreTests.genesis(seed: "long")
            }
            if let setup {
                // Sealed as a migration of this program's would: the same connection, its catalog digested again.
                try store.atomically {
                    try store.connection.execute(setup)
                    store.catalogChanged()
                }
            }
            try store.atomically {}
            try store.atomically {}
            let cached = try #require(store.catalogCache, "\(label): the connection keeps the catalog's digest")
            try Self.psql(conninfo, sql)
            #expect("\(label)") { try store.atomically {} } throws: {
                "\($0)".contains("fails verification") && "\($0)".contains(subject)
            }
            #expect(store.catalogCache?.fingerprint != cached.fingerprint, "\(label)")
            #expect { try store.verifySeal() } throws: { "\($0)".contains(subject) }
        }
    }

    /// A sealed store on a connection of its own, with a row in `guardrail_settings` written (and sealed) by
    /// that connection, and two more writes, so that the connection keeps the tables' digests (`tablesCache`).
    func longLived(_ name: String, on server: PostgresServer? = nil) throws -> (store: PostgresConfigStore, conninfo: String) {
        let conninfo = try (server ?? PostgresServer.get()).freshDatabase()
        let sealing = PostgresSealing(
            key: PostgresSealKey(teamKey: Array(repeating: 5, count: 32), path: key), keyPath: key,
            witnessDirectory: directory.appendingPathComponent("witness-\(name)").path)
        let store = try PostgresConfigStore.create(conninfo: conninfo, sealing: sealing) { try PostgresStoreTests.genesis(seed: name) }
        try store.atomically {
            try store.connection.query("INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.auto-kill', 'on')")
        }
        try store.atomically {}
        try store.atomically {}
        return (store, conninfo)
    }

    /// A long-lived connection keeps the sealed tables' digests while their rows' fingerprint stays the same: a
    /// row another login inserts, updates (even to the values it had) or deletes after that is still named by
    /// the connection's next write, and `audit verify`.
    @Test func aLongLivedConnectionStillNamesEverySealedRowChange() throws {
        let cases: [(label: String, sql: String)] = [
            ("insert a row", "INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.window', '1')"),
            ("update a row", "UPDATE guardrail_settings SET value = 'off'"),
            ("delete a row", "DELETE FROM guardrail_settings"),
            ("delete a row and insert it again", "DELETE FROM guardrail_settings; INSERT INTO guardrail_settings VALUES ('guardrails.auto-kill', 'of')"),
        ]
        for (index, (label, sql)) in cases.enumerated() {
            let (store, conninfo) = try longLived("rows-\(index)")
            let cached = try #require(store.tablesCache, "\(label): the connection keeps the tables' digests")
            try Self.psql(conninfo, sql)
            #expect("\(label)") { try store.atomically {} } throws: {
                "\($0)".contains("fails verification") && "\($0)".contains("table guardrail_settings")
            }
            #expect(store.tablesCache?.fingerprint != cached.fingerprint, "\(label)")
            #expect { try store.verifySeal() } throws: { "\($0)".contains("table guardrail_settings") }
        }
    }

    /// Transaction ids are 32-bit and come round again: after a wraparound, a catalog row or a sealed row can be
    /// rewritten by a transaction whose id is the `xmin` of the version it replaces, and then the fingerprint is
    /// the one the connection cached. Such a collision is made here by giving the connection's caches the
    /// fingerprints read after the change (what the reused id would give): the rewritten row's `xmin` is still
    /// one of the ids handed out since the cache was read, so the next write digests again and names the change.
    @Test func aFingerprintThatCollidesAfterAWraparoundIsNotTrusted() throws {
        let reader = { (conninfo: String, sql: String) throws -> String in
            let c = try PGConnection(conninfo)
            let column = try #require(try c.query("SELECT " + sql).first?.first ?? nil)
            return try #require(PostgresSeal.fingerprint(column)).hash
        }
        let cases: [(label: String, sql: String, subject: String, catalog: Bool)] = [
            ("grant DELETE on the versions", "GRANT DELETE ON config_versions TO PUBLIC", "privileges", true),
            ("drop a NOT NULL", "ALTER TABLE config_audit ALTER COLUMN reason DROP NOT NULL", "catalog", true),
            ("update a sealed row", "UPDATE guardrail_settings SET value = 'off'", "table guardrail_settings", false),
        ]
        for (index, (label, sql, subject, catalog)) in cases.enumerated() {
            let (store, conninfo) = try longLived("collide-\(index)")
            let (cachedCatalog, cachedTables) = (try #require(store.catalogCache), try #require(store.tablesCache))
            try Self.psql(conninfo, sql)
            if catalog {
                let now = try reader(conninfo, PostgresSeal.catalogFingerprint)
                #expect(now != cachedCatalog.fingerprint, "\(label)")
                store.catalogCache = (now, cachedCatalog.since, cachedCatalog.catalog, cachedCatalog.privilege)
            } else {
                let now = try reader(conninfo, PostgresSeal.rowsFingerprint())
                #expect(now != cachedTables.fingerprint, "\(label)")
                store.tablesCache = (now, cachedTables.since, cachedTables.digests)
            }
            #expect("\(label)") { try store.atomically {} } throws: {
                "\($0)".contains("fails verification") && "\($0)".contains(subject)
            }
            #expect { try store.verifySeal() } throws: { "\($0)".contains(subject) }
        }
    }

    /// A connection that reads the same fingerprints keeps its caches across writes, while other transactions
    /// (in this database and others) write rows the fingerprints do not list.
    @Test func unrelatedWritesKeepTheCaches() throws {
        let server = try Self.quietServer()
        defer { server.stop() }
        let (store, conninfo) = try longLived("unrelated", on: server)
        try Self.psql(conninfo, "CREATE SCHEMA elsewhere")
        let other = try server.freshDatabase()
        let cached = try #require(store.catalogCache)
        // A write that reads the fingerprints again costs one more round trip than one that keeps its caches.
        // The server's count of the connection's writes, by which a renewal digests the tables written again
        // (`PostgresSeal.written`), also holds an earlier transaction's until the backend flushes its statistics
        // (when idle, at most once a second): flushed first, so that each write's count is its own, whatever the
        // machine's load did to the timing.
        func trips() throws -> Int {
            try store.connection.query("SELECT pg_stat_force_next_flush()")
            let before = store.roundTrips
            try store.atomically {}
            return store.roundTrips - before
        }
        let kept = try trips()
        for i in 0..<3 {
            try Self.psql(other, "CREATE TABLE IF NOT EXISTS t (n int); INSERT INTO t VALUES (\(i))")
            try Self.psql(conninfo, "CREATE TABLE IF NOT EXISTS elsewhere.t (n int); INSERT INTO elsewhere.t VALUES (\(i))")
            #expect(try trips() == kept, "write \(i)")
        }
        try Self.psql(conninfo, "UPDATE guardrail_settings SET value = value")
        let rewritten = try trips()
        #expect(rewritten == kept + 1, "a sealed row rewritten: the digests are read again (\(kept), \(rewritten))")
        #expect(store.catalogCache?.fingerprint == cached.fingerprint)
        #expect(try #require(store.catalogCache).since > cached.since, "each write that kept the cache moves its start")
    }

    /// The same rows moved (VACUUM FULL rewrites the table: other `ctid`s) only make the next write digest the
    /// table again: it is not refused.
    @Test func sealedRowsRewrittenInPlaceAreNotRefused() throws {
        let (store, conninfo) = try longLived("vacuum")
        let cached = try #require(store.tablesCache)
        try Self.psql(conninfo, "UPDATE guardrail_settings SET value = value")
        try Self.psql(conninfo, "VACUUM FULL guardrail_settings")
        #expect(throws: Never.self) { try store.atomically {} }
        #expect(store.tablesCache?.fingerprint != cached.fingerprint)
        #expect(store.tablesCache?.digests == cached.digests)
        _ = try store.verifySeal()
    }

    /// A row another login writes into a sealed table while a write is open (after its seal check, before its
    /// COMMIT) is not sealed by that write, which did not write that table and seals it as it checked it: the
    /// next write is refused naming the table. A table the write did write itself is sealed as it leaves it.
    /// (The server's counts of a connection's writes can include an earlier transaction's, which only digests
    /// such a table again, as every write did before: so the table changed here is one this connection never
    /// wrote.)
    @Test func aRowChangeDuringAWriteIsNamedByTheNextWrite() throws {
        let (store, conninfo) = try longLived("during")
        try store.atomically {
            try store.connection.query("INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.min-sessions', '10')")
        }
        // The write's own row is sealed.
        #expect(throws: Never.self) { try store.atomically {} }
        try store.atomically {
            try Self.psql(conninfo, "INSERT INTO source_config (name, definition) VALUES ('forged', '{}')")
        }
        #expect { try store.atomically {} } throws: { "\($0)".contains("table source_config") }
        #expect { try store.verifySeal() } throws: { "\($0)".contains("table source_config") }
    }

    /// Found by trying it as a login with the writer role: a write that itself writes a sealed table re-read that
    /// table for its new seal in a fresh snapshot (READ COMMITTED), so another login's change committed after the
    /// seal check was sealed with the write's own rows, never checked (an operator deleted while the victim's
    /// step-up write waited on a row lock the attacker held; `audit verify` then passed). A write now sees one
    /// snapshot, taken right after the head lock: a change committed meanwhile is not sealed, and the next write
    /// names it; one on a row the write changes too runs the write again, whose check then names it.
    @Test func anotherLoginsChangeToATableTheWriteWritesIsNotSealed() throws {
        let (store, conninfo) = try longLived("written-during")
        try store.atomically {
            try store.connection.query("INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.min-sessions', '10')")
            try Self.psql(conninfo, "INSERT INTO guardrail_settings (key, value) VALUES ('forged', '1')")
        }
        #expect { try store.atomically {} } throws: { "\($0)".contains("table guardrail_settings") }
        #expect { try store.verifySeal() } throws: { "\($0)".contains("table guardrail_settings") }

        // The reproduction's order: the other login deletes a row and holds a lock on the row the write changes;
        // the write waits for it, the other login commits, and the write must not seal the deletion.
        let (victim, conninfo2) = try longLived("written-blocked")
        try victim.atomically {
            try victim.connection.query("INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.min-sessions', '10')")
        }
        let attacker = try PGConnection(conninfo2)
        try attacker.execute("BEGIN")
        try attacker.execute("DELETE FROM guardrail_settings WHERE key = 'guardrails.auto-kill'")
        try attacker.execute("UPDATE guardrail_settings SET value = value WHERE key = 'guardrails.min-sessions'")
        nonisolated(unsafe) var outcome: Result<Void, Error>?
        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            defer { done.leave() }
            outcome = Result {
                try victim.atomically {
                    _ = try victim.connection.query("UPDATE guardrail_settings SET value = '20' WHERE key = 'guardrails.min-sessions'")
                }
            }
        }
        let deadline = Date().addingTimeInterval(30)
        while try attacker.query(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).isEmpty {
            try #require(Date() < deadline, "the write never waited for the other login's row lock")
            usleep(2_000)
        }
        try attacker.execute("COMMIT")
        done.wait()
        #expect {
            try outcome?.get()
        } throws: { "\($0)".contains("table guardrail_settings") }
        #expect { try victim.verifySeal() } throws: { "\($0)".contains("table guardrail_settings") }
    }

    /// Found by trying it as the writer role: `ALTER ROLE rollout_writer SET search_path = ''` made every command
    /// say the database holds no rollout store, and advise `rollout init` on a live store.
    @Test func aSearchPathNamingNoSchemaIsNamedNotTakenForAnEmptyDatabase() throws {
        let (_, conninfo) = try longLived("search-path")
        #expect {
            _ = try PostgresConfigStore(conninfo: conninfo + " options='-c search_path='")
        } throws: { "\($0)".contains("search path names no schema") && !"\($0)".contains("create one with") }
        let empty = try PostgresServer.get().freshDatabase()
        #expect {
            _ = try PostgresConfigStore(conninfo: empty)
        } throws: { "\($0)".contains("holds no rollout store in the schemas of its search path (public)") }
    }

    /// A cache write that fails inside another write (the monitor's rollout start, written while a plan runner's
    /// transaction is open) is rolled back alone: the transaction around it goes on (it was left aborted, every
    /// later statement refused with 25P02).
    @Test func aFailedCacheWriteLeavesTheTransactionAroundItUsable() throws {
        let (store, _) = try longLived("best-effort")
        try store.atomically {
            #expect(throws: PostgresError.self) { try store.bestEffort { _ = try store.connection.query("SELECT 1/0") } }
            _ = try store.connection.query("INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.min-sessions', '10')")
        }
        _ = try store.verifySeal()
    }

    /// Without the server's counts of a connection's writes (`track_counts` off), a write that changes a sealed
    /// table still seals what it leaves: every table counts as written.
    @Test func aWriteSealsItsOwnRowsWithoutTheServersCounts() throws {
        let (store, _) = try longLived("untracked")
        try store.connection.execute("SET track_counts = off")
        // A table this connection never wrote (so no earlier write's count stands in for this one's).
        try store.atomically {
            try store.connection.query("INSERT INTO source_config (name, definition) VALUES ('fleet', '{}')")
        }
        #expect(throws: Never.self) { try store.atomically {} }
        _ = try store.verifySeal()
    }

    @Test func aRollbackIsDetectedByTheMachineThatSawTheLaterState() throws {
        let (conninfo, uri) = try initialized("pg-seal-rollback")
        let laptop = directory.appendingPathComponent("laptop").path
        let other = directory.appendingPathComponent("other").path
        try FileManager.default.createDirectory(atPath: laptop, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        // Two operator machines with the same team key, each with its own witness beside it.
        try FileManager.default.copyItem(atPath: key, toPath: laptop + "/team.key")
        try FileManager.default.copyItem(atPath: key, toPath: other + "/team.key")
        try #require(try rollout(["set", "5", "--reason", "start"], store: uri, key: laptop + "/team.key").status == 0)
        try #require(try rollout(["audit", "verify"], store: uri, key: other + "/team.key").status == 0)

        let owner = try PGConnection(conninfo)
        let snapshot = try #require(
            try owner.query("SELECT version, audit_sequence, audit_hash FROM config_head").first)
        let seal = try #require(try owner.query("SELECT state, mac FROM store_seal").first)
        // The monitor's cache of the rollout start is sealed too: a consistent rollback puts its rows back as well.
        let starts = try owner.query("SELECT version, coalesce(started_at::text, 'NULL') FROM monitor_rollout_start")
            .map { "(\($0[0]!), \($0[1]!))" }
        // Only the laptop sees the later state.
        try #require(try rollout(["set", "10", "--reason", "more"], store: uri, key: laptop + "/team.key").status == 0)
        try Self.psql(
            conninfo,
            """
            DELETE FROM config_versions WHERE number > \(snapshot[0]!);
            DELETE FROM config_audit WHERE sequence > \(snapshot[1]!);
            UPDATE config_head SET version = \(snapshot[0]!), audit_sequence = \(snapshot[1]!), audit_hash = '\(snapshot[2]!)';
            DELETE FROM monitor_rollout_start;
            \(starts.isEmpty ? "" : "INSERT INTO monitor_rollout_start (version, started_at) VALUES " + starts.joined(separator: ", ") + ";")
            UPDATE store_seal SET state = $s$\(seal[0]!)$s$, mac = '\(seal[1]!)';
            """)

        // Consistent and sealed: the other machine, which saw only the earlier state, cannot tell.
        let unaware = try rollout(["audit", "verify"], store: uri, key: other + "/team.key")
        #expect(unaware.status == 0, "\(unaware.stderr)")
        let verify = try rollout(["audit", "verify"], store: uri, key: laptop + "/team.key")
        #expect(verify.status == 1, "\(verify.stdout)")
        #expect(
            verify.stderr.contains("witness: this machine saw audit record \(Int(snapshot[1]!)! + 1)")
                && verify.stderr.contains("rolled back"), "\(verify.stderr)")
        let versions = try versionCount(conninfo)
        let write = try rollout(["kill", "--reason", "after the rollback"], store: uri, key: laptop + "/team.key")
        #expect(
            write.status != 0 && write.stderr.contains("fails verification, so nothing is written: witness"),
            "\(write.stderr)")
        #expect(try versionCount(conninfo) == versions)
    }

    /// A store made before the seal (schema 5, no `store_seal`), upgraded with `rollout store migrate`: without the
    /// team key a write is refused naming the key file (and how to make one, since this store never recorded a
    /// key); with it the first write checks the chain and seals the store, and from then on an edit is named.
    @Test func aStoreMadeBeforeTheSealIsSealedByTheFirstWriteWithTheKey() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore(seed: "pg-seal-legacy")
        // As the previous release left it: schema 5, no seal table (nor the later steps' tables).
        try Self.psql(
            conninfo,
            "DROP TABLE store_seal, source_config, source_state, source_ledger, stepup_security_keys, stepup_phones; ALTER TABLE telemetry_installations DROP COLUMN last_crash; DELETE FROM rollout_schema WHERE version >= 6")
        let uri = try PostgresServer.get().uris(of: conninfo).socket
        let old = try rollout(["set", "5", "--reason", "before the upgrade"], store: uri)
        #expect(old.status != 0 && old.stderr.contains("run 'rollout store migrate'"), "\(old.stderr)")
        let migrate = try rollout(["store", "migrate"], store: uri)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(try store.connection.query("SELECT 1 FROM store_seal").isEmpty)
        let missing = directory.appendingPathComponent("absent.key").path
        let refused = try rollout(["set", "5", "--reason", "no key"], store: uri, key: missing)
        #expect(
            refused.status != 0 && refused.stderr.contains("the team store key \(missing) is missing"),
            "\(refused.stderr)")
        #expect(refused.stderr.contains("'rollout operator enroll' creates it"), "\(refused.stderr)")
        let unsealed = try rollout(["audit", "verify"], store: uri, key: missing)
        #expect(unsealed.status == 1 && unsealed.stderr.contains("seal: missing"), "\(unsealed.stderr)")

        _ = try StoreKey.create(key)
        let sealed = try rollout(["set", "5", "--reason", "first sealed write"], store: uri)
        #expect(sealed.status == 0, "\(sealed.stderr)")
        #expect(try rollout(["audit", "verify"], store: uri).status == 0)
        try Self.psql(conninfo, "INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.auto-kill', 'off')")
        let verify = try rollout(["audit", "verify"], store: uri)
        #expect(verify.status == 1 && verify.stderr.contains("table guardrail_settings"), "\(verify.stderr)")
    }
}
