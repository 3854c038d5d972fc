import CommandLineKit
import Glibc
import JSON
import Platform
import Rollout
import RolloutApp
import Telemetry
import Timekeeping

/// `rollout watch`: the console's verdict without a screen, for a terminal, a pipe or a service.
extension TelemetryCommands {
    static let watch = Command(
        "watch",
        summary: "Follow the store headless: print each verdict change, run auto-kill, exit with the verdict.",
        discussion:
            "Looks at the store every --interval seconds of wall time and computes the one assessment (the same "
            + "as 'rollout status', the console and the guardrail policy). Prints a line whenever the level or the "
            + "kind of its reason (data, crashes, failures, exposure) changes, not when only its numbers move, and "
            + "otherwise a heartbeat every --heartbeat seconds (text, or one JSON object per line with --json). With guardrails.auto-kill on and a "
            + "writable store, a HALT while anyone is exposed publishes a kill through the write path, audited as "
            + "the guardrail; any number of watchers and consoles may run at once: the kill is a compare-and-swap, "
            + "so exactly one is published. Runs until interrupted (SIGINT, SIGTERM), --looks are done, or, with "
            + "--exit-on-halt, the first HALT. Exit code: the last verdict, 0 OK, 5 WATCH, 6 HOLD, 7 HALT; 1 when the "
            + "store cannot be read, or its file was removed or replaced while watching (moved, deleted, another file "
            + "put in its place). "
            + "Configured telemetry sources ('rollout source') are pulled on their schedule before each look. "
            + GuardrailSettings.staleDefinition + ".",
        options: [
            .value("--interval", name: "SECONDS", help: "Wall seconds between looks (default 2; 0.01 to 3600)."),
            .value("--looks", name: "N", help: "Stop after N looks."),
            .value(
                "--heartbeat", name: "SECONDS",
                help: "While nothing changes, repeat the verdict this often (default 600; at least --interval)."),
            .flag("--exit-on-halt", help: "Exit (code 7) at the first HALT, after auto-kill had its chance."),
            .flag("--json", help: "Print one JSON object per verdict change."),
        ],
        examples: [
            "rollout watch",
            "rollout watch --json --exit-on-halt | tee verdicts.ndjson",
            "rollout watch --read-only --looks 1   # one look, exit code = verdict",
        ],
        action: runWatch)

    static func runWatch(_ invocation: Invocation) throws -> ExitCode {
        let (interval, looks) = try loopOptions(invocation)
        let exitOnHalt = invocation.flag("--exit-on-halt")
        let session = try Wiring.session(invocation)
        let loop = try session.headlessLoop()
        var heartbeat = 600.0
        if let text = invocation.value("--heartbeat") {
            guard let v = Double(text), v.isFinite, v > 0, v <= 86_400 else {
                throw invocation.usageError("--heartbeat takes seconds up to 86400, not '\(text)'")
            }
            heartbeat = v
        }
        let output = HeadlessOutput(json: invocation.flag("--json"), heartbeat: max(heartbeat, interval))
        let last = try loop.run(
            interval: interval, looks: looks, report: output.print,
            until: { exitOnHalt && $0.status.assessment.verdict.level == .halt },
            sources: session.sources(environment: invocation.environment), pulled: SourceCommands.pullFailure)
        return AssessmentJSON.exitCode(last?.status.assessment.verdict.level ?? .hold)
    }

    /// `--interval` and `--looks` of the headless loop (`watch`, `plan run`).
    static func loopOptions(_ invocation: Invocation) throws -> (interval: Double, looks: Int?) {
        var interval = 2.0
        if let text = invocation.value("--interval") {
            guard let v = Double(text), v.isFinite, v >= 0.01, v <= 3600 else {
                throw invocation.usageError("--interval takes seconds from 0.01 to 3600, not '\(text)'")
            }
            interval = v
        }
        let looks = try invocation.value("--looks").map { text -> Int in
            guard let n = Int(text), n > 0 else { throw invocation.usageError("--looks takes a positive whole number") }
            return n
        }
        return (interval, looks)
    }
}

/// What the headless loop prints, the same for `watch` and `plan run`: a line (or, with --json, one JSON object)
/// whenever the verdict changes, auto-kill publishes, or the plan's decision changes or the plan acts.
final class HeadlessOutput {
    let json: Bool
    /// Wall seconds between two lines while nothing changes.
    let heartbeat: Double
    /// The plan's last printed state: phase, step and `RampAction.changeKey` (not its words, whose countdowns move
    /// on every look).
    private var lastPlan: String?
    private var lastLine = 0.0

    init(json: Bool, heartbeat: Double = 600) {
        self.json = json
        self.heartbeat = heartbeat
    }

    func print(_ look: HeadlessLoop.Look) {
        let plan = look.plan.map { PlanCommands.describe($0) }
        let planKey = look.plan.map {
            "\($0.decision.state.phase) \($0.decision.state.reached) \($0.decision.action.changeKey)"
        }
        let planChanged = planKey != nil && (planKey != lastPlan || look.plan?.done != nil)
        if planKey != nil { lastPlan = planKey }
        let seconds = Deadline.now.seconds
        let beat = seconds - lastLine >= heartbeat
        guard look.verdictChanged || look.autoKill != nil || planChanged || beat else { return }
        lastLine = seconds
        let status = look.status
        if json {
            var o = AssessmentJSON.value(status).objectValue ?? JSONObject()
            o["version"] = .number(JSONNumber(Int64(status.current.info.number)))
            o["autoKill"] = look.autoKill.map { .string($0) } ?? .null
            if let p = look.plan {
                o["plan"] = PlanCommands.json(p.plan, decision: p.decision, status: status, done: p.done)
            }
            Swift.print(JSONWriter().string(.object(o)))
        } else {
            let at = status.wallNow.iso8601
            // Each line escaped (`Sanitiser`): a reason may quote an operator's words or a stored error class.
            if look.verdictChanged || beat {
                Swift.print(Sanitiser.escape("\(at)  \(status.assessment.verdict.level.labelText): \(status.assessment.verdict.reason)"))
            }
            if let killed = look.autoKill { Swift.print(Sanitiser.escape("\(at)  \(killed)")) }
            if planChanged, let plan { Swift.print(Sanitiser.escape("\(at)  \(plan)")) }
        }
        fflush(nil)
    }
}
