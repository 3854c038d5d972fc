import Foundation
import RemoteConfig
import Rollout
import StepUp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// Step-up as a policy of the real write path, on a real store file, with an injected clock: a refused change
/// leaves the store unchanged and is audited; an accepted one publishes; kill is never blocked.
@Suite("Step-up in the write path")
struct WritePathStepUpTests {
    static let start = Instant(seconds: 1_780_000_005)

    final class Fixture {
        let directory: URL
        let clock = ManualClock(WritePathStepUpTests.start)
        let store: RolloutStore
        let config: SQLiteConfigStore
        let policy: StepUpWritePolicy

        init() throws {
            directory = try TestSupport.temporaryDirectory("stepup-writepath")
            store = try RolloutStore(path: directory.appendingPathComponent("rollout.db").path)
            config = try store.configStore()
            _ = try config.initializeIfEmpty {
                try SQLiteConfigStore.genesis(seed: "rollout-test", actor: "init", time: WritePathStepUpTests.start)
            }
            policy = try StepUpWritePolicy(store: store, clock: clock)
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        var path: WritePath { WritePath(store: config, clock: clock, policies: [policy], newSeed: { "unused" }) }

        func request(_ op: RolloutOperation, code: String? = nil, actor: String = "ana@laptop") -> WritePath.Request {
            var r = WritePath.Request(intent: .rollout(op), actor: actor, reason: "test", origin: "TEST")
            r.stepUpCode = code
            return r
        }

        func enrol(_ id: String) throws -> TOTPSecret {
            let r = OperatorRecord(id: try OperatorID(id), secret: .generate(), enrolledAt: clock.now())
            try store.database.transaction { try OperatorTables.save(r, in: store.database) }
            return r.secret
        }

        func code(_ secret: TOTPSecret, step offset: Int64 = 0) -> String {
            TOTP.standard.code(secret: secret, step: TOTP.standard.step(at: clock.now()) + offset)
        }

        func wrong(_ secret: TOTPSecret) -> String {
            let step = TOTP.standard.step(at: clock.now())
            let near = Set((step - 12...step + 12).map { TOTP.standard.code(secret: secret, step: $0) })
            return (0..<1000).map { String(format: "%06d", $0 * 997 % 1_000_000) }.first { !near.contains($0) }!
        }

        func percentage() throws -> MicroPercent { try RolloutPlan.locate(in: config.current().template)!.percentage }
        func version() throws -> Int { try config.current().info.number }
        func audit() throws -> [AuditEntry] {
            try config.auditRecords(limit: 1000, before: nil).reversed().map(\.entry)
        }

        /// The policy refusal of `request`, or nil when it published.
        func refusal(_ request: WritePath.Request) throws -> PolicyRefusal? {
            do {
                _ = try path.execute(request)
                return nil
            } catch WritePath.Failure.refused(let r) {
                return r
            }
        }
    }

    @Test func offUntilAnOperatorIsEnrolled() throws {
        let f = try Fixture()
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 100)))) == nil)
        #expect(try f.percentage() == MicroPercent(percent: 100))
        let report = try f.policy.preview(try f.path.preview(f.request(.set(MicroPercent(percent: 10)))).proposal)
        #expect(report.lines == ["step-up verification is off (no operator enrolled)"])
    }

    @Test func aRefusedChangeLeavesTheStoreUnchangedAndIsAudited() throws {
        let f = try Fixture()
        _ = try f.path.execute(f.request(.set(MicroPercent(percent: 10))))
        let ana = try f.enrol("ana@laptop")
        let before = try f.version()

        let preview = try f.path.preview(f.request(.set(MicroPercent(percent: 30))))
        let report = try #require(preview.reports.first)
        #expect(report.lines == ["a fresh code is needed: an increase of 20 points, more than 10"])
        #expect(
            report.decision
                == .refuse(PolicyRefusal(policy: "step-up", reason: "a fresh code is needed", needsStepUpCode: true)))

        for code: String? in [nil, "12345", f.wrong(ana), f.code(ana, step: -3)] {
            let refusal = try #require(try f.refusal(f.request(.set(MicroPercent(percent: 30)), code: code)))
            #expect(refusal.policy == "step-up")
            #expect(refusal.needsStepUpCode)
            #expect(try f.version() == before)
            #expect(try f.percentage() == MicroPercent(percent: 10))
        }
        let stepUps = try f.audit().filter { $0.action.hasPrefix("step-up") }
        #expect(stepUps.map(\.result) == Array(repeating: .stepUpRefused, count: 4))
        #expect(
            stepUps.map { $0.detail.split(separator: ";")[0] } == [
                "result missing", "result malformed", "result wrong", "result expired",
            ])
        #expect(stepUps[0].action == "step-up set 10% -> 30%")
        #expect(try f.audit().filter { $0.result == .refusedByPolicy }.count == 4)

        // The right code publishes; the same code again is a replay.
        let code = f.code(ana)
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 30)), code: code)) == nil)
        #expect(try f.percentage() == MicroPercent(percent: 30))
        #expect(try f.audit().suffix(2).map(\.result) == [.stepUpAccepted, .published])
        let replay = try #require(try f.refusal(f.request(.set(MicroPercent(percent: 60)), code: code)))
        #expect(replay.reason.contains("code already used"))
        #expect(try f.percentage() == MicroPercent(percent: 30))
    }

    @Test func eachDefaultRuleAsksThroughTheWritePath() throws {
        let f = try Fixture()
        _ = try f.path.execute(f.request(.set(MicroPercent(percent: 45))))
        let ana = try f.enrol("ana@laptop")
        var forced = f.request(.nudge(MicroPercent(percent: 1)))
        forced.force = true
        var rollback = f.request(.kill)
        rollback.intent = .rollback(toVersion: 1)
        for request in [
            f.request(.set(MicroPercent(percent: 60))),  // large increase, crosses 50
            f.request(.nudge(MicroPercent(percent: 6))),  // crosses 50
            forced,
            rollback,
        ] {
            let refusal = try #require(try f.refusal(request), "\(request.intent)")
            #expect(refusal.needsStepUpCode)
        }
        #expect(try f.percentage() == MicroPercent(percent: 45))
        // Small increases need nothing.
        #expect(try f.refusal(f.request(.nudge(MicroPercent(percent: 5)))) == nil)
        // Reaching 100% from 50%: a code.
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 100)))) != nil)
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 100)), code: f.code(ana))) == nil)
    }

    @Test func lockoutBlocksIncreasesButNeverAKillAndEndsAfterFifteenMinutes() throws {
        let f = try Fixture()
        _ = try f.path.execute(f.request(.set(MicroPercent(percent: 20))))
        let ana = try f.enrol("ana@laptop")
        for _ in 0..<3 { _ = try f.refusal(f.request(.set(MicroPercent(percent: 40)), code: f.wrong(ana))) }
        let locked = try #require(try f.refusal(f.request(.set(MicroPercent(percent: 40)), code: f.code(ana))))
        #expect(locked.reason.contains("ana@laptop is locked out of step-up until"))
        #expect(!locked.needsStepUpCode)

        #expect(try f.refusal(f.request(.nudge(MicroPercent(-5_000_000)))) == nil)
        #expect(try f.percentage() == MicroPercent(percent: 15))
        #expect(try f.refusal(f.request(.kill)) == nil)
        let plan = try #require(try RolloutPlan.locate(in: f.config.current().template))
        #expect(plan.state == .killed)

        f.clock.advance(by: .minutes(15))
        // Resuming goes from 0% to 15%: more than 10 points, so it needs a code like any such increase.
        #expect(try f.refusal(f.request(.resume)) != nil)
        #expect(try f.refusal(f.request(.resume, code: f.code(ana))) == nil)
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 40)), code: f.code(ana, step: 1))) == nil)
        #expect(try f.percentage() == MicroPercent(percent: 40))
    }

    @Test func anAcceptedCodeIsNotAskedForAgainWithinOneRequest() throws {
        let f = try Fixture()
        let ana = try f.enrol("ana@laptop")
        let preview = try f.path.preview(f.request(.set(MicroPercent(percent: 30)), code: f.code(ana)))
        let context = PolicyContext(audit: { _ in })
        #expect(try f.policy.review(preview.proposal, context: context) == .allow)
        #expect(context.stepUpVerified)
        // A retry after a conflict reviews again: the used code is not checked a second time.
        #expect(try f.policy.review(preview.proposal, context: context) == .allow)
        #expect(try f.policy.review(preview.proposal, context: PolicyContext(audit: { _ in })) != .allow)
    }

    @Test func anActorThatCannotBeEnrolledIsRefusedOnlyWhereACodeIsNeeded() throws {
        let f = try Fixture()
        _ = try f.enrol("ana@laptop")
        #expect(try f.refusal(f.request(.set(MicroPercent(percent: 5)), actor: "ops:oncall")) == nil)
        let refusal = try #require(
            try f.refusal(f.request(.set(MicroPercent(percent: 50)), code: "123456", actor: "ops:oncall")))
        #expect(refusal.reason.contains("cannot be enrolled"))
    }
}
