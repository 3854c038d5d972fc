import Foundation
import TestSupport
import Testing

/// `rollout plan` through the built binary: validation by line, the stored plan, operator changes, exit codes.
@Suite(.serialized) struct PlanCommandTests {
    static func rollout(_ store: String, _ args: [String]) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), args + ["--store", store, "--operator", "ana@example.com"])
    }

    @Test func startStatusPauseResumeAbortRun() throws {
        let dir = try TestSupport.temporaryDirectory("plan-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("r.db").path
        #expect(try Self.rollout(store, ["init", "--seed", "rollout-cli"]).status == 0)
        let bad = dir.appendingPathComponent("bad.plan").path
        try "name ramp\nstep 5%\nstep 4%\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try Self.rollout(store, ["plan", "start", bad])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("line 3: steps must go up: 4% after 5% (line 2)"), "\(refused.stderr)")
        #expect(try Self.rollout(store, ["plan", "status"]).status == 1)

        let good = dir.appendingPathComponent("ramp.plan").path
        try "name ramp\ngate users 10\nstep 5% hold 1h\nstep 10%\n".write(
            toFile: good, atomically: true, encoding: .utf8)
        let started = try Self.rollout(store, ["plan", "start", good])
        #expect(started.status == 0, "\(started.stderr)")
        #expect(started.stdout.contains("plan 'ramp' started: 5% → 10%"))
        #expect(try Self.rollout(store, ["plan", "start", good]).stderr.contains("abort it first"))

        let status = try Self.rollout(store, ["plan", "status", "--json", "--read-only"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("\"phase\":\"running\""), "\(status.stdout)")
        #expect(status.stdout.contains("\"action\":\"advance\""))

        // Read-only: the runner refuses (exit 4) and nothing is published.
        #expect(try Self.rollout(store, ["plan", "run", "--looks", "1", "--read-only"]).status == 4)
        #expect(try Self.rollout(store, ["plan", "pause", "--read-only"]).status == 4)

        // One look publishes step 1 through the write path, with the plan step as the reason.
        let run = try Self.rollout(store, ["plan", "run", "--looks", "1", "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("published version 2: plan 'ramp' step 1/2: 5%"), "\(run.stdout)")
        let history = try Self.rollout(store, ["history", "--limit", "1"]).stdout
        #expect(history.contains("plan 'ramp' step 1/2: 5%"), "\(history)")

        #expect(try Self.rollout(store, ["plan", "pause", "--reason", "lunch"]).status == 0)
        #expect(try Self.rollout(store, ["plan", "pause"]).stderr.contains("paused already"))
        let paused = try Self.rollout(store, ["plan", "run", "--looks", "3", "--interval", "0.01", "--exit-on-pause"])
        #expect(paused.status == 9)
        #expect(try Self.rollout(store, ["plan", "resume"]).status == 0)
        let text = try Self.rollout(store, ["plan", "status"]).stdout
        #expect(text.contains("now  step 1/2: 5% hold 1h"), "\(text)")
        #expect(text.contains("next: waiting:"), "\(text)")
        #expect(try Self.rollout(store, ["plan", "abort", "--reason", "enough"]).status == 0)
        #expect(try Self.rollout(store, ["plan", "run", "--looks", "1"]).status == 8)
        let audit = try Self.rollout(store, ["audit", "show"]).stdout
        for action in ["plan start", "plan pause", "plan resume", "plan abort"] {
            #expect(audit.contains(action), "\(action)")
        }
        #expect(try Self.rollout(store, ["audit", "verify"]).status == 0)
    }
}
