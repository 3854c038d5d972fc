import CommandLineKit
import Console
import Foundation
import Store
import Terminal
import Timekeeping

/// `rollout console`: the ncurses screen on a store.
enum ConsoleCommands {
    static let all: [Command] = [console]

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
        return try runConsole(invocation, session: session, clock: session.clock, project: "embedded")
    }

    /// Runs the console on an open session with `clock` as its notion of now (the simulator's in a demo).
    static func runConsole(_ invocation: Invocation, session: StoreSession, clock: Clock, project: String) throws -> ExitCode {
        let themes = try theme(invocation)
        let source = try StoreConsoleSource(
            path: session.path, clock: clock, operatorID: session.operatorID, readOnly: session.readOnly, project: project)
        let executor = StoreConsoleExecutor(session: session.with(clock: clock))
        let options = ConsoleOptions(
            themes: themes, noColor: invocation.flag("--no-color"), environment: invocation.environment, clock: clock)
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
