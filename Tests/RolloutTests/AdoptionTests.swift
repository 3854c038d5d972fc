import JSON
import RemoteConfig
import Rollout
import Testing
import Timekeeping

/// Adopting a template that Firebase itself wrote and changing the rollout many times leaves every part rollout
/// does not own exactly as it was ("A real Firebase project": a running Firebase Rollout keyed by its id, an A/B
/// test, a personalization, parameter groups, conditions in the full language, unknown members at any depth).
/// firebase-admin-java #1092 is what happens otherwise: running rollouts reset to empty strings.
struct AdoptionTests {
    /// A template in the shapes Firebase's REST API documents and its console writes.
    static let firebaseWritten = """
        {
          "conditions": [
            {"name": "ios_users", "expression": "device.os == 'ios' && app.version.>=(['3.2.0'])", "tagColor": "BLUE"},
            {"name": "beta_testers", "expression": "app.userProperty['beta'].exactlyMatches(['yes'])"},
            {"name": "launch_day", "expression": "dateTime >= dateTime('2026-12-01T00:00:00', 'UTC')"},
            {"name": "ten_percent", "expression": "percent('checkout-seed') <= 10"}
          ],
          "parameters": {
            "new_checkout": {
              "defaultValue": {"value": "false"},
              "conditionalValues": {
                "rollout_1": {"rolloutValue": {"rolloutId": "rollout_1", "value": "true", "percent": 5}},
                "ios_users": {"value": "false"}
              },
              "valueType": "BOOLEAN",
              "description": "checkout v2, ramped by a Firebase Rollout"
            },
            "button_color": {
              "defaultValue": {"value": "blue"},
              "conditionalValues": {
                "experiment_7": {"experimentValue": {"experimentId": "7", "variantValue": [
                  {"variantId": "Baseline", "noChange": true}, {"variantId": "Variant A", "value": "green"}],
                  "exposurePercent": 50}}
              },
              "valueType": "STRING"
            },
            "home_layout": {
              "defaultValue": {"personalizationValue": {"personalizationId": "p-42"}},
              "conditionalValues": {"launch_day": {"useInAppDefault": true}},
              "valueType": "STRING",
              "futureMember": [1, {"nested": {"deeper": null}}]
            },
            "discount": {"defaultValue": {"value": "0"}, "conditionalValues": {"ten_percent": {"value": "5"}}, "valueType": "NUMBER"}
          },
          "parameterGroups": {
            "payments": {"description": "payment flags", "parameters": {
              "wallet_enabled": {"defaultValue": {"value": "true"}, "valueType": "BOOLEAN",
                "conditionalValues": {"beta_testers": {"value": "false"}}}}}
          },
          "futureTopLevel": {"kept": ["as", "is"]},
          "version": {"versionNumber": "42", "updateTime": "2026-12-01T10:00:00.123456Z",
            "updateUser": {"email": "someone@example.com"}, "updateOrigin": "CONSOLE", "updateType": "INCREMENTAL_UPDATE"}
        }
        """

    /// Everything but rollout's own parameters and conditions.
    static func foreign(_ t: RemoteConfigTemplate) -> JSONValue {
        var o = t.json.objectValue!
        // Version metadata and the ETag are the store's, not the template's content.
        o["version"] = nil
        o["etag"] = nil
        var parameters = o["parameters"]!.objectValue!
        for key in ["AppAttestEnabled", "AppAttestCohort"] { parameters[key] = nil }
        o["parameters"] = .object(parameters)
        let ours: Set<String> = ["app_attest_rollout", "app_attest_control"]
        o["conditions"] = .array(o["conditions"]!.arrayValue!.filter { !ours.contains($0["name"]!.stringValue!) })
        return .object(o)
    }

    @Test func a100NudgesLeaveEveryForeignPartAsFirebaseWroteIt() throws {
        let adopted = try RemoteConfigTemplate(parsing: Self.firebaseWritten)
        let clock = ManualClock()
        let store = InMemoryConfigStore(initial: adopted, time: clock.now())
        let path = WritePath(store: store, clock: clock, newSeed: { "adopt-seed" })
        func run(_ op: RolloutOperation) throws {
            var request = WritePath.Request(intent: .rollout(op), actor: "ana@example.com", origin: "TEST")
            request.reason = "ramp"
            _ = try path.execute(request)
        }
        try run(.set(MicroPercent(percent: 1)))
        for i in 0..<100 {
            // Up by 0.5 point, and now and then down, killed and resumed: every kind of rollout edit (1% + 10 ×
            // (7 × 0.5 - 0.25) = 33.5%).
            switch i % 10 {
            case 7: try run(.kill)
            case 8: try run(.resume)
            case 9: try run(.nudge(MicroPercent(-250_000)))
            default: try run(.nudge(MicroPercent(500_000)))
            }
        }
        let final = try store.current().template
        #expect(Self.foreign(final) == Self.foreign(adopted))
        let rollout = try #require(try RolloutPlan.locate(in: final))
        #expect(rollout.state == .rolling && rollout.percentage == MicroPercent(33_500_000))
        // The flag is judged by what it does, and the Firebase Rollout on another parameter does not touch it.
        #expect(Exposure.of("AppAttestEnabled", in: final, seed: rollout.seed) == Exposure(certain: Exposure.share(ofAtMost: rollout.percentage), possible: Exposure.share(ofAtMost: rollout.percentage)))
    }
}
