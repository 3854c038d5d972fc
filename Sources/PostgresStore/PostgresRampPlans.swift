import Glibc
import RampPlans
import Rollout
import StepUp
import Timekeeping

/// The ramp plan port (`RampPlanStore`, and so the pre-approval port of step-up) on a PostgreSQL team store:
/// `ramp_plan` and `ramp_plan_approval` (schema 4), at most one row each, the SQLite store's columns.
///
/// Every write runs in the config store's transaction (`PostgresConfigStore.atomically`: READ COMMITTED under the
/// chain-head row lock), so it joins the transaction of a publish, a step-up attempt and their audit records when
/// called inside one, and two writers on any number of machines queue on the head row. The state's
/// compare-and-swap is one statement besides (`UPDATE … WHERE revision = $n RETURNING`), so it holds even without
/// the lock. A read-only store (`--read-only`, or the viewer role) writes nothing: its transactions are READ ONLY
/// and the server refuses. No seal as on SQLite: the database roles guard the rows (docs/POSTGRES.md).
public final class PostgresRampPlans: RampPlanStore, @unchecked Sendable {
    private let store: PostgresConfigStore

    public init(store: PostgresConfigStore) { self.store = store }

    private var c: PGConnection { store.connection }

    public var isReadOnly: Bool { store.isReadOnly }

    public func atomically<T>(_ body: () throws -> T) throws -> T { try store.atomically(body) }

    public func loadPlan() throws -> RampPlanRecord? { try store.reading { try Self.plan(c) } }

    public func replacePlan(with row: RampPlanRecord) throws {
        try writing {
            let revision = (try Self.plan(c)?.revision ?? 0) + 1
            try c.query("DELETE FROM ramp_plan")
            try c.query("DELETE FROM ramp_plan_approval")
            try Self.insert(row, revision: revision, c)
        }
    }

    public func compareAndSwapPlanState(_ row: RampPlanRecord) throws -> Bool {
        try writing {
            try !c.query(
                """
                UPDATE ramp_plan SET phase = $1, reached = $2, reached_at = $3, ok_since = $4, reason = $5, revision = revision + 1
                WHERE id = 1 AND revision = $6 RETURNING revision
                """,
                [
                    row.phase, String(row.reached), row.reachedAt.map { String($0.microseconds) },
                    row.okSince.map { String($0.microseconds) }, row.reason, String(row.revision),
                ]
            ).isEmpty
        }
    }

    public func planApproval() throws -> StepUpPreApproval? { try store.reading { try Self.approval(c) } }

    public func savePlanApproval(_ approval: StepUpPreApproval) throws {
        try writing {
            try c.query("DELETE FROM ramp_plan_approval")
            try Self.insert(approval, c)
        }
    }

    @discardableResult
    public func revokePlanApproval() throws -> Bool {
        try writing { try !c.query("DELETE FROM ramp_plan_approval RETURNING id").isEmpty }
    }

    /// The plan and its approval on one snapshot (the caller's transaction, or a read-only one of its own).
    public func activePreApproval() throws -> StepUpPreApproval? {
        try store.consistentRead { RampPlanRecord.activeApproval(try Self.approval(c), of: try Self.plan(c)) }
    }

    private func writing<T>(_ body: () throws -> T) throws -> T {
        if store.isReadOnly { throw PostgresStoreError.readOnly("a ramp plan change on a read-only store") }
        return try store.atomically(body)
    }

    // MARK: Rows (this adapter and `store copy`)

    static func plan(_ c: PGConnection) throws -> RampPlanRecord? {
        guard
            let r = try c.query(
                "SELECT name, source, started_by, started_at, phase, reached, reached_at, ok_since, reason, revision FROM ramp_plan WHERE id = 1"
            ).first
        else { return nil }
        func instant(_ s: String?) throws -> Instant? {
            guard let s else { return nil }
            guard let v = Int64(s) else {
                throw PostgresStoredDataError("the ramp plan row has an unreadable time '\(s)'")
            }
            return Instant(microseconds: v)
        }
        guard let startedAt = try instant(r[3]), let reached = r[5].flatMap({ Int($0) }),
            let revision = r[9].flatMap({ Int64($0) })
        else { throw PostgresStoredDataError("the ramp plan row is unreadable") }
        return RampPlanRecord(
            name: r[0] ?? "", source: r[1] ?? "", startedBy: r[2] ?? "", startedAt: startedAt, phase: r[4] ?? "",
            reached: reached,
            reachedAt: try instant(r[6]), okSince: try instant(r[7]), reason: r[8] ?? "", revision: revision)
    }

    package static func insert(_ row: RampPlanRecord, revision: Int64, _ c: PGConnection) throws {
        try c.query(
            """
            INSERT INTO ramp_plan (id, name, source, started_by, started_at, phase, reached, reached_at, ok_since, reason, revision)
            VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
            """,
            [
                row.name, row.source, row.startedBy, String(row.startedAt.microseconds), row.phase, String(row.reached),
                row.reachedAt.map { String($0.microseconds) }, row.okSince.map { String($0.microseconds) }, row.reason,
                String(revision),
            ])
    }

    static func approval(_ c: PGConnection) throws -> StepUpPreApproval? {
        guard
            let r = try c.query(
                "SELECT plan, plan_name, approved_by, steps, granted_at, expires_at FROM ramp_plan_approval WHERE id = 1"
            ).first
        else { return nil }
        var steps: [StepUpPreApproval.Step] = []
        for item in (r[3] ?? "").split(separator: " ") {
            let parts = item.split(separator: ":").compactMap { Int64($0) }
            guard parts.count == 3 else {
                throw PostgresStoredDataError("the plan's pre-approval has an unreadable step '\(item)'")
            }
            steps.append(StepUpPreApproval.Step(step: Int(parts[0]), from: parts[1], to: parts[2]))
        }
        guard let granted = r[4].flatMap({ Int64($0) }), let expires = r[5].flatMap({ Int64($0) }) else {
            throw PostgresStoredDataError("the plan's pre-approval has unreadable times")
        }
        return StepUpPreApproval(
            plan: r[0] ?? "", planName: r[1] ?? "", approvedBy: r[2] ?? "", steps: steps,
            grantedAt: Instant(microseconds: granted), expiresAt: Instant(microseconds: expires))
    }

    package static func insert(_ approval: StepUpPreApproval, _ c: PGConnection) throws {
        try c.query(
            """
            INSERT INTO ramp_plan_approval (id, plan, plan_name, approved_by, steps, granted_at, expires_at)
            VALUES (1, $1, $2, $3, $4, $5, $6)
            """,
            [
                approval.plan, approval.planName, approval.approvedBy,
                approval.steps.map { "\($0.step):\($0.from):\($0.to)" }.joined(separator: " "),
                String(approval.grantedAt.microseconds), String(approval.expiresAt.microseconds),
            ])
    }
}
