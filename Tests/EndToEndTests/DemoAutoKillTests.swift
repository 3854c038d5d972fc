import Foundation
import Rollout
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// `rollout demo` computes the verdict in two places that may write (the simulator's sink and the console):
/// with auto-kill on, the crash regression is killed once.
@Suite("demo: auto-kill", .serialized)
struct DemoAutoKillTests {
    @Test func crashRegressionInADemoIsKilledExactlyOnce() throws {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--speed", "300", "--scenario",
            "crash-regression", "--devices", "6000", "--seed", "3",
        ]
        let session = try TerminalSession(command, width: 120, height: 40)
        defer { session.close() }
        try session.waitFor("<= 20", timeout: 30)
        // Turned on from another terminal while the demo runs, long before the regression shows.
        let set = try f.cli("policy", "set", "guardrails.auto-kill", "on")
        try #require(set.status == 0, "\(set.stderr)")
        try session.waitFor("KILLED", timeout: 90)
        let store = try RolloutStore(path: f.store, create: false)
        let versions = try store.configStore().versions(limit: 300, before: nil)
        let kills = versions.filter { $0.updateUser == "guardrail (auto-kill)" }
        #expect(kills.count == 1, "\(versions.map { "\($0.number) \($0.updateUser)" })")
        #expect(kills.first?.description.hasPrefix("guardrail: exposed users crash more than control") == true)
        // Nothing else published after the kill while the demo ran on.
        usleep(2_000_000)
        #expect(try store.configStore().versions(limit: 300, before: nil).filter { $0.updateUser == "guardrail (auto-kill)" }.count == 1)
        try session.press("q")
        #expect(try session.exitStatus(timeout: 20) == 0)
    }
}
