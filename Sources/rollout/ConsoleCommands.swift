import CommandLineKit
import RolloutApp
import Console
import FleetSimulator
import Foundation
import Rollout
import Store
import Terminal
import Timekeeping

/// `rollout console`: the ncurses screen on a store.
enum ConsoleCommands {
    static let all: [Command] = [demo, console]

    static let displayOptions: [Option] = [
        .value("--theme", name: "NAME|FILE", help: "default, light, high-contrast, colorblind, or a .theme file."),
        .flag("--no-color", help: "Monochrome: status by words, symbols, bold and reverse (also NO_COLOR=1)."),
    ]

    static let console = Command(
        "console",
        summary: "Watch the rollout live and change it with a keystroke.",
        discussion: "Shows the AppAttestEnabled condition, attestation successes and failures, the crash comparison of "
            + "exposed and control users with its verdict, and the latest changes. Keys: +/- nudge, [ ] step, = exact value, "
            + "K kill, r resume, u undo the last change, h history, a audit, t theme, f freeze, ? help, q quit. Every change "
            + "goes through a confirm dialog and the same write path as the CLI. Needs a terminal; for scripts use 'rollout status'.",
        options: displayOptions,
        examples: [
            "rollout console",
            "rollout console --store /srv/rollout/rollout.db --read-only",
            "NO_COLOR=1 rollout console --theme high-contrast",
        ],
        action: run)

    static func run(_ invocation: Invocation) throws -> ExitCode {
        let session = try Wiring.session(invocation)
        // While `rollout simulate` runs on this store, its events carry simulated time: follow that clock.
        let clock = StoreSimulationClock(store: session.store, wall: session.clock)
        return try runConsole(invocation, session: session, clock: clock, project: "embedded")
    }

    static let demo = Command(
        "demo",
        summary: "The console on an embedded store with a simulated device fleet: the whole loop, no phone, no cloud.",
        discussion: "Creates a temporary store (or uses --store), starts the fleet simulator in this process at an accelerated "
            + "speed with the steady scenario (--scenario to choose another: throttling, crash-regression, bad-build, "
            + "slow-propagation, or a file), and opens the console on top. Nudges made in the console reach the simulated "
            + "devices as they fetch config; their successes, failures and crashes come back live. The temporary store is "
            + "removed on exit.",
        options: displayOptions + [
            .value("--scenario", name: "NAME|FILE", help: "The fleet's scenario (default steady)."),
            .value("--devices", name: "N", help: "Fleet size (default: the scenario's)."),
            .value("--speed", name: "X", help: "Simulated seconds per wall second (default 60: an hour per minute)."),
            .value("--seed", name: "S", help: "The simulation's random seed (default 1)."),
        ],
        examples: [
            "rollout demo",
            "rollout demo --scenario crash-regression      # watch the verdict go to HALT",
            "rollout demo --scenario throttling --speed 120 --theme colorblind",
        ],
        action: runDemo)

    static func runDemo(_ invocation: Invocation) throws -> ExitCode {
        let scenario: Scenario
        do {
            scenario = try Scenario.load(invocation.value("--scenario") ?? "steady")
        } catch {
            throw CommandError("\(error)", exit: .usage)
        }
        guard let speed = SimulationSpeed(invocation.value("--speed") ?? "60") else {
            throw invocation.usageError("--speed takes a number of simulated seconds per second, or max")
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

        // The store: the given one, or a temporary one removed on exit.
        var temporary: URL?
        let path: String
        if let given = invocation.value("--store") {
            path = given
        } else {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-demo-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            temporary = dir
            path = dir.appendingPathComponent("rollout.db").path
        }
        defer { if let temporary { try? FileManager.default.removeItem(at: temporary) } }

        let wall = SystemClock()
        let operatorID = try Wiring.operatorID(invocation)
        // The simulator has its own connection; the console's reader and writer open theirs.
        let simStore = try RolloutStore(path: path)
        let config = try simStore.configStore()
        try config.initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: scenario.rolloutSeed, actor: operatorID, time: wall.now())
        }
        let options = FleetOptions(
            scenario: scenario, devices: devices, seed: seed ?? 1, start: wall.now(), duration: .hours(24 * 7), actor: "simulator")
        let simulation = try FleetSimulation(
            scenario: scenario, options: options, config: config, sink: StoreTelemetrySink(store: simStore, source: "demo"))
        let runner = SimulationRunner(simulation: simulation, speed: speed, wall: wall, clockStore: simStore)
        let finished = DispatchSemaphore(value: 0)
        let failure = FailureBox()
        Thread.detachNewThread {
            do { try runner.run() } catch { failure.set(error) }
            finished.signal()
        }
        let code: ExitCode
        do {
            let session = try Wiring.session(path: path, operatorID: operatorID, readOnly: invocation.flag("--read-only"))
            let factor: Double = if case .factor(let x) = speed { max(1, x) } else { 600 }
            code = try runConsole(
                invocation, session: session, clock: simulation.clock, project: "demo · \(scenario.name)",
                staleAfter: .seconds(max(5, 5 * factor)))
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

    /// The simulator thread's error, read after it ends.
    final class FailureBox: @unchecked Sendable {
        private let lock = NSLock()
        private var error: Error?
        func set(_ e: Error) { lock.withLock { error = e } }
        func get() -> Error? { lock.withLock { error } }
    }

    /// Runs the console on an open session with `clock` as its notion of now (the simulator's in a demo).
    ///
    /// `staleAfter` is in the clock's time: a demo at 60× flushes telemetry every simulated minute, so its data
    /// is only stale after several of them.
    static func runConsole(
        _ invocation: Invocation, session: StoreSession, clock: Clock, project: String, staleAfter: Instant.Duration = .seconds(Int64(5))
    ) throws -> ExitCode {
        let themes = try theme(invocation)
        let source = try FirebaseWiring.consoleSource(invocation, session: session, clock: clock)
            ?? StoreConsoleSource(path: session.path, clock: clock, operatorID: session.operatorID, readOnly: session.readOnly, project: project)
        let executor = StoreConsoleExecutor(session: session.with(clock: clock))
        let options = ConsoleOptions(
            themes: themes, noColor: invocation.flag("--no-color"), environment: invocation.environment, clock: clock,
            state: ConsoleState.Configuration(staleAfter: staleAfter))
        do {
            switch try ConsoleApp.run(options: options, source: source, executor: executor) {
            case .quit: return .ok
            case .signal(let n): exit(128 + n)
            }
        } catch {
            throw CommandError(error.description)
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
