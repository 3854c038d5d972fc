import JSON
import RemoteConfig

/// What a whole-template write (import, rollback) must not do to the rollout by accident, and the shape rules a
/// template must follow before it is published.
///
/// `violations` lists each protected part the change would remove or alter: the `AppAttestEnabled` rollout
/// itself (the flag or its percent condition), the control condition, the cohort parameter, the seed (a new seed
/// reshuffles every installation), and the value type of any parameter present before and after. The write path
/// refuses such a change unless the request explicitly allows it (`--allow-rollout-change`), and then the change
/// needs a step-up code.
public enum RolloutProtection {
    /// The protected parts that going from `current` to `proposed` removes or changes; empty when none.
    public static func violations(
        from current: RemoteConfigTemplate, to proposed: RemoteConfigTemplate, before: RolloutPlan?,
        after: RolloutPlan?, names: RolloutNames
    ) -> [String] {
        var found: [String] = []
        if let before {
            if let after {
                if before.hasControl && !after.hasControl {
                    found.append("it removes the control condition '\(names.controlCondition)'")
                }
                if before.hasCohortParameter && !after.hasCohortParameter {
                    found.append("it removes the cohort parameter \(names.cohortParameter)")
                }
                if before.seed != after.seed {
                    found.append(
                        "it changes the seed '\(before.seed)' → '\(after.seed)' (reshuffles every installation)")
                }
            } else if proposed.parameter(names.parameter) == nil {
                found.append("it removes the parameter \(names.parameter) (the rollout)")
            } else {
                found.append("it removes the percent condition of \(names.parameter) (the rollout)")
            }
        }
        for key in current.parameterKeys {
            guard let old = current.parameter(key), let new = proposed.parameter(key) else { continue }
            let a = old.valueType ?? "STRING"
            let b = new.valueType ?? "STRING"
            if a != b { found.append("it changes the value type of \(key) from \(a) to \(b)") }
        }
        return found
    }

    /// The value types Firebase knows (`valueType`).
    public static let valueTypes: Set<String> = [
        "STRING", "BOOLEAN", "NUMBER", "JSON", "PARAMETER_VALUE_TYPE_UNSPECIFIED",
    ]

    /// Checks the members a template's writer relies on: their JSON types, each parameter's value type, and that
    /// every value of a BOOLEAN parameter, in whichever form it is carried (`TemplateParameter.carriedValues`), is
    /// exactly `"true"` or `"false"` (platforms parse other spellings differently). Unknown members are not judged
    /// (they are carried through untouched). Returns the first problem with its JSON path, e.g. `$.etag: expected a
    /// string, found a number`.
    public static func shapeProblem(_ template: RemoteConfigTemplate) -> String? {
        guard case .object(let document) = template.json else { return "$: expected an object" }
        func kind(_ v: JSONValue) -> String { v.kindName }
        func expect(_ v: JSONValue?, _ wanted: String, _ path: String) -> String? {
            guard let v else { return nil }
            let ok: Bool
            switch (wanted, v) {
            case ("a string", .string), ("an object", .object), ("an array", .array), ("a boolean", .bool): ok = true
            default: ok = false
            }
            return ok ? nil : "\(path): expected \(wanted), found \(kind(v))"
        }
        if let p = expect(document["etag"], "a string", "$.etag") { return p }
        if let p = expect(document["version"], "an object", "$.version") { return p }
        if let p = expect(document["conditions"], "an array", "$.conditions") { return p }
        if let p = expect(document["parameters"], "an object", "$.parameters") { return p }
        if let p = expect(document["parameterGroups"], "an object", "$.parameterGroups") { return p }
        if let (key, places) = template.repeatedParameterKey() {
            return "$.parameters: parameter '\(key)' appears more than once (\(places.joined(separator: ", "))); "
                + "a key may appear once across the top level and the parameter groups"
        }
        for key in template.parameterKeys {
            guard let parameter = template.parameter(key) else { continue }
            let path = "$.parameters.\(key)"
            guard case .object = parameter.json else {
                return "\(path): expected an object, found \(kind(parameter.json))"
            }
            if let p = expect(parameter.json["valueType"], "a string", "\(path).valueType") { return p }
            if let type = parameter.valueType, !valueTypes.contains(type) {
                return
                    "\(path).valueType: unknown value type '\(type)' (expected one of \(valueTypes.sorted().joined(separator: ", ")))"
            }
            if let p = expect(parameter.json["defaultValue"], "an object", "\(path).defaultValue") { return p }
            if let p = expect(parameter.json["conditionalValues"], "an object", "\(path).conditionalValues") {
                return p
            }
            var values: [(String, JSONValue)] = []
            if let d = parameter.json["defaultValue"] { values.append(("\(path).defaultValue", d)) }
            if case .object(let conditional)? = parameter.json["conditionalValues"] {
                for (name, v) in conditional { values.append(("\(path).conditionalValues.\(name)", v)) }
            }
            for (valuePath, v) in values {
                guard case .object = v else { return "\(valuePath): expected an object, found \(kind(v))" }
                if let p = expect(v["useInAppDefault"], "a boolean", "\(valuePath).useInAppDefault") { return p }
                // Every form that carries a value (`value`, a Firebase Rollout's `rolloutValue.value`, ...): the SDKs
                // serve each of them, and read other spellings of a boolean ("yes", "1") their own ways.
                for (path, carried) in TemplateParameter.carriedValues(of: v, at: valuePath) {
                    if let p = expect(carried, "a string", path) { return p }
                    if parameter.valueType == "BOOLEAN", let text = carried.stringValue, text != "true",
                        text != "false"
                    {
                        return
                            "\(path): \(key) is BOOLEAN, so its values must be exactly \"true\" or \"false\", not \"\(text)\""
                    }
                }
            }
        }
        return nil
    }
}
