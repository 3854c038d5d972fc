import Telemetry

/// The help text, generated from the key table so that it can never disagree with the keys.
public enum HelpScreen {
    public static func lines(for state: ConsoleState) -> [Line] {
        var lines: [Line] = []
        // As wide as the widest key name, so no key is ever cut.
        let keyWidth =
            (KeyMap.main.map { CharacterWidth.of($0.keys.map(\.name).joined(separator: " ")) }
            + KeyMap.dialogKeys.map { CharacterWidth.of($0.keys) }).max()! + 2
        for group in KeyBinding.Group.allCases where group != .simulation || state.simulation != nil {
            if !lines.isEmpty { lines.append([]) }
            lines.append([Span(group.rawValue, .title, .bold)])
            for binding in KeyMap.main where binding.group == group {
                var help = binding.help
                if binding.intent == .nudgeUp || binding.intent == .nudgeDown {
                    help += " (now " + PercentText.format(state.step) + ")"
                }
                if binding.intent == .nextTheme { help += " (now " + state.themeName + ")" }
                lines.append([
                    Span("  " + Format.pad(binding.keys.map(\.name).joined(separator: " "), keyWidth), .key),
                    Span(help, .text),
                ])
            }
        }
        lines.append([])
        lines.append([Span("In dialogs, prompts and lists", .title, .bold)])
        for (keys, help) in KeyMap.dialogKeys {
            lines.append([Span("  " + Format.pad(keys, keyWidth), .key), Span(help, .text)])
        }
        lines.append([])
        lines.append([Span("Every change", .title, .bold)])
        for text in [
            "goes through one confirm dialog (old → new, devices newly eligible, attestation load against",
            "Apple's guidance, guardrail verdict); increases ask for a reason; policy may ask for a step-up",
            "code; the publish is a compare-and-swap, and a conflict offers to re-apply on top.",
        ] {
            lines.append([Span("  " + text, .text)])
        }
        lines.append([])
        lines.append([Span("Reading the screen", .title, .bold)])
        for text in [
            "Verdicts: " + VerdictLevel.allCases.map(\.labelText).joined(separator: " · ")
                + ". State: ▶ ROLLING · ‖ HELD · ■ KILLED.",
            "A rise to HOLD or HALT flashes the header"
                + (state.configuration.bell ? " and rings the bell once." : "."),
            "▲ ▼ show direction; ✓ ✗ outcomes; ! STALE marks data older than "
                + Format.duration(state.configuration.staleAfter) + "; ! NO DATA, none yet.",
        ] {
            lines.append([Span("  " + text, .text)])
        }
        return lines
    }
}
