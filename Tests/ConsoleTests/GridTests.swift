import Console
import Glibc
import Testing

@Suite("Character widths and the grid")
struct GridTests {
    /// Ranges the console meets: ASCII, Latin, box drawing, symbols, CJK, Hangul, fullwidth forms, emoji.
    static let ranges: [ClosedRange<UInt32>] = [
        0x20...0x7E, 0xA0...0x24F, 0x300...0x36F, 0x370...0x3FF, 0x400...0x4FF, 0x1100...0x11FF,
        0x2000...0x206F, 0x2190...0x21FF, 0x2500...0x25FF, 0x2600...0x27BF, 0x2E80...0x2EFF, 0x3000...0x30FF,
        0x4E00...0x4FFF, 0xAC00...0xAD00, 0xFE00...0xFE0F, 0xFF00...0xFFEF, 0x1F300...0x1F64F, 0x1F680...0x1F6FF,
        0x1F900...0x1F9FF, 0x20000...0x20100,
    ]

    @Test("widths agree with the C library's wcwidth (what terminals and tmux use)")
    func agreesWithWcwidth() throws {
        let locale = setlocale(LC_CTYPE, "C.UTF-8")
        try #require(locale != nil, "C.UTF-8 locale missing")
        // Glibc's Swift module hides wcwidth (it needs _XOPEN_SOURCE); look the C function up by name.
        let symbol = try #require(dlsym(dlopen(nil, RTLD_NOW), "wcwidth"))
        let wcwidth = unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
        var mismatches: [String] = []
        for range in Self.ranges {
            for v in range {
                guard let scalar = Unicode.Scalar(v) else { continue }
                let c = Int(wcwidth(Int32(bitPattern: v)))
                guard c >= 0 else { continue }
                if CharacterWidth.of(scalar) != c {
                    mismatches.append(String(format: "U+%04X ours %d libc %d", v, CharacterWidth.of(scalar), c))
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count) differ: \(mismatches.prefix(20))")
    }

    @Test("wide characters take two cells; cutting one in half leaves spaces, never half a character")
    func wide() {
        var g = Grid(size: Size(width: 6, height: 1))
        #expect(g.write("漢字x", x: 0, y: 0) == 5)
        #expect(g[0, 0].width == 2)
        #expect(g[1, 0].isContinuation)
        #expect(g.lines == ["漢字x "])
        g.write("a", x: 1, y: 0)
        #expect(g.lines == [" a字x "])
        #expect(g[0, 0].width == 1)
        g.write("b", x: 2, y: 0)
        #expect(g.lines == [" ab x "])
        var h = Grid(size: Size(width: 3, height: 1))
        #expect(h.write("ab漢", x: 0, y: 0) == 3)
        #expect(h.lines == ["ab…"])
    }

    @Test("writes clip to the area and end in an ellipsis when cut")
    func clipping() {
        var g = Grid(size: Size(width: 10, height: 2))
        g.write("hello world", x: 2, y: 0, limit: 6)
        #expect(g.lines[0] == "  hello…  ")
        g.write("x", x: 20, y: 0)
        g.write("x", x: 0, y: 5)
        g.write("abc", x: -2, y: 1)
        #expect(g.lines[1] == "c         ")
        g.write("tab\tbell\u{7}", x: 0, y: 1)
        #expect(g.lines[1] == #"tab\u0009…"#)
    }

    @Test("combining marks and zero-width scalars are dropped, not given a cell")
    func zeroWidth() {
        var g = Grid(size: Size(width: 5, height: 1))
        #expect(g.write("e\u{301}a\u{200B}b", x: 0, y: 0) == 3)
        #expect(g.lines == ["eab  "])
    }

    @Test("sparklines scale to the largest value, newest at the right")
    func sparkline() {
        let lines = Sparkline(values: [0, 1, 4, 8]).lines(width: 6, rows: 1)
        #expect(lines.map { $0.map(\.text).joined() } == ["   ▁▄█"])
        let tall = Sparkline(values: [16, 8, 1]).lines(width: 3, rows: 2)
        #expect(tall.map { $0.map(\.text).joined() } == ["█  ", "██▁"])
        #expect(Sparkline(values: []).lines(width: 3, rows: 1).map { $0.map(\.text).joined() } == ["   "])
    }

    @Test("gauges fill in eighths")
    func gauge() {
        #expect(Gauge.line(0.5, width: 4).map(\.text).joined() == "██░░")
        #expect(Gauge.line(0.0625, width: 2).map(\.text).joined() == "▏░")
        #expect(Gauge.line(nil, width: 3).map(\.text).joined() == "···")
        #expect(Gauge.line(2, width: 2).map(\.text).joined() == "██")
    }

    @Test("the hint bar keeps the most important hints when narrow")
    func hints() {
        let items = [
            HintBar.Item("a", "one", priority: 5), HintBar.Item("?", "help", priority: 0),
            HintBar.Item("q", "quit", priority: 0),
        ]
        #expect(HintBar.line(items, width: 40).map(\.text).joined() == " a one  ? help  q quit")
        #expect(HintBar.line(items, width: 16).map(\.text).joined() == " ? help  q quit")
    }
}

@Suite("Rendering at every size")
struct SizeSweepTests {
    static func states() -> [ConsoleState] {
        var confirm = Fixture.state(Fixture.model())
        if case .preview(let r)? = confirm.handle(.key(.character("+"))).first {
            _ = confirm.handle(.previewReady(Fixture.preview(for: r)))
        }
        var history = Fixture.state(Fixture.model())
        _ = history.handle(.key(.character("h")))
        _ = history.handle(.historyLoaded(ListViewTests.records(30)))
        var help = Fixture.state(Fixture.model())
        _ = help.handle(.key(.character("?")))
        var prompt = Fixture.state(Fixture.model())
        _ = prompt.handle(.key(.character("=")))
        return [
            Fixture.state(nil), Fixture.state(Fixture.model()), confirm, history, help, prompt,
            Fixture.state(
                Fixture.model(state: .killed, verdict: .halt, reasons: [String(repeating: "long ", count: 40)])),
        ]
    }

    @Test("no size crashes, and every wide character keeps its continuation cell")
    func sweep() {
        let heights = [0, 1, 2, 3, 9, 15, 16, 17, 23, 24, 25, 33, 34, 40, 61]
        for state in Self.states() {
            for width in Array(0...130) + [200, 300] {
                for height in heights {
                    let size = Size(width: width, height: height)
                    let grid = ConsoleScreen.render(state, size: size)
                    #expect(grid.size == size)
                    #expect(grid.cells.count == width * height)
                    for y in 0..<height {
                        for x in 0..<width {
                            let cell = grid[x, y]
                            if cell.width == 2 {
                                #expect(x + 1 < width && grid[x + 1, y].isContinuation, "\(size) at \(x),\(y)")
                            }
                            if cell.isContinuation {
                                #expect(x > 0 && grid[x - 1, y].width == 2, "\(size) at \(x),\(y)")
                            }
                        }
                    }
                    if let cursor = grid.cursor {
                        #expect(cursor.x >= 0 && cursor.x < width && cursor.y >= 0 && cursor.y < height)
                    }
                }
            }
        }
    }
}
