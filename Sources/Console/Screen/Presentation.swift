import Rollout
import Telemetry
import Timekeeping

/// Words and symbols for status: every status is spelt out, so nothing depends on colour.
///
/// The one vocabulary of levels, shared with the CLI (`VerdictLevel.symbol` in Telemetry): ✓ OK, ◆ WATCH, ‖ HOLD,
/// ✗ HALT.
extension VerdictLevel {

    public var role: Role {
        switch self {
        case .ok: .ok
        case .watch, .hold: .warn
        case .halt: .alert
        }
    }

    /// `✓ OK`, `✗ HALT`.
    public var label: Span { Span(symbol + " " + description, role, .bold) }
}

extension ConditionInfo {
    /// The rollout's state in words: the core's state, `HELD` while the guardrail holds a rolling rollout.
    public var stateLabel: Span {
        switch state {
        case .notStarted: Span("○ NOT STARTED", .muted, .bold)
        case .rolling: held ? Span("‖ HELD", .warn, .bold) : Span("▶ ROLLING", .ok, .bold)
        case .killed: Span("■ KILLED", .alert, .bold)
        }
    }
}

extension NotableEvent.Severity {
    var symbol: String {
        switch self {
        case .info: "·"
        case .warning: "◆"
        case .critical: "✗"
        }
    }

    var role: Role {
        switch self {
        case .info: .text
        case .warning: .warn
        case .critical: .bad
        }
    }
}

extension ConsoleState.Notice.Kind {
    var symbol: String {
        switch self {
        case .info: "·"
        case .success: "✓"
        case .warning: "!"
        case .error: "✗"
        }
    }

    var role: Role {
        switch self {
        case .info: .text
        case .success: .ok
        case .warning: .warn
        case .error: .bad
        }
    }
}

/// Shared pieces of text.
enum Describe {
    /// `12.5% → 13.5%` with a muted arrow.
    static func change(_ from: RolloutPosition, _ to: RolloutPosition) -> Line {
        [Span(from.text, .text), Span(" → ", .muted), Span(to.text, to.killed ? .bad : .accent)]
    }

    /// Observed exposure against the desired percentage: `11.9% ▼ below`.
    /// The percentage the flag is meant to reach: 0% after a kill. The condition keeps the percentage before it
    /// (which `r` restores, as the state line says), and showing that read as if the kill had not landed.
    static func desired(_ condition: ConditionInfo) -> Line {
        [Span(condition.state == .killed ? "0%" : PercentText.format(condition.desiredMicroPercent), .accent)]
    }

    static func observed(_ condition: ConditionInfo) -> Line {
        guard let observed = condition.observedExposure else { return [Span("–", .muted)] }
        let desired = Double(condition.state == .killed ? 0 : condition.desiredMicroPercent.value) / 1e8
        let tolerance = max(0.001, desired * 0.05)
        var line: Line = [Span(Format.share(observed), .text)]
        if condition.state == .killed, observed > tolerance {
            // Devices that have not fetched the kill yet: on its way down, not a rollout running ahead of plan.
            line.append(Span(" ▼ falling", .muted))
        } else if observed < desired - tolerance {
            line.append(Span(" ▼ below", .muted))
        } else if observed > desired + tolerance {
            line.append(Span(" ▲ above", .warn))
        } else {
            line.append(Span(" ≈", .muted))
        }
        return line
    }

    /// A crash-free share with three decimals, or `–`.
    static func crashFree(_ share: Double?) -> String {
        share.map { Format.share($0, decimals: 3) } ?? "–"
    }

    /// `-0.028 [-0.121, +0.065]`: the estimate (its role telling the direction) and the interval.
    static func difference(_ d: IntervalEstimate?, detail: Bool = true) -> Line {
        guard let d else { return [Span("–", .muted)] }
        let role: Role = d.upper < 0 ? .bad : d.lower > 0 ? .ok : .text
        let line: Line = [
            Span(Format.points(d.estimate, decimals: 3), role, d.upper < 0 ? .bold : []),
            Span(" [" + Format.points(d.lower, decimals: 3) + ", " + Format.points(d.upper, decimals: 3) + "]", .text),
        ]
        return detail ? line + differenceDetail(d) : line
    }

    /// ` 95% worse`: the confidence and, when the interval excludes zero, the direction in words.
    /// ` pp`: the unit of a difference in crash-free users (percentage points), when there is one to show.
    static func pointsUnit(_ d: IntervalEstimate?) -> Line {
        d == nil ? [] : [Span(" pp", .muted)]
    }

    static func differenceDetail(_ d: IntervalEstimate?) -> Line {
        guard let d else { return [] }
        let word = d.upper < 0 ? " worse" : d.lower > 0 ? " better" : ""
        return [Span(" " + Format.fixed(d.confidence * 100, 0) + "%" + word, d.upper < 0 ? .bad : .muted)]
    }

    static func percentOfBudget(_ rate: Double, _ budget: Double?) -> Line {
        guard let budget, budget > 0 else { return [] }
        let share = rate / budget
        return [
            Span("load ", .muted), Span(Format.roughShare(share), share > 1 ? .bad : share > 0.8 ? .warn : .text),
            Span(" of " + Format.rate(budget) + "/min", .muted), share > 1 ? Span(" ▲ over", .bad, .bold) : Span(""),
        ]
    }

    /// Attempts per minute rising or falling: 1-minute rate against the 15-minute rate.
    static func trend(_ a: AttestationInfo) -> Span {
        let now = a.successRate.oneMinute + a.failureRate.oneMinute
        let base = a.successRate.fifteenMinutes + a.failureRate.fifteenMinutes
        guard base > 0 else { return Span("") }
        if now > base * 1.2 { return Span(" ▲ rising", .warn) }
        if now < base * 0.8 { return Span(" ▼ falling", .muted) }
        return Span(" steady", .muted)
    }

    /// No control band: at 100% nobody is left to compare with; at 0% nobody is in either group yet.
    static func noControl(_ c: ConditionInfo) -> String {
        c.desiredMicroPercent >= PercentText.whole ? "none at 100%" : "none yet (0%)"
    }

    static func etag(_ etag: String?) -> String {
        guard let etag else { return "–" }
        return etag.count > 10 ? String(etag.prefix(9)) + "…" : etag
    }
}

extension Line {
    var width: Int { reduce(0) { $0 + $1.width } }
}
