import Rollout
import StepUp
import Store
import Telemetry
import Timekeeping

/// The write path of the settings that decide later writes: the step-up policy, the guardrail settings and the
/// removal of an operator.
///
/// Like `WritePath` for templates, each intent is validated, judged by the step-up policy in force (the same
/// `requiresStepUp` rules, the same replay-safe `OperatorTables.authorize`), applied and audited in one write
/// transaction of the store; the store's seal is renewed in that same transaction. A step-up attempt is recorded
/// (and counts towards the lockout) even when it refuses, and then nothing else is changed. The executable only
/// parses arguments and prints the outcome.
public struct SettingsWritePath {
    public let session: StoreSession

    public init(session: StoreSession) { self.session = session }

    /// What an operator asks for.
    public enum Intent: Sendable, Equatable {
        /// A step-up policy key (`increase-over`, ...) or a guardrail setting (`guardrails.*`, `budget.*`,
        /// `telemetry.*`), as `rollout policy show` lists them.
        case setting(key: String, value: String)
        /// Remove an enrolled operator (always needs the acting operator's code) or a pending enrolment.
        case removeOperator(OperatorID)
        /// Start the enrolment of `id` with a fresh secret; while step-up is on, an enrolled `approver` vouches
        /// for it with their code (the intent's `code`).
        case startEnrolment(OperatorID, approver: OperatorID?)
        /// Confirm the pending enrolment of `id` with a code of its new authenticator (the intent's `code`).
        case confirmEnrolment(OperatorID)
    }

    public enum Outcome: Sendable, Equatable {
        case changed(from: String, to: String)
        /// Already so; nothing written.
        case unchanged(String)
        /// A pending (unconfirmed) enrolment was removed.
        case removedPending
        /// The enrolment is pending: show its secret (this once) and confirm it with a code.
        case enrolmentStarted(PendingEnrolment)
        case enrolled(approvedBy: OperatorID?)
        /// The code did not confirm the enrolment; it stays pending with `next` (its attempts counted).
        case confirmationRefused(next: PendingEnrolment, outcome: CodeOutcome)
    }

    /// Why nothing was changed.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// A key or value that does not exist (a usage error).
        case invalid(String)
        /// Not possible in the store's state (nobody to remove, already enrolled, no pending enrolment).
        case unavailable(String)
        /// Refused by step-up; `needsCode` when a (fresh) code would be accepted.
        case refused(String, needsCode: Bool)

        public var description: String {
            switch self {
            case .invalid(let m), .unavailable(let m): m
            case .refused(let m, _): "refused: \(m)"
            }
        }
    }

    /// Validates, judges, applies and audits `intent` by `actor` (with step-up `code`), in one transaction.
    public func execute(_ intent: Intent, actor: String, code: String?) throws -> Outcome {
        if session.store.isReadOnly { throw WritePath.Failure.readOnly }
        let store = session.store
        let config = session.config
        let clock = session.clock
        let result: Result<Outcome, Failure> = try store.withDatabase { db in
            try db.transaction {
                let policy = try OperatorTables.policy(in: db)
                let change: StepUpChange
                let apply: () throws -> Outcome
                switch intent {
                case .setting(let key, let value):
                    let before: String
                    let after: String
                    let save: () throws -> Void
                    if GuardrailSettings.keys.contains(key) {
                        let current = try GuardrailSettingsTable.load(from: db)
                        var updated = current
                        do { try updated.set(key, value) } catch { return .failure(.invalid("\(error)")) }
                        before = current.settings.first { $0.key == key }!.value
                        after = updated.settings.first { $0.key == key }!.value
                        if updated == current { return .success(.unchanged(after)) }
                        save = { try GuardrailSettingsTable.save(key, after, in: db) }
                    } else {
                        let updated: StepUpPolicy
                        do { updated = try policy.setting(key, value) } catch { return .failure(.invalid("\(error)")) }
                        before = policy.settings.first { $0.key == key }!.value
                        after = updated.settings.first { $0.key == key }!.value
                        if updated == policy { return .success(.unchanged(after)) }
                        save = { try OperatorTables.savePolicy(updated, in: db) }
                    }
                    change = StepUpChange(.policyChange, detail: "\(key) \(after)")
                    apply = {
                        try save()
                        try config.appendAudit(
                            AuditEntry(
                                time: clock.now(), actor: actor, action: "policy set \(key)", from: before, to: after,
                                result: .recorded))
                        return .changed(from: before, to: after)
                    }
                case .startEnrolment(let id, let approver):
                    return try startEnrolment(id, approver: approver, code: code, policy: policy, in: db)
                case .confirmEnrolment(let id):
                    return try confirmEnrolment(id, code: code, in: db)
                case .removeOperator(let target):
                    guard try OperatorTables.record(target, in: db) != nil else {
                        guard try OperatorTables.pendingEnrolment(target, in: db) != nil else {
                            return .failure(
                                .unavailable("\(target) is not enrolled ('rollout operator list' shows who is)"))
                        }
                        try OperatorTables.removePending(target, in: db)
                        try config.appendAudit(
                            AuditEntry(
                                time: clock.now(), actor: actor, action: "operator remove",
                                from: "\(target) (pending enrolment)", result: .recorded))
                        return .success(.removedPending)
                    }
                    change = StepUpChange(.operatorRemove, detail: target.rawValue)
                    apply = {
                        try OperatorTables.remove(target, in: db)
                        try config.appendAudit(
                            AuditEntry(
                                time: clock.now(), actor: actor, action: "operator remove", from: target.rawValue,
                                result: .recorded))
                        return .changed(from: target.rawValue, to: "")
                    }
                }
                if try OperatorTables.isEnforced(in: db), !requiresStepUp(change, policy: policy).isEmpty {
                    guard let acting = try? OperatorID(actor) else {
                        return .failure(
                            .refused("\(actor) cannot be enrolled, so it cannot pass step-up", needsCode: false))
                    }
                    // The attempt and its audit record are written in this transaction whatever the verdict.
                    let decision = try OperatorTables.authorize(change, by: acting, code: code, in: db, clock: clock) {
                        try config.appendAudit($0.auditEntry)
                    }
                    if let refusal = decision.refusal {
                        return .failure(.refused("\(refusal)", needsCode: refusal.outcome == .missing))
                    }
                }
                return .success(try apply())
            }
        }
        return try result.get()
    }

    // MARK: Enrolment

    private func startEnrolment(
        _ id: OperatorID, approver: OperatorID?, code: String?, policy: StepUpPolicy, in db: SQLiteDatabase
    ) throws -> Result<Outcome, Failure> {
        if try OperatorTables.record(id, in: db) != nil {
            return .failure(
                .unavailable(
                    "\(id) is already enrolled; to replace the authenticator, remove the enrolment first "
                        + "('rollout operator remove \(id) --code CODE')"))
        }
        // Approval: while step-up is enforced, an enrolled operator vouches for the newcomer.
        let change = StepUpChange(.operatorEnroll, detail: id.rawValue)
        var approvedBy: OperatorID?
        if try OperatorTables.isEnforced(in: db), !requiresStepUp(change, policy: policy).isEmpty {
            guard let approver else {
                return .failure(
                    .refused(
                        "step-up is on: enrolling \(id) needs an enrolled operator's approval "
                            + "(--approver ID --approver-code CODE); 'rollout operator list' shows who is enrolled",
                        needsCode: false))
            }
            let decision = try OperatorTables.authorize(change, by: approver, code: code, in: db, clock: session.clock)
            {
                try session.config.appendAudit($0.auditEntry)
            }
            if let refusal = decision.refusal {
                return .failure(.refused("\(refusal)", needsCode: refusal.outcome == .missing))
            }
            approvedBy = approver
        }
        let pending = Enrolment.start(id, approvedBy: approvedBy, at: session.clock.now())
        try OperatorTables.savePending(pending, in: db)
        return .success(.enrolmentStarted(pending))
    }

    private func confirmEnrolment(_ id: OperatorID, code: String?, in db: SQLiteDatabase) throws -> Result<
        Outcome, Failure
    > {
        guard let pending = try OperatorTables.pendingEnrolment(id, in: db) else {
            return .failure(
                .unavailable("\(id) has no pending enrolment: run 'rollout operator enroll --operator \(id)' first"))
        }
        let now = session.clock.now()
        func attempt(_ outcome: CodeOutcome, failed: Int) throws {
            let event = StepUpAuditEvent(
                operatorID: pending.id, at: now, action: "confirm a new authenticator", kind: .operatorEnroll,
                reasons: [], outcome: outcome, failedAttempts: failed, lockedUntil: nil)
            try session.config.appendAudit(event.auditEntry)
        }
        switch Enrolment.confirm(pending, code: code, at: now) {
        case .enrolled(let record):
            try OperatorTables.save(record, in: db)
            try OperatorTables.removePending(pending.id, in: db)
            try attempt(.accepted(step: record.lastAcceptedStep ?? 0), failed: 0)
            try session.config.appendAudit(
                AuditEntry(
                    time: now, actor: pending.id.rawValue, action: "operator enroll", to: pending.id.rawValue,
                    result: .recorded,
                    detail: pending.approvedBy.map { "approved by \($0)" } ?? "first operator: step-up verification on")
            )
            return .success(.enrolled(approvedBy: pending.approvedBy))
        case .retry(let next, let outcome):
            try OperatorTables.savePending(next, in: db)
            try attempt(outcome, failed: next.failedAttempts)
            return .success(.confirmationRefused(next: next, outcome: outcome))
        case .discarded(let why, let outcome):
            try OperatorTables.removePending(pending.id, in: db)
            if let outcome { try attempt(outcome, failed: pending.failedAttempts + 1) }
            return .failure(
                .refused(
                    "enrolment of \(pending.id) discarded (\(why.rawValue)): start over with 'rollout operator enroll --operator \(pending.id)'",
                    needsCode: false))
        }
    }
}
