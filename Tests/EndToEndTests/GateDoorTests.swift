import Foundation
import Testing
import TestSupport

/// Side doors of the one write path found by trying it as an attacker would ("Every door", items 5, 8 and 9),
/// each through the built binary, each with its reproduction.
struct GateDoorTests {
    final class Store {
        let dir: URL
        let path: String
        let bin: String

        init() throws {
            dir = try TestSupport.temporaryDirectory("gate-doors")
            path = dir.appendingPathComponent("s.db").path
            bin = try TestSupport.rolloutBinary()
            #expect(try run("init", "--seed", "rollout-2026").status == 0)
        }

        deinit { try? FileManager.default.removeItem(at: dir) }

        @discardableResult
        func run(_ args: String..., stdin: String? = nil) throws -> TestSupport.ProcessResult {
            try TestSupport.run(bin, args + ["--store", path, "--operator", "ana@example.com"], stdin: stdin)
        }

        /// Sessions from exposed devices only, the last minutes: telemetry arms the guardrails, and with no control
        /// group the verdict is HOLD, which refuses every increase.
        func armHold() throws {
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            let lines = (0..<30).map {
                #"{"t":\#(now - Int64($0) * 1_000_000),"i":"fid-\#($0)","k":"session","c":"enabled","p":"appAttest"}"#
            }
            let ingest = try run("ingest", "--format", "native", "-", stdin: lines.joined(separator: "\n") + "\n")
            #expect(ingest.status == 0, "\(ingest.stderr)")
            #expect(try run("status", "--json").stdout.contains("\"armed\": true"))
        }

        /// The exported template edited by `edit` (Python, on the parsed JSON `t`), written beside the store.
        func editedExport(_ name: String, _ edit: String) throws -> String {
            let exported = dir.appendingPathComponent("export.json").path
            let out = try run("config", "export")
            #expect(out.status == 0, "\(out.stderr)")
            try out.stdout.write(toFile: exported, atomically: true, encoding: .utf8)
            let target = dir.appendingPathComponent(name).path
            let script = "import json,sys\nt=json.load(open(sys.argv[1]))\n\(edit)\njson.dump(t,open(sys.argv[2],'w'))\n"
            let r = try TestSupport.run("/usr/bin/env", ["python3", "-c", script, exported, target])
            #expect(r.status == 0, "\(r.stderr)")
            return target
        }
    }

    /// Item 8. Reproduction: `rollout set -0` (also `-0.0`, `-0.000000`) published 0% (6 of 6 spellings). The one
    /// percentage parser refuses a sign where a percentage is expected, on every command that reads one.
    @Test func minusZeroIsNotAPercentage() throws {
        let s = try Store()
        #expect(try s.run("set", "10", "--reason", "start").status == 0)
        let plan = s.dir.appendingPathComponent("neg.plan").path
        try "name neg\nstep -0%\n".write(toFile: plan, atomically: true, encoding: .utf8)
        let before = try TestSupport.StoreFingerprint.of(s.path)
        for text in ["-0", "-0.0", "-0.000000", "-0%", "+0", "+5", "-5"] {
            let r = try s.run("set", text, "--reason", "sign")
            #expect(r.status == 2, "set \(text): \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("invalid percentage '\(text)'"), "\(r.stderr)")
        }
        #expect(try s.run("plan", "start", plan).status == 2)
        #expect(try s.run("telemetry", "--percent", "-0").status == 2)
        #expect(try TestSupport.StoreFingerprint.of(s.path) == before)
        // A nudge is a change, so its sign is expected: -0.5 lowers.
        #expect(try s.run("nudge", "-0.5").status == 0)
    }

    /// Item 5. Reproduction: at 5%, an import that sets `AppAttestEnabled`'s `defaultValue` to `"true"` (or adds an
    /// earlier condition serving `"true"`) was judged "5% → 5%": no reason, the HOLD guardrail let it pass, and
    /// 2000 of 2000 installations evaluated true. Such a template also leaves the flag on past a kill, so no
    /// publish may make it (the rule `init` applies when it adopts a template).
    @Test func anImportIsJudgedByWhatItDoes() throws {
        let s = try Store()
        #expect(try s.run("set", "5", "--reason", "start").status == 0)
        let defaultTrue = try s.editedExport(
            "default-true.json", "t['parameters']['AppAttestEnabled']['defaultValue']={'value':'true'}")
        let earlier = try s.editedExport(
            "earlier.json",
            """
            t['conditions'].insert(0,{'name':'wide','expression':"percent('rollout-2026') <= 40"})
            t['parameters']['AppAttestEnabled']['conditionalValues']={'wide':{'value':'true'},**t['parameters']['AppAttestEnabled']['conditionalValues']}
            """)
        let version = try s.run("history", "--limit", "1", "--json").stdout

        // What the template does is what the evaluator says: every installation gets the flag.
        let ids = (0..<2000).map { "fid-\($0)" }.joined(separator: "\n") + "\n"
        let evaluated = try TestSupport.run(s.bin, ["evaluate", "--template", defaultTrue, "--ids-file", "-"], stdin: ids)
        #expect(evaluated.status == 0, "\(evaluated.stderr)")
        #expect(evaluated.stdout.split(separator: "\n").filter { $0.hasSuffix("\ttrue") }.count == 2000)

        // Either would leave the flag on past a kill (init's rule, applied to every publish): refused with init's
        // words and exit code, preview included, guardrail or not; nothing is published.
        for file in [defaultTrue, earlier] {
            for args in [["--dry-run", "--reason", "look"], [], ["--reason", "import"]] {
                let r = try TestSupport.run(s.bin, ["config", "import", file] + args + ["--store", s.path, "--operator", "ana@example.com"])
                #expect(r.status == 1, "\(args): \(r.stdout) \(r.stderr)")
                #expect(r.stderr.contains("AppAttestEnabled is already \"true\" for"), "\(r.stderr)")
            }
        }
        #expect(try s.run("history", "--limit", "1", "--json").stdout == version)
        #expect(try s.run("status", "--json").stdout.contains("\"microPercent\": 5000000"))
        #expect(try s.run("audit", "verify").status == 0)
    }

    /// Item 9. Reproduction: a 10 MB plan file was accepted and stored (the store grew from 176 KB to 10.7 MB), and a
    /// 10 MB bad value was echoed whole to stderr. A plan file is at most 64 KiB, read no further, and errors quote
    /// an excerpt.
    @Test func largePlansAndValuesAreRefusedWithAnExcerpt() throws {
        let s = try Store()
        let big = s.dir.appendingPathComponent("big.plan").path
        try ("name big\nstep " + String(repeating: "1", count: 10_000_000) + "%\n").write(
            toFile: big, atomically: true, encoding: .utf8)
        let bad = s.dir.appendingPathComponent("bad.plan").path
        try ("name bad\nstep " + String(repeating: "x", count: 60_000) + "%\n").write(
            toFile: bad, atomically: true, encoding: .utf8)
        let before = try TestSupport.StoreFingerprint.of(s.path)
        let refused = try s.run("plan", "start", big)
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("at most 64 KiB"), "\(refused.stderr.prefix(300))")
        #expect(refused.stderr.utf8.count < 1024)

        let quoted = try s.run("plan", "start", bad)
        #expect(quoted.status == 2)
        #expect(quoted.stderr.contains("line 2: invalid percentage 'xxxx"), "\(quoted.stderr.prefix(300))")
        #expect(quoted.stderr.utf8.count < 1024)

        let value = try s.run("set", String(repeating: "9", count: 100_000), "--reason", "big")
        #expect(value.status == 2)
        #expect(value.stderr.contains("(100000 bytes)"), "\(value.stderr.prefix(300))")
        #expect(value.stderr.utf8.count < 1024)
        #expect(try TestSupport.StoreFingerprint.of(s.path) == before)
    }
}
