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
            let share = Exposure.share(ofAtMost: p)
            #expect(Self.exposure(t) == Exposure(certain: share, possible: share), "at \(n)%")
            // On the percentage's scale: itself, but every installation is 100% and percentile 0 alone is someone.
            let scale = p.value >= 99_999_999 ? MicroPercent.hundred : p == .zero ? MicroPercent(1) : p
            #expect(Exposure.percentageScale(share) == scale, "at \(n)%")
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
        #expect(Self.exposure(t).possible == MicroPercent(40_000_001))
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
        // (10, 12.5] and (90, 99.999999]: 2,500,000 + 9,999,999 percentiles.
        #expect(Self.exposure(t).possible == MicroPercent(12_499_999))
        #expect(Self.exposure(t).certain == MicroPercent(12_499_999))
    }

    /// Terms the evaluator cannot decide from the percentile are taken both ways.
    @Test func undecidedTermsGiveARange() throws {
        let t = try Self.template(
            conditions: [("r", "device.os == 'ios' && percent('\(Self.seed)') <= 30")], values: [("r", "true")])
        #expect(Self.exposure(t) == Exposure(certain: .zero, possible: MicroPercent(30_000_001)))
        let otherSeed = try Self.template(
            conditions: [("o", "percent('other') <= 20"), ("r", "percent('\(Self.seed)') <= 5")],
            values: [("o", "true"), ("r", "true")])
        #expect(Self.exposure(otherSeed) == Exposure(certain: MicroPercent(5_000_001), possible: .hundred))
    }

    /// Every spelling the SDKs read as true counts, whatever the value type (firebase-admin's `get_boolean`:
    /// 1/true/t/yes/y/on in any case; the iOS SDK's `boolValue`: a first t/y/1-9). Before, only the exact string
    /// "true" counted, and a retype to STRING "yes" was judged no change.
    @Test func everySpellingTheAppsReadAsTrueCounts() throws {
        let thirty = Exposure.share(ofAtMost: MicroPercent(percent: 30))
        for value in ["TRUE", "True", "yes", "Y", "1", "t"] {
            let t = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= 30")], values: [("r", value)])
            #expect(Self.exposure(t) == Exposure(certain: thirty, possible: thirty), "\(value)")
        }
        // Read as true by some SDKs only: "on" (not iOS), "2" and "tomato" (iOS only).
        for value in ["on", "2", "tomato"] {
            let t = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= 30")], values: [("r", value)])
            #expect(Self.exposure(t) == Exposure(certain: .zero, possible: thirty), "\(value)")
        }
        for value in ["false", "no", "0", "off", "", "nein"] {
            let t = try Self.template(conditions: [("r", "percent('\(Self.seed)') <= 30")], values: [("r", value)])
            #expect(Self.exposure(t) == .none, "\(value)")
        }
        #expect(try Self.exposure(Self.template(conditions: [], values: [], defaultValue: "yes")).certain == .hundred)
    }

    /// `useInAppDefault` wins over `value` (firebase-admin reads it first): the app's own default, false. Before,
    /// `{"value": "true", "useInAppDefault": true}` counted as true.
    @Test func theInAppDefaultWinsOverAValue() throws {
        let json: JSONValue = [
            "conditions": [["name": "r", "expression": .string("percent('\(Self.seed)') <= 30")]],
            "parameters": [
                "AppAttestEnabled": [
                    "defaultValue": ["value": "true", "useInAppDefault": true],
                    "conditionalValues": ["r": ["value": "true", "useInAppDefault": true]],
                    "valueType": "BOOLEAN",
                ]
            ],
        ]
        let t = try RemoteConfigTemplate(json: json)
        #expect(Self.exposure(t) == .none)
        Self.expectAgreement(t)
    }

    /// Percentiles are the integers 0 ... 99,999,999, counted exactly: `<= N` covers N + 1 of them, and
    /// `<= 99.999999` every installation. Before, the line was taken as continuous and 99.999999 read 99.999999%.
    @Test func percentilesAreCountedExactly() throws {
        func share(_ expression: String) throws -> Exposure {
            Self.exposure(try Self.template(conditions: [("r", expression)], values: [("r", "true")]))
        }
        let s = "percent('\(Self.seed)')"
        #expect(try share("\(s) <= 99.999999") == Exposure(certain: .hundred, possible: .hundred))
        #expect(try share("\(s) <= 0") == Exposure(certain: MicroPercent(1), possible: MicroPercent(1)))
        #expect(try share("\(s) <= 10").possible == MicroPercent(10_000_001))
        #expect(try share("\(s) > 90").possible == MicroPercent(9_999_999))
        #expect(try share("\(s) > 99.999999") == .none)
        #expect(try share("\(s) between 10 and 12.5").possible == MicroPercent(2_500_000))
        #expect(Exposure.percentageScale(MicroPercent(10_000_001)) == MicroPercent(percent: 10))
        #expect(Exposure.percentageScale(.hundred) == .hundred)
        #expect(Exposure.percentageScale(Exposure.share(ofAtMost: MicroPercent(99_999_999))) == .hundred)
        #expect(Exposure.percentageScale(MicroPercent(1)) == MicroPercent(1))
    }

    /// A server condition nested deeper than firebase-admin evaluates (level 10, and/or counting twice) is false
    /// for the evaluator, and so for the judgement. Before, `Exposure` ignored the limit: a first condition
    /// `or(and(or(and(or(and(true))))))` serving "false" before a second serving "true" was judged 10% → 10%
    /// while every device got true.
    @Test func aConditionTooDeepIsFalseAsTheEvaluatorSays() throws {
        var deep: JSONValue = ["true": [:]]
        for wrapper in ["andCondition", "orCondition", "andCondition", "orCondition", "andCondition", "orCondition"] {
            deep = [wrapper: ["conditions": [deep]]]
        }
        let json: JSONValue = [
            "conditions": [
                ["name": "deep", "condition": deep],
                ["name": "all", "condition": ["orCondition": ["conditions": [["andCondition": ["conditions": [["true": [:]]]]]]]]],
            ],
            "parameters": [
                "AppAttestEnabled": [
                    "defaultValue": ["value": "false"],
                    "conditionalValues": ["deep": ["value": "false"], "all": ["value": "true"]],
                    "valueType": "BOOLEAN",
                ]
            ],
        ]
        let t = try RemoteConfigTemplate(json: json)
        #expect(t.form == .server)
        #expect(TemplateEvaluator(t).value(of: "AppAttestEnabled", for: EvaluationContext(randomizationId: "abc")).value == "true")
        #expect(Self.exposure(t) == Exposure(certain: .hundred, possible: .hundred))
        Self.expectAgreement(t)
    }

    /// `Exposure.answer` says what the evaluator gives, at a spread of ids.
    static func expectAgreement(_ t: RemoteConfigTemplate, sourceLocation: SourceLocation = #_sourceLocation) {
        let evaluator = TemplateEvaluator(t)
        let hasher = PercentileHasher(seed: seed)
        for i in 0..<200 {
            let id = "fid-\(i)"
            let value = evaluator.value(of: "AppAttestEnabled", for: EvaluationContext(randomizationId: id))
            let answer = Exposure.answer("AppAttestEnabled", in: t, seed: seed, percentile: hasher.microPercentile(of: id))
            #expect(answer.may == answer.must, sourceLocation: sourceLocation)
            #expect(answer.must == value.readsAsTrue.must, "id \(id)", sourceLocation: sourceLocation)
        }
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
