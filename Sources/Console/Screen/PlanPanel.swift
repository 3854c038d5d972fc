import RampPlans
import RemoteConfig
import Timekeeping

/// The store's ramp plan as the console shows it: the data source fills it from the stored plan and the one
/// decision (`RampPlan.decide`) on the snapshot's assessment.
public struct PlanInfo: Hashable, Sendable {
    public var name: String
    public var phase: RampState.Phase
    /// Steps published (0: none yet).
    public var reached: Int
    /// Every step's percentage, in order.
    public var steps: [MicroPercent]
    /// The services the plan sets ENFORCED after its last step (`step enforce`), in order.
    public var enforcements: [String]
    /// What the plan does next, in words: `waiting: holding 10% until …`, `next: step 3 (25%)`, `paused: …`.
    public var next: String
    /// Each gate of the current step with its value and what it needs.
    public var gates: [GateReading]
    public var countdown: RampCountdown
    /// Steps pre-approved with a code at `plan start` (still in force).
    public var preApproved: [Int]
    /// Why the plan is paused, killed, aborted or done.
    public var reason: String
    /// Paused because its next step needs a one-time code: `x` asks for one, and resuming without it would only
    /// pause again.
    public var waitsForCode: Bool

    public init(
        name: String, phase: RampState.Phase, reached: Int, steps: [MicroPercent], enforcements: [String] = [],
        next: String, gates: [GateReading] = [], countdown: RampCountdown = RampCountdown(), preApproved: [Int] = [],
        reason: String = "", waitsForCode: Bool = false
    ) {
        self.waitsForCode = waitsForCode
        self.enforcements = enforcements
        self.name = name
        self.phase = phase
        self.reached = reached
        self.steps = steps
        self.next = next
        self.gates = gates
        self.countdown = countdown
        self.preApproved = preApproved
        self.reason = reason
    }

    /// The step after the current one (1-based), nil when the last one is published.
    public var nextStep: Int? { reached < stepCount ? reached + 1 : nil }

    /// Every step: the percentages, then the enforcements.
    public var stepCount: Int { steps.count + enforcements.count }

    /// Step `n` (1-based) in words: `25%`, `enforce firestore.googleapis.com`.
    public func stepText(_ n: Int) -> String {
        n <= steps.count ? "\(steps[n - 1])" : "enforce \(enforcements[n - steps.count - 1])"
    }
}

/// The plan panel: beside the log when a plan is stored. Its lines: the plan and its step, the countdown, what it
/// waits for, each gate (unmet first) with its value and threshold, and the plan's keys.
enum PlanPanel {
    /// Splits `area` (the log's) into the log and the plan panel when the model has a plan.
    static func split(_ area: Rect, _ m: ConsoleModel) -> (log: Rect, plan: Rect?) {
        guard m.plan != nil, area.width >= 60, area.height >= 5 else { return (area, nil) }
        let (log, plan) = area.splitLeft(area.width / 2)
        return (log, plan)
    }

    static func render(_ m: ConsoleModel, into grid: inout Grid, area: Rect) {
        guard let p = m.plan else { return }
        let inner = Frame(title: [Span("Plan", .title)], status: [Span(p.name, .muted)]).render(into: &grid, area: area)
        grid.draw(lines(p, width: inner.width, rows: inner.height), in: inner)
    }

    static func phase(_ phase: RampState.Phase) -> Span {
        switch phase {
        case .running: Span("▶ running", .ok, .bold)
        case .paused: Span("‖ paused", .warn, .bold)
        case .killed: Span("✗ killed", .bad, .bold)
        case .aborted: Span("■ aborted", .muted, .bold)
        case .done: Span("✓ done", .ok, .bold)
        }
    }

    static func lines(_ p: PlanInfo, width: Int, rows: Int) -> [Line] {
        var out: [Line] = []
        let at = p.reached == 0 ? "not started" : "step \(p.reached)/\(p.stepCount) \(p.stepText(p.reached))"
        var first: Line = [phase(p.phase), Span("  " + at, .text)]
        if let n = p.nextStep {
            first += [Span(" → ", .muted), Span("\(n): \(p.stepText(n))", .accent)]
            if p.preApproved.contains(n) { first.append(Span(" pre-approved", .muted)) }
        }
        out.append(first)
        var clock: Line = []
        if let hold = p.countdown.hold {
            clock += [Span("hold ", .muted), Span(Format.duration(hold), .text), Span(" left", .muted)]
        }
        if let ok = p.countdown.okFor {
            if !clock.isEmpty { clock.append(Span(" · ", .muted)) }
            clock += [Span("ok-for ", .muted), Span(Format.duration(ok), .text), Span(" left", .muted)]
        }
        if !clock.isEmpty { out.append(clock) }
        let why = p.phase == .running ? p.next : (p.reason.isEmpty ? p.next : p.reason)
        out.append([Span(Format.truncate(why, width), p.phase == .running ? .text : .warn)])
        // Unmet gates first: what the plan waits for.
        let gates = p.gates.filter { !$0.met } + p.gates.filter(\.met)
        let keys = keyLine(p)
        let room = max(0, rows - out.count - (keys.isEmpty ? 0 : 1))
        for g in gates.prefix(room) {
            let text = "\(g.gate) \(g.value) (needs \(g.required))"
            out.append([
                Span(g.met ? "✓ " : "✗ ", g.met ? .ok : .warn), Span(Format.truncate(text, max(1, width - 2)), .text),
            ])
        }
        while out.count < rows - 1, !keys.isEmpty { out.append([]) }
        if !keys.isEmpty, rows > out.count { out.append(keys) }
        return Array(out.prefix(rows))
    }

    /// The plan's keys, as they apply to its phase.
    static func keyLine(_ p: PlanInfo) -> Line {
        var line: Line = []
        switch p.phase {
        case .running: line += [Span("x", .key, .bold), Span(" pause", .muted)]
        case .paused: line += [Span("x", .key, .bold), Span(" resume", .muted)]
        case .killed, .aborted, .done: return []
        }
        if let n = p.nextStep {
            line += [Span("  ", .muted), Span("X", .key, .bold), Span(" skip to \(p.steps[n - 1])", .muted)]
        }
        return line
    }
}
