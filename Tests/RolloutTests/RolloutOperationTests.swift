import Foundation
import JSON
import RemoteConfig
import Rollout
import Testing
import TestSupport

struct RolloutOperationTests {
    static func fresh(_ form: RemoteConfigTemplate.Form = .client) throws -> RemoteConfigTemplate {
        try RolloutPlan.initialTemplate(seed: "rollout-2026", form: form)
    }

    static func pct(_ s: String) -> MicroPercent { try! MicroPercent.parse(s, allowSign: true) }

    @Test(arguments: [RemoteConfigTemplate.Form.client, .server])
    func initialTemplateIsPresentButNotStarted(form: RemoteConfigTemplate.Form) throws {
        let t = try Self.fresh(form)
        let plan = try #require(try RolloutPlan.locate(in: t))
        #expect(plan.state == .notStarted)
        #expect(plan.percentage == .zero)
        #expect(plan.seed == "rollout-2026")
        #expect(plan.hasControl && plan.hasCohortParameter)
        #expect(t.parameter("AppAttestEnabled")?.defaultValue == .value("false"))
        #expect(t.parameter("AppAttestEnabled")?.valueType == "BOOLEAN")
        #expect(t.form == form)
        // Nobody gets the flag, not even percentile 0.
        let e = TemplateEvaluator(t)
        for i in 0..<2000 {
            #expect(e.value(of: "AppAttestEnabled", for: EvaluationContext(randomizationId: "inst-\(i)")).value == "false")
        }
    }

    @Test func setWritesExposedAndControlBandsAndCohorts() throws {
        let change = try RolloutPlan.apply(.set(Self.pct("12.5")), to: try Self.fresh(), newSeed: "unused")
        #expect(change.after.state == .rolling)
        #expect(change.after.percentage == Self.pct("12.5"))
        let t = change.template
        #expect(t.condition(named: "app_attest_rollout")?.displayText == "percent('rollout-2026') <= 12.5")
        #expect(t.condition(named: "app_attest_control")?.displayText == "percent('rollout-2026') between 50 and 62.5")
        #expect(change.summary == "AppAttestEnabled 0% → 12.5% (+12.5 points), rolling")
        #expect(change.diff.contains { $0.contains("app_attest_rollout") && $0.contains("<= 12.5") })
        // Every id gets the cohort its percentile says, and the flag agrees with the cohort.
        let e = TemplateEvaluator(t)
        let hasher = PercentileHasher(seed: "rollout-2026")
        var counts: [String: Int] = [:]
        for i in 0..<20_000 {
            let id = "inst-\(i)"
            let p = hasher.microPercentile(of: id)
            let values = e.values(of: ["AppAttestEnabled", "AppAttestCohort"], for: EvaluationContext(randomizationId: id))
            let expected = p <= 12_500_000 ? "enabled" : (p > 50_000_000 && p <= 62_500_000) ? "control" : "none"
            #expect(values[1].value == expected)
            #expect(values[0].value == (expected == "enabled" ? "true" : "false"))
            counts[expected, default: 0] += 1
        }
        #expect(abs(Double(counts["enabled"]!) / 20_000 - 0.125) < 0.01)
        #expect(abs(Double(counts["control"]!) / 20_000 - 0.125) < 0.01)
    }

    @Test func controlBandAboveFiftyAndAtHundred() {
        #expect(RolloutPlan.controlBand(Self.pct("50")).description == "(50, 100]")
        #expect(RolloutPlan.controlBand(Self.pct("60")).description == "(60, 100]")
        #expect(RolloutPlan.controlBand(.hundred).isEmpty)
        #expect(RolloutPlan.controlBand(Self.pct("10")).description == "(50, 60]")
    }

    @Test func raisingTheThresholdOnlyAddsAndControlNeverBecomesLessExposed() throws {
        let hasher = PercentileHasher(seed: "rollout-2026")
        let percentiles = (0..<5000).map { hasher.microPercentile(of: "inst-\($0)") }
        var previous: [Cohort]? = nil
        for n in stride(from: 0, through: 100, by: 5) {
            var plan = try #require(try RolloutPlan.locate(in: RolloutPlan.apply(.set(MicroPercent(percent: Int64(n))), to: Self.fresh(), newSeed: "x").template))
            plan.state = .rolling
            let cohorts = percentiles.map { plan.cohort(ofPercentile: $0) }
            if let previous {
                for (old, new) in zip(previous, cohorts) {
                    // Allowed moves: stay, none → any, control → enabled. Never out of exposure.
                    #expect(old == new || old == .none || (old == .control && new == .enabled), "\(old) → \(new) at \(n)%")
                }
            }
            previous = cohorts
        }
    }

    @Test func nudgeIsExactInMicroPercent() throws {
        var t = try Self.fresh()
        for _ in 0..<3 { t = try RolloutPlan.apply(.nudge(Self.pct("+0.1")), to: t, newSeed: "x").template }
        #expect(try RolloutPlan.locate(in: t)?.percentage == Self.pct("0.3"))
        t = try RolloutPlan.apply(.nudge(Self.pct("+10.000001")), to: t, newSeed: "x").template
        #expect(try RolloutPlan.locate(in: t)?.percentage == MicroPercent(10_300_001))
        #expect(t.condition(named: "app_attest_rollout")?.displayText == "percent('rollout-2026') <= 10.300001")
    }

    @Test func nudgeOutOfRangeIsRefused() throws {
        let t = try RolloutPlan.apply(.set(Self.pct("98")), to: try Self.fresh(), newSeed: "x").template
        #expect(throws: RolloutError.self) { try RolloutPlan.apply(.nudge(Self.pct("+5")), to: t, newSeed: "x") }
        #expect(throws: RolloutError.self) { try RolloutPlan.apply(.nudge(Self.pct("-99")), to: t, newSeed: "x") }
        #expect(throws: RolloutError.self) { try RolloutPlan.apply(.set(MicroPercent(100_000_001)), to: t, newSeed: "x") }
    }

    @Test func killKeepsThePercentageAndResumeRestoresIt() throws {
        let rolling = try RolloutPlan.apply(.set(Self.pct("25")), to: try Self.fresh(), newSeed: "x").template
        let killed = try RolloutPlan.apply(.kill, to: rolling, newSeed: "x")
        #expect(killed.after.state == .killed && killed.after.percentage == Self.pct("25"))
        #expect(killed.summary == "AppAttestEnabled killed at 25%")
        let e = TemplateEvaluator(killed.template)
        for i in 0..<3000 {
            let v = e.values(of: ["AppAttestEnabled", "AppAttestCohort"], for: EvaluationContext(randomizationId: "inst-\(i)"))
            #expect(v[0].value == "false" && v[1].value == "none")
        }
        let resumed = try RolloutPlan.apply(.resume, to: killed.template, newSeed: "x")
        #expect(resumed.after.state == .rolling && resumed.after.percentage == Self.pct("25"))
        #expect(TemplateDiff.lines(from: rolling, to: resumed.template).isEmpty)
        // Idempotent like kill: resuming a rolling rollout changes nothing.
        let again = try RolloutPlan.apply(.resume, to: rolling, newSeed: "x")
        #expect(again.after.state == .rolling && TemplateDiff.lines(from: rolling, to: again.template).isEmpty)
    }

    @Test func setToZeroStopsEvenPercentileZero() throws {
        let rolling = try RolloutPlan.apply(.set(Self.pct("5")), to: try Self.fresh(), newSeed: "x").template
        let stopped = try RolloutPlan.apply(.set(.zero), to: rolling, newSeed: "x")
        #expect(stopped.after.state == .notStarted)
        #expect(stopped.template.parameter("AppAttestEnabled")?.conditionalValue("app_attest_rollout") == .value("false"))
    }

    @Test func seedChangesAreRefusedDuringARollout() throws {
        let rolling = try RolloutPlan.apply(.set(Self.pct("5")), to: try Self.fresh(), newSeed: "x").template
        #expect(throws: RolloutError.self) { try RolloutPlan.apply(.reseed("other"), to: rolling, newSeed: "x") }
        let reseeded = try RolloutPlan.apply(.reseed("other"), to: try Self.fresh(), newSeed: "x")
        #expect(reseeded.after.seed == "other")
        #expect(reseeded.template.condition(named: "app_attest_control")?.displayText.contains("'other'") == true)
    }

    @Test func expectedCurrentValueIsChecked() throws {
        let t = try RolloutPlan.apply(.set(Self.pct("10")), to: try Self.fresh(), newSeed: "x").template
        #expect(throws: RolloutError.unexpectedCurrent(expected: Self.pct("20"), actual: Self.pct("10"))) {
            try RolloutPlan.apply(.set(Self.pct("25"), expected: Self.pct("20")), to: t, newSeed: "x")
        }
        #expect(try RolloutPlan.apply(.set(Self.pct("25"), expected: Self.pct("10")), to: t, newSeed: "x").after.percentage == Self.pct("25"))
    }

    /// The shared vector template has only the exposed condition; the first write adds control and cohort and
    /// leaves everything else (including fields rollout does not know) as it was.
    @Test func findsAndCompletesAnExistingServerRollout() throws {
        let text = try String(contentsOf: TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json"), encoding: .utf8)
        var json = try JSONParser().parse(text).objectValue!
        json["futureField"] = ["kept": true]
        let template = try RemoteConfigTemplate(json: .object(json))
        let plan = try #require(try RolloutPlan.locate(in: template))
        #expect(plan.percentage == MicroPercent(10_000_000) && plan.seed == "rollout-2026" && plan.state == .rolling)
        #expect(!plan.hasControl && !plan.hasCohortParameter)
        let change = try RolloutPlan.apply(.nudge(Self.pct("+2")), to: template, newSeed: "unused")
        #expect(change.template.json["futureField"] == ["kept": true])
        #expect(change.template.form == .server)
        let percent = change.template.json["conditions"]?.arrayValue?[0]["condition"]?["orCondition"]?["conditions"]?.arrayValue?[0]["andCondition"]?["conditions"]?.arrayValue?[0]["percent"]
        #expect(percent?["microPercent"] == .number(JSONNumber(12_000_000)))
        #expect(change.diff.contains { $0.hasPrefix("+ condition app_attest_control") })
        #expect(change.diff.contains { $0.hasPrefix("+ parameter AppAttestCohort") })
    }

    /// A compound client condition: only the number changes, the rest of the expression is kept verbatim.
    @Test func editsOnlyTheNumberInACompoundExpression() throws {
        let doc: JSONValue = [
            "conditions": [
                ["name": "qa", "expression": "device.os == 'ios' && app.userProperty['qa'].exactlyMatches(['yes'])", "tagColor": "GREEN"],
                ["name": "app_attest_rollout", "expression": "device.os == 'ios'   &&  percent('s1') <= 7.25", "tagColor": "ORANGE"],
            ],
            "parameters": [
                "AppAttestEnabled": ["defaultValue": ["value": "false"], "conditionalValues": ["qa": ["value": "true"], "app_attest_rollout": ["value": "true"]]]
            ],
            "parameterGroups": ["g": ["description": "kept", "parameters": ["Other": ["defaultValue": ["value": "1"]]]]],
            "version": ["versionNumber": "7"],
        ]
        let t = try RemoteConfigTemplate(json: doc)
        let change = try RolloutPlan.apply(.set(Self.pct("8")), to: t, newSeed: "x")
        #expect(change.template.condition(named: "app_attest_rollout")?.displayText == "device.os == 'ios'   &&  percent('s1') <= 8")
        #expect(change.template.condition(named: "qa")?.json == t.condition(named: "qa")?.json)
        #expect(change.template.json["parameterGroups"] == doc["parameterGroups"])
        #expect(change.template.conditions.map(\.name) == ["qa", "app_attest_rollout", "app_attest_control"])
    }
}
