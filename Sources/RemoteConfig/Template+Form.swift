import JSON

extension RemoteConfigTemplate {
    /// The same template in the other form: client conditions (`expression` strings) or server conditions
    /// (structured `condition` objects).
    ///
    /// Only the conditions change; parameters, groups, `version`, `etag` and unknown members are carried over
    /// untouched, and so are unknown members of each condition. Client to server drops `tagColor` (server
    /// conditions have none) and refuses what the server form cannot say — negation and device, app or other
    /// non-percent elements — naming the condition. Server to client refuses server elements that have no
    /// expression (custom signals and the like).
    public func converted(to target: Form) throws(TemplateError) -> RemoteConfigTemplate {
        guard target != form else { return self }
        var list: [JSONValue] = []
        for (index, condition) in conditions.enumerated() {
            var entry = document["conditions"]!.arrayValue![index].objectValue!
            switch target {
            case .server:
                let structured: JSONValue
                do {
                    structured = try ServerCondition.json(of: ServerCondition.canonical(condition.node))
                } catch {
                    throw TemplateError("condition '\(condition.name)' has no server form: \(error.message)")
                }
                entry["condition"] = structured
                entry["expression"] = nil
                entry["tagColor"] = nil
            case .client:
                if let opaque = condition.node.opaqueTerms.first {
                    throw TemplateError(
                        "condition '\(condition.name)' has no client form: '\(opaque.text)' is not an expression element"
                    )
                }
                entry["expression"] = .string(ExpressionRenderer.text(condition.node))
                entry["condition"] = nil
            }
            list.append(.object(entry))
        }
        var doc = document
        if doc["conditions"]?.arrayValue != nil { doc["conditions"] = .array(list) }
        return try RemoteConfigTemplate(json: .object(doc), preferredForm: target)
    }
}
