import Foundation
import SQLiteStore
import TestSupport
import Testing

/// Every exit code of README's table, against the built binary, one command each; and "no change" exits 0 and
/// writes nothing: no version, no audit record.
@Suite("exit codes", .serialized)
struct ExitCodeTests {
    final class Store {
        let directory: URL
        let path: String
        let binary: String

        init(_ name: String) throws {
            directory = try TestSupport.temporaryDirectory(name)
            path = directory.appendingPathComponent("r.db").path
            binary = try TestSupport.rolloutBinary()
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        func run(_ args: String...) throws -> TestSupport.ProcessResult {
            try TestSupport.run(binary, args + ["--store", path, "--operator", "ana@example.com"])
        }

        /// Versions and audit records: what a change writes.
        func counts() throws -> (versions: Int, audit: Int) {
            let store = try RolloutStore(path: path, create: false)
            let config = try store.configStore()
            return (try config.versions(limit: 300, before: nil).count, try config.verifyIntegrity().auditRecords)
        }
    }

    @Test func eachDocumentedCodeFromOneCommand() throws {
        let s = try Store("exit-codes")
        #expect(try s.run("init", "--seed", "rollout-exit").status == 0)
        #expect(try s.run("set", "10", "--reason", "start").status == 0)
        // 1: an error (no such version).
        let missing = try s.run("rollback", "999")
        #expect(missing.status == 1, "\(missing.stderr)")
        // 2: usage, including an invalid percentage on every command that takes one.
        for args in [
            ["set", "150"], ["set", "abc"], ["nudge", "+95", "--reason", "r"], ["set", "20", "--expect", "150"],
            ["telemetry", "--percent", "150"], ["policy", "set", "increase-over", "150"],
            ["status", "--no-such-option"],
        ] {
            let r = try TestSupport.run(s.binary, args + ["--store", s.path, "--operator", "ana@example.com"])
            #expect(r.status == 2, "\(args): \(r.status) \(r.stderr)")
        }
        // 3: a conflict (the rollout is not where the operator expected it).
        let conflict = try s.run("set", "20", "--expect", "15", "--reason", "r")
        #expect(conflict.status == 3, "\(conflict.stderr)")
        // 4: refused (read-only).
        let readOnly = try s.run("set", "20", "--reason", "r", "--read-only")
        #expect(readOnly.status == 4, "\(readOnly.stderr)")
        // 6: status --check on a rollout with no telemetry is HOLD.
        let hold = try s.run("status", "--check")
        #expect(hold.status == 6, "\(hold.stdout)")
        // 8: plan run on an aborted plan; 9: paused with --exit-on-pause.
        let plan = s.directory.appendingPathComponent("ramp.plan").path
        try "name ramp\nstep 20%\nstep 30%\n".write(toFile: plan, atomically: true, encoding: .utf8)
        #expect(try s.run("plan", "start", plan).status == 0)
        #expect(try s.run("plan", "pause", "--reason", "lunch").status == 0)
        #expect(try s.run("plan", "run", "--looks", "1", "--exit-on-pause").status == 9)
        #expect(try s.run("plan", "abort", "--reason", "enough").status == 0)
        #expect(try s.run("plan", "run", "--looks", "1").status == 8)
    }

    @Test func aHaltIsSevenAndAFinishedSimulationIsHold() throws {
        let s = try Store("exit-halt")
        let sim = try TestSupport.run(
            s.binary,
            [
                // A fixed simulated start: from "now", the rollout's start is placed from the wall time of the
                // simulator's publish, which moves with the machine's speed, and the HALT came at 46 of the 50
                // minutes or not at all (both seen at 07:54 on a slow machine); from this start it comes at 34.
                "simulate", "--scenario", "crash-regression", "--devices", "6000", "--speed", "max", "--duration",
                "50m", "--start", "2026-06-01T12:00:00Z",
                "--seed", "3", "--store", s.path, "--quiet",
            ])
        try #require(sim.status == 0, "\(sim.stderr)")
        let halt = try s.run("status", "--check")
        #expect(halt.status == 7, "\(halt.stdout)")
        #expect(try s.run("watch", "--looks", "1", "--read-only").status == 7)
    }

    /// `set` to the current value, `kill` when killed, `resume` when rolling, and a rollback to a version with the
    /// same template (its own, or an older identical one): "no change", exit 0, nothing written.
    @Test func noChangeNeverPublishes() throws {
        let s = try Store("exit-no-change")
        #expect(try s.run("init", "--seed", "rollout-exit").status == 0)
        #expect(try s.run("set", "10", "--reason", "start").status == 0)  // version 2
        #expect(try s.run("set", "20", "--reason", "more").status == 0)  // version 3
        #expect(try s.run("set", "10").status == 0)  // version 4: the template of version 2 again
        let before = try s.counts()
        for args in [["set", "10"], ["resume"], ["rollback", "2"], ["rollback", "4"]] {
            let r = try TestSupport.run(s.binary, args + ["--store", s.path, "--operator", "ana@example.com"])
            #expect(r.status == 0 && r.stdout.contains("no change"), "\(args): \(r.status) \(r.stdout) \(r.stderr)")
            let after = try s.counts()
            #expect(after.versions == before.versions && after.audit == before.audit, "\(args) wrote something")
        }
        #expect(try s.run("kill").status == 0)
        let killed = try s.counts()
        let again = try s.run("kill")
        #expect(again.status == 0 && again.stdout.contains("no change"), "\(again.stdout)")
        let after = try s.counts()
        #expect(after.versions == killed.versions && after.audit == killed.audit)
        // A rollback that does change something still publishes.
        #expect(try s.run("rollback", "3", "--reason", "back to 20").status == 0)
        #expect(try s.counts().versions == killed.versions + 1)
    }
}
