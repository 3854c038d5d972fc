/// A key press as the console understands it, independent of how the terminal encoded it.
public enum Key: Hashable, Sendable {
    /// A printable character, including space.
    case character(Character)
    case enter
    case escape
    case tab
    case backTab
    case backspace
    case delete
    case up
    case down
    case left
    case right
    case home
    case end
    case pageUp
    case pageDown
    /// Control plus a letter, e.g. `.control("l")` for Ctrl-L.
    case control(Character)
    case function(Int)

    /// The name help and hints print: `+`, `→`, `Esc`, `Ctrl-L`, `Space`.
    public var name: String {
        switch self {
        case .character(" "): "Space"
        case .character(let c): String(c)
        case .enter: "Enter"
        case .escape: "Esc"
        case .tab: "Tab"
        case .backTab: "Shift-Tab"
        case .backspace: "Backspace"
        case .delete: "Delete"
        case .up: "↑"
        case .down: "↓"
        case .left: "←"
        case .right: "→"
        case .home: "Home"
        case .end: "End"
        case .pageUp: "PgUp"
        case .pageDown: "PgDn"
        case .control(let c): "Ctrl-" + String(c).uppercased()
        case .function(let n): "F\(n)"
        }
    }
}

/// What a key on the main screen asks for.
public enum Intent: Hashable, Sendable, CaseIterable {
    case nudgeUp
    case nudgeDown
    case finerStep
    case coarserStep
    case typeExact
    case kill
    case resume
    case rollbackLast
    /// Pause the store's ramp plan, or resume it when paused.
    case togglePlan
    /// Publish the plan's next step now (a change like any other: confirm, reason, step-up).
    case skipPlanStep
    case showHistory
    case showAudit
    case showVerdict
    /// Move the focus to the log's published changes (↑↓ select, Enter opens the version), or back.
    case focusLog
    /// `/`: filter the main screen's log by text.
    case filterLog
    case nextTheme
    case toggleFreeze
    case showHelp
    /// `:`: type a command by name (the palette); each runs the intent of its key.
    case openPalette
    case redraw
    case quit
    case cancel
    /// `rollout demo` only: pause or resume the simulation, one rung faster or slower on its speed ladder.
    case pauseSimulation
    case fasterSimulation
    case slowerSimulation
    /// Show the charts instead of the panels, or the panels again.
    case toggleCharts
    /// The charts' next zoom: 15 min, 1 h, 6 h, 24 h, then 15 min again.
    case cycleZoom
}

/// One line of the key table: the keys, what they do, and how help and the hint bar describe them.
public struct KeyBinding: Hashable, Sendable {
    /// A hint-bar entry: the keys as printed and a one-word label; lower `priority` survives narrow screens.
    public struct Hint: Hashable, Sendable {
        public var keys: String
        public var label: String
        public var priority: Int
    }

    public enum Group: String, Hashable, Sendable, CaseIterable {
        case change = "Change the rollout"
        case look = "Look around"
        case screen = "The screen"
        /// Shown in help and hints only while a simulation drives the screen.
        case simulation = "The demo's simulation"
    }

    public var keys: [Key]
    public var intent: Intent
    public var group: Group
    public var help: String
    public var hint: Hint?

    init(_ keys: [Key], _ intent: Intent, _ group: Group, _ help: String, hint: (String, String, Int)? = nil) {
        self.keys = keys
        self.intent = intent
        self.group = group
        self.help = help
        self.hint = hint.map { Hint(keys: $0.0, label: $0.1, priority: $0.2) }
    }
}

/// The key table of the main screen (htop, k9s and lazygit conventions); help and hints are generated from it.
public enum KeyMap {
    public static let main: [KeyBinding] = [
        KeyBinding(
            [.character("+"), .right], .nudgeUp, .change, "raise the percentage by the current step",
            hint: ("+/-", "nudge", 1)),
        KeyBinding([.character("-"), .left], .nudgeDown, .change, "lower the percentage by the current step"),
        KeyBinding([.character("]")], .coarserStep, .change, "larger step", hint: ("[ ]", "step", 6)),
        KeyBinding([.character("[")], .finerStep, .change, "smaller step"),
        KeyBinding([.character("=")], .typeExact, .change, "type an exact percentage", hint: ("=", "set", 4)),
        KeyBinding(
            [.character("K")], .kill, .change, "kill switch: the flag off for everyone",
            hint: ("K", "kill", 2)),
        KeyBinding(
            [.character("r")], .resume, .change, "resume after a kill, at the percentage before it",
            hint: ("r", "resume", 5)),
        KeyBinding([.character("u")], .rollbackLast, .change, "roll back the last change", hint: ("u", "undo", 3)),
        KeyBinding([.character("x")], .togglePlan, .change, "ramp plan: pause it, or resume it when paused"),
        KeyBinding(
            [.character("X")], .skipPlanStep, .change,
            "ramp plan: skip to its next step (confirm, reason, step-up)"),
        KeyBinding(
            [.character("h")], .showHistory, .look, "history of published changes",
            hint: ("h", "history", 7)),
        KeyBinding(
            [.character("a")], .showAudit, .look, "audit log, with its hash chain checked",
            hint: ("a", "audit", 8)),
        KeyBinding(
            [.character("v"), .enter], .showVerdict, .look,
            "why: the verdict's findings, each with its test, statistic, threshold and samples",
            hint: ("v", "why", 2)),
        KeyBinding(
            [.tab, .backTab], .focusLog, .look,
            "focus the log: ↑↓ select a published change, Enter opens its version; Tab or Esc leaves",
            hint: ("Tab", "log", 8)),
        KeyBinding(
            [.character("/")], .filterLog, .look, "filter the log by text: Enter applies, Esc clears"),
        KeyBinding(
            [.character("f")], .toggleFreeze, .look, "freeze the display (data keeps arriving)",
            hint: ("f", "freeze", 9)),
        KeyBinding(
            [.character("c")], .toggleCharts, .look,
            "charts: success ratio and crash rate per arm, the percentage with its changes, propagation; c again for the panels",
            hint: ("c", "charts", 6)),
        KeyBinding(
            [.character("z")], .cycleZoom, .look, "the charts' zoom: 15 min, 1 h, 6 h, 24 h (each chart's title says which)"),
        KeyBinding([.character("t")], .nextTheme, .screen, "next theme", hint: ("t", "theme", 10)),
        KeyBinding([.control("l")], .redraw, .screen, "redraw the whole screen"),
        KeyBinding([.character("?")], .showHelp, .screen, "this help", hint: ("?", "help", 0)),
        KeyBinding(
            [.character(":")], .openPalette, .screen,
            "command palette: set 25, nudge +, kill, rollback to 12, plan pause, theme, goto version 12, source"),
        KeyBinding([.escape], .cancel, .screen, "cancel: close a dialog, clear a message"),
        KeyBinding([.character("q")], .quit, .screen, "quit", hint: ("q", "quit", 0)),
        KeyBinding(
            [.character("p")], .pauseSimulation, .simulation,
            "pause or resume the simulation (its time stops; the data stays current)", hint: ("p", "pause", 5)),
        KeyBinding(
            [.character(">")], .fasterSimulation, .simulation,
            "faster: next speed of 1x 10x 60x 600x 3600x max", hint: ("< >", "speed", 7)),
        KeyBinding([.character("<")], .slowerSimulation, .simulation, "slower: previous speed"),
    ]

    /// The intent bound to `key` on the main screen.
    public static func intent(for key: Key) -> Intent? {
        main.first { $0.keys.contains(key) }?.intent
    }

    /// Keys inside dialogs, prompts and lists, for the help screen.
    public static let dialogKeys: [(keys: String, help: String)] = [
        ("Tab ← →", "move between buttons (Cancel has the focus when a dialog opens)"),
        ("Enter", "act on the focused button; submit a prompt"),
        ("y n", "in a confirm dialog: yes (publish, re-apply) or no (cancel)"),
        ("Esc", "cancel at once, from any dialog or prompt"),
        ("↑ ↓ j k", "scroll history, audit and help by a line"),
        ("PgUp PgDn Space", "scroll by a page"),
        ("Home End g G", "first and last entry"),
        ("Enter", "in history and audit: open the version (its diff, who, when, why; r rolls back to it)"),
        ("/", "in the log, history and audit: filter the rows by text (Enter applies, Esc clears)"),
        ("wheel", "scroll help, why, a version, history and audit; in the log, move the selection"),
        ("↑ ↓ j k Enter", "in the focused log (Tab): select a published change, open its version"),
        ("click", "a dialog button; a list row (again to open it); a change in the log opens its version"),
    ]
}
