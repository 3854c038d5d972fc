import Platform
import CommandLineKit
import JSON
import Monitoring
import RemoteConfig
import Rollout
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
        var rows: [(String, String)] = [("verdict", "\(verdict.level.labelText): \(verdict.reason)")]
        for f in verdict.findings where f.text != verdict.reason { rows.append(("", "\(f.level.labelText) \(f.topic.rawValue): \(f.text)")) }
        rows.append(("guardrails", status.assessment.armed ? "armed" : "not armed (no telemetry for this rollout yet)"))
        rows.append(("data", GuardrailReport.dataLine(status)))
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

    /// Telemetry time, where it comes from, and the data's age (never negative).
    static func dataLine(_ s: RolloutMonitor.Status) -> String {
        var line = "as of \(s.now.iso8601)"
        switch s.timeSource {
        case .wall: line += " (wall clock)"
        case .liveSimulation: line += " (simulated time of the live simulation writing this store)"
        case .finishedSimulation(let at): line += " (the simulation ended at \(at.iso8601); no longer followed)"
        case .lostSimulation(let at): line += " (the simulation stopped answering at \(at.iso8601); no longer followed)"
        }
        if let age = s.snapshot.dataAge, let newest = s.snapshot.newestEvent {
            line += "; newest event \(newest.iso8601), \(Int64(age.seconds)) s old"
            line += age > s.settings.staleAfter ? " (stale: older than \(s.settings.staleAfter.microseconds / 60_000_000) min)" : ""
        } else {
            line += "; no events"
        }
        return line
    }

    private func formatted(_ v: Double) -> String {
        v >= 1_000_000 ? "\(GuardrailSettingsFormat.number(v / 1_000_000))M" : GuardrailSettingsFormat.number(v)
    }
}

enum GuardrailSettingsFormat {
    static func number(_ v: Double) -> String { v == v.rounded() ? String(Int64(v)) : cFormat("%.2f", v) }
}

/// The one assessment as JSON: `status --json`, `telemetry --json` and `watch --json` print this object, so
/// their levels, reasons and counts can be compared field by field.
enum AssessmentJSON {
    static func value(_ s: RolloutMonitor.Status) -> JSONValue {
        let a = s.assessment
        let t = s.snapshot.crash.totals
        let totals = s.snapshot.totals
        func number(_ v: Int64) -> JSONValue { .number(JSONNumber(v)) }
        func number(_ v: Double?) -> JSONValue { v.map { .number(JSONNumber($0)) } ?? .null }
        func cohort(_ c: Cohort, sessions: Int64, crashes: Int64, users: Int64, crashed: Int64) -> JSONValue {
            [
                "sessions": number(sessions), "fatalCrashes": number(crashes), "users": number(users),
                "crashedUsers": number(crashed),
                "attestationSuccesses": number(totals.sum(.attestationSuccess, cohort: c)),
                "attestationFailures": number(totals.sum(.attestationFailure, cohort: c)),
            ]
        }
        var o = JSONObject()
        o["level"] = .string("\(a.verdict.level)")
        o["reason"] = .string(a.verdict.reason)
        o["findings"] = .array(
            a.verdict.findings.map {
                ["level": .string("\($0.level)"), "topic": .string($0.topic.rawValue), "text": .string($0.text)]
            })
        o["armed"] = .bool(a.armed)
        o["telemetryTime"] = .string(s.now.iso8601)
        o["wallTime"] = .string(s.wallNow.iso8601)
        o["timeSource"] = .string(timeSource(s.timeSource))
        o["startedAt"] = s.startedAt.map { .string($0.iso8601) } ?? .null
        o["exposedPercent"] = .string(s.exposed.decimalText)
        // Installations that get the flag whatever the rollout says (its default, another condition's value).
        o["servedOutsideRollout"] = s.assessment.context.servedOutsideRollout.map { .string($0) } ?? .null
        // App Check enforcement as this assessment read it (null: no App Check project); "known": false when the
        // latest read failed ("modes" are then the last known, "readAt" when they were read).
        o["enforcement"] =
            s.assessment.context.enforcement.map { e in
                [
                    "known": .bool(e.isKnown),
                    "modes": .object(
                        JSONObject(e.modes.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })),
                    "enforced": .array(e.enforced.map { .string($0) }),
                    "readAt": e.readAt.map { .string($0.iso8601) } ?? .null,
                    "failure": e.failure.map { .string($0) } ?? .null,
                ]
            } ?? .null
        o["newestEvent"] = s.snapshot.newestEvent.map { .string($0.iso8601) } ?? .null
        o["dataAgeSeconds"] = number(s.snapshot.dataAge?.seconds)
        o["counts"] = [
            "exposed": cohort(
                .enabled, sessions: t.exposedSessions, crashes: t.exposedCrashes, users: t.exposedUsers,
                crashed: t.exposedCrashedUsers),
            "control": cohort(
                .control, sessions: t.controlSessions, crashes: t.controlCrashes, users: t.controlUsers,
                crashed: t.controlCrashedUsers),
        ]
        let e = s.snapshot.evidence(s.assessment.context)
        o["evidence"] = [
            "exposedUsers": number(e.exposedUsers), "controlUsers": number(e.controlUsers),
            "smallestDetectableIncrease": number(e.detectable), "requiredDetectableIncrease": number(e.target),
            "usersNeededPerArm": e.usersNeededPerArm.map { number($0) } ?? .null, "enough": .bool(e.enough),
        ]
        return .object(o)
    }

    static func timeSource(_ source: TelemetryTimeSource) -> String {
        switch source {
        case .wall: "wall"
        case .liveSimulation: "simulation"
        case .finishedSimulation: "simulation ended"
        case .lostSimulation: "simulation lost"
        }
    }

    /// 0 OK, 5 WATCH, 6 HOLD, 7 HALT.
    static func exitCode(_ level: VerdictLevel) -> ExitCode {
        switch level {
        case .ok: .ok
        case .watch: .verdictWatch
        case .hold: .verdictHold
        case .halt: .verdictHalt
        }
    }
}
