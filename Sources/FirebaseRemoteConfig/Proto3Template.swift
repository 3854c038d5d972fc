import JSON

/// A Remote Config template in the form Firebase holds and serves it: proto3 JSON, which leaves out every field
/// without presence that holds its default value.
///
/// Firebase keeps a template as the protocol buffer `google.firebase.remoteconfig.v1.RemoteConfig` and answers in
/// proto3's JSON mapping (ProtoJSON, https://protobuf.dev/programming-guides/json/): a field without presence that
/// holds its default value is omitted from the output, and `null` is read as the default. So are a plain string
/// holding `""`, a number holding 0, an enum at its zero value, an empty list or map. A template sent
/// with a parameter's `"description": ""` or `"conditionalValues": {}` is held, and read back, without them; a
/// byte-for-byte comparison of what was sent with what Firebase holds would then take our own version for someone
/// else's. `normalized` gives the form Firebase holds: the store sends it, and compares in it.
///
/// The fields and their types are those of Google's discovery document for `firebaseremoteconfig` v1 (revision
/// 20240611): `RemoteConfig`, `RemoteConfigCondition`, `RemoteConfigParameter`, `RemoteConfigParameterGroup`,
/// `RemoteConfigParameterValue`, `RolloutValue` and `PersonalizationValue`; a condition's `description` is a string
/// in revision 20171129 and no longer listed in 20240611. Fields with presence are kept whatever they hold:
/// sub-messages (`defaultValue`, `rolloutValue`, ...) and the members of `RemoteConfigParameterValue`'s union
/// `value_option` (the REST reference: "Union field value_option can be only one of the following: value,
/// useInAppDefault, personalizationValue, rolloutValue"), so `{"value": ""}`, which serves an empty string, stays
/// apart from `{}`, which serves nothing. Members the schema does not name (a field Firebase added since, the
/// `version` object) are kept as they are.
enum Proto3Template {
    /// How proto3 JSON treats one field.
    indirect enum Field {
        /// A plain scalar without presence, omitted when it holds `isDefault`.
        case scalar(Scalar)
        /// A sub-message or a `oneof` member: present whatever it holds; a message's own fields are normalized.
        case present(Message?)
        /// A `map<string, Message>`: omitted when empty.
        case map(Message)
        /// A `repeated Message`: omitted when empty.
        case list(Message)
    }

    enum Scalar {
        case string
        case double
        /// An enum, whose zero value (named here) is its default.
        case enumeration(zero: String)

        func isDefault(_ v: JSONValue) -> Bool {
            switch (self, v) {
            case (.string, .string(let s)): s.isEmpty
            case (.double, .number(let n)): n.double == 0
            case (.enumeration(let zero), .string(let s)): s == zero
            case (.enumeration, .number(let n)): n.double == 0
            default: false
            }
        }
    }

    typealias Message = [String: Field]

    static let personalizationValue: Message = ["personalizationId": .scalar(.string)]
    static let rolloutValue: Message = [
        "rolloutId": .scalar(.string), "value": .scalar(.string), "percent": .scalar(.double),
    ]
    static let parameterValue: Message = [
        "value": .present(nil), "useInAppDefault": .present(nil),
        "personalizationValue": .present(personalizationValue), "rolloutValue": .present(rolloutValue),
    ]
    static let parameter: Message = [
        "defaultValue": .present(parameterValue), "conditionalValues": .map(parameterValue),
        "description": .scalar(.string), "valueType": .scalar(.enumeration(zero: "PARAMETER_VALUE_TYPE_UNSPECIFIED")),
    ]
    static let parameterGroup: Message = ["description": .scalar(.string), "parameters": .map(parameter)]
    static let condition: Message = [
        "name": .scalar(.string), "expression": .scalar(.string), "description": .scalar(.string),
        "tagColor": .scalar(.enumeration(zero: "CONDITION_DISPLAY_COLOR_UNSPECIFIED")),
    ]
    static let remoteConfig: Message = [
        "conditions": .list(condition), "parameters": .map(parameter), "parameterGroups": .map(parameterGroup),
    ]

    /// `template` (a `RemoteConfig` object) as Firebase holds it: every member in its place, those holding
    /// proto3's default value in a field without presence left out (and any member holding `null`, which proto3
    /// JSON reads as the default).
    static func normalized(_ template: JSONValue) -> JSONValue { normalized(template, as: remoteConfig) }

    private static func normalized(_ value: JSONValue, as message: Message) -> JSONValue {
        guard let object = value.objectValue else { return value }
        var out = JSONObject()
        for (key, member) in object {
            guard let field = message[key] else {
                out[key] = member
                continue
            }
            if member.isNull { continue }
            switch field {
            case .scalar(let scalar):
                if !scalar.isDefault(member) { out[key] = member }
            case .present(let inner):
                out[key] = inner.map { normalized(member, as: $0) } ?? member
            case .map(let inner):
                guard let entries = member.objectValue else {
                    out[key] = member
                    continue
                }
                if entries.isEmpty { continue }
                out[key] = .object(JSONObject(entries.map { ($0.key, normalized($0.value, as: inner)) }))
            case .list(let inner):
                guard let items = member.arrayValue else {
                    out[key] = member
                    continue
                }
                if items.isEmpty { continue }
                out[key] = .array(items.map { normalized($0, as: inner) })
            }
        }
        return .object(out)
    }
}
