import Foundation
import TestSupport
import Testing

/// A telemetry source that never answers holds up neither auto-kill, nor the plan's steps, nor a stop: `watch`,
/// `follow` and `plan run` look at the store before they pull, and SIGINT or SIGTERM abandons the pull in flight.
@Suite(.serialized) struct StuckSourceTests {
    static func rollout(_ store: String, _ args: [String]) throws -> TestSupport.ProcessResult {
        let asOperator = args.first == "simulate" ? [] : ["--operator", "ana@example.com"]
        return try TestSupport.run(try TestSupport.rolloutBinary(), args + ["--store", store] + asOperator)
    }

    /// Adds source `src` pulling from `server` (a token from a command: no Google credentials needed).
    static func addSource(_ store: String, _ server: SilentServer) throws {
        let added = try rollout(
            store,
            [
                "source", "add", "src", "--bigquery", "proj", "--analytics", "proj.analytics_1",
                "--source-token-command", "echo tok",
            ])
        try #require(added.status == 0, "\(added.stderr)")
    }

    /// Starts `rollout ARGS --store STORE` with its pulls going to `server`.
    static func start(_ store: String, _ server: SilentServer, _ args: [String]) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = args + ["--store", store, "--operator", "ana@example.com"]
        var env = ProcessInfo.processInfo.environment
        env["ROLLOUT_BIGQUERY_URL"] = server.origin
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return (p, out)
    }

    /// Waits at most `seconds` for `p` to end; whether it did (if not, it is killed).
    static func ended(_ p: Process, within seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while p.isRunning, Date() < deadline { usleep(20_000) }
        if p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            return false
        }
        return true
    }

    @Test("watch kills on a HALT already in the store while its pull hangs, and stops at once on SIGTERM")
    func watchKillsAndStopsWhileAPullHangs() throws {
        let dir = try TestSupport.temporaryDirectory("stuck-watch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("drill.db").path
        let sim = try Self.rollout(
            store,
            [
                "simulate", "--scenario", "crash-regression", "--devices", "6000", "--speed", "max", "--duration", "2h",
                "--seed", "3", "--quiet",
            ])
        try #require(sim.status == 0, "\(sim.stderr)")
        try #require(try Self.rollout(store, ["policy", "set", "guardrails.auto-kill", "on"]).status == 0)
        let server = try SilentServer()
        try Self.addSource(store, server)

        let (watch, out) = try Self.start(store, server, ["watch", "--interval", "0.2"])
        let killed = try TestSupport.eventually(within: 20) {
            try Self.rollout(store, ["status", "--json", "--read-only"]).stdout.contains("\"state\": \"killed\"")
        }
        #expect(killed, "no auto-kill while the pull hangs")
        #expect(server.waitForConnection(seconds: 20), "the watch never pulled")
        kill(watch.processIdentifier, SIGTERM)
        #expect(Self.ended(watch, within: 5), "watch still runs 5 s after SIGTERM")
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(printed.contains("auto-kill: "), "\(printed)")
        // watch exits with its last verdict.
        #expect(watch.terminationReason == .exit && watch.terminationStatus == 7, "status \(watch.terminationStatus)")
    }

    @Test("follow stops at once on SIGINT while its first pull hangs, and records no failure of the source")
    func followStopsWhileAPullHangs() throws {
        let dir = try TestSupport.temporaryDirectory("stuck-follow")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("r.db").path
        try #require(try Self.rollout(store, ["init", "--seed", "rollout-stuck"]).status == 0)
        let server = try SilentServer()
        try Self.addSource(store, server)

        let (follow, out) = try Self.start(store, server, ["follow", "--interval", "0.2"])
        #expect(server.waitForConnection(seconds: 20), "follow never pulled")
        kill(follow.processIdentifier, SIGINT)
        #expect(Self.ended(follow, within: 5), "follow still runs 5 s after SIGINT")
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(printed.contains("abandoned: stopped"), "\(printed)")
        // The look before the pull was HOLD (no telemetry): follow exits with it.
        #expect(
            follow.terminationReason == .exit && follow.terminationStatus == 6, "status \(follow.terminationStatus)")
        let listed = try Self.rollout(store, ["source", "list", "--json"]).stdout
        #expect(listed.contains("\"lastError\" : null") || listed.contains("\"lastError\": null"), "\(listed)")
    }

    @Test("follow stops at once on SIGINT while its access-token command hangs, and the command dies with it")
    func followStopsWhileItsTokenCommandHangs() throws {
        let dir = try TestSupport.temporaryDirectory("stuck-token")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("r.db").path
        let pidFile = dir.appendingPathComponent("sleep.pid").path
        try #require(try Self.rollout(store, ["init", "--seed", "rollout-stuck"]).status == 0)
        let added = try Self.rollout(
            store,
            [
                "source", "add", "src", "--bigquery", "proj", "--analytics", "proj.analytics_1",
                "--source-token-command", "sleep 60 & echo $! > \(pidFile); wait; echo tok",
            ])
        try #require(added.status == 0, "\(added.stderr)")
        let server = try SilentServer()

        let (follow, out) = try Self.start(store, server, ["follow", "--interval", "0.2"])
        let sleeper = try TestSupport.eventually(within: 20) { FileManager.default.fileExists(atPath: pidFile) }
        #expect(sleeper, "follow never ran the token command")
        // The signal goes to rollout alone (as a supervisor or a console's stop sends it), not to the command.
        kill(follow.processIdentifier, SIGINT)
        #expect(Self.ended(follow, within: 5), "follow still runs 5 s after SIGINT")
        let pid =
            Int32(
                (try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
                    ?? "") ?? 0
        let gone = TestSupport.eventually(within: 5) { !TestSupport.isRunning(pid) }
        #expect(pid > 0 && gone, "the token command's sleep \(pid) survived follow")
        if pid > 0 && !gone { kill(pid, SIGKILL) }
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(printed.contains("abandoned: stopped"), "\(printed)")
        #expect(
            follow.terminationReason == .exit && follow.terminationStatus == 6, "status \(follow.terminationStatus)")
        #expect(server.connections == 0, "the query was sent without a token")
    }

    @Test("plan run takes its first step while its pull hangs, and a SIGTERM ends it at once with 143")
    func planRunStepsAndStopsWhileAPullHangs() throws {
        let dir = try TestSupport.temporaryDirectory("stuck-plan")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("r.db").path
        try #require(try Self.rollout(store, ["init", "--seed", "rollout-stuck"]).status == 0)
        let plan = dir.appendingPathComponent("ramp.plan").path
        try "name ramp\nstep 5% hold 1h\nstep 10%\n".write(toFile: plan, atomically: true, encoding: .utf8)
        try #require(try Self.rollout(store, ["plan", "start", plan]).status == 0)
        let server = try SilentServer()
        try Self.addSource(store, server)

        let (run, _) = try Self.start(store, server, ["plan", "run", "--interval", "0.05"])
        let stepped = try TestSupport.eventually(within: 20) {
            try Self.rollout(store, ["plan", "status", "--json", "--read-only"]).stdout.contains("\"step\":1")
        }
        #expect(stepped, "the plan's first step waited for the pull")
        #expect(server.waitForConnection(seconds: 20), "plan run never pulled")
        kill(run.processIdentifier, SIGTERM)
        #expect(Self.ended(run, within: 5), "plan run still runs 5 s after SIGTERM")
        #expect(run.terminationReason == .exit && run.terminationStatus == 143, "status \(run.terminationStatus)")
    }
}
