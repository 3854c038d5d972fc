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
    }

    public enum Outcome: Sendable, Equatable {
        case changed(from: String, to: String)
        /// Already so; nothing written.
        case unchanged(String)
        /// A pending (unconfirmed) enrolment was removed.
        case removedPending
    }

    /// Why nothing was changed.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// A key or value that does not exist (a usage error).
        case invalid(String)
        case notFound(String)
        /// Refused by step-up; `needsCode` when a (fresh) code would be accepted.
        case refused(String, needsCode: Bool)

        public var description: String {
            switch self {
            case .invalid(let m), .notFound(let m): m
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
                case .removeOperator(let target):
                    guard try OperatorTables.record(target, in: db) != nil else {
                        guard try OperatorTables.pendingEnrolment(target, in: db) != nil else {
                            return .failure(.notFound("\(target) is not enrolled ('rollout operator list' shows who is)"))
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
                        return .failure(.refused("\(actor) cannot be enrolled, so it cannot pass step-up", needsCode: false))
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
}
