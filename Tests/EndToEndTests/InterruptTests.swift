import Foundation
import Testing
import TestSupport

/// Ctrl-C as an on-call engineer presses it: `demo` removes its temporary store and ends with 130, `simulate`
/// stops cleanly (summary printed, clock record closed) and ends with 130, as a stopped program does.
@Suite(.serialized)
struct InterruptTests {
    @Test func ctrlCOnDemoLeavesNoTemporaryStoreAndExits130() throws {
        let tmp = try TestSupport.temporaryDirectory("demo-interrupt")
        defer { try? FileManager.default.removeItem(at: tmp) }
        let home = tmp.appendingPathComponent("home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let session = try TerminalSession(
            [try TestSupport.rolloutBinary(), "demo", "--scenario", "steady", "--devices", "200"], width: 120, height: 40,
            environment: ["TMPDIR": tmp.path, "HOME": home.path, "ROLLOUT_OPERATOR": "ana@example.com"])
        defer { session.close() }
        _ = try session.waitFor("AppAttestEnabled", timeout: 60)
        let demos = try FileManager.default.contentsOfDirectory(atPath: tmp.path).filter { $0.hasPrefix("rollout-demo-") }
        #expect(demos.count == 1, "the demo's temporary store while it runs: \(demos)")
        try session.press("C-c")
        #expect(try session.exitStatus(timeout: 30) == 130)
        let left = try FileManager.default.contentsOfDirectory(atPath: tmp.path).filter { $0.hasPrefix("rollout-demo-") }
        #expect(left.isEmpty, "left behind after Ctrl-C: \(left)")
    }

    @Test func sigintStopsSimulateCleanlyWith130() throws {
        let tmp = try TestSupport.temporaryDirectory("simulate-interrupt")
        defer { try? FileManager.default.removeItem(at: tmp) }
        let store = tmp.appendingPathComponent("drill.db").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = ["simulate", "--store", store, "--scenario", "steady", "--devices", "200", "--speed", "60", "--quiet"]
        var env = ProcessInfo.processInfo.environment
        env["ROLLOUT_OPERATOR"] = "ana@example.com"
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        // Running: the drill store exists and has taken telemetry.
        let deadline = Date(timeIntervalSinceNow: 60)
        var running = false
        while Date() < deadline {
            let status = try TestSupport.run(try TestSupport.rolloutBinary(), ["telemetry", "--json", "--store", store, "--read-only"])
            if status.status == 0,
                let json = try? JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any],
                let active = json["activeInstallations"] as? Int, active > 0
            {
                running = true
                break
            }
            usleep(100_000)
        }
        #expect(running, "the simulation never wrote telemetry")
        kill(p.processIdentifier, SIGINT)
        let summary = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationReason == .exit && p.terminationStatus == 130, "status \(p.terminationStatus)")
        #expect(summary.contains("stopped at"), "\(summary)")
    }
}
