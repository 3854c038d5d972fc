import FleetSimulator
import Foundation
import Monitoring
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import TestSupport
import Testing
import Timekeeping

/// `RolloutMonitor`, the one assessment of a rollout, on a real store fed by the simulated fleet: when the rollout
/// started, and auto-kill (on HALT only, when switched on, exactly once however many watchers see it).
@Suite struct RolloutMonitorTests {
    static let start = ISO8601.parse("2026-05-20T18:00:00Z")!

    /// The crash-regression scenario run on `store` (6,000 devices): a rollout whose verdict reaches HALT.
    static func crashRegression(on store: RolloutStore) throws -> FleetSimulation {
        let scenario = try Scenario.load("crash-regression")
        let simulation = try FleetSimulation(
            scenario: scenario,
            options: FleetOptions(scenario: scenario, devices: 6_000, seed: 3, start: Self.start),
            config: try store.configStore(), sink: StoreTelemetrySink(store: store))
        try simulation.run()
        return simulation
    }

    static func store() throws -> (RolloutStore, URL) {
        let dir = try TestSupport.temporaryDirectory("monitor")
        let store = try RolloutStore(path: dir.appendingPathComponent("rollout.db").path)
        try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: "rollout-monitor", actor: "test", time: start)
        }
        return (store, dir)
    }

    static func publish(_ op: RolloutOperation, _ store: RolloutStore, at t: Instant) throws {
        let path = WritePath(store: try store.configStore(), clock: ManualClock(t), newSeed: { "reseeded" })
        _ = try path.execute(WritePath.Request(intent: .rollout(op), actor: "alice", reason: "test", origin: "ROLLOUT_TEST"))
    }

    /// The start is the first version of the run of versions in which the rollout exists (anything but not
    /// started): a kill and a resume do not start it again, so the comparison keeps the whole history of the same
    /// persisted groups.
    @Test func theStartIsTheFirstVersionOfTheCurrentRun() throws {
        let (store, dir) = try Self.store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let t1 = Self.start + .minutes(10)
        try Self.publish(.set(MicroPercent(percent: 5)), store, at: t1)
        try Self.publish(.set(MicroPercent(percent: 10)), store, at: t1 + .minutes(30))
        let monitor = try RolloutMonitor(store: store, clock: ManualClock(t1 + .hours(1)))
        let first = try monitor.status()
        #expect(first.startedAt == t1, "\(String(describing: first.startedAt))")
        #expect(first.exposed == MicroPercent(percent: 10))
        // A second monitor (another process) finds the same start.
        #expect(try RolloutMonitor(store: store, clock: ManualClock(t1 + .hours(1))).status().startedAt == t1)

        let t2 = t1 + .hours(2)
        try Self.publish(.kill, store, at: t2)
        let killed = try monitor.status()
        #expect(killed.exposed == .zero)
        try Self.publish(.resume, store, at: t2 + .minutes(5))
        #expect(try monitor.status().startedAt == t1)
        #expect(try RolloutMonitor(store: store, clock: ManualClock(t2 + .hours(1))).status().startedAt == t1)
    }

    /// The explorer's drill on the busy fleet (`set 60`, `kill`, `resume`, `set 30`), through the monitor on a real
    /// store: the kill's last exposed stragglers came in a minute without control sessions, the baseline froze,
    /// and every OK verdict after it began "control group gone since", at 30% with the control's sessions rising.
    @Test func aKillAndAResumeLeaveTheLiveComparison() throws {
        let (store, dir) = try Self.store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenario = try Scenario.parse(
            """
            sessions-per-day 24
            session-length   4m
            crash-rate       2%
            rollout 40%
            at 2h rollout 60%
            at 2h15m kill
            at 3h30m resume
            at 3h30m rollout 30%
            """, name: "drill")
        let simulation = try FleetSimulation(
            scenario: scenario,
            options: FleetOptions(scenario: scenario, devices: 6_000, seed: 5, start: Self.start, duration: .hours(5)),
            config: try store.configStore(), sink: StoreTelemetrySink(store: store))
        let monitor = try RolloutMonitor(store: store, clock: simulation.clock)
        func crashes(_ s: RolloutMonitor.Status) -> String {
            s.assessment.verdict.findings.first { $0.topic == .crashes }?.text ?? ""
        }

        try simulation.advance(to: Self.start + .hours(3) + .minutes(20))
        try simulation.flush()
        let killed = try monitor.status()
        try #require(killed.plan?.state == .killed)
        // The drill's condition: the kill left a minute with exposed sessions and none from control.
        try #require(killed.snapshot.crash.baseline != nil && killed.snapshot.crash.controlGoneSince != nil)
        #expect(!crashes(killed).contains("control group gone"), "\(crashes(killed))")

        try simulation.run()
        try simulation.flush()
        let resumed = try monitor.status()
        try #require(resumed.plan?.state == .rolling && resumed.exposed == MicroPercent(percent: 30))
        #expect(resumed.snapshot.crash.controlGoneSince == nil)
        #expect(resumed.assessment.verdict.level == .ok, "\(resumed.assessment.verdict)")
        #expect(!crashes(resumed).contains("control group gone"), "\(crashes(resumed))")
        // A monitor folding the store from the start reads the same.
        let cold = try RolloutMonitor(store: store, clock: simulation.clock).status()
        #expect(crashes(cold) == crashes(resumed))
    }

    /// A crash regression reaches HALT. With auto-kill off nothing is published; on, of several watchers that saw
    /// the same HALT exactly one publishes the kill (compare-and-swap), and the kill is the guardrail's.
    @Test func autoKillActsOnceOnHaltAndOnlyWhenOn() throws {
        let (store, dir) = try Self.store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let simulation = try Self.crashRegression(on: store)
        let monitors = try (0..<3).map { _ in try RolloutMonitor(store: store, clock: simulation.clock) }
        let statuses = try monitors.map { try $0.status() }
        try #require(statuses[0].assessment.verdict.level == .halt, "\(statuses[0].assessment.verdict)")
        try #require(statuses[0].plan?.state == .rolling)
        let path = WritePath(store: try store.configStore(), clock: simulation.clock, newSeed: { "reseeded" })
        let before = try store.configStore().current().info.number

        #expect(try monitors[0].autoKillIfHalted(statuses[0], using: path) == nil)
        #expect(try store.configStore().current().info.number == before)

        try store.saveGuardrailSetting("guardrails.auto-kill", "on")
        let on = try monitors.map { try $0.status() }
        let outcomes = try zip(monitors, on).map { try $0.0.autoKillIfHalted($0.1, using: path) }
        #expect(outcomes.compactMap { $0 }.count == 1, "\(outcomes)")
        let now = try store.configStore().current()
        #expect(now.info.number == before + 1)
        #expect(try RolloutPlan.locate(in: now.template)?.state == .killed)
        #expect(now.info.updateOrigin == RolloutMonitor.autoKillOrigin)
        // Killed: nothing more to do.
        #expect(try monitors[0].autoKillIfHalted(using: path) == nil)
    }

    /// Reproduction: every `rollout nudge` cached the start of the version it was about to replace in a write
    /// transaction of its own (its seal, a WAL sync and a witness sync: an eighth of the command), a `rollout status`
    /// after any write wrote too, and the sealed cache kept a row per version, which every write's seal digests.
    /// Now a short walk's start rides on the process's next write, a reader that walked little writes nothing, a
    /// long walk is kept at once, and the table keeps one row.
    @Test func theRolloutStartRidesOnTheNextWriteAndKeepsOneRow() throws {
        let (store, dir) = try Self.store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let t1 = Self.start + .minutes(10)
        try Self.publish(.set(MicroPercent(percent: 5)), store, at: t1)
        let long = RolloutMonitor.walkKeptWithNextWrite + 4
        for i in 0..<long {
            try Self.publish(.nudge(MicroPercent(i % 2 == 0 ? 100_000 : -100_000)), store, at: t1 + .minutes(Int64(i + 1)))
        }
        let clock = ManualClock(t1 + .hours(1))
        let walkedLong = try store.configStore().current().info.number
        #expect(try RolloutMonitor(store: store, clock: clock).status().startedAt == t1)
        #expect(try store.cachedRolloutStart()?.version == walkedLong, "a long walk is kept at once")

        try Self.publish(.nudge(MicroPercent(100_000)), store, at: t1 + .minutes(40))
        try Self.publish(.nudge(MicroPercent(-100_000)), store, at: t1 + .minutes(41))
        let walkedShort = try store.configStore().current().info.number
        #expect(try RolloutMonitor(store: store, clock: clock).status().startedAt == t1)
        #expect(try store.cachedRolloutStart()?.version == walkedLong, "a reader wrote the cache")

        // The next write of the same connection keeps it, under its seal.
        try Self.publish(.nudge(MicroPercent(100_000)), store, at: t1 + .minutes(42))
        #expect(try store.cachedRolloutStart()?.version == walkedShort)
        let rows = try TestSupport.run("/usr/bin/sqlite3", [store.path, "SELECT count(*) FROM monitor_rollout_start"])
        #expect(rows.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "1", "\(rows.stdout)\(rows.stderr)")
        _ = try store.verify()
        // Another reader starts from it and finds the same start.
        #expect(try RolloutMonitor(store: store, clock: clock).status().startedAt == t1)
    }

    /// The explorer's forgery: `INSERT OR REPLACE INTO monitor_rollout_start VALUES (<current version>, <tomorrow>)`
    /// with sqlite3 made every window empty, so a crash regression read HOLD ("no telemetry since the rollout
    /// started at <tomorrow>") and auto-kill did nothing, silently. Now the auto-kill either kills or fails loudly,
    /// naming the forged table (the cache is sealed, and a start after "now" is not believed).
    @Test func aForgedRolloutStartDoesNotSilenceAutoKill() throws {
        let (store, dir) = try Self.store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let simulation = try Self.crashRegression(on: store)
        try store.saveGuardrailSetting("guardrails.auto-kill", "on")
        try #require(try RolloutMonitor(store: store, clock: simulation.clock).status().assessment.verdict.level == .halt)
        let before = try store.configStore().current().info.number
        let tomorrow = simulation.clock.now() + .hours(24)
        let forged = try TestSupport.run(
            "/usr/bin/sqlite3",
            [
                store.path,
                "INSERT OR REPLACE INTO monitor_rollout_start (version, started_at) VALUES (\(before), \(tomorrow.microseconds))",
            ])
        try #require(forged.status == 0, "\(forged.stderr)")

        let monitor = try RolloutMonitor(store: store, clock: simulation.clock)
        let path = WritePath(store: try store.configStore(), clock: simulation.clock, newSeed: { "reseeded" })
        do {
            let outcome = try monitor.autoKillIfHalted(using: path)
            #expect(outcome != nil, "the forged start silenced auto-kill")
            let now = try store.configStore().current()
            #expect(now.info.number == before + 1 && now.info.updateOrigin == RolloutMonitor.autoKillOrigin)
        } catch {
            #expect("\(error)".contains("table monitor_rollout_start"), "\(error)")
        }
        // Either way the forgery is named.
        #expect(throws: (any Error).self) { try store.verify() }
    }
}
