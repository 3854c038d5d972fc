import Foundation
import RampPlans
import Rollout
import StepUp
import Timekeeping

/// Conformance checks of the ramp plan port (`RampPlanStore`): the plan row, its compare-and-swap, the
/// pre-approval and when it is in force, the store's transaction, and the read-only refusal. The SQLite file and
/// the PostgreSQL team store run the same checks.
public enum RampPlanStoreConformance {
    public struct Fixture {
        /// Opens another handle on the same store (another connection, as another process would have), with the
        /// config store on that handle's connection (the audit log its transaction joins).
        public var open: () throws -> (plans: any RampPlanStore, config: any ConfigStore)
        /// Opens the same store read-only.
        public var openReadOnly: () throws -> any RampPlanStore

        public init(
            open: @escaping () throws -> (plans: any RampPlanStore, config: any ConfigStore),
            openReadOnly: @escaping () throws -> any RampPlanStore
        ) {
            self.open = open
            self.openReadOnly = openReadOnly
        }
    }

    /// Makes a fresh store (version 1 written, no plan ever started).
    public typealias Factory = () throws -> Fixture

    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a new store has no plan and no pre-approval", empty),
        ("a plan round-trips and each replace raises the revision and revokes the pre-approval", replaceRoundTrip),
        ("the state's compare-and-swap writes on the revision read and refuses a stale one", compareAndSwap),
        ("of racing handles on one revision exactly one compare-and-swap wins", racingSwaps),
        ("a pre-approval is in force only for its plan, unchanged and running", approvalInForce),
        ("a plan write and its audit record land together in atomically, or neither does", atomic),
        ("a read-only store refuses every write and nothing changes", readOnlyRefuses),
    ]

    static let expect = ConfigStoreConformance.expect
    static let t0 = Instant(seconds: 1_780_000_000)

    static func row(_ name: String = "ramp", phase: String = "running", reached: Int = 0, revision: Int64 = 0)
        -> RampPlanRecord
    {
        RampPlanRecord(
            name: name, source: "plan \(name)\nstep 5% hold 1h\nstep 100% hold 0s\n", startedBy: "ana@example.com",
            startedAt: t0,
            phase: phase, reached: reached, reachedAt: reached > 0 ? t0 + .minutes(3) : nil, okSince: nil, reason: "",
            revision: revision)
    }

    static func approval(for row: RampPlanRecord) -> StepUpPreApproval {
        StepUpPreApproval(
            plan: row.id, planName: row.name, approvedBy: "ana@example.com",
            steps: [.init(step: 2, from: 5_000_000, to: 100_000_000)], grantedAt: t0, expiresAt: t0 + .hours(24))
    }

    static func empty(_ factory: Factory) throws {
        let (plans, _) = try factory().open()
        try expect(try plans.loadPlan() == nil, "a plan in a new store")
        try expect(try plans.planApproval() == nil, "a pre-approval in a new store")
        try expect(try plans.activePreApproval() == nil, "a pre-approval in force in a new store")
        try expect(!plans.isReadOnly, "a writable handle says it is read-only")
    }

    static func replaceRoundTrip(_ factory: Factory) throws {
        let f = try factory()
        let (plans, _) = try f.open()
        var first = row("first", reached: 1)
        first.okSince = t0 + .minutes(4)
        first.reason = "a reason with 'quotes' and ünïcode"
        try plans.replacePlan(with: first)
        let read = try f.open().plans.loadPlan()
        var expected = first
        expected.revision = 1
        try expect(read == expected, "the plan read back is \(String(describing: read)), not \(expected)")
        try plans.savePlanApproval(approval(for: expected))
        try plans.replacePlan(with: row("second"))
        let second = try f.open().plans.loadPlan()
        try expect(
            second?.name == "second" && second?.revision == 2, "the second plan reads \(String(describing: second))")
        try expect(try plans.planApproval() == nil, "a new plan kept the old plan's pre-approval")
    }

    static func compareAndSwap(_ factory: Factory) throws {
        let f = try factory()
        let (plans, _) = try f.open()
        try plans.replacePlan(with: row())
        let stored = try plans.loadPlan()!
        var next = stored
        next.phase = "paused"
        next.reached = 2
        next.reachedAt = t0 + .minutes(9)
        next.okSince = t0 + .minutes(8)
        next.reason = "paused by ana"
        try expect(try plans.compareAndSwapPlanState(next), "the swap on the revision read was refused")
        let after = try f.open().plans.loadPlan()!
        var expected = next
        expected.revision = stored.revision + 1
        try expect(after == expected, "after the swap the plan reads \(after), not \(expected)")
        var stale = next
        stale.phase = "aborted"
        try expect(!(try plans.compareAndSwapPlanState(stale)), "a swap on a stale revision was written")
        try expect(try f.open().plans.loadPlan()! == expected, "a refused swap changed the plan")
    }

    static func racingSwaps(_ factory: Factory) throws {
        let f = try factory()
        try f.open().plans.replacePlan(with: row())
        let handles = try (0..<6).map { _ in try f.open().plans }
        let base = try handles[0].loadPlan()!
        let wins = Wins()
        DispatchQueue.concurrentPerform(iterations: handles.count) { i in
            var mine = base
            mine.reached = i + 1
            mine.reason = "runner \(i)"
            do { if try handles[i].compareAndSwapPlanState(mine) { wins.add(i) } } catch { wins.fail("\(error)") }
        }
        try expect(wins.errors.isEmpty, "a racing swap failed: \(wins.errors)")
        try expect(wins.winners.count == 1, "\(wins.winners.count) racing swaps won: \(wins.winners)")
        let after = try f.open().plans.loadPlan()!
        try expect(
            after.revision == base.revision + 1 && after.reason == "runner \(wins.winners.first ?? -1)",
            "the plan after the race reads \(after)")
    }

    static func approvalInForce(_ factory: Factory) throws {
        let f = try factory()
        let (plans, _) = try f.open()
        try plans.replacePlan(with: row())
        let stored = try plans.loadPlan()!
        let granted = approval(for: stored)
        try plans.savePlanApproval(granted)
        let other = try f.open().plans
        let readBack = try other.planApproval()
        try expect(readBack == granted, "the pre-approval read back is \(String(describing: readBack))")
        try expect(try other.activePreApproval() == granted, "the pre-approval of the running plan is not in force")
        var paused = stored
        paused.phase = "paused"
        try expect(try plans.compareAndSwapPlanState(paused), "pausing the plan was refused")
        try expect(try other.activePreApproval() == nil, "the pre-approval is in force while the plan is paused")
        try expect(try other.planApproval() == granted, "pausing removed the pre-approval")
        var resumed = try plans.loadPlan()!
        resumed.phase = "running"
        try expect(try plans.compareAndSwapPlanState(resumed), "resuming the plan was refused")
        try expect(try other.activePreApproval() == granted, "the pre-approval is not in force again after resume")
        var foreign = granted
        foreign.plan = String(repeating: "0", count: 64)
        try plans.savePlanApproval(foreign)
        try expect(try other.activePreApproval() == nil, "a pre-approval naming another plan is in force")
        try expect(try plans.revokePlanApproval(), "revoking a stored pre-approval said there was none")
        try expect(!(try plans.revokePlanApproval()), "revoking twice said there was one")
        try expect(try other.planApproval() == nil, "the revoked pre-approval still reads")
    }

    struct Rollback: Error {}

    static func atomic(_ factory: Factory) throws {
        let f = try factory()
        let (plans, config) = try f.open()
        try plans.replacePlan(with: row())
        let stored = try plans.loadPlan()!
        let auditBefore = try config.auditRecords(limit: 1000, before: nil).count
        var next = stored
        next.phase = "done"
        do {
            try plans.atomically {
                _ = try plans.compareAndSwapPlanState(next)
                try plans.savePlanApproval(approval(for: stored))
                _ = try config.appendAudit(
                    AuditEntry(time: t0, actor: "ana@example.com", action: "plan done", result: .recorded))
                throw Rollback()
            }
            throw ConformanceFailure("atomically did not rethrow")
        } catch is Rollback {}
        let reader = try f.open()
        try expect(try reader.plans.loadPlan() == stored, "a rolled-back swap was written")
        try expect(try reader.plans.planApproval() == nil, "a rolled-back pre-approval was written")
        try expect(
            try reader.config.auditRecords(limit: 1000, before: nil).count == auditBefore,
            "a rolled-back audit record was written")
        try plans.atomically {
            try expect(try plans.compareAndSwapPlanState(next), "the swap inside atomically was refused")
            _ = try config.appendAudit(
                AuditEntry(time: t0, actor: "ana@example.com", action: "plan done", result: .recorded))
        }
        try expect(try reader.plans.loadPlan()?.phase == "done", "the committed swap does not read")
        let records = try reader.config.auditRecords(limit: 1000, before: nil)
        try expect(
            records.count == auditBefore + 1 && records.first?.entry.action == "plan done",
            "the committed audit record does not read")
    }

    static func readOnlyRefuses(_ factory: Factory) throws {
        let f = try factory()
        let (plans, _) = try f.open()
        try plans.replacePlan(with: row())
        let stored = try plans.loadPlan()!
        try plans.savePlanApproval(approval(for: stored))
        let reader = try f.openReadOnly()
        try expect(reader.isReadOnly, "the read-only handle says it is writable")
        let seen = try reader.loadPlan()
        try expect(seen == stored, "the read-only handle reads \(String(describing: seen))")
        try expect(
            try reader.activePreApproval() == approval(for: stored),
            "the read-only handle sees no pre-approval in force")
        var next = stored
        next.phase = "aborted"
        let writes: [(String, () throws -> Void)] = [
            ("replace", { try reader.replacePlan(with: row("other")) }),
            ("compare-and-swap", { _ = try reader.compareAndSwapPlanState(next) }),
            ("save approval", { try reader.savePlanApproval(approval(for: next)) }),
            ("revoke approval", { _ = try reader.revokePlanApproval() }),
        ]
        for (name, write) in writes {
            var refused = false
            do { try write() } catch { refused = true }
            try expect(refused, "the read-only store accepted \(name)")
        }
        try expect(try plans.loadPlan() == stored, "the plan changed through the read-only handle")
        try expect(
            try plans.planApproval() == approval(for: stored), "the pre-approval changed through the read-only handle")
    }

    final class Wins: @unchecked Sendable {
        private let lock = NSLock()
        private(set) var winners: [Int] = []
        private(set) var errors: [String] = []
        func add(_ i: Int) { lock.withLock { winners.append(i) } }
        func fail(_ e: String) { lock.withLock { errors.append(e) } }
    }
}
