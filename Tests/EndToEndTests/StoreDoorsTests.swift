import Foundation
import StepUp
import TestSupport
import Testing
import Timekeeping

/// The doors into a store besides rollout's own writes (issue "Every door"), driven through the built `rollout`
/// binary with the `sqlite3` command line tool as the attacker: schema objects added or changed by hand, drill
/// stores created in place of an emptied store, and private keys read from the file alone.
struct StoreDoorsTests {
    /// A store in a temporary directory; every command runs under faketime at `t0 + seconds`, so that one-time
    /// codes are computed for the time the binary sees.
    final class Store {
        let directory: URL
        let path: String
        static let t0 = Instant(seconds: 1_780_000_005)  // 15 s into a time step

        init(_ label: String = "store-doors") throws {
            directory = try TestSupport.temporaryDirectory(label)
            path = directory.appendingPathComponent("rollout.db").path
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        static func at(_ seconds: Int64) -> Instant { Instant(seconds: t0.seconds + seconds) }

        @discardableResult
        func run(
            _ arguments: [String], at seconds: Int64 = 0, as id: String = "ana@laptop", store: String? = nil,
            stdin: String? = nil
        ) throws -> TestSupport.ProcessResult {
            let stamp = Self.at(seconds).iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            return try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", store ?? path, "--operator", id],
                stdin: stdin, environment: ["TZ": "UTC", "NO_COLOR": "1"], fakeTime: "@\(stamp)")
        }

        @discardableResult
        func sqlite(_ sql: String, database: String? = nil) throws -> TestSupport.ProcessResult {
            let r = try TestSupport.run("/usr/bin/sqlite3", [database ?? path, sql])
            guard r.status == 0 else { throw TestSupport.Failure("sqlite3 \(sql): \(r.stderr)") }
            return r
        }

        /// One value read with sqlite3.
        func value(_ sql: String, database: String? = nil) throws -> String {
            try sqlite(sql, database: database).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// Enrols `id` for step-up (which turns the default rules on), confirming with a code for `seconds`.
        func enrol(_ id: String, at seconds: Int64) throws -> TOTPSecret {
            let started = try run(["operator", "enroll"], at: seconds, as: id)
            try #require(started.status == 0, "\(started.stderr)")
            let line = try #require(
                started.stdout.split(separator: "\n").first { $0.hasPrefix("URI: otpauth://totp/") })
            let pair = try #require(
                line.split(separator: "?").last?.split(separator: "&").first { $0.hasPrefix("secret=") })
            let secret = try #require(TOTPSecret(base32: String(pair.dropFirst("secret=".count))))
            let confirmed = try run(
                ["operator", "enroll", "--code", "-"], at: seconds, as: id,
                stdin: TOTP.standard.code(secret: secret, at: Self.at(seconds)) + "\n")
            try #require(confirmed.status == 0, "\(confirmed.stderr)")
            return secret
        }

        /// A copy of the store with its key and witness (WAL checkpointed first) in a directory of its own.
        func copy(_ label: String) throws -> (directory: URL, path: String) {
            try sqlite("PRAGMA wal_checkpoint(TRUNCATE);")
            let dir = try TestSupport.temporaryDirectory(label)
            let copy = dir.appendingPathComponent("rollout.db").path
            for suffix in ["", ".key", ".witness"] where FileManager.default.fileExists(atPath: path + suffix) {
                try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix)
            }
            return (dir, copy)
        }
    }

    static func isOneLineError(_ r: TestSupport.ProcessResult) -> Bool {
        r.stderr.hasPrefix("rollout: ") && r.stderr.hasSuffix("\n")
            && r.stderr.dropLast().split(separator: "\n").count == 1
            && !r.stderr.contains("Fatal error") && !r.stderr.contains("Stack dump")
    }

    /// A store with step-up on (ana enrolled, a lockout rule set with her code), at 10%, an App Check app and a
    /// signing key: every sealed domain holds rows. The App Check registrations come first, before step-up is on
    /// (they need no code then).
    static func populated() throws -> (Store, TOTPSecret) {
        let s = try Store()
        try #require(try s.run(["init", "--seed", "rollout-2026"]).status == 0)
        let app = try s.run(
            [
                "appcheck", "app", "add", "1:123:ios:abc", "--project-number", "123", "--project-id", "doors", "--team",
                "ABCDE12345", "--bundle", "com.example.app", "--env", "development",
            ], at: 0)
        try #require(app.status == 0, "\(app.stderr)")
        let rotate = try s.run(["appcheck", "keys", "rotate"], at: 5)
        try #require(rotate.status == 0, "\(rotate.stderr)")
        let secret = try s.enrol("ana@laptop", at: 10)
        try #require(try s.run(["set", "10", "--reason", "start"], at: 30).status == 0)
        let policy = try s.run(
            ["policy", "set", "lockout-minutes", "30", "--code", TOTP.standard.code(secret: secret, at: Store.at(60))],
            at: 60)
        try #require(policy.status == 0, "\(policy.stderr)")
        try #require(try s.run(["audit", "verify"], at: 110).status == 0)
        return (s, secret)
    }

    /// The reproduction of the issue: `sqlite3 r.db "CREATE TRIGGER t AFTER INSERT ON config_audit BEGIN DELETE
    /// FROM stepup_operators; DELETE FROM stepup_policy; END"`, then a `kill` by anyone fired it inside rollout's
    /// own transaction, rollout re-sealed the emptied tables, `audit verify` passed and `set 100` published without
    /// a code. Now the kill is refused before its first statement (the trigger never fires), `audit verify` names
    /// the trigger, and `set 100` publishes nothing.
    @Test func aTriggerAddedBySqlite3IsRefusedBeforeItCanFire() throws {
        let (s, _) = try Self.populated()
        let operators = try s.value("SELECT count(*) FROM stepup_operators")
        let policy = try s.value("SELECT count(*) FROM stepup_policy")
        #expect(operators == "1" && policy != "0")
        try s.sqlite(
            "CREATE TRIGGER t AFTER INSERT ON config_audit BEGIN DELETE FROM stepup_operators; DELETE FROM stepup_policy; END"
        )
        let versions = try s.value("SELECT count(*) FROM config_versions")
        let records = try s.value("SELECT count(*) FROM config_audit")

        let kill = try s.run(["kill", "--reason", "anyone"], at: 200, as: "mallory@laptop")
        #expect(kill.status == 1 && Self.isOneLineError(kill), "\(kill.status) \(kill.stderr)")
        #expect(kill.stderr.contains("fails verification, so nothing is written"), "\(kill.stderr)")
        #expect(kill.stderr.contains("trigger t on table config_audit"), "\(kill.stderr)")
        #expect(try s.value("SELECT count(*) FROM stepup_operators") == operators, "the trigger fired")
        #expect(try s.value("SELECT count(*) FROM stepup_policy") == policy, "the trigger fired")
        #expect(try s.value("SELECT count(*) FROM config_audit") == records)

        let verify = try s.run(["audit", "verify"], at: 210)
        #expect(verify.status == 1 && Self.isOneLineError(verify), "\(verify.stdout) \(verify.stderr)")
        #expect(
            verify.stderr.contains("audit verify failed: schema: trigger t on table config_audit"), "\(verify.stderr)")

        let publish = try s.run(
            ["set", "100", "--reason", "all in", "--override-guardrail"], at: 220, as: "mallory@laptop")
        #expect(publish.status != 0 && !publish.stdout.contains("published"), "\(publish.stdout) \(publish.stderr)")
        #expect(try s.value("SELECT count(*) FROM config_versions") == versions)
        #expect(try s.value("SELECT count(*) FROM stepup_operators") == operators)
    }

    /// At least twelve distinct edits made with sqlite3, each to the schema or to the rows of a sealed table: each is
    /// named by `audit verify` (exit 1), and the next write (a kill, which needs no code) is refused without
    /// publishing or recording anything. The list prints for the release note.
    @Test func everySchemaAndRowEditIsNamedAndStopsTheNextWrite() throws {
        let (s, _) = try Self.populated()
        let edits: [(label: String, sql: String, names: String)] = [
            (
                "trigger on the audit log",
                "CREATE TRIGGER t AFTER INSERT ON config_audit BEGIN DELETE FROM stepup_operators; END",
                "schema: trigger t on table config_audit"
            ),
            (
                "trigger on the seal",
                "CREATE TRIGGER r AFTER UPDATE ON store_seal BEGIN DELETE FROM stepup_policy; END",
                "schema: trigger r on table store_seal"
            ),
            (
                "trigger on telemetry (any ingest would fire it)",
                "CREATE TRIGGER tt AFTER INSERT ON telemetry_batches BEGIN UPDATE stepup_policy SET value = 'off'; END",
                "schema: trigger tt on table telemetry_batches"
            ),
            ("view", "CREATE VIEW operators_v AS SELECT id FROM stepup_operators", "schema: view operators_v"),
            (
                "view with an INSTEAD OF trigger",
                "CREATE VIEW v2 AS SELECT 1 AS x; CREATE TRIGGER tv INSTEAD OF INSERT ON v2 BEGIN DELETE FROM stepup_operators; END",
                "schema: trigger tv on table v2"
            ),
            (
                "index", "CREATE INDEX audit_by_actor ON config_audit(actor)",
                "schema: index audit_by_actor on table config_audit"
            ),
            ("dropped index", "DROP INDEX appcheck_challenges_expiry", "schema: index appcheck_challenges_expiry"),
            (
                "table rebuilt with a CHECK constraint",
                "ALTER TABLE guardrail_settings RENAME TO g_old; CREATE TABLE guardrail_settings (key TEXT PRIMARY KEY, "
                    + "value TEXT NOT NULL CHECK (value <> 'on')); INSERT INTO guardrail_settings SELECT * FROM g_old; DROP TABLE g_old",
                "schema: table guardrail_settings"
            ),
            (
                "DEFAULT expression changed through writable_schema",
                "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, 'value TEXT NOT NULL', "
                    + "'value TEXT NOT NULL DEFAULT ''off''') WHERE name = 'stepup_policy'",
                "schema: table stepup_policy"
            ),
            (
                "column added with a DEFAULT", "ALTER TABLE stepup_policy ADD COLUMN note TEXT DEFAULT 'x'",
                "stepup_policy"
            ),
            (
                "table with a generated column", "CREATE TABLE extra (a INTEGER, b INTEGER AS (a * 2))",
                "schema: table extra"
            ),
            ("sealed table dropped", "DROP TABLE ramp_plan_approval", "table ramp_plan_approval"),
            ("step-up operators deleted", "DELETE FROM stepup_operators", "table stepup_operators"),
            (
                "lockout loosened", "UPDATE stepup_policy SET value = '100' WHERE key = 'lockout-attempts'",
                "table stepup_policy"
            ),
            (
                "operators deleted, then the schema version lowered to 1 (so that the migrations re-seal)",
                "DELETE FROM stepup_operators; PRAGMA user_version = 1", "table stepup_operators"
            ),
            (
                "a challenge inserted, then the schema version lowered to 3 (so that migration 4 recomputes the tallies)",
                "INSERT INTO appcheck_challenges VALUES (x'01', '1:123:ios:abc', 9999999999999999, 0); PRAGMA user_version = 3",
                "table appcheck_challenges"
            ),
            (
                "a plaintext signing key inserted", "INSERT INTO appcheck_signing_keys VALUES ('evil', x'3082', 0)",
                "table appcheck_signing_keys"
            ),
            (
                "the app made to trust the demo authority", "UPDATE appcheck_apps SET trusts_demo_root = 1",
                "table appcheck_apps"
            ),
            (
                "a debug token added", "INSERT INTO appcheck_debug_tokens VALUES (x'00ff', '1:123:ios:abc', 'ci', 0)",
                "table appcheck_debug_tokens"
            ),
            (
                "auto-kill turned on behind the seal",
                "INSERT OR REPLACE INTO guardrail_settings VALUES ('guardrails.auto-kill', 'on')",
                "table guardrail_settings"
            ),
            (
                "the signing key retired at the epoch",
                "INSERT INTO appcheck_signing_key_retirements SELECT kid, 0 FROM appcheck_signing_keys",
                "table appcheck_signing_key_retirements"
            ),
        ]
        #expect(Set(edits.map(\.label)).count >= 20)
        var report: [String] = []
        for (index, edit) in edits.enumerated() {
            let (directory, copy) = try s.copy("doors-\(index)")
            defer { try? FileManager.default.removeItem(at: directory) }
            try #require(try s.run(["audit", "verify"], at: 300, store: copy).status == 0, "\(edit.label): before")
            try s.sqlite(edit.sql, database: copy)
            let versions = try s.value("SELECT count(*) FROM config_versions", database: copy)
            let records = try s.value("SELECT count(*) FROM config_audit", database: copy)
            let verify = try s.run(["audit", "verify"], at: 310, store: copy)
            #expect(
                verify.status == 1 && Self.isOneLineError(verify), "\(edit.label): \(verify.stdout) \(verify.stderr)")
            #expect(verify.stderr.contains(edit.names), "\(edit.label): \(verify.stderr)")
            let kill = try s.run(["kill", "--reason", "after tampering"], at: 320, store: copy)
            #expect(
                kill.status == 1 && !kill.stdout.contains("published"), "\(edit.label): \(kill.stdout) \(kill.stderr)")
            #expect(kill.stderr.contains("fails verification, so nothing is written"), "\(edit.label): \(kill.stderr)")
            #expect(try s.value("SELECT count(*) FROM config_versions", database: copy) == versions, "\(edit.label)")
            #expect(try s.value("SELECT count(*) FROM config_audit", database: copy) == records, "\(edit.label)")
            report.append(
                "- \(edit.label): \(verify.stderr.dropFirst("rollout: audit verify failed: ".count).prefix(90))")
        }
        print(report.joined(separator: "\n"))
    }

    /// The tables that joined the seal with the one list both stores seal (`SealedTables`): the monitor's cache of
    /// the rollout start, the simulation clock and the configured telemetry sources were not sealed on the file,
    /// so an edit of each went unnoticed (a forged start in the future made auto-kill wait forever; a forged
    /// heartbeat made a plan skip its holds). Each edit is named by `audit verify` (exit 1) and stops the next write.
    @Test func theTablesThatJoinedTheSealAreNamedAndStopTheNextWrite() throws {
        let (s, secret) = try Self.populated()
        let add = try s.run(
            [
                "source", "add", "bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1", "--code",
                TOTP.standard.code(secret: secret, at: Store.at(120)),
            ], at: 120)
        try #require(add.status == 0, "\(add.stderr)")
        try #require(try s.run(["status"], at: 130).status == 0)
        try #require(try s.run(["audit", "verify"], at: 140).status == 0)
        let tomorrow = Store.at(86_400).microseconds
        let edits: [(label: String, sql: String, names: String)] = [
            (
                "the rollout's start moved to tomorrow",
                "INSERT OR REPLACE INTO monitor_rollout_start (version, started_at) SELECT max(number), \(tomorrow) FROM config_versions",
                "table monitor_rollout_start"
            ),
            (
                "a live simulation heartbeat seven hours ahead",
                "INSERT OR REPLACE INTO simulation_clock VALUES (1, \(Store.at(0).microseconds), \(Store.at(0).microseconds), "
                    + "10000, \(Store.at(300).microseconds), \(Store.at(7 * 3600).microseconds), 1)",
                "table simulation_clock"
            ),
            (
                "a telemetry source pointed elsewhere",
                "UPDATE source_config SET definition = replace(definition, 'demo-rollout', 'other')",
                "table source_config"
            ),
        ]
        for (index, edit) in edits.enumerated() {
            let (directory, copy) = try s.copy("joined-\(index)")
            defer { try? FileManager.default.removeItem(at: directory) }
            try #require(try s.run(["audit", "verify"], at: 300, store: copy).status == 0, "\(edit.label): before")
            try s.sqlite(edit.sql, database: copy)
            let records = try s.value("SELECT count(*) FROM config_audit", database: copy)
            let verify = try s.run(["audit", "verify"], at: 310, store: copy)
            #expect(verify.status == 1 && verify.stderr.contains(edit.names), "\(edit.label): \(verify.stderr)")
            let kill = try s.run(["kill", "--reason", "after tampering"], at: 320, store: copy)
            #expect(kill.status == 1, "\(edit.label): \(kill.stdout) \(kill.stderr)")
            #expect(kill.stderr.contains("fails verification, so nothing is written"), "\(edit.label): \(kill.stderr)")
            #expect(kill.stderr.contains(edit.names), "\(edit.label): \(kill.stderr)")
            #expect(try s.value("SELECT count(*) FROM config_audit", database: copy) == records, "\(edit.label)")
        }
    }

    /// Found by trying it with `sqlite3` (and with the team store's writer role, `PostgresSourceStateTests`): the
    /// configured sources were read for a pull without the seal's check, so a source row written past rollout had
    /// its access-token command run on the operator's machine by `follow` (and `watch`, `plan run`, the console,
    /// `source test`) before any write named the change. A pull now reads its sources after the seal is checked
    /// in the same snapshot: the command never runs, and the store is named as failing verification.
    @Test func aSourceRowWrittenPastRolloutIsNeverPulled() throws {
        let (s, secret) = try Self.populated()
        let add = try s.run(
            [
                "source", "add", "bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1",
                "--source-token-command", "echo tok", "--code", TOTP.standard.code(secret: secret, at: Store.at(120)),
            ], at: 120)
        try #require(add.status == 0, "\(add.stderr)")
        let marker = s.directory.appendingPathComponent("planted-command-ran").path
        try s.sqlite("UPDATE source_config SET definition = replace(definition, 'echo tok', 'touch \(marker); echo tok')")
        try #require(try s.value("SELECT definition FROM source_config").contains(marker))
        for arguments in [["follow", "--looks", "1"], ["source", "test", "bq"]] {
            let r = try s.run(arguments, at: 200)
            #expect(r.status == 1 && r.stderr.contains("fails verification") && r.stderr.contains("table source_config"), "\(arguments): \(r.stdout) \(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker), "\(arguments): the planted command ran")
        }
        // What is stored can still be shown.
        let list = try s.run(["source", "list"], at: 210)
        #expect(list.status == 0 && list.stdout.contains("bq"), "\(list.stderr)")
    }

    /// The issue's second reproduction: `: > r.db` (a zero-length store file), then `rollout simulate --store
    /// r.db` re-created a store there (step-up off, the old witness overwritten), and `set 100
    /// --override-guardrail` published without a code. Now simulate and demo refuse a zero-length file and a
    /// missing store whose key, witness or write-ahead log is still there, with a one-line error naming the path
    /// (exit 1), and nothing is created or changed.
    @Test func simulateAndDemoCreateDrillStoresOnlyWhereNothingIs() throws {
        let s = try Store("drill-doors")
        let empty = s.directory.appendingPathComponent("empty.db").path
        #expect(FileManager.default.createFile(atPath: empty, contents: Data()))
        // A store removed, its key and witness left beside the path; and one with only the witness left.
        let removed = s.directory.appendingPathComponent("removed.db").path
        let witnessOnly = s.directory.appendingPathComponent("witness-only.db").path
        for path in [removed, witnessOnly] {
            try #require(try s.run(["init"], store: path).status == 0)
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        try FileManager.default.removeItem(atPath: witnessOnly + ".key")
        // And a write-ahead log without its database (SQLite would replay a valid one into a new file).
        let walOnly = s.directory.appendingPathComponent("wal-only.db").path
        #expect(FileManager.default.createFile(atPath: walOnly + "-wal", contents: Data("leftover".utf8)))
        let listing = { try FileManager.default.contentsOfDirectory(atPath: s.directory.path).sorted() }
        let before = try listing()
        // The files' bytes, read without opening them as databases (sqlite3 would claim the empty file).
        let files = [empty, removed, witnessOnly, walOnly].flatMap { p in
            ["", ".key", ".witness", "-wal"].map { p + $0 }
        }
        let fingerprint = { try files.map(TestSupport.StoreFingerprint.sha256) }
        let fingerprints = try fingerprint()

        let simulate = ["simulate", "--scenario", "steady", "--devices", "5", "--speed", "max", "--duration", "1m"]
        let cases: [(String, [String], String)] = [
            ("simulate on a zero-length file", simulate, empty),
            ("simulate beside a leftover key and witness", simulate, removed),
            ("simulate beside a leftover witness", simulate, witnessOnly),
            ("demo on a zero-length file", ["demo"], empty),
            ("demo beside a leftover key and witness", ["demo"], removed),
            ("demo beside a leftover witness", ["demo"], witnessOnly),
            ("simulate beside a leftover write-ahead log", simulate, walOnly),
            ("demo beside a leftover write-ahead log", ["demo"], walOnly),
        ]
        for (label, command, path) in cases {
            let r = try s.run(command, as: "simulator", store: path, stdin: "")
            #expect(r.status == 1 && Self.isOneLineError(r), "\(label): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains(path), "\(label) must name the path: \(r.stderr)")
            #expect(try listing() == before, "\(label): nothing may be created")
        }
        #expect(try fingerprint() == fingerprints)
        #expect(try Data(contentsOf: URL(fileURLWithPath: empty)).isEmpty)

        // A new path still becomes a drill store, and only init creates an ordinary one.
        let fresh = s.directory.appendingPathComponent("drill/new.db").path
        let drill = try s.run(simulate, as: "simulator", store: fresh)
        #expect(drill.status == 0, "\(drill.stderr)")
        #expect(try s.run(["status"], store: fresh).stdout.contains("drill store"))
        #expect(try s.run(["audit", "verify"], store: fresh).status == 0)
    }

    /// The issue's fourth reproduction: with the `.db` alone (no `.key`) the App Check token signing key and the
    /// demo certificate authority's keys were DER private keys in plain sight (`sqlite3 r.db "SELECT
    /// hex(private_key) FROM appcheck_signing_keys"`, then `openssl pkey -inform DER`), enough to mint a token
    /// with `exp` in 2033 that `token verify` and `serve` accepted. Now each column holds an AES-GCM box that
    /// openssl does not read as a key, a copy of the file without its key lists no key, and a plaintext key
    /// written into the column is refused when read.
    @Test func privateKeysAreNotReadableFromTheStoreFileAlone() throws {
        let s = try Store("private-keys")
        try #require(try s.run(["init"]).status == 0)
        let app = try s.run(
            [
                "appcheck", "app", "add", "1:123:ios:abc", "--project-number", "123", "--project-id", "doors", "--team",
                "ABCDE12345", "--bundle", "com.example.app", "--env", "development", "--trust-demo",
            ])
        try #require(app.status == 0, "\(app.stderr)")
        try #require(try s.run(["appcheck", "keys", "rotate"]).status == 0)
        let kid = try s.value("SELECT kid FROM appcheck_signing_keys")
        #expect(!kid.isEmpty)
        #expect(try s.run(["appcheck", "keys", "list"]).stdout.contains(kid))

        let columns = [
            ("signing key", "SELECT hex(private_key) FROM appcheck_signing_keys"),
            ("demo root key", "SELECT hex(root_key) FROM appcheck_demo_authority"),
            ("demo intermediate key", "SELECT hex(intermediate_key) FROM appcheck_demo_authority"),
        ]
        for (label, sql) in columns {
            let hex = try s.value(sql)
            #expect(hex.count > 64, "\(label): \(hex.prefix(16))")
            // A DER private key starts with a SEQUENCE (30); a PEM one with "-----BEGIN" (2D2D2D2D2D).
            #expect(!hex.hasPrefix("30") && !hex.contains("2D2D2D2D2D"), "\(label): \(hex.prefix(16))")
            let bytes = Data(
                stride(from: 0, to: hex.count, by: 2).compactMap { i -> UInt8? in
                    let start = hex.index(hex.startIndex, offsetBy: i)
                    return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)
                })
            let file = s.directory.appendingPathComponent("column.bin").path
            #expect(FileManager.default.createFile(atPath: file, contents: bytes))
            for form in ["DER", "PEM"] {
                let parsed = try TestSupport.run("/usr/bin/openssl", ["pkey", "-inform", form, "-in", file, "-noout"])
                #expect(parsed.status != 0, "\(label): openssl reads it as a \(form) private key")
            }
        }

        // The file alone (and its witness), without the key: no private key comes out of it.
        let (directory, copy) = try s.copy("private-keys-copy")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.removeItem(atPath: copy + ".key")
        let list = try s.run(["appcheck", "keys", "list", "--read-only"], store: copy)
        #expect(list.status == 1 && Self.isOneLineError(list) && list.stderr.contains(copy + ".key"), "\(list.stderr)")
        #expect(!list.stdout.contains(kid))

        // A plaintext key written into the column is refused when read, not used.
        let der = s.directory.appendingPathComponent("key.der").path
        let generated = try TestSupport.run(
            "/usr/bin/openssl",
            ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-outform", "DER", "-out", der])
        try #require(generated.status == 0, "\(generated.stderr)")
        let plain = try Data(contentsOf: URL(fileURLWithPath: der)).map { String(format: "%02X", $0) }.joined()
        try s.sqlite("UPDATE appcheck_signing_keys SET private_key = x'\(plain)'")
        let read = try s.run(["appcheck", "keys", "list", "--read-only"])
        #expect(read.status == 1 && read.stderr.contains("not encrypted"), "\(read.status) \(read.stderr)")
    }
}
