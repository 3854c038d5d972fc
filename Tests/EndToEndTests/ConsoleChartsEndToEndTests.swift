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
        # No newline after the last row: it would scroll the screen up by one.
        pyte.Stream(screen).feed(open(sys.argv[1], encoding="utf-8").read().rstrip("\n").replace("\n", "\r\n"))
        out = {"exposed": None, "control": None, "plot": [], "braille": 0, "at": []}
        half = w // 2
        # The top panes: the rows between the header and the bottom panes (the body less header, notice, hints).
        for y in range(1, 1 + (h - 3) // 2):
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
                        out["at"].append("%d,%d,%s" % (x, y, c.data))
                        if c.fg not in out["plot"]:
                            out["plot"].append(c.fg)
        print(json.dumps(out))
        """#

    struct Reading: Decodable {
        var exposed: String?
        var control: String?
        var plot: [String]
        var braille: Int
        /// Where the braille cells are: column, row, glyph.
        var at: [String]
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
        // The history is read from the store's minute counters: wait until both arms have drawn a line. On a
        // starved machine (the CI's release lane builds beside the suites) the demo fills its minutes more slowly:
        // the bound is generous, and only a failing run waits it out.
        var reading = try read(session, width: 120, height: 40)
        let deadline = Date(timeIntervalSinceNow: 90)
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

    /// The zoom reads what the store holds, not what the console saw: telemetry from three to four hours ago (landed
    /// before the console started) is absent from the last hour and drawn at 6 h and 24 h.
    @Test func zoomReadsOlderMinutesFromTheStore() throws {
        let f = try ConsoleEndToEndTests.Fixture()
        try #require(f.cli(minutesAgo: 300, "set", "10", "--reason", "start").status == 0)
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        var lines: [String] = []
        for minute in 180..<240 {
            let t = now - Int64(minute) * 60_000_000
            for i in 0..<5 {
                for cohort in ["enabled", "control"] {
                    let id = "\(cohort.prefix(1))\(i)"
                    lines.append(#"{"t":\#(t + Int64(i)),"i":"\#(id)","k":"session","c":"\#(cohort)","p":"appAttest","os":"17.4"}"#)
                    lines.append(#"{"t":\#(t + Int64(i) + 1),"i":"\#(id)","k":"success","c":"\#(cohort)","p":"appAttest"}"#)
                }
            }
        }
        let ingested = try f.cli("ingest", "-", stdin: lines.joined(separator: "\n") + "\n")
        try #require(ingested.status == 0, "\(ingested.stderr)")
        let session = try f.console(width: 120, height: 40)
        defer { session.close() }
        // The newest event is three hours old: the header says STALE, the panels show the counts.
        _ = try session.waitFor("✓ 600 success", timeout: 30)
        try session.press("c")
        _ = try session.waitFor("1 h · z zooms", timeout: 15)
        let hour = try Self.read(session, width: 120, height: 40)
        let hourScreen = try session.screen()
        #expect(hour.braille == 0, "the last hour has no telemetry, yet \(hour.braille) braille cells \(hour.at): \(hourScreen)")
        for zoom in ["6 h", "24 h"] {
            try session.press("z")
            _ = try session.waitFor(zoom + " · z zooms", timeout: 15)
            let reading = try Self.read(session, width: 120, height: 40)
            // An hour of data is a sixth of the 6 h window and a twenty-fourth of the 24 h one (two or three cells).
            #expect(reading.braille >= 2, "at \(zoom) the success pane drew \(reading.braille) braille cells")
        }
    }
}
