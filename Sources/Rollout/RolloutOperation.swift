import JSON
import RemoteConfig

/// A change to the rollout an operator asks for.
public enum RolloutOperation: Hashable, Sendable, CustomStringConvertible {
    /// Set the percentage; with `expected`, only if the rollout is currently at that value.
    case set(MicroPercent, expected: MicroPercent? = nil)
    /// Move the percentage by a signed amount.
    case nudge(MicroPercent)
    /// Turn the flag off for everyone, keeping the percentage for `resume`.
    case kill
    /// Undo a kill.
    case resume
    /// Choose a new seed (only before the rollout has started).
    case reseed(String)

    public var name: String {
        switch self {
        case .set: "set"
        case .nudge: "nudge"
        case .kill: "kill"
        case .resume: "resume"
        case .reseed: "reseed"
        }
    }

    public var description: String {
        switch self {
        case .set(let n, let e): "set \(n.decimalText)" + (e.map { " (expecting \($0))" } ?? "")
        case .nudge(let d): "nudge \(d.signedText)"
        case .kill: "kill"
        case .resume: "resume"
        case .reseed(let s): "reseed '\(s)'"
        }
    }
}

/// The result of applying an operation: the new template and what changes, in words.
public struct RolloutChange: Hashable, Sendable {
    public var before: RolloutPlan?
    public var after: RolloutPlan
    public var template: RemoteConfigTemplate
    /// One line: `AppAttestEnabled 10% → 12.5% (+2.5 points)`.
    public var summary: String
    /// The template diff, one change per line.
    public var diff: [String]

    public var isNoChange: Bool { diff.isEmpty }
}

extension RolloutPlan {
    /// Applies `operation` to `template`, creating the rollout (conditions and cohort parameter) when needed.
    ///
    /// Pure: the new template is returned, nothing is written. `newSeed` is used only when the template has no
    /// rollout yet (the caller draws it at random). Percentages are checked to be within 0 to 100; a seed change
    /// while anyone is exposed, a resume that is not after a kill and an unexpected current value are refused.
    public static func apply(
        _ operation: RolloutOperation, to template: RemoteConfigTemplate, names: RolloutNames = .standard,
        newSeed: @autoclosure () -> String
    ) throws(RolloutError) -> RolloutChange {
        let before = try locate(in: template, names: names)
        var working = template
        var plan: RolloutPlan
        if let before {
            plan = before
        } else {
            working = try create(in: template, names: names, seed: newSeed())
            plan = try locate(in: working, names: names)!
        }
        let current = plan.percentage
        switch operation {
        case .set(let target, let expected):
            if let expected, expected != current { throw .unexpectedCurrent(expected: expected, actual: current) }
            try check(target, what: "target")
            plan = transition(plan, to: target)
        case .nudge(let delta):
            let target = current + delta
            guard target.isValidPercentage else {
                throw .invalidPercentage(
                    "nudge \(delta.signedText) from \(current) would reach \(target); the percentage must stay within 0 and 100")
            }
            plan = transition(plan, to: target)
        case .kill:
            if plan.state == .rolling { plan.state = .killed }
        case .resume:
            // Idempotent like kill: resuming a rolling rollout changes nothing (and publishes nothing).
            guard plan.state != .notStarted else { throw .notKilled(plan.state) }
            plan.state = .rolling
        case .reseed(let seed):
            guard !seed.isEmpty else { throw .template("a seed must not be empty") }
            if seed != plan.seed, plan.state != .notStarted {
                throw .seedChangeDuringRollout(current: plan.seed, requested: seed, percentage: plan.percentage)
            }
            plan.seed = seed
        }
        let updated = try write(plan, into: working, reseed: operation)
        let after = try locate(in: updated, names: names)!
        return RolloutChange(
            before: before, after: after, template: updated, summary: summary(before: before, after: after),
            diff: TemplateDiff.lines(from: template, to: updated))
    }

    private static func check(_ n: MicroPercent, what: String) throws(RolloutError) {
        guard n.isValidPercentage else { throw .invalidPercentage("the \(what) \(n) is outside 0 to 100") }
    }

    /// The state after moving to `target`: 0% means not started (a true `<= 0%` would still match percentile 0);
    /// moving up from not started starts rolling; a killed rollout stays killed until resumed.
    private static func transition(_ plan: RolloutPlan, to target: MicroPercent) -> RolloutPlan {
        var p = plan
        p.percentage = target
        switch (plan.state, target == .zero) {
        case (_, true): p.state = .notStarted
        case (.notStarted, false): p.state = .rolling
        default: break
        }
        return p
    }

    /// What stays true after a kill: the exposure of `template` with the rollout's condition serving `"false"`
    /// (the template itself when it has no rollout yet).
    public static func servedPastKill(_ template: RemoteConfigTemplate, names: RolloutNames = .standard, seed: String)
        -> Exposure
    {
        var killed = template
        let values = template.parameter(names.parameter)?.json["conditionalValues"]?.objectValue
        if values?[names.exposedCondition] != nil {
            killed.setConditionalValue(names.parameter, condition: names.exposedCondition, to: "false")
        }
        return Exposure.of(names.parameter, in: killed, seed: seed)
    }

    /// The rollout controls who gets the flag through its condition alone: a flag that something else serves as
    /// `"true"` (its default, another condition's value) would stay on past a kill and at 0%. `init` refuses to
    /// adopt such a template, and every publish refuses to make one (`WritePath`); `unless` is what the current
    /// version already leaves on, which a change may keep or narrow (a kill of such a version must still publish)
    /// but not widen.
    public static func requireKillStopsEveryone(
        _ template: RemoteConfigTemplate, names: RolloutNames = .standard, seed: String, unless already: Exposure
    ) throws(RolloutError) {
        let served = servedPastKill(template, names: names, seed: seed)
        guard served.possible > .zero, served.possible > already.possible || served.certain > already.certain else { return }
        throw RolloutError.notSetUp(
            "\(names.parameter) is already \"true\" for \(served) of installations (its default value or another "
                + "condition's value); a rollout can only control who gets it when nothing else serves \"true\": "
                + "set those values to \"false\" in the template first")
    }

    /// Adds the flag, the exposed condition (at 0%, not started) and nothing else; `write` adds the rest.
    static func create(in template: RemoteConfigTemplate, names: RolloutNames, seed: String) throws(RolloutError)
        -> RemoteConfigTemplate
    {
        var t = template
        if t.parameter(names.parameter) != nil {
            try requireKillStopsEveryone(template, names: names, seed: seed, unless: .none)
        }
        do {
            if t.condition(named: names.exposedCondition) == nil {
                try t.insertCondition(
                    name: names.exposedCondition, node: .percent(PercentTerm(.lessOrEqual(.zero), seed: seed)), tagColor: "ORANGE")
            } else {
                throw RolloutError.notSetUp(
                    "condition '\(names.exposedCondition)' exists but \(names.parameter) has no value for it; fix the template or choose other names")
            }
        } catch let e as RolloutError {
            throw e
        } catch {
            throw .template("\(error)")
        }
        if t.parameter(names.parameter) == nil {
            t.setParameterJSON(
                names.parameter,
                [
                    "defaultValue": ["value": "false"], "valueType": "BOOLEAN",
                    "description": "App Attest for App Check, rolled out by percentile (managed by rollout)",
                ])
        }
        t.setConditionalValue(names.parameter, condition: names.exposedCondition, to: "false")
        return t
    }

    /// Writes a plan into a template: the exposed percentage, the flag value, the control band and the cohort
    /// parameter. Everything else in the template is left as it was.
    static func write(_ plan: RolloutPlan, into template: RemoteConfigTemplate, reseed: RolloutOperation) throws(RolloutError)
        -> RemoteConfigTemplate
    {
        var t = template
        let names = plan.names
        do {
            let seedChanged: Bool = if case .reseed = reseed { true } else { false }
            if seedChanged {
                try t.replaceSeed(in: names.exposedCondition, termIndex: plan.percentTermIndex, seed: plan.seed)
            }
            try t.replacePercent(in: names.exposedCondition, termIndex: plan.percentTermIndex, with: .lessOrEqual(plan.percentage))
            let band = plan.controlBand
            let controlTerm = PercentTerm(.between(band.lower, max(band.upper, band.lower)), seed: plan.seed)
            if t.condition(named: names.controlCondition) == nil {
                let after = (t.conditionIndex(named: names.exposedCondition) ?? -1) + 1
                try t.insertCondition(name: names.controlCondition, node: .percent(controlTerm), at: after, tagColor: "BLUE")
            } else {
                if seedChanged { try t.replaceSeed(in: names.controlCondition, termIndex: 0, seed: plan.seed) }
                try t.replacePercent(in: names.controlCondition, termIndex: 0, with: controlTerm.op)
            }
        } catch {
            throw .template("\(error)")
        }
        let rolling = plan.state == .rolling
        t.setConditionalValue(names.parameter, condition: names.exposedCondition, to: rolling ? "true" : "false")
        if t.parameter(names.cohortParameter) == nil {
            t.setParameterJSON(
                names.cohortParameter,
                [
                    "defaultValue": ["value": "none"], "valueType": "STRING",
                    "description": "Rollout cohort for analytics: enabled / control / none (managed by rollout)",
                ])
        }
        t.setConditionalValue(names.cohortParameter, condition: names.exposedCondition, to: rolling ? Cohort.enabled.rawValue : Cohort.none.rawValue)
        t.setConditionalValue(names.cohortParameter, condition: names.controlCondition, to: rolling ? Cohort.control.rawValue : Cohort.none.rawValue)
        return t
    }

    /// `AppAttestEnabled 10% → 12.5% (+2.5 points)`, `AppAttestEnabled killed at 25%`, ...
    public static func summary(before: RolloutPlan?, after: RolloutPlan) -> String {
        let key = after.names.parameter
        guard let before else { return "\(key): rollout created at \(after.percentage) (\(after.state.rawValue))" }
        if before.state != after.state, before.percentage == after.percentage {
            switch after.state {
            case .killed: return "\(key) killed at \(after.percentage)"
            case .rolling: return "\(key) resumed at \(after.percentage)"
            case .notStarted: return "\(key) stopped at \(after.percentage)"
            }
        }
        if before.seed != after.seed { return "\(key) seed '\(before.seed)' → '\(after.seed)'" }
        let delta = after.percentage - before.percentage
        var s = "\(key) \(before.percentage) → \(after.percentage) (\(delta.pointsText))"
        if after.state == .killed { s += ", still killed" }
        if before.state != after.state { s += ", \(after.state.rawValue)" }
        return s
    }
}

extension RemoteConfigTemplate {
    /// Sets the seed of a condition's percent term (used only before a rollout starts).
    mutating func replaceSeed(in condition: String, termIndex: Int, seed: String) throws(RolloutError) {
        guard let c = self.condition(named: condition) else { throw .template("no condition '\(condition)'") }
        let terms = c.node.percentTerms
        guard termIndex < terms.count else { throw .template("condition '\(condition)' has no percent term") }
        var node = c.node
        node = node.replacingSeed(at: termIndex, with: seed)
        do {
            let index = conditionIndex(named: condition)!
            var list = json["conditions"]!.arrayValue!
            var entry = list[index].objectValue!
            if entry["expression"] != nil {
                entry["expression"] = .string(ExpressionRenderer.text(node))
            } else {
                entry["condition"] = try ServerCondition.json(of: ServerCondition.canonical(node))
            }
            list[index] = .object(entry)
            var doc = json.objectValue!
            doc["conditions"] = .array(list)
            self = try RemoteConfigTemplate(json: .object(doc), preferredForm: form)
        } catch {
            throw .template("\(error)")
        }
    }
}

extension ConditionNode {
    func replacingSeed(at index: Int, with seed: String) -> ConditionNode {
        var counter = 0
        return replacingSeed(at: index, with: seed, counter: &counter)
    }

    private func replacingSeed(at index: Int, with seed: String, counter: inout Int) -> ConditionNode {
        switch self {
        case .percent(var p):
            defer { counter += 1 }
            if counter == index { p.seed = seed }
            return .percent(p)
        case .not(let c): return .not(c.replacingSeed(at: index, with: seed, counter: &counter))
        case .and(let cs):
            var out: [ConditionNode] = []
            for c in cs { out.append(c.replacingSeed(at: index, with: seed, counter: &counter)) }
            return .and(out)
        case .or(let cs):
            var out: [ConditionNode] = []
            for c in cs { out.append(c.replacingSeed(at: index, with: seed, counter: &counter)) }
            return .or(out)
        case .constant, .opaque: return self
        }
    }
}

extension RolloutPlan {
    /// The template a new store starts with: the flag (default `"false"`), the exposed and control conditions on
    /// `seed` at 0%, and the cohort parameter — present, not started.
    public static func initialTemplate(names: RolloutNames = .standard, seed: String, form: RemoteConfigTemplate.Form = .client)
        throws(RolloutError) -> RemoteConfigTemplate
    {
        let created = try create(in: .empty(form: form), names: names, seed: seed)
        let plan = try locate(in: created, names: names)!
        return try write(plan, into: created, reseed: .kill)
    }
}
