import JSON
import RemoteConfig
import Rollout
import TestSupport
import Testing

/// `RemoteConfigTemplate.converted(to:)`, which `config export --format` uses.
struct TemplateFormTests {
    @Test func realServerTemplateRoundTripsThroughTheClientForm() throws {
        let text = try String(
            contentsOf: try TestSupport.vector("remote-config/rollout-2026-10pct.server-template.json"), encoding: .utf8
        )
        let server = try RemoteConfigTemplate(parsing: text)
        #expect(server.form == .server)
        let client = try server.converted(to: .client)
        #expect(client.form == .client)
        #expect(client.condition(named: "app_attest_rollout")?.expression?.text == "percent('rollout-2026') <= 10")
        #expect(
            client.json["version"] == server.json["version"] && client.json["parameters"] == server.json["parameters"])
        let back = try client.converted(to: .server)
        #expect(back.json["conditions"] == server.json["conditions"])
        #expect(try RolloutPlan.locate(in: client) == RolloutPlan.locate(in: server))
    }

    @Test func keepsUnknownConditionMembersAndDropsOnlyTagColor() throws {
        let client = try RemoteConfigTemplate(
            parsing: #"""
                {"conditions": [{"name": "c", "expression": "percent('s') between 50 and 60", "tagColor": "BLUE", "x-future": 1}],
                 "parameters": {}, "parameterGroups": {"g": {"parameters": {}}}}
                """#)
        let server = try client.converted(to: .server)
        let entry = try #require(server.json["conditions"]?.arrayValue?.first?.objectValue)
        #expect(entry.keys == ["name", "x-future", "condition"])
        #expect(
            entry["condition"]?.compactText.contains(
                #""microPercentRange":{"microPercentLowerBound":50000000,"microPercentUpperBound":60000000}"#) == true)
        #expect(server.json["parameterGroups"] == client.json["parameterGroups"])
        #expect(try client.converted(to: .client) == client)
    }

    @Test func refusesWhatTheOtherFormCannotSay() throws {
        let device = try RemoteConfigTemplate(
            parsing: #"{"conditions": [{"name": "ios", "expression": "device.os == 'ios' && percent('s') <= 5"}]}"#)
        #expect {
            try device.converted(to: .server)
        } throws: { e in "\(e)".hasPrefix("condition 'ios' has no server form") }
        let signal = try RemoteConfigTemplate(
            parsing:
                #"{"conditions": [{"name": "sig", "condition": {"orCondition": {"conditions": [{"customSignal": {"key": "k"}}]}}}]}"#
        )
        #expect {
            try signal.converted(to: .client)
        } throws: { e in "\(e)".hasPrefix("condition 'sig' has no client form") }
    }
}
