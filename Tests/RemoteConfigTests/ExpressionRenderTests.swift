import RemoteConfig
import Testing

/// Rendering a condition tree as client expression text, then parsing it, gives the same tree (the property of
/// the ConditionExpression fuzz target; each case here is one it found).
struct ExpressionRenderTests {
    @Test(arguments: ["!!!!!!!! =\n\n=", "! = x", "!(= a) && b", "!!true", "percent('s') between 1 and 2 || !app.id == 'x'",
        "percent('') > 50 && perce('') > 50 && perce88888888",
        "!!!!!!!! =\u{65E}\u{FFFD}\u{FFFD}\u{FFFD}\r\u{FFFD}=\u{16}\u{FFFD}\u{FFFD}",
    ])
    func renderThenParseKeepsTheTree(_ text: String) throws {
        let e = try ConditionExpression(parsing: text)
        let rendered = ExpressionRenderer.text(e.root)
        let again = try ConditionExpression(parsing: rendered).root
        #expect(again == e.root, "\(rendered.debugDescription): \(e.root) became \(again)")
    }
}
