import Console
import Glibc
import Dispatch
import Platform
import Timekeeping

/// How the console session ended.
public enum ConsoleExit: Hashable, Sendable {
    /// The operator pressed `q`.
    case quit
    /// SIGINT, SIGTERM or SIGHUP; the terminal was restored. Exit with 128 + the signal number. A terminal that
    /// went away without a SIGHUP reaching the console (a parent that traps HUP) ends it as SIGHUP.
    case signal(Int32)
}

/// Settings of one console session.
public struct ConsoleOptions: Sendable {
    /// The themes `t` cycles through; the first is shown at start (`ThemeCatalog.cycle(startingWith:)`).
    public var themes: [Theme]
    /// `--no-color`.
    public var noColor: Bool
    /// The environment (for `NO_COLOR`).
    public var environment: [String: String]
    /// How often the data source is asked for a snapshot.
    public var refreshInterval: Instant.Duration
    /// The clock for ticks (data age, staleness, message expiry). Read on the input thread, so it must never
    /// wait on the store (`StoreSimulationClock(path:wall:)` reads on a connection of its own that never waits).
    public var clock: any Clock
    /// Steps, stale limit, time zone offset; the theme names are filled from `themes`.
    public var state: ConsoleState.Configuration
    public var terminal: TerminalScreen.Options
    /// The simulation driving the screen (`rollout demo`): `p`, `>` and `<` act on it, the header shows it.
    public var simulation: (any ConsoleSimulationControl)? = nil
    /// Wall time for what is timed for people (the alert's flash, the hold-down, the log's results), also when
    /// ticks run on a simulation's time (a console on a store a simulation writes to).
    public var wallClock: any Clock = SystemClock()

    public init(
        themes: [Theme] = ThemeCatalog.cycle(startingWith: .default), noColor: Bool = false,
        environment: [String: String] = Environment.current,
        refreshInterval: Instant.Duration = .milliseconds(250), clock: any Clock = SystemClock(),
        state: ConsoleState.Configuration = ConsoleState.Configuration(), terminal: TerminalScreen.Options = .init()
    ) {
        self.themes = themes.isEmpty ? [.default] : themes
        self.noColor = noColor
        self.environment = environment
        self.refreshInterval = refreshInterval
        self.clock = clock
        self.state = state
        self.terminal = terminal
    }

    /// Colour is off by `--no-color` or a non-empty `NO_COLOR` (no-color.org).
    public var colorsWanted: Bool {
        !noColor && (environment["NO_COLOR"] ?? "").isEmpty
    }
}

/// The console's run loop: keys, snapshots and effect results in; frames out.
///
/// Everything that touches curses runs on the calling thread. Snapshots are fetched on a background thread and
/// effects run on a background serial queue; both post events into a mailbox and wake the loop through a pipe,
/// so input is never blocked by the store. Idle frames write nothing; the loop wakes at least four times a
/// second to tick the clock.
public enum ConsoleApp {
    public static func run(
        options: ConsoleOptions, source: any ConsoleDataSource, executor: any ConsoleEffectExecutor
    ) throws(TerminalError) -> ConsoleExit {
        SignalTrap.install()
        defer { SignalTrap.uninstall() }
        var terminalOptions = options.terminal
        terminalOptions.colors = options.colorsWanted
        let screen = try TerminalScreen(terminalOptions)
        defer { screen.close() }

        let depth = ColorDepth.detect(
            colors: screen.colorCount, noColorFlag: options.noColor, environment: options.environment)
        let themes = options.themes.map { $0.resolved(for: depth) }
        let configuration = ConsoleState.Configuration(
            steps: options.state.steps, initialStep: options.state.initialStep, staleAfter: options.state.staleAfter,
            utcOffsetSeconds: options.state.utcOffsetSeconds, themeNames: options.themes.map(\.name), initialTheme: 0,
            bell: options.state.bell, flashFor: options.state.flashFor)
        var state = ConsoleState(configuration: configuration, screenSize: screen.size)

        let mailbox = Mailbox()
        let fetcher = SnapshotFetcher(source: source, interval: options.refreshInterval, mailbox: mailbox)
        let effects = EffectRunner(executor: executor, mailbox: mailbox)
        fetcher.start()
        defer { fetcher.stop() }

        var quit = false
        var shown: Grid?
        func apply(_ event: ConsoleEvent) {
            for effect in state.handle(event) {
                switch effect {
                case .quit: quit = true
                case .redraw: screen.invalidate()
                case .bell: screen.bell()
                case .simulation(let command):
                    // At once, so that the message comes with the first frame that shows the change.
                    if let control = options.simulation {
                        apply(.simulationChanged(control.perform(command), after: command))
                    }
                case .refresh: fetcher.refreshNow()
                case .preview, .publish, .loadHistory, .loadAudit, .loadVersion, .planControl, .phoneStart, .phoneCall,
                    .phoneCancel, .approveRequest:
                    effects.submit(effect)
                // At once, not behind the publish it cancels (that one may be waiting for the key's touch).
                case .cancelApproval: effects.interrupt(effect)
                }
            }
        }

        apply(.wallClock(options.wallClock.now()))
        apply(.tick(options.clock.now()))
        let tickMicroseconds = min(250_000, max(10_000, options.refreshInterval.microseconds))
        while true {
            for sig in SignalTrap.drain() {
                if sig == SIGWINCH {
                    screen.refreshSize()
                    apply(.resize(screen.size))
                } else {
                    return .signal(sig)
                }
            }
            for event in mailbox.drain() { apply(event) }
            while let input = screen.nextInput() {
                switch input {
                case .key(let key): apply(.key(key))
                case .resize: apply(.resize(screen.size))
                case .click(let point):
                    // Hit-tested against the frame on screen, so a click means what the operator saw under it.
                    if let target = shown?.target(at: point) { apply(.click(target)) }
                case .wheel(let notches): apply(.wheel(notches))
                }
                if quit { break }
            }
            if let control = options.simulation { apply(.simulation(control.status())) }
            apply(.wallClock(options.wallClock.now()))
            apply(.tick(options.clock.now()))
            if quit { return .quit }
            let frame = ConsoleScreen.render(state, size: screen.size)
            screen.paint(frame, theme: themes[state.themeIndex])
            shown = frame
            guard wait(input: screen.inputDescriptor, microseconds: tickMicroseconds) else { return .signal(SIGHUP) }
        }
    }

    /// Sleeps until a key, a wake-up from the pipe, or the tick; false when the terminal is gone.
    ///
    /// Only the poll can tell: curses answers the end of input on a hung-up terminal as "no key yet", and the
    /// kernel sends SIGHUP only to the terminal's session leader, which may trap it and stay (a shell's `trap`),
    /// so the console would otherwise poll a dead terminal forever with the store open.
    private static func wait(input: Int32, microseconds: Int64) -> Bool {
        var fds = [
            pollfd(fd: input, events: Int16(POLLIN), revents: 0),
            pollfd(fd: SignalTrap.pipeEnds.read, events: Int16(POLLIN), revents: 0),
        ]
        guard poll(&fds, 2, Int32(microseconds / 1000)) > 0 else { return true }
        return fds[0].revents & Int16(POLLHUP | POLLERR | POLLNVAL) == 0
    }
}

/// Events posted by background threads for the run loop.
final class Mailbox: @unchecked Sendable {
    private let lock = Lock()
    private var events: [ConsoleEvent] = []

    func post(_ new: [ConsoleEvent]) {
        guard !new.isEmpty else { return }
        lock.withLock { events += new }
        SignalTrap.wake()
    }

    func drain() -> [ConsoleEvent] {
        lock.withLock {
            defer { events.removeAll(keepingCapacity: true) }
            return events
        }
    }
}

/// Asks the data source for a snapshot every interval, or at once when asked to, on its own thread.
final class SnapshotFetcher: @unchecked Sendable {
    private let source: any ConsoleDataSource
    private let interval: Instant.Duration
    private let mailbox: Mailbox
    private let condition = Condition()
    private var stopped = false
    private var pending = false

    init(source: any ConsoleDataSource, interval: Instant.Duration, mailbox: Mailbox) {
        self.source = source
        self.interval = interval
        self.mailbox = mailbox
    }

    func start() {
        detachThread { [self] in loop() }
    }

    func stop() {
        condition.withLock {
            stopped = true
            condition.signal()
        }
    }

    func refreshNow() {
        condition.withLock {
            pending = true
            condition.signal()
        }
    }

    private func loop() {
        while true {
            if condition.withLock({ stopped }) { return }
            let event: ConsoleEvent
            do {
                event = .snapshot(try source.snapshot())
            } catch {
                event = .sourceFailed(String(describing: error))
            }
            mailbox.post([event])
            condition.lock()
            let deadline = Deadline(secondsFromNow: interval.seconds)
            while !stopped && !pending {
                if !condition.wait(until: deadline) { break }
            }
            pending = false
            let done = stopped
            condition.unlock()
            if done { return }
        }
    }
}

/// Runs effects one at a time, in order, off the input thread.
final class EffectRunner: @unchecked Sendable {
    private let executor: any ConsoleEffectExecutor
    private let mailbox: Mailbox
    private let queue = DispatchQueue(label: "rollout-console-effects")

    init(executor: any ConsoleEffectExecutor, mailbox: Mailbox) {
        self.executor = executor
        self.mailbox = mailbox
    }

    func submit(_ effect: ConsoleEffect) {
        queue.async { [executor, mailbox] in mailbox.post(executor.perform(effect)) }
    }

    func interrupt(_ effect: ConsoleEffect) { executor.interrupt(effect) }
}
