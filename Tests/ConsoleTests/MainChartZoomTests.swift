import Console
import Testing
import Timekeeping

/// The main screen's attestation chart follows the charts' zoom (`z`), its title saying the window; Tab on the
/// charts screen (where the log is hidden) does nothing; the crash panel shows crash-free users over a window.
@Suite("Main chart zoom")
struct MainChartZoomTests {
    /// The main screen (charts not shown) after `z` pressed until `zoom`.
    static func mainState(zoom: ChartZoom, size: Size) -> ConsoleState {
        var s = Fixture.state(ChartFixture.model(), size: size)
        while s.chartZoom != zoom { _ = s.handle(.key(.character("z"))) }
        return s
    }

    /// The row holding the attestation panel's title.
    static func attestationTitle(_ grid: Grid) -> String? {
        grid.lines.first { $0.contains("Attestation") && $0.contains("per minute") }
    }

    @Test("z on the main screen zooms its attestation chart, whose title says the window", arguments: [80, 120, 200])
    func zoomFollows(width: Int) throws {
        let size = Size(width: width, height: width == 80 ? 24 : width == 120 ? 40 : 60)
        var titles: [ChartZoom: String] = [:]
        var charts: [ChartZoom: [String]] = [:]
        for zoom in ChartZoom.allCases {
            let s = Self.mainState(zoom: zoom, size: size)
            #expect(!s.chartsShown)
            let grid = ConsoleScreen.render(s, size: size)
            titles[zoom] = try #require(Self.attestationTitle(grid), "no attestation title at \(zoom.text)")
            // The chart's rows: those starting with the row labels inside the panel.
            charts[zoom] = grid.lines.filter { $0.contains("all/m ") || $0.contains("fail  ") }
        }
        #expect(titles[.hour]!.contains("per minute, last 30 min"), "\(titles[.hour]!)")
        #expect(titles[.quarterHour]!.contains("per minute, last 15 min"), "\(titles[.quarterHour]!)")
        #expect(titles[.sixHours]!.contains("last 6 h"), "\(titles[.sixHours]!)")
        #expect(titles[.day]!.contains("last 24 h"), "\(titles[.day]!)")
        // 1,440 minutes never fit one column each: each column is the mean of several minutes.
        #expect(titles[.day]!.contains("mean of"), "\(titles[.day]!)")
        #expect(charts[.day] != charts[.hour] && charts[.sixHours] != charts[.hour] && charts[.quarterHour] != charts[.hour])
        var s = Self.mainState(zoom: .hour, size: size)
        _ = s.handle(.key(.character("z")))
        #expect(s.notice?.text == "Attestation chart: last 6 h (c shows every chart)")
    }

    @Test(
        "golden: the main screen zoomed to 6 h and 24 h at 80×24 and 120×40, monochrome",
        arguments: [ChartZoom.sixHours, .day], [Size(width: 80, height: 24), Size(width: 120, height: 40)])
    func golden(_ zoom: ChartZoom, _ size: Size) throws {
        let grid = ConsoleScreen.render(Self.mainState(zoom: zoom, size: size), size: size)
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: "main \(zoom.text)"),
            name: "main-\(zoom.minutes)min-\(size.width)x\(size.height)-mono")
    }

    @Test("a zoomed-out series is the mean per minute of each column's minutes, newest column ending now")
    func downsampledMeans() {
        let history = ChartFixture.history()
        let info = Fixture.model().attestation
        let (zoomed, title) = info.zoomed(.day, history: history, chartWidth: 100)
        // ⌈1440 / 100⌉ = 15 minutes a column, 96 columns.
        #expect(zoomed.minutesPerPoint == 15 && zoomed.perMinute.count == 96, "\(zoomed.minutesPerPoint) \(zoomed.perMinute.count)")
        #expect(title == "per minute (mean of 15 min), last 24 h")
        let last = history.minutes.suffix(15).map(\.all)
        let successes = last.map(\.successes).reduce(0, +)
        let crashes = last.map(\.crashes).reduce(0, +)
        #expect(zoomed.perMinute.last!.success == Int((Double(successes) / 15).rounded()))
        #expect(zoomed.perMinute.last!.crashes == crashes)
        #expect(zoomed.seriesEnd == Instant(microseconds: history.end.microseconds - 15 * 60_000_000))
        // Without a history the wide zooms say what they show instead.
        let (plain, plainTitle) = info.zoomed(.sixHours, history: nil, chartWidth: 100)
        #expect(plain == info && plainTitle == "per minute, last 30 min (no 6 h history)")
    }

    @Test("Tab on the charts screen leaves the hidden log alone; on the main screen it focuses the log")
    func tabOnCharts() {
        var s = Fixture.state(ChartFixture.model())
        _ = s.handle(.key(.character("c")))
        #expect(s.chartsShown)
        _ = s.handle(.key(.tab))
        #expect(s.logSelection == nil)
        _ = s.handle(.key(.character("c")))
        _ = s.handle(.key(.tab))
        #expect(s.logSelection != nil)
    }

    @Test("the crash panel shows crash-free users over its window above the cumulative share, or why it cannot")
    func windowedRow() throws {
        var m = Fixture.model()
        m.crash.windowed = WindowedCrashFree(window: "24 h", exposed: 0.887, exposedUsers: 1_020, control: 0.891, controlUsers: 990)
        var grid = ConsoleScreen.render(Fixture.state(m, size: Size(width: 120, height: 40)), size: Size(width: 120, height: 40))
        let row = try #require(grid.lines.first { $0.contains("users 24 h") })
        #expect(row.contains("88.700%") && row.contains("89.100%"), "\(row)")
        #expect(grid.lines.contains { $0.contains("users total") })
        m.crash.windowed?.unavailable = "not available from BigQuery"
        grid = ConsoleScreen.render(Fixture.state(m, size: Size(width: 120, height: 40)), size: Size(width: 120, height: 40))
        let missing = try #require(grid.lines.first { $0.contains("users 24 h") })
        #expect(missing.contains("not available from BigQuery") && !missing.contains("88.700%"), "\(missing)")
    }
}
