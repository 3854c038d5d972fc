/// The themes shipped in `themes/`, compiled in so the console works from any directory.
///
/// `themes/*.theme` are the files people read and copy; these strings must stay identical to them (ThemeTests
/// compares them byte for byte).
extension Theme {
    /// The file names of the shipped themes, in the order `t` cycles through them.
    public static let builtInNames = ["default", "light", "high-contrast", "colorblind"]

    /// The text of a shipped theme file, by name.
    public static func builtInSource(_ name: String) -> String? {
        switch name {
        case "default": defaultSource
        case "light": lightSource
        case "high-contrast": highContrastSource
        case "colorblind": colorblindSource
        default: nil
        }
    }

    /// A shipped theme, parsed (they are checked by the tests, so parsing cannot fail).
    public static func builtIn(_ name: String) -> Theme? {
        guard let source = builtInSource(name) else { return nil }
        let base = name == "default" ? Theme(name: "base", uniform: ThemeStyle()) : Theme.default
        return try? Theme.parse(source, name: name, file: "themes/\(name).theme", base: base)
    }

    /// The default (dark) theme: every other theme falls back to it for the roles it leaves out.
    public static let `default`: Theme = {
        guard
            let t = try? Theme.parse(
                defaultSource, name: "default", file: "themes/default.theme",
                base: Theme(name: "base", uniform: ThemeStyle()))
        else { preconditionFailure("the built-in default theme does not parse") }
        return t
    }()

    static let defaultSource = """
        # rollout theme "default": for dark terminals; the screen background stays the terminal's own.
        #
        # One line per semantic role:   ROLE = FOREGROUND [on BACKGROUND] [bold] [underline] [reverse] [dim]
        # and what stands in for colour: ROLE.mono = ATTRIBUTES  (NO_COLOR, --no-color, monochrome terminals)
        # Colours: #rrggbb, a palette index 0-255, an ANSI name (red, bright-blue, ...) or default.
        # Roles a theme leaves out keep the look they have here. Status is always spelt out in words and
        # symbols (OK WATCH HOLD HALT, ✓ ✗ ▲ ▼), so no theme can make it unreadable.

        text            = #d0d0d0
        text.mono       = plain
        muted           = #8a8a8a
        muted.mono      = plain
        title           = #5fafff bold
        title.mono      = bold
        border          = #585858
        border.mono     = plain
        header          = #ffffff on #005f87 bold
        header.mono     = reverse bold
        accent          = #ffd75f bold
        accent.mono     = bold
        ok              = #87d787
        ok.mono         = plain
        warn            = #ffaf00 bold
        warn.mono       = bold
        bad             = #ff5f5f bold
        bad.mono        = bold underline
        alert           = #ffffff on #af0000 bold
        alert.mono      = reverse bold
        selection       = #000000 on #87afd7
        selection.mono  = reverse
        key             = #5fd7ff bold
        key.mono        = bold
        chart           = #5fafaf
        chart.mono      = plain
        dialog          = #afd7ff bold
        dialog.mono     = bold
        input           = #ffffff on #444444 underline
        input.mono      = underline

        """

    static let lightSource = """
        # rollout theme "light": for light terminals; paints its own white background.

        text            = #262626 on #fafafa
        muted           = #6c6c6c
        title           = #005faf bold
        border          = #a8a8a8
        header          = #ffffff on #005f87 bold
        accent          = #875f00 bold
        ok              = #005f00
        warn            = #af5f00 bold
        bad             = #af0000 bold
        alert           = #ffffff on #af0000 bold
        selection       = #000000 on #afd7ff
        key             = #005f87 bold
        chart           = #008787
        dialog          = #005faf bold
        input           = #000000 on #e4e4e4 underline

        """

    static let highContrastSource = """
        # rollout theme "high-contrast": pure black and white with a few saturated colours, everything bold.

        text            = #ffffff on #000000
        muted           = #d0d0d0
        title           = #ffff00 bold underline
        border          = #ffffff
        header          = #000000 on #ffffff bold
        accent          = #00ffff bold
        ok              = #00ff00 bold
        warn            = #ffff00 bold
        bad             = #ff0000 bold underline
        alert           = #000000 on #ffff00 bold
        selection       = #000000 on #00ffff bold
        key             = #ffff00 bold
        chart           = #00ffff
        dialog          = #ffffff bold
        input           = #000000 on #ffffff underline

        """

    static let colorblindSource = """
        # rollout theme "colorblind": the Okabe-Ito palette, distinguishable with red-green colour blindness.
        # Good is blue, warning is orange, bad is vermillion; never red against green.

        text            = #d0d0d0
        muted           = #8a8a8a
        title           = #56b4e9 bold
        border          = #585858
        header          = #ffffff on #0072b2 bold
        accent          = #f0e442 bold
        ok              = #56b4e9
        warn            = #e69f00 bold
        bad             = #d55e00 bold underline
        alert           = #000000 on #e69f00 bold
        selection       = #000000 on #56b4e9
        key             = #f0e442 bold
        chart           = #009e73
        dialog          = #56b4e9 bold
        input           = #ffffff on #444444 underline

        """
}
