import JSON
import RemoteConfig
import Store
import Telemetry

/// The guardrail part of `rollout status`: verdict with reasons, armed state, and the attestation budget.
struct GuardrailReport {
    let status: RolloutMonitor.Status

    init(_ status: RolloutMonitor.Status) { self.status = status }

    var fleet: FleetActivity { status.snapshot.activity }
    var budget: AttestationBudget { status.settings.budget }

    /// The largest increase from the current exposure that fits the attestation budget (nil: unknown fleet).
    var largestStep: MicroPercent? {
        guard fleet.active > 0 else { return nil }
        let from = status.exposed.value
        let target = AttestationForecast.largestFittingTarget(
            fromMicroPercent: from, toMicroPercent: MicroPercent.hundred.value, fleet: fleet, budget: budget)
        return target.map { MicroPercent($0 - from) } ?? .zero
    }

    var rows: [(String, String)] {
        let verdict = status.assessment.verdict
        var rows: [(String, String)] = [("verdict", "\(verdict.level): \(verdict.reason)")]
        for f in verdict.findings where f.text != verdict.reason { rows.append(("", "\(f.level) \(f.topic.rawValue): \(f.text)")) }
        rows.append(("guardrails", status.assessment.armed ? "armed" : "not armed (no telemetry for this rollout yet)"))
        rows.append(("auto-kill", status.settings.autoKill ? "on: a HALT verdict kills the rollout" : "off"))
        var budgetLine = "\(formatted(budget.perSecond))/s and \(formatted(budget.perDay))/day (Apple's guidance)"
        if let step = largestStep {
            budgetLine += "; largest next step within it: \(step.signedText) points"
        } else {
            budgetLine += "; no fleet activity yet to forecast from"
        }
        rows.append(("budget", budgetLine))
        return rows
    }

    var json: JSONValue {
        let a = status.assessment
        var o = JSONObject()
        o["verdict"] = .string("\(a.verdict.level)")
        o["reason"] = .string(a.verdict.reason)
        o["findings"] = .array(
            a.verdict.findings.map {
                ["level": .string("\($0.level)"), "topic": .string($0.topic.rawValue), "text": .string($0.text)]
            })
        o["armed"] = .bool(a.armed)
        o["autoKill"] = .bool(status.settings.autoKill)
        o["budget"] = [
            "perSecond": .number(JSONNumber(budget.perSecond)), "perDay": .number(JSONNumber(budget.perDay)),
            "peakToAverage": .number(JSONNumber(budget.peakToAverage)),
        ]
        o["fleet"] = [
            "active": .number(JSONNumber(fleet.active)), "attestCapable": .number(JSONNumber(fleet.attestCapable)),
            "launchesPerInstallationPerDay": fleet.launchesPerInstallationPerDay.map { .number(JSONNumber($0)) } ?? .null,
        ]
        o["largestStepWithinBudget"] = largestStep.map { .string($0.decimalText) } ?? .null
        o["dataAgeSeconds"] = status.snapshot.dataAge.map { .number(JSONNumber($0.seconds)) } ?? .null
        return .object(o)
    }

    private func formatted(_ v: Double) -> String {
        v >= 1_000_000 ? "\(GuardrailSettingsFormat.number(v / 1_000_000))M" : GuardrailSettingsFormat.number(v)
    }
}

enum GuardrailSettingsFormat {
    static func number(_ v: Double) -> String { v == v.rounded() ? String(Int64(v)) : String(format: "%.2f", v) }
}
