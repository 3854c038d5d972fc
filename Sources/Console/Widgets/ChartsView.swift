import RemoteConfig
import Timekeeping

/// The charts screen (`c`): four pictures on the telemetry's time, over the zoom's window (`z`: 15 min, 1 h, 6 h,
/// 24 h), each with its axes, units and legend:
/// - attestation success ratio per arm (exposed solid, control dashed);
/// - fatal crashes per 1,000 sessions per arm since the rollout start, with the 95% interval that narrows as
///   sessions accumulate (`░` exposed, `▒` control, `▓` both);
/// - the rollout percentage over time, each published change marked `▼vN` and listed (who, from → to);
/// - propagation: the share of active devices on the newest version.
///
/// Nothing depends on colour: the series differ by line (solid, dashed), the bands by shade, the changes by their
/// marker and label. The panes are laid out two by two from 80×24; below that they are stacked and shortened.
public enum ChartsView {
    public static func render(_ m: ConsoleModel, _ s: ConsoleState, into grid: inout Grid, body: Rect) {
        let zoom = s.chartZoom
        guard let history = m.history else {
            grid.draw(
                [[Span("No chart history from this source: it keeps no per-minute counters.", .muted)]],
                in: body.inset(dx: 2, dy: 1))
            return
        }
        let (top, bottom) = body.splitTop(body.height / 2)
        let (a, b) = top.splitLeft(top.width / 2)
        let (c, d) = bottom.splitLeft(bottom.width / 2)
        let offset = s.configuration.utcOffsetSeconds
        let panes: [(Rect, ChartPane)] = [
            (a, successPane(history, zoom: zoom)),
            (b, crashPane(history, zoom: zoom)),
            (c, percentPane(m, history, zoom: zoom, utcOffsetSeconds: offset)),
            (d, propagationPane(m, history, zoom: zoom)),
        ]
        for (area, pane) in panes {
            let inner = Frame(
                title: [Span(pane.title, .title)],
                status: [Span(zoom.text + (area.width >= 50 ? " · z zooms" : ""), .muted)]
            ).render(into: &grid, area: area)
            grid.draw(pane.lines(width: inner.width, height: inner.height, utcOffsetSeconds: offset), in: inner)
        }
    }

    // MARK: The four panes

    /// The arms' counts summed over the minutes each dot column covers (nil where the history has no minute).
    static func columns(_ h: ChartHistory, _ axis: ChartTimeAxis) -> [ArmMinute?] {
        let first = h.minutes.count - axis.minutes
        return (0..<axis.columns).map { c in
            let r = axis.minuteRange(ofColumn: c)
            var sum = ArmMinute()
            var any = false
            for i in r where first + i >= 0 && first + i < h.minutes.count {
                let minute = h.minutes[first + i]
                sum.exposed = sum.exposed + minute.exposed
                sum.control = sum.control + minute.control
                any = true
            }
            return any ? sum : nil
        }
    }

    static func successPane(_ h: ChartHistory, zoom: ChartZoom) -> ChartPane {
        var pane = ChartPane(title: "Attestation success", unit: "% of attempts", history: h, zoom: zoom)
        pane.build = { canvas, axis in
            let cols = columns(h, axis)
            func ratio(_ a: ArmCounts?) -> Double? {
                guard let a, a.attempts > 0 else { return nil }
                return Double(a.successes) / Double(a.attempts) * 100
            }
            let exposed = cols.map { ratio($0?.exposed) }
            let control = cols.map { ratio($0?.control) }
            let lowest = (exposed + control).compactMap { $0 }.min() ?? 100
            let floor = [99.0, 98, 95, 90, 80, 50, 0].first { $0 <= lowest - 0.5 } ?? 0
            let range = floor...100.0
            canvas.plot(control, in: range, series: 1)
            canvas.plot(exposed, in: range, series: 0)
            return range
        }
        pane.yLabel = { Format.fixed($0, $0 >= 99.95 || $0 == $0.rounded() ? 0 : 1) + "%" }
        pane.legend = ChartPane.armLegend([])
        return pane
    }

    static func crashPane(_ h: ChartHistory, zoom: ChartZoom) -> ChartPane {
        var pane = ChartPane(title: "Fatal crashes", unit: "per 1,000 sessions, ░▒ 95% interval", history: h, zoom: zoom)
        pane.build = { canvas, axis in
            // Running totals from the rollout start: the rate the guardrail compares, and its interval narrowing.
            let first = h.minutes.count - axis.minutes
            var running = h.before
            // Minutes before the rollout started are not its crashes.
            let counted = { (index: Int) -> Bool in
                h.since.map { h.start(ofMinute: index).microseconds >= BucketStart.minute($0) } ?? true
            }
            for i in 0..<max(0, first) where counted(i) {
                running.exposed = running.exposed + h.minutes[i].exposed
                running.control = running.control + h.minutes[i].control
            }
            var cumulative: [ArmMinute] = []
            for i in 0..<axis.minutes {
                if first + i >= 0 && first + i < h.minutes.count && counted(first + i) {
                    running.exposed = running.exposed + h.minutes[first + i].exposed
                    running.control = running.control + h.minutes[first + i].control
                }
                cumulative.append(running)
            }
            func at(_ c: Int) -> ArmMinute? {
                let r = axis.minuteRange(ofColumn: c)
                guard first + r.upperBound > 0 else { return nil }
                return cumulative[r.upperBound - 1]
            }
            let cols = (0..<axis.columns).map(at)
            func rate(_ a: ArmCounts?) -> (Double, Double, Double)? {
                guard let a, a.sessions > 0 else { return nil }
                return ChartMath.perThousand(crashes: a.crashes, sessions: a.sessions)
            }
            let e = cols.map { rate($0?.exposed) }
            let k = cols.map { rate($0?.control) }
            let top = (e + k).compactMap { $0?.2 }.max() ?? 1
            let range = 0.0...ChartMath.niceCeiling(max(0.1, top))
            canvas.band(lower: k.map { $0?.1 }, upper: k.map { $0?.2 }, in: range, series: 1)
            canvas.band(lower: e.map { $0?.1 }, upper: e.map { $0?.2 }, in: range, series: 0)
            canvas.plot(k.map { $0?.0 }, in: range, series: 1)
            canvas.plot(e.map { $0?.0 }, in: range, series: 0)
            return range
        }
        pane.yLabel = { ChartMath.label($0) }
        pane.legend = ChartPane.armLegend([])
        return pane
    }

    /// The changes in the window, oldest first, on telemetry time.
    static func changes(_ m: ConsoleModel, in axis: ChartTimeAxis) -> [ChangeRecord] {
        m.changes.filter { axis.column(of: $0.telemetryAt ?? $0.at) != nil }
            .sorted { ($0.telemetryAt ?? $0.at) < ($1.telemetryAt ?? $1.at) }
    }

    static func percentPane(_ m: ConsoleModel, _ h: ChartHistory, zoom: ChartZoom, utcOffsetSeconds: Int)
        -> ChartPane
    {
        var pane = ChartPane(title: "Rollout percentage", unit: "% of users", history: h, zoom: zoom)
        let all = m.changes.sorted { ($0.telemetryAt ?? $0.at) < ($1.telemetryAt ?? $1.at) }
        let current = m.condition.state == .killed ? 0 : m.condition.desiredMicroPercent.value
        func percent(at t: Instant) -> Double {
            // The setting at t: after the last change at or before it; before the first change, what it changed from.
            if let last = all.last(where: { ($0.telemetryAt ?? $0.at) <= t }) {
                return Double(last.to.effectiveMicroPercent.value) / 1_000_000
            }
            if let first = all.first { return Double(first.from.effectiveMicroPercent.value) / 1_000_000 }
            return Double(current) / 1_000_000
        }
        pane.build = { canvas, axis in
            let span = Double(axis.end.microseconds - axis.start.microseconds)
            // Each column shows the setting at its end, so the newest column is the setting now.
            let values = (0..<axis.columns).map { c -> Double? in
                let t = Instant(
                    microseconds: axis.start.microseconds + Int64((Double(c) + 1) / Double(axis.columns) * span))
                return percent(at: t)
            }
            let top = values.compactMap { $0 }.max() ?? 0
            let range = 0.0...([1.0, 2, 5, 10, 25, 50, 100].first { $0 >= top } ?? 100)
            canvas.plot(values, in: range, series: 0)
            for change in changes(m, in: axis) {
                if let column = axis.column(of: change.telemetryAt ?? change.at) {
                    canvas.mark(column: column / 2, label: "v" + change.version)
                }
            }
            return range
        }
        pane.yLabel = { PercentText.formatNumber(MicroPercent(Int64(($0 * 1_000_000).rounded()))) + "%" }
        pane.legend = [Span("⠤⠤⠤", .chart), Span(" set for", .muted), Span("  ▼vN", .accent), Span(" change", .muted)]
        pane.notes = { axis in
            changes(m, in: axis).reversed().map { c in
                [
                    Span("▼v" + c.version + " ", .accent),
                    Span(String(Format.time(c.telemetryAt ?? c.at, utcOffsetSeconds: utcOffsetSeconds).prefix(5)) + " ", .muted),
                    Span(c.actor + " ", .text),
                ] + Describe.change(c.from, c.to)
            }
        }
        return pane
    }

    static func propagationPane(_ m: ConsoleModel, _ h: ChartHistory, zoom: ChartZoom) -> ChartPane {
        let newest = m.header.templateVersion ?? h.propagation.last?.version ?? "–"
        var pane = ChartPane(title: "Propagation of v" + newest, unit: "% of active devices", history: h, zoom: zoom)
        let samples = h.propagation.filter { $0.version == newest }
        pane.build = { canvas, axis in
            let span = Double(axis.end.microseconds - axis.start.microseconds)
            var next = 0
            var latest: Double?
            let values = (0..<axis.columns).map { c -> Double? in
                let t = axis.start.microseconds + Int64((Double(c) + 1) / Double(axis.columns) * span)
                while next < samples.count, samples[next].at.microseconds <= t {
                    latest = samples[next].share * 100
                    next += 1
                }
                return latest
            }
            let range = 0.0...100.0
            canvas.plot(values, in: range, series: 0)
            if let published = m.changes.first(where: { $0.version == newest }),
                let column = axis.column(of: published.telemetryAt ?? published.at)
            {
                canvas.mark(column: column / 2, label: "v" + newest)
            }
            return range
        }
        pane.yLabel = { Format.fixed($0, 0) + "%" }
        pane.legend = [
            Span("⠤⠤⠤", .chart), Span(" on v" + newest, .muted),
            Span("  now " + (m.condition.propagation.map { Format.share($0) } ?? "–"), .text),
        ]
        return pane
    }
}

/// One chart pane: legend, plot with its vertical axis, time axis, and notes under it.
struct ChartPane {
    var title: String
    var unit: String
    var history: ChartHistory
    var zoom: ChartZoom
    /// Draws the series into the canvas for the axis and returns the vertical range used.
    var build: (inout ChartCanvas, ChartTimeAxis) -> ClosedRange<Double> = { _, _ in 0...1 }
    var yLabel: (Double) -> String = { Format.fixed($0, 0) }
    var legend: Line = []
    var notes: (ChartTimeAxis) -> [Line] = { _ in [] }

    init(title: String, unit: String, history: ChartHistory, zoom: ChartZoom) {
        self.title = title
        self.unit = unit
        self.history = history
        self.zoom = zoom
    }

    /// The two arms' legend: exposed solid, control dashed.
    static func armLegend(_ extra: Line) -> Line {
        [Span("⠤⠤⠤", .chart), Span(" exposed  ", .muted), Span("⠤ ⠤", .muted), Span(" control", .muted)] + extra
    }

    func lines(width: Int, height: Int, utcOffsetSeconds: Int) -> [Line] {
        let lead = 7
        let cells = width - lead
        guard cells >= 4, height >= 3 else { return [[Span(unit, .muted)]] }
        let axisRows = height >= 6 ? 2 : 1
        // The unit and the legend on one row when they fit, else on two while the plot keeps four rows, else the
        // unit alone (the legend's glyphs are also in the help).
        let together: Line = [Span(unit + "  ", .text)] + legend
        let head: [Line] =
            height < 5
            ? [] : together.width <= width ? [together] : height - axisRows - 2 >= 4 ? [[Span(unit, .text)], legend] : [[Span(unit, .text)]]
        let headRows = head.count
        let probe = ChartTimeAxis(end: history.end, minutes: zoom.minutes, columns: cells * 2)
        let allNotes = notes(probe)
        let noteRows = min(allNotes.count, max(0, height - headRows - axisRows - 4))
        let plotRows = height - headRows - axisRows - noteRows
        var canvas = ChartCanvas(width: cells, height: plotRows)
        let range = build(&canvas, probe)
        var out: [Line] = head
        let plot = canvas.lines(roles: [.chart, .muted])
        let middle = plotRows / 2
        for (i, line) in plot.enumerated() {
            var label = ""
            if i == 0 { label = yLabel(range.upperBound) }
            if i == plotRows - 1 { label = yLabel(range.lowerBound) }
            if i == middle, plotRows >= 5 { label = yLabel((range.lowerBound + range.upperBound) / 2) }
            let tick = label.isEmpty ? "│" : "┤"
            out.append([Span(Format.padLeft(label, lead - 1) + tick, .muted)] + line)
        }
        let axisLines = probe.lines(cells: cells, lead: lead, utcOffsetSeconds: utcOffsetSeconds)
        out += axisLines.prefix(axisRows)
        out += allNotes.prefix(noteRows)
        return out
    }
}

/// The start of the minute holding an instant, in microseconds (floor, so instants before 1970 work too).
enum BucketStart {
    static func minute(_ t: Instant) -> Int64 {
        let q = t.microseconds / 60_000_000
        return (t.microseconds % 60_000_000 < 0 ? q - 1 : q) * 60_000_000
    }
}

/// The figures behind the charts.
public enum ChartMath {
    /// A rate per 1,000 sessions with its 95% Wilson score interval: (estimate, lower, upper).
    public static func perThousand(crashes: Int, sessions: Int) -> (Double, Double, Double) {
        let n = Double(max(1, sessions))
        let p = min(1, Double(max(0, crashes)) / n)
        let z = 1.959964
        let z2 = z * z
        let centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        let half = z * ((p * (1 - p) / n + z2 / (4 * n * n)).squareRoot()) / (1 + z2 / n)
        return (p * 1000, max(0, centre - half) * 1000, min(1, centre + half) * 1000)
    }

    /// The smallest of 1, 2, 2.5, 5 × 10ⁿ at or above `value`.
    public static func niceCeiling(_ value: Double) -> Double {
        guard value.isFinite, value > 0 else { return 1 }
        var scale = 1.0
        while scale * 10 < value { scale *= 10 }
        while scale > value { scale /= 10 }
        for f in [1.0, 2, 2.5, 5, 10] where f * scale >= value { return f * scale }
        return 10 * scale
    }

    /// An axis label: `0`, `0.5`, `2.5`, `40`.
    public static func label(_ value: Double) -> String {
        if value == value.rounded() { return Format.fixed(value, 0) }
        if value * 10 == (value * 10).rounded() { return Format.fixed(value, 1) }
        return Format.fixed(value, 2)
    }
}
