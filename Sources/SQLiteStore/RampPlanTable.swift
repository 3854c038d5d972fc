import RampPlans
import Rollout
import StepUp
import Timekeeping

/// The store's ramp plan (`ramp_plan`: at most one row): the plan file as started, who started it, and the
/// plan's state, changed only by compare-and-swap on `revision`.
///
/// Persistence only: the application layer reads the plan and its state into `RampPlans` types, decides, and
/// writes the new state back with the revision it read, in the transaction of the state change's audit record.
public enum RampPlanTable {
    public static func createSchema(in db: SQLiteDatabase) throws {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS ramp_plan (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                name TEXT NOT NULL,
                source TEXT NOT NULL,
                started_by TEXT NOT NULL,
                started_at INTEGER NOT NULL,
                phase TEXT NOT NULL,
                reached INTEGER NOT NULL,
                reached_at INTEGER,
                ok_since INTEGER,
                reason TEXT NOT NULL,
                revision INTEGER NOT NULL
            )
            """)
    }

    /// The pre-approval of the plan's protected steps (`ramp_plan_approval`: at most one row, sealed): schema 4.
    public static func createApprovalSchema(in db: SQLiteDatabase) throws {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS ramp_plan_approval (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                plan TEXT NOT NULL,
                plan_name TEXT NOT NULL,
                approved_by TEXT NOT NULL,
                steps TEXT NOT NULL,
                granted_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL
            )
            """)
    }

    /// One stored plan, as its columns (the port's record).
    public typealias Row = RampPlanRecord

    /// The plan's id (`RampPlanRecord.id`).
    public static func planID(_ row: Row) -> String { row.id }

    static func exists(_ db: SQLiteDatabase) throws -> Bool {
        try db.hasTable("ramp_plan")
    }

    /// The stored plan, nil when none was ever started.
    public static func load(from db: SQLiteDatabase) throws -> Row? {
        guard try exists(db) else { return nil }
        guard
            let r = try db.query(
                "SELECT name, source, started_by, started_at, phase, reached, reached_at, ok_since, reason, revision FROM ramp_plan WHERE id = 1"
            ).first
        else { return nil }
        return Row(
            name: r[0].string ?? "", source: r[1].string ?? "", startedBy: r[2].string ?? "",
            startedAt: Instant(microseconds: r[3].int ?? 0), phase: r[4].string ?? "", reached: Int(r[5].int ?? 0),
            reachedAt: r[6].int.map { Instant(microseconds: $0) }, okSince: r[7].int.map { Instant(microseconds: $0) },
            reason: r[8].string ?? "", revision: r[9].int ?? 0)
    }

    /// Replaces the stored plan with `row` (a new plan: `plan start`); its revision is the old one + 1.
    public static func replace(with row: Row, in db: SQLiteDatabase) throws {
        let revision = (try load(from: db)?.revision ?? 0) + 1
        try db.run("DELETE FROM ramp_plan")
        try revokeApproval(in: db)
        try db.run(
            """
            INSERT INTO ramp_plan (id, name, source, started_by, started_at, phase, reached, reached_at, ok_since, reason, revision)
            VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(row.name), .text(row.source), .text(row.startedBy), .integer(row.startedAt.microseconds),
                .text(row.phase),
                .integer(Int64(row.reached)), row.reachedAt.map { .integer($0.microseconds) } ?? .null,
                row.okSince.map { .integer($0.microseconds) } ?? .null, .text(row.reason), .integer(revision),
            ])
    }

    /// Writes the state columns of `row` if the stored revision is still `row.revision`; true when written
    /// (the revision then goes up by one), false when another writer changed the plan first.
    public static func compareAndSwapState(_ row: Row, in db: SQLiteDatabase) throws -> Bool {
        try db.run(
            """
            UPDATE ramp_plan SET phase = ?, reached = ?, reached_at = ?, ok_since = ?, reason = ?, revision = revision + 1
            WHERE id = 1 AND revision = ?
            """,
            [
                .text(row.phase), .integer(Int64(row.reached)),
                row.reachedAt.map { .integer($0.microseconds) } ?? .null,
                row.okSince.map { .integer($0.microseconds) } ?? .null, .text(row.reason), .integer(row.revision),
            ])
        return db.changes == 1
    }

    // MARK: Pre-approval

    static func approvalExists(_ db: SQLiteDatabase) throws -> Bool {
        try db.hasTable("ramp_plan_approval")
    }

    /// The stored pre-approval, whichever plan it names; nil when there is none.
    public static func approval(in db: SQLiteDatabase) throws -> StepUpPreApproval? {
        guard try approvalExists(db) else { return nil }
        guard
            let r = try db.query(
                "SELECT plan, plan_name, approved_by, steps, granted_at, expires_at FROM ramp_plan_approval WHERE id = 1"
            ).first
        else { return nil }
        var steps: [StepUpPreApproval.Step] = []
        for item in (r[3].string ?? "").split(separator: " ") {
            let parts = item.split(separator: ":").compactMap { Int64($0) }
            guard parts.count == 3 else {
                throw StoreError.corrupt("the plan's pre-approval has an unreadable step '\(item)'")
            }
            steps.append(StepUpPreApproval.Step(step: Int(parts[0]), from: parts[1], to: parts[2]))
        }
        return StepUpPreApproval(
            plan: r[0].string ?? "", planName: r[1].string ?? "", approvedBy: r[2].string ?? "", steps: steps,
            grantedAt: Instant(microseconds: r[4].int ?? 0), expiresAt: Instant(microseconds: r[5].int ?? 0))
    }

    /// Stores `approval` as the plan's pre-approval (replacing any).
    public static func saveApproval(_ approval: StepUpPreApproval, in db: SQLiteDatabase) throws {
        guard try approvalExists(db) else {
            throw StoreError.unavailable(
                "the store has no pre-approval table yet (an older schema: open it read-write once)")
        }
        try db.run("DELETE FROM ramp_plan_approval")
        try db.run(
            """
            INSERT INTO ramp_plan_approval (id, plan, plan_name, approved_by, steps, granted_at, expires_at)
            VALUES (1, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(approval.plan), .text(approval.planName), .text(approval.approvedBy),
                .text(approval.steps.map { "\($0.step):\($0.from):\($0.to)" }.joined(separator: " ")),
                .integer(approval.grantedAt.microseconds), .integer(approval.expiresAt.microseconds),
            ])
    }

    /// Removes the pre-approval (a new plan, an abort, the plan's end); true when there was one.
    @discardableResult
    public static func revokeApproval(in db: SQLiteDatabase) throws -> Bool {
        guard try approvalExists(db) else { return false }
        try db.run("DELETE FROM ramp_plan_approval")
        return db.changes > 0
    }

    /// The pre-approval when it belongs to the stored plan as it is now (same id) and that plan is running.
    public static func activeApproval(in db: SQLiteDatabase) throws -> StepUpPreApproval? {
        RampPlanRecord.activeApproval(try approval(in: db), of: try load(from: db))
    }

}

/// The ramp plan port (`RampPlanStore`, and so the pre-approval port `StepUpPreApprovalStore`) on a store's
/// SQLite file, on its connection under its lock: inside the write path's transaction when called there.
public final class SQLiteRampPlans: RampPlanStore, @unchecked Sendable {
    private let store: RolloutStore

    public init(store: RolloutStore) { self.store = store }

    public var isReadOnly: Bool { store.isReadOnly }

    /// `BEGIN IMMEDIATE` on the store's connection; the config store's publishes and appends nest as savepoints.
    public func atomically<T>(_ body: () throws -> T) throws -> T {
        try store.withDatabase { db in try db.transaction(body) }
    }

    public func loadPlan() throws -> RampPlanRecord? { try store.withDatabase { try RampPlanTable.load(from: $0) } }

    public func replacePlan(with row: RampPlanRecord) throws {
        try store.withDatabase { db in try db.transaction { try RampPlanTable.replace(with: row, in: db) } }
    }

    public func compareAndSwapPlanState(_ row: RampPlanRecord) throws -> Bool {
        try store.withDatabase { db in try db.transaction { try RampPlanTable.compareAndSwapState(row, in: db) } }
    }

    public func planApproval() throws -> StepUpPreApproval? {
        try store.withDatabase { try RampPlanTable.approval(in: $0) }
    }

    public func savePlanApproval(_ approval: StepUpPreApproval) throws {
        try store.withDatabase { db in try db.transaction { try RampPlanTable.saveApproval(approval, in: db) } }
    }

    @discardableResult
    public func revokePlanApproval() throws -> Bool {
        try store.withDatabase { db in try db.transaction { try RampPlanTable.revokeApproval(in: db) } }
    }

    public func activePreApproval() throws -> StepUpPreApproval? {
        try store.withDatabase { try RampPlanTable.activeApproval(in: $0) }
    }
}

/// The pre-approval port's SQLite adapter (the ramp plan port serves it).
public typealias SQLiteRampPreApprovals = SQLiteRampPlans
