import Telemetry

/// Why: the verdict pane (`v`, or Enter on the main screen) lists every finding of the one assessment, most
/// severe first, each with the test that decided it, its statistic against its threshold, the samples, the
/// effect detectable now and what would change the verdict — the core's `Finding` and `FindingEvidence`, as is.
public enum VerdictPane {
    public static func lines(for state: ConsoleState, width: Int) -> [Line] {
        guard let m = state.model else { return [[Span("Waiting for the first data from the store…", .muted)]] }
        let c = m.crash
        let w = max(20, width)
        let head = c.verdict.label
        var lines: [Line] = []
        for (i, text) in Format.wrap(c.reasons.first ?? "", max(8, w - head.width - 2)).enumerated() {
            lines.append([i == 0 ? head : Span(String(repeating: " ", count: head.width)), Span("  " + text, .text)])
        }
        lines.append([
            Span("guardrails ", .muted), Span(c.guardrailsArmed ? "armed" : "off", c.guardrailsArmed ? .ok : .warn),
            Span(Format.truncate(" (HOLD and HALT refuse increases)", max(0, w - 15)), .muted),
        ])
        // After a kill there is nothing left to kill: the line says so rather than offer K.
        let killed = m.condition.state == .killed
        lines.append([
            Span("auto-kill ", .muted),
            Span(
                Format.truncate(
                    killed
                        ? (c.autoKill ? "armed; " : "off; ") + "the flag is already off for everyone (killed): r resumes"
                        : c.autoKill ? "armed: kills at the next refresh on HALT" : "off: K kills by hand", w - 10),
                killed ? .muted : c.autoKill ? .ok : .warn),
        ])
        let findings = c.findings.enumerated().sorted { a, b in
            a.element.level != b.element.level ? a.element.level > b.element.level : a.offset < b.offset
        }.map(\.element)
        if findings.isEmpty {
            lines.append([])
            lines.append([Span("No findings from the assessment yet.", .muted)])
        }
        let label = 14
        for (i, f) in findings.enumerated() {
            lines.append([])
            let head: Line = [Span("\(i + 1). ", .muted), f.level.label, Span("  " + f.topic.rawValue, .title, .bold)]
            lines.append(head)
            for text in Format.wrap(f.text, w - 3) { lines.append([Span("   " + text, .text)]) }
            guard let e = f.evidence else { continue }
            let rows: [(String, String?)] = [
                ("Test", e.test), ("Statistic", e.statistic), ("Threshold", e.threshold), ("Samples", e.samples),
                ("Detectable", e.detectableEffect), ("Would change", e.wouldChange),
            ]
            for (name, value) in rows {
                guard let value else { continue }
                for (j, text) in Format.wrap(value, max(8, w - 3 - label)).enumerated() {
                    lines.append([
                        Span("   " + Format.pad(j == 0 ? name : "", label), .muted),
                        Span(text, name == "Would change" ? .accent : .text),
                    ])
                }
            }
        }
        return lines
    }
}
