import RemoteConfig
import Telemetry
import Timekeeping

/// Dialogs, prompts and full-screen lists drawn over the main screen.
enum OverlayView {
    static func render(_ overlay: Overlay, _ state: ConsoleState, into grid: inout Grid, area: Rect) {
        switch overlay {
        case .help(let scroll):
            renderHelp(state, scroll: scroll, into: &grid, area: area)
        case .valuePrompt(let field, let error):
            let now = state.model.map { PercentText.format($0.condition.desiredMicroPercent) } ?? "–"
            let inner = DialogBox.render(
                title: [Span("Set the percentage", .dialog)],
                lines: [
                    [Span("Now " + now + ". New value, 0–100 with up to 6 decimals:", .text)], [], errorLine(error),
                ],
                buttons: nil, width: 60, into: &grid, area: area)
            TextInput.render(field, into: &grid, area: inner.row(1))
        case .preparing(let request):
            DialogBox.render(
                title: [Span("Preparing", .dialog)],
                lines: [
                    [Span("Asking the write path what " + request.operation.text + " would do…", .text)],
                    [Span("Esc cancels; nothing has been written.", .muted)],
                ], buttons: nil, width: 64, into: &grid, area: area)
        case .confirm(let preview, let focus):
            DialogBox.render(
                title: [Span("Confirm: " + preview.request.operation.text, .dialog)],
                lines: confirmLines(preview),
                buttons: Buttons.line(cancel: "Cancel", act: "Publish", focus: focus, width: 0),
                width: dialogWidth(76, area), into: &grid, area: area)
        case .reason(let preview, let field, let error):
            let moved = movedLines(preview)
            let inner = DialogBox.render(
                title: [Span("Reason for the increase", .dialog)],
                lines: moved + [
                    [Span(preview.request.operation.text + ": ", .muted)] + Describe.change(preview.from, preview.to),
                    [Span("Why? Shown in the log and kept in the audit trail.", .text)], [], errorLine(error),
                ], buttons: nil, width: dialogWidth(70, area), into: &grid, area: area)
            TextInput.render(field, into: &grid, area: inner.row(2 + moved.count))
        case .stepUp(let preview, _, let field, let error):
            let inner = DialogBox.render(
                title: [Span("Step-up verification", .dialog)],
                lines: [
                    [Span("Policy asks for a second factor for ", .text)] + Describe.change(preview.from, preview.to),
                    [Span("Code from your authenticator app:", .text)], [], errorLine(error),
                ], buttons: nil, width: 64, into: &grid, area: area)
            TextInput.render(field, into: &grid, area: Rect(x: inner.x, y: inner.y + 2, width: 12, height: 1))
        case .stepUpMethod(let preview, _, let selected):
            let options = preview.stepUpOptions.enumerated().map { i, option -> Line in
                let chosen = i == selected
                return [
                    Span(chosen ? "› " : "  ", .accent), Span("\(i + 1)  ", .key),
                    Span(option.label, chosen ? .selection : .text, chosen ? .bold : []),
                ]
            }
            DialogBox.render(
                title: [Span("Step-up verification", .dialog)],
                lines: [[Span("Policy asks for a second factor for ", .text)] + Describe.change(preview.from, preview.to),
                    [Span("Approve with:", .text)]] + options + [[], [Span("↑↓ or 1–\(options.count) choose · Enter approves · Esc cancels", .muted)]],
                buttons: nil, width: 64, into: &grid, area: area)
        case .securityKey(let request, let since, let seconds):
            var left = seconds
            if let since, let now = state.wallNow { left = max(0, seconds - Int((now - since).microseconds / 1_000_000)) }
            DialogBox.render(
                title: [Span("Touch your security key", .dialog)],
                lines: [
                    [Span("Touch your security key to approve ", .text)] + Describe.change(request.preview.from, request.preview.to),
                    [Span("on v" + request.preview.baseVersion + ": the key signs exactly this change.", .muted)],
                    [],
                    [Span("\(left) s left", left <= 5 ? .warn : .accent, .bold), Span(" before the key gives up", .muted)],
                    [Span("Esc cancels; nothing is published unless the key approves.", .muted)],
                ], buttons: nil, width: 64, into: &grid, area: area)
        case .approvingRequest(_, let request, let since, let seconds):
            var left = seconds
            if let since, let now = state.wallNow { left = max(0, seconds - Int((now - since).microseconds / 1_000_000)) }
            DialogBox.render(
                title: [Span("Touch your security key", .dialog)],
                lines: [
                    [Span("Touch your security key to approve request ", .text), Span(request, .accent, .bold)],
                    [Span("the key signs the requester's change document; the write path checks it.", .muted)],
                    [],
                    [Span("\(left) s left", left <= 5 ? .warn : .accent, .bold), Span(" before the key gives up", .muted)],
                    [Span("Esc cancels; nothing is published unless the key approves.", .muted)],
                ], buttons: nil, width: 64, into: &grid, area: area)
        case .phone(let request, let status, let field, let error, let checking):
            let inner = DialogBox.render(
                title: [Span("Phone verification", .dialog)],
                lines: [
                    [Span("A code sent to your phone approves ", .text)] + Describe.change(request.preview.from, request.preview.to),
                    [Span(status ?? "asking the provider to send the code…", status == nil ? .muted : .accent)],
                    [Span("Code (not shown):", .text)], [],
                    checking ? [Span("checking the code with the provider…", .muted)] : errorLine(error),
                    [Span("c: call me instead · Esc cancels the verification", .muted)],
                ], buttons: nil, width: dialogWidth(76, area), into: &grid, area: area)
            TextInput.render(field, into: &grid, area: Rect(x: inner.x, y: inner.y + 3, width: 12, height: 1))
        case .securityKeyPIN(let preview, _, let field, let error):
            let inner = DialogBox.render(
                title: [Span("Security key PIN", .dialog)],
                lines: [
                    [Span("The key asks for its PIN to approve ", .text)] + Describe.change(preview.from, preview.to),
                    [Span("PIN (not shown):", .text)], [], errorLine(error),
                ], buttons: nil, width: 64, into: &grid, area: area)
            TextInput.render(field, into: &grid, area: Rect(x: inner.x, y: inner.y + 2, width: 24, height: 1))
        case .publishing(let request):
            DialogBox.render(
                title: [Span("Publishing", .dialog)],
                lines: [
                    Describe.change(request.preview.from, request.preview.to),
                    [
                        Span(
                            "compare-and-swap on v" + request.preview.baseVersion + " · etag "
                                + Describe.etag(request.preview.baseETag), .muted)
                    ],
                    [Span("waiting for the store…", .muted)],
                ], buttons: nil, width: 60, into: &grid, area: area)
        case .storeLost:
            DialogBox.render(
                title: [Span("Store lost: the change was dropped", .bad, .bold)],
                lines: [
                    [Span("READ-ONLY: " + (state.storeLost ?? "the store was lost"), .bad)],
                    [Span("Nothing was written. Quit and open the store again.", .text)],
                ], buttons: nil, width: dialogWidth(76, area), into: &grid, area: area)
        case .conflict(let conflict, let focus):
            DialogBox.render(
                title: [Span("Conflict: someone published first", .bad, .bold)],
                lines: conflictLines(conflict, state),
                buttons: Buttons.line(cancel: "Cancel", act: "Re-apply on top", focus: focus, width: 0),
                width: dialogWidth(76, area), into: &grid, area: area)
        case .history(let entries, let cursor):
            renderHistory(entries, cursor, state, into: &grid, area: area)
        case .audit(let log, let cursor):
            renderAudit(log, cursor, state, into: &grid, area: area)
        case .verdict(let scroll):
            renderVerdict(state, scroll: scroll, into: &grid, area: area)
        case .palette(let palette):
            renderPalette(palette, into: &grid, area: area)
        case .planCode(let field, let error):
            let plan = state.model?.plan
            let inner = DialogBox.render(
                title: [Span("Resume the plan", .dialog)],
                lines: [
                    [Span(Format.truncate(plan?.reason ?? "The plan waits for a one-time code.", 60), .text)],
                    [Span("Code from your authenticator app (publishes the waiting step):", .text)], [], errorLine(error),
                ], buttons: nil, width: 68, into: &grid, area: area)
            TextInput.render(field, into: &grid, area: Rect(x: inner.x, y: inner.y + 2, width: 12, height: 1))
        case .version(let number, let detail, let scroll, _):
            renderVersion(number, detail, state, scroll: scroll, into: &grid, area: area)
        }
    }

    /// The title of a full-screen view with the way it was reached (k9s, lazygit): `rollout › History › v12`.
    static func breadcrumb(_ overlay: Overlay) -> Line {
        func trail(_ o: Overlay) -> [String] {
            switch o {
            case .help: ["Help"]
            case .verdict: ["Why: the verdict"]
            case .history: ["History"]
            case .audit: ["Audit log"]
            case .palette: ["Command"]
            case .version(let number, _, _, let back): (back.map(trail) ?? []) + ["Version v\(number)"]
            default: []
            }
        }
        let crumbs = trail(overlay)
        guard let leaf = crumbs.last else { return [] }
        return [Span("rollout › " + crumbs.dropLast().map { $0 + " › " }.joined(), .muted), Span(leaf, .title)]
    }

    /// The palette: the command line at the top, then the commands it may name, the chosen one marked, each with
    /// the key that does the same.
    static func renderPalette(_ palette: PaletteState, into grid: inout Grid, area: Rect) {
        let matches = palette.matches
        let shown = min(matches.count, max(1, area.height - 6))
        let width = min(area.width - 2, dialogWidth(72, area))
        let box = Rect(x: area.x + max(0, (area.width - width) / 2), y: area.y + 1, width: width, height: shown + 4)
        let inner = Frame(title: breadcrumb(.palette(palette)), role: .dialog).render(into: &grid, area: box)
        guard inner.height >= 2 else { return }
        grid.write([Span(":", .accent, .bold)], x: inner.x, y: inner.y, limit: 1)
        TextInput.render(palette.field, into: &grid, area: Rect(x: inner.x + 2, y: inner.y, width: inner.width - 2, height: 1))
        let selected = min(palette.selected, max(0, matches.count - 1))
        var lines: [Line] = []
        if let error = palette.error {
            lines.append([Span("✗ " + error, .bad)])
        } else if matches.isEmpty {
            lines.append([Span("no command matches; Backspace, or Esc to close", .muted)])
        } else {
            let c = matches[selected].command
            lines.append([Span("Enter runs " + c.name + (c.arguments.isEmpty ? "" : " " + c.arguments), .muted)])
        }
        let first = max(0, selected - shown + 1)
        for (i, match) in matches.enumerated().dropFirst(first).prefix(shown) {
            let c = match.command
            let name = Format.pad(c.name + (c.arguments.isEmpty ? "" : " " + c.arguments), 26)
            let key = Format.pad(c.key, 5)
            var line: Line = [Span(i == selected ? "▶ " : "  ", .selection), Span(name, .text), Span(key, .accent), Span(c.help, .muted)]
            if i == selected { line = line.map { Span($0.text, .selection, $0.attributes) } }
            lines.append(line)
        }
        grid.draw(lines, in: Rect(x: inner.x, y: inner.y + 1, width: inner.width, height: inner.height - 1))
    }

    static func renderVersion(
        _ number: Int, _ detail: VersionDetail?, _ state: ConsoleState, scroll: Int, into grid: inout Grid, area: Rect
    ) {
        let lines = VersionPane.lines(for: state, width: area.width - 4)
        let status: Line =
            detail.map { $0.isCurrent ? [Span("current version", .ok)] : [Span($0.record.kindText, .muted)] } ?? []
        let inner = Frame(title: breadcrumb(state.overlay ?? .help(scroll: 0)), status: status, role: .dialog)
            .render(into: &grid, area: area)
        let (body, footer) = inner.splitBottom(1)
        let first = min(scroll, max(0, lines.count - body.height))
        grid.draw(Array(lines.dropFirst(first)), in: body)
        let last = min(lines.count, first + body.height)
        grid.draw([[Span("lines \(first + 1)–\(last) of \(lines.count)", .muted)]], in: footer)
    }

    static func renderVerdict(_ state: ConsoleState, scroll: Int, into grid: inout Grid, area: Rect) {
        let lines = VerdictPane.lines(for: state, width: area.width - 4)
        let count = state.model?.crash.findings.count ?? 0
        let inner = Frame(
            title: breadcrumb(.verdict(scroll: 0)),
            status: [Span("\(count) finding" + (count == 1 ? "" : "s"), .muted)],
            role: .dialog
        ).render(into: &grid, area: area)
        let (body, footer) = inner.splitBottom(1)
        let first = min(scroll, max(0, lines.count - body.height))
        grid.draw(Array(lines.dropFirst(first)), in: body)
        let last = min(lines.count, first + body.height)
        grid.draw([[Span("lines \(first + 1)–\(last) of \(lines.count)", .muted)]], in: footer)
    }

    /// A dialog's width: `base` columns up to 120-column terminals, then 60% of the width (at most 130), so that
    /// reasons and notes are not cut while the screen has room.
    static func dialogWidth(_ base: Int, _ area: Rect) -> Int { max(base, min(130, area.width * 6 / 10)) }

    static func errorLine(_ error: String?) -> Line {
        error.map { [Span("✗ " + $0, .bad)] } ?? []
    }

    // MARK: Confirm and conflict

    /// What moved the store while the dialog was open: each change with who made it and from → to.
    static func movedLines(_ p: ChangePreview) -> [Line] {
        guard let old = p.supersedes else { return [] }
        var lines: [Line] = [[
            Span("↻ Updated while open: ", .warn, .bold),
            Span("the store moved from v" + old + " to v" + p.baseVersion + "; re-judged on it", .warn),
        ]]
        for c in p.movedBy {
            lines.append([Span("  v" + c.version + " by " + c.actor + ": ", .warn)] + Describe.change(c.from, c.to))
        }
        return lines
    }

    static func confirmLines(_ p: ChangePreview) -> [Line] {
        let label = 18
        func row(_ name: String, _ value: Line) -> Line { [Span(Format.pad(name, label), .muted)] + value }
        let indent = Span(String(repeating: " ", count: label))
        var lines: [Line] = []
        if p.supersedes != nil {
            lines += movedLines(p)
        } else if let before = p.rejudgedFrom, before != p.guardrail.verdict {
            lines.append([
                Span("↻ Updated while open: ", .warn, .bold),
                Span("the verdict went from \(before) to \(p.guardrail.verdict); re-judged on it", .warn),
            ])
        }
        let delta = p.to.effectiveMicroPercent - p.from.effectiveMicroPercent
        lines.append(
            row(
                "AppAttestEnabled",
                Describe.change(p.from, p.to)
                    + (delta != .zero ? [Span("  (" + PercentText.formatPoints(delta) + ")", .muted)] : [])))
        if p.eligibleDeviceChange >= 0 {
            lines.append(
                row(
                    "Newly eligible",
                    [
                        Span(Format.count(p.eligibleDeviceChange), .accent),
                        Span(" devices", .text),
                    ]))
        } else {
            lines.append(
                row(
                    "Losing the flag",
                    [
                        Span(Format.count(-p.eligibleDeviceChange), .accent),
                        Span(" devices", .text),
                    ]))
        }
        if let load = p.load {
            let over = load.share > 1
            lines.append(
                row(
                    "Attestation load",
                    [
                        Span("≈ " + Format.rate(load.peakPerSecond) + "/s peak", .text),
                        Span(
                            " · " + Format.roughShare(load.share) + " of " + Format.rate(load.budgetPerSecond)
                                + "/s guidance ", .muted),
                        over ? Span("✗ over", .bad, .bold) : Span("✓ within", .ok),
                    ]))
            if let perDay = load.perDay, let daily = load.dailyBudget, daily > 0 {
                let share = Double(perDay) / Double(daily)
                lines.append([
                    indent,
                    Span(
                        "≈ " + Format.shortCount(perDay) + "/day · " + Format.roughShare(share)
                            + " of " + Format.shortCount(daily) + "/day", share > 1 ? .bad : .muted),
                ])
            }
        } else {
            lines.append(row("Attestation load", [Span("no new attestations", .muted)]))
        }
        let said = (p.guardrail.refusal.map { ["refuses this change: " + $0.reason] } ?? []) + p.guardrail.reasons
        let reasons = said.isEmpty ? [""] : said
        lines.append(row("Guardrail", [p.guardrail.verdict.label, Span("  " + reasons[0], .text)]))
        for reason in reasons.dropFirst().prefix(2) { lines.append([indent, Span(reason, .text)]) }
        lines.append(
            row(
                "Publishes on",
                [
                    Span("v" + p.baseVersion + " · etag " + Describe.etag(p.baseETag), .text),
                    Span(" (compare-and-swap)", .muted),
                ]))
        var next: [String] = []
        if p.requiresReason { next.append("a reason") }
        if p.requiresStepUp { next.append("a step-up code") }
        if !next.isEmpty { lines.append(row("Then asks for", [Span(next.joined(separator: " and "), .text)])) }
        if p.stacksOnUnpropagatedChange, let share = p.propagation {
            lines.append([
                Span("! Stacking ", .warn, .bold),
                Span("on v" + p.baseVersion + ": only " + Format.roughShare(share) + " of active devices have it yet", .warn),
            ])
        }
        for note in p.notes { lines.append([Span("! " + note, .warn)]) }
        return lines
    }

    static func conflictLines(_ c: ConflictDialog, _ state: ConsoleState) -> [Line] {
        var lines: [Line] = [
            [Span("Your " + c.request.operation.text + " was prepared on v" + c.expectedVersion + ".", .text)],
            [Span("Published since then:", .muted)],
        ]
        for record in c.intervening.prefix(4) {
            lines.append(
                [
                    Span("  v" + record.version + "  ", .accent),
                    Span(Format.time(record.at, utcOffsetSeconds: state.configuration.utcOffsetSeconds) + "  ", .muted),
                    Span(record.actor + "  ", .text),
                ] + Describe.change(record.from, record.to)
                    + (record.reason.isEmpty ? [] : [Span("  “" + record.reason + "”", .muted)]))
        }
        if c.intervening.count > 4 {
            lines.append([Span("  … and \(c.intervening.count - 4) more (h shows the history)", .muted)])
        }
        var now: Line = [Span("Now ", .muted), Span(c.current.text, .accent)]
        if let target = c.request.operation.target(from: c.current) {
            now += [Span("; re-applied on top: ", .muted), Span(target.text, .accent)]
        }
        lines.append(now)
        lines.append([Span("Re-applying shows a fresh confirm dialog first.", .muted)])
        return lines
    }

    // MARK: Full-screen views

    static func renderHelp(_ state: ConsoleState, scroll: Int, into grid: inout Grid, area: Rect) {
        let lines = HelpScreen.lines(for: state, width: area.width - 4)
        let inner = Frame(title: breadcrumb(.help(scroll: 0)), status: [Span("rollout console", .muted)], role: .dialog)
            .render(into: &grid, area: area)
        let (body, footer) = inner.splitBottom(1)
        let first = min(scroll, max(0, lines.count - body.height))
        grid.draw(Array(lines.dropFirst(first)), in: body)
        let last = min(lines.count, first + body.height)
        grid.draw([[Span("lines \(first + 1)–\(last) of \(lines.count)", .muted)]], in: footer)
    }

    static func renderHistory(
        _ entries: [ChangeRecord]?, _ cursor: ListCursor, _ state: ConsoleState, into grid: inout Grid, area: Rect
    ) {
        let status: Line = entries.map { [Span(Format.count($0.count) + " changes", .muted)] } ?? []
        let inner = Frame(title: breadcrumb(.history(entries: nil, cursor: ListCursor())), status: status, role: .dialog).render(
            into: &grid, area: area)
        let offset = state.configuration.utcOffsetSeconds
        let wide = inner.width >= 110
        let columns: [(String, Int)] = [
            ("Version", 8), ("Time (" + Format.utcOffset(offset) + ")", 20), ("Who", wide ? 24 : 16),
            ("Change", 24), ("Kind", 9), ("Why", 0),
        ]
        let listArea = FilterBar.render(state, total: entries?.count, into: &grid, area: inner)
        let shown = state.filteredRows(state.overlay)
        ListView.render(
            header: columns,
            rows: entries.map { e in shown.map { ListRows.history(e[$0], utcOffsetSeconds: offset) } },
            empty: state.listFilter == nil ? "No changes published yet." : "No change matches the filter.",
            cursor: cursor, into: &grid, area: listArea)
    }

    static func renderAudit(
        _ log: AuditLog?, _ cursor: ListCursor, _ state: ConsoleState, into grid: inout Grid, area: Rect
    ) {
        var status: Line = []
        switch log?.integrity {
        case .verified: status = [Span("chain ✓ verified", .ok)]
        case .broken(let at, _): status = [Span("chain ✗ broken" + (at.map { " at #\($0)" } ?? ""), .alert)]
        case .unchecked: status = [Span("chain not checked", .warn)]
        case nil: break
        }
        let inner = Frame(title: breadcrumb(.audit(log: nil, cursor: ListCursor())), status: status, role: .dialog)
            .render(into: &grid, area: area)
        var listArea = inner
        if case .broken(let at, let reason)? = log?.integrity {
            let (top, rest) = inner.splitTop(1)
            grid.draw([[Span("✗ " + (at.map { "entry #\($0): " } ?? "") + reason, .bad, .bold)]], in: top)
            listArea = rest
        }
        let offset = state.configuration.utcOffsetSeconds
        let wide = inner.width >= 110
        let columns: [(String, Int)] = [
            ("#", 7), ("Time (" + Format.utcOffset(offset) + ")", 20), ("Who", wide ? 24 : 16), ("Action", 10),
            ("Outcome", 14), ("Detail", 0),
        ]
        listArea = FilterBar.render(state, total: log?.entries.count, into: &grid, area: listArea)
        let shown = state.filteredRows(state.overlay)
        ListView.render(
            header: columns,
            rows: log.map { l in shown.map { ListRows.audit(l.entries[$0], utcOffsetSeconds: offset) } },
            empty: state.listFilter == nil ? "The audit log is empty." : "No entry matches the filter.",
            cursor: cursor, into: &grid, area: listArea)
    }
}

/// The rows of the history and audit views: drawn by the list and searched by the `/` filter (one text for both).
enum ListRows {
    static func history(_ r: ChangeRecord, utcOffsetSeconds offset: Int) -> Line {
        [
            Span("v" + r.version, .accent), Span(Format.dateTime(r.at, utcOffsetSeconds: offset), .muted),
            Span(r.actor, .text), Span(r.from.text + " → " + r.to.text, r.to.killed ? .bad : .text),
            Span(r.kindText, .muted),
            // Who approved a protected change leads its "why": the reason follows.
            Span(r.approvals.isEmpty ? r.reason : r.approvalText + (r.reason.isEmpty ? "" : " · " + r.reason), .text),
        ]
    }

    static func audit(_ e: AuditEntry, utcOffsetSeconds offset: Int) -> Line {
        [
            Span(String(e.sequence), .muted), Span(Format.dateTime(e.at, utcOffsetSeconds: offset), .muted),
            Span(e.actor, .text), Span(e.action, .text),
            Span((e.succeeded ? "✓ " : "✗ ") + e.outcome, e.succeeded ? .ok : .bad),
            Span(
                e.approvals.isEmpty
                    ? e.detail : ChangeApproval.text(e.approvals, actor: e.actor) + (e.detail.isEmpty ? "" : " · " + e.detail),
                .text),
        ]
    }
}

/// The `/` filter's row above a list, while it is typed or applied; returns the area left for the list.
enum FilterBar {
    static func render(_ state: ConsoleState, total: Int?, into grid: inout Grid, area: Rect) -> Rect {
        guard let filter = state.listFilter, let total else { return area }
        let (top, rest) = area.splitTop(1)
        let count = state.filteredRows(state.overlay).count
        let tail = "  \(Format.count(count)) of \(Format.count(total)) match" + (filter.field == nil ? " · / edits" : "")
        grid.write([Span("/ ", .accent, .bold)], x: top.x, y: top.y, limit: top.width)
        let fieldWidth = max(8, min(40, top.width - CharacterWidth.of(tail) - 2))
        let fieldArea = Rect(x: top.x + 2, y: top.y, width: fieldWidth, height: 1)
        if let field = filter.field {
            TextInput.render(field, into: &grid, area: fieldArea)
        } else {
            grid.write(filter.text, x: fieldArea.x, y: fieldArea.y, role: .text, attributes: .bold, limit: fieldWidth)
        }
        let used = filter.field != nil ? fieldWidth : min(fieldWidth, CharacterWidth.of(filter.text))
        grid.write([Span(tail, .muted)], x: top.x + 2 + used, y: top.y, limit: max(0, top.maxX - top.x - 2 - used))
        return rest
    }
}

/// A centred dialog box.
enum DialogBox {
    /// Draws the dialog and returns the area of its lines (buttons excluded).
    @discardableResult
    static func render(title: Line, lines: [Line], buttons: Line?, width: Int, into grid: inout Grid, area: Rect)
        -> Rect
    {
        let buttonRows = buttons == nil ? 0 : 2
        let height = min(area.height, lines.count + buttonRows + 2)
        let box = area.centered(width: min(width, area.width - 2), height: height)
        let inner = Frame(title: title, role: .dialog).render(into: &grid, area: box)
        let (content, buttonArea) = inner.splitBottom(buttonRows)
        grid.draw(lines, in: content)
        if let buttons {
            let row = buttonArea.row(1)
            let lead = max(0, (row.width - buttons.width) / 2)
            grid.write(buttons, x: row.x + lead, y: row.y, limit: row.width - lead)
            // `Buttons.line`: padding, Cancel, gap, the action; each button answers a click.
            if buttons.count == 4 {
                let cancelX = row.x + lead + buttons[0].width
                let actX = cancelX + buttons[1].width + buttons[2].width
                grid.register(.button(.cancel), at: Rect(x: cancelX, y: row.y, width: buttons[1].width, height: 1))
                grid.register(.button(.act), at: Rect(x: actX, y: row.y, width: buttons[3].width, height: 1))
            }
        }
        return content
    }
}

/// A scrollable table with a header row and a selected row.
enum ListView {
    static func render(
        header: [(String, Int)], rows: [Line]?, empty: String, cursor: ListCursor, into grid: inout Grid, area: Rect
    ) {
        let (head, rest) = area.splitTop(1)
        let (body, footer) = rest.splitBottom(1)
        let marker = 2
        var x = head.x + marker
        for (title, width) in header {
            let w = width == 0 ? max(0, head.maxX - x) : width
            grid.write(title, x: x, y: head.y, role: .muted, attributes: .underline, limit: max(0, w - 1), clip: head)
            x += w
        }
        guard let rows else {
            grid.draw([[Span("Loading…", .muted)]], in: body)
            return
        }
        guard !rows.isEmpty else {
            grid.draw([[Span(empty, .muted)]], in: body)
            return
        }
        let page = max(1, body.height)
        let selected = min(cursor.selected, rows.count - 1)
        // Keep the selection visible even if the terminal shrank since the cursor last moved.
        var first = min(cursor.offset, max(0, rows.count - page))
        if selected < first { first = selected }
        if selected >= first + page { first = selected - page + 1 }
        for (i, row) in rows.enumerated().dropFirst(first).prefix(page) {
            let y = body.y + i - first
            let isSelected = i == selected
            grid.register(.row(i), at: Rect(x: body.x, y: y, width: body.width, height: 1))
            var cx = body.x + marker
            if isSelected { grid.write("▶", x: body.x, y: y, role: .selection, clip: body) }
            for (j, (_, width)) in header.enumerated() where j < row.count {
                let w = width == 0 ? max(0, body.maxX - cx) : width
                let span = row[j]
                grid.write(
                    span.text, x: cx, y: y, role: span.role, attributes: span.attributes, limit: max(0, w - 1),
                    clip: body)
                cx += w
            }
            if isSelected { grid.restyle(Rect(x: body.x, y: y, width: body.width, height: 1), role: .selection) }
        }
        grid.draw([[Span("entry \(selected + 1) of \(rows.count)", .muted)]], in: footer)
    }
}
