import Foundation
import JSON
import RemoteConfig
import Testing
import TestSupport

/// Our evaluator against firebase-admin 7.7.0's own, on the same template and the same ids: zero mismatches.
struct FirebaseAdminDifferentialTests {
    /// 100,000 ids shaped like Firebase installation IDs (22 characters of base64url, first nibble 0111),
    /// plus odd ones: unicode, long, with spaces, and the empty id (percent conditions are then false).
    static func ids() -> [String] {
        var rng = SplitMix64(state: 2026)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var out: [String] = []
        for _ in 0..<100_000 {
            var s = String(alphabet[Int(0x1C + rng.next() % 4)])
            for _ in 0..<21 { s.append(alphabet[Int(rng.next() % 64)]) }
            out.append(s)
        }
        out += ["", "inst-0", "ünïcødé-Gerät-🚀", String(repeating: "x", count: 1000), "with space", "a.b.c", "rollout-2026"]
        return out
    }

    static let seeds = ["rollout-2026", "s", "ünïcødé", "a.b", ""]

    static func percent(_ op: String, _ seed: String, micro: Int64? = nil, range: (Int64, Int64)? = nil) -> JSONValue {
        var p = JSONObject()
        p["percentOperator"] = .string(op)
        if !seed.isEmpty { p["seed"] = .string(seed) }
        if let micro { p["microPercent"] = .number(JSONNumber(micro)) }
        if let range {
            p["microPercentRange"] = [
                "microPercentLowerBound": .number(JSONNumber(range.0)),
                "microPercentUpperBound": .number(JSONNumber(range.1)),
            ]
        }
        return .object(JSONObject([("percent", .object(p))]))
    }

    static func wrap(_ terms: [JSONValue]) -> JSONValue {
        ["orCondition": ["conditions": [["andCondition": ["conditions": .array(terms)]]]]]
    }

    /// Builds a server template: each condition gets its own boolean parameter `p_<name>`.
    struct Builder {
        var conditions: [JSONValue] = []
        var parameters = JSONObject()
        var params: [String] = []

        mutating func add(_ name: String, _ condition: JSONValue) {
            conditions.append(["name": .string(name), "condition": condition])
            let key = "p_" + name
            parameters[key] = [
                "defaultValue": ["value": "false"], "conditionalValues": [.init(stringLiteral: name): ["value": "true"]],
                "valueType": "BOOLEAN",
            ]
            params.append(key)
        }

        mutating func addParameter(_ key: String, _ json: JSONValue) {
            parameters[key] = json
            params.append(key)
        }

        var document: JSONValue { ["conditions": .array(conditions), "parameters": .object(parameters)] }
    }

    /// The wide template for 100,000 ids: all three operators on every seed, compound conditions, and
    /// parameters whose value depends on the order of several conditions.
    static func wideTemplate() -> Builder {
        var b = Builder()
        for (si, seed) in seeds.enumerated() {
            b.add("le_\(si)", wrap([percent("LESS_OR_EQUAL", seed, micro: 10_000_000)]))
            b.add("gt_\(si)", wrap([percent("GREATER_THAN", seed, micro: 50_000_000)]))
            b.add("bt_\(si)", wrap([percent("BETWEEN", seed, range: (20_000_000, 30_000_000))]))
        }
        b.add("unknown_op", wrap([percent("SOMETHING_ELSE", "s", micro: 50_000_000)]))
        b.add("and_two", wrap([percent("LESS_OR_EQUAL", "s", micro: 60_000_000), percent("GREATER_THAN", "a.b", micro: 30_000_000)]))
        b.add(
            "or_two",
            ["orCondition": ["conditions": [percent("LESS_OR_EQUAL", "s", micro: 5_000_000), percent("BETWEEN", "", range: (90_000_000, 95_000_000))]]])
        b.add("always", ["true": [:]])
        b.add("never", ["false": [:]])
        // The first true condition (in the template's order, not the map's) with a value wins, else the default.
        b.addParameter(
            "ordered",
            [
                "defaultValue": ["value": "none"],
                "conditionalValues": [
                    "bt_0": ["value": "second"], "le_0": ["value": "first"], "or_two": ["value": "third"],
                    "and_two": ["useInAppDefault": true], "gt_4": [:],
                ],
            ])
        b.addParameter("in_app", ["defaultValue": ["useInAppDefault": true], "conditionalValues": ["le_1": ["value": "x"]]])
        b.addParameter("no_default", ["conditionalValues": ["le_2": ["value": "y"]]])
        return b
    }

    /// The edge template: the boundary micro-percents 0, 1, 99,999,999 and 100,000,000 with every operator and
    /// seed, and thresholds exactly at (and next to) the percentiles of real ids.
    static func edgeTemplate(ids: [String]) -> Builder {
        var b = Builder()
        let boundaries: [Int64] = [0, 1, 99_999_999, 100_000_000]
        for (si, seed) in seeds.enumerated() {
            for (bi, m) in boundaries.enumerated() {
                b.add("le_\(si)_\(bi)", wrap([percent("LESS_OR_EQUAL", seed, micro: m)]))
                b.add("gt_\(si)_\(bi)", wrap([percent("GREATER_THAN", seed, micro: m)]))
            }
            b.add("bt_\(si)_low", wrap([percent("BETWEEN", seed, range: (0, 1))]))
            b.add("bt_\(si)_high", wrap([percent("BETWEEN", seed, range: (99_999_999, 100_000_000))]))
            b.add("bt_\(si)_all", wrap([percent("BETWEEN", seed, range: (0, 100_000_000))]))
        }
        for (k, id) in ids.prefix(5).enumerated() {
            let p = PercentileHasher(seed: "rollout-2026").microPercentile(of: id)
            b.add("exact_\(k)", wrap([percent("LESS_OR_EQUAL", "rollout-2026", micro: p)]))
            b.add("below_\(k)", wrap([percent("LESS_OR_EQUAL", "rollout-2026", micro: p - 1)]))
            b.add("gt_exact_\(k)", wrap([percent("GREATER_THAN", "rollout-2026", micro: p)]))
            b.add("bt_exact_\(k)", wrap([percent("BETWEEN", "rollout-2026", range: (p - 1, p))]))
            b.add("bt_above_\(k)", wrap([percent("BETWEEN", "rollout-2026", range: (p, p + 1))]))
        }
        return b
    }

    /// Evaluates `template` for `ids` with firebase-admin and with ours; returns the mismatches and, per
    /// parameter, how many ids got "true" (to show the comparison was not vacuous).
    static func compare(_ template: Builder, ids: [String]) throws -> (mismatches: [String], trueShare: [String: Double]) {
        let python = try TestSupport.python()
        let dir = try TestSupport.temporaryDirectory("rc-diff")
        defer { try? FileManager.default.removeItem(at: dir) }
        let templateURL = dir.appendingPathComponent("template.json")
        let idsURL = dir.appendingPathComponent("ids.txt")
        try template.document.prettyText.write(to: templateURL, atomically: true, encoding: .utf8)
        try (ids.joined(separator: "\n") + "\n").write(to: idsURL, atomically: true, encoding: .utf8)
        let script = TestSupport.packageRoot.appendingPathComponent("scripts/rc_peer.py").path
        let peer = try TestSupport.run(python, [script, templateURL.path, idsURL.path] + template.params)
        guard peer.status == 0 else { throw TestSupport.Failure("firebase-admin peer failed: \(peer.stderr)") }
        let lines = peer.stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        guard lines.count == ids.count else { throw TestSupport.Failure("peer printed \(lines.count) lines for \(ids.count) ids") }

        let evaluator = TemplateEvaluator(try RemoteConfigTemplate(json: template.document))
        var mismatches: [String] = []
        var trueCounts = [String: Int]()
        for (id, line) in zip(ids, lines) {
            let cells = line.split(separator: "\t", omittingEmptySubsequences: false)
            let values = evaluator.values(of: template.params, for: EvaluationContext(randomizationId: id))
            for (k, param) in template.params.enumerated() {
                let ours = values[k]
                let value = ours.source == .remote ? (ours.value ?? "") : ""
                // With no in-app defaults given to firebase-admin, "use the in-app default" reports as static.
                let source = ours.source == .remote ? "remote" : "static"
                if value == "true" { trueCounts[param, default: 0] += 1 }
                if cells[2 * k] != value || cells[2 * k + 1] != source {
                    mismatches.append("\(id.prefix(40)) \(param): ours \(value)/\(source), firebase-admin \(cells[2 * k])/\(cells[2 * k + 1])")
                }
            }
        }
        return (mismatches, trueCounts.mapValues { Double($0) / Double(ids.count) })
    }

    @Test func wideTemplateOverOneHundredThousandIds() throws {
        let ids = Self.ids()
        #expect(ids.count > 100_000)
        let (mismatches, share) = try Self.compare(Self.wideTemplate(), ids: ids)
        #expect(mismatches.count == 0, "first mismatches: \(mismatches.prefix(5))")
        // The comparison is only meaningful if the conditions split the ids.
        #expect(abs((share["p_le_0"] ?? 0) - 0.10) < 0.005)
        #expect(abs((share["p_gt_1"] ?? 0) - 0.50) < 0.01)
        #expect(abs((share["p_bt_4"] ?? 0) - 0.10) < 0.005)
        #expect((share["p_always"] ?? 0) > 0.99 && share["p_never"] == nil && share["p_unknown_op"] == nil)
    }

    @Test func boundaryMicroPercentsAndExactThresholds() throws {
        let ids = Array(Self.ids().prefix(3_000)) + Self.ids().suffix(7)
        let (mismatches, share) = try Self.compare(Self.edgeTemplate(ids: ids), ids: ids)
        #expect(mismatches.count == 0, "first mismatches: \(mismatches.prefix(5))")
        #expect((share["p_le_0_3"] ?? 0) > 0.99 && share["p_gt_0_3"] == nil)
        #expect((share["p_exact_0"] ?? 0) > 0 && (share["p_bt_exact_0"] ?? 0) > 0)
    }
}
