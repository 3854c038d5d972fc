import CommandLineKit
import Glibc
import Platform
import JSON
import Monitoring
import RampPlans
import Rollout
import RolloutApp
import Telemetry
import Timekeeping

/// `rollout plan`: a declarative ramp that advances the rollout by itself through gates.
enum PlanCommands {
    static let all: [Command] = [group]

    static let group = Command(
        "plan",
        summary: "Ramp plans: steps, holds and gates that advance the rollout by themselves.",
        discussion: "A plan file lists steps (a percentage and a minimum hold), the gates each step must pass before "
            + "the next (verdict OK for a duration, exposed users and sessions, propagation, attestation load, a "
            + "time-of-day window) and what to do on WATCH (pause), HOLD (wait) and HALT (kill); see the README. "
            + "'plan start' stores it; 'plan run' executes it. Every advance is an ordinary change of the write path "
            + "(guardrails, step-up, a reason such as \"plan 'ramp' step 3/5: 25%\"), published by compare-and-swap, "
            + "so any number of runners may run: one publishes each step.",
        examples: [
            "rollout plan start ramp.plan",
            "rollout plan run --json",
            "rollout plan status --json",
            "rollout plan pause --reason \"investigating a report\"",
            "rollout plan resume --code 123456   # also publishes a step that waits for a one-time code",
        ],
        subcommands: [start, status, pause, resume, abort, run])

    static let start = Command(
        "start",
        summary: "Store a plan file as the store's plan (audited); 'plan run' executes it.",
        discussion: "The plan is validated first (errors name their line). Refused while another plan is running or "
            + "paused (abort it first). With --code, the steps the step-up policy protects are pre-approved: the "
            + "code is checked now (once: codes are single-use), and the runner then publishes exactly those steps "
            + "of this plan without waiting for an operator, until --approve-for has passed. Aborting the plan, its "
            + "end or a new plan revoke the pre-approval. Without --code a protected step pauses the plan until "
            + "'plan resume --code CODE'.",
        options: [
            .value("--code", name: "CODE", help: "A one-time code: pre-approve the plan's protected steps."),
            .value(
                "--approve-for", name: "DURATION", help: "How long the pre-approval lasts (default 24h; at most 720h)."),
        ],
        positionals: [Positional("FILE", help: "The plan file.")],
        examples: ["rollout plan start ramp.plan", "rollout plan start ramp.plan --code 123456 --approve-for 12h"],
        action: { inv in
            guard let file = inv.positional(0) else { throw inv.usageError("plan start needs a plan FILE") }
            var approvalFor = Instant.Duration.hours(24)
            if let text = inv.value("--approve-for") {
                do { approvalFor = try Instant.Duration.parse(text) } catch {
                    throw inv.usageError("--approve-for: \(error)")
                }
                guard inv.value("--code") != nil else { throw inv.usageError("--approve-for goes with --code") }
            }
            // Read no further than the plan's limit: a larger file is refused without being loaded whole.
            let bytes: [UInt8]
            do { bytes = try Files.read(file, limit: RampPlan.maximumBytes + 2) } catch {
                throw CommandError("cannot read the plan file \(error)")
            }
            guard bytes.count <= RampPlan.maximumBytes else {
                throw inv.usageError(
                    "\(file): a plan file is at most \(RampPlan.maximumBytes / 1024) KiB; this one is larger")
            }
            guard let text = String(utf8Bytes: bytes) else {
                throw inv.usageError("\(file): the plan file is not UTF-8 text")
            }
            let session = try planSession(inv)
            do {
                let stored = try RampPlanStates(session: session).start(
                    source: text, actor: session.operatorID, code: inv.value("--code"), approvalFor: approvalFor)
                print(
                    "plan '\(stored.plan.name)' started: "
                        + (1...stored.plan.stepCount).map(stored.plan.stepText).joined(separator: " → "))
                if let approval = stored.approval {
                    print(
                        "pre-approved by \(approval.approvedBy) until \(approval.expiresAt.iso8601): steps \(approval.stepsText)"
                    )
                }
                print("run it with 'rollout plan run' (any number of runners may run)")
                return .ok
            } catch let e as RampPlanFailure {
                if e.isUsage { throw inv.usageError("\(file): \(e.description)") }
                if case .refused(let refusal) = e.kind { throw CommandError(e.description, exit: ExitCode(refusal)) }
                throw CommandError(e.description)
            }
        })

    static let status = Command(
        "status",
        summary: "The plan, its step and what it waits for (each gate with its value).",
        options: [.flag("--json", help: "Print one JSON object.")],
        examples: ["rollout plan status", "rollout plan status --read-only --json"],
        action: { inv in
            let session = try planSession(inv)
            guard let stored = try RampPlanStates(session: session).load() else {
                throw CommandError("no plan was started in this store ('rollout plan start FILE')")
            }
            let status = try session.monitor().status()
            let decision = stored.plan.decide(
                stored.state,
                RampObservation(assessment: status.assessment, snapshot: status.snapshot, rollout: status.plan),
                now: status.now)
            if inv.flag("--json") {
                print(JSONWriter().string(json(stored, decision: decision, status: status, done: nil)))
            } else {
                // Reasons and names came from operators: shown escaped, as `audit show` shows them.
                for line in text(stored, decision: decision, status: status) { print(Sanitiser.escape(line)) }
            }
            return .ok
        })

    static func change(_ name: String, _ phase: RampState.Phase, summary: String) -> Command {
        Command(
            name, summary: summary,
            // --code only where it does something: a pause or an abort took it and ignored it.
            options: [.value("--reason", name: "TEXT", help: "Why (recorded in the audit log).")]
                + (phase == .running
                    ? [.value("--code", name: "CODE", help: "A one-time code: publishes a step that waits for step-up.")] : []),
            examples: ["rollout plan \(name) --reason \"...\""],
            action: { inv in
                let session = try planSession(inv)
                do {
                    let stored = try RampPlanStates(session: session).operatorChange(
                        to: phase, actor: session.operatorID, reason: inv.value("--reason") ?? "")
                    print(
                        "plan '\(stored.plan.name)' \(stored.state.phase.rawValue) at step \(stored.state.reached)/\(stored.plan.stepCount)"
                    )
                    if phase == .running, let code = inv.value("--code") {
                        // The waiting step, published now by this operator with the code.
                        if let look = try RampPlanRunner(session: session).look(code: code) {
                            print(describe(look))
                            if case .paused = look.decision.state.phase { return .refused }
                        }
                    }
                    return .ok
                } catch let e as RampPlanFailure {
                    throw CommandError(e.description)
                }
            })
    }

    static let pause = change("pause", .paused, summary: "Stop advancing (runners keep watching; HALT still kills).")
    static let resume = change(
        "resume", .running, summary: "Advance again; with --code, publish a step that waits for a code.")
    static let abort = change("abort", .aborted, summary: "End the plan where it is (the rollout stays as it is).")

    static let run = Command(
        "run",
        summary: "Execute the stored plan headless, in the loop of 'rollout watch'.",
        discussion:
            "Every --interval wall seconds, in the loop of 'rollout watch': the one assessment, auto-kill (when "
            + "guardrails.auto-kill is on), the plan's decision, and its action (publish the next step, kill, pause). "
            + "Prints a line whenever the verdict or the decision changes (text, or JSON lines with --json: the "
            + "object of 'watch --json' with the plan in \"plan\"). The plan's state is in the store, so a restarted runner goes on at its step, and runners "
            + "on other machines are safe (compare-and-swap). A paused plan is watched until resumed or aborted. "
            + "Exit code: 0 done, 7 killed, 8 aborted, 9 paused (with --exit-on-pause); 1-4 as usual.",
        options: [
            .value("--interval", name: "SECONDS", help: "Wall seconds between looks (default 2; 0.01 to 3600)."),
            .value("--looks", name: "N", help: "Stop after N looks (exit code of the plan's phase then: 0 running or paused)."),
            .flag("--exit-on-pause", help: "Exit (code 9) when the plan pauses."),
            .flag("--json", help: "Print one JSON object per change."),
            .flag("--quiet", help: "No progress line on stderr."),
        ],
        examples: ["rollout plan run", "rollout plan run --json | tee plan.ndjson"],
        action: runPlan)

    static func runPlan(_ inv: Invocation) throws -> ExitCode {
        let (interval, looks) = try TelemetryCommands.loopOptions(inv)
        let rolloutSession = try Wiring.session(inv)
        let session = rolloutSession.planSession
        if let cause = session.readOnlyCause {
            let why = cause == .requested ? "(--read-only)" : "and " + cause.description
            throw CommandError("refused: a plan runner publishes changes \(why)", exit: .refused)
        }
        guard try RampPlanStates(session: session).load() != nil else {
            throw CommandError("no plan was started in this store ('rollout plan start FILE')")
        }
        let exitOnPause = inv.flag("--exit-on-pause")
        let output = HeadlessOutput(json: inv.flag("--json"))
        // Steps reached of the plan's steps, on stderr when it is a terminal (never with --json or --quiet).
        let bar = ProgressReporter.standardError(
            label: "plan", unit: .count("steps"), quiet: inv.flag("--quiet") || inv.flag("--json"))
        defer { bar.finish() }
        let loop = try rolloutSession.headlessLoop(plan: true)
        let last = try loop.run(
            interval: interval, looks: looks,
            report: { look in
                bar.finish()
                output.print(look)
                if let plan = look.plan {
                    bar.total = Int64(plan.plan.plan.stepCount)
                    bar.update(done: Int64(plan.decision.state.reached))
                }
            },
            until: { look in
                let phase = look.plan?.decision.state.phase ?? .running
                return phase.isFinal || (phase == .paused && exitOnPause)
            }, sources: rolloutSession.sources(environment: inv.environment), pulled: SourceCommands.pullFailure)
        let phase = last?.plan?.decision.state.phase ?? .running
        // Stopped by a signal with the plan still running: not "done" (0) but the signal's code (130, 143), so a
        // supervisor does not take the stop for the plan's end.
        if let signal = loop.stoppedBy, !phase.isFinal { return ExitCode(stoppedBy: signal) }
        return exitCode(phase, exitOnPause: exitOnPause)
    }

    /// The invocation's store as the plan commands use it: a PostgreSQL team store or a store file (or Firebase's
    /// state store), the same commands and guarantees on each.
    static func planSession(_ inv: Invocation) throws -> PlanSession { try Wiring.session(inv).planSession }

    /// The README's exit table: 9 only when asked for with --exit-on-pause; a paused plan left when --looks runs
    /// out is 0, like a running one.
    static func exitCode(_ phase: RampState.Phase, exitOnPause: Bool) -> ExitCode {
        switch phase {
        case .running, .done: .ok
        case .killed: .verdictHalt
        case .aborted: .planAborted
        case .paused: exitOnPause ? .planPaused : .ok
        }
    }

    static func describe(_ look: RampPlanRunner.Look) -> String {
        let p = look.plan.plan
        let s = look.decision.state
        let at =
            s.reached == 0 ? "not started" : "step \(s.reached)/\(p.stepCount) (\(p.stepText(s.reached)))"
        if let done = look.done { return "plan '\(p.name)' \(at): \(done)" }
        return "plan '\(p.name)' \(at): " + words(look.decision.action)
    }

    static func words(_ action: RampAction) -> String {
        switch action {
        case .wait(let why, _): "waiting: \(why)"
        case .advance(let step, let target, _): "advancing to step \(step) (\(target))"
        case .enforce(let step, let service, _): "enforcing at step \(step): \(service)"
        case .pause(let why, _): "pausing: \(why)"
        case .kill(let why): "killing: \(why)"
        case .done(let why): "done: \(why)"
        case .idle(let phase): phase.rawValue
        }
    }

    static func text(_ stored: StoredRampPlan, decision: RampDecision, status: RolloutMonitor.Status) -> [String] {
        let p = stored.plan
        let s = stored.state
        var lines = [
            "plan '\(p.name)' \(s.phase.rawValue), started by \(stored.row.startedBy) at \(stored.row.startedAt.iso8601)"
                + (s.reason.isEmpty ? "" : ": \(s.reason)"),
            stored.approval.map {
                "pre-approved by \($0.approvedBy) until \($0.expiresAt.iso8601): steps \($0.stepsText)"
            } ?? "pre-approved: none (a protected step waits for 'plan resume --code')",
            "rollout: \(status.exposed) (\(status.plan?.state.rawValue ?? "no rollout")), verdict \(status.assessment.verdict.level): \(status.assessment.verdict.reason)",
        ]
        for (i, step) in p.steps.enumerated() {
            let mark = i + 1 < s.reached ? "done" : i + 1 == s.reached ? "now " : "    "
            lines.append("  \(mark) step \(i + 1)/\(p.stepCount): \(step.target) hold \(step.hold.compactText)")
        }
        for (i, service) in p.enforcements.enumerated() {
            let n = p.steps.count + i + 1
            let mark = n < s.reached ? "done" : n == s.reached ? "now " : "    "
            lines.append("  \(mark) step \(n)/\(p.stepCount): enforce \(service)")
        }
        if s.phase == .running {
            lines.append("next: " + words(decision.action))
            if case .wait(_, let gates) = decision.action {
                for g in gates {
                    lines.append("  \(g.met ? "ok " : "no ") \(g.gate): \(g.value) (needs \(g.required))")
                }
            }
        }
        return lines
    }

    static func json(_ stored: StoredRampPlan, decision: RampDecision, status: RolloutMonitor.Status, done: String?)
        -> JSONValue
    {
        let p = stored.plan
        let s = decision.state
        let (kind, why, gates): (String, String, [GateReading]) =
            switch decision.action {
            case .wait(let w, let g): ("wait", w, g)
            case .advance(let step, let target, _): ("advance", "step \(step) (\(target))", [])
            case .enforce(let step, let service, _): ("enforce", "step \(step) (\(service))", [])
            case .pause(let w, _): ("pause", w, [])
            case .kill(let w): ("kill", w, [])
            case .done(let w): ("done", w, [])
            case .idle(let phase): ("idle", phase.rawValue, [])
            }
        var o = JSONObject()
        o["plan"] = .string(p.name)
        o["phase"] = .string(s.phase.rawValue)
        o["step"] = .number(JSONNumber(s.reached))
        o["steps"] = .array(p.steps.map { .string($0.target.description) })
        o["enforce"] = .array(p.enforcements.map { .string($0) })
        o["reason"] = .string(s.reason)
        o["action"] = .string(kind)
        o["why"] = .string(why)
        o["gates"] = .array(
            gates.map { g in
                [
                    "gate": .string(g.gate), "value": .string(g.value), "required": .string(g.required),
                    "met": .bool(g.met),
                ]
            })
        o["preApproval"] =
            stored.approval.map { a -> JSONValue in
                [
                    "approvedBy": .string(a.approvedBy), "until": .string(a.expiresAt.iso8601),
                    "steps": .array(a.steps.map { .number(JSONNumber($0.step)) }),
                ]
            } ?? .null
        o["done"] = done.map { .string($0) } ?? .null
        o["now"] = .string(status.now.iso8601)
        o["version"] = .number(JSONNumber(status.current.info.number))
        o["exposed"] = .string(status.exposed.description)
        o["verdict"] = .string("\(status.assessment.verdict.level)")
        return .object(o)
    }
}
