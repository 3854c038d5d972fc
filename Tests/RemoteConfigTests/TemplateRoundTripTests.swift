import Foundation
import JSON
import RemoteConfig
import Testing
import TestSupport

/// Templates shaped like what the REST API and the firebase CLI return, with fields rollout does not model.
struct TemplateRoundTripTests {
    static let client = """
        {
          "conditions": [
            {
              "name": "ios_beta",
              "expression": "device.os == 'ios' && app.userProperty['beta'].exactlyMatches(['yes'])",
              "tagColor": "PURPLE"
            },
            {
              "name": "app_attest_rollout",
              "expression": "percent('rollout-2026') <= 10",
              "tagColor": "ORANGE"
            }
          ],
          "parameters": {
            "AppAttestEnabled": {
              "defaultValue": { "value": "false" },
              "conditionalValues": {
                "ios_beta": { "value": "true" },
                "app_attest_rollout": { "value": "true" }
              },
              "valueType": "BOOLEAN",
              "description": "gradual App Attest"
            },
            "welcome": {
              "defaultValue": { "useInAppDefault": true },
              "conditionalValues": {
                "ios_beta": { "rolloutValue": { "rolloutId": "rollout_7", "value": "hi", "percent": 20 } }
              },
              "valueType": "STRING"
            }
          },
          "parameterGroups": {
            "checkout": {
              "description": "checkout flags",
              "parameters": {
                "new_cart": { "defaultValue": { "value": "{\\"a\\":1}" }, "valueType": "JSON" }
              }
            }
          },
          "version": {
            "versionNumber": "42",
            "updateTime": "2026-11-02T10:02:03.123456Z",
            "updateUser": { "email": "ana@example.com" },
            "updateOrigin": "CONSOLE",
            "updateType": "INCREMENTAL_UPDATE",
            "description": "nudge",
            "futureVersionField": 1
          },
          "etag": "etag-1234-42",
          "personalizationTemplates": { "unknown": ["kept", 1.50] }
        }
        """

    @Test func clientTemplateRoundTripsExactly() throws {
        let t = try RemoteConfigTemplate(parsing: Self.client)
        #expect(t.form == .client && t.etag == "etag-1234-42" && t.versionNumber == 42)
        #expect(t.parameterKeys == ["AppAttestEnabled", "welcome", "new_cart"])
        let again = try RemoteConfigTemplate(parsing: t.prettyText)
        #expect(again == t)
        #expect(try JSONParser().parse(t.prettyText) == (try JSONParser().parse(Self.client)))
        // A number keeps its spelling (1.50, not 1.5) through decode and encode.
        #expect(t.json.compactText.contains("[\"kept\",1.50]"))
    }

    @Test func editingOneConditionLeavesEverythingElseUntouched() throws {
        var t = try RemoteConfigTemplate(parsing: Self.client)
        let before = try JSONParser().parse(Self.client).objectValue!
        try t.replacePercent(in: "app_attest_rollout", with: .lessOrEqual(MicroPercent(15_000_000)))
        t.setConditionalValue("new_cart", condition: "ios_beta", to: "x")
        var after = t.json.objectValue!
        #expect(after["conditions"]?.arrayValue?[1]["expression"] == "percent('rollout-2026') <= 15")
        #expect(after["parameterGroups"]?["checkout"]?["parameters"]?["new_cart"]?["conditionalValues"]?["ios_beta"] == ["value": "x"])
        for key in ["version", "etag", "personalizationTemplates"] { #expect(after[key] == before[key]) }
        #expect(after["parameters"] == before["parameters"])
        after["conditions"] = before["conditions"]
        after["parameterGroups"] = before["parameterGroups"]
        #expect(after == before)
    }

    @Test func serverVectorRoundTripsAndEvaluates() throws {
        let text = try String(contentsOf: TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json"), encoding: .utf8)
        let t = try RemoteConfigTemplate(parsing: text)
        #expect(t.form == .server)
        #expect(try RemoteConfigTemplate(parsing: t.prettyText) == t)
        #expect(try JSONParser().parse(t.prettyText) == (try JSONParser().parse(text)))
    }

    /// A Firebase Rollout writes its value under the rollout's id (`rollout_1`), listed under `conditions` or
    /// not; public documents do not say which, so both read, and the value is carried as it is. Before, such a
    /// template did not parse ("has a value for unknown condition 'rollout_1'"), and `init` could not adopt it.
    @Test func valuesKeyedByAFirebaseRolloutsIdAreCarried() throws {
        let text = """
            {"conditions": [{"name": "ios", "expression": "device.os == 'ios'"}],
             "parameters": {"new_checkout": {"defaultValue": {"value": "false"}, "valueType": "BOOLEAN",
               "conditionalValues": {"rollout_1": {"rolloutValue": {"rolloutId": "rollout_1", "value": "true", "percent": 5}},
                                     "ios": {"value": "false"}}}}}
            """
        let t = try RemoteConfigTemplate(parsing: text)
        #expect(try JSONParser().parse(t.prettyText) == (try JSONParser().parse(text)))
        // Judged by what it may do: Firebase serves "true" to the rollout's share, which rollout cannot see.
        let e = Exposure.of("new_checkout", in: t, seed: "")
        #expect(e == Exposure(certain: .zero, possible: .hundred))
    }

    @Test(arguments: [
        ("[]", "a template must be a JSON object"),
        ("{\"conditions\": {}}", "conditions must be an array"),
        ("{\"conditions\": [{\"expression\": \"true\"}]}", "conditions[0] needs a non-empty string 'name'"),
        ("{\"conditions\": [{\"name\": \"a\", \"expression\": \"true\"}, {\"name\": \"a\", \"expression\": \"false\"}]}", "condition name 'a' is used twice"),
        ("{\"conditions\": [{\"name\": \"a\", \"expression\": \"percent <= 200\"}]}", "condition 'a': condition expression, column 12"),
        ("{\"conditions\": [{\"name\": \"a\"}]}", "condition 'a' has neither"),
        ("{\"parameters\": {\"x\": {\"defaultValue\": {\"value\": true}}}}", "parameter 'x' defaultValue.value must be a string"),
        ("{\"conditions\": [{\"name\": \"a\", \"condition\": {\"percent\": {\"percentOperator\": \"LESS_OR_EQUAL\", \"microPercent\": \"10\"}}}]}", "condition 'a': microPercent must be a whole number"),
        ("{\"conditions\": [{\"name\": \"a\", \"expression\": \"true\"}, {\"name\": \"b\", \"condition\": {\"true\": {}}}]}", "conditions mix client"),
        ("{\"a\": ", "not valid JSON: line 1, column 7"),
    ])
    func refusesBrokenTemplatesSayingWhy(text: String, message: String) {
        #expect {
            try RemoteConfigTemplate(parsing: text)
        } throws: { error in
            "\(error)".hasPrefix(message)
        }
    }
}
