import Crypto
import Rollout
import Timekeeping

/// The policy and enforcement a store holds: whether any operator is enrolled, and the rules.
public struct StepUpEnforcement: Sendable, Equatable {
    public var policy: StepUpPolicy
    /// At least one operator is enrolled: step-up applies.
    public var enforced: Bool

    public init(policy: StepUpPolicy, enforced: Bool) {
        self.policy = policy
        self.enforced = enforced
    }
}

/// Port: where a store keeps the step-up state (enrolled operators with their secrets and lockout counters, and
/// the policy), as the write path's step-up policy needs it.
///
/// Implemented by the SQLite store (`SQLiteStepUpStore`) and by any other store (PostgreSQL, the state store
/// beside Firebase). Rules every implementation follows, checked by the conformance suite:
/// - `enforcement` reads the stored policy (defaults for keys never set) and whether any operator is enrolled.
/// - `authorize` reads the policy, the enforcement and the actor's record, asks `StepUpGate`, saves the updated
///   record and hands the event to `audit`, all in one transaction: of two processes presenting the same code,
///   exactly one is accepted, and a refused attempt still counts towards the lockout. `audit` runs inside that
///   transaction (an error from it undoes the attempt).
/// - Secrets never leave the store except inside `OperatorRecord` for `StepUpGate`, and are stored encrypted.
public protocol StepUpStore: AnyObject, Sendable {
    func enforcement() throws -> StepUpEnforcement
    /// The enrolment of `id`, nil when it has none.
    func operatorRecord(_ id: OperatorID) throws -> OperatorRecord?
    /// Decides `change` by `actor` with `code` at `clock`'s time, atomically (see the protocol's rules).
    func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, at clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision
}

/// Protected steps of a ramp plan approved ahead of time: one code, checked (and used up) when the plan was
/// started, stands for the codes of exactly these steps of exactly that plan.
///
/// A TOTP code is single-use and valid for about a minute, so a plan that reaches its protected steps hours later
/// cannot carry one. The store keeps this record in a sealed table beside the plan; starting another plan,
/// aborting it or its end revoke it.
public struct StepUpPreApproval: Sendable, Equatable {
    /// One covered change: step `step` of the plan, from `from` to `to` (exposed micro-percent, as the proposal
    /// judges it).
    public struct Step: Sendable, Hashable {
        public var step: Int
        public var from: Int64
        public var to: Int64
        public init(step: Int, from: Int64, to: Int64) {
            self.step = step
            self.from = from
            self.to = to
        }
    }

    /// The id of the plan it belongs to (`PlanStepOrigin.plan`).
    public var plan: String
    public var planName: String
    /// The operator whose code was checked.
    public var approvedBy: String
    public var steps: [Step]
    public var grantedAt: Instant
    public var expiresAt: Instant

    public init(
        plan: String, planName: String, approvedBy: String, steps: [Step], grantedAt: Instant, expiresAt: Instant
    ) {
        self.plan = plan
        self.planName = planName
        self.approvedBy = approvedBy
        self.steps = steps
        self.grantedAt = grantedAt
        self.expiresAt = expiresAt
    }

    /// The covered step `proposal` publishes, or nil: it must be the plan runner's write of one of the steps of
    /// this plan, by the operator who approved it, moving exposure exactly as approved, with no flag of its own
    /// (`--force`, a guardrail override, a rollout-protection override), before the expiry.
    ///
    /// Only the approver's own runner: a code proves that one person was at the device, so a runner started by
    /// anyone else (an operator who is not enrolled, or one who would need a code of their own) publishes a
    /// protected step only with that person's code.
    public func covering(_ proposal: Proposal, at now: Instant) -> Step? {
        guard let origin = proposal.planStep, origin.plan == plan, proposal.actor == approvedBy, now < expiresAt,
            !proposal.force,
            !proposal.overrideGuardrail, proposal.protectionOverrides.isEmpty,
            proposal.kind == .set
        else { return nil }
        return steps.first {
            $0.step == origin.step && $0.from == proposal.exposedBefore.value && $0.to == proposal.exposedAfter.value
        }
    }

    /// `3 (10% -> 25%), 5 (50% -> 100%)`.
    public var stepsText: String {
        steps.map { "\($0.step) (\(Percent.format($0.from)) -> \(Percent.format($0.to)))" }.joined(separator: ", ")
    }
}

/// Port: where a store keeps the pre-approval of its ramp plan (`StepUpPreApproval`).
///
/// `activePreApproval` returns the record only while its plan is the store's plan, unchanged (same id) and
/// running; nil otherwise. Read inside the write path's transaction.
public protocol StepUpPreApprovalStore: AnyObject, Sendable {
    func activePreApproval() throws -> StepUpPreApproval?
}

/// Step-up verification as a policy of the write path (`WritePath.policies`): the code typed for a proposal is
/// checked against the acting operator's authenticator when the policy asks for one.
///
/// The write path never consults policies for a kill or a decrease, and the step-up rules ask nothing for them
/// either. `review` checks the code through the port's `authorize` (one transaction: replay-safe across
/// processes), which records the attempt and its audit record together. An accepted code sets
/// `context.stepUpVerified`, so a retry after a conflict does not ask again. The policy knows no database: any
/// store that implements `StepUpStore` (SQLite, PostgreSQL, a state store beside Firebase) gets it.
public struct StepUpWritePolicy: WritePolicy {
    public let name = "step-up"
    private let store: any StepUpStore
    private let clock: any Clock
    private let preApprovals: (any StepUpPreApprovalStore)?
    private let securityKeys: (any SecurityKeyStore)?
    private let phones: (any PhoneStepUpStore)?
    /// The phone provider the policy checks codes with (`checkingPhoneCodes`); nil: a phone code is refused.
    private var phoneCodes: (any PhoneCodeChecker)?
    /// What change documents name as the store (`ChangeDocument.store`).
    public let storeIdentity: String

    /// A policy on the step-up state in `store`, reading time from `clock`; a plan step pre-approved in
    /// `preApprovals` passes without a code; a change approved by a security key is checked against
    /// `securityKeys` (nil: this store keeps none, and such an approval is refused) and its document must name
    /// `storeIdentity`.
    public init(
        store: any StepUpStore, clock: any Clock, preApprovals: (any StepUpPreApprovalStore)? = nil,
        securityKeys: (any SecurityKeyStore)? = nil, phones: (any PhoneStepUpStore)? = nil, storeIdentity: String = ""
    ) {
        self.phones = phones
        self.store = store
        self.clock = clock
        self.preApprovals = preApprovals
        self.securityKeys = securityKeys
        self.storeIdentity = storeIdentity
    }

    /// The security key of `actor` in this store, nil when it has none or the store keeps none.
    public func securityKey(of actor: String) throws -> SecurityKeyCredential? {
        guard let securityKeys, let id = try? OperatorID(actor) else { return nil }
        return try securityKeys.securityKey(id)
    }

    /// This policy checking phone codes with `checker` (the wiring's provider): without one, every phone code is
    /// refused.
    public func checkingPhoneCodes(with checker: any PhoneCodeChecker) -> StepUpWritePolicy {
        var copy = self
        copy.phoneCodes = checker
        return copy
    }

    /// What a phone verification is bound to: the SHA-256 of the change document of `proposal` without its nonce
    /// and expiry (store, base version and ETag, parameter, from → to, flags, reason, operator). A code sent for
    /// one change approves no other, nor the same change on another base.
    public func phoneBinding(for proposal: Proposal) -> [UInt8] {
        ChangeDocument(
            proposal, store: storeIdentity, expiresAt: Instant(seconds: 0), nonce: [UInt8](repeating: 0, count: ChangeDocument.nonceLength)
        ).clientDataHash
    }

    /// The phone enrolment of `actor` in this store, nil when it has none or the store keeps none.
    public func phoneEnrolment(of actor: String) throws -> PhoneEnrolment? {
        guard let phones, let id = try? OperatorID(actor) else { return nil }
        return try phones.phoneEnrolment(id)
    }

    /// How long a change document stays valid: 2 minutes, or 15 when the two-person rule applies (a second
    /// operator must be reached).
    public func documentLifetime(for proposal: Proposal) throws -> Instant.Duration {
        let state = try store.enforcement()
        let twoPerson =
            state.enforced && state.policy.twoPerson
            && requiresStepUp(StepUpChange(proposal), policy: state.policy).contains(.reachesFull)
        return twoPerson ? .minutes(15) : .minutes(2)
    }

    /// The change document of `proposal` a security key must approve: fresh nonce, valid for `lifetime`.
    public func changeDocument(for proposal: Proposal, lifetime: Instant.Duration = .minutes(2)) -> ChangeDocument {
        ChangeDocument(proposal, store: storeIdentity, expiresAt: clock.now() + lifetime)
    }

    /// The pre-approval covering `proposal` (a plan runner's write of a pre-approved step), with the step.
    private func preApproval(_ proposal: Proposal) throws -> (StepUpPreApproval, StepUpPreApproval.Step)? {
        guard proposal.planStep != nil, let approval = try preApprovals?.activePreApproval(),
            let step = approval.covering(proposal, at: clock.now())
        else { return nil }
        return (approval, step)
    }

    /// Whether a code is needed and why; checks nothing and writes nothing.
    public func preview(_ proposal: Proposal) throws -> PolicyReport {
        let change = StepUpChange(proposal)
        let state = try store.enforcement()
        do {
            guard state.enforced else {
                return PolicyReport(
                    policy: name, lines: ["step-up verification is off (no operator enrolled)"], decision: .allow)
            }
            let reasons = requiresStepUp(change, policy: state.policy)
            guard !reasons.isEmpty else {
                return PolicyReport(policy: name, lines: ["no code needed"], decision: .allow)
            }
            if let (approval, step) = try preApproval(proposal) {
                return PolicyReport(
                    policy: name,
                    lines: [
                        "pre-approved by \(approval.approvedBy) at \(approval.grantedAt.iso8601) for plan "
                            + "'\(approval.planName)' step \(step.step) (until \(approval.expiresAt.iso8601))"
                    ], decision: .allow)
            }
            var lines = ["a fresh code is needed: " + reasons.map(\.description).joined(separator: "; ")]
            let accepted = StepUpMethod.allCases.filter { m in reasons.allSatisfy { state.policy.allowedMethods(for: $0).contains(m) } }
            if accepted.count < StepUpMethod.allCases.count {
                lines.append("accepted methods: " + (accepted.isEmpty ? "none" : accepted.map(\.rawValue).joined(separator: ", ")))
            }
            let record = try (try? OperatorID(proposal.actor)).flatMap { try store.operatorRecord($0) }
            let decision: PolicyDecision
            if record == nil {
                lines.append("\(proposal.actor) is not enrolled")
                decision = .refuse(
                    PolicyRefusal(policy: name, reason: "\(proposal.actor) is not enrolled for step-up", kind: .stepUpBlocked))
            } else if let until = record?.lockedUntil(at: clock.now(), longest: state.policy.lockoutDuration) {
                lines.append("\(proposal.actor) is locked out until \(until.iso8601)")
                decision = .refuse(
                    PolicyRefusal(policy: name, reason: "\(proposal.actor) is locked out until \(until.iso8601)", kind: .stepUpBlocked))
            } else if proposal.stepUpCode == nil {
                decision = .refuse(
                    PolicyRefusal(policy: name, reason: "a fresh code is needed", needsStepUpCode: true))
            } else {
                lines.append("the code is checked when the change is published")
                decision = .allow
            }
            return PolicyReport(policy: name, lines: lines, decision: decision)
        }
    }

    /// Checks the proposal's code when one is needed; records and audits the attempt.
    public func review(_ proposal: Proposal, context: PolicyContext) throws -> PolicyDecision {
        if context.stepUpVerified { return .allow }
        let change = StepUpChange(proposal)
        guard let actor = try? OperatorID(proposal.actor) else {
            // An id that cannot hold an enrolment (a ':' or too long) passes only where no code is needed.
            let state = try store.enforcement()
            let reasons = state.enforced ? requiresStepUp(change, policy: state.policy) : []
            guard !reasons.isEmpty else { return .allow }
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary,
                    result: .stepUpRefused,
                    detail: "result not-enrolled; needed for \(reasons.map(\.code).joined(separator: ", "))"))
            return .refuse(
                PolicyRefusal(
                    policy: name, reason: "\(proposal.actor) cannot be enrolled, so it cannot pass step-up", kind: .stepUpBlocked))
        }
        // The policy may name the methods a change kind accepts (`step-up.reach-100 security-key`): another
        // method is refused, audited, before it is checked (a code is not used up by a refused method).
        let used: StepUpMethod =
            proposal.phoneApproval != nil ? .phone : proposal.secondFactor != nil ? .securityKey : .totp
        if let refusal = try methodRefusal(used, proposal, change: change, context: context) { return refusal }
        if let (approval, step) = try preApproval(proposal) {
            let state = try store.enforcement()
            let reasons = state.enforced ? requiresStepUp(change, policy: state.policy) : []
            guard !reasons.isEmpty else { return .allow }
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary,
                    result: .stepUpAccepted,
                    detail: "result pre-approved; plan '\(approval.planName)' step \(step.step), approved by "
                        + "\(approval.approvedBy) at \(approval.grantedAt.iso8601) until \(approval.expiresAt.iso8601); "
                        + "needed for \(reasons.map(\.code).joined(separator: ", "))"))
            context.stepUpVerified = true
            return .allow
        }
        if let phone = proposal.phoneApproval {
            return try reviewPhone(phone, proposal, actor: actor, change: change, context: context)
        }
        if let evidence = proposal.secondFactor {
            return try reviewSecurityKey(evidence, proposal, actor: actor, change: change, context: context)
        }
        // The attempt and its audit record are written in the port's one transaction.
        let decision = try store.authorize(change, by: actor, code: proposal.stepUpCode, at: clock) {
            try context.audit($0.auditEntry)
        }
        switch decision.verdict {
        case .notRequired:
            return .allow
        case .accepted:
            context.stepUpVerified = true
            return .allow
        case .refused:
            let refusal = decision.refusal!
            return .refuse(refusal.policyRefusal)
        }
    }
}

extension StepUpWritePolicy {
    /// A change approved by a security key: the document must be exactly this proposal's change (its nonce and
    /// expiry aside), then the assertion is verified against the actor's stored credential in the port's one
    /// transaction, with its audit record (the document, authenticator data and signature).
    fileprivate func reviewSecurityKey(
        _ evidence: SecondFactorEvidence, _ proposal: Proposal, actor: OperatorID, change: StepUpChange,
        context: PolicyContext
    ) throws -> PolicyDecision {
        let state = try store.enforcement()
        let reasons = state.enforced ? requiresStepUp(change, policy: state.policy) : []
        guard !reasons.isEmpty else { return .allow }
        func refuse(_ result: String, _ reason: String, _ kind: PolicyRefusal.Kind) throws -> PolicyDecision {
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary, result: .stepUpRefused,
                    detail: "result \(result); method security-key; needed for \(reasons.map(\.code).joined(separator: ", "))"))
            return .refuse(PolicyRefusal(policy: name, reason: reason, kind: kind))
        }
        guard let securityKeys else {
            return try refuse("unsupported", "this store keeps no security keys; use a one-time code", .stepUpBlocked)
        }
        // A key counts only while its operator is enrolled: removing an operator removes what their key can do.
        guard try store.operatorRecord(actor) != nil else {
            return try refuse("not-enrolled", "\(actor) is not enrolled for step-up", .stepUpBlocked)
        }
        guard let presented = ChangeDocument(canonical: evidence.document) else {
            return try refuse("malformed", "the security key's change document is malformed", .stepUpFailed)
        }
        let expected = ChangeDocument(proposal, store: storeIdentity, expiresAt: presented.expiresAt, nonce: presented.nonce)
        guard presented == expected else {
            return try refuse(
                "other-change",
                "the security key approved another change (\(presented.summary)), not this one (\(expected.summary)); "
                    + "nothing was written", .stepUpFailed)
        }
        let twoPerson = state.policy.twoPerson && reasons.contains(.reachesFull)
        if twoPerson, let coApproval = proposal.coApproval {
            return try reviewCoApproval(
                coApproval, of: evidence, document: presented, proposal, requester: actor, change: change,
                reasons: reasons, securityKeys: securityKeys, context: context, refuse: refuse)
        }
        let request = twoPerson ? "; two-person-request \(ChangeDocument.requestID(presented))" : ""
        if let refusal = try authorize(
            evidence, over: presented, by: actor, change: change, reasons: reasons, auditSuffix: request,
            securityKeys: securityKeys, context: context, refuse: refuse)
        {
            return refusal
        }
        if twoPerson {
            var recorded = PolicyRefusal(
                policy: name,
                reason: "\(change.summary) needs a second operator (two-person rule); \(actor)'s approval is recorded as "
                    + "request \(ChangeDocument.requestID(presented)), valid until \(presented.expiresAt.iso8601)",
                suggestion: "another enrolled operator runs 'rollout approve \(ChangeDocument.requestID(presented))' with their security key",
                kind: .stepUpBlocked)
            recorded.twoPersonRequest = ChangeDocument.requestID(presented)
            return .refuse(recorded)
        }
        context.stepUpVerified = true
        return .allow
    }
}

extension StepUpWritePolicy {
    /// The two-person rule's second half: the requester's signature over the document (its counter was used when
    /// the request was recorded, so it is checked without the counter, within the document's expiry), then a
    /// second, different operator's key over exactly the same bytes, verified and counted in the port's
    /// transaction. The compare-and-swap on the document's base makes the change publish at most once.
    /// One operator's key over `document`: verified and counted in the port's transaction, audited as that
    /// operator's step-up (accepted or refused, with the evidence and `auditSuffix`); the refusal to return, nil
    /// when the key approved.
    fileprivate func authorize(
        _ evidence: SecondFactorEvidence, over document: ChangeDocument, by signer: OperatorID, change: StepUpChange,
        reasons: [StepUpReason], auditSuffix: String, securityKeys: any SecurityKeyStore, context: PolicyContext,
        refuse: (String, String, PolicyRefusal.Kind) throws -> PolicyDecision
    ) throws -> PolicyDecision? {
        let outcome = try securityKeys.authorizeSecurityKey(evidence.assertion, over: document, by: signer, at: clock) {
            outcome, credential in
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: signer.rawValue, action: "step-up " + change.summary,
                    result: outcome.isAccepted ? .stepUpAccepted : .stepUpRefused,
                    detail: evidence.auditDetail(outcome: outcome, reasons: reasons, credential: credential) + auditSuffix))
        }
        guard let outcome else {
            return try refuse(
                "not-enrolled", "\(signer) has no security key: enrol one with 'rollout operator enroll --method security-key'",
                .stepUpBlocked)
        }
        guard outcome.isAccepted else {
            return .refuse(PolicyRefusal(policy: name, reason: "\(outcome.description); nothing was written", kind: .stepUpFailed))
        }
        return nil
    }

    fileprivate func reviewCoApproval(
        _ coApproval: SecondFactorEvidence, of evidence: SecondFactorEvidence, document: ChangeDocument,
        _ proposal: Proposal, requester: OperatorID, change: StepUpChange, reasons: [StepUpReason],
        securityKeys: any SecurityKeyStore, context: PolicyContext,
        refuse: (String, String, PolicyRefusal.Kind) throws -> PolicyDecision
    ) throws -> PolicyDecision {
        guard let approverName = proposal.coApprover, let approver = try? OperatorID(approverName) else {
            return try refuse("malformed", "a second approval needs its approver", .stepUpFailed)
        }
        guard try store.operatorRecord(approver) != nil else {
            return try refuse("not-enrolled", "\(approver) is not enrolled for step-up", .stepUpBlocked)
        }
        guard approver != requester else {
            return try refuse(
                "self-approval", "\(approver) asked for this change and cannot approve it too: another operator must", .stepUpBlocked)
        }
        guard coApproval.document == evidence.document else {
            return try refuse("other-change", "the second approval is for another change document; nothing was written", .stepUpFailed)
        }
        guard document.isValid(at: clock.now()) else {
            return try refuse("expired", "request \(ChangeDocument.requestID(document)) expired at \(document.expiresAt.iso8601)", .stepUpFailed)
        }
        guard var first = try securityKeys.securityKey(requester) else {
            return try refuse("not-enrolled", "\(requester) has no security key", .stepUpBlocked)
        }
        first.signCount = 0
        let firstOutcome = SecurityKeyVerifier.check(evidence.assertion, over: document.clientDataHash, credential: first)
        guard firstOutcome.isAccepted else {
            return try refuse(firstOutcome.result, "the request's own approval does not verify: \(firstOutcome.description)", .stepUpFailed)
        }
        let request = "; co-approval \(Hex.encode(Array(requester.rawValue.utf8))); two-person-request \(ChangeDocument.requestID(document))"
        if let refusal = try authorize(
            coApproval, over: document, by: approver, change: change, reasons: reasons, auditSuffix: request,
            securityKeys: securityKeys, context: context, refuse: refuse)
        {
            return refusal
        }
        context.stepUpVerified = true
        return .allow
    }
}

extension StepUpWritePolicy {
    /// The refusal of a change approved by `used` when the policy names other methods for one of its reasons
    /// (audited); nil when the method is accepted or nothing is needed.
    fileprivate func methodRefusal(
        _ used: StepUpMethod, _ proposal: Proposal, change: StepUpChange, context: PolicyContext
    ) throws -> PolicyDecision? {
        let state = try store.enforcement()
        let reasons = state.enforced ? requiresStepUp(change, policy: state.policy) : []
        guard let (reason, accepted) = state.policy.methodRefusal(used, for: reasons) else { return nil }
        let names = accepted.map(\.rawValue).joined(separator: " or ")
        try context.audit(
            AuditEntry(
                time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary, result: .stepUpRefused,
                detail: "result method-not-allowed; method \(used.rawValue); needed for "
                    + "\(reasons.map(\.code).joined(separator: ", ")); step-up.\(reason.policyKind) accepts \(names)"))
        return .refuse(
            PolicyRefusal(
                policy: name,
                reason: "\(change.summary) needs \(names) (policy step-up.\(reason.policyKind): \(reason.description)); "
                    + "\(used.rawValue) is not accepted for it; nothing was written",
                suggestion: "approve with " + accepted.map(\.option).joined(separator: " or "), kind: .stepUpBlocked))
    }

    /// Why `proposal` needs a step-up under the stored policy (empty: it needs none, or step-up is off, or a
    /// ramp plan's pre-approval covers it). Unlike `preview`, blind to the one-time code's lockout: another
    /// method asks this before it sends or signs anything.
    public func stepUpReasons(for proposal: Proposal) throws -> [StepUpReason] {
        let state = try store.enforcement()
        guard state.enforced, try preApproval(proposal) == nil else { return [] }
        return requiresStepUp(StepUpChange(proposal), policy: state.policy)
    }

    /// Whether the policy accepts `method` for `proposal` (a method that sends something first asks this).
    public func accepts(_ method: StepUpMethod, for proposal: Proposal) throws -> Bool {
        let state = try store.enforcement()
        let reasons = state.enforced ? requiresStepUp(StepUpChange(proposal), policy: state.policy) : []
        return state.policy.methodRefusal(method, for: reasons) == nil
    }

    /// A change approved by a code sent to the operator's phone: the policy asks the provider itself, through its
    /// phone port, whether the code is right for a verification that port started for this phone and this change
    /// (`phoneBinding`); a request cannot claim an outcome. The answer is recorded against the phone enrolment's own
    /// lockout and audited (never the code); only `verified` allows the change. A verification the port did not
    /// start, an expired one or a provider that could not check a code counts no attempt.
    fileprivate func reviewPhone(
        _ phone: PhoneApproval, _ proposal: Proposal, actor: OperatorID, change: StepUpChange, context: PolicyContext
    ) throws -> PolicyDecision {
        let state = try store.enforcement()
        let reasons = state.enforced ? requiresStepUp(change, policy: state.policy) : []
        guard !reasons.isEmpty else { return .allow }
        let needed = "needed for \(reasons.map(\.code).joined(separator: ", "))"
        func audit(_ result: String, _ facts: [String], accepted: Bool = false) throws {
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: proposal.actor, action: "step-up " + change.summary,
                    result: accepted ? .stepUpAccepted : .stepUpRefused,
                    detail: (["result \(result)", "method phone", needed] + facts).joined(separator: "; ")))
        }
        func refuse(_ result: String, _ facts: [String], _ reason: String, _ kind: PolicyRefusal.Kind) throws -> PolicyDecision {
            try audit(result, facts)
            return .refuse(PolicyRefusal(policy: name, reason: reason, kind: kind))
        }
        guard let phones else {
            return try refuse("unsupported", [], "this store keeps no phones; use a one-time code", .stepUpBlocked)
        }
        guard try store.operatorRecord(actor) != nil else {
            return try refuse("not-enrolled", [], "\(actor) is not enrolled for step-up", .stepUpBlocked)
        }
        guard let enrolment = try phones.phoneEnrolment(actor) else {
            return try refuse(
                "not-enrolled", [], "\(actor) has no phone: enrol one with 'rollout operator enroll --method phone --phone +NUMBER'",
                .stepUpBlocked)
        }
        let verification = "verification \(phone.verification)"
        let now = clock.now()
        if let until = enrolment.lockedUntil, now < until {
            return try refuse(
                "locked-out", [verification, "locked-until \(until.iso8601)"],
                "\(actor)'s phone method is locked until \(until.iso8601) after wrong codes (a one-time code or a "
                    + "security key still works)", .stepUpBlocked)
        }
        let code: String
        switch phone.submission {
        case .notChecked(let words):
            return try refuse(
                "provider-refused", [verification, "provider \(words)"],
                "the phone code could not be checked: \(words); nothing was written", .stepUpFailed)
        case .code(let typed): code = typed
        }
        guard let phoneCodes else {
            return try refuse(
                "no-provider", [verification],
                "this session has no phone provider to check the code with; nothing was written", .stepUpBlocked)
        }
        let outcome = phoneCodes.check(
            verification: phone.verification, code: code, number: enrolment.number, binding: phoneBinding(for: proposal))
        switch outcome {
        case .notStartedHere:
            return try refuse(
                outcome.result, [verification, "to \(enrolment.masked)"],
                "\(verification) was not started by this session for this change and \(enrolment.masked): refused "
                    + "without asking the provider; nothing was written", .stepUpFailed)
        case .expired(let words):
            return try refuse(
                outcome.result, [verification, "provider \(words)"],
                "the phone verification \(phone.verification) expired or ended at the provider (404): start a new "
                    + "one with --phone; nothing was written", .stepUpFailed)
        case .unavailable(let words):
            return try refuse(
                outcome.result, [verification, "provider \(words)"],
                "the phone code could not be checked: \(words); nothing was written", .stepUpFailed)
        case .verified, .wrong, .tooManyAttempts: break
        }
        let accepted = outcome == .verified
        var stored: PhoneEnrolment?
        _ = try phones.recordPhoneAttempt(actor, accepted: accepted, policy: state.policy, at: now) { updated in
            stored = updated
            var facts = [verification, "to \(updated.masked)"]
            if !accepted {
                facts.append("failed-attempts \(updated.failedAttempts)")
                if let until = updated.lockedUntil { facts.append("locked-until \(until.iso8601)") }
            }
            try audit(outcome.result, facts, accepted: accepted)
        }
        if accepted {
            context.stepUpVerified = true
            return .allow
        }
        var reason = outcome == .tooManyAttempts
            ? "too many wrong phone codes: the provider ended verification \(phone.verification)"
            : "wrong phone code"
        if let until = stored?.lockedUntil { reason += "; \(actor)'s phone method is locked until \(until.iso8601)" }
        return .refuse(PolicyRefusal(policy: name, reason: reason + "; nothing was written", kind: .stepUpFailed))
    }
}

extension StepUpRefusal {
    /// The write path's refusal: a code is missing, did not pass, or cannot pass now (not enrolled, locked out).
    public var policyRefusal: PolicyRefusal {
        let kind: PolicyRefusal.Kind
        switch outcome {
        case .lockedOut, .notEnrolled: kind = .stepUpBlocked
        case .missing: kind = .stepUpNeeded
        default: kind = .stepUpFailed
        }
        return PolicyRefusal(policy: "step-up", reason: description, kind: kind)
    }
}
