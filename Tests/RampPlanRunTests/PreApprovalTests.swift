import Foundation
import RampPlans
import RemoteConfig
import Rollout
import RolloutApp
import StepUp
import SQLiteStore
import TestSupport
import Testing
import Timekeeping

/// Pre-approval of a plan's protected steps with a code at `plan start`: the runner then publishes exactly those
/// steps of exactly that plan, while it runs, with no operator; nothing else can use it.
///
/// The protected step is the plan's first (0% → 30%: an increase of more than 10 points under the default
/// policy), which a plan publishes without telemetry, so these tests need no simulated fleet.
@Suite(.serialized) struct PreApprovalTests {
    static let ana = "ana@example.com"
    static let plan = "name ramp\nstep 30% hold 1h\nstep 40%\n"

    final class Fixture {
        let dir: URL
        let path: String
        let clock = ManualClock(Instant(seconds: 1_780_000_020))
        let session: StoreSession
        let secret: TOTPSecret

        init() throws {
            dir = try TestSupport.temporaryDirectory("plan-approval")
            path = dir.appendingPathComponent("r.db").path
            _ = try Wiring.createStore(
                path: path, seed: "rollout-approval", operatorID: PreApprovalTests.ana, clock: clock)
            session = try Wiring.session(path: path, operatorID: PreApprovalTests.ana, clock: clock)
            let record = OperatorRecord(
                id: try OperatorID(PreApprovalTests.ana), secret: .generate(), enrolledAt: clock.now())
            try session.store.withDatabase { db in try db.transaction { try OperatorTables.save(record, in: db) } }
            secret = record.secret
        }

        deinit { try? FileManager.default.removeItem(at: dir) }

        /// The current code; the clock moves on by a step first, so each code is fresh (codes are single-use).
        func code() -> String {
            clock.advance(by: .seconds(Int64(30)))
            return TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: clock.now()))
        }

        var states: RampPlanStates { RampPlanStates(session: session) }
        func look() throws -> RampPlanRunner.Look { try #require(try RampPlanRunner(session: session).look()) }
        func percentage() throws -> MicroPercent {
            try #require(try RolloutPlan.locate(in: session.config.current().template)).percentage
        }
        func audit() throws -> [AuditEntry] {
            try session.config.auditRecords(limit: 1000, before: nil).reversed().map(\.entry)
        }
        func sqlite(_ sql: String) throws {
            let r = try TestSupport.run("/usr/bin/sqlite3", [path, sql])
            #expect(r.status == 0, "\(r.stderr)")
        }
    }

    @Test func aPreApprovedPlanPublishesItsProtectedStepWithNoOperator() throws {
        let f = try Fixture()
        let stored = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code())
        let approval = try #require(stored.approval)
        #expect(approval.steps == [StepUpPreApproval.Step(step: 1, from: 0, to: 30_000_000)])
        #expect(approval.approvedBy == Self.ana)
        #expect(approval.plan == stored.id)

        let look = try f.look()
        #expect(look.published == 2, "\(look.done ?? "")")
        #expect(look.decision.state.reached == 1)
        #expect(try f.percentage() == MicroPercent(percent: 30))
        let audit = try f.audit()
        // The code was checked once, at start; the advance was accepted as pre-approved.
        #expect(audit.filter { $0.result == .stepUpAccepted && $0.detail.hasPrefix("result accepted") }.count == 1)
        let pre = try #require(audit.first { $0.detail.hasPrefix("result pre-approved") })
        #expect(pre.action == "step-up set 0% -> 30%")
        #expect(pre.detail.contains("plan 'ramp' step 1, approved by \(Self.ana)"))
        #expect(audit.contains { $0.action == "plan pre-approve" && $0.to == "plan 'ramp' steps 1 (0% -> 30%)" })
        #expect(audit.contains { $0.result == .published && $0.reason == "plan 'ramp' step 1/2: 30%" })
    }

    @Test func withoutACodeTheProtectedStepWaitsForAnOperator() throws {
        let f = try Fixture()
        let stored = try f.states.start(source: Self.plan, actor: Self.ana)
        #expect(stored.approval == nil)
        let look = try f.look()
        #expect(look.published == nil)
        #expect(look.decision.state.phase == .paused)
        #expect(look.decision.state.reason.contains("needs a one-time code"))
        #expect(try f.percentage() == .zero)
    }

    @Test func aWrongCodeStoresNoPlanAndCountsAsAnAttempt() throws {
        let f = try Fixture()
        let good = f.code()
        let wrong = good == "000000" ? "111111" : "000000"
        #expect(throws: RampPlanFailure.self) { try f.states.start(source: Self.plan, actor: Self.ana, code: wrong) }
        #expect(try f.states.load() == nil)
        #expect(try f.audit().contains { $0.result == .stepUpRefused && $0.detail.hasPrefix("result wrong") })
        // A plan with no protected step does not use up a code.
        #expect(throws: RampPlanFailure.self) {
            try f.states.start(source: "name small\nstep 5%\n", actor: Self.ana, code: good)
        }
        #expect(try f.states.load() == nil)
    }

    /// "Every door", item 10: a pre-approved plan was run to its protected step by an operator who was not enrolled
    /// (the pre-approval covered any runner). It covers only the approver's own runner now.
    @Test func anotherOperatorsRunnerCannotUseThePreApproval() throws {
        let f = try Fixture()
        _ = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code())
        let bob = try Wiring.session(path: f.path, operatorID: "bob@example.com", clock: f.clock)
        let look = try #require(try RampPlanRunner(session: bob).look())
        #expect(look.published == nil, "\(look.done ?? "")")
        #expect(try f.percentage() == .zero)
        #expect(try f.audit().contains { $0.actor == "bob@example.com" && $0.result == .stepUpRefused })
        // The approver's own runner still publishes the step.
        #expect(try f.look().published != nil)
        #expect(try f.percentage() == MicroPercent(percent: 30))
    }

    /// "Every door", item 9: two runners started together; one published step 1 and the other paused the plan as
    /// "changed outside the plan: the rollout is at 0%, not at step 1's 5%" (3 of 20 trials). The loser had read
    /// the status before the winner's advance and the plan after it; the pause passed the plan's compare-and-swap.
    /// Here the interleaving is made exact: runner A reads its status, runner B advances, A looks with that status.
    @Test func aStatusReadBeforeAnotherRunnersAdvancePausesNothing() throws {
        let f = try Fixture()
        _ = try f.states.start(source: "name race\nstep 5% hold 1h\nstep 8%\n", actor: Self.ana)
        let a = try RampPlanRunner(session: f.session)
        let stale = try a.monitor.status()
        let b = try f.look()
        #expect(b.published != nil && b.decision.state.reached == 1, "\(b.done ?? "")")
        let look = try #require(try a.look(status: stale))
        #expect(look.published == nil)
        let stored = try #require(try f.states.load())
        #expect(stored.state.phase == .running, "\(stored.state.reason)")
        #expect(stored.state.reached == 1)
        #expect(!(try f.audit().contains { $0.action == "plan pause" }))
    }

    @Test func aManualWriteCannotUseThePreApproval() throws {
        let f = try Fixture()
        _ = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code())
        let path = try f.session.writePath()
        var manual = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 30))), actor: Self.ana, reason: "plan 'ramp' step 1/2: 30%",
            origin: Wiring.origin)
        #expect(throws: WritePath.Failure.self) { try path.execute(manual) }
        // Even a write naming another plan, or another step of this one, is not covered.
        let id = try #require(try f.states.load()).id
        for origin in [
            PlanStepOrigin(plan: String(repeating: "0", count: 64), step: 1), PlanStepOrigin(plan: id, step: 2),
        ] {
            manual.planStep = origin
            do {
                _ = try path.execute(manual)
                Issue.record("published with \(origin)")
            } catch WritePath.Failure.refused(let r) {
                #expect(r.policy == "step-up" && r.needsStepUpCode)
            }
        }
        #expect(try f.percentage() == .zero)
        // The plan's own write of that step is.
        manual.planStep = PlanStepOrigin(plan: id, step: 1)
        guard case .published = try path.execute(manual) else { Issue.record("not published"); return }
    }

    @Test func anAbortedPlanTakesItsPreApprovalWithIt() throws {
        let f = try Fixture()
        _ = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code())
        _ = try f.states.operatorChange(to: .aborted, actor: Self.ana, reason: "not today")
        #expect(try f.audit().contains { $0.action == "plan pre-approval revoked" })
        // The same file started again is another plan: its protected step waits for a code.
        let again = try f.states.start(source: Self.plan, actor: Self.ana)
        #expect(again.approval == nil)
        let look = try f.look()
        #expect(look.decision.state.phase == .paused && look.published == nil)
        #expect(try f.percentage() == .zero)
    }

    @Test func aPausedOrExpiredPlanCannotUseIt() throws {
        let f = try Fixture()
        _ = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code(), approvalFor: .minutes(10))
        _ = try f.states.operatorChange(to: .paused, actor: Self.ana, reason: "wait")
        #expect(try f.states.load()?.approval == nil)
        _ = try f.states.operatorChange(to: .running, actor: Self.ana, reason: "go")
        #expect(try f.states.load()?.approval != nil)
        f.clock.advance(by: .minutes(11))
        let look = try f.look()
        #expect(look.decision.state.phase == .paused && look.published == nil, "\(look.done ?? "")")
        #expect(try f.percentage() == .zero)
    }

    /// The plan and its pre-approval are sealed: rows edited outside rollout stop every write.
    @Test func anEditedPlanOrPreApprovalIsRefused() throws {
        for edit in [
            "UPDATE ramp_plan SET source = replace(source, '30%', '90%')",
            "UPDATE ramp_plan_approval SET expires_at = expires_at + 1000000000",
            "UPDATE ramp_plan_approval SET steps = '1:0:90000000'",
        ] {
            let f = try Fixture()
            _ = try f.states.start(source: Self.plan, actor: Self.ana, code: f.code())
            try f.sqlite(edit)
            #expect(throws: (any Error).self, "\(edit)") { try f.look() }
            #expect(try f.percentage() == .zero)
        }
    }
}
