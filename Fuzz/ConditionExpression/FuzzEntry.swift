import RemoteConfig

// libFuzzer entry for the condition expression parser. Properties: no trap; an accepted expression rendered
// from its tree parses back to the same tree; an edit of its first percent term stays parseable.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    guard let expression = try? ConditionExpression(parsing: text) else { return 0 }
    let rendered = ExpressionRenderer.text(expression.root)
    guard let again = try? ConditionExpression(parsing: rendered) else {
        preconditionFailure("the rendering \(rendered) of \(text) does not parse")
    }
    precondition(again.root == expression.root, "render -> parse changed the condition")
    if !expression.percentSpans.isEmpty {
        // A term may refuse an operator of another shape (a range for a bound); an edit that is made must parse.
        if let replaced = try? expression.replacingPercent(at: 0, with: .lessOrEqual(MicroPercent(12_500_000))) {
            precondition((try? ConditionExpression(parsing: replaced.text)) != nil, "the edited expression does not parse")
        }
    }
    return 0
}
