import Rollout

extension StepUpChange {
    /// The change a write-path proposal describes: its kind, the exposure it is judged on before and after
    /// (`Proposal.exposedBefore`: a killed rollout counts as what resume would expose) and its flags.
    public init(_ proposal: Proposal) {
        let kind: Kind
        switch proposal.kind {
        case .set: kind = .set
        case .nudge: kind = .nudge
        case .kill: kind = .kill
        case .resume: kind = .resume
        case .reseed: kind = .reseed
        case .rollback: kind = .rollback
        case .importTemplate: kind = .importTemplate
        }
        self.init(
            kind, from: proposal.exposedBefore.value, to: proposal.exposedAfter.value, force: proposal.force,
            guardrailOverride: proposal.overrideGuardrail, protectionOverride: !proposal.protectionOverrides.isEmpty)
    }
}

extension StepUpAuditEvent {
    /// The event as a record of the store's audit log: result `step-up accepted` or `step-up refused`, and the
    /// outcome, reasons and lockout state in `detail`. Never the code, never the secret.
    public var auditEntry: AuditEntry {
        var facts = ["result \(result)"]
        switch outcome {
        case .accepted(let step): facts.append("time step \(step)")
        case .expired(let offset): facts.append("code of time step \(offset > 0 ? "+" : "")\(offset)")
        default: break
        }
        if !reasons.isEmpty { facts.append("needed for \(reasons.joined(separator: ", "))") }
        facts.append("wrong codes \(failedAttempts)")
        if let lockedUntil { facts.append("locked out until \(lockedUntil.iso8601)") }
        return AuditEntry(
            time: at, actor: operatorID.rawValue, action: "step-up " + action,
            result: outcome.isAccepted ? .stepUpAccepted : .stepUpRefused, detail: facts.joined(separator: "; "))
    }
}
