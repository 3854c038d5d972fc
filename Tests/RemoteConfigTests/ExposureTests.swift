import JSON
import RemoteConfig
import Testing

/// What a template does to the flag, measured with the evaluator's rules (`Exposure`): the write path judges every
/// change by it, so an import that serves `"true"` to everyone is a change to 100% whatever the percentage field
/// reads (the "Every door" issue, item 5).
struct ExposureTests {
    static let seed = "rollout-2026"

    /// A client template: `conditions` as (name, expression), the flag's conditional values, its default.
    static func template(
        conditions: [(String, String)], values: [(String, String)], defaultValue: String = "false"
    ) throws -> RemoteConfigTemplate {
        var conditional = JSONObject()
        for (name, value) in values { conditional[name] = ["value": .string(value)] }
        let json: JSONValue = [
            "conditions": .array(conditions.map { ["name": .string($0.0), "expression": .string($0.1)] }),
            "parameters": [
                "AppAttestEnabled": [
                    "defaultValue": ["value": .string(defaultValue)],
                    "conditionalValues": .object(conditional),
                    "valueType": "BOOLEAN",
                ]
            ],
        ]
        return try RemoteConfigTemplate(json: json)
    }

    static func exposure(_ t: RemoteConfigTemplate) -> Exposure { Exposure.of("AppAttestEnabled", in: t, seed: seed) }

    @Test func anOrdinaryRolloutExposesItsPercentage() throws {
        for n in ["0", "0.000001", "5", "12.5", "50", "99.999999", "100"] {
            let t = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= \(n)")], values: [("r", "true")])
            let p = try MicroPercent.parsePercentage(n)
            #expect(Self.exposure(t) == Exposure(certain: p, possible: p), "at \(n)%")
        }
    }

    @Test func aKilledFlagExposesNobody() throws {
        let t = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= 25")], values: [("r", "false")])
        #expect(Self.exposure(t) == .none)
    }

    /// The reproduction: `defaultValue` flipped to `"true"` at 5% was judged "5% → 5%".
    @Test func aDefaultOfTrueExposesEveryoneOutsideTheCondition() throws {
        let t = try Self.template(
            conditions: [("r", "percent('\(Self.seed)') <= 5")], values: [("r", "true")], defaultValue: "true")
        #expect(Self.exposure(t) == Exposure(certain: .hundred, possible: .hundred))
    }

    /// The reproduction's other form: an earlier condition serving `"true"` to a larger band.
    @Test func anEarlierConditionServingTrueCounts() throws {
        let t = try Self.template(
            conditions: [("wide", "percent('\(Self.seed)') <= 40"), ("r", "percent('\(Self.seed)') <= 5")],
            values: [("wide", "true"), ("r", "true")])
        #expect(Self.exposure(t).possible == MicroPercent(percent: 40))
        // A later condition cannot take back what an earlier one serves; one that serves "false" first can.
        let shadowed = try Self.template(
            conditions: [("off", "percent('\(Self.seed)') <= 3"), ("r", "percent('\(Self.seed)') <= 5")],
            values: [("off", "false"), ("r", "true")])
        #expect(Self.exposure(shadowed).possible == MicroPercent(percent: 2))
    }

    @Test func bandsAndNegationsAreMeasuredExactly() throws {
        let t = try Self.template(
            conditions: [
                ("band", "percent('\(Self.seed)') between 10 and 12.5"),
                ("tail", "!(percent('\(Self.seed)') <= 90)"),
            ], values: [("band", "true"), ("tail", "true")])
        #expect(Self.exposure(t).possible == MicroPercent(12_500_000))
        #expect(Self.exposure(t).certain == MicroPercent(12_500_000))
    }

    /// Terms the evaluator cannot decide from the percentile are taken both ways.
    @Test func undecidedTermsGiveARange() throws {
        let t = try Self.template(
            conditions: [("r", "device.os == 'ios' && percent('\(Self.seed)') <= 30")], values: [("r", "true")])
        #expect(Self.exposure(t) == Exposure(certain: .zero, possible: MicroPercent(percent: 30)))
        let otherSeed = try Self.template(
            conditions: [("o", "percent('other') <= 20"), ("r", "percent('\(Self.seed)') <= 5")],
            values: [("o", "true"), ("r", "true")])
        #expect(Self.exposure(otherSeed) == Exposure(certain: MicroPercent(percent: 5), possible: .hundred))
        // The in-app default and any spelling but "true" are the app's default: false.
        let spelled = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= 30")], values: [("r", "TRUE")])
        #expect(Self.exposure(spelled) == .none)
    }

    /// Exact agreement with the evaluator (itself bit-exact with firebase-admin) on the 10,000 vector ids, at each
    /// id's own percentile, on a template that mixes every operator on the seed.
    @Test func everyVectorIdAgreesWithTheEvaluator() throws {
        let rows = try PercentileVectorTests.rows()
        let t = try Self.template(
            conditions: [
                ("off", "percent('\(Self.seed)') between 2 and 3"),
                ("r", "percent('\(Self.seed)') <= 10 || percent('\(Self.seed)') > 97.5"),
                ("band", "percent('\(Self.seed)') between 40 and 41.000001"),
            ], values: [("off", "false"), ("r", "true"), ("band", "true")])
        let evaluator = TemplateEvaluator(t)
        var trueCount = 0
        for row in rows {
            let value = evaluator.value(of: "AppAttestEnabled", for: EvaluationContext(randomizationId: row.id)).value
            let answer = Exposure.answer("AppAttestEnabled", in: t, seed: Self.seed, percentile: row.microPercentile)
            #expect(answer.may == answer.must)
            #expect(answer.may == (value == "true"), "id \(row.id) at \(row.microPercentile)")
            if value == "true" { trueCount += 1 }
        }
        // 10 - 1 + 2.5 + 1.000001 points: the share of the ids is within sampling error of it (±4 sigma).
        let exposure = Self.exposure(t).possible
        #expect(exposure == MicroPercent(12_500_001))
        let expected = Double(exposure.value) / 1e8 * Double(rows.count)
        #expect(abs(Double(trueCount) - expected) < 4 * (expected * (1 - Double(exposure.value) / 1e8)).squareRoot())
    }
}
