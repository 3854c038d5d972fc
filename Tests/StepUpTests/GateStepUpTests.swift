import Crypto
import Foundation
import Rollout
import StepUp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// The gate with step-up on, through the real binary under libfaketime: a killed rollout's new percentage is
/// judged as what resume would expose, an explicit rollout change needs a code, and every table that decides a
/// write is covered by `audit verify` and by the check every write runs first (tampering with `sqlite3`).
@Suite(.serialized)
struct GateStepUpTests {
    static let t0 = OperatorCLITests.t0

    static func at(_ seconds: Int64) -> Instant { Instant(seconds: t0.seconds + seconds) }

    /// A store with an enrolled operator, a rollout at 10%, a policy and a guardrail setting, an App Check
    /// project and app (written through the store's own connection, as the exchange writes them).
    static func populated() throws -> (OperatorCLITests.Session, TOTPSecret) {
        let s = try OperatorCLITests.Session()
        let secret = try s.enrol("ana@laptop", at: t0)
        let ana = ["--operator", "ana@laptop"]
        try #require(try s.run(["set", "10", "--reason", "start"] + ana, at: at(30)).status == 0)
        let lockout = try s.run(
            ["policy", "set", "lockout-minutes", "30", "--code", OperatorCLITests.code(secret, at(60))] + ana,
            at: at(60))
        try #require(lockout.status == 0, "\(lockout.stderr)")
        let autoKill = try s.run(
            ["policy", "set", "guardrails.auto-kill", "on", "--code", OperatorCLITests.code(secret, at(90))] + ana,
            at: at(90))
        try #require(autoKill.status == 0, "\(autoKill.stderr)")
        let store = try RolloutStore(path: s.store, create: false)
        try store.database.transaction {
            try store.database.run("INSERT INTO appcheck_project VALUES (1, '123456789', 'demo-project')")
            try store.database.run(
                "INSERT INTO appcheck_apps VALUES ('1:123:ios:abc', 'TEAMID1234', 'com.example.app', 'production', 0, 3600, 0)"
            )
        }
        try #require(try s.run(["audit", "verify"], at: at(100)).status == 0)
        return (s, secret)
    }

    @Test func whileKilledANewPercentageIsJudgedAsWhatResumeWouldExpose() throws {
        let (s, secret) = try Self.populated()
        let ana = ["--operator", "ana@laptop"]
        #expect(try s.run(["kill", "--reason", "incident"] + ana, at: Self.at(120)).status == 0)
        // 10% killed → 100%: resume would expose everyone, so it needs a code (and a reason), as from 10% rolling.
        let noCode = try s.run(["set", "100", "--reason", "all in"] + ana, at: Self.at(150))
        #expect(noCode.status == 4 && noCode.stderr.contains("code"), "\(noCode.stderr)")
        let noReason = try s.run(
            ["set", "100", "--code", OperatorCLITests.code(secret, Self.at(150))] + ana, at: Self.at(150))
        #expect(noReason.status == 4 && noReason.stderr.contains("needs a reason"), "\(noReason.stderr)")
        #expect(try s.run(["status", "--json"], at: Self.at(160)).stdout.contains("\"microPercent\": 10000000"))
        let withCode = try s.run(
            ["set", "100", "--reason", "all in", "--code", OperatorCLITests.code(secret, Self.at(180))] + ana,
            at: Self.at(180))
        #expect(withCode.status == 0, "\(withCode.stderr)")
        // A decrease while killed stays free, as does the kill itself.
        #expect(try s.run(["set", "5"] + ana, at: Self.at(210)).status == 0)
    }

    @Test func anExplicitRolloutChangeNeedsACode() throws {
        let (s, secret) = try Self.populated()
        let ana = ["--operator", "ana@laptop"]
        let exported = try s.run(["config", "export"], at: Self.at(120)).stdout
        let file = s.directory.appendingPathComponent("no-cohort.json").path
        let edited = exported.replacingOccurrences(of: "\"AppAttestCohort\"", with: "\"Renamed\"")
            .replacingOccurrences(of: #""etag": "[^"]*""#, with: #""x": 1"#, options: .regularExpression)
        try #require(FileManager.default.createFile(atPath: file, contents: Data(edited.utf8)))
        let refused = try s.run(["config", "import", file, "--reason", "r"] + ana, at: Self.at(130))
        #expect(refused.status == 4 && refused.stderr.contains("removes the cohort parameter"), "\(refused.stderr)")
        let noCode = try s.run(
            ["config", "import", file, "--reason", "r", "--allow-rollout-change"] + ana, at: Self.at(140))
        #expect(noCode.status == 4 && noCode.stderr.contains("code"), "\(noCode.stderr)")
        let ok = try s.run(
            [
                "config", "import", file, "--reason", "r", "--allow-rollout-change", "--code",
                OperatorCLITests.code(secret, Self.at(150)),
            ]
                + ana, at: Self.at(150))
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(try s.audit().contains { $0.action.hasPrefix("step-up") && $0.detail.contains("rollout-change") })
    }

    /// The step-up secret is encrypted at rest: the store file holds no secret, and another key cannot open it.
    @Test func secretsAreEncryptedWithTheKeyBesideTheStore() throws {
        let (s, secret) = try Self.populated()
        let rows = try TestSupport.run("/usr/bin/sqlite3", [s.store, "SELECT hex(secret) FROM stepup_operators"]).stdout
        #expect(!rows.isEmpty && !rows.contains(Hex.encode(secret.bytes).uppercased()))
        #expect(rows.hasPrefix(Hex.encode(Array("RSE1".utf8)).uppercased()))
        let mode = try FileManager.default.attributesOfItem(atPath: s.store + ".key")[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)
        // The key's own file, not the store, is what lets a code be checked.
        try FileManager.default.removeItem(atPath: s.store + ".key")
        let r = try s.run(
            [
                "set", "15", "--reason", "r", "--operator", "ana@laptop", "--code",
                OperatorCLITests.code(secret, Self.at(120)),
            ],
            at: Self.at(120))
        #expect(r.status != 0 && r.stderr.contains(".key"), "\(r.stderr)")
    }

    /// Each direct edit with `sqlite3`: `audit verify` names it (exit 1) and the next write refuses, publishing
    /// nothing. Cases print as a list for the release note.
    @Test func tamperingWithAnyDecidingTableIsNamedAndStopsWrites() throws {
        let (s, _) = try Self.populated()
        let python = try TestSupport.python()
        // Rewrites the newest audit record's reason and every hash after it consistently (chain, head, seal);
        // with `mac` also the seal's HMAC with the real key (an attacker who has the key file too).
        let rewrite = """
            import hashlib, hmac, json, sqlite3, sys
            db = sqlite3.connect(sys.argv[1]); mac = sys.argv[2] == 'mac'
            rows = db.execute('SELECT sequence, time, actor, action, from_state, to_state, reason, result, version, detail, previous_hash FROM config_audit ORDER BY sequence DESC LIMIT 1').fetchall()
            seq, time, actor, action, frm, to, reason, result, version, detail, prev = rows[0]
            reason = 'rewritten'
            canon = json.dumps({'seq': seq, 'time': time, 'actor': actor, 'action': action, 'from': frm, 'to': to, 'reason': reason, 'result': result, 'version': version, 'detail': detail}, separators=(',', ':'), ensure_ascii=False)
            h = hashlib.sha256((prev + '\\n' + canon).encode()).hexdigest()
            db.execute('UPDATE config_audit SET reason = ?, hash = ? WHERE sequence = ?', (reason, h, seq))
            db.execute('UPDATE config_head SET audit_hash = ?', (h,))
            tables = db.execute('SELECT tables FROM store_seal').fetchone()[0]
            db.execute('UPDATE store_seal SET audit_hash = ?', (h,))
            if mac:
                key = bytes.fromhex(open(sys.argv[1] + '.key').read().split()[1])
                state = tables + ' head=%d:%s' % (seq, h) + ' tally=' + db.execute('SELECT tally FROM store_seal').fetchone()[0]
                db.execute('UPDATE store_seal SET mac = ?', (hmac.new(key, state.encode(), hashlib.sha256).hexdigest(),))
            db.commit()
            """
        let script = s.directory.appendingPathComponent("rewrite.py").path
        try #require(FileManager.default.createFile(atPath: script, contents: Data(rewrite.utf8)))
        let newest = "(SELECT max(sequence) FROM config_audit)"
        typealias Tamper = (String, (String) throws -> Void, String)
        func sql(_ statement: String) -> (String) throws -> Void {
            { path in
                let r = try TestSupport.run("/usr/bin/sqlite3", [path, statement])
                guard r.status == 0 else { throw TestSupport.Failure("sqlite3 \(statement): \(r.stderr)") }
            }
        }
        let cases: [Tamper] = [
            (
                "DELETE FROM stepup_operators (step-up off)", sql("DELETE FROM stepup_operators"),
                "table stepup_operators"
            ),
            (
                "unlock: reset wrong codes, lockout and last code",
                sql("UPDATE stepup_operators SET failed_attempts = 0, locked_until = NULL, last_accepted_step = NULL"),
                "table stepup_operators"
            ),
            ("replace a secret", sql("UPDATE stepup_operators SET secret = zeroblob(40)"), "table stepup_operators"),
            (
                "insert an operator",
                sql(
                    "INSERT INTO stepup_operators (id, secret, enrolled_at, failed_attempts) VALUES ('mallory', x'00', 0, 0)"
                ),
                "table stepup_operators"
            ),
            (
                "insert an approved pending enrolment",
                sql("INSERT INTO stepup_enrolments VALUES ('eve', x'00', 0, 'ana@laptop', 0)"),
                "table stepup_enrolments"
            ),
            (
                "turn a policy rule off", sql("UPDATE stepup_policy SET value = 'off' WHERE key = 'rollback'"),
                "table stepup_policy"
            ),
            ("DELETE FROM stepup_policy", sql("DELETE FROM stepup_policy"), "table stepup_policy"),
            ("auto-kill off", sql("UPDATE guardrail_settings SET value = 'off'"), "table guardrail_settings"),
            ("DELETE FROM guardrail_settings", sql("DELETE FROM guardrail_settings"), "table guardrail_settings"),
            ("trust the demo root", sql("UPDATE appcheck_apps SET trusts_demo_root = 1"), "table appcheck_apps"),
            ("DELETE FROM appcheck_project", sql("DELETE FROM appcheck_project"), "table appcheck_project"),
            ("DELETE FROM store_seal", sql("DELETE FROM store_seal"), "seal: missing"),
            ("edit the seal's HMAC", sql("UPDATE store_seal SET mac = '00'"), "seal: its HMAC does not match"),
            (
                "drop the newest audit record and move the head back (consistent config tables)",
                sql(
                    "DELETE FROM config_audit WHERE sequence = \(newest); UPDATE config_head SET audit_sequence = "
                        + "(SELECT max(sequence) FROM config_audit), audit_hash = (SELECT hash FROM config_audit ORDER BY sequence DESC LIMIT 1)"
                ),
                "chain head"
            ),
            (
                "consistent rewrite of the chain, its head and the seal's head (no key)",
                { path in
                    let r = try TestSupport.run(python, [script, path, "nomac"])
                    guard r.status == 0 else { throw TestSupport.Failure(r.stderr) }
                }, "seal: its HMAC does not match"
            ),
            (
                "consistent rewrite of the chain, its head and the seal, with the key (only the witness knows)",
                { path in
                    let r = try TestSupport.run(python, [script, path, "mac"])
                    guard r.status == 0 else { throw TestSupport.Failure(r.stderr) }
                }, "witness"
            ),
            (
                "delete the witness", { path in try FileManager.default.removeItem(atPath: path + ".witness") },
                "witness"
            ),
            (
                "replace the store key",
                { path in
                    try FileManager.default.removeItem(atPath: path + ".key")
                    let fresh = "rollout-store-key-v1 " + String(repeating: "ab", count: 32) + "\n"
                    #expect(
                        FileManager.default.createFile(
                            atPath: path + ".key", contents: Data(fresh.utf8), attributes: [.posixPermissions: 0o600]))
                }, "seal: its HMAC does not match"
            ),
            (
                "edit the newest version's template (the seed)",
                sql("UPDATE config_versions SET template = replace(template, 'rollout-', 'evil-') WHERE number = 2"),
                "version 2"
            ),
            (
                "edit the newest audit record",
                sql("UPDATE config_audit SET actor = 'mallory' WHERE sequence = \(newest)"), "audit record"
            ),
            (
                "edit an older audit record (history: found by audit verify's full scan)",
                sql("UPDATE config_audit SET actor = 'mallory' WHERE sequence = 2"), "audit record 2"
            ),
            (
                "edit an older version's metadata (history: found by audit verify's full scan)",
                sql("UPDATE config_versions SET update_user = 'mallory' WHERE number = 1"), "version 1"
            ),
        ]
        // The check every write runs first costs the same however long the history is: it covers the sealed
        // tables, the seal, the witness, the head and the newest record and version. Edits further back are named by
        // `audit verify`, which reads everything.
        let history = Set([
            "edit an older audit record (history: found by audit verify's full scan)",
            "edit an older version's metadata (history: found by audit verify's full scan)",
        ])
        #expect(cases.count - history.count >= 15)
        var report: [String] = []
        for (index, (label, tamper, subject)) in cases.enumerated() {
            let copy = try TestSupport.temporaryDirectory("tamper-\(index)").appendingPathComponent("rollout.db").path
            defer { try? FileManager.default.removeItem(atPath: (copy as NSString).deletingLastPathComponent) }
            _ = try TestSupport.run("/usr/bin/sqlite3", [s.store, "PRAGMA wal_checkpoint(TRUNCATE);"])
            for suffix in ["", ".key", ".witness"] {
                try FileManager.default.copyItem(atPath: s.store + suffix, toPath: copy + suffix)
            }
            func rollout(_ args: [String]) throws -> TestSupport.ProcessResult {
                try TestSupport.run(
                    try TestSupport.rolloutBinary(), args + ["--store", copy, "--operator", "ana@laptop"])
            }
            try #require(try rollout(["audit", "verify"]).status == 0, "\(label): the copy verifies before tampering")
            try tamper(copy)
            let verify = try rollout(["audit", "verify"])
            #expect(verify.status == 1 && verify.stderr.contains(subject), "\(label): \(verify.stderr)")
            let versions = try TestSupport.run("/usr/bin/sqlite3", [copy, "SELECT count(*) FROM config_versions"])
                .stdout
            let write = try rollout(["kill", "--reason", "after tampering"])
            if !history.contains(label) {
                #expect(write.status != 0 && !write.stdout.contains("published"), "\(label): the write went through")
                #expect(write.stderr.contains("fails verification, so nothing is written"), "\(label): \(write.stderr)")
                #expect(
                    try TestSupport.run("/usr/bin/sqlite3", [copy, "SELECT count(*) FROM config_versions"]).stdout
                        == versions)
            }
            // Either way the damage stays visible.
            #expect(try rollout(["audit", "verify"]).status == 1, "\(label): hidden by the next write")
            report.append(
                "\(index + 1). \(label) → audit verify: \(verify.stderr.dropFirst("rollout: ".count).prefix(170)) | next write: exit \(write.status)"
            )
        }
        print(report.joined(separator: "\n"))
    }
}
