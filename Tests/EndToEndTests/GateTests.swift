import Foundation
import TestSupport
import Testing

/// One gate, checked from outside with the built binary: read-only is a property of the connection (every
/// command under `--read-only` leaves the store byte for byte as it was, and every write is refused with exit 4),
/// only `init` creates a store, and whole-template writes cannot remove, reseed or retype the rollout by accident.
@Suite(.serialized)
struct GateTests {
    final class Store {
        let directory: URL
        let path: String

        init() throws {
            directory = try TestSupport.temporaryDirectory("rollout-gate")
            path = directory.appendingPathComponent("rollout.db").path
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        @discardableResult
        func run(_ arguments: [String], stdin: String? = nil, store: String? = nil) throws -> TestSupport.ProcessResult
        {
            try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", store ?? path], stdin: stdin,
                environment: ["ROLLOUT_OPERATOR": "ana@example.com", "NO_COLOR": "1"])
        }

        func file(_ name: String, _ text: String) -> String {
            let p = directory.appendingPathComponent(name).path
            #expect(FileManager.default.createFile(atPath: p, contents: Data(text.utf8)), "\(p)")
            return p
        }

        /// A store with versions, telemetry, a policy and a guardrail setting, and a template file to import.
        static func populated() throws -> Store {
            let s = try Store()
            for args in [
                ["init", "--seed", "rollout-2026"], ["set", "10", "--reason", "first step"],
                ["nudge", "+5", "--reason", "steady"], ["policy", "set", "lockout-minutes", "30"],
                ["policy", "set", "guardrails.auto-kill", "on"],
            ] {
                let r = try s.run(args)
                guard r.status == 0 else { throw TestSupport.Failure("\(args) failed: \(r.stderr)") }
            }
            let r = try s.run(["ingest", "-"], stdin: events())
            guard r.status == 0 else { throw TestSupport.Failure("ingest failed: \(r.stderr)") }
            return s
        }

        static func events() -> String {
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            return (0..<20).map {
                #"{"t":\#(now - Int64($0) * 1_000_000),"i":"fid-\#($0)","k":"session","c":"\#($0 % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
            }.joined(separator: "\n") + "\n"
        }
    }

    static func isOneLineError(_ r: TestSupport.ProcessResult) -> Bool {
        r.stderr.hasPrefix("rollout: ") && r.stderr.hasSuffix("\n")
            && r.stderr.dropLast().split(separator: "\n").count == 1
    }

    /// Every command with `--read-only`: its exit code, and the store's SHA-256 (WAL checkpointed) with the key
    /// and witness files before and after, which must be equal. The table is printed for the release note.
    @Test func everyCommandUnderReadOnlyLeavesTheStoreByteForByte() throws {
        let s = try Store.populated()
        let template = try s.run(["config", "export"]).stdout
        let importFile = s.file(
            "import.json", template.replacingOccurrences(of: "\"description\"", with: "\"description\""))
        let eventsFile = s.file("events.ndjson", Store.events())
        let cases: [(command: [String], exit: Int32)] = [
            (["status"], 0), (["status", "--json"], 0), (["history"], 0), (["diff", "1"], 0),
            (["config", "export"], 0),
            (["audit", "show"], 0), (["audit", "verify"], 0), (["telemetry"], 0), (["telemetry", "--json"], 0),
            (["policy", "show"], 0), (["operator", "list"], 0),
            (["init"], 4), (["set", "50", "--reason", "r"], 4), (["nudge", "+1", "--reason", "r"], 4),
            (["nudge", "-1", "--reason", "r"], 4), (["kill", "--reason", "r"], 4), (["resume", "--reason", "r"], 4),
            (["rollback", "1", "--reason", "r"], 4), (["config", "import", importFile, "--reason", "r"], 4),
            (["ingest", eventsFile], 4), (["policy", "set", "lockout-minutes", "10"], 4),
            (["policy", "set", "guardrails.auto-kill", "off"], 4), (["operator", "enroll", "--qr", "none"], 4),
            (["operator", "remove", "bob@example.com"], 4), (["token", "verify", "a.b.c", "--consume"], 4),
            (["simulate", "--scenario", "steady", "--speed", "max"], 4),
            // No terminal here: the console says so (exit 1); it opens its store read-only too.
            (["console"], 1),
        ]
        var table = ["| command | exit | SHA-256 before | SHA-256 after | unchanged |", "|---|---|---|---|---|"]
        for (command, exit) in cases {
            let before = try TestSupport.StoreFingerprint.of(s.path)
            let r = try s.run(command + ["--read-only"], stdin: "")
            let after = try TestSupport.StoreFingerprint.of(s.path)
            #expect(r.status == exit, "\(command): \(r.stderr)")
            if exit != 0 { #expect(Self.isOneLineError(r), "\(command): \(r.stderr)") }
            #expect(after == before, "\(command) --read-only changed the store")
            table.append(
                "| `rollout \(command.joined(separator: " ")) --read-only` | \(r.status) | \(before.store.prefix(12))… "
                    + "| \(after.store.prefix(12))… | \(after == before ? "yes" : "NO") |")
        }
        print(table.joined(separator: "\n"))
        // And the store still verifies, untouched by any of it.
        #expect(try s.run(["audit", "verify"]).status == 0)
    }

    /// Only init creates a store: a missing path (even in a missing directory), a zero-length file, a directory,
    /// `--store ""` and a foreign SQLite file are each a one-line error naming the path, exit 1 or 2, and nothing
    /// is created or changed.
    @Test func noCommandButInitCreatesAStore() throws {
        let s = try Store()
        let missing = s.directory.appendingPathComponent("typo/x.db").path
        let empty = s.file("empty.db", "")
        let directory = s.directory.appendingPathComponent("dir.db").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let foreign = s.directory.appendingPathComponent("foreign.db").path
        #expect(
            try TestSupport.run("/usr/bin/sqlite3", [foreign, "CREATE TABLE notes(x); INSERT INTO notes VALUES (1);"])
                .status == 0)
        let fresh = s.directory.appendingPathComponent("fresh.db").path
        #expect(try TestSupport.run("/usr/bin/sqlite3", [fresh, "PRAGMA user_version = 0; VACUUM;"]).status == 0)
        let listing = { try FileManager.default.contentsOfDirectory(atPath: s.directory.path).sorted() }
        let filesBefore = try listing()
        let foreignBefore = try TestSupport.StoreFingerprint.sha256(foreign)
        let commands: [[String]] = [
            ["status"], ["status", "--json"], ["set", "10", "--reason", "r"], ["history"], ["audit", "verify"],
            ["ingest", "-"], ["telemetry"], ["policy", "show"], ["operator", "list"], ["token", "verify", "a.b.c"],
            ["kill", "--reason", "r"], ["config", "export"],
        ]
        for command in commands {
            for (store, label) in [
                (missing, "missing"), (empty, "zero-length"), (directory, "directory"), ("", "empty --store"),
                (foreign, "foreign"), (fresh, "empty SQLite"),
            ] {
                let r = try s.run(command, stdin: "", store: store)
                #expect(r.status == 1 || r.status == 2, "\(command) on \(label): \(r.status) \(r.stderr)")
                #expect(Self.isOneLineError(r), "\(command) on \(label): \(r.stderr)")
                if store.isEmpty {
                    #expect(r.status == 2, "\(command): --store \"\" is a usage error")
                } else {
                    #expect(r.stderr.contains(store), "\(command) on \(label) must name the path: \(r.stderr)")
                }
            }
        }
        #expect(try listing() == filesBefore, "nothing may be created")
        #expect(!FileManager.default.fileExists(atPath: s.directory.appendingPathComponent("typo").path))
        #expect(try Data(contentsOf: URL(fileURLWithPath: empty)).isEmpty)
        #expect(try TestSupport.StoreFingerprint.sha256(foreign) == foreignBefore)

        // `status` before `init` locks in no seed: init afterwards still chooses it.
        #expect(try s.run(["status"]).status == 1)
        let created = try s.run(["init", "--seed", "chosen-seed"])
        #expect(created.status == 0 && created.stdout.contains("seed chosen-seed"), "\(created.stderr)")
        #expect(try s.run(["status", "--json"]).stdout.contains("\"seed\": \"chosen-seed\""))
        // And init refuses an existing store.
        let again = try s.run(["init"])
        #expect(again.status == 1 && Self.isOneLineError(again) && again.stderr.contains("already exists"))
    }

    /// A newer schema is refused, never downgraded; an older store's read-only open is refused with what to do.
    @Test func aNewerSchemaIsRefused() throws {
        let s = try Store()
        #expect(try s.run(["init"]).status == 0)
        #expect(try TestSupport.run("/usr/bin/sqlite3", [s.path, "PRAGMA user_version = 99;"]).status == 0)
        let before = try TestSupport.StoreFingerprint.of(s.path)
        for command in [["status"], ["set", "5", "--reason", "r"], ["audit", "verify"], ["status", "--read-only"]] {
            let r = try s.run(command)
            #expect(r.status == 1 && Self.isOneLineError(r), "\(command): \(r.stderr)")
            #expect(r.stderr.contains("schema version 99, newer than this rollout understands"), "\(r.stderr)")
        }
        #expect(try TestSupport.StoreFingerprint.of(s.path) == before)
    }

    /// `config import` of `{}`, of a new seed, of a changed value type, of `"yes"` on the BOOLEAN flag, of a
    /// number as etag: each refused, and the store (file, key, witness) byte-identical.
    @Test func importsThatWouldBreakTheRolloutAreRefusedByteIdentical() throws {
        let s = try Store()
        #expect(try s.run(["init", "--seed", "rollout-2026"]).status == 0)
        let exported = try s.run(["config", "export"]).stdout
        func variant(_ name: String, _ edit: (String) -> String) -> String {
            let edited = edit(exported)
            #expect(edited != exported || name == "empty", "\(name): the edit must change the template")
            return s.file(name + ".json", edited)
        }
        let noETag = { (t: String) in
            t.replacingOccurrences(of: #""etag": "[^"]*""#, with: #""x": 1"#, options: .regularExpression)
        }
        let cases: [(String, String, Int32, String)] = [
            ("empty", s.file("empty.json", "{}"), 4, "removes the parameter AppAttestEnabled"),
            (
                "reseed", variant("reseed") { noETag($0).replacingOccurrences(of: "rollout-2026", with: "other-seed") },
                4,
                "changes the seed 'rollout-2026' → 'other-seed'"
            ),
            (
                "retype", variant("retype") { noETag($0).replacingOccurrences(of: "\"BOOLEAN\"", with: "\"STRING\"") },
                4,
                "changes the value type of AppAttestEnabled from BOOLEAN to STRING"
            ),
            (
                "no-cohort",
                variant("no-cohort") {
                    noETag($0).replacingOccurrences(of: "\"AppAttestCohort\"", with: "\"SomethingElse\"")
                },
                4, "removes the cohort parameter AppAttestCohort"
            ),
            (
                "yes",
                variant("yes") { noETag($0).replacingOccurrences(of: #""value": "false""#, with: #""value": "yes""#) },
                1,
                "must be exactly \"true\" or \"false\", not \"yes\""
            ),
            (
                "etag",
                variant("etag") {
                    $0.replacingOccurrences(of: #""etag": "[^"]*""#, with: #""etag": 5"#, options: .regularExpression)
                }, 1, "$.etag: expected a string, found a number"
            ),
            ("parameters", s.file("parameters.json", #"{"parameters": []}"#), 1, "parameters"),
        ]
        for (name, file, exit, message) in cases {
            let before = try TestSupport.StoreFingerprint.of(s.path)
            let r = try s.run(["config", "import", file, "--reason", "test \(name)"])
            #expect(r.status == exit, "\(name): \(r.status) \(r.stderr)")
            #expect(Self.isOneLineError(r) && r.stderr.contains(message), "\(name): \(r.stderr)")
            #expect(try TestSupport.StoreFingerprint.of(s.path) == before, "\(name): the store changed")
        }
        // On purpose: with --allow-rollout-change (no operator enrolled, so no code is asked) the reseed of a
        // rollout that has not started goes through, audited as such.
        let reseed = s.directory.appendingPathComponent("reseed.json").path
        let allowed = try s.run([
            "config", "import", reseed, "--reason", "new seed before start", "--allow-rollout-change",
        ])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(try s.run(["status", "--json"]).stdout.contains("\"seed\": \"other-seed\""))
        #expect(try s.run(["audit", "show"]).stdout.contains("rollout protection overridden"))
        // A running rollout's seed never changes, flag or not.
        #expect(try s.run(["set", "5", "--reason", "start"]).status == 0)
        let back = s.file("back.json", noETag(exported))
        let running = try s.run(["config", "import", back, "--reason", "x", "--allow-rollout-change"])
        #expect(running.status == 1 && running.stderr.contains("refusing to change the seed"), "\(running.stderr)")
    }

    /// A reason for every increase, on the CLI path as in the console; decreases and kills need none.
    @Test func everyIncreaseNeedsAReason() throws {
        let s = try Store()
        #expect(try s.run(["init"]).status == 0)
        let before = try TestSupport.StoreFingerprint.of(s.path)
        let refused = try s.run(["set", "10"])
        #expect(refused.status == 4 && refused.stderr.contains("needs a reason"), "\(refused.stderr)")
        #expect(try s.run(["status", "--json"]).stdout.contains("\"microPercent\": 0"))
        // The refusal is audited (the store is writable), and nothing was published.
        #expect(try TestSupport.StoreFingerprint.of(s.path) != before)
        #expect(try s.run(["audit", "show"]).stdout.contains("refused by reason"))
        #expect(try s.run(["set", "10", "--reason", "go"]).status == 0)
        #expect(try s.run(["nudge", "-2"]).status == 0)
        #expect(try s.run(["kill"]).status == 0)
        // While killed, a new percentage is judged as what resume would expose: an increase, so a reason.
        let killedIncrease = try s.run(["set", "30"])
        #expect(
            killedIncrease.status == 4 && killedIncrease.stderr.contains("needs a reason"), "\(killedIncrease.stderr)")
        #expect(try s.run(["resume"]).status == 4)
        // The policy can turn the rule off (audited like every policy change).
        #expect(try s.run(["policy", "set", "increase-reason", "off"]).status == 0)
        #expect(try s.run(["resume"]).status == 0)
    }
}
