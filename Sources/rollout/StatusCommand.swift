import CommandLineKit
import Glibc
import JSON
import RemoteConfig
import Rollout
import RolloutApp
import Telemetry
import Timekeeping

extension StoreCommands {
    static let status = Command(
        "status",
        summary: "Show the current version and the rollout: percentage, state, seed, cohort bands, verdict.",
        discussion:
            "The verdict is the one assessment that the console, 'rollout telemetry', 'rollout watch' and the guardrail "
            + "policy also compute, from the same store at the same instant. Data age is measured on telemetry time: the "
            + "wall clock, or a live simulation's simulated time on a drill store. " + GuardrailSettings.staleDefinition
            + ". With --check the exit code is the verdict: 0 OK, 5 WATCH, 6 HOLD, 7 HALT.",
        options: [
            json,
            .flag("--check", help: "Exit with the verdict: 0 OK, 5 WATCH, 6 HOLD, 7 HALT (for scripts and CI)."),
        ],
        examples: [
            "rollout status", "rollout status --json | jq .rollout.percentage",
            "rollout status --check || echo \"not OK: $?\"",
        ],
        action: guarded { inv in
            let session = try Wiring.session(inv)
            let health = try session.monitor().status()
            let current = health.current
            let rollout = Result { try RolloutPlan.locate(in: current.template) }
            let guardrail = GuardrailReport(health)
            let stepUp = try session.stepUp.enforcement().enforced
            let drill = try session.isDrillStore()
            if inv.flag("--json") {
                var out = JSONObject()
                out["store"] = .string(session.label)
                out["drillStore"] = .bool(drill)
                out["version"] = versionJSON(current.info)
                switch rollout {
                case .success(let plan?): out["rollout"] = planJSON(plan)
                case .success(nil): out["rollout"] = .null
                case .failure(let e): out["rolloutError"] = .string("\(e)")
                }
                out["startedAt"] = health.startedAt.map { .string($0.iso8601) } ?? .null
                out["guardrail"] = guardrail.json
                out["stepUp"] = ["enforced": .bool(stepUp)]
                out["assessment"] = AssessmentJSON.value(health)
                print(JSONValue.object(out).prettyText, terminator: "")
                return inv.flag("--check") ? AssessmentJSON.exitCode(health.assessment.verdict.level) : .ok
            }
            let info = current.info
            var rows: [(String, String)] = [
                ("store", session.displayLabel + (drill ? " (drill store: simulations write into it)" : "")),
                ("version", "\(info.number) (etag \(info.etag))"),
                (
                    "updated",
                    "\(info.updateTime.iso8601) by \(printable(info.updateUser)) (\(info.updateOrigin), \(info.updateType.rawValue))"
                ),
            ]
            if !info.description.isEmpty { rows.append(("reason", printable(info.description))) }
            rows.append(("", ""))
            switch rollout {
            case .success(let plan?):
                rows += [
                    (plan.names.parameter, describe(plan)),
                    ("condition", "\(plan.names.exposedCondition): \(printable(plan.conditionText))"),
                    ("seed", printable(plan.seed)),
                    (
                        "exposed",
                        plan.state == .rolling
                            ? plan.exposedBand.description
                                + (health.assessment.context.servedOutsideRollout.map {
                                    " by the rollout; past it, \"true\" for \($0) of installations that a kill would leave on (its default value or another condition's value)"
                                } ?? "")
                            : StoreCommands.stoppedExposure(plan, in: current.template)
                    ),
                    (
                        "control",
                        plan.state == .rolling && !plan.controlBand.isEmpty ? plan.controlBand.description : "none"
                    ),
                ]
            case .success(nil):
                rows.append(("rollout", "none: the template has no rollout of \(RolloutNames.standard.parameter)"))
            case .failure(let e): rows.append(("rollout", "cannot read it: \(e)"))
            }
            rows.append(("", ""))
            rows += guardrail.rows.map { ($0.0, printable($0.1)) }
            if let enforcement = health.assessment.context.enforcement {
                rows.append(("App Check", printable(enforcement.summary)))
            }
            rows.append(("step-up", stepUp ? "on: risky changes need a one-time code (rollout policy show)" : "off (no operator enrolled)"))
            printRows(rows)
            return inv.flag("--check") ? AssessmentJSON.exitCode(health.assessment.verdict.level) : .ok
        })


    /// What a killed or not-started rollout still exposes: "nobody" only when the template, evaluated, serves
    /// `"true"` to no installation (a version stored before publishes were refused for leaving it on says so).
    private static func stoppedExposure(_ plan: RolloutPlan, in template: RemoteConfigTemplate) -> String {
        let served = Exposure.of(plan.names.parameter, in: template, seed: plan.seed)
        guard served.possible > .zero else { return "nobody (\(plan.state.rawValue))" }
        return "\(served) of installations (\(plan.state.rawValue), but something other than the rollout serves \"true\")"
    }
}
