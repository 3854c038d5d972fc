import Timekeeping

/// The whole console screen as a pure function of the state and the terminal size.
///
/// Like a ratatui app, every frame is drawn in full into an off-screen grid; the terminal backend then paints
/// only the cells that changed. At 80×24 everything fits in boxed panels; larger terminals get taller charts,
/// more log lines and side-by-side detail; between the minimum size and 80×24 a compact layout without boxes is
/// used; below the minimum a "terminal too small" message replaces the screen. No size crashes it.
public enum ConsoleScreen {
    /// Below this the console shows only the "too small" message.
    public static let minimumSize = Size(width: 60, height: 16)
    /// Whether the screen is drawn at `size`; below the minimum only the "too small" message is, and the reducer
    /// ignores every key but quit, redraw and Esc (nothing may be changed or confirmed unseen).
    public static func fits(_ size: Size) -> Bool {
        size.width >= minimumSize.width && size.height >= minimumSize.height
    }
    /// From this size on, panels are boxed.
    public static let boxedSize = Size(width: 80, height: 24)

    /// Draws the screen for `state` at `size`.
    public static func render(_ state: ConsoleState, size: Size) -> Grid {
        var grid = Grid(size: size)
        guard fits(size) else {
            renderTooSmall(&grid)
            return grid
        }
        let (rest, hintRow) = grid.bounds.splitBottom(1)
        let (upper, noticeRow) = rest.splitBottom(1)
        let (headerRow, body) = upper.splitTop(1)
        HeaderBar.render(state, into: &grid, row: headerRow)
        if let model = state.model {
            if state.chartsShown {
                ChartsView.render(model, state, into: &grid, body: body)
            } else if size.width >= boxedSize.width && size.height >= boxedSize.height {
                BoxedLayout.render(model, state, into: &grid, body: body)
            } else {
                CompactLayout.render(model, state, into: &grid, body: body)
            }
        } else {
            renderWaiting(state, into: &grid, body: body)
        }
        renderNotice(state, into: &grid, row: noticeRow)
        grid.draw([HintBar.line(Hints.items(for: state), width: hintRow.width)], in: hintRow)
        if let overlay = state.overlay {
            OverlayView.render(overlay, state, into: &grid, area: rest)
        }
        return grid
    }

    /// Rows of entries a full-screen list (history, audit, help) shows at `size`; the reducer pages by it.
    public static func listRows(for size: Size) -> Int { max(1, size.height - 5) }

    static func renderTooSmall(_ grid: inout Grid) {
        let size = grid.size
        let lines: [Line] = [
            [Span("Terminal too small", .warn, .bold)],
            [Span("needs \(minimumSize.width)×\(minimumSize.height), has \(size.width)×\(size.height)", .text)],
            [Span("enlarge the window · q quits", .muted)],
        ]
        let top = max(0, (size.height - lines.count) / 2)
        for (i, line) in lines.enumerated() where top + i < size.height {
            let w = min(line.width, size.width)
            grid.write(line, x: max(0, (size.width - w) / 2), y: top + i, limit: size.width)
        }
    }

    static func renderWaiting(_ state: ConsoleState, into grid: inout Grid, body: Rect) {
        var lines: [Line] = [[Span("Waiting for the first data from the store…", .muted)]]
        if let problem = state.sourceProblem { lines.append([Span("✗ " + problem, .bad)]) }
        let area = body.centered(width: body.width - 4, height: lines.count)
        grid.draw(lines, in: area)
    }

    static func renderNotice(_ state: ConsoleState, into grid: inout Grid, row: Rect) {
        var line: Line = []
        // HALT's banner gives way to a result (which stays until the next key), not to a passing information.
        let halted = state.model.map { $0.crash.verdict == .halt && $0.condition.state != .killed } ?? false
        if let filter = state.logFilter, let field = filter.field, state.overlay == nil {
            // The log's filter as it is typed; the log above follows each keystroke.
            let count = state.model.map { PanelText.logItems($0, state).count } ?? 0
            let tail = "  \(count) match · Enter keeps · Esc clears"
            grid.write([Span(" / ", .accent, .bold)], x: row.x, y: row.y, limit: row.width)
            let width = max(8, min(40, row.width - 3 - CharacterWidth.of(tail)))
            TextInput.render(field, into: &grid, area: Rect(x: row.x + 3, y: row.y, width: width, height: 1))
            grid.write([Span(tail, .muted)], x: row.x + 3 + width, y: row.y, limit: max(0, row.width - 3 - width))
            return
        }
        if let lost = state.storeLost, state.notice.map({ $0.kind == .info }) ?? true {
            // Above everything, HALT included: nothing on screen is live and no key can act on it.
            line = [Span(" ✗ " + ConsoleState.storeLostText(lost), .alert, .bold)]
        } else if let notice = state.notice, !(halted && notice.kind == .info) {
            line = [Span(" " + notice.kind.symbol + " " + notice.text, notice.kind.role)]
        } else if let problem = state.sourceProblem {
            line = [Span(" ✗ data source: " + problem, .bad)]
        } else if let model = state.model, model.crash.verdict == .halt, model.condition.state != .killed {
            // The one state that must not be missed gets the banner row when nothing else needs it: what to
            // press, and whether auto-kill will act without anyone pressing it.
            let autoKill =
                model.crash.autoKill ? "auto-kill armed: kills at the next refresh" : "auto-kill off"
            let tail = " · K kill now · " + autoKill + " · v why"
            let reason = Format.truncate(
                model.crash.reasons.first ?? "", max(10, row.width - 10 - CharacterWidth.of(tail)))
            line = [Span(" ✗ HALT ", .alert), Span(" " + reason, .bad), Span(tail, .bad, .bold)]
        } else if let model = state.model, model.condition.state == .killed {
            line = [Span(" ■ KILLED ", .alert), Span(" the flag is off for everyone · r resumes", .text)]
        } else if state.frozen {
            line = [Span(" ‖ display frozen · f unfreezes", .warn)]
        }
        grid.write(line, x: row.x, y: row.y, limit: row.width)
    }
}

/// The header bar: product, project and store at the left; version, ETag, operator, flags and freshness at
/// the right. Parts give way in order of importance when the terminal is narrow; freshness never does.
enum HeaderBar {
    /// How current the data on screen is, as the bar says it.
    enum Freshness {
        case waiting
        /// The display is frozen (`f`); the time of its newest data.
        case frozen(String?)
        /// Nothing has arrived yet: not old data, no data (a store before its first event).
        case noData
        case stale(String?)
        case live(String?)

        init(_ state: ConsoleState) {
            guard let model = state.model else {
                self = .waiting
                return
            }
            // The time of the newest data, not its age: an age ticks every second and repaints a screen whose data
            // has not changed (an idle console writes nothing). STALE, which appears once, says it is too old.
            let asOf = model.header.dataAsOf.map { Format.time($0, utcOffsetSeconds: state.configuration.utcOffsetSeconds) }
            if state.frozen {
                self = .frozen(asOf)
            } else if state.isStale, asOf == nil, state.sourceProblem == nil, model.header.staleReason == nil {
                self = .noData
            } else if state.isStale {
                self = .stale(asOf)
            } else {
                self = .live(asOf)
            }
        }

        /// The words, for any state but live data.
        var warning: String? {
            switch self {
            case .waiting: "… waiting"
            case .frozen(let asOf): "‖ FROZEN" + (asOf.map { " at " + $0 } ?? "")
            case .noData: "! NO DATA"
            case .stale(let asOf): "! STALE" + (asOf.map { " since " + $0 } ?? "")
            case .live: nil
            }
        }
    }

    /// The states the flashing bar keeps beside the verdict (`render`), most important first.
    static func flashWarnings(_ state: ConsoleState) -> [String] {
        [
            state.model?.header.readOnly == true ? "READ-ONLY" : nil, Freshness(state).warning,
            state.simulation?.paused == true ? "‖ PAUSED" : nil,
        ].compactMap { $0 }
    }

    static func render(_ state: ConsoleState, into grid: inout Grid, row: Rect) {
        if state.isFlashing, let level = state.model?.crash.verdict {
            // The verdict just rose to HOLD or HALT: the whole bar says so, alternating each second. What else the
            // bar says that changes how far the verdict can be trusted or acted on stays at its right: data that is
            // stale, frozen or absent, a console that cannot write, a paused simulation.
            grid.fill(row, with: Cell(" ", role: .alert))
            let warnings = flashWarnings(state)
            let flags: Line = warnings.isEmpty ? [] : [Span(" " + warnings.joined(separator: " · ") + " ", .alert, .reverse)]
            let text = " " + level.labelText + " · " + (state.model?.crash.reasons.first ?? "") + " · v why "
            // The verdict keeps at least its label and a few words of its reason; the flags give way first.
            let keep = min(row.width, CharacterWidth.of(level.labelText) + 16)
            let rightStart = flags.isEmpty || row.width - flags.width < keep ? row.maxX : grid.drawRight(flags, in: row)
            let room = rightStart - row.x
            grid.write(Format.truncate(text, room), x: row.x, y: row.y, role: .alert, attributes: .bold, limit: room)
            return
        }
        grid.fill(row, with: Cell(" ", role: .header))
        let header = state.model?.header
        let freshness = Freshness(state)
        var status: Line =
            switch freshness {
            case .waiting, .frozen: [Span(" " + (freshness.warning ?? "") + " ", .header, .reverse)]
            case .noData, .stale: [Span(" " + (freshness.warning ?? "") + " ", .alert)]
            case .live(let asOf): [Span(" ● " + (asOf ?? "live") + " ", .header)]
            }
        // Most important first; the right side keeps as many as fit beside a minimal left side.
        var parts: [Line] = []
        if let header {
            parts.append([Span("v" + (header.templateVersion ?? "–"), .header, .bold)])
            if header.readOnly { parts.append([Span(" READ-ONLY ", .header, .reverse)]) }
            parts.append([Span(header.operatorID, .header)])
            parts.append([Span(Describe.etag(header.etag), .header)])
            if header.stepUpEnabled { parts.append([Span("step-up on", .header)]) }
        }
        let left: Line =
            [Span(" rollout", .header, .bold)]
            + (header.map { [Span(" · " + $0.project, .header)] } ?? [])
        // Leave the store path at least a recognisable tail.
        let budget = max(0, row.width - left.width - 2 - 18)
        // A simulation drives the screen (`rollout demo`): its time (the ticks') beside wall time, its speed and a
        // pause are kept like the freshness; the wall time goes first when there is no room.
        if let sim = state.simulation, let now = state.now {
            let offset = state.configuration.utcOffsetSeconds
            let simulated = "sim " + Format.time(now, utcOffsetSeconds: offset)
            let lead: Line =
                sim.paused
                ? [Span(" ‖ PAUSED " + simulated + " ", .header, .reverse)]
                : [Span(simulated + " " + sim.speed + " ", .header)]
            let wall = "· wall " + Format.time(sim.wall, utcOffsetSeconds: offset) + "  "
            let full = lead + [Span(wall, .header)] + status
            status = full.width <= budget ? full : lead + [Span(" ", .header)] + status
        }
        var right: Line = status
        for count in stride(from: parts.count, through: 1, by: -1) {
            var line: Line = []
            for part in parts.prefix(count) { line += part + [Span("  ", .header)] }
            line += status
            if line.width <= budget {
                right = line
                break
            }
        }
        // The version matters more than the store path's tail: it takes the path's room rather than give way.
        if right.width == status.width, let version = parts.first {
            let line = version + [Span("  ", .header)] + status
            if line.width <= row.width - left.width - 2 { right = line }
        }
        let rightStart = grid.drawRight(right, in: row)
        var full = left
        if let header {
            let room = rightStart - row.x - left.width - 5
            if room >= 12 { full.append(Span(" · " + Format.truncateLeading(header.store, room), .header)) }
        }
        grid.write(full, x: row.x, y: row.y, limit: max(0, rightStart - row.x - 1))
    }
}

/// The hints for the bar at the bottom, for the main screen or the open overlay.
enum Hints {
    static func items(for state: ConsoleState) -> [HintBar.Item] {
        guard let overlay = state.overlay else {
            if state.logFilter?.field != nil {
                return [HintBar.Item("Enter", "keep the filter"), HintBar.Item("Esc", "clear it")]
            }
            let log: [HintBar.Item] =
                state.logSelection == nil
                ? [] : [HintBar.Item("↑↓", "select"), HintBar.Item("Enter", "open"), HintBar.Item("Esc", "leave the log")]
            return log + KeyMap.main.compactMap { b in
                guard b.group != .simulation || state.simulation != nil else { return nil }
                return b.hint.map { HintBar.Item($0.keys, $0.label, priority: $0.priority) }
            }
        }
        switch overlay {
        case .help, .verdict:
            return [HintBar.Item("↑↓ PgUp PgDn", "scroll"), HintBar.Item("Esc", "close")]
        case .valuePrompt:
            return [HintBar.Item("Enter", "preview"), HintBar.Item("Esc", "cancel")]
        case .reason:
            return [HintBar.Item("Enter", "continue"), HintBar.Item("Esc", "cancel")]
        case .stepUp:
            return [HintBar.Item("Enter", "publish"), HintBar.Item("Esc", "cancel")]
        case .preparing:
            return [HintBar.Item("Esc", "cancel")]
        case .stepUpMethod:
            return [HintBar.Item("↑↓", "choose"), HintBar.Item("Enter", "approve"), HintBar.Item("Esc", "cancel")]
        case .securityKey, .approvingRequest:
            return [HintBar.Item("…", "touch your security key"), HintBar.Item("Esc", "cancel")]
        case .phone:
            return [HintBar.Item("Enter", "check the code"), HintBar.Item("c", "call me instead"), HintBar.Item("Esc", "cancel")]
        case .securityKeyPIN:
            return [HintBar.Item("Enter", "send the PIN to the key"), HintBar.Item("Esc", "cancel")]
        case .publishing:
            return [HintBar.Item("…", "publishing; the answer closes this")]
        case .storeLost:
            return [HintBar.Item("Enter Esc", "close")]
        case .confirm, .conflict:
            return [
                HintBar.Item("y", "yes"), HintBar.Item("n", "no"), HintBar.Item("Tab ←→", "move"),
                HintBar.Item("Enter", "choose"), HintBar.Item("Esc", "cancel"),
            ]
        case .history, .audit:
            if state.listFilter?.field != nil {
                return [HintBar.Item("Enter", "apply"), HintBar.Item("Esc", "clear the filter")]
            }
            return [
                HintBar.Item("Enter", "open"), HintBar.Item("/", "filter"), HintBar.Item("↑↓ PgUp PgDn", "scroll"),
                HintBar.Item("Home End", "ends"), HintBar.Item("Esc", "close"),
            ]
        case .planCode:
            return [HintBar.Item("Enter", "resume with the code"), HintBar.Item("Esc", "cancel")]
        case .palette:
            return [
                HintBar.Item("Enter", "run"), HintBar.Item("↑↓", "choose"), HintBar.Item("Tab", "complete"),
                HintBar.Item("Esc", "close"),
            ]
        case .version(let number, let detail, _, _):
            return (detail.map { $0.isCurrent } == false ? [HintBar.Item("r", "roll back to v\(number)")] : [])
                + [HintBar.Item("↑↓ PgUp PgDn", "scroll"), HintBar.Item("Esc", "back")]
        }
    }
}
