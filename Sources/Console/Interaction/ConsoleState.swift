import RemoteConfig
import Telemetry
import Timekeeping

/// The console's own state: the model on screen, the step, the theme, the open dialog and the last message.
///
/// Changed only by `handle(_:)`, a pure reducer: event in, state changed, effects out.
public struct ConsoleState: Hashable, Sendable {
    /// Settings fixed for a session.
    public struct Configuration: Hashable, Sendable {
        /// The nudge steps `[` and `]` move between, smallest first.
        public var steps: [MicroPercent]
        /// Index into `steps` at start.
        public var initialStep: Int
        /// Data older than this is marked stale.
        public var staleAfter: Instant.Duration
        /// Offset from UTC for the times shown, in seconds.
        public var utcOffsetSeconds: Int
        /// The names `t` cycles through.
        public var themeNames: [String]
        public var initialTheme: Int
        /// Ring the terminal bell once when the verdict rises to HOLD or HALT (`--no-bell` turns it off).
        public var bell: Bool
        /// How long the header flashes after the verdict rises to HOLD or HALT.
        public var flashFor: Instant.Duration
        /// How long (wall time) a lower verdict must last before the alert level falls to it: a level rises at once
        /// and falls only after this, so a verdict that wavers around a threshold neither floods the log nor rings
        /// again at each return.
        public var holdDown: Instant.Duration

        public init(
            steps: [MicroPercent] = [100_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000].map { MicroPercent($0) },
            initialStep: Int = 2,
            staleAfter: Instant.Duration = .milliseconds(5_000), utcOffsetSeconds: Int = 0,
            themeNames: [String] = ["default"],
            initialTheme: Int = 0, bell: Bool = true, flashFor: Instant.Duration = .milliseconds(6_000),
            holdDown: Instant.Duration = .seconds(Int64(30))
        ) {
            self.holdDown = holdDown
            self.bell = bell
            self.flashFor = flashFor
            self.steps = steps.isEmpty ? [PercentText.point] : steps
            self.initialStep = min(max(0, initialStep), self.steps.count - 1)
            self.staleAfter = staleAfter
            self.utcOffsetSeconds = utcOffsetSeconds
            self.themeNames = themeNames.isEmpty ? ["default"] : themeNames
            self.initialTheme = min(max(0, initialTheme), self.themeNames.count - 1)
        }
    }

    /// A one-line message under the panels.
    public struct Notice: Hashable, Sendable {
        public enum Kind: Hashable, Sendable {
            case info
            case success
            case warning
            case error
        }

        public var text: String
        public var kind: Kind
        /// When it appeared (the first tick after it was raised); an information expires some seconds later.
        public var shownAt: Instant?

        public init(_ text: String, _ kind: Kind, shownAt: Instant? = nil) {
            self.text = text
            self.kind = kind
            self.shownAt = shownAt
        }

        /// How long an information stays; nil for a result (success, warning, error), which stays until the
        /// operator's next key and is kept in the log.
        var lifetime: Instant.Duration? {
            switch kind {
            case .info: .milliseconds(6_000)
            case .success, .warning, .error: nil
            }
        }
    }

    public let configuration: Configuration
    /// The model on screen (nil until the first snapshot).
    public internal(set) var model: ConsoleModel?
    /// The newest model received while the display is frozen.
    public internal(set) var heldModel: ConsoleModel?
    public internal(set) var frozen: Bool
    /// The latest tick.
    public internal(set) var now: Instant?
    /// Why the last fetch failed, until a snapshot arrives again.
    public internal(set) var sourceProblem: String?
    public internal(set) var stepIndex: Int
    public internal(set) var themeIndex: Int
    public internal(set) var overlay: Overlay?
    public internal(set) var notice: Notice?
    /// The terminal size, for paging in lists.
    public internal(set) var screenSize: Size
    /// Verdict changes and the results of the operator's actions as they were seen, oldest first, each stamped once
    /// when it arrived (its time never moves).
    public internal(set) var verdictLog: [NotableEvent]
    /// The level of the newest snapshot.
    public internal(set) var lastVerdict: VerdictLevel?
    /// The level the log, the bell and the flash follow: it rises with the verdict at once and falls only after
    /// `holdDown` (nil before the first snapshot).
    public internal(set) var alertLevel: VerdictLevel?
    /// The reasons' topics logged at the alert level since it was entered (each new one is logged once).
    var alertTopics: Set<Finding.Topic> = []
    /// When (wall time) the verdict went below the alert level, while it stays below.
    var fallingSince: Instant?
    /// When the verdict last rose to HOLD or HALT, on wall time (`wallNow`): the header flashes for `flashFor` after
    /// it, also in a demo whose ticks run on a simulation's faster time.
    public internal(set) var alertAt: Instant?
    /// The published change selected in the main screen's log (Tab moves the focus there): its version, or nil
    /// while the log has no focus. A version, not a row, so that the selection stays on its change when new rows
    /// arrive above it.
    public internal(set) var logSelection: Int?
    /// The `/` filter of the history and audit views (nil: every row shown); kept while a drill-down is open.
    public internal(set) var listFilter: ListFilter?
    /// The `/` filter of the main screen's log (nil: every line shown); Esc clears it.
    public internal(set) var logFilter: ListFilter?
    /// The reason typed for the change in the open dialog, kept when the dialog is re-judged on a moved store or
    /// re-applied after a conflict, so that the operator does not type it again.
    var keptReason: String?
    /// The re-preview asked for when the store moved under an open confirm dialog, and the version and verdict it
    /// was asked for (asked once per move).
    var revision: Revision?
    /// The version and verdict the last re-preview was asked for.
    var revisedFor: String?

    struct Revision: Hashable, Sendable {
        var request: ChangeRequest
        var key: String
        /// The changes published after the dialog's base, as the snapshot that asked for the revision listed them.
        var intervening: [ChangeRecord] = []
    }
    /// The versions `u` has rolled back to in this run of presses (newest first), so that repeated presses walk
    /// further back instead of toggling between the last two.
    var undoTrail: [Int]
    /// The version this console published last; a snapshot whose head is newer was published by someone else, and
    /// the undo trail, which walks back over this console's own rollbacks, no longer describes the store.
    var lastPublished: Int? = nil
    var nextRequestID: Int
    /// Why the console is read-only for good: the data source found the store it opened removed or replaced
    /// (`HeaderInfo.storeLost`). Latched: every write key says so and writes nothing, and the banner stays.
    public internal(set) var storeLost: String? = nil
    /// The simulation driving the screen (`rollout demo`), nil when none does: its speed, pause and wall time.
    public internal(set) var simulation: SimulationStatus? = nil
    /// The charts replace the panels (`c` toggles).
    public internal(set) var chartsShown = false
    /// The charts' window (`z` cycles 15 min, 1 h, 6 h, 24 h).
    public internal(set) var chartZoom: ChartZoom = .hour

    public init(configuration: Configuration = Configuration(), screenSize: Size = Size(width: 80, height: 24)) {
        self.configuration = configuration
        self.model = nil
        self.heldModel = nil
        self.frozen = false
        self.now = nil
        self.sourceProblem = nil
        self.stepIndex = configuration.initialStep
        self.themeIndex = configuration.initialTheme
        self.overlay = nil
        self.notice = nil
        self.screenSize = screenSize
        self.verdictLog = []
        self.lastVerdict = nil
        self.alertAt = nil
        self.undoTrail = []
        self.listFilter = nil
        self.logSelection = nil
        self.keptReason = nil
        self.revision = nil
        self.revisedFor = nil
        self.nextRequestID = 1
    }

    /// The current nudge step.
    public var step: MicroPercent { configuration.steps[stepIndex] }

    public var themeName: String { configuration.themeNames[themeIndex] }

    /// Wall time for what is timed for people (messages, the alert's flash): the simulation's wall clock while one
    /// drives the screen (its ticks then run on simulated time), else the latest tick.
    public var wallNow: Instant? { wall ?? simulation?.wall ?? now }
    /// The ticks run on a simulation's time, not the wall's (a demo, or a store a simulation writes to).
    public var ticksOffWall: Bool {
        if simulation != nil { return true }
        guard let wall, let now else { return false }
        return abs((now - wall).microseconds) > 60_000_000
    }
    /// The latest wall-clock instant the adapter posted (nil when it posts none: ticks are wall time then).
    public internal(set) var wall: Instant?

    /// The header is flashing: the verdict rose to HOLD or HALT moments ago (wall time). Alternates each whole second.
    public var isFlashing: Bool {
        guard let alertAt, let now = wallNow else { return false }
        let since = now - alertAt
        guard since.microseconds >= 0, since < configuration.flashFor else { return false }
        return (since.microseconds / 1_000_000) % 2 == 0
    }

    /// How old the data on screen is, when both the data time and a tick are known.
    public var dataAge: Instant.Duration? {
        guard let now, let asOf = model?.header.dataAsOf else { return nil }
        return now - asOf
    }

    /// The data on screen cannot be trusted as current: too old, the source failed or said so, or no data yet.
    public var isStale: Bool {
        guard let model else { return true }
        if sourceProblem != nil || model.header.staleReason != nil { return true }
        guard let age = dataAge else { return model.header.dataAsOf == nil }
        return (model.header.staleAfter ?? configuration.staleAfter) < age
    }
}

/// Which button of a two-button dialog has the focus.
public enum DialogFocus: Hashable, Sendable {
    case cancel
    case act

    var other: DialogFocus { self == .cancel ? .act : .cancel }
}

/// The selected row and the first visible row of a scrollable list.
public struct ListCursor: Hashable, Sendable {
    public internal(set) var selected: Int = 0
    public internal(set) var offset: Int = 0

    public init(selected: Int = 0, offset: Int = 0) {
        self.selected = selected
        self.offset = offset
    }

    /// Moves the selection by `delta` rows within `count` rows, scrolling so it stays in a window of `page` rows.
    mutating func move(by delta: Int, count: Int, page: Int) {
        guard count > 0 else {
            selected = 0
            offset = 0
            return
        }
        selected = min(max(0, selected + delta), count - 1)
        let p = max(1, page)
        if selected < offset { offset = selected }
        if selected >= offset + p { offset = selected - p + 1 }
        offset = min(max(0, offset), max(0, count - p))
    }
}

/// The dialog, prompt or full-screen view on top of the main screen; at most one at a time.
public enum Overlay: Hashable, Sendable {
    /// The key help; `scroll` is the first line shown.
    case help(scroll: Int)
    /// `=`: type an exact percentage.
    case valuePrompt(field: TextField, error: String?)
    /// Waiting for the core's preview of a change.
    case preparing(ChangeRequest)
    /// The confirm dialog; the preview is frozen while it is open.
    case confirm(ChangePreview, focus: DialogFocus)
    /// Why an increase is made.
    case reason(ChangePreview, field: TextField, error: String?)
    /// The step-up (TOTP) code, masked.
    case stepUp(ChangePreview, reason: String, field: TextField, error: String?)
    /// Which second factor approves the change, when the policy accepts more than one the operator has enrolled;
    /// `selected` indexes `preview.stepUpOptions`.
    case stepUpMethod(ChangePreview, reason: String, selected: Int)
    /// "Touch your security key": the key is asked to sign the change (the publish follows in the same effect);
    /// `since` (wall time) and `seconds` (the key's timeout) give the countdown. Esc abandons it.
    case securityKey(ConfirmedChange, since: Instant?, seconds: Int)
    /// `:approve REQUEST`: the operator's key is asked to approve another operator's two-person request `request`
    /// (effect `requestID`; the publish follows in the same effect); `since` and `seconds` give the countdown. Esc
    /// abandons it.
    case approvingRequest(requestID: Int, request: String, since: Instant?, seconds: Int)
    /// The security key asked for its PIN: typed masked, then the key is asked again.
    case securityKeyPIN(ChangePreview, reason: String, field: TextField, error: String?)
    /// A code sent to the operator's phone: the provider's status (nil while the verification starts), the code
    /// typed (masked), and whether it is being checked (`checking`: the provider and the write path have it).
    case phone(ConfirmedChange, status: String?, field: TextField, error: String?, checking: Bool)
    /// The publish is in flight.
    case publishing(ConfirmedChange)
    /// The store was lost while a change was being prepared or confirmed: the dialog is replaced by this notice
    /// (`ConsoleState.storeLost` says how), so a key meant for the dialog (Enter to publish) is taken by the notice
    /// and does not land on the main screen. Enter or Esc closes it.
    case storeLost
    /// Someone published first; offer to re-apply on top.
    case conflict(ConflictDialog, focus: DialogFocus)
    /// Published changes; `entries` is nil while loading.
    case history(entries: [ChangeRecord]?, cursor: ListCursor)
    /// The audit log; `log` is nil while loading.
    case audit(log: AuditLog?, cursor: ListCursor)
    /// Why: every finding of the assessment with its test, statistic, threshold and samples; `scroll` is the
    /// first line shown.
    case verdict(scroll: Int)
    /// `x` on a plan paused for a one-time code: the code, masked.
    case planCode(field: TextField, error: String?)
    /// `:`: the command palette.
    case palette(PaletteState)
    /// The drill-down of one version (`detail` is nil while loading), opened from the list `back` returns to.
    indirect case version(number: Int, detail: VersionDetail?, scroll: Int, back: Overlay?)
}

/// The `/` filter of a list view: rows whose text contains `text` (case-insensitive).
public struct ListFilter: Hashable, Sendable {
    public internal(set) var text: String
    /// The field while the operator types (nil once Enter has applied it).
    public internal(set) var field: TextField?

    public init(text: String = "", field: TextField? = nil) {
        self.text = text
        self.field = field
    }

    /// The indices of `rows` that match.
    public func matches(_ rows: [Line]) -> [Int] {
        let needle = text.lowercased()
        guard !needle.isEmpty else { return Array(rows.indices) }
        return rows.indices.filter { i in rows[i].map(\.text).joined(separator: " ").lowercased().contains(needle) }
    }
}
