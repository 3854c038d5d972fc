import Glibc
import Platform
import RemoteConfig
import Rollout

/// The telemetry guardrail as a policy of the write path.
///
/// The write path consults it for every change that does not only lower exposure. `input` reads what the
/// guardrail needs at the moment of the change (the store's telemetry snapshot and its assessment, the fleet,
/// the configured budget); the decision itself is `GuardrailPolicy.evaluate`. A refusal is lifted by
/// `--override-guardrail` with a reason, which the write path audits.
public struct TelemetryGuardrail: WritePolicy {
    public static let policyName = "guardrail"
    public let name = TelemetryGuardrail.policyName
    private let input: @Sendable (Proposal) throws -> GuardrailInput

    public init(input: @escaping @Sendable (Proposal) throws -> GuardrailInput) { self.input = input }

    /// The decision without overrides, and the input it was made on.
    public func decide(_ proposal: Proposal) throws -> (GuardrailDecision, GuardrailInput) {
        let input = try input(proposal)
        let kind: PercentageChange =
            proposal.kind == .kill ? .kill : proposal.increasesExposure ? .increase : .decrease
        let decision = GuardrailPolicy.evaluate(
            currentMicroPercent: proposal.exposedBefore.value, targetMicroPercent: proposal.exposedAfter.value,
            kind: kind,
            input: input)
        return (decision, input)
    }

    public func preview(_ proposal: Proposal) throws -> PolicyReport {
        let (decision, input) = try decide(proposal)
        var lines = [
            "verdict \(input.verdict.level): \(input.verdict.reason)",
            input.armed ? "guardrails armed" : "guardrails not armed (no telemetry for this rollout yet)",
        ]
        switch decision {
        case .allow(let notes): lines += notes.filter { !$0.hasPrefix("guardrails ") }
        case .refuse(let refusal):
            lines.append(refusal.reason)
            if proposal.overrideGuardrail { lines.append("overridden by --override-guardrail (audited)") }
        }
        return PolicyReport(policy: name, lines: lines, decision: writeDecision(decision, proposal))
    }

    public func review(_ proposal: Proposal, context: PolicyContext) throws -> PolicyDecision {
        writeDecision(try decide(proposal).0, proposal)
    }

    private func writeDecision(_ decision: GuardrailDecision, _ proposal: Proposal) -> PolicyDecision {
        guard case .refuse(let refusal) = decision else { return .allow }
        if proposal.overrideGuardrail, !proposal.reason.isBlank { return .allow }
        let suggestion = refusal.suggestedTargetMicroPercent.map {
            "the largest step within the attestation budget is to \(MicroPercent($0))"
        }
        return .refuse(PolicyRefusal(policy: name, reason: refusal.reason, suggestion: suggestion, kind: .guardrail))
    }
}
