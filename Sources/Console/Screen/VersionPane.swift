/// The drill-down of one version (Enter on a history or audit row): who published it, when, from where and why,
/// the core's template diff against the version before it, and the key that rolls back to it.
///
/// The roll-back is an ordinary change: `r` asks the write path for a preview of `rollback(toVersion:)`, and the
/// confirm dialog, the guardrails, the reason and step-up follow as for any other change.
public enum VersionPane {
    public static func lines(for state: ConsoleState, width: Int) -> [Line] {
        guard case .version(let number, let detail, _, _) = state.overlay else { return [] }
        guard let detail else { return [[Span("Loading v\(number)…", .muted)]] }
        let w = max(20, width)
        let r = detail.record
        let offset = state.configuration.utcOffsetSeconds
        let label = 12
        func row(_ name: String, _ value: Line) -> Line { [Span(Format.pad(name, label), .muted)] + value }
        var lines: [Line] = [
            row(
                "Published",
                [
                    Span(Format.dateTime(r.at, utcOffsetSeconds: offset) + " " + Format.utcOffset(offset), .text),
                    Span(" by ", .muted), Span(r.actor.isEmpty ? "–" : r.actor, .accent),
                ]),
            row(
                "From",
                [Span(detail.origin.isEmpty ? "–" : detail.origin, .text), Span(" · " + detail.updateType, .muted)]),
            row("Change", Describe.change(r.from, r.to) + [Span("  (" + r.kindText + ")", .muted)]),
        ]
        let reason = r.reason.isEmpty ? ["(no reason given)"] : Format.wrap(r.reason, max(8, w - label))
        for (i, text) in reason.enumerated() {
            lines.append(row(i == 0 ? "Why" : "", [Span(text, r.reason.isEmpty ? .muted : .text)]))
        }
        lines.append([])
        lines.append([Span("What v\(number) changed against v\(number - 1):", .title, .bold)])
        if detail.diff.isEmpty { lines.append([Span("  nothing but bookkeeping (version, ETag)", .muted)]) }
        for change in detail.diff {
            let role: Role = change.hasPrefix("+") ? .ok : change.hasPrefix("-") ? .bad : .text
            for (i, text) in Format.wrap(change, max(8, w - 4)).enumerated() {
                lines.append([Span((i == 0 ? "  " : "    ") + text, role)])
            }
        }
        lines.append([])
        if detail.isCurrent {
            lines.append([Span("This is the version the store serves now.", .muted)])
        } else {
            lines.append([
                Span("r", .accent, .bold),
                Span("  roll back to this version: publishes v\(number)'s template as a new version", .text),
            ])
            lines.append([Span("   through the write path (confirm, guardrails, reason, step-up)", .muted)])
        }
        return lines
    }
}
