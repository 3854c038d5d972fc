import Foundation
import TestSupport
import Testing

/// The store commands driven through the built `rollout` binary, checked from outside: exit codes, one-line
/// errors, JSON output, the file left untouched by bad input, tampering seen by `audit verify` (edits made with
/// the sqlite3 CLI), and the exported server template evaluated by firebase-admin.
struct CLIStoreTests {
    /// A store in a temporary directory and the binary run against it.
    final class Store {
        let directory: URL
        let path: String

        init() throws {
            directory = try TestSupport.temporaryDirectory("rollout-cli")
            path = directory.appendingPathComponent("rollout.db").path
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        @discardableResult
        func run(_ arguments: [String], operator id: String = "ana@example.com", stdin: String? = nil) throws
            -> TestSupport.ProcessResult
        {
            try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments, stdin: stdin,
                environment: ["ROLLOUT_STORE": path, "ROLLOUT_OPERATOR": id, "NO_COLOR": "1"])
        }

        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }

        func write(_ name: String, _ text: String) -> String {
            let p = file(name)
            #expect(FileManager.default.createFile(atPath: p, contents: Data(text.utf8)))
            return p
        }

        func sqlite(_ sql: String, database: String? = nil) throws -> TestSupport.ProcessResult {
            try TestSupport.run("/usr/bin/sqlite3", [database ?? path, sql])
        }

        /// The file's bytes, whether a WAL is left over, and the sqlite3 dump: what "unchanged" means.
        func snapshot() throws -> (Data?, Bool, String) {
            let bytes = FileManager.default.contents(atPath: path)
            let wal = FileManager.default.fileExists(atPath: path + "-wal")
            return (bytes, wal, try sqlite(".dump").stdout)
        }

        func json(_ arguments: [String]) throws -> Any {
            let r = try run(arguments)
            guard r.status == 0 else { throw TestSupport.Failure("\(arguments) failed: \(r.stderr)") }
            return try JSONSerialization.jsonObject(with: Data(r.stdout.utf8), options: [.fragmentsAllowed])
        }
    }

    static func isOneLineError(_ r: TestSupport.ProcessResult) -> Bool {
        r.stderr.hasPrefix("rollout: ") && r.stderr.hasSuffix("\n")
            && r.stderr.dropLast().split(separator: "\n").count == 1
            && !r.stderr.contains("Fatal error") && !r.stderr.contains("Stack dump")
    }

    @Test func everyStoreCommandHasHelpWithExamples() throws {
        let s = try Store()
        for command in [
            ["init"], ["status"], ["set"], ["nudge"], ["kill"], ["resume"], ["history"], ["rollback"], ["diff"],
            ["config", "export"], ["config", "import"], ["audit", "show"], ["audit", "verify"],
        ] {
            let r = try s.run(command + ["--help"])
            #expect(r.status == 0, "\(command)")
            #expect(
                r.stdout.contains("EXAMPLES:") && r.stdout.contains("  rollout \(command.joined(separator: " "))"),
                "\(command)")
            #expect(r.stdout.contains("--store"), "\(command): global options listed")
        }
        #expect(!FileManager.default.fileExists(atPath: s.path), "help must not create the store")
    }

    @Test func writeCommandsPrintSummaryDiffAndVersion() throws {
        let s = try Store()
        let created = try s.run(["init", "--seed", "rollout-2026"])
        #expect(
            created.status == 0 && created.stdout.contains("version 1") && created.stdout.contains("seed rollout-2026"))
        #expect(try s.run(["init"]).status == 1)

        let set = try s.run(["set", "10", "--reason", "first step"])
        #expect(set.status == 0)
        #expect(set.stdout.contains("AppAttestEnabled 0% → 10% (+10 points), rolling"))
        #expect(
            set.stdout.contains(
                "~ condition app_attest_rollout: percent('rollout-2026') <= 0  →  percent('rollout-2026') <= 10"))
        #expect(set.stdout.contains("published version 2 (etag etag-2-"))

        let dry = try s.run(["nudge", "+2.5", "--dry-run", "--reason", "r"])
        #expect(
            dry.status == 0 && dry.stdout.hasPrefix("dry run: nothing written")
                && dry.stdout.contains("would publish version 3"))
        let unchanged = try s.snapshot()
        #expect(try s.run(["set", "10"]).stdout.contains("no change"))
        #expect(try s.snapshot() == unchanged, "a no-op set writes nothing")

        #expect(try s.run(["nudge", "+2.5", "--reason", "r"]).stdout.contains("10% → 12.5%"))
        #expect(try s.run(["kill", "--reason", "spike"]).stdout.contains("killed at 12.5%"))
        #expect(try s.run(["resume", "--reason", "r"]).stdout.contains("resumed at 12.5%"))
        let forced = try s.run(["set", "20", "--force", "--reason", "override"])
        #expect(forced.status == 0 && forced.stdout.contains("forced"))
        let rollback = try s.run(["rollback", "2", "--reason", "undo"])
        #expect(
            rollback.status == 0 && rollback.stdout.contains("roll back to version 2")
                && rollback.stdout.contains("published version 7"))

        let status = try #require(try s.json(["status", "--json"]) as? [String: Any])
        let rollout = try #require(status["rollout"] as? [String: Any])
        #expect(rollout["microPercent"] as? Int == 10_000_000 && rollout["state"] as? String == "rolling")
        #expect((status["version"] as? [String: Any])?["versionNumber"] as? Int == 7)

        let history = try #require(try s.json(["history", "--json"]) as? [[String: Any]])
        #expect(history.map { $0["versionNumber"] as? Int } == [7, 6, 5, 4, 3, 2, 1])
        #expect(history[0]["updateType"] as? String == "ROLLBACK" && history[0]["rollbackSource"] as? Int == 2)
        #expect(history[1]["updateType"] as? String == "FORCED_UPDATE")
        #expect(
            try #require(try s.json(["history", "--json", "--limit", "2", "--before", "5"]) as? [[String: Any]]).count
                == 2)

        let audit = try #require(try s.json(["audit", "show", "--json", "--limit", "100"]) as? [[String: Any]])
        #expect(audit.count == 7 && audit.allSatisfy { $0["actor"] as? String == "ana@example.com" })
        #expect((audit[1]["detail"] as? String)?.contains("forced") == true)
        #expect(try s.run(["audit", "show"]).stdout.contains("#4"))

        let diff = try s.run(["diff", "2", "3"])
        #expect(
            diff.status == 0
                && diff.stdout.contains("percent('rollout-2026') <= 10  →  percent('rollout-2026') <= 12.5"))
        #expect(try s.run(["diff", "2", "7"]).stdout.contains("(no differences)"))

        let verify = try s.run(["audit", "verify"])
        #expect(verify.status == 0 && verify.stdout.contains("audit log intact: 7 records, 7 versions"))
    }

    /// Under a preloaded library whose constructor adds to the environment before the Swift runtime looks for argv
    /// beside `environ` (libfaketime, preloaded without its wrapper, adds FAKETIME_SHARED), the binary still acts
    /// on its arguments: it read none, printed its help and exited 0 having done nothing.
    @Test func aPreloadedLibraryThatMovesTheEnvironmentLeavesTheArgumentsAlone() throws {
        let s = try Store()
        try s.run(["init"])
        let preload = ["FAKETIME": "+0", "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"]
        let stray = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["set", "10", "", "--reason", "start", "--store", s.path], environment: preload)
        // The empty argument is kept: a stray positional, refused as the same command line is without the preload.
        #expect(stray.status == 2 && Self.isOneLineError(stray), "\(stray)")
        let set = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["set", "10", "--reason", "start", "--store", s.path, "--operator", "ana@x"],
            environment: preload)
        #expect(set.status == 0, "\(set)")
        let audit = try s.run(["audit", "show"])
        #expect(audit.stdout.contains("ana@x") && audit.stdout.contains("start"), "\(audit.stdout)")
    }

    @Test func exitCodesForConflictRefusalAndFailure() throws {
        let s = try Store()
        try s.run(["init"])
        try s.run(["set", "98", "--reason", "r"])
        let beyond = try s.run(["nudge", "+5"])
        // Past 100% is an invalid percentage: a usage error (2), like every other.
        #expect(beyond.status == 2 && Self.isOneLineError(beyond) && beyond.stderr.contains("within 0 and 100"))

        let exported = s.file("v2.json")
        #expect(try s.run(["config", "export", "-o", exported]).status == 0)
        try s.run(["set", "50", "--reason", "r"], operator: "bob@example.com")
        let stale = try s.run(["config", "import", exported])
        #expect(
            stale.status == 3 && Self.isOneLineError(stale) && stale.stderr.contains("version 3 by bob@example.com"))

        let readOnly = try s.run(["kill", "--read-only"])
        #expect(readOnly.status == 4 && Self.isOneLineError(readOnly) && readOnly.stderr.contains("read-only"))
        #expect(try s.run(["status", "--read-only"]).status == 0)
        let missing = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["status", "--read-only", "--store", s.file("none.db")])
        #expect(missing.status == 1 && Self.isOneLineError(missing) && missing.stderr.contains("no store at"))
        #expect(!FileManager.default.fileExists(atPath: s.file("none.db")))
        #expect(try s.run(["rollback", "99"]).status == 1)
        // resume like kill is idempotent: exit 0, nothing written.
        let resume = try s.run(["resume"])
        #expect(resume.status == 0 && resume.stdout.contains("no change") && resume.stdout.contains("rolling"), "\(resume)")
    }

    @Test func badInputIsOneLineAndLeavesTheStoreByteForByte() throws {
        let s = try Store()
        try s.run(["init", "--seed", "s"])
        try s.run(["set", "25", "--reason", "steady"])
        let before = try s.snapshot()
        #expect(before.0 != nil && !before.1)

        let deep = String(repeating: "[", count: 5_000) + String(repeating: "]", count: 5_000)
        let files: [String: String] = [
            "truncated.json": #"{"conditions": [{"name": "app_attest_rollout", "expression": "percent('s') <= "#,
            "deep.json": deep,
            "array.json": "[1, 2, 3]",
            "empty.json": "",
            "wrong-types.json": #"{"conditions": {"a": 1}, "parameters": {}}"#,
            "number-value.json": #"{"parameters": {"AppAttestEnabled": {"defaultValue": {"value": true}}}}"#,
            "unknown-condition.json": #"{"parameters": {"X": {"conditionalValues": {"ghost": {"value": "1"}}}}}"#,
            "duplicate.json":
                #"{"conditions": [{"name": "a", "expression": "true"}, {"name": "a", "expression": "false"}]}"#,
            "bad-expression.json": #"{"conditions": [{"name": "a", "expression": "percent('s') <= 10 &&"}]}"#,
            "bad-percent.json":
                #"{"conditions": [{"name": "a", "condition": {"percent": {"percentOperator": "LESS_OR_EQUAL", "microPercent": -5}}}]}"#,
            "reseed.json": #"""
            {"conditions": [{"name": "app_attest_rollout", "expression": "percent('other') <= 25"}],
             "parameters": {"AppAttestEnabled": {"defaultValue": {"value": "false"},
               "conditionalValues": {"app_attest_rollout": {"value": "true"}}}}}
            """#,
        ]
        for (name, text) in files { _ = s.write(name, text) }
        #expect(
            FileManager.default.createFile(
                atPath: s.file("binary.json"), contents: Data([0x7B, 0xFF, 0xFE, 0x00, 0x22])))
        #expect(
            FileManager.default.createFile(
                atPath: s.file("huge.json"), contents: Data(repeating: 0x20, count: (8 << 20) + 1)))

        let usage: [[String]] = [
            ["set", "101"], ["set", "-1"], ["set", "NaN"], ["set", "ten"], ["set", "10.1234567"], ["set", ""], ["set"],
            ["set", "1e2"],
            ["set", "25", "--expect", "200"], ["set", "5", "--bogus"], ["set", "5", "6"], ["nudge", "0"],
            ["nudge", "+101"], ["nudge", "abc"],
            ["nudge", "++1"], ["set", "5", "--reason", "two\nlines"], ["rollback", "0"], ["rollback", "x"],
            ["history", "--limit", "0"],
            ["diff", "a", "b"], ["config", "export", "--format", "xml"], ["init", "--seed", "bad'seed"], ["frobnicate"],
            ["status", "--json=yes"],
        ]
        for args in usage {
            let r = try s.run(args)
            #expect(r.status == 2, "\(args): exit \(r.status) \(r.stderr)")
            #expect(Self.isOneLineError(r), "\(args): \(r.stderr)")
            #expect(r.stdout.isEmpty, "\(args)")
        }
        for name in files.keys.sorted() + ["binary.json", "huge.json", "missing.json"] {
            let r = try s.run(["config", "import", s.file(name)])
            #expect(r.status != 0, "\(name)")
            #expect(Self.isOneLineError(r), "\(name): \(r.stderr)")
        }
        let directory = try s.run(["config", "import", s.directory.path])
        #expect(directory.status == 1 && Self.isOneLineError(directory))
        #expect(try s.run(["config", "import", "-"], stdin: "{\"conditions\": [").status == 1)
        #expect(try s.snapshot() == before, "bad input changed the store")

        // A store path that is not an SQLite file, and another application's database: refused, untouched.
        let notes = s.write("notes.txt", "not a database\n")
        let r = try TestSupport.run(try TestSupport.rolloutBinary(), ["status", "--store", notes])
        #expect(r.status == 1 && Self.isOneLineError(r) && r.stderr.contains("not an SQLite database"))
        #expect(FileManager.default.contents(atPath: notes) == Data("not a database\n".utf8))
        let foreign = s.file("foreign.db")
        #expect(try s.sqlite("CREATE TABLE notes(x); INSERT INTO notes VALUES (1);", database: foreign).status == 0)
        let foreignBytes = FileManager.default.contents(atPath: foreign)
        let f = try TestSupport.run(try TestSupport.rolloutBinary(), ["set", "5", "--store", foreign])
        #expect(f.status == 1 && Self.isOneLineError(f) && f.stderr.contains("not a rollout store"))
        #expect(FileManager.default.contents(atPath: foreign) == foreignBytes)
    }

    /// `--dry-run` answered "would publish", exit 0, where the real run is refused; its exit code is now the real
    /// run's: 4 for an increase without a reason, 3 for an imported file whose etag the store has moved past.
    @Test func aDryRunIsRefusedWhereTheRealRunIs() throws {
        let s = try Store()
        try s.run(["init", "--seed", "rollout-2026"])
        try s.run(["set", "5", "--reason", "r"])
        let exported = s.write("v2.json", try s.run(["config", "export"]).stdout)
        try s.run(["set", "6", "--reason", "r"])
        for (arguments, code) in [(["set", "10"], 4), (["config", "import", exported, "--reason", "r"], 3)] {
            let dry = try s.run(arguments + ["--dry-run"])
            let real = try s.run(arguments)
            #expect(dry.status == code && real.status == code, "\(arguments): \(dry.status) \(dry.stderr) / \(real.status)")
            #expect(dry.stderr == real.stderr && !dry.stdout.contains("would publish"), "\(dry.stdout)")
        }
        #expect(try s.run(["set", "10", "--dry-run", "--reason", "r"]).status == 0)
    }

    @Test func exportImportKeepsUnknownFieldsAndConvertsForms() throws {
        let s = try Store()
        try s.run(["init", "--seed", "rollout-2026"])
        try s.run(["set", "10", "--reason", "r"])
        let exported = try s.run(["config", "export"]).stdout
        #expect(exported.hasPrefix("{\n  \"conditions\": [\n    {\n      \"name\": \"app_attest_rollout\",\n"))
        #expect(exported.contains("\"etag\": \"etag-2-") && exported.contains("\"versionNumber\": \"2\""))

        // Unknown members at the top level and inside a parameter, with number spellings that must survive.
        var edited = exported.replacingOccurrences(
            of: "{\n  \"conditions\"",
            with: "{\n  \"rolloutsFuture\": {\"ratio\": 2.50, \"big\": 12345678901234567890},\n  \"conditions\"")
        edited = edited.replacingOccurrences(
            of: "\"valueType\": \"BOOLEAN\"", with: "\"valueType\": \"BOOLEAN\",\n      \"x-note\": [1e3]")
        let file = s.write("edited.json", edited)
        let dry = try s.run(["config", "import", file, "--dry-run"])
        #expect(dry.status == 0 && dry.stdout.contains("~ rolloutsFuture"))
        let imported = try s.run(["config", "import", file, "--reason", "add future fields"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try s.run(["nudge", "+1", "--reason", "r"]).status == 0)
        let after = try s.run(["config", "export"]).stdout
        #expect(
            after.contains("\"ratio\": 2.50") && after.contains("\"big\": 12345678901234567890")
                && after.contains("1e3"))
        #expect(after.contains("percent('rollout-2026') <= 11"))

        let server = try s.run(["config", "export", "--format", "server", "--version", "2"])
        #expect(
            server.status == 0 && server.stdout.contains("\"percentOperator\": \"LESS_OR_EQUAL\"")
                && !server.stdout.contains("expression"))
        let back = s.write("server.json", server.stdout)
        let reimport = try s.run(["config", "import", back, "--force", "--reason", "server form"])
        #expect(reimport.status == 0, "\(reimport.stderr)")
        let client = try s.run(["config", "export", "--format", "client"]).stdout
        #expect(client.contains("\"expression\": \"percent('rollout-2026') <= 10\""))
        #expect(try s.run(["audit", "verify"]).status == 0)
    }

    @Test func tamperingWithTheFileIsNamedByAuditVerify() throws {
        let s = try Store()
        try s.run(["init"])
        for n in ["10", "20", "30", "40"] { try s.run(["set", n, "--reason", "step \(n)"]) }
        #expect(try s.run(["audit", "verify"]).status == 0)
        let pristine = try #require(FileManager.default.contents(atPath: s.path))
        let cases: [(sql: String, names: String)] = [
            ("UPDATE config_audit SET reason = 'nothing happened' WHERE sequence = 3", "audit record 3"),
            ("DELETE FROM config_audit WHERE sequence = 2", "audit record 2"),
            ("DELETE FROM config_audit WHERE sequence = 5", "audit record 5"),
            ("UPDATE config_versions SET template = replace(template, '<= 30', '<= 95') WHERE number = 4", "version 4"),
            ("DELETE FROM config_versions WHERE number = 5", "version 5"),
        ]
        for c in cases {
            #expect(FileManager.default.createFile(atPath: s.path, contents: pristine))
            #expect(try s.sqlite(c.sql).status == 0)
            let r = try s.run(["audit", "verify"])
            #expect(r.status == 1 && Self.isOneLineError(r), "\(c.sql): \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("audit verify failed: \(c.names):"), "\(c.sql): \(r.stderr)")
        }
    }

    /// The server template `config export --format server` writes, evaluated by firebase-admin itself, puts the
    /// 10,000 vector ids in exactly the cohorts their real percentiles say.
    @Test func exportedServerTemplateAgreesWithFirebaseAdmin() throws {
        let s = try Store()
        try s.run(["init", "--seed", "rollout-2026"])
        try s.run(["set", "10", "--reason", "r"])
        let template = s.file("server.json")
        #expect(try s.run(["config", "export", "--format", "server", "-o", template]).status == 0)

        var expected: [String: (flag: String, cohort: String)] = [:]
        let tsv = try String(
            contentsOf: try TestSupport.vector("remote-config/rollout-2026-10pct.tsv"), encoding: .utf8)
        for line in tsv.split(separator: "\n") where !line.hasPrefix("#") {
            let cols = line.split(separator: "\t")
            let p = Int(cols[2])!
            let cohort = p <= 10_000_000 ? "enabled" : (p > 50_000_000 && p <= 60_000_000 ? "control" : "none")
            expected[String(cols[0])] = (String(cols[1]), cohort)
        }
        #expect(expected.count == 10_000 && expected.values.filter { $0.flag == "true" }.count == 970)

        let oracle = TestSupport.shared.appendingPathComponent("tools/rc_oracle.py").path
        for parameter in ["AppAttestEnabled", "AppAttestCohort"] {
            let r = try TestSupport.run(
                try TestSupport.python(), [oracle, template, "--range", "inst-", "0", "9999", "--param", parameter])
            #expect(r.status == 0, "\(r.stderr)")
            var seen = 0
            for line in r.stdout.split(separator: "\n") where !line.hasPrefix("#") {
                let cols = line.split(separator: "\t")
                let id = String(cols[0])
                let value = cols[3].dropFirst("string=\"".count).dropLast()
                let want = parameter == "AppAttestEnabled" ? expected[id]?.flag : expected[id]?.cohort
                #expect(String(value) == want, "\(parameter) for \(id)")
                seen += 1
            }
            #expect(seen == 10_000)
        }
    }
}
