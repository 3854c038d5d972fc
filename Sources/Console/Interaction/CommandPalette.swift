import RemoteConfig

/// The `:` command palette (k9s, lazygit): a command typed by name, fuzzily, with its arguments.
///
/// A command never has a path of its own: each one runs the intent its key runs (`kill` is `K`, `nudge +` is `+`)
/// or, where it takes an argument, the same change request the key's dialog would make (`set 25` is `=` `25`,
/// `rollback to 12` is `r` in version 12's drill-down). The confirm dialog, the reason, step-up, the guardrails and
/// a lost store's refusal therefore apply exactly as for the keys. `approve REQUEST` has no key: it is `rollout
/// approve REQUEST` (the executor's `StepUpMethods.approveRequest`, through the same write path).
public struct PaletteCommand: Hashable, Sendable {
    public enum Action: Hashable, Sendable, CaseIterable {
        case set
        case nudge
        case kill
        case resume
        case rollback
        case planPause
        case planResume
        case planSkip
        case approve
        case theme
        case gotoVersion
        case source
        case history
        case audit
        case why
        case help
    }

    /// The name as typed in full (`rollback to`); matched without its spaces.
    public let name: String
    /// The arguments, as help shows them (`PERCENT`, `[VERSION]`).
    public let arguments: String
    public let help: String
    /// The key that does the same, shown beside it so that the palette teaches the keys.
    public let key: String
    public let action: Action

    /// Every command, in the order an empty palette lists them.
    public static let all: [PaletteCommand] = [
        PaletteCommand(name: "set", arguments: "PERCENT", help: "set an exact percentage", key: "=", action: .set),
        PaletteCommand(
            name: "nudge", arguments: "+|-|±POINTS", help: "by the step (+ -) or by the points given", key: "+ -",
            action: .nudge),
        PaletteCommand(
            name: "kill", arguments: "", help: "kill switch: the flag off for everyone", key: "K", action: .kill),
        PaletteCommand(name: "resume", arguments: "", help: "resume after a kill", key: "r", action: .resume),
        PaletteCommand(
            name: "rollback to", arguments: "[VERSION]", help: "roll back to a version (none: the last change)",
            key: "u", action: .rollback),
        PaletteCommand(name: "plan pause", arguments: "", help: "pause the ramp plan", key: "x", action: .planPause),
        PaletteCommand(
            name: "plan resume", arguments: "", help: "resume the paused ramp plan", key: "x", action: .planResume),
        PaletteCommand(
            name: "plan skip", arguments: "", help: "publish the plan's next step now", key: "X", action: .planSkip),
        PaletteCommand(
            name: "approve", arguments: "REQUEST", help: "approve another operator's two-person request with your key",
            key: "", action: .approve),
        PaletteCommand(
            name: "theme", arguments: "[NAME]", help: "switch to a theme (none: the next)", key: "t", action: .theme),
        PaletteCommand(
            name: "goto version", arguments: "VERSION", help: "open a version: its diff, who, when, why", key: "Tab",
            action: .gotoVersion),
        PaletteCommand(
            name: "source", arguments: "", help: "where the data comes from and how fresh it is", key: "",
            action: .source),
        PaletteCommand(name: "history", arguments: "", help: "published changes", key: "h", action: .history),
        PaletteCommand(name: "audit", arguments: "", help: "the audit log", key: "a", action: .audit),
        PaletteCommand(name: "why", arguments: "", help: "the verdict's findings", key: "v", action: .why),
        PaletteCommand(name: "help", arguments: "", help: "the key help", key: "?", action: .help),
    ]

    /// A command the typed text names, with the arguments after its name.
    public struct Match: Hashable, Sendable {
        public let command: PaletteCommand
        public let arguments: [String]
        /// Lower is better: 0 a prefix of the name, then by how scattered the letters are.
        let score: Int
        /// How many typed words named it: between equal scores, the command that took more of them wins
        /// (`plan res` is `plan resume`, not `plan pause` with an argument `res`).
        let nameWords: Int
    }

    /// The commands `text` may name, best first (every command, in table order, for an empty text).
    ///
    /// The leading words that are not numbers are the name: their letters must appear in the command's name in
    /// order (`rb` finds `rollback to`, `gv 12` finds `goto version`); the rest are the arguments. A command of two
    /// words may be named by one word or two (`plan s`, `plans`).
    public static func matches(_ text: String) -> [Match] {
        let words = text.split(whereSeparator: { $0 == " " }).map(String.init)
        guard !words.isEmpty else { return all.map { Match(command: $0, arguments: [], score: 0, nameWords: 0) } }
        let nameWords = words.prefix { !isArgumentLike($0) }.count
        var found: [Match] = []
        for command in all {
            let target = Array(command.name.lowercased().filter { $0 != " " })
            // As many typed words as name it.
            for j in stride(from: min(nameWords, 2), through: 1, by: -1) {
                let query = Array(words.prefix(j).joined().lowercased())
                guard let score = fuzzyScore(query, in: target) else { continue }
                found.append(Match(command: command, arguments: Array(words.dropFirst(j)), score: score, nameWords: j))
                break
            }
        }
        // Stable: equal ranks keep the table's order.
        return found.enumerated().sorted {
            ($0.element.score, -$0.element.nameWords, $0.offset) < ($1.element.score, -$1.element.nameWords, $1.offset)
        }.map(\.element)
    }

    /// A number, a signed amount or a bare sign: an argument, never part of a name.
    static func isArgumentLike(_ word: String) -> Bool {
        guard let first = word.first else { return false }
        return first.isNumber || first == "+" || first == "-" || first == "."
            || first == "v" && word.dropFirst().allSatisfy(\.isNumber) && word.count > 1
    }

    /// nil when `query`'s letters are not all in `target` in order; else 0 for a prefix, more the more scattered.
    static func fuzzyScore(_ query: [Character], in target: [Character]) -> Int? {
        guard !query.isEmpty else { return nil }
        if target.starts(with: query) { return 0 }
        var i = 0
        var gaps = 0
        var last = -1
        for (j, c) in target.enumerated() where i < query.count && c == query[i] {
            if last >= 0 && j != last + 1 { gaps += 1 }
            if last < 0 && j > 0 { gaps += 1 }
            last = j
            i += 1
        }
        return i == query.count ? 1 + gaps : nil
    }
}

/// The open palette: what is typed, and which of the matching commands Enter runs.
public struct PaletteState: Hashable, Sendable {
    public internal(set) var field: TextField
    /// Index into `matches`.
    public internal(set) var selected: Int
    public internal(set) var error: String?

    public init(field: TextField = TextField(maxLength: 80), selected: Int = 0, error: String? = nil) {
        self.field = field
        self.selected = selected
        self.error = error
    }

    public var matches: [PaletteCommand.Match] { PaletteCommand.matches(field.text) }
}
