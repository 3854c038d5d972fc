import Timekeeping

/// The step-up check of the single write path: decides whether a change may go ahead, checks the code when one
/// is needed, and says what to store and what to audit.
///
/// Pure: the store reads the inputs and writes the outputs (`OperatorTables.authorize` does both in one
/// immediate transaction). The write path calls it after validation and before the diff and the publish:
///
/// 1. `requirement(for:enforced:)` tells the confirm dialog whether to ask for a code and why.
/// 2. `authorize(...)` returns a `StepUpDecision`: store `record` (when non-nil) and append `event` (when
///    non-nil) whatever the verdict, because refused attempts must count and be audited; then publish only
///    if `isAllowed`, else throw `refusal` (exit 4) and leave the template untouched.
public struct StepUpGate: Sendable {
    public var policy: StepUpPolicy
    public var totp: TOTP

    public init(policy: StepUpPolicy, totp: TOTP = .standard) {
        self.policy = policy
        self.totp = totp
    }

    /// Why `change` needs a code; empty when it needs none or step-up is not enforced (no operator enrolled).
    public func requirement(for change: StepUpChange, enforced: Bool) -> [StepUpReason] {
        enforced ? requiresStepUp(change, policy: policy) : []
    }

    /// Decides `change` by `actor`, who typed `code` (nil when none was given).
    ///
    /// - Parameters:
    ///   - record: the actor's enrolment, nil when the actor is not enrolled.
    ///   - enforced: whether any operator is enrolled (step-up is on).
    ///   - now: the injected clock's reading.
    public func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, record: OperatorRecord?, enforced: Bool,
        at now: Instant
    ) -> StepUpDecision {
        let reasons = requirement(for: change, enforced: enforced)
        guard !reasons.isEmpty else {
            return StepUpDecision(
                verdict: .notRequired, reasons: [], outcome: nil, record: nil, event: nil,
                lockoutAttempts: policy.lockoutAttempts)
        }
        let outcome: CodeOutcome
        var updated: OperatorRecord?
        if let record {
            let checked = CodeVerifier(policy: policy, totp: totp).verify(code, record: record, at: now)
            outcome = checked.outcome
            updated = checked.record == record ? nil : checked.record
        } else {
            outcome = .notEnrolled
        }
        let state = updated ?? record
        let event = StepUpAuditEvent(
            operatorID: actor, at: now, action: change.summary, kind: change.kind, reasons: reasons.map(\.code),
            outcome: outcome, failedAttempts: state?.failedAttempts ?? 0, lockedUntil: state?.lockedUntil)
        return StepUpDecision(
            verdict: outcome.isAccepted ? .accepted : .refused, reasons: reasons, outcome: outcome, record: updated,
            event: event, lockoutAttempts: policy.lockoutAttempts)
    }
}

/// The gate's answer for one change.
public struct StepUpDecision: Sendable, Equatable {
    public enum Verdict: String, Sendable {
        /// No code was needed (no rule applies, or step-up is not enforced).
        case notRequired = "not-required"
        /// A code was needed and accepted.
        case accepted
        /// A code was needed and the attempt failed: do not publish.
        case refused
    }

    public var verdict: Verdict
    /// Why a code was needed; empty for `notRequired`.
    public var reasons: [StepUpReason]
    /// What became of the code; nil for `notRequired`.
    public var outcome: CodeOutcome?
    /// The actor's record to store, whatever the verdict; nil when it did not change.
    public var record: OperatorRecord?
    /// The audit event to append, whatever the verdict; nil for `notRequired` (no attempt was made).
    public var event: StepUpAuditEvent?
    /// The policy's allowance of wrong codes, to tell the operator how many are left.
    public var lockoutAttempts: Int

    public var isAllowed: Bool { verdict != .refused }

    /// The error to end the command with when refused (exit 4 in the CLI); nil otherwise.
    public var refusal: StepUpRefusal? {
        guard verdict == .refused, let outcome, let event else { return nil }
        return StepUpRefusal(
            outcome: outcome, event: event, reasons: reasons,
            attemptsLeft: event.lockedUntil == nil ? max(0, lockoutAttempts - event.failedAttempts) : 0)
    }
}

/// A refused step-up, with a message that says what to do next.
///
/// The message names the operator, the change and the reasons, never the code or the secret.
public struct StepUpRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var outcome: CodeOutcome
    public var event: StepUpAuditEvent
    public var reasons: [StepUpReason]
    /// Wrong codes the operator may still type before the lockout.
    public var attemptsLeft: Int

    public var description: String {
        let who = event.operatorID.rawValue
        let why = "\(event.action) needs a fresh code (\(reasons.map(\.description).joined(separator: "; ")))"
        let left =
            event.lockedUntil.map {
                "; locked out until \($0.iso8601) after \(event.failedAttempts) wrong codes (kill and decreases still work)"
            } ?? " (\(attemptsLeft) attempt\(attemptsLeft == 1 ? "" : "s") left before a lockout)"
        switch outcome {
        case .missing: return "\(why): enter the current code of \(who)'s authenticator"
        case .malformed: return "\(why): a code is the 6 digits the authenticator of \(who) shows"
        case .wrong: return "wrong code for \(who)\(left): \(why)"
        case .expired(let offset):
            return "expired code for \(who): it was valid \(-offset * 30) s ago; check the clock of the authenticator's device\(left)"
        case .replayed(let next): return "code already used by \(who): wait for the next code (from \(next.iso8601))"
        case .lockedOut(let until):
            return
                "\(who) is locked out of step-up until \(until.iso8601) after too many wrong codes (kill and decreases still work)"
        case .notEnrolled:
            return
                "\(why), but \(who) is not enrolled: enrol with 'rollout operator enroll' or act as an enrolled operator"
        case .accepted: return "\(why): accepted"
        }
    }
}

/// One step-up attempt as the audit log records it: who, when, what, why, and what became of the code.
///
/// Carries no code and no secret. `fields` gives the values in a fixed order for the audit log's own encoding;
/// the JSON spelling is `{"operator", "at", "action", "kind", "reasons", "result", "step"?, "stepOffset"?,
/// "failedAttempts", "lockedUntil"?}` with instants in ISO 8601.
public struct StepUpAuditEvent: Sendable, Equatable {
    public var operatorID: OperatorID
    public var at: Instant
    /// `StepUpChange.summary` of the change the code was for.
    public var action: String
    public var kind: StepUpChange.Kind
    /// `StepUpReason.code` of each reason.
    public var reasons: [String]
    public var outcome: CodeOutcome
    /// The operator's consecutive wrong codes after this attempt.
    public var failedAttempts: Int
    /// Set when the operator is locked out after this attempt.
    public var lockedUntil: Instant?

    public init(
        operatorID: OperatorID, at: Instant, action: String, kind: StepUpChange.Kind, reasons: [String],
        outcome: CodeOutcome, failedAttempts: Int, lockedUntil: Instant?
    ) {
        self.operatorID = operatorID
        self.at = at
        self.action = action
        self.kind = kind
        self.reasons = reasons
        self.outcome = outcome
        self.failedAttempts = failedAttempts
        self.lockedUntil = lockedUntil
    }

    /// `accepted`, `wrong`, `replayed`, ... (`CodeOutcome.result`).
    public var result: String { outcome.result }

    /// The event as ordered key/value pairs of JSON-ready scalars (String, Int64, [String]).
    public var fields: [(key: String, value: AuditValue)] {
        var f: [(String, AuditValue)] = [
            ("operator", .text(operatorID.rawValue)), ("at", .text(at.iso8601)), ("action", .text(action)),
            ("kind", .text(kind.rawValue)), ("reasons", .list(reasons)), ("result", .text(result)),
        ]
        switch outcome {
        case .accepted(let step): f.append(("step", .integer(step)))
        case .expired(let offset): f.append(("stepOffset", .integer(offset)))
        default: break
        }
        f.append(("failedAttempts", .integer(Int64(failedAttempts))))
        if let lockedUntil { f.append(("lockedUntil", .text(lockedUntil.iso8601))) }
        return f
    }

    /// A scalar or list in an audit event.
    public enum AuditValue: Sendable, Equatable {
        case text(String)
        case integer(Int64)
        case list([String])
    }
}
