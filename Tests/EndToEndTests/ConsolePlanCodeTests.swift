import Console
import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import StepUp
import Testing
import TestSupport
import Timekeeping

/// "`x` resumes a plan paused for a code without asking for it" (3 a.m. issue): the runner only paused it again.
/// The console's source says the plan waits for a code, and the executor's resume carries the code, so the waiting
/// step is published at once by the operator who typed it.
@Suite(.serialized)
struct ConsolePlanCodeTests {
    static let ana = "ana@example.com"

    @Test func theConsoleResumesAPlanPausedForACodeWithTheCode() throws {
        let dir = try TestSupport.temporaryDirectory("console-plan-code")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("r.db").path
        let clock = ManualClock(Instant(seconds: 1_780_000_020))
        _ = try Wiring.createStore(path: path, seed: "rollout-code", operatorID: Self.ana, clock: clock)
        let session = try Wiring.session(path: path, operatorID: Self.ana, clock: clock)
        let record = OperatorRecord(id: try OperatorID(Self.ana), secret: .generate(), enrolledAt: clock.now())
        try session.store.withDatabase { db in try db.transaction { try OperatorTables.save(record, in: db) } }

        // The first step (0% → 30%) is an increase of more than 10 points: it needs a code, so the runner pauses.
        let states = RampPlanStates(session: session)
        _ = try states.start(source: "name ramp\nstep 30% hold 1h\nstep 40%\n", actor: Self.ana)
        let look = try #require(try RampPlanRunner(session: session).look())
        #expect(look.decision.state.phase == .paused)
        let source = try StoreConsoleSource(
            path: path, clock: clock, operatorID: Self.ana, readOnly: false, project: "p")
        #expect(try source.snapshot().plan?.waitsForCode == true)

        clock.advance(by: .seconds(Int64(30)))
        let code = TOTP.standard.code(secret: record.secret, step: TOTP.standard.step(at: clock.now()))
        let answer = StoreConsoleExecutor(session: session).perform(.planControl(pause: false, code: code))
        guard case .planControlled(let message, let refused)? = answer.first else {
            Issue.record("\(answer)")
            return
        }
        #expect(!refused, "\(message)")
        let percentage = try #require(try RolloutPlan.locate(in: session.config.current().template)).percentage
        #expect(percentage == MicroPercent(percent: 30), "\(message)")
        let state = try #require(try states.load()).state
        #expect(state.phase == .running)
        #expect(state.reached == 1)
        #expect(try source.snapshot().plan?.waitsForCode == false)
    }

    /// "The plan panel is stale after X" (3 a.m. issue): the next step published by hand showed as next, the step
    /// before it as current, until a runner looked. The panel shows the step the rollout is at and who records it.
    @Test func theNextStepPublishedByHandShowsAsReached() throws {
        let dir = try TestSupport.temporaryDirectory("console-plan-skip")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("r.db").path
        let clock = ManualClock(Instant(seconds: 1_780_000_020))
        _ = try Wiring.createStore(path: path, seed: "rollout-skip", operatorID: Self.ana, clock: clock)
        let session = try Wiring.session(path: path, operatorID: Self.ana, clock: clock)
        _ = try RampPlanStates(session: session).start(source: "name ramp\nstep 5% hold 1h\nstep 8%\n", actor: Self.ana)
        let source = try StoreConsoleSource(
            path: path, clock: clock, operatorID: Self.ana, readOnly: false, project: "p")
        #expect(try source.snapshot().plan?.reached == 0)

        // What X publishes: the next step's percentage, through the write path, as a change like any other.
        let outcome = try session.writePath().execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 5))), actor: Self.ana, reason: "skip the wait",
                origin: StoreConsoleExecutor.origin))
        guard case .published = outcome else {
            Issue.record("not published: \(outcome)")
            return
        }
        let plan = try #require(try source.snapshot().plan)
        #expect(plan.reached == 1)
        #expect(plan.nextStep == 2)
        #expect(plan.next.contains("step 1 (5%) is published"), "\(plan.next)")
        // The stored state is the runner's to move: the panel did not write it.
        #expect(try RampPlanStates(session: session).load()?.state.reached == 0)
    }
}
