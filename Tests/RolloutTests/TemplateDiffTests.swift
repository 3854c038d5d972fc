import JSON
import RemoteConfig
import Rollout
import Testing

struct TemplateDiffTests {
    /// The rollout's template with `AppAttestEnabled`'s conditional value `rollout_1` (a Firebase Rollout's key)
    /// set to `value` as stored.
    static func template(rollout value: JSONValue) throws -> RemoteConfigTemplate {
        var t = try RolloutPlan.initialTemplate(seed: "s")
        var flag = t.parameter("AppAttestEnabled")!.json.objectValue!
        var values = flag["conditionalValues"]!.objectValue!
        values["rollout_1"] = value
        flag["conditionalValues"] = .object(values)
        t.setParameterJSON("AppAttestEnabled", .object(flag))
        return t
    }

    static func rolloutValue(_ value: String, percent: Int64) -> JSONValue {
        ["rolloutValue": ["rolloutId": "rollout_1", "value": .string(value), "percent": .number(JSONNumber(percent))]]
    }

    /// A change to a value in a form other than `value` / `useInAppDefault` (a Firebase Rollout's `rolloutValue`, a
    /// personalization) read as no change, so an import of it said "nothing written" and dropped it.
    @Test func everyValueFormIsComparedAndShownReadably() throws {
        let ten = try Self.template(rollout: Self.rolloutValue("true", percent: 10))
        let fifty = try Self.template(rollout: Self.rolloutValue("true", percent: 50))
        let personalized = try Self.template(rollout: ["personalizationValue": ["personalizationId": "p1"]])
        #expect(
            TemplateDiff.lines(from: ten, to: fifty)
                == ["~ AppAttestEnabled under rollout_1: rollout rollout_1 \"true\" at 10% → rollout rollout_1 \"true\" at 50%"])
        #expect(
            TemplateDiff.lines(from: fifty, to: personalized)
                == ["~ AppAttestEnabled under rollout_1: rollout rollout_1 \"true\" at 50% → personalization p1"])
        #expect(
            TemplateDiff.lines(from: try RolloutPlan.initialTemplate(seed: "s"), to: ten)
                == ["~ AppAttestEnabled under rollout_1: none → rollout rollout_1 \"true\" at 10%"])
        // A member the readable form does not name: the JSON of both sides.
        let extra = try Self.template(rollout: ["personalizationValue": ["personalizationId": "p1", "note": "x"]])
        #expect(
            TemplateDiff.lines(from: personalized, to: extra)
                == [
                    "~ AppAttestEnabled under rollout_1: {\"personalizationValue\":{\"personalizationId\":\"p1\"}} → "
                        + "{\"personalizationValue\":{\"personalizationId\":\"p1\",\"note\":\"x\"}}"
                ])
        #expect(TemplateDiff.lines(from: fifty, to: fifty).isEmpty)
    }
}
