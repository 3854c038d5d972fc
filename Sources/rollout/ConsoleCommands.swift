import CommandLineKit
import RolloutApp
import Console
import FleetSimulator
import Glibc
import Dispatch
import Platform
import Rollout
import Terminal
import Timekeeping

/// `rollout console`: the ncurses screen on a store.
enum ConsoleCommands {
    static let all: [Command] = [demo, console]

    static let displayOptions: [Option] = [
        .value("--theme", name: "NAME|FILE", help: "default, light, high-contrast, colorblind, or a .theme file."),
        .flag("--no-color", help: "Monochrome: status by words, symbols, bold and reverse (also NO_COLOR=1)."),
        .flag("--no-bell", help: "Do not ring the terminal bell when the verdict rises to HOLD or HALT (the header still flashes)."),
        .flag(
            "--no-mouse",
            help: "Do not ask the terminal to report clicks: the terminal's own text selection works without Shift; "
                + "every action has a key."),
    ]

    /// The terminal settings of `--no-mouse`.
    static func terminal(_ invocation: Invocation) -> TerminalScreen.Options {
        TerminalScreen.Options(mouse: !invocation.flag("--no-mouse"))
    }

    static let console = Command(
        "console",
        summary: "Watch the rollout live and change it with a keystroke.",
        discussion: "Shows the AppAttestEnabled condition, attestation successes and failures, the crash comparison of "
            + "exposed and control users with its verdict, and the latest changes. Keys: +/- nudge, [ ] step, = exact value, "
            + "K kill, r resume, u undo the last change (again: further back), v why (the verdict's findings), h history, a audit, Tab the log (↑↓ a change, Enter opens it), "
            + "t theme, f freeze, ? help, q quit. A rise of the verdict to HOLD or HALT flashes the header and rings the bell once "
            + "(--no-bell). Clicks work on dialog buttons, list rows and the log's changes (--no-mouse turns them off). Every change "
            + "goes through a confirm dialog and the same write path as the CLI. Needs a terminal; for scripts use 'rollout status'.",
        options: displayOptions,
        examples: [
            "rollout console",
            "rollout console --store /srv/rollout/rollout.db --read-only",
            "NO_COLOR=1 rollout console --theme high-contrast",
        ],
        action: run)

    static func run(_ invocation: Invocation) throws -> ExitCode {
        try runConsole(invocation, session: try Wiring.session(invocation))
    }

    static let demo = Command(
        "demo",
        summary: "The console on an embedded store with a simulated device fleet: the whole loop, no phone, no cloud.",
        discussion: "Creates a temporary drill store (or uses --store: a new path becomes a drill store; an ordinary "
            + "store needs --on-ordinary-store, recorded in its audit log), starts the fleet simulator in this process at an accelerated "
            + "speed with the busy scenario (a healthy rollout at 40% of 20,000 devices at 600x: the verdict reaches OK "
            + "within about a minute; --scenario to choose another: steady, throttling, crash-regression, bad-build, "
            + "slow-propagation, or a file), and opens the console on top. Keys of the demo: p pauses and resumes the "
            + "simulation, > and < change its speed along 1x 10x 60x 600x 3600x max; the header shows simulated time "
            + "beside wall time. Nudges made in the console reach the simulated "
            + "devices as they fetch config; their successes, failures and crashes come back live. The console follows the "
            + "simulated time for the fleet's data only: step-up codes, lockouts and audit times are wall time. With "
            + "guardrails.auto-kill on, a HALT is killed once (the simulator and the console both watch). The temporary "
            + "store is removed on exit.",
        options: displayOptions + [
            .value("--scenario", name: "NAME|FILE", help: "The fleet's scenario (default busy)."),
            .value("--devices", name: "N", help: "Fleet size (default: the scenario's)."),
            .value(
                "--speed", name: "X",
                help:
                    "Simulated seconds per wall second (default: the scenario's demo-speed, busy 600; else 60: an hour "
                    + "per minute)."),
            .value("--seed", name: "S", help: "The simulation's random seed (default 1)."),
            .value(
                "--source", name: "recorded[:DIR]",
                help:
                    "Instead of the simulator, a GA4 realtime source served from recorded answers (DIR/ga4-realtime-N.json; "
                    + "default Tests/Recorded of the repository): the console fed through the source path, no network."),
            SimulateCommands.ordinaryStoreOption,
        ],
        examples: [
            "rollout demo",
            "rollout demo --scenario crash-regression      # watch the verdict go to HALT",
            "rollout demo --scenario throttling --speed 120 --theme colorblind",
            "rollout demo --source recorded              # GA4's realtime report, replayed from recorded answers",
        ],
        action: runDemo)

    static func runDemo(_ invocation: Invocation) throws -> ExitCode {
        if let source = invocation.value("--source") {
            guard source == "recorded" || source.hasPrefix("recorded:") else {
                throw invocation.usageError("--source takes recorded or recorded:DIR")
            }
            let directory = source == "recorded" ? "Tests/Recorded" : String(source.dropFirst("recorded:".count))
            return try runRecordedDemo(invocation, directory: directory)
        }
        let scenario: Scenario
        do {
            scenario = try Scenario.load(invocation.value("--scenario") ?? "busy")
        } catch {
            throw CommandError("\(error)", exit: .usage)
        }
        let speed: SimulationSpeed
        if let text = invocation.value("--speed") {
            guard let given = SimulationSpeed(text) else {
                throw invocation.usageError("--speed takes a number of simulated seconds per second, or max")
            }
            speed = given
        } else {
            speed = scenario.demoSpeed ?? .factor(60)
        }
        let devices = try invocation.value("--devices").map { text -> Int in
            guard let n = Int(text), n > 0, n <= 2_000_000 else { throw invocation.usageError("--devices takes 1 to 2000000") }
            return n
        }
        let seed = try invocation.value("--seed").map { text -> UInt64 in
            guard let s = UInt64(text) else { throw invocation.usageError("--seed takes a whole number") }
            return s
        }
        _ = try theme(invocation)  // a bad theme is an error before anything starts

        // The store: the given one (a drill store, or an ordinary one with --on-ordinary-store, audited), or a
        // temporary drill store removed on exit.
        var temporary: String?
        let path: String
        if let given = invocation.value("--store") {
            path = given
        } else {
            let dir = try Files.makeTemporaryDirectory(prefix: "rollout-demo-")
            temporary = dir
            path = Path.join(dir, "rollout.db")
        }
        defer { if let temporary { try? Files.removeTree(temporary) } }

        let wall = SystemClock()
        let operatorID = try Wiring.operatorID(invocation)
        // The simulator's scripted changes go through the store's one write path, as `simulator`, on the wall
        // clock; its guardrail reads the simulation's own time.
        let simSession = try SimulateCommands.drillSession(
            path: path, invocation: invocation, scenario: scenario, command: "demo", clock: wall)
        let options = FleetOptions(scenario: scenario, devices: devices, seed: seed ?? 1, start: wall.now(), duration: .hours(24 * 7))
        let simulation = try SimulateCommands.simulation(
            scenario: scenario, options: options, session: simSession, source: "demo")
        let control = SimulationControl(speed: speed)
        let runner = SimulationRunner(
            simulation: simulation, speed: speed, wall: wall, clockStore: simSession.heartbeat, control: control)
        let finished = DispatchSemaphore(value: 0)
        let failure = FailureBox()
        detachThread {
            do { try runner.run() } catch { failure.set(error) }
            finished.signal()
        }
        let code: ExitCode
        do {
            // The operator's session runs on the wall clock (step-up, lockouts, audit); the console follows the
            // simulation's time through the store's heartbeat.
            let session = try Wiring.session(path: path, operatorID: operatorID, readOnly: invocation.flag("--read-only"))
                .rolloutSession()
            code = try runConsole(
                invocation, session: session, project: "demo · \(scenario.name)",
                simulation: DemoSimulationControl(control: control, wall: wall))
        } catch {
            runner.stop()
            finished.wait()
            throw error
        }
        runner.stop()
        finished.wait()
        if let error = failure.get() { throw CommandError("the simulation stopped: \(error)") }
        return code
    }

    /// `demo --source recorded`: a temporary store at 10% with one GA4 realtime source whose answers come from
    /// `directory`, pulled every 5 s through the source path while the console runs on top.
    static func runRecordedDemo(_ invocation: Invocation, directory: String) throws -> ExitCode {
        _ = try theme(invocation)
        let dir = try Files.makeTemporaryDirectory(prefix: "rollout-demo-")
        defer { try? Files.removeTree(dir) }
        let path = Path.join(dir, "rollout.db")
        let operatorID = try Wiring.operatorID(invocation)
        let session = try RecordedDemo.open(path: path, operatorID: operatorID)
        return try runConsole(
            invocation, session: session, project: "demo · recorded GA4 realtime", recordedAnswers: directory)
    }

    /// The demo console's `p`, `>` and `<` on the simulation it drives, with wall time for the header.
    struct DemoSimulationControl: ConsoleSimulationControl {
        let control: SimulationControl
        let wall: any Clock

        func status() -> SimulationStatus {
            let s = control.state
            // Said when the machine cannot keep up: the speed asked for, and the pace it manages.
            var speed = s.speed.description
            if case .factor(let f) = s.speed, !s.paused, let a = control.achieved, a < f * 0.9 {
                speed += " (at \(SimulationSpeed.factor(a.rounded()).description))"
            }
            return SimulationStatus(
                speed: speed, paused: s.paused, wall: wall.now(), isFastest: s.isFastest,
                isSlowest: s.isSlowest)
        }

        func perform(_ command: SimulationCommand) -> SimulationStatus {
            switch command {
            case .togglePause: control.togglePause()
            case .faster: control.faster()
            case .slower: control.slower()
            }
            return status()
        }
    }

    /// The simulator thread's error, read after it ends.
    final class FailureBox: @unchecked Sendable {
        private let lock = Lock()
        private var error: Error?
        func set(_ e: Error) { lock.withLock { error = e } }
        func get() -> Error? { lock.withLock { error } }
    }

    /// Runs the console on an open session (wall clock: step-up, lockouts, audit times).
    ///
    /// The screen's data age and stale marker run on telemetry time (`telemetryClock`: the wall clock, or a
    /// live simulation's time) with the store's one stale limit, so the marker and the verdict agree. A writable
    /// console runs auto-kill on each refresh.
    static func runConsole(
        _ invocation: Invocation, session: RolloutSession, project: String? = nil,
        simulation: (any ConsoleSimulationControl)? = nil, recordedAnswers: String? = nil
    ) throws -> ExitCode {
        let themes = try theme(invocation)
        let ticks = try session.telemetryClock()
        let source = try session.consoleSource(
            project: project, environment: invocation.environment, recordedAnswers: recordedAnswers)
        let staleAfter = try source.status().settings.staleAfter
        let executor = StoreConsoleExecutor(session: session)
        var options = ConsoleOptions(
            themes: themes, noColor: invocation.flag("--no-color"), environment: invocation.environment, clock: ticks,
            state: ConsoleState.Configuration(staleAfter: staleAfter, bell: !invocation.flag("--no-bell")),
            terminal: terminal(invocation))
        options.simulation = simulation
        do {
            switch try ConsoleApp.run(options: options, source: source, executor: executor) {
            case .quit: return .ok
            // Returned, not exit(): the caller's clean-up runs (the demo's temporary store is removed).
            case .signal(let n): return ExitCode(stoppedBy: n)
            }
        } catch {
            throw CommandError("\(error)")
        }
    }

    static func theme(_ invocation: Invocation) throws -> [Theme] {
        guard let name = invocation.value("--theme") else { return ThemeCatalog.cycle(startingWith: .default) }
        do {
            return ThemeCatalog.cycle(startingWith: try ThemeCatalog.load(name))
        } catch {
            throw CommandError(error.description, exit: .usage)
        }
    }
}
