import Foundation
import Timekeeping
import TestSupport
import Testing

/// `rollout plan` through the built binary: validation by line, the stored plan, operator changes, exit codes.
@Suite(.serialized) struct PlanCommandTests {
    static func rollout(_ store: String, _ args: [String]) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), args + ["--store", store, "--operator", "ana@example.com"])
    }

    /// A new store file `r.db` in `dir`, made by `rollout init`.
    static func initialized(in dir: URL) throws -> String {
        let store = dir.appendingPathComponent("r.db").path
        try #require(try rollout(store, ["init", "--seed", "rollout-cli"]).status == 0)
        return store
    }

    /// A plan whose first step is below what the rollout exposes now is refused: it would lower exposure at once,
    /// unasked. A first step at the current exposure or above starts.
    @Test func aPlanStartingBelowTheCurrentExposureIsRefused() throws {
        let dir = try TestSupport.temporaryDirectory("plan-lower")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Self.initialized(in: dir)
        #expect(try Self.rollout(store, ["set", "20", "--reason", "by hand"]).status == 0)
        let low = dir.appendingPathComponent("low.plan").path
        try "name ramp\nstep 5%\nstep 25%\n".write(toFile: low, atomically: true, encoding: .utf8)
        let refused = try Self.rollout(store, ["plan", "start", low])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("plan 'ramp' starts at 5% (line 2) but the rollout exposes 20% now"), "\(refused.stderr)")
        #expect(try Self.rollout(store, ["plan", "status"]).status == 1, "no plan was stored")
        let level = dir.appendingPathComponent("level.plan").path
        try "name ramp\nstep 20%\nstep 25%\n".write(toFile: level, atomically: true, encoding: .utf8)
        let started = try Self.rollout(store, ["plan", "start", level])
        #expect(started.status == 0, "\(started.stderr)")
        #expect(try Self.rollout(store, ["audit", "verify"]).status == 0)
    }

    @Test func startStatusPauseResumeAbortRun() throws {
        let dir = try TestSupport.temporaryDirectory("plan-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Self.initialized(in: dir)
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
        // The 3 a.m. issue: the text said `next: next: step 1`; the decision's words follow `next:` once.
        let advancing = try Self.rollout(store, ["plan", "status", "--read-only"]).stdout
        #expect(advancing.contains("next: advancing to step 1 (5%)"), "\(advancing)")
        #expect(!advancing.contains("next: next"), "\(advancing)")

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
        // Without --exit-on-pause, --looks running out on a paused plan is 0 (the README's exit table).
        let looked = try Self.rollout(store, ["plan", "run", "--looks", "2", "--interval", "0.01"])
        #expect(looked.status == 0, "\(looked.stdout)\(looked.stderr)")
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

    /// Found at 3 a.m.: a plan started on a killed rollout published its first step over the kill; an operator's
    /// reason with terminal escapes reached `plan status` raw; a `plan run` stopped by SIGTERM exited 0, which the
    /// exit table says means "the plan is done".
    @Test func aKilledRolloutRefusesAPlanAndAStoppedRunIsNotDone() throws {
        let dir = try TestSupport.temporaryDirectory("plan-kill")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try Self.initialized(in: dir)
        #expect(try Self.rollout(store, ["set", "4", "--reason", "earlier ramp"]).status == 0)
        #expect(try Self.rollout(store, ["kill", "--reason", "incident"]).status == 0)
        let good = dir.appendingPathComponent("ramp.plan").path
        try "name ramp\r\nstep 5% hold 1h\r\nstep 10%\r\n".write(toFile: good, atomically: true, encoding: .utf8)
        let refused = try Self.rollout(store, ["plan", "start", good])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("the rollout is killed; resume it first"), "\(refused.stderr)")
        #expect(try Self.rollout(store, ["plan", "status"]).status == 1, "no plan was stored")
        #expect(try Self.rollout(store, ["resume", "--reason", "fixed"]).status == 0)
        // The CRLF file (as an editor on Windows writes it) starts.
        let started = try Self.rollout(store, ["plan", "start", good])
        #expect(started.status == 0, "\(started.stderr)")

        // A code means something only to 'plan resume': a pause or an abort refuses it instead of ignoring it.
        for verb in ["pause", "abort"] {
            let coded = try Self.rollout(store, ["plan", verb, "--code", "123456"])
            #expect(coded.status == 2 && coded.stderr.contains("unknown option '--code'"), "\(coded.stderr)")
        }
        #expect(try Self.rollout(store, ["plan", "pause", "--reason", "evil\u{1b}[2J\u{202e}X"]).status == 0)
        let shown = try Self.rollout(store, ["plan", "status"]).stdout
        #expect(shown.contains("evil\\u001b[2J\\u202eX"), "\(shown)")
        #expect(!shown.contains("\u{1b}") && !shown.contains("\u{202e}"))
        #expect(try Self.rollout(store, ["plan", "resume", "--reason", "go"]).status == 0)
        // Every error line is escaped where it is written, whatever its message quoted raw (here an option's value).
        let usage = try Self.rollout(store, ["plan", "run", "--interval", "\u{1b}[2J"])
        #expect(usage.status == 2)
        #expect(usage.stderr.contains("not '\\u001b[2J'") && !usage.stderr.contains("\u{1b}"), "\(usage.stderr)")

        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = ["plan", "run", "--interval", "0.05", "--store", store, "--operator", "ana@example.com"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        // Running: step 1 published (the plan then holds it for an hour).
        let deadline = Date(timeIntervalSinceNow: 60)
        var published = false
        while Date() < deadline, !published {
            published = try Self.rollout(store, ["plan", "status", "--json", "--read-only"]).stdout.contains("\"step\":1")
            if !published { usleep(50_000) }
        }
        #expect(published, "the runner never published step 1")
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        #expect(p.terminationReason == .exit && p.terminationStatus == 143, "status \(p.terminationStatus)")
        #expect(try Self.rollout(store, ["plan", "status", "--json"]).stdout.contains("\"phase\":\"running\""))
        #expect(try Self.rollout(store, ["audit", "verify"]).status == 0)
    }

    /// `plan start --code` through the binary, with codes computed by pyotp (the peer) from the printed secret, at
    /// faked wall times so that each code is of a new time step: the runner then publishes the protected step
    /// with no operator, and `plan run --json` prints the loop of `watch` (the verdict) with the plan in it.
    @Test func startWithACodePreApprovesTheProtectedSteps() throws {
        let dir = try TestSupport.temporaryDirectory("plan-cli-code")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("r.db").path
        let t0: Int64 = 1_780_000_020
        func at(_ seconds: Int64, _ args: [String], stdin: String? = nil) throws -> TestSupport.ProcessResult {
            let stamp = Instant(seconds: seconds).iso8601.prefix(19).replacingOccurrences(of: "T", with: " ")
            return try TestSupport.run(
                try TestSupport.rolloutBinary(), args + ["--store", store, "--operator", "ana@example.com"],
                stdin: stdin, environment: ["TZ": "UTC", "NO_COLOR": ""], fakeTime: "@\(stamp)")
        }
        func code(_ secret: String, _ seconds: Int64) throws -> String {
            let r = try TestSupport.run(
                try TestSupport.python(),
                ["-c", "import pyotp,sys; print(pyotp.TOTP(sys.argv[1]).at(int(sys.argv[2])))", secret, "\(seconds)"])
            try #require(r.status == 0, "\(r.stderr)")
            return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        #expect(try at(t0, ["init", "--seed", "rollout-cli"]).status == 0)
        let enrol = try at(t0, ["operator", "enroll"])
        try #require(enrol.status == 0, "\(enrol.stderr)")
        let uri = try #require(enrol.stdout.split(separator: "\n").first { $0.hasPrefix("URI: otpauth://totp/") })
        let secret = try #require(
            uri.split(separator: "?").last?.split(separator: "&").first { $0.hasPrefix("secret=") }
        )
        .dropFirst("secret=".count)
        let confirmed = try at(t0, ["operator", "enroll", "--code", "-"], stdin: try code(String(secret), t0) + "\n")
        try #require(confirmed.status == 0, "\(confirmed.stderr)")

        let file = dir.appendingPathComponent("ramp.plan").path
        try "name ramp\nstep 30% hold 1h\nstep 40%\n".write(toFile: file, atomically: true, encoding: .utf8)
        let wrongCode = try at(t0 + 60, ["plan", "start", file, "--code", "000000"])
        #expect(wrongCode.status == 4, "\(wrongCode.stdout) \(wrongCode.stderr)")
        #expect(try at(t0 + 60, ["plan", "status"]).status == 1)
        let started = try at(
            t0 + 90, ["plan", "start", file, "--code", try code(String(secret), t0 + 90), "--approve-for", "2h"])
        #expect(started.status == 0, "\(started.stderr)")
        // Two hours of faked wall time from the start (the clock runs on from the faked instant).
        #expect(
            started.stdout.contains("pre-approved by ana@example.com until 2026-05-28T22:28:3"), "\(started.stdout)")
        #expect(started.stdout.contains(": steps 1 (0% -> 30%)"), "\(started.stdout)")
        let status = try at(t0 + 100, ["plan", "status", "--json"])
        #expect(status.stdout.contains("\"preApproval\":{\"approvedBy\":\"ana@example.com\""), "\(status.stdout)")

        let run = try at(t0 + 120, ["plan", "run", "--looks", "1", "--json"])
        #expect(run.status == 0, "\(run.stderr)")
        let line = try #require(run.stdout.split(separator: "\n").first)
        // The object of 'watch --json' (the verdict, the version, auto-kill) with the plan's look in "plan".
        #expect(line.contains("\"level\":\"HOLD\""), "\(line)")
        #expect(line.contains("\"autoKill\":null"))
        #expect(line.contains("\"plan\":{\"plan\":\"ramp\""))
        #expect(line.contains("published version 2: plan 'ramp' step 1/2: 30%"))
        let audit = try at(t0 + 130, ["audit", "show"]).stdout
        #expect(audit.contains("plan pre-approve"), "\(audit)")
        #expect(audit.contains("result pre-approved"), "\(audit)")
        #expect(try at(t0 + 130, ["audit", "verify"]).status == 0)
    }
}
