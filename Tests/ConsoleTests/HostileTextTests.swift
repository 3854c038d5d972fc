import Console
import Testing

/// Issue 13: text from outside reaches the cell grid only through `Grid.write`, which escapes what a terminal
/// would obey; the hostile error class from device telemetry shows escaped on the rendered screen.
@Suite("hostile text on the console")
struct HostileTextTests {
    static let hostile = "rejected:\u{1b}]0;pwned\u{07}\u{1b}[2J"

    @Test("an error class with terminal escapes renders escaped, never as control characters")
    func renderedGridEscapesTheErrorClass() {
        var model = Fixture.model()
        model.attestation.failureClasses.insert(FailureClass(name: Self.hostile, count: 300, alarmed: true), at: 0)
        let size = Size(width: 160, height: 48)
        let grid = ConsoleScreen.render(Fixture.state(model, size: size), size: size)
        #expect(!grid.cells.contains { $0.scalar.value < 0x20 || (0x7F...0x9F).contains($0.scalar.value) })
        #expect(grid.lines.contains { $0.contains(#"rejected:\u001b]0;pwned\u0007"#) }, "\(grid.lines.joined(separator: "\n"))")
    }

    @Test("bidi overrides and C1 controls are escaped where text enters the grid")
    func gridWriteEscapes() {
        var g = Grid(size: Size(width: 40, height: 1))
        g.write("a\u{202E}b\u{9B}2J", x: 0, y: 0)
        #expect(g.lines[0].hasPrefix(#"a\u202eb\u009b2J"#))
    }
}
