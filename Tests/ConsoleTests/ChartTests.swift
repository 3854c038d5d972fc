import Console
import RemoteConfig
import Testing
import Timekeeping

/// A day of per-minute counts for the charts: a steady fleet with a failure burst half an hour ago, the exposed
/// arm crashing a little more in the last hours, and v42 propagating since it was published ten minutes ago.
enum ChartFixture {
    /// The end of the newest minute: the series' newest minute began 20 s before `Fixture.now`.
    static let end = Fixture.at(-40)

    static func history() -> ChartHistory {
        let minutes = (0..<1440).map { i -> ArmMinute in
            let age = 1439 - i
            let burst = (25...31).contains(age) ? 60 : 0
            let exposed = ArmCounts(
                successes: 140 + (i * 37) % 60, failures: 2 + (i * 7) % 5 + burst,
                crashes: (i % 3 == 0 ? 1 : 0) + (age < 240 && i % 2 == 0 ? 1 : 0), sessions: 300 + (i * 13) % 40)
            let control = ArmCounts(
                successes: 150 + (i * 29) % 50, failures: 2 + (i * 5) % 4, crashes: i % 3 == 1 ? 1 : 0,
                sessions: 310 + (i * 11) % 40)
            return ArmMinute(exposed: exposed, control: control)
        }
        let published = Fixture.at(600)
        var samples: [PropagationSample] = (1...30).map { k in
            PropagationSample(at: Fixture.at(Int64(600 + 60 * (31 - k))), share: 0.97, version: "41")
        }
        for k in 0...10 {
            let share = 0.952 * (1 - 1 / (1 + Double(k) * Double(k) / 4))
            samples.append(
                PropagationSample(
                    at: Instant(microseconds: published.microseconds + Int64(k) * 60_000_000), share: share, version: "42"))
        }
        return ChartHistory(
            minutes: minutes, end: end,
            before: ArmMinute(
                exposed: ArmCounts(successes: 9_000, failures: 180, crashes: 6, sessions: 3_000),
                control: ArmCounts(successes: 9_100, failures: 170, crashes: 5, sessions: 3_000)),
            propagation: samples)
    }

    static func model() -> ConsoleModel {
        var m = Fixture.model()
        m.history = history()
        return m
    }

    /// The charts at a zoom, reached by the keys: `c`, then `z` until the zoom.
    static func state(zoom: ChartZoom, size: Size) -> ConsoleState {
        var s = Fixture.state(model(), size: size)
        _ = s.handle(.key(.character("c")))
        while s.chartZoom != zoom { _ = s.handle(.key(.character("z"))) }
        return s
    }
}

@Suite("Charts")
struct ChartTests {
    @Test("c shows the charts and back; z cycles 1 h → 6 h → 24 h → 15 min → 1 h")
    func keys() {
        var s = Fixture.state(ChartFixture.model())
        #expect(!s.chartsShown && s.chartZoom == .hour)
        _ = s.handle(.key(.character("c")))
        #expect(s.chartsShown)
        var seen: [ChartZoom] = []
        for _ in 0..<4 {
            _ = s.handle(.key(.character("z")))
            seen.append(s.chartZoom)
        }
        #expect(seen == [.sixHours, .day, .quarterHour, .hour])
        #expect(s.notice?.text == "Charts: last 1 h")
        _ = s.handle(.key(.character("c")))
        #expect(!s.chartsShown && s.chartZoom == .hour)
        #expect(KeyMap.intent(for: .character("z")) == .cycleZoom)
        #expect(KeyMap.intent(for: .character("c")) == .toggleCharts)
    }

    @Test("every minute of the window falls in exactly one column when columns are fewer than minutes")
    func downsampling() {
        for (minutes, columns) in [(1440, 66), (1440, 360), (360, 100), (60, 60), (15, 66)] {
            let axis = ChartTimeAxis(end: ChartFixture.end, minutes: minutes, columns: columns)
            let ranges = (0..<columns).map(axis.minuteRange(ofColumn:))
            if columns <= minutes {
                #expect(ranges.map(\.count).reduce(0, +) == minutes, "\(minutes) minutes in \(columns) columns")
                #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
            } else {
                // A short window repeats each minute over several columns, in order, every minute shown.
                #expect(Set(ranges.map(\.lowerBound)) == Set(0..<minutes))
            }
        }
    }

    @Test("the crash interval is the 95% Wilson interval and narrows as sessions accumulate")
    func interval() {
        // 2 crashes in 1,000 sessions: Wilson 95% (z = 1.96) is 0.000549 ... 0.007263.
        let (p, lo, hi) = ChartMath.perThousand(crashes: 2, sessions: 1_000)
        #expect(abs(p - 2) < 1e-9)
        #expect(abs(lo - 0.5487) < 0.001 && abs(hi - 7.2634) < 0.001, "\(lo) \(hi)")
        let wide = ChartMath.perThousand(crashes: 20, sessions: 10_000)
        let narrow = ChartMath.perThousand(crashes: 200, sessions: 100_000)
        #expect(narrow.2 - narrow.1 < (wide.2 - wide.1) / 3)
        #expect(ChartMath.niceCeiling(3.1) == 5 && ChartMath.niceCeiling(0.21) == 0.25 && ChartMath.niceCeiling(40) == 50)
    }

    @Test("without colour the two arms differ: the control line is dashed, the bands are ░ and ▒")
    func monochromeGlyphs() {
        var canvas = ChartCanvas(width: 8, height: 2)
        canvas.plot(Array(repeating: 10, count: 16), in: 0...100, series: 0)
        canvas.plot(Array(repeating: 90, count: 16), in: 0...100, series: 1)
        canvas.band(
            lower: Array(repeating: 30, count: 16), upper: Array(repeating: 45, count: 16), in: 0...100, series: 0)
        let rows = canvas.lines(roles: [.chart, .muted]).map { $0.map(\.text).joined() }
        // Top row: the control line at 90 in every other cell; bottom row: the exposed line in every cell.
        #expect(Array(rows[0]).enumerated().allSatisfy { i, ch in (i % 2 == 0) == (ch != " ") }, "\(rows[0])")
        #expect(!rows[1].contains(" "), "\(rows[1])")
        var both = ChartCanvas(width: 2, height: 1)
        both.band(lower: [10, 10, 10, 10], upper: [90, 90, 90, 90], in: 0...100, series: 0)
        both.band(lower: [10, 10], upper: [90, 90], in: 0...100, series: 1)
        #expect(both.lines(roles: [.chart, .muted]).first?.map(\.text).joined() == "▓░")
    }

    @Test("the percentage chart marks each change in the window with who and from → to; older ones drop out")
    func changeMarks() {
        let size = Size(width: 120, height: 40)
        let hour = ConsoleScreen.render(ChartFixture.state(zoom: .hour, size: size), size: size).lines.joined(separator: "\n")
        #expect(hour.contains("▼v42") && hour.contains("ana@example.com 10% → 12.5%"))
        #expect(!hour.contains("bo@example.com"), "v41 (70 min ago) is outside the hour")
        let day = ConsoleScreen.render(ChartFixture.state(zoom: .day, size: size), size: size).lines.joined(separator: "\n")
        #expect(day.contains("bo@example.com 5% → 10%") && day.contains("bo@example.com 1% → 5%"))
        #expect(day.contains("24 h · z zooms") && hour.contains("1 h · z zooms"))
    }

    @Test("the history keeps at most a day of minutes and of propagation samples")
    func bounded() {
        let many = Array(repeating: ArmMinute(), count: 5_000)
        let samples = (0..<5_000).map { PropagationSample(at: Instant(seconds: Int64($0) * 60), share: 0.5, version: "1") }
        let h = ChartHistory(minutes: many, end: ChartFixture.end, propagation: samples)
        #expect(h.minutes.count == 1_440 && h.propagation.count == 1_440)
    }

    @Test("every size from the minimum up draws the four charts without a crash, each with its title")
    func sizes() {
        for (w, h) in [(60, 16), (61, 17), (79, 23), (80, 24), (97, 31), (160, 50), (300, 100)] {
            let size = Size(width: w, height: h)
            for zoom in ChartZoom.allCases {
                let text = ConsoleScreen.render(ChartFixture.state(zoom: zoom, size: size), size: size).lines
                    .joined(separator: "\n")
                for title in ["Attestation success", "Fatal crashes", "Rollout percentage", "Propagation of v42"] {
                    #expect(text.contains(title), "\(title) missing at \(w)×\(h), \(zoom.text)")
                }
            }
        }
    }

    @Test("without a history the charts say so instead of drawing empty axes")
    func noHistory() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 24))
        _ = s.handle(.key(.character("c")))
        let text = ConsoleScreen.render(s, size: Size(width: 80, height: 24)).lines.joined(separator: "\n")
        #expect(text.contains("No chart history from this source") && !text.contains("Attestation success"))
    }

    @Test("the crash chart's running rate counts from the rollout start, not from the first minute shown")
    func crashesFromTheStart() {
        let minutes = (0..<60).map { i in
            ArmMinute(
                exposed: ArmCounts(crashes: i < 30 ? 100 : 1, sessions: 300),
                control: ArmCounts(crashes: i < 30 ? 100 : 1, sessions: 300))
        }
        var history = ChartHistory(minutes: minutes, end: ChartFixture.end)
        let size = Size(width: 120, height: 40)
        func screen() -> String {
            var m = Fixture.model()
            m.history = history
            var s = Fixture.state(m, size: size)
            _ = s.handle(.key(.character("c")))
            return ConsoleScreen.render(s, size: size).lines.joined(separator: "\n")
        }
        // Counted from the first minute: a third of the sessions crashed, the axis goes to 500 per 1,000.
        #expect(screen().contains("500┤"))
        history.since = history.start(ofMinute: 30)
        // From the start (minute 30): 1 in 300, the axis stops at 20 (the first minute's interval reaches 18.6).
        let fromStart = screen()
        #expect(!fromStart.contains("500┤") && fromStart.contains(" 20┤"), "\(fromStart)")
    }
}
