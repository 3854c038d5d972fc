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
                out.append("+ parameter \(key): default \(n.defaultValue.map(quoted) ?? "none")"
                    + n.conditionalValues.map { ", \($0.condition): \($0.value.map(quoted) ?? "none")" }.joined())
                continue
            }
            if o.defaultValue != n.defaultValue {
                out.append("~ \(key) default: \(o.defaultValue.map(quoted) ?? "none") → \(n.defaultValue.map(quoted) ?? "none")")
            }
            let conditions = o.conditionalValues.map(\.condition) + n.conditionalValues.map(\.condition).filter { oc in
                !o.conditionalValues.contains { $0.condition == oc }
            }
            for c in conditions {
                let ov = o.conditionalValue(c)
                let nv = n.conditionalValue(c)
                if ov != nv { out.append("~ \(key) under \(c): \(ov.map(quoted) ?? "none") → \(nv.map(quoted) ?? "none")") }
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

    private static func quoted(_ v: ParameterValue) -> String {
        switch v {
        case .value(let s): JSONWriter.quoted(s)
        case .inAppDefault: "in-app default"
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
