import Telemetry

/// The help text, generated from the key table so that it can never disagree with the keys.
///
/// It opens on a cheat sheet that fits an 80×24 terminal without scrolling (every key of the main screen with a
/// word or two, then the keys of dialogs and lists); the full descriptions follow it, wrapped to the width, for
/// ↓ and PgDn.
public enum HelpScreen {
    /// The lines at `width` columns (nil: the state's screen less the frame).
    public static func lines(for state: ConsoleState, width: Int? = nil) -> [Line] {
        let width = max(20, width ?? state.screenSize.width - 4)
        return cheatSheet(state, width: width) + [[]] + details(state, width: width)
    }

    /// A word or two for each key of the main screen, for the cheat sheet: its own words here, else its hint's
    /// label, else its help up to the first colon.
    public static func short(_ binding: KeyBinding) -> String {
        if let text = shortText[binding.intent] { return text }
        if let label = binding.hint?.label { return label }
        return String(binding.help.prefix { $0 != ":" && $0 != "," })
    }

    static let shortText: [Intent: String] = [
        .nudgeUp: "raise by the step",
        .nudgeDown: "lower by the step",
        .finerStep: "smaller step",
        .coarserStep: "larger step",
        .typeExact: "set an exact %",
        .kill: "kill switch",
        .resume: "resume after a kill",
        .rollbackLast: "undo the last change",
        .togglePlan: "plan: pause / resume",
        .skipPlanStep: "plan: next step now",
        .showHistory: "history",
        .showAudit: "audit log",
        .showVerdict: "why: the verdict",
        .focusLog: "focus the log",
        .filterLog: "filter the log",
        .nextTheme: "next theme",
        .toggleFreeze: "freeze the display",
        .showHelp: "this help",
        .openPalette: "command palette",
        .redraw: "redraw",
        .quit: "quit",
        .cancel: "close, clear",
        .pauseSimulation: "pause the simulation",
        .fasterSimulation: "faster",
        .slowerSimulation: "slower",
    ]

    /// Two columns of keys and words: the main screen's, then those of dialogs and lists.
    static func cheatSheet(_ state: ConsoleState, width: Int) -> [Line] {
        func keyText(_ keys: [Key]) -> String {
            keys.map { $0 == .backTab ? "S-Tab" : $0.name }.joined(separator: " ")
        }
        let main = KeyMap.main.filter { $0.group != .simulation || state.simulation != nil }.map {
            (keyText($0.keys), short($0))
        }
        let dialogs = [
            ("y n", "yes, no"), ("Tab ← →", "move the focus"), ("Enter", "act, submit, open"), ("Esc", "cancel, back"),
            ("↑ ↓ j k", "scroll, select"), ("PgUp PgDn", "page"), ("Home End", "first, last"),
            ("/", "filter (log and lists)"), ("wheel", "scroll"), ("click", "button, row, change"),
        ]
        let keyWidth = (main + dialogs).map { CharacterWidth.of($0.0) }.max()! + 2
        // Two columns where both fit whole (80 columns do), else one: a word is never cut.
        let needed = keyWidth + (main + dialogs).map { CharacterWidth.of($0.1) }.max()! + 1
        let columns = width >= 2 * needed ? 2 : 1
        let column = width / columns
        func grid(_ items: [(String, String)]) -> [Line] {
            let rows = (items.count + columns - 1) / columns
            return (0..<rows).map { r in
                var line: Line = []
                for c in 0..<columns where c * rows + r < items.count {
                    let (keys, text) = items[c * rows + r]
                    let cell = Format.pad(keys, keyWidth)
                    line += [
                        Span(cell, .key),
                        Span(
                            Format.pad(Format.truncate(text, max(1, column - keyWidth - 1)), column - keyWidth), .text),
                    ]
                }
                return line
            }
        }
        return [[Span("Keys", .title, .bold), Span("  (↓ and PgDn: each key in full; Esc closes)", .muted)]]
            + grid(main)
            + [[Span("In dialogs, prompts and lists", .title, .bold)]]
            + grid(dialogs)
    }

    /// Every key with its full description, wrapped under its key, then how changes work and how to read the screen.
    static func details(_ state: ConsoleState, width: Int) -> [Line] {
        var lines: [Line] = []
        // As wide as the widest key name, so no key is ever cut.
        let keyWidth =
            (KeyMap.main.map { CharacterWidth.of($0.keys.map(\.name).joined(separator: " ")) }
            + KeyMap.dialogKeys.map { CharacterWidth.of($0.keys) }).max()! + 2
        func entry(_ keys: String, _ help: String) {
            let wrapped = Format.wrap(help, max(10, width - 2 - keyWidth))
            for (i, text) in wrapped.enumerated() {
                lines.append([
                    Span("  " + Format.pad(i == 0 ? keys : "", keyWidth), .key), Span(text, .text),
                ])
            }
        }
        func paragraph(_ title: String, _ texts: [String]) {
            lines.append([])
            lines.append([Span(title, .title, .bold)])
            for text in texts {
                for line in Format.wrap(text, max(10, width - 2)) { lines.append([Span("  " + line, .text)]) }
            }
        }
        for group in KeyBinding.Group.allCases where group != .simulation || state.simulation != nil {
            if !lines.isEmpty { lines.append([]) }
            lines.append([Span(group.rawValue, .title, .bold)])
            for binding in KeyMap.main where binding.group == group {
                var help = binding.help
                if binding.intent == .nudgeUp || binding.intent == .nudgeDown {
                    help += " (now " + PercentText.format(state.step) + ")"
                }
                if binding.intent == .nextTheme { help += " (now " + state.themeName + ")" }
                entry(binding.keys.map(\.name).joined(separator: " "), help)
            }
        }
        lines.append([])
        lines.append([Span("In dialogs, prompts and lists", .title, .bold)])
        for (keys, help) in KeyMap.dialogKeys { entry(keys, help) }
        paragraph(
            "Every change",
            [
                "goes through one confirm dialog (old → new, devices newly eligible, attestation load against "
                    + "Apple's guidance, guardrail verdict); increases ask for a reason; policy may ask for a step-up "
                    + "code; the publish is a compare-and-swap, and a conflict offers to re-apply on top."
            ])
        paragraph(
            "Reading the screen",
            [
                "Verdicts: " + VerdictLevel.allCases.map(\.labelText).joined(separator: " · ")
                    + ". State: ▶ ROLLING · ‖ HELD · ■ KILLED.",
                "A rise to HOLD or HALT flashes the header"
                    + (state.configuration.bell ? " and rings the bell once." : "."),
                "▲ ▼ show direction; ✓ ✗ outcomes; ! STALE marks data older than "
                    + Format.duration(state.configuration.staleAfter) + "; ! NO DATA, none yet.",
            ])
        return lines
    }
}
