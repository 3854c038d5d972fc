import FleetSimulator
import Foundation
import Monitoring
import RampPlans
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import Telemetry
import TestSupport
import Testing
import Timekeeping

/// A plan driving a simulated fleet on a drill store, as `rollout plan run` does beside `rollout simulate`: the
/// simulator at `--speed max` lands telemetry minute by minute, and after every landed minute the runner looks
/// (the same `RampPlanRunner.look()` that `plan run` calls in its loop), on the simulation's own clock.
enum Drill {
    static let planner = "ana@example.com"

    struct Run {
        var path: String
        var dir: URL
        var looks: [RampPlanRunner.Look]
        var stats: FleetStatistics
        var final: StoredRampPlan
        /// Versions published by the plan, oldest first.
        var planVersions: [VersionInfo]
        var audit: [AuditRecord]
    }

    /// A scenario without its scripted rollout changes (the plan makes them).
    static func unscripted(
        _ name: String, devices: Int, duration: Instant.Duration, parameters: [(String, String)] = []
    ) throws -> Scenario {
        var s = try Scenario.load(name)
        for (k, v) in parameters { try s.parameters.set(k, v) }
        s.schedule.removeAll { if case .rollout = $0.action { true } else { false } }
        s.devices = devices
        s.duration = duration
        return s
    }

    /// Where a drill's simulated fleet starts: the next 02:25 UTC after `now`, whatever the time the test runs.
    ///
    /// The fleet's day has quiet hours (`DailyCurve`) in which a small fleet's gates cannot pass within a plan's
    /// timeout: started at the wall clock's now, the steady drill paused at step 1 for seed 2 when run at 03:13 and
    /// 03:29 UTC (it passes at 02:25 under `faketime`), so a drill's outcome depended on the hour CI ran it. Every
    /// drill starts at the same time of day instead; the devices' launches and the plan's looks are then the same
    /// on every run.
    static func start(now: Instant) -> Instant {
        let day: Int64 = 86_400_000_000
        let offset = Int64(2 * 3600 + 25 * 60) * 1_000_000
        var start = now.microseconds - now.microseconds % day + offset
        if start < now.microseconds { start += day }
        return Instant(microseconds: start)
    }

    /// Creates a drill store at `path` (or reuses one), stores `plan` unless one is there, and runs the scenario
    /// with `runners` plan runners looking after every landed minute. `stopAt` ends the simulation early.
    static func run(
        scenario: Scenario, plan: String, seed: UInt64, settings: [(String, String)] = [], runners: Int = 1,
        path existing: String? = nil, start: Instant? = nil, stopWhen: ((RampState) -> Bool)? = nil
    ) throws -> Run {
        let wall = SystemClock()
        let dir =
            try existing.map { URL(fileURLWithPath: $0).deletingLastPathComponent() }
            ?? TestSupport.temporaryDirectory("plan")
        let path = existing ?? dir.appendingPathComponent("drill.db").path
        if existing == nil {
            let created = try Wiring.createStore(
                path: path, seed: scenario.rolloutSeed, operatorID: FleetOptions.simulatorActor)
            try created.store.withDatabase { try DrillStoreMark.mark($0, at: wall.now(), by: "test") }
        }
        let session = try Wiring.session(path: path, operatorID: planner, clock: wall)
        for (k, v) in settings {
            _ = try SettingsWritePath(session: session).execute(.setting(key: k, value: v), actor: planner, code: nil)
        }
        if try RampPlanStates(session: session).load() == nil {
            _ = try RampPlanStates(session: session).start(source: plan, actor: planner)
        }
        let simSession = try Wiring.session(path: path, operatorID: FleetOptions.simulatorActor, clock: wall)
        let sink = try StoreTelemetrySink(store: simSession.store, source: "simulator:\(scenario.name)")
        // A resumed drill goes on from where the store's telemetry ends.
        let options = FleetOptions(
            scenario: scenario, devices: scenario.devices, seed: seed, start: start ?? Self.start(now: wall.now()))
        let simulation = try FleetSimulation(
            scenario: scenario, options: options, config: try simSession.store.configStore(), sink: sink,
            writePath: try simSession.writePath())
        let planRunners = try (0..<runners).map { _ in
            // Each runner its own session and monitor, as separate processes would have.
            let s = try Wiring.session(path: path, operatorID: planner, clock: wall)
            return try RampPlanRunner(
                session: s, monitor: try RolloutMonitor(store: s.store, clock: wall, telemetryClock: simulation.clock))
        }
        var looks: [RampPlanRunner.Look] = []
        nonisolated(unsafe) var collected = looks
        let runner = SimulationRunner(simulation: simulation, speed: .maximum, wall: wall, clockStore: simSession.store)
        sink.afterCommit = { _ in
            // Runners look at the same moment (separate connections, as separate processes).
            let results = Results()
            nonisolated(unsafe) let runners = planRunners
            DispatchQueue.concurrentPerform(iterations: runners.count) { i in
                do { results.add(try runners[i].look()) } catch { results.fail(error) }
            }
            try results.check()
            collected += results.looks
            // A finished plan (or the given end) ends the drill: nothing more to see.
            if let last = collected.last?.decision.state, last.phase.isFinal || stopWhen?(last) == true {
                runner.stop()
            }
        }
        try runner.run()
        looks = collected
        let final = try #require(try RampPlanStates(session: session).load())
        let versions = try session.config.versions(limit: 500, before: nil).reversed().filter {
            $0.updateOrigin == RampPlanRunner.origin
        }
        let audit = try session.config.auditRecords(limit: 5000, before: nil)
        return Run(
            path: path, dir: dir, looks: looks, stats: simulation.statistics(), final: final,
            planVersions: Array(versions),
            audit: audit)
    }

    static let ramp = """
        name ramp
        gate ok-for 5m
        gate users 20
        gate sessions 50
        gate propagation 20%
        timeout 5h
        step 5% hold 10m
        step 10% hold 10m
        step 25% hold 10m
        step 50% hold 10m
        step 100%
        """
}

@Suite(.serialized) struct RampSimulationTests {
    /// The small drill fleet cannot show a +50% crash increase within minutes; the drill asks for +1000% (a 11× crash rate; the SPRT still catches crash-regression’s 4×).
    static let drillSettings = [("crash.detectable-effect-percent", "1000")]

    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func steadyReachesHundredThroughEveryStep(seed: UInt64) throws {
        // Started at the next 02:25 UTC, as every drill (`Drill.start(now:)`): at 03:13 and 03:29 UTC seed 2 paused.
        let run = try Drill.run(
            scenario: try Drill.unscripted("steady", devices: 8000, duration: .hours(8)), plan: Drill.ramp, seed: seed,
            settings: Self.drillSettings)
        defer { try? FileManager.default.removeItem(at: run.dir) }
        #expect(run.final.state.phase == .done, "\(run.final.state) \(run.looks.last.map { PlanWords.line($0) } ?? "")")
        #expect(run.planVersions.map(\.description) == (1...5).map { run.final.plan.reason(step: $0) })
        #expect(run.planVersions.allSatisfy { $0.updateUser == Drill.planner })
        // Each advance in the audit log, as a published change with the plan step as its reason.
        let advances = run.audit.filter {
            $0.entry.result == .published && $0.entry.reason.hasPrefix("plan 'ramp' step")
        }
        #expect(Set(advances.map(\.entry.reason)) == Set((1...5).map { run.final.plan.reason(step: $0) }))
        // Every step was held at least its hold, in simulated time.
        let times = run.looks.compactMap { l -> (Int, Instant)? in
            l.published.map { _ in (l.decision.state.reached, l.status.now) }
        }
        for (a, b) in zip(times, times.dropFirst()) where a.0 < 5 {
            #expect(b.1 - a.1 >= run.final.plan.steps[a.0 - 1].hold, "\(a) \(b)")
        }
    }

    /// Default guardrail settings: the plan holds 20% long enough for the SPRT, and kills at the first HALT.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func crashRegressionIsKilledAtTheFirstHalt(seed: UInt64) throws {
        let plan = "name guard\nstep 20% hold 3h\nstep 50%"
        let run = try Drill.run(
            scenario: try Drill.unscripted("crash-regression", devices: 6000, duration: .hours(3)), plan: plan,
            seed: seed)
        defer { try? FileManager.default.removeItem(at: run.dir) }
        #expect(run.final.state.phase == .killed, "\(run.final.state)")
        #expect(run.final.state.reason.hasPrefix("HALT: exposed users crash more than control"))
        // The first look that saw HALT killed (a WATCH before it paused the plan; a paused plan still kills).
        let firstHalt = try #require(run.looks.firstIndex { $0.status.assessment.verdict.level == .halt })
        #expect(run.looks[firstHalt].decision.state.phase == .killed)
        #expect(run.looks[firstHalt].published != nil)
        #expect(run.audit.filter { $0.entry.action == "kill" && $0.entry.result == .published }.count == 1)
        #expect(run.planVersions.map(\.description).first == "plan 'guard' step 1/2: 20%")
        #expect(run.planVersions.last?.description.hasPrefix("plan 'guard' step 1/2: HALT") == true)
    }

    /// A step that HOLDs (the bad build's failures, with the HALT ceiling on rejections turned off) past its timeout
    /// pauses the plan with an alert.
    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func badBuildPauses(seed: UInt64) throws {
        let plan =
            "name ramp\ngate ok-for 5m\ntimeout 20m\nstep 10% hold 10m\nstep 25% hold 10m\nstep 50% hold 10m\nstep 100%"
        let run = try Drill.run(
            scenario: try Drill.unscripted("bad-build", devices: 4000, duration: .minutes(100)), plan: plan, seed: seed,
            settings: Self.drillSettings + [("failures.halt-ceiling-percent", "100")])
        defer { try? FileManager.default.removeItem(at: run.dir) }
        #expect(
            run.final.state.phase == .paused, "\(run.final.state) \(run.looks.last.map { PlanWords.line($0) } ?? "")")
        #expect(run.audit.contains { $0.entry.action == "plan pause" })
        #expect(run.final.state.reached < 4)
    }

    /// Issue 35, item 3: the bad build's attestations are rejected for most exposed users, which enforcing App
    /// Check would lock out: HALT (failures.halt-ceiling-percent, default 50), and the plan kills.
    @Test(arguments: [UInt64(1), 2, 3])
    func badBuildHaltsAndThePlanKills(seed: UInt64) throws {
        let plan =
            "name ramp\ngate ok-for 5m\ntimeout 20m\nstep 10% hold 10m\nstep 25% hold 10m\nstep 50% hold 10m\nstep 100%"
        let run = try Drill.run(
            scenario: try Drill.unscripted("bad-build", devices: 4000, duration: .minutes(100)), plan: plan, seed: seed,
            settings: Self.drillSettings)
        defer { try? FileManager.default.removeItem(at: run.dir) }
        #expect(run.final.state.phase == .killed, "\(run.final.state)")
        #expect(run.audit.contains { $0.entry.action == "kill" && $0.entry.reason.contains("attestations rejected for") })
    }

    @Test(arguments: [UInt64(1), 2, 3, 4, 5])
    func throttlingWaitsAtTheBudget(seed: UInt64) throws {
        let plan = """
            name surge
            gate load 50%
            step 5% hold 5m
            step 50% hold 5m
            step 60%
            """
        let run = try Drill.run(
            scenario: try Drill.unscripted(
                "throttling", devices: 20000, duration: .minutes(40),
                // Busier sessions than the scenario's, so that the crash comparison has data within minutes.
                parameters: [("sessions-per-day", "48"), ("crash-rate", "1%")]), plan: plan, seed: seed,
            settings: Self.drillSettings + [("budget.per-second", "3")])
        defer { try? FileManager.default.removeItem(at: run.dir) }
        // The load after 50% is above half the budget: the plan waits at 50% with the load gate unmet.
        let waits = run.looks.filter { l in
            if case .wait(_, let gates) = l.decision.action {
                gates.contains { $0.gate == "load" && !$0.met }
            } else {
                false
            }
        }
        #expect(!waits.isEmpty, "\(run.looks.last.map { PlanWords.line($0) } ?? "")")
        #expect(
            run.looks.contains { $0.published != nil && $0.decision.state.reached == 2 },
            "\(run.looks.map { PlanWords.line($0) }.suffix(3))")
    }

    /// Two runners look at every minute at once: each step is published once; the loser of each race does nothing.
    @Test func twoRunnersAdvanceOnce() throws {
        let run = try Drill.run(
            scenario: try Drill.unscripted("steady", devices: 8000, duration: .hours(4)), plan: Drill.ramp, seed: 1,
            settings: Self.drillSettings, runners: 2)
        defer { try? FileManager.default.removeItem(at: run.dir) }
        #expect(run.final.state.phase == .done, "\(run.final.state)")
        #expect(run.planVersions.map(\.description) == (1...5).map { run.final.plan.reason(step: $0) })
        #expect(run.looks.filter { $0.published != nil }.count == 5)
    }

    /// The runner stops in the middle (its process ends); a new one on the same store goes on at the right step.
    @Test func aRestartedRunnerResumesAtItsStep() throws {
        let scenario = try Drill.unscripted("steady", devices: 8000, duration: .hours(4))
        let start = Drill.start(now: SystemClock().now())
        let first = try Drill.run(
            scenario: scenario, plan: Drill.ramp, seed: 1, settings: Self.drillSettings, start: start,
            stopWhen: { $0.reached == 3 })
        defer { try? FileManager.default.removeItem(at: first.dir) }
        let reached = first.final.state.reached
        #expect(first.final.state.phase == .running)
        #expect(reached == 3, "\(first.final.state)")
        let second = try Drill.run(
            scenario: scenario, plan: Drill.ramp, seed: 2, path: first.path, start: first.stats.now)
        #expect(second.final.state.phase == .done, "\(second.final.state)")
        // The new runner published only the steps after the one reached, and the store has each step once.
        let again = second.looks.compactMap { $0.published != nil ? $0.decision.state.reached : nil }
        #expect(again == Array((reached + 1)...5))
        #expect(second.planVersions.map(\.description) == (1...5).map { second.final.plan.reason(step: $0) })
    }
}

/// Looks gathered from concurrent runners.
final class Results: @unchecked Sendable {
    private let lock = NSLock()
    private(set) var looks: [RampPlanRunner.Look] = []
    private var errors: [any Error] = []
    func add(_ l: RampPlanRunner.Look?) { lock.withLock { if let l { looks.append(l) } } }
    func fail(_ e: any Error) { lock.withLock { errors.append(e) } }
    func check() throws { if let e = lock.withLock({ errors.first }) { throw e } }
}

/// One line per look, for failure messages.
enum PlanWords {
    static func line(_ l: RampPlanRunner.Look) -> String {
        "\(l.status.now.iso8601) step \(l.decision.state.reached) \(l.decision.state.phase.rawValue) \(l.decision.action) "
            + "verdict \(l.status.assessment.verdict.level): \(l.status.assessment.verdict.reason)"
    }
}
