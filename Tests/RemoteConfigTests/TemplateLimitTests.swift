import JSON
import RemoteConfig
import Testing

/// Issue 13: Firebase's template quotas, enforced where templates are read or imported, naming the field.
struct TemplateLimitTests {
    func template(parameters: [(String, JSONValue)] = [], conditions: [JSONValue] = [], version: JSONValue? = nil) -> JSONValue {
        var o = JSONObject([("conditions", .array(conditions)), ("parameters", .object(JSONObject(parameters)))])
        if let version { o["version"] = version }
        return .object(o)
    }

    func refusal(_ json: JSONValue) -> String? {
        do {
            _ = try RemoteConfigTemplate(json: json)
            return nil
        } catch { return error.message }
    }

    func value(_ s: String) -> JSONValue { ["defaultValue": ["value": .string(s)]] }

    @Test func parameterCount() {
        let ok = (0..<3_000).map { ("p\($0)", value("x")) }
        #expect(refusal(template(parameters: ok)) == nil)
        #expect(refusal(template(parameters: ok + [("p3000", value("x"))])) == "too many parameters (more than 3000)")
    }

    @Test func conditionCountAndNameLength() {
        let many = (0..<2_001).map { JSONValue.object(JSONObject([("name", .string("c\($0)")), ("expression", "true")])) }
        #expect(refusal(template(conditions: many))?.hasPrefix("too many conditions (2001") == true)
        let long: JSONValue = ["name": .string(String(repeating: "n", count: 101)), "expression": "true"]
        #expect(refusal(template(conditions: [long])) == "conditions[0].name is 101 characters long (at most 100)")
        let fits: JSONValue = ["name": .string(String(repeating: "n", count: 100)), "expression": "true"]
        #expect(refusal(template(conditions: [fits])) == nil)
    }

    @Test func valueCharacters() {
        let half = String(repeating: "v", count: 500_000)
        #expect(refusal(template(parameters: [("a", value(half)), ("b", value(half))])) == nil)
        #expect(
            refusal(template(parameters: [("a", value(half)), ("b", value(half)), ("c", value("!"))]))
                == "parameter 'c' defaultValue.value: the parameter values are more than 1000000 characters long together")
    }

    @Test func descriptionLength() {
        let ok: JSONValue = ["description": .string(String(repeating: "d", count: 1_024))]
        #expect(refusal(template(version: ok)) == nil)
        let long: JSONValue = ["description": .string(String(repeating: "d", count: 1_025))]
        #expect(refusal(template(version: long)) == "version.description is 1025 characters long (at most 1024)")
    }

    @Test(arguments: [
        ("9lives", "parameter key '9lives' must start with '_' or an English letter"),
        ("has-dash", "parameter key 'has-dash' may hold only English letters, digits and '_'"),
        ("ünicode", "parameter key 'ünicode' must start with '_' or an English letter"),
    ])
    func parameterKeys(key: String, message: String) {
        #expect(refusal(template(parameters: [(key, value("x"))])) == message)
    }

    @Test func parameterKeyLength() {
        #expect(refusal(template(parameters: [("_" + String(repeating: "k", count: 255), value("x"))])) == nil)
        #expect(
            refusal(template(parameters: [(String(repeating: "k", count: 257), value("x"))]))
                == "parameter key '\(String(repeating: "k", count: 40))…' is 257 characters long (at most 256)")
    }

    @Test func limitsApplyToImportedText() {
        let text = #"{"conditions":[],"parameters":{"bad key":{"defaultValue":{"value":"x"}}}}"#
        #expect(throws: TemplateError("parameter key 'bad key' may hold only English letters, digits and '_'")) {
            try RemoteConfigTemplate(parsing: text)
        }
    }
    /// A second `AppAttestEnabled` in a parameter group was accepted (the exposure check and the evaluator read only
    /// the top-level one); Firebase refuses a key that appears more than once across the top level and the groups.
    /// Firebase refuses a template with a key at the top level and in a group, or in two groups; the writer refuses
    /// to publish one (`RolloutProtection.shapeProblem`), while a stored one still reads.
    @Test func aParameterKeyAppearsOnceAcrossTopLevelAndGroups() throws {
        func groups(_ g: [(String, [(String, JSONValue)])]) -> JSONValue {
            .object(JSONObject(g.map { ($0.0, ["parameters": .object(JSONObject($0.1))]) }))
        }
        var twice = template(parameters: [("AppAttestEnabled", value("false"))]).objectValue!
        twice["parameterGroups"] = groups([("g1", [("other", value("x"))]), ("g2", [("AppAttestEnabled", value("true"))])])
        let read = try RemoteConfigTemplate(json: .object(twice))
        #expect(read.repeatedParameterKey()?.key == "AppAttestEnabled")
        #expect(read.repeatedParameterKey()?.places == ["at the top level", "in parameter group 'g2'"])
        var inTwoGroups = template().objectValue!
        inTwoGroups["parameterGroups"] = groups([("g1", [("k", value("a"))]), ("g2", [("k", value("b"))])])
        #expect(
            try RemoteConfigTemplate(json: .object(inTwoGroups)).repeatedParameterKey()?.places
                == ["in parameter group 'g1'", "in parameter group 'g2'"])
        var distinct = template(parameters: [("AppAttestEnabled", value("false"))]).objectValue!
        distinct["parameterGroups"] = groups([("g1", [("other", value("x"))])])
        #expect(try RemoteConfigTemplate(json: .object(distinct)).repeatedParameterKey() == nil)
    }
}
