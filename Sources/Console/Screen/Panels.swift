import Timekeeping

/// The content of the four panels as lines, shared by the boxed and the compact layouts.
enum PanelText {
    // MARK: Condition

    static func condition(_ m: ConsoleModel, _ s: ConsoleState, width: Int, rows: Int) -> [Line] {
        let c = m.condition
        let label = 11
        func row(_ name: String, _ value: Line) -> Line { [Span(Format.pad(name, label), .muted)] + value }
        var lines: [Line] = [
            [Span(c.expression, .accent)],
            row(
                "Desired",
                Describe.desired(c) + [Span("  observed ", .muted)] + Describe.observed(c)),
            row(
                "Propagated",
                Gauge.line(c.propagation, width: max(4, min(20, width - label - 7)))
                    + [Span(" " + (c.propagation.map { Format.share($0) } ?? "–"), .text)]),
            row("Exposed", [Span(c.exposedBand.text, .text)]),
            row("Control", [Span(c.controlBand?.text ?? Describe.noControl(c), .text)]),
            row("State", stateLine(c, s)),
        ]
        if !m.enforcement.isEmpty { lines.append(row("App Check", enforcementLine(m.enforcement, width: width - label))) }
        if rows > lines.count { lines.append(row("Seed", [Span(c.seed, .text)])) }
        if rows > lines.count {
            lines.append(row("Devices", [Span(c.activeDevices.map { Format.count($0) + " active" } ?? "–", .text)]))
        }
        if rows > lines.count { lines.append(row("Condition", [Span(c.conditionName, .text)])) }
        return lines
    }

    /// Each service's mode, ENFORCED first, with the time a recent change has taken effect by; what does not fit
    /// is counted.
    static func enforcementLine(_ services: [EnforcementInfo], width: Int) -> Line {
        let ordered = services.sorted { $0.mode != $1.mode ? $0.mode > $1.mode : $0.service < $1.service }
        var line: Line = []
        for (i, e) in ordered.enumerated() {
            let rest = ordered.count - i - 1
            let more = rest > 0 ? " +\(rest)".count : 0
            var item: Line = [
                Span((i == 0 ? "" : " · ") + e.shortName + " ", .text),
                Span(e.mode.rawValue, e.mode == .enforced ? .accent : e.mode == .unenforced ? .text : .muted),
            ]
            if let by = e.appliesBy {
                let long = " (applies by " + Format.time(by).prefix(5) + ")"
                let fits = line.width + item.width + long.count + more <= width
                item.append(Span(fits ? long : " (by " + Format.time(by).prefix(5) + ")", .warn))
            }
            // The first service always shows (the most enforced one); the others as they fit.
            if i > 0, line.width + item.width + more > width {
                line.append(Span(" +\(ordered.count - i)", .muted))
                break
            }
            line += item
        }
        return line
    }

    static func stateLine(_ c: ConditionInfo, _ s: ConsoleState) -> Line {
        if c.state == .killed {
            return [c.stateLabel, Span("  r → " + PercentText.format(c.desiredMicroPercent), .muted)]
        }
        return [c.stateLabel, Span("  step ", .muted), Span(PercentText.format(s.step), .accent)]
    }

    // MARK: Crash

    static func crash(_ m: ConsoleModel, width: Int, rows: Int) -> [Line] {
        let c = m.crash
        let label = 11
        let column = width >= 54 ? 20 : 11
        func value(_ share: Double?, _ n: Int) -> String {
            let text = Describe.crashFree(share)
            return column >= 20 ? text + " of " + Format.shortCount(n) : text
        }
        func row(_ name: String, _ value: Line, optional: Line = []) -> Line {
            let line = [Span(Format.pad(name, label), .muted)] + value
            return line.width + optional.width <= width ? line + optional : line
        }
        var table: [Line] = [
            [
                Span(Format.pad("Crash-free", label), .muted), Span(Format.padLeft("exposed", column), .muted),
                Span(Format.padLeft("control", column), .muted),
            ]
        ]
        // Crashlytics' crash-free users (over a recent window) first; the cumulative share since the start below it.
        if let w = c.windowed {
            let name = Format.pad("users " + w.window, label)
            if let why = w.unavailable {
                table.append([Span(name, .muted), Span(Format.truncate(why, max(0, width - label)), .muted)])
            } else {
                table.append([
                    Span(name, .muted), Span(Format.padLeft(value(w.exposed, w.exposedUsers), column), .text),
                    Span(Format.padLeft(value(w.control, w.controlUsers), column), .text),
                ])
            }
        }
        table += [
            [
                Span(Format.pad(c.windowed == nil ? "users" : "users total", label), .muted),
                Span(Format.padLeft(value(c.exposed.crashFreeUsers, c.exposed.users), column), .text),
                Span(Format.padLeft(value(c.control.crashFreeUsers, c.control.users), column), .text),
            ],
            [
                Span(Format.pad("sessions", label), .muted),
                Span(Format.padLeft(value(c.exposed.crashFreeSessions, c.exposed.sessions), column), .text),
                Span(Format.padLeft(value(c.control.crashFreeSessions, c.control.sessions), column), .text),
            ],
        ]
        // In percentage points of crash-free users (exposed less control), like the detectable effect below; where
        // the unit does not fit after the interval, the label carries it.
        let differenceValue = Describe.difference(c.difference, detail: false)
        let unit = Describe.pointsUnit(c.difference)
        let difference =
            label + differenceValue.width + unit.width <= width
            ? row("Difference", differenceValue + unit, optional: Describe.differenceDetail(c.difference))
            : row(c.difference == nil ? "Difference" : "Diff (pp)", differenceValue, optional: Describe.differenceDetail(c.difference))
        let detectable = row(
            "Detectable",
            [
                Span(c.minimumDetectableEffect.map { "±" + Format.fixed($0, 3) + " points" } ?? "–", .text)
            ], optional: [Span(" at this exposure", .muted)])
        let verdict = verdictLines(c, width: width)
        // The verdict and its reasons matter most: when rows run short, the detectable effect makes way first.
        var lines = table + [difference]
        if lines.count + 1 + verdict.count <= rows || lines.count + 1 + 1 <= rows && verdict.count == 1 {
            lines.append(detectable)
        }
        lines += verdict.prefix(max(1, rows - lines.count))
        return lines
    }

    /// The verdict word and its reasons, wrapped under one another.
    static func verdictLines(_ c: CrashInfo, width: Int) -> [Line] {
        let head = c.verdict.label
        let indent = head.width + 2
        let reasons = c.reasons.isEmpty ? ["no reason given"] : c.reasons
        var lines: [Line] = []
        for reason in reasons {
            for text in Format.wrap(reason, max(8, width - indent)) {
                let lead: Span = lines.isEmpty ? head : Span(String(repeating: " ", count: head.width))
                lines.append([lead, Span("  " + text, .text)])
            }
        }
        return lines
    }

    static func guardrails(_ c: CrashInfo) -> Line {
        c.guardrailsArmed ? [Span("guardrails ✓ armed", .ok)] : [Span("guardrails off", .warn)]
    }

    // MARK: Attestation

    static func attestationSummary(_ a: AttestationInfo, width: Int) -> [Line] {
        let attemptsPerMinute = a.successRate.oneMinute + a.failureRate.oneMinute
        var first: Line = [
            Span("✓ ", .ok), Span(Format.count(a.successTotal), .accent), Span(" success   ", .muted),
            Span("✗ ", .bad), Span(Format.count(a.failureTotal), .accent), Span(" failure   ", .muted),
            Span(a.successRatio.map { Format.share($0) } ?? "–", .text), Span(" succeed", .muted),
        ]
        let budget = Describe.percentOfBudget(attemptsPerMinute, a.budgetPerMinute)
        if !budget.isEmpty { first += [Span("   ")] + budget }
        func window(_ name: String, _ success: Double, _ failure: Double) -> Line {
            [
                Span(name + " ", .muted), Span("✓" + Format.rate(success), .text),
                Span(" ✗" + Format.rate(failure), .text),
            ]
        }
        let second: Line =
            [Span("per min  ", .muted)]
            + window("1m", a.successRate.oneMinute, a.failureRate.oneMinute) + [Span(" · ", .muted)]
            + window("5m", a.successRate.fiveMinutes, a.failureRate.fiveMinutes) + [Span(" · ", .muted)]
            + window("15m", a.successRate.fifteenMinutes, a.failureRate.fifteenMinutes) + [Describe.trend(a)]
        return [first, second]
    }

    /// The chart of attempts per minute (with three rows or more, failures per minute underneath; with five or
    /// more, crashes per 1,000 sessions and a row of `▲vN` at the minute of every published change; below that the
    /// changes are marked `┊` in the chart's empty cells).
    static func attestationChart(_ a: AttestationInfo, width: Int, rows: Int, changes: [ChangeRecord] = []) -> [Line] {
        let labelWidth = 6
        let chartWidth = max(0, width - labelWidth)
        // A wide panel gives each minute several columns rather than leaving most of the width empty.
        let spread = max(1, chartWidth / max(1, a.perMinute.count))
        func widened(_ values: [Int]) -> [Int] { values.flatMap { repeatElement($0, count: spread) } }
        let crashRow = rows >= 5
        let lowerRows = rows >= 3 ? (crashRow ? 3 : 1) : 0
        let attempts = Sparkline(values: widened(a.perMinute.map(\.attempts))).lines(
            width: chartWidth, rows: rows - lowerRows)
        var labelled = attempts.enumerated().map { i, l in (i == 0 ? "all/m " : "      ", l) }
        if rows >= 3 {
            let failures = Sparkline(values: widened(a.perMinute.map(\.failure)), role: .bad).lines(
                width: chartWidth, rows: 1)
            labelled.append(("fail  ", failures[0]))
        }
        if crashRow {
            let crashes = Sparkline(values: widened(a.perMinute.map(\.crashesPerThousandSessions)), role: .warn)
                .lines(width: chartWidth, rows: 1)
            labelled.append(("crash ", crashes[0]))
        }
        // Column of each change: its minute in the series, at the first column of that minute.
        let shownCount = min(chartWidth, a.perMinute.count * spread)
        let dropped = a.perMinute.count * spread - shownCount
        let pad = chartWidth - shownCount
        var marks: [(column: Int, label: String)] = []
        if let end = a.seriesEnd {
            for change in changes {
                // The chart runs on telemetry time: a change made now in a demo is marked at its simulated instant.
                let at = change.telemetryAt ?? change.at
                let behind = end.microseconds - at.microseconds
                let step = Int64(max(1, a.minutesPerPoint)) * 60_000_000
                guard at.microseconds < end.microseconds + step else { continue }
                let back = behind <= 0 ? 0 : Int((behind + step - 1) / step)
                let minute = a.perMinute.count - 1 - back
                let column = pad + minute * spread - dropped
                guard minute >= 0, column >= 0, column < chartWidth else { continue }
                marks.append((column, "v" + change.version))
            }
        }
        var lines = labelled.map { item in
            [Span(item.0, .muted)] + (crashRow ? item.1 : annotated(item.1, marks: marks, labels: false, width: chartWidth))
        }
        if crashRow {
            let blank = [Span(String(repeating: " ", count: chartWidth), .muted)]
            lines.append([Span("publ  ", .muted)] + annotated(blank, marks: marks, labels: true, width: chartWidth, symbol: "▲"))
        }
        return lines
    }

    /// A chart row with the change markers drawn into its empty cells (and, on the top row, the versions).
    static func annotated(
        _ line: Line, marks: [(column: Int, label: String)], labels: Bool, width: Int, symbol: String = "┊"
    ) -> Line {
        guard !marks.isEmpty, let first = line.first, line.count == 1 else { return line }
        var cells = Array(first.text.unicodeScalars).map { String($0) }
        guard cells.count == width else { return line }
        var accent = Array(repeating: false, count: width)
        for mark in marks where cells[mark.column] == " " {
            cells[mark.column] = symbol
            accent[mark.column] = true
            guard labels else { continue }
            let label = Array(mark.label.unicodeScalars).map { String($0) }
            // The version right of its marker, or left of it at the right edge.
            var start = mark.column + 1
            if start + label.count > width { start = mark.column - label.count }
            if start >= 0, start + label.count <= width, cells[start..<start + label.count].allSatisfy({ $0 == " " }) {
                for (i, c) in label.enumerated() {
                    cells[start + i] = c
                    accent[start + i] = true
                }
            }
        }
        var out: Line = []
        var run = ""
        var runAccent = false
        for (i, c) in cells.enumerated() {
            if accent[i] != runAccent, !run.isEmpty {
                out.append(Span(run, runAccent ? .accent : first.role))
                run = ""
            }
            runAccent = accent[i]
            run += c
        }
        if !run.isEmpty { out.append(Span(run, runAccent ? .accent : first.role)) }
        return out
    }

    static func failureLine(_ a: AttestationInfo) -> Line {
        var line: Line = [Span("Failures ", .muted)]
        if a.failureClasses.isEmpty { return line + [Span("none", .muted)] }
        for (i, f) in a.failureClasses.enumerated() {
            if i > 0 { line.append(Span(" · ", .muted)) }
            line.append(Span(f.name + " ", f.alarmed ? .bad : .text))
            line.append(Span(Format.count(f.count) + (f.alarmed ? " ! alarm" : ""), f.alarmed ? .bad : .accent))
        }
        return line
    }

    static func failureColumn(_ a: AttestationInfo, width: Int, rows: Int) -> [Line] {
        var lines: [Line] = [[Span("Failures by class", .muted)]]
        if a.failureClasses.isEmpty { lines.append([Span("none", .muted)]) }
        let nameWidth = max(4, width - 10)
        for f in a.failureClasses.prefix(max(0, rows - 1)) {
            lines.append([
                Span(Format.pad(f.name, nameWidth), f.alarmed ? .bad : .text),
                Span(Format.padLeft(Format.shortCount(f.count), 7), f.alarmed ? .bad : .accent),
                Span(f.alarmed ? " !" : "", .bad, .bold),
            ])
        }
        return lines
    }

    // MARK: Log

    enum LogItem {
        case change(ChangeRecord)
        case event(NotableEvent)

        var at: Instant {
            switch self {
            case .change(let c): c.at
            case .event(let e): e.at
            }
        }

        /// What the `/` filter searches: the words the line shows.
        var searchText: String {
            switch self {
            case .change(let c):
                "v\(c.version) \(c.actor) \(c.from.text) → \(c.to.text) \(c.kindText) \(c.reason)"
            case .event(let e): e.text
            }
        }
    }

    /// What the log lists: verdict changes from the console's own log (stamped once, when they arrived), beside the
    /// model's changes and events; newest first, ties in arrival order.
    static func logItems(_ m: ConsoleModel, _ s: ConsoleState) -> [LogItem] {
        let all = (m.changes.map(LogItem.change) + m.events.map(LogItem.event) + s.verdictLog.reversed().map(LogItem.event))
            .enumerated().sorted {
                $0.element.at != $1.element.at ? $0.element.at > $1.element.at : $0.offset < $1.offset
            }
            .map(\.element)
        guard let needle = s.logFilter?.text.lowercased(), !needle.isEmpty else { return all }
        return all.filter { $0.searchText.lowercased().contains(needle) }
    }

    /// The lines the log shows before its filter.
    static func logCount(_ m: ConsoleModel, _ s: ConsoleState) -> Int {
        m.changes.count + m.events.count + s.verdictLog.count
    }

    /// The log's lines, each with the version it shows when it is a published change (a click opens it).
    ///
    /// While the log has the focus, a selected change below the rows shown scrolls the log so it is the last row.
    static func logRows(_ m: ConsoleModel, _ s: ConsoleState, width: Int, rows: Int) -> [(line: Line, version: Int?)] {
        var items = logItems(m, s)
        guard !items.isEmpty else {
            if let filter = s.logFilter, !filter.text.isEmpty {
                return [([Span("No line of the log matches “" + filter.text + "”; Esc clears the filter.", .muted)], nil)]
            }
            return [([Span("No changes or events yet.", .muted)], nil)]
        }
        if let selected = s.logSelection,
            let index = items.firstIndex(where: { if case .change(let c) = $0 { Int(c.version) == selected } else { false } }),
            index >= rows
        {
            items.removeFirst(index - rows + 1)
        }
        let actorWidth = width >= 110 ? 24 : 16
        let changeWidth = width >= 110 ? 30 : 23
        // Rows left over after one line per item let the newest events wrap instead of being cut.
        var spare = max(0, rows - items.count)
        var out: [(line: Line, version: Int?)] = []
        for item in items.prefix(rows) {
            let time = Span(
                Format.logTime(item.at, today: s.wallNow, utcOffsetSeconds: s.configuration.utcOffsetSeconds) + "  ", .muted)
            switch item {
            case .change(let c):
                let change = Describe.change(c.from, c.to)
                let padding = max(1, changeWidth - change.width)
                out.append(
                    (
                        [time, Span(Format.pad(c.actor, actorWidth) + " ", .text)] + change
                            + [
                                Span(String(repeating: " ", count: padding), .text),
                                Span(Format.pad(c.kindText, 9), .muted),
                            ]
                            + (c.reason.isEmpty ? [] : [Span("“" + c.reason + "”", .text)]), Int(c.version)
                    ))
            case .event(let e):
                let symbol = e.level?.symbol ?? e.severity.symbol
                let role = e.level?.role ?? e.severity.role
                let lead = time.width + CharacterWidth.of(symbol) + 1
                var wrapped = Format.wrap(e.text, max(8, width - lead))
                if wrapped.isEmpty { wrapped = [""] }
                let extra = min(spare, wrapped.count - 1)
                spare -= extra
                let shown = extra == wrapped.count - 1 ? wrapped : [e.text]
                for (i, text) in shown.prefix(extra + 1).enumerated() {
                    out.append(
                        (
                            i == 0
                                ? [time, Span(symbol + " ", role, .bold), Span(text, role)]
                                : [Span(String(repeating: " ", count: lead)), Span(text, role)], nil
                        ))
                }
            }
        }
        return out
    }
}

/// The layout from 80×24 up: boxed panels, with taller charts and more log on larger terminals.
enum BoxedLayout {
    static func render(_ m: ConsoleModel, _ s: ConsoleState, into grid: inout Grid, body: Rect) {
        let w = grid.size.width
        let h = grid.size.height
        let wide = w >= 120
        // Taller terminals give the condition and the verdict's reasons room first, then the chart, then the log.
        let topHeight = h >= 34 ? min(14, 10 + (h - 34) / 4) : 8
        let chartRows = min(h >= 50 ? 10 : 6, max(1, (h - 24) / 3 + 1))
        let attestHeight = 4 + chartRows + (wide ? 0 : 1)
        let (top, lower) = body.splitTop(topHeight)
        let (attest, log) = lower.splitTop(attestHeight)
        let (conditionArea, crashArea) = top.splitLeft(w / 2)
        let stale: Line = s.isStale ? [Span("! stale", .warn, .bold)] : []

        // The parameter's name stays when data is stale: the marker goes beside it, never in its place.
        let conditionInner = Frame(
            title: [Span("Condition", .title)],
            status: [Span(m.condition.parameter, .muted)] + (stale.isEmpty ? [] : [Span(" ", .muted)] + stale)
        )
        .render(into: &grid, area: conditionArea)
        grid.draw(
            PanelText.condition(m, s, width: conditionInner.width, rows: conditionInner.height), in: conditionInner)

        let crashInner = Frame(
            title: [Span("Crash", .title)], status: stale.isEmpty ? PanelText.guardrails(m.crash) : stale
        )
        .render(into: &grid, area: crashArea)
        grid.draw(PanelText.crash(m, width: crashInner.width, rows: crashInner.height), in: crashInner)

        // The chart follows the charts' zoom (`z`); the summary rows above it keep their 1/5/15-minute rates.
        let chartWidth = (wide ? attest.width - 4 - 34 - 2 : attest.width - 4) - 6
        let zoomed = m.attestation.zoomed(s.chartZoom, history: m.history, chartWidth: chartWidth)
        let attestInner = Frame(
            title: [Span("Attestation", .title)],
            status: [Span(zoomed.title, .muted)]
        ).render(into: &grid, area: attest)
        let (summary, chartAndFailures) = attestInner.splitTop(2)
        grid.draw(PanelText.attestationSummary(m.attestation, width: attestInner.width), in: summary)
        if wide {
            let failureWidth = 34
            let (chart, failures) = chartAndFailures.splitLeft(chartAndFailures.width - failureWidth - 2)
            grid.draw(PanelText.attestationChart(zoomed.info, width: chart.width, rows: chart.height, changes: m.changes), in: chart)
            let column = Rect(x: failures.x + 2, y: failures.y, width: failureWidth, height: failures.height)
            grid.draw(PanelText.failureColumn(m.attestation, width: column.width, rows: column.height), in: column)
        } else {
            let (chart, failureRow) = chartAndFailures.splitBottom(1)
            grid.draw(PanelText.attestationChart(zoomed.info, width: chart.width, rows: chart.height, changes: m.changes), in: chart)
            grid.draw([PanelText.failureLine(m.attestation)], in: failureRow)
        }

        let (logArea, planArea) = PlanPanel.split(log, m)
        if let planArea { PlanPanel.render(m, into: &grid, area: planArea) }
        let focused = s.logSelection != nil
        let logInner = Frame(
            title: [Span("Log", .title)] + (focused ? [Span(" ▶ ↑↓ select · Enter open · Esc leave", .selection)] : [])
                + (s.logFilter.map { f in
                    [Span(" / " + f.text, .accent, .bold)]
                        + [Span(" \(PanelText.logItems(m, s).count) of \(PanelText.logCount(m, s))", .muted)]
                } ?? []),
            // One clock in the log: every line is stamped on the wall clock (changes, verdicts, results), said
            // when the screen's other times run on a simulation's.
            status: [
                Span(
                    (s.ticksOffWall ? "wall clock · " : "") + "times " + Format.utcOffset(s.configuration.utcOffsetSeconds),
                    .muted)
            ]
        ).render(into: &grid, area: logArea)
        let logRows = PanelText.logRows(m, s, width: logInner.width, rows: logInner.height)
        grid.draw(logRows.map(\.line), in: logInner)
        // A click on a published change in the log opens it, as Enter does on a history row (or on the change the
        // keyboard selected, which is highlighted like a list's selected row).
        for (i, row) in logRows.prefix(logInner.height).enumerated() {
            guard let version = row.version else { continue }
            let line = Rect(x: logInner.x, y: logInner.y + i, width: logInner.width, height: 1)
            grid.register(.version(version), at: line)
            if version == s.logSelection { grid.restyle(line, role: .selection) }
        }
    }
}

/// The layout between the minimum size and 80×24: no boxes, a label column, a few lines per panel.
enum CompactLayout {
    static func render(_ m: ConsoleModel, _ s: ConsoleState, into grid: inout Grid, body: Rect) {
        let labelWidth = 11
        let content = body.width - labelWidth - 1
        let c = m.condition
        let a = m.attestation
        let k = m.crash
        let attemptsPerMinute = a.successRate.oneMinute + a.failureRate.oneMinute
        let totals: Line = [
            Span("✓ ", .ok), Span(Format.count(a.successTotal), .accent), Span("  ✗ ", .bad),
            Span(Format.count(a.failureTotal), .accent), Span("  ", .text),
            Span(a.successRatio.map { Format.share($0) } ?? "–", .text), Span(" succeed  ", .muted),
            Span(Format.rate(attemptsPerMinute), .text), Span("/min  ", .muted),
        ]
        let sections: [(String, [Line])] = [
            (
                "Condition",
                [
                    [Span(c.parameter + " ", .text, .bold), Span(c.expression, .accent)],
                    [
                        Span("desired ", .muted)
                    ] + Describe.desired(c) + [Span("  observed ", .muted)] + Describe.observed(c),
                    PanelText.stateLine(c, s)
                        + [Span("  propagated ", .muted), Span(c.propagation.map { Format.share($0) } ?? "–", .text)],
                    [
                        Span("exposed ", .muted), Span(c.exposedBand.text, .text), Span("  control ", .muted),
                        Span(c.controlBand?.text ?? Describe.noControl(c), .text), Span("  seed ", .muted),
                        Span(c.seed, .text),
                    ],
                ]
            ),
            (
                "Attest",
                [
                    totals + Sparkline(values: a.perMinute.map(\.attempts)).lines(
                        width: max(0, content - totals.width), rows: 1
                    )
                    .first!,
                    Describe.percentOfBudget(attemptsPerMinute, a.budgetPerMinute) + [Span("  ")]
                        + PanelText.failureLine(a),
                ]
            ),
            (
                "Crash",
                [
                    [
                        Span("users ", .muted), Span(Describe.crashFree(k.exposed.crashFreeUsers), .text),
                        Span(" vs ", .muted), Span(Describe.crashFree(k.control.crashFreeUsers), .text),
                        Span("  sessions ", .muted), Span(Describe.crashFree(k.exposed.crashFreeSessions), .text),
                        Span(" vs ", .muted), Span(Describe.crashFree(k.control.crashFreeSessions), .text),
                    ],
                    [Span("Δ users ", .muted)] + Describe.difference(k.difference, detail: false)
                        + Describe.pointsUnit(k.difference)
                        + [
                            Span("  detectable ", .muted),
                            Span(k.minimumDetectableEffect.map { "±" + Format.fixed($0, 3) } ?? "–", .text),
                        ],
                    [k.verdict.label, Span("  " + (k.reasons.first ?? ""), .text)],
                ]
            ),
        ]
        var y = body.y
        for (name, lines) in sections {
            for (i, line) in lines.enumerated() where y < body.maxY {
                if i == 0 {
                    grid.write(name, x: body.x + 1, y: y, role: .title, attributes: .bold, limit: labelWidth - 1)
                }
                grid.write(line, x: body.x + labelWidth, y: y, limit: content)
                y += 1
            }
        }
        if s.isStale {
            grid.write("! stale", x: body.x + 1, y: body.y + 1, role: .warn, attributes: .bold, limit: labelWidth - 1)
        }
        let logRows = body.maxY - y
        guard logRows > 0 else { return }
        grid.write("Log", x: body.x + 1, y: y, role: .title, attributes: .bold, limit: labelWidth - 1)
        let logArea = Rect(x: body.x + labelWidth, y: y, width: content, height: logRows)
        let rows = PanelText.logRows(m, s, width: content, rows: logRows)
        grid.draw(rows.map(\.line), in: logArea)
        for (i, row) in rows.prefix(logRows).enumerated() where row.version != nil && row.version == s.logSelection {
            grid.restyle(Rect(x: logArea.x, y: logArea.y + i, width: logArea.width, height: 1), role: .selection)
        }
    }
}
