import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// Where a running plan is. Kept in the store; changed only by compare-and-swap on its revision.
public struct RampState: Hashable, Sendable {
    public enum Phase: String, Hashable, Sendable, CaseIterable {
        case running, paused, aborted, killed, done
        /// No runner acts on the plan any more.
        public var isFinal: Bool { self == .aborted || self == .killed || self == .done }
    }

    public var phase: Phase
    /// How many steps have been published (0: none yet); the current step is `steps[reached - 1]`.
    public var reached: Int
    /// Telemetry time from which the current step's hold and timeout count: its publish, or a resume after its hold
    /// (`RampPlan.resumed`).
    public var reachedAt: Instant?
    /// Since when the verdict has been OK without a break (telemetry time; nil: not OK at the last look).
    public var okSince: Instant?
    /// Why the plan is paused, aborted, killed or done.
    public var reason: String

    public init(
        phase: Phase = .running, reached: Int = 0, reachedAt: Instant? = nil, okSince: Instant? = nil,
        reason: String = ""
    ) {
        self.phase = phase
        self.reached = reached
        self.reachedAt = reachedAt
        self.okSince = okSince
        self.reason = reason
    }
}

/// What the plan is judged on at one look: the one assessment and the rollout it was computed for.
public struct RampObservation: Sendable {
    public var level: VerdictLevel
    public var reason: String
    /// The rollout as published (nil: the template holds no rollout).
    public var rollout: RolloutPlan?
    public var exposedUsers: Int64
    public var exposedSessions: Int64
    /// Share of active devices on the newest version (nil: no activity seen).
    public var propagation: Double?
    public var attestationsPerSecond: Double
    public var budgetPerSecond: Double

    public init(
        level: VerdictLevel, reason: String, rollout: RolloutPlan?, exposedUsers: Int64 = 0, exposedSessions: Int64 = 0,
        propagation: Double? = nil, attestationsPerSecond: Double = 0, budgetPerSecond: Double = 100
    ) {
        self.level = level
        self.reason = reason
        self.rollout = rollout
        self.exposedUsers = exposedUsers
        self.exposedSessions = exposedSessions
        self.propagation = propagation
        self.attestationsPerSecond = attestationsPerSecond
        self.budgetPerSecond = budgetPerSecond
    }

    /// Reads the figures the gates need from the one assessment (`RolloutMonitor.status()`), nothing else.
    public init(assessment: Assessment, snapshot: TelemetrySnapshot, rollout: RolloutPlan?) {
        self.init(
            level: assessment.verdict.level, reason: assessment.verdict.reason, rollout: rollout,
            exposedUsers: snapshot.crash.totals.exposedUsers, exposedSessions: snapshot.crash.totals.exposedSessions,
            propagation: assessment.exposure.propagation,
            attestationsPerSecond: snapshot.observedAttestationsPerSecond.perSecond,
            budgetPerSecond: assessment.context.budget.perSecond)
    }

    /// The exposed percentage as published (0 when killed or not started).
    public var exposed: MicroPercent { rollout.map { $0.state == .rolling ? $0.percentage : .zero } ?? .zero }
}

/// One gate at one look: what it needs, what it sees, whether it passes.
public struct GateReading: Hashable, Sendable, CustomStringConvertible {
    public var gate: String
    public var required: String
    public var value: String
    public var met: Bool
    public var description: String { "\(gate) \(value) (needs \(required))\(met ? "" : " ✗")" }

    public init(gate: String, required: String, value: String, met: Bool) {
        self.gate = gate
        self.required = required
        self.value = value
        self.met = met
    }
}

/// What a runner does next.
public enum RampAction: Hashable, Sendable {
    /// Nothing now: the step's hold or gates (each with its value), or the verdict, say wait.
    case wait(String, gates: [GateReading])
    /// Publish step `step` (1-based) at `target`, with `reason` as the change's reason.
    case advance(step: Int, target: MicroPercent, reason: String)
    /// Stop advancing until an operator resumes; `alert` when a person must look (timeout, changed outside).
    case pause(String, alert: Bool)
    /// Set `service` ENFORCED (step `step`, 1-based, counted after the percentage steps), with `reason`.
    case enforce(step: Int, service: String, reason: String)
    /// Publish a kill (the verdict is HALT and the plan says kill).
    case kill(String)
    /// The last step is published.
    case done(String)
    /// The plan is paused, aborted, killed or done: nothing to do.
    case idle(RampState.Phase)
}

extension RampAction {
    /// What a person reading a line per change must be told about (the headless loop prints when it differs): a
    /// wait by its kind (holding, a verdict, a window, the gates) and the gates not met, never the figures that
    /// move on every look (the hold's time left, a gate's OK streak or count); every other action whole.
    public var changeKey: String {
        guard case .wait(let why, let gates) = self else { return "\(self)" }
        let kind = why.prefix { $0 != " " }
        return "wait \(kind) " + gates.filter { !$0.met }.map(\.gate).joined(separator: ",")
    }
}

/// The decision and the state to store with it (the OK streak moves on every look).
public struct RampDecision: Hashable, Sendable {
    public var action: RampAction
    public var state: RampState
    public init(action: RampAction, state: RampState) {
        self.action = action
        self.state = state
    }
}

extension RampPlan {
    /// Every step: the percentages, then the services to enforce.
    public var stepCount: Int { steps.count + enforcements.count }

    /// What step `step` (1-based) does, in words: `25%`, `enforce firestore.googleapis.com`.
    public func stepText(_ step: Int) -> String {
        step <= steps.count ? "\(steps[step - 1].target)" : "enforce \(enforcements[step - steps.count - 1])"
    }

    /// The reason recorded with step `step`'s change: `plan 'ramp' step 3/5: 25%`.
    public func reason(step: Int) -> String { "plan '\(name)' step \(step)/\(stepCount): \(stepText(step))" }

    /// The one decision of a plan (pure): given its state, the one assessment and the telemetry time `now`.
    ///
    /// In order: a final or paused plan is idle (a paused plan still kills on HALT); a next step found published already is adopted (a restart, or
    /// another runner that won the race); a rollout killed or changed outside the plan pauses it (a kill on
    /// HALT is the plan's own kill);
    /// the verdict's action (HALT → kill or pause, WATCH → pause or wait, HOLD → wait or pause) while anyone is
    /// exposed; the step's timeout; then the step's hold and gates, and when all pass, the next step (or done
    /// when the last step is published). The first step waits only for its time-of-day window (nobody is exposed
    /// yet, so there is nothing to judge; the guardrail of the write path still judges the change).
    public func decide(_ state: RampState, _ o: RampObservation, now: Instant) -> RampDecision {
        var next = state
        // A paused plan still kills on HALT while it exposes anyone: pausing stops advances, not the guard.
        if state.phase == .paused, state.reached > 0, o.rollout?.state == .rolling, o.level == .halt,
            actions.onHalt == .kill
        {
            return RampDecision(action: .kill("\(o.level): \(o.reason)"), state: state)
        }
        guard state.phase == .running else { return RampDecision(action: .idle(state.phase), state: state) }
        next.okSince = o.level == .ok ? (state.okSince ?? now) : nil
        func decision(_ a: RampAction) -> RampDecision { RampDecision(action: a, state: next) }

        if state.reached >= stepCount { return decision(.done("all \(stepCount) steps published")) }
        // The next step is published already: by another runner that has not stored its state yet, or by this
        // plan just before a restart. Adopt it and hold it from now.
        if state.reached < steps.count, o.rollout?.state == .rolling, o.exposed == steps[state.reached].target {
            next.reached = state.reached + 1
            next.reachedAt = now
            let step = steps[state.reached]
            return decision(
                .wait("step \(next.reached) (\(step.target)) is published; holding it from now", gates: []))
        }
        // A killed rollout is never published over (a first step would end the kill): the plan pauses for a person,
        // or ends killed on a HALT it kills on.
        if o.rollout?.state == .killed {
            if o.level == .halt, actions.onHalt == .kill { return decision(.kill("\(o.level): \(o.reason)")) }
            return decision(
                .pause(
                    "the rollout was killed outside the plan" + (state.reached == 0 ? " before its first step" : ""),
                    alert: true))
        }
        if state.reached > 0 {
            // An enforcement step holds the last percentage step: its exposure, verdict actions, hold and gates.
            let current = steps[min(state.reached, steps.count) - 1]
            if o.exposed != current.target {
                return decision(
                    .pause(
                        "the rollout is at \(o.exposed), not at step \(min(state.reached, steps.count))'s \(current.target): changed outside the plan",
                        alert: true))
            }
            let verdictAction: RampActions.OnVerdict? =
                switch o.level {
                case .ok: nil
                case .watch: actions.onWatch
                case .hold: actions.onHold
                case .halt: actions.onHalt
                }
            switch verdictAction {
            case .kill?: return decision(.kill("\(o.level): \(o.reason)"))
            case .pause?: return decision(.pause("\(o.level): \(o.reason)", alert: true))
            case .wait?, nil: break
            }
            let since = state.reachedAt ?? now
            // The OK streak counts at this step only.
            let gates = readings(current, o, okSince: next.okSince.map { max($0, since) }, now: now)
            let held = now - since >= current.hold
            if held, o.level == .ok, gates.allSatisfy(\.met) { return decision(advance(from: state.reached)) }
            if let timeout = current.timeout, now - since >= current.hold + timeout {
                return decision(
                    .pause(
                        "timeout: step \(min(state.reached, steps.count)) (\(current.target)) has not passed its gates within "
                            + "\((current.hold + timeout).compactText)", alert: true))
            }
            let why: String
            if o.level != .ok {
                why = "\(o.level): \(o.reason)"
            } else if !held {
                why =
                    "holding \(current.target) until \((since + current.hold).iso8601) (\((since + current.hold - now).compactText) left)"
            } else {
                why = "gates: " + gates.filter { !$0.met }.map(\.description).joined(separator: "; ")
            }
            return decision(.wait(why, gates: gates))
        }
        // Nothing published yet.
        if let window = steps[0].gates.window, !window.contains(now) {
            let reading = GateReading(gate: "window", required: window.description, value: now.iso8601, met: false)
            return decision(.wait("outside the window \(window)", gates: [reading]))
        }
        return decision(advance(from: 0))
    }

    private func advance(from reached: Int) -> RampAction {
        if reached == stepCount { return .done("all \(stepCount) steps published") }
        if reached >= steps.count {
            return .enforce(
                step: reached + 1, service: enforcements[reached - steps.count], reason: reason(step: reached + 1))
        }
        return .advance(step: reached + 1, target: steps[reached].target, reason: reason(step: reached + 1))
    }

    /// Each configured gate of `step` with its value at this look.
    public func readings(_ step: RampStep, _ o: RampObservation, okSince: Instant?, now: Instant) -> [GateReading] {
        var out: [GateReading] = []
        let g = step.gates
        if let d = g.okFor {
            // Never negative: a clock stepped back since the streak began holds it at 0s.
            let streak = okSince.map { max(now - $0, .seconds(Int64(0))) } ?? .seconds(Int64(0))
            out.append(
                GateReading(
                    gate: "ok-for", required: d.compactText,
                    value: okSince == nil ? "not OK (\(o.level))" : "OK for \(streak.compactText)",
                    met: okSince != nil && streak >= d))
        }
        if let n = g.minimumExposedUsers {
            out.append(
                GateReading(gate: "users", required: "≥ \(n)", value: "\(o.exposedUsers)", met: o.exposedUsers >= n))
        }
        if let n = g.minimumExposedSessions {
            out.append(
                GateReading(
                    gate: "sessions", required: "≥ \(n)", value: "\(o.exposedSessions)", met: o.exposedSessions >= n))
        }
        if let p = g.minimumPropagation {
            let share = o.propagation ?? 0
            out.append(
                GateReading(
                    gate: "propagation", required: "≥ \(p)",
                    value: o.propagation.map { Self.percentText($0) } ?? "unknown",
                    met: o.propagation != nil && share * 100_000_000 >= Double(p.value)))
        }
        if let p = g.maximumLoad {
            let share = o.budgetPerSecond > 0 ? o.attestationsPerSecond / o.budgetPerSecond : 1
            out.append(
                GateReading(
                    gate: "load", required: "≤ \(p) of \(Self.fixed(o.budgetPerSecond))/s",
                    value: "\(Self.fixed(o.attestationsPerSecond))/s (\(Self.percentText(share)))",
                    met: share * 100_000_000 <= Double(p.value)))
        }
        if let w = g.window {
            out.append(GateReading(gate: "window", required: w.description, value: now.iso8601, met: w.contains(now)))
        }
        return out
    }

    static func percentText(_ share: Double) -> String {
        let tenths = (share * 1000).rounded()
        return "\(Int64(tenths) / 10).\(Int64(abs(tenths)) % 10)%"
    }

    static func fixed(_ v: Double) -> String {
        let tenths = (v * 10).rounded()
        return "\(Int64(tenths) / 10).\(Int64(abs(tenths)) % 10)"
    }
}

/// How long the current step still has to wait by the clock, as the console's countdown shows it.
public struct RampCountdown: Hashable, Sendable {
    /// What is left of the step's minimum hold (nil: no step published, or the hold is over).
    public var hold: Instant.Duration?
    /// What is left of the ok-for gate's streak if the verdict stays OK (nil: no such gate, or it is met); the
    /// whole duration while the verdict is not OK.
    public var okFor: Instant.Duration?

    public init(hold: Instant.Duration? = nil, okFor: Instant.Duration? = nil) {
        self.hold = hold
        self.okFor = okFor
    }
}

extension RampPlan {
    /// `state` resumed by an operator at `now`: running, its OK streak judged afresh, and a step whose hold is
    /// served gets its timeout afresh from now (its `reachedAt` moves to `now - hold`, never back, so a hold not yet
    /// served goes on as it was). Without that, a plan paused by its timeout would pause again at the next look.
    public func resumed(_ state: RampState, now: Instant) -> RampState {
        var next = state
        next.phase = .running
        next.okSince = nil
        if state.reached > 0, let since = state.reachedAt {
            let hold = steps[min(state.reached, steps.count) - 1].hold
            next.reachedAt = max(since, now - hold)
        }
        return next
    }

    /// The countdown of the current step of `state` at telemetry time `now`, on the same clock and the same streak
    /// rule (counted at this step only) as `decide`.
    public func countdown(_ state: RampState, now: Instant) -> RampCountdown {
        guard state.reached > 0, state.reached <= stepCount, let since = state.reachedAt else {
            return RampCountdown()
        }
        let step = steps[min(state.reached, steps.count) - 1]
        let zero = Instant.Duration.seconds(Int64(0))
        let holdLeft = since + step.hold - now
        var okLeft: Instant.Duration?
        if let d = step.gates.okFor {
            let streak = state.okSince.map { now - max($0, since) } ?? zero
            let left = Instant.Duration(microseconds: d.microseconds - streak.microseconds)
            okLeft = left > zero ? left : nil
        }
        return RampCountdown(hold: holdLeft > zero ? holdLeft : nil, okFor: okLeft)
    }
}
