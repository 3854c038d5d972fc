import JSON

/// A Remote Config template: the REST API's JSON, with typed access to what rollout needs.
///
/// The whole document is kept as a `JSONValue`; reads go through typed accessors and edits change only the
/// members they mean to, so fields rollout does not know (rollout values, personalization, new API fields)
/// survive every read-modify-write byte for byte. Both the client form (condition `expression` strings) and the
/// server form (structured `condition`) are accepted; `form` says which one this is.
public struct RemoteConfigTemplate: Hashable, Sendable {
    public enum Form: String, Sendable { case client, server }

    public private(set) var document: JSONObject
    public let form: Form
    public private(set) var conditions: [TemplateCondition]

    /// Firebase's own quotas for a template (a template beyond them could not be published, so it is refused
    /// where it is read or imported, with the field that is over): conditions, parameters (top level and in
    /// groups together), the characters of all parameter values together, a parameter key's length (it must
    /// start with `_` or an English letter and hold only letters, digits and `_`), a condition name's length
    /// and the version description's length.
    public static let maximumConditions = 2_000
    public static let maximumParameters = 3_000
    public static let maximumValueCharacters = 1_000_000
    public static let maximumKeyLength = 256
    public static let maximumConditionNameLength = 100
    public static let maximumDescriptionLength = 1_024
    /// The largest template text read, against hostile input (Firebase's quotas keep real ones far smaller).
    public static let maximumBytes = RequestBodyLimit.template

    /// Reads and validates a template document. `preferredForm` decides the form of a template whose
    /// conditions do not tell (it has none).
    public init(json: JSONValue, preferredForm: Form = .client) throws(TemplateError) {
        guard let object = json.objectValue else {
            throw TemplateError("a template must be a JSON object, found \(json.kindName)")
        }
        document = object
        var parsed: [TemplateCondition] = []
        var sawExpression = false
        var sawStructured = false
        if let list = object["conditions"], !list.isNull {
            guard let items = list.arrayValue else { throw TemplateError("conditions must be an array") }
            guard items.count <= RemoteConfigTemplate.maximumConditions else {
                throw TemplateError("too many conditions (\(items.count); at most \(RemoteConfigTemplate.maximumConditions))")
            }
            var names = Set<String>()
            for (i, item) in items.enumerated() {
                let c = try TemplateCondition(json: item, index: i)
                guard names.insert(c.name).inserted else { throw TemplateError("condition name '\(c.name)' is used twice") }
                if c.expression != nil { sawExpression = true } else { sawStructured = true }
                parsed.append(c)
            }
        }
        guard !(sawExpression && sawStructured) else {
            throw TemplateError("conditions mix client 'expression' strings and server 'condition' objects")
        }
        form = sawStructured ? .server : sawExpression ? .client : preferredForm
        conditions = parsed
        if let description = object["version"]?["description"]?.stringValue {
            let n = description.unicodeScalars.count
            guard n <= RemoteConfigTemplate.maximumDescriptionLength else {
                throw TemplateError(
                    "version.description is \(n) characters long (at most \(RemoteConfigTemplate.maximumDescriptionLength))")
            }
        }
        try validateParameters()
    }

    /// Parses template JSON text.
    public init(parsing text: String) throws(TemplateError) {
        guard text.utf8.count <= RemoteConfigTemplate.maximumBytes else {
            throw TemplateError("template is larger than \(RemoteConfigTemplate.maximumBytes >> 20) MiB")
        }
        let value: JSONValue
        do {
            value = try JSONParser().parse(text)
        } catch {
            throw TemplateError("not valid JSON: \(error)")
        }
        try self.init(json: value)
    }

    /// An empty template of the given form.
    public static func empty(form: Form) -> RemoteConfigTemplate {
        try! RemoteConfigTemplate(json: ["conditions": [], "parameters": [:]], preferredForm: form)
    }

    public var json: JSONValue { .object(document) }

    /// The document as the firebase CLI writes it (two-space indentation).
    public var prettyText: String { json.prettyText }

    public var etag: String? { document["etag"]?.stringValue }

    /// `version.versionNumber` (a string on the wire).
    public var versionNumber: Int? { document["version"]?["versionNumber"]?.stringValue.flatMap { Int($0) } }

    public func condition(named name: String) -> TemplateCondition? { conditions.first { $0.name == name } }

    public func conditionIndex(named name: String) -> Int? { conditions.firstIndex { $0.name == name } }

    // MARK: Parameters

    /// Where a parameter lives: top level, or inside a parameter group.
    enum ParameterLocation: Equatable {
        case topLevel
        case group(String)
    }

    func location(of key: String) -> ParameterLocation? {
        if document["parameters"]?[key] != nil { return .topLevel }
        for group in document["parameterGroups"]?.objectValue ?? JSONObject() where group.value["parameters"]?[key] != nil {
            return .group(group.key)
        }
        return nil
    }

    /// All parameter keys: top level first, then those in parameter groups.
    public var parameterKeys: [String] {
        var keys = document["parameters"]?.objectValue?.keys ?? []
        for group in document["parameterGroups"]?.objectValue ?? JSONObject() {
            keys += group.value["parameters"]?.objectValue?.keys ?? []
        }
        return keys
    }

    public func parameter(_ key: String) -> TemplateParameter? {
        switch location(of: key) {
        case .topLevel?: return TemplateParameter(key: key, json: document["parameters"]![key]!)
        case .group(let g)?: return TemplateParameter(key: key, json: document["parameterGroups"]![g]!["parameters"]![key]!)
        case nil: return nil
        }
    }

    /// Replaces (or adds, at the top level) a parameter's JSON.
    public mutating func setParameterJSON(_ key: String, _ value: JSONValue) {
        switch location(of: key) {
        case .group(let g)?:
            var groups = document["parameterGroups"]!.objectValue!
            var group = groups[g]!.objectValue!
            var params = group["parameters"]!.objectValue!
            params[key] = value
            group["parameters"] = .object(params)
            groups[g] = .object(group)
            document["parameterGroups"] = .object(groups)
        default:
            var params = document["parameters"]?.objectValue ?? JSONObject()
            params[key] = value
            document["parameters"] = .object(params)
        }
    }

    /// Sets `parameters[key].conditionalValues[condition] = {value}` (nil removes it), keeping other members.
    public mutating func setConditionalValue(_ key: String, condition: String, to value: String?) {
        guard var p = parameter(key)?.json.objectValue else { return }
        var cv = p["conditionalValues"]?.objectValue ?? JSONObject()
        if let value {
            var entry = cv[condition]?.objectValue ?? JSONObject()
            entry["useInAppDefault"] = nil
            entry["value"] = .string(value)
            // Keep conditional values in the template's condition order, as the console does.
            if cv[condition] == nil, let order = conditionIndex(named: condition) {
                let position = cv.keys.filter { (conditionIndex(named: $0) ?? Int.max) < order }.count
                cv.insert(.object(entry), forKey: condition, at: position)
            } else {
                cv[condition] = .object(entry)
            }
        } else {
            cv[condition] = nil
        }
        p["conditionalValues"] = .object(cv)
        setParameterJSON(key, .object(p))
    }

    // MARK: Conditions

    /// Inserts a new condition at `index` in the evaluation order (or appends).
    public mutating func insertCondition(name: String, node: ConditionNode, at index: Int? = nil, tagColor: String? = nil)
        throws(TemplateError)
    {
        guard condition(named: name) == nil else { throw TemplateError("condition '\(name)' already exists") }
        var entry = JSONObject()
        entry["name"] = .string(name)
        switch form {
        case .client: entry["expression"] = .string(ExpressionRenderer.text(node))
        case .server: entry["condition"] = try ServerCondition.json(of: ServerCondition.canonical(node))
        }
        if let tagColor, form == .client { entry["tagColor"] = .string(tagColor) }
        var list = document["conditions"]?.arrayValue ?? []
        let at = min(index ?? list.count, list.count)
        list.insert(.object(entry), at: at)
        try replaceConditions(list)
    }

    /// Replaces the `termIndex`-th percent term of a condition, editing only that term: in a client expression
    /// only the number characters change; in a server condition only the percent element's bounds.
    public mutating func replacePercent(in conditionName: String, termIndex: Int = 0, with op: PercentOperator)
        throws(TemplateError)
    {
        guard let i = conditionIndex(named: conditionName) else { throw TemplateError("no condition named '\(conditionName)'") }
        var list = document["conditions"]!.arrayValue!
        var entry = list[i].objectValue!
        let c = conditions[i]
        if let expression = c.expression {
            do {
                entry["expression"] = .string(try expression.replacingPercent(at: termIndex, with: op).text)
            } catch {
                throw TemplateError("condition '\(conditionName)': \(error)")
            }
        } else {
            var counter = 0
            guard let updated = ServerCondition.replacingPercent(in: entry["condition"]!, index: termIndex, op: op, counter: &counter) else {
                throw TemplateError("condition '\(conditionName)' has no percent term \(termIndex + 1)")
            }
            entry["condition"] = updated
        }
        list[i] = .object(entry)
        try replaceConditions(list)
    }

    private mutating func replaceConditions(_ list: [JSONValue]) throws(TemplateError) {
        var doc = document
        doc["conditions"] = .array(list)
        self = try RemoteConfigTemplate(json: .object(doc), preferredForm: form)
    }

    /// Removes `etag` and `version` (what a publish request must not carry but a stored version does).
    public func strippingVersionInfo() -> RemoteConfigTemplate {
        var copy = self
        copy.document["etag"] = nil
        copy.document["version"] = nil
        return copy
    }

    /// Sets top-level members rollout manages on publish (`version`, `etag`).
    public mutating func setMember(_ key: String, _ value: JSONValue?) {
        document[key] = value
    }

    // MARK: Validation

    /// Checks every parameter, at the top level and in groups. (A key repeated across them is judged where a
    /// template is published, `repeatedParameterKey`, not here: a stored version with one stays readable.)
    private func validateParameters() throws(TemplateError) {
        var count = 0
        var valueCharacters = 0
        func check(_ params: JSONValue?, _ where_: String) throws(TemplateError) {
            guard let params, !params.isNull else { return }
            guard let object = params.objectValue else { throw TemplateError("\(where_) must be an object") }
            count += object.count
            guard count <= RemoteConfigTemplate.maximumParameters else {
                throw TemplateError("too many parameters (more than \(RemoteConfigTemplate.maximumParameters))")
            }
            for member in object {
                try TemplateParameter.validate(
                    key: member.key, json: member.value, valueCharacters: &valueCharacters)
            }
        }
        try check(document["parameters"], "parameters")
        if let groups = document["parameterGroups"], !groups.isNull {
            guard let g = groups.objectValue else { throw TemplateError("parameterGroups must be an object") }
            for group in g {
                guard group.value.objectValue != nil else {
                    throw TemplateError("parameter group '\(group.key)' must be an object")
                }
                try check(group.value["parameters"], "parameterGroups.\(group.key).parameters")
            }
        }
    }

    /// The first parameter key that appears more than once across the top level and the parameter groups, and
    /// where: Firebase refuses such a template, and `parameter(_:)`, the exposure check and the evaluator read one
    /// of the copies, so a second `AppAttestEnabled` in a group would be published unjudged. Judged where a template
    /// is published (`RolloutProtection.shapeProblem`), not when one is read, so that a stored version holding one
    /// stays readable (to export, diff and replace).
    public func repeatedParameterKey() -> (key: String, places: [String])? {
        var places: [String: [String]] = [:]
        var repeated: [String] = []
        func note(_ params: JSONValue?, _ place: String) {
            guard let object = params?.objectValue else { return }
            for member in object {
                if places[member.key, default: []].count == 1 { repeated.append(member.key) }
                places[member.key, default: []].append(place)
            }
        }
        note(document["parameters"], "at the top level")
        if let groups = document["parameterGroups"]?.objectValue {
            for group in groups { note(group.value["parameters"], "in parameter group '\(group.key)'") }
        }
        return repeated.first.map { ($0, places[$0]!) }
    }
}

extension ServerCondition {
    /// The condition JSON with its `index`-th percent element's bounds replaced (other members kept).
    static func replacingPercent(in json: JSONValue, index: Int, op: PercentOperator, counter: inout Int) -> JSONValue? {
        guard var object = json.objectValue else { return nil }
        for key in ["orCondition", "andCondition"] {
            if var wrapper = object[key]?.objectValue, let items = wrapper["conditions"]?.arrayValue {
                var newItems = items
                for (i, item) in items.enumerated() {
                    if let replaced = replacingPercent(in: item, index: index, op: op, counter: &counter) {
                        newItems[i] = replaced
                        wrapper["conditions"] = .array(newItems)
                        object[key] = .object(wrapper)
                        return .object(object)
                    }
                }
                return nil
            }
        }
        if let percent = object["percent"]?.objectValue {
            defer { counter += 1 }
            guard counter == index else { return nil }
            let seed = percent["seed"]?.stringValue
            object["percent"] = percentJSON(PercentTerm(op, seed: seed), updating: percent)
            return .object(object)
        }
        return nil
    }
}

/// One named condition of a template.
public struct TemplateCondition: Hashable, Sendable {
    public let name: String
    public let node: ConditionNode
    /// The parsed expression (client form only).
    public let expression: ConditionExpression?
    public let json: JSONValue

    init(json: JSONValue, index: Int) throws(TemplateError) {
        guard let o = json.objectValue else { throw TemplateError("conditions[\(index)] must be an object") }
        guard let name = o["name"]?.stringValue, !name.isEmpty else {
            throw TemplateError("conditions[\(index)] needs a non-empty string 'name'")
        }
        guard name.unicodeScalars.count <= RemoteConfigTemplate.maximumConditionNameLength else {
            throw TemplateError(
                "conditions[\(index)].name is \(name.unicodeScalars.count) characters long "
                    + "(at most \(RemoteConfigTemplate.maximumConditionNameLength))")
        }
        self.name = name
        self.json = json
        if let e = o["expression"], !e.isNull {
            guard let text = e.stringValue else { throw TemplateError("condition '\(name)': expression must be a string") }
            do {
                let parsed = try ConditionExpression(parsing: text)
                expression = parsed
                node = parsed.root
            } catch {
                throw TemplateError("condition '\(name)': \(error)")
            }
        } else if let c = o["condition"], !c.isNull {
            expression = nil
            do {
                node = try ServerCondition.node(from: c)
            } catch {
                throw TemplateError("condition '\(name)': \(error.message)")
            }
        } else {
            throw TemplateError("condition '\(name)' has neither an 'expression' nor a 'condition'")
        }
    }

    /// The condition as written: the expression text, or the structured condition rendered as an expression.
    public var displayText: String { expression?.text ?? ExpressionRenderer.text(node) }
}

/// A parameter's value in a template: a literal string or "use the app's own default".
public enum ParameterValue: Hashable, Sendable {
    case value(String)
    case inAppDefault

    init?(json: JSONValue?) {
        guard let o = json?.objectValue, !o.isEmpty else { return nil }
        if o["useInAppDefault"]?.boolValue == true {
            self = .inAppDefault
        } else if let v = o["value"]?.stringValue {
            self = .value(v)
        } else {
            return nil
        }
    }

    public var text: String {
        switch self {
        case .value(let v): v
        case .inAppDefault: "(in-app default)"
        }
    }
}

/// One parameter of a template.
public struct TemplateParameter: Hashable, Sendable {
    public let key: String
    public let json: JSONValue

    public var defaultValue: ParameterValue? { ParameterValue(json: json["defaultValue"]) }
    public var valueType: String? { json["valueType"]?.stringValue }

    /// Conditional values in the order they appear.
    public var conditionalValues: [(condition: String, value: ParameterValue?)] {
        (json["conditionalValues"]?.objectValue ?? JSONObject()).map { ($0.key, ParameterValue(json: $0.value)) }
    }

    public func conditionalValue(_ condition: String) -> ParameterValue? {
        ParameterValue(json: json["conditionalValues"]?[condition])
    }

    /// The values a stored parameter value carries, each with its path under it: `value` itself, a Firebase
    /// Rollout's `rolloutValue.value`, an A/B test's `experimentValue.variantValue[i].value`, and a `value` inside
    /// any form Firebase adds later (GOOGLE-DATA.md lists five forms). A rule about what a parameter may serve (a
    /// BOOLEAN's `"true"` / `"false"`) reads every form through this, not `value` alone.
    public static func carriedValues(of value: JSONValue, at path: String) -> [(path: String, value: JSONValue)] {
        switch value {
        case .object(let o):
            o.flatMap { m in
                m.key == "value" ? [("\(path).value", m.value)] : carriedValues(of: m.value, at: "\(path).\(m.key)")
            }
        case .array(let items):
            items.enumerated().flatMap { carriedValues(of: $0.element, at: "\(path)[\($0.offset)]") }
        default: []
        }
    }

    static func validate(key: String, json: JSONValue, valueCharacters: inout Int)
        throws(TemplateError)
    {
        guard !key.isEmpty else { throw TemplateError("a parameter has an empty key") }
        try validateKey(key)
        guard let o = json.objectValue else { throw TemplateError("parameter '\(key)' must be an object") }
        func checkValue(_ v: JSONValue, _ what: String) throws(TemplateError) {
            guard let vo = v.objectValue else { throw TemplateError("parameter '\(key)' \(what) must be an object") }
            if let value = vo["value"], !value.isNull {
                guard let text = value.stringValue else {
                    throw TemplateError("parameter '\(key)' \(what).value must be a string (every value is a string on the wire)")
                }
                valueCharacters += text.unicodeScalars.count
                guard valueCharacters <= RemoteConfigTemplate.maximumValueCharacters else {
                    throw TemplateError(
                        "parameter '\(key)' \(what).value: the parameter values are more than "
                            + "\(RemoteConfigTemplate.maximumValueCharacters) characters long together")
                }
            }
            if let u = vo["useInAppDefault"], !u.isNull, u.boolValue == nil {
                throw TemplateError("parameter '\(key)' \(what).useInAppDefault must be true or false")
            }
        }
        if let d = o["defaultValue"], !d.isNull { try checkValue(d, "defaultValue") }
        if let cv = o["conditionalValues"], !cv.isNull {
            guard let m = cv.objectValue else { throw TemplateError("parameter '\(key)' conditionalValues must be an object") }
            // A value may be keyed by a name that is no condition of the template: Firebase's own Rollouts key
            // theirs by the rollout's id (`rollout_1`), listed under `conditions` or not. It is carried as it is.
            for member in m { try checkValue(member.value, "conditionalValues.\(member.key)") }
        }
    }
}

extension TemplateParameter {
    /// Firebase's rule for parameter keys: at most 256 characters, starting with `_` or an English letter, then
    /// letters, digits and `_`.
    static func validateKey(_ key: String) throws(TemplateError) {
        let u = Array(key.utf8)
        func letter(_ c: UInt8) -> Bool { (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A }
        guard u.count <= RemoteConfigTemplate.maximumKeyLength else {
            throw TemplateError(
                "parameter key '\(key.prefix(40))…' is \(key.unicodeScalars.count) characters long "
                    + "(at most \(RemoteConfigTemplate.maximumKeyLength))")
        }
        guard letter(u[0]) || u[0] == 0x5F else {
            throw TemplateError("parameter key '\(key)' must start with '_' or an English letter")
        }
        guard u.allSatisfy({ letter($0) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }) else {
            throw TemplateError("parameter key '\(key)' may hold only English letters, digits and '_'")
        }
    }
}

/// Why a template was refused or an edit could not be made.
public struct TemplateError: Error, CustomStringConvertible, Sendable, Equatable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
