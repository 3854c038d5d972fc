import JSON
import RemoteConfig

/// A readable, line-per-change difference between two templates.
///
/// Conditions are compared by name (added, removed, changed, moved in the evaluation order), parameters by key
/// (default and each conditional value), and any other member by its JSON path, so that nothing a publish
/// changes goes unmentioned. `version` and `etag` are bookkeeping and are not compared.
public enum TemplateDiff {
    public static func lines(from old: RemoteConfigTemplate, to new: RemoteConfigTemplate) -> [String] {
        var out: [String] = []
        let oldNames = old.conditions.map(\.name)
        let newNames = new.conditions.map(\.name)
        for c in new.conditions {
            if let o = old.condition(named: c.name) {
                if o.displayText != c.displayText {
                    out.append("~ condition \(c.name): \(o.displayText)  →  \(c.displayText)")
                } else if o.json != c.json {
                    out.append("~ condition \(c.name): \(describeChange(o.json, c.json))")
                }
            } else {
                out.append("+ condition \(c.name): \(c.displayText)")
            }
        }
        for name in oldNames where !newNames.contains(name) {
            out.append("- condition \(name): \(old.condition(named: name)!.displayText)")
        }
        let commonOld = oldNames.filter(newNames.contains)
        let commonNew = newNames.filter(oldNames.contains)
        if commonOld != commonNew {
            out.append("~ condition order: \(commonOld.joined(separator: ", "))  →  \(commonNew.joined(separator: ", "))")
        }

        let oldKeys = old.parameterKeys
        let newKeys = new.parameterKeys
        for key in newKeys {
            let n = new.parameter(key)!
            guard let o = old.parameter(key) else {
                let values = n.conditionalValues.map(\.condition).map { c in
                    ", \(c): \(shown(n.json["conditionalValues"]?[c]))"
                }
                out.append("+ parameter \(key): default \(shown(n.json["defaultValue"]))" + values.joined())
                continue
            }
            // Values are compared as stored, in every form Firebase writes (a Firebase Rollout's `rolloutValue`, a
            // personalization, an experiment), not through `ParameterValue`, which reads only `value` and
            // `useInAppDefault`: a change to any other form must not read as no change.
            var valueLines: [String] = []
            if let change = valueChange(o.json["defaultValue"], n.json["defaultValue"]) {
                valueLines.append("~ \(key) default: \(change)")
            }
            let conditions = o.conditionalValues.map(\.condition) + n.conditionalValues.map(\.condition).filter { oc in
                !o.conditionalValues.contains { $0.condition == oc }
            }
            for c in conditions {
                if let change = valueChange(o.json["conditionalValues"]?[c], n.json["conditionalValues"]?[c]) {
                    valueLines.append("~ \(key) under \(c): \(change)")
                }
            }
            out += valueLines
            let (oc, nc) = (o.json["conditionalValues"] ?? .null, n.json["conditionalValues"] ?? .null)
            if valueLines.isEmpty, oc != nc {
                // The same values, reordered or written differently (`{}` for none).
                out.append("~ \(key) conditional values: \(describeChange(oc, nc))")
            }
            var oj = o.json.objectValue ?? JSONObject()
            var nj = n.json.objectValue ?? JSONObject()
            for k in ["defaultValue", "conditionalValues"] {
                oj[k] = nil
                nj[k] = nil
            }
            if oj != nj { out.append("~ parameter \(key): \(describeChange(.object(oj), .object(nj)))") }
        }
        for key in oldKeys where !newKeys.contains(key) { out.append("- parameter \(key)") }

        var od = old.json.objectValue ?? JSONObject()
        var nd = new.json.objectValue ?? JSONObject()
        for k in ["conditions", "parameters", "parameterGroups", "version", "etag"] {
            if k == "parameterGroups" {
                od[k] = od[k].map(stripGroupParameters)
                nd[k] = nd[k].map(stripGroupParameters)
            } else {
                od[k] = nil
                nd[k] = nil
            }
        }
        for member in nd where od[member.key] != member.value {
            out.append("~ \(member.key): \(describeChange(od[member.key] ?? .null, member.value))")
        }
        for member in od where nd[member.key] == nil { out.append("- \(member.key)") }
        return out
    }

    /// `old → new` for a stored value that changed (nil when it did not), each side as `shown` reads it, or as
    /// JSON when the two read alike (a member `shown` does not name changed).
    private static func valueChange(_ old: JSONValue?, _ new: JSONValue?) -> String? {
        let (a, b) = (old ?? .null, new ?? .null)
        guard a != b else { return nil }
        let (at, bt) = (shown(old), shown(new))
        return at == bt ? describeChange(a, b) : "\(at) → \(bt)"
    }

    /// A stored parameter value as a person reads it, in each form Firebase writes (GOOGLE-DATA.md): `"text"`,
    /// `in-app default`, `rollout rollout_1 "true" at 10%`, `personalization p1`,
    /// `experiment e1 ("a", "b" at 50%)`; `none` when absent; any other shape as its JSON.
    private static func shown(_ value: JSONValue?) -> String {
        guard let value, !value.isNull else { return "none" }
        guard let o = value.objectValue, o.count == 1, let (form, body) = o.members.first.map({ ($0.key, $0.value) })
        else { return value.objectValue?.isEmpty == true ? "none" : value.compactText }
        func text(_ v: JSONValue?) -> String { v?.stringValue.map(JSONWriter.quoted) ?? v?.compactText ?? "none" }
        func id(_ member: String) -> String { body[member]?.stringValue ?? body[member]?.compactText ?? "?" }
        switch form {
        case "value": return text(body)
        case "useInAppDefault" where body.boolValue == true: return "in-app default"
        case "rolloutValue":
            return "rollout \(id("rolloutId")) \(text(body["value"])) at \(body["percent"]?.compactText ?? "?")%"
        case "personalizationValue": return "personalization \(id("personalizationId"))"
        case "experimentValue":
            let variants = (body["variantValue"]?.arrayValue ?? []).map { v in
                v["noChange"]?.boolValue == true ? "no change" : text(v["value"])
            }
            let share = body["exposurePercent"].map { " at \($0.compactText)%" } ?? ""
            return "experiment \(id("experimentId")) (\(variants.joined(separator: ", "))\(share))"
        default: return value.compactText
        }
    }

    /// Group membership is compared through the parameters themselves; here only the groups' own fields.
    private static func stripGroupParameters(_ groups: JSONValue) -> JSONValue {
        guard var g = groups.objectValue else { return groups }
        for member in g {
            if var o = member.value.objectValue {
                o["parameters"] = .array((o["parameters"]?.objectValue?.keys ?? []).map { .string($0) })
                g[member.key] = .object(o)
            }
        }
        return .object(g)
    }

    private static func describeChange(_ a: JSONValue, _ b: JSONValue) -> String {
        let at = a.compactText
        let bt = b.compactText
        if at.count + bt.count < 160 { return "\(at) → \(bt)" }
        return "changed (\(at.count) → \(bt.count) bytes of JSON)"
    }
}
