import Crypto
import StepUp
import Timekeeping

/// One stored ramp plan: the plan file as started, who started it, and the plan's state, changed only by
/// compare-and-swap on `revision`. What every store's `RampPlanStore` keeps (SQLite's `ramp_plan` row,
/// PostgreSQL's); the application layer decodes it into a `RampPlan` and its state.
public struct RampPlanRecord: Hashable, Sendable {
    public var name: String
    public var source: String
    public var startedBy: String
    public var startedAt: Instant
    public var phase: String
    public var reached: Int
    public var reachedAt: Instant?
    public var okSince: Instant?
    public var reason: String
    public var revision: Int64

    public init(
        name: String, source: String, startedBy: String, startedAt: Instant, phase: String, reached: Int,
        reachedAt: Instant?, okSince: Instant?, reason: String, revision: Int64
    ) {
        self.name = name
        self.source = source
        self.startedBy = startedBy
        self.startedAt = startedAt
        self.phase = phase
        self.reached = reached
        self.reachedAt = reachedAt
        self.okSince = okSince
        self.reason = reason
        self.revision = revision
    }

    /// The plan's id: a digest of its file, its start and who started it, so that another plan (or the same
    /// file started again) has another id.
    public var id: String {
        SHA256.hex(Array("ramp plan v1\n\(startedBy)\n\(startedAt.microseconds)\n\(source)".utf8))
    }

    /// `approval` when it is in force for the stored plan `plan`: the same plan (id) and running. The one rule of
    /// every store's `activePreApproval`.
    public static func activeApproval(_ approval: StepUpPreApproval?, of plan: RampPlanRecord?) -> StepUpPreApproval? {
        guard let approval, let plan, plan.phase == "running", plan.id == approval.plan else { return nil }
        return approval
    }
}

/// Port: where a store keeps its ramp plan (`RampPlanRecord`: the plan file, who started it, its state) and
/// the pre-approval of its protected steps. One plan per store.
///
/// Every method joins the transaction of `atomically` when called inside it; `atomically` is the store's write
/// transaction, the same one the config store's publishes and audit appends and the step-up port's `authorize`
/// join, so a plan's change of state, the publish it makes and their audit records commit together or not at all.
/// The state changes only by compare-and-swap on `revision`. A read-only store refuses every write.
public protocol RampPlanStore: StepUpPreApprovalStore {
    /// The store refuses writes (`--read-only`, or a read-only connection).
    var isReadOnly: Bool { get }
    /// One write transaction of the store (nested calls join the outer one).
    func atomically<T>(_ body: () throws -> T) throws -> T
    /// The stored plan, nil when none was ever started.
    func loadPlan() throws -> RampPlanRecord?
    /// Replaces the stored plan with `row` (`plan start`), revision the old one + 1; revokes any pre-approval.
    func replacePlan(with row: RampPlanRecord) throws
    /// Writes the state columns of `row` if the stored revision is still `row.revision` (true; the revision
    /// then goes up by one); false when another writer changed the plan first.
    func compareAndSwapPlanState(_ row: RampPlanRecord) throws -> Bool
    /// The stored pre-approval, whichever plan it names.
    func planApproval() throws -> StepUpPreApproval?
    /// Stores `approval` as the plan's pre-approval (replacing any).
    func savePlanApproval(_ approval: StepUpPreApproval) throws
    /// Removes the pre-approval; true when there was one.
    @discardableResult
    func revokePlanApproval() throws -> Bool
}

extension RampPlanStore {
    /// The pre-approval in force (`RampPlanRecord.activeApproval`), read in the caller's transaction.
    public func activePreApproval() throws -> StepUpPreApproval? {
        RampPlanRecord.activeApproval(try planApproval(), of: try loadPlan())
    }
}
