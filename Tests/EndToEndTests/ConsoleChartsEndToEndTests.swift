import Foundation
import Testing
import TestSupport

/// The charts (`c`, `z`) of `rollout demo` in a real terminal, read back by pyte from tmux's screen with its
/// colours: the exposed arm in the chart role's colour, the control arm in the muted role's, and without colour
/// (NO_COLOR) no colour at all and the arms told apart by their lines.
@Suite("console charts in a real terminal", .serialized)
struct ConsoleChartsEndToEndTests {
    /// The default theme's colours (256-colour palette, as pyte names them): `chart` #5fafaf (73), `muted` #8a8a8a
    /// (245).
    static let chartColour = "5fafaf"
    static let mutedColour = "8a8a8a"

    /// Reads the screen into pyte and reports, for the success-ratio pane (the left half of the top half): the
    /// colours of the legend's exposed and control glyphs, and every colour of a braille cell in its plot.
    static let reader = #"""
        import json, sys, pyte
        w, h = int(sys.argv[2]), int(sys.argv[3])
        screen = pyte.Screen(w, h)
        pyte.Stream(screen).feed(open(sys.argv[1], encoding="utf-8").read().replace("\n", "\r\n"))
        out = {"exposed": None, "control": None, "plot": [], "braille": 0}
        half = w // 2
        for y in range(1, h // 2):
            row = "".join(screen.buffer[y][x].data for x in range(half))
            for name in ("exposed", "control"):
                i = row.find(" " + name)
                if i > 0 and out[name] is None:
                    out[name] = screen.buffer[y][i - 1].fg
            if "┤" in row or "│ " in row[:9]:
                for x in range(9, half - 1):
                    c = screen.buffer[y][x]
                    if "\u2801" <= c.data <= "\u28ff" and "exposed" not in row and "control" not in row:
                        out["braille"] += 1
                        if c.fg not in out["plot"]:
                            out["plot"].append(c.fg)
        print(json.dumps(out))
        """#

    struct Reading: Decodable {
        var exposed: String?
        var control: String?
        var plot: [String]
        var braille: Int
    }

    static func read(_ session: TerminalSession, width: Int, height: Int) throws -> Reading {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("charts-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: file) }
        try session.screenWithAttributes().write(to: file, atomically: true, encoding: .utf8)
        let r = try TestSupport.run(try TestSupport.python(), ["-c", reader, file.path, String(width), String(height)])
        guard r.status == 0 else { throw TestSupport.Failure("pyte reader failed: \(r.stderr)") }
        return try JSONDecoder().decode(Reading.self, from: Data(r.stdout.utf8))
    }

    static func charts(environment: [String: String?]) throws -> (Reading, String, String) {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
        let command = [
            f.binary, "demo", "--store", f.store, "--operator", "ana@example.com", "--scenario", "steady", "--devices",
            "400", "--speed", "600",
        ]
        let session = try TerminalSession(command, width: 120, height: 40, environment: environment)
        defer { session.close() }
        _ = try session.waitUntil("the first telemetry", timeout: 60) { !$0.contains("✓ 0 success") && $0.contains(" ● ") }
        try session.press("c")
        _ = try session.waitFor("Attestation success", timeout: 15)
        // The history is read from the store's minute counters: wait until both arms have drawn a line.
        var reading = try read(session, width: 120, height: 40)
        let deadline = Date(timeIntervalSinceNow: 30)
        while reading.braille < 20 || reading.exposed == nil, Date() < deadline {
            usleep(200_000)
            reading = try read(session, width: 120, height: 40)
        }
        let shown = try session.screen()
        try session.press("z")
        let zoomed = try session.waitFor("6 h · z zooms", timeout: 15)
        return (reading, shown, zoomed)
    }

    @Test func chartsDrawTheArmsInTheirRolesAndZoom() throws {
        let (colour, _, zoomed) = try Self.charts(environment: ["NO_COLOR": nil])
        #expect(colour.braille >= 20, "the success pane drew \(colour.braille) braille cells")
        #expect(colour.exposed == Self.chartColour, "the exposed legend is \(String(describing: colour.exposed))")
        #expect(colour.control == Self.mutedColour, "the control legend is \(String(describing: colour.control))")
        #expect(colour.plot.contains(Self.chartColour), "plot colours \(colour.plot)")
        #expect(Set(colour.plot).isSubset(of: [Self.chartColour, Self.mutedColour]), "plot colours \(colour.plot)")
        #expect(zoomed.contains("Charts: last 6 h"), "\(zoomed)")

        let (mono, screen, _) = try Self.charts(environment: ["NO_COLOR": "1"])
        #expect(mono.braille >= 20, "the monochrome success pane drew \(mono.braille) braille cells")
        // Without colour the legend tells the arms apart by their lines: solid for exposed, dashed for control.
        #expect(screen.contains("⠤⠤⠤ exposed") && screen.contains("⠤ ⠤ control"), "\(screen)")
        #expect(mono.exposed == "default" && mono.control == "default" && mono.plot == ["default"], "\(mono)")
    }
}
