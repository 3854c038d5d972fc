import AppCheck
import CommandLineKit
import ExchangeServer
import Monitoring
import RolloutApp
import FleetSimulator
import Glibc
import Dispatch
import Platform
import Rollout
import Telemetry
import Timekeeping

/// `rollout simulate`: a simulated device fleet writing telemetry into the store and fetching its live config.
enum SimulateCommands {
    static let all: [Command] = [simulate]

    static let simulate = Command(
        "simulate",
        summary: "Run a simulated device fleet against the store: live config in, telemetry out.",
        discussion: "Devices with Firebase installation IDs launch the app on a daily curve, fetch Remote Config (on "
            + "launch past the fetch interval; real-time listeners within seconds of a publish), and run the codelab's "
            + "App Check provider chain: App Attest keys are attested once per install and assertions refresh tokens, "
            + "all through the real App Check exchange with a demo certificate authority; Apple's service has a "
            + "capacity beyond which it answers serverUnavailable. Events land in the store like real telemetry, one "
            + "transaction per simulated minute, and the config is read from the store on every fetch, so a nudge "
            + "from another terminal reaches the fleet. The same --seed, --start, scenario and store give the same "
            + "events in the same order (the summary prints their SHA-256). Simulated time starts at the wall time "
            + "unless --start or the scenario says otherwise, and is published in the store (a heartbeat) for consoles "
            + "watching it; a console stops following it once it ends or goes silent. Simulations run only on drill "
            + "stores: a new --store path is created as one; an existing ordinary store is refused unless "
            + "--on-ordinary-store is given, which the audit log records. The scenario's scripted changes go through "
            + "the store's one write path as 'simulator' (never as an operator): step-up applies as to anyone; the "
            + "guardrail is overridden with the scenario line as the reason (audited), since a drill provokes what it "
            + "stops. With guardrails.auto-kill on, a HALT kills the rollout at the next simulated minute. The shipped scenarios are listed by --list. "
            // (Not listed here: every rollout command builds this text at start-up, and reading the scenario
            // directory cost a tenth of `rollout --help`.)
            + "Parameters a scenario file can "
            + "set: " + FleetParameters.definitions.map(\.name).joinedText(", ") + ".",
        options: [
            .value("--scenario", name: "NAME|FILE", help: "A built-in scenario or a scenario file's path."),
            .value("--devices", name: "N", help: "Fleet size (default: the scenario's)."),
            .value("--speed", name: "X", help: "Simulated seconds per wall second, or 'max' (default 60)."),
            .value("--duration", name: "D", help: "Simulated run length, e.g. 2h or 90m (default: the scenario's)."),
            .value("--seed", name: "S", help: "The model's random seed, a whole number (default 1)."),
            .value("--start", name: "TIME", help: "Simulated start (ISO 8601; default: the scenario's, else now)."),
            .value(
                "--exchange", name: "URL",
                help: "Attest and assert against an App Check server ('rollout serve') at http://127.0.0.1:PORT instead of in process."),
            .value(
                "--exchange-store", name: "PATH",
                help: "The server's store, read for its demo authority and apps (default: --store, when both share one)."),
            .value("--app-id", name: "ID", help: "With --exchange: the server's app the devices are (default: its one demo-trusting app)."),
            .flag("--list", help: "List the built-in scenarios and exit."),
            .flag("--quiet", help: "No progress lines on stderr."),
            .flag("--json", help: "Print the final summary as JSON."),
            ordinaryStoreOption,
        ],
        examples: [
            "rollout simulate --scenario steady --devices 20000 --speed 60",
            "rollout simulate --scenario crash-regression --speed max --duration 2h --seed 7",
            "rollout simulate --scenario ./my-drill.scenario --store /tmp/drill.db --speed max --json",
            "rollout simulate --list",
            "rollout serve --store /tmp/drill.db --trust-demo &   # after 'rollout appcheck app add ... --trust-demo'",
            "rollout simulate --scenario steady --store /tmp/drill.db --exchange http://127.0.0.1:8080",
        ],
        action: run)

    static var scenarioList: String {
        let names = Scenario.builtInNames
        return names.isEmpty ? "(not installed)" : names.joined(separator: ", ")
    }

    static func run(_ invocation: Invocation) throws -> ExitCode {
        if invocation.flag("--list") {
            for name in Scenario.builtInNames {
                let summary = (try? Scenario.load(name).summary) ?? ""
                print("\(name.padded(to: 18)) \(summary)")
            }
            return .ok
        }
        guard let scenarioName = invocation.value("--scenario") else {
            throw invocation.usageError("--scenario is required (built in: \(scenarioList))")
        }
        guard !invocation.flag("--read-only") else {
            throw CommandError(
                "refused: a simulation writes telemetry and config changes (--read-only)", exit: .refused)
        }
        let scenario: Scenario
        do {
            scenario = try Scenario.load(scenarioName)
        } catch {
            throw invocation.usageError("\(error)")
        }
        let devices = try invocation.value("--devices").map { text -> Int in
            guard let n = Int(text), n > 0, n <= 50_000_000 else {
                throw invocation.usageError("--devices needs a whole number from 1 to 50000000")
            }
            return n
        }
        let speedText = invocation.value("--speed") ?? "60"
        guard let speed = SimulationSpeed(speedText) else {
            throw invocation.usageError("--speed needs a positive number or 'max', not '\(speedText)'")
        }
        let duration = try invocation.value("--duration").map { text -> Instant.Duration in
            do { return try ScenarioValues.positiveDuration(text) } catch {
                throw invocation.usageError("--duration: \(error)")
            }
        }
        let seed = try invocation.value("--seed").map { text -> UInt64 in
            guard let s = UInt64(text) else {
                throw invocation.usageError("--seed needs a whole number, not '\(text)'")
            }
            return s
        }
        let start = try invocation.value("--start").map { text -> Instant in
            guard let t = ISO8601.parse(text) else {
                throw invocation.usageError("--start needs an ISO 8601 time such as 2026-05-20T09:00:00Z")
            }
            return t
        }

        if let given = invocation.value("--operator"), given != FleetOptions.simulatorActor {
            throw invocation.usageError(
                "the simulator acts only as itself ('\(FleetOptions.simulatorActor)'), never as an operator such as '\(given)'")
        }
        let wall = SystemClock()
        let path = StoreLocation.path(invocation)
        let exchange = try remoteExchange(invocation, storePath: path, wall: wall)
        let session = try drillSession(
            path: path, invocation: invocation, scenario: scenario, command: "simulate", start: start, clock: wall)
        var options = FleetOptions(
            scenario: scenario, devices: devices, seed: seed ?? 1, start: start ?? wall.now(), duration: duration)
        if let start { options.start = start }
        let simulation: FleetSimulation
        do {
            simulation = try Self.simulation(
                scenario: scenario, options: options, session: session, source: "simulator:\(scenario.name)",
                exchange: exchange)
        } catch {
            throw CommandError("cannot set up the simulation: \(error)")
        }
        let runner = SimulationRunner(simulation: simulation, speed: speed, wall: wall, clockStore: session.heartbeat)
        let received = SignalBox()
        // SIGINT and SIGTERM stop the run cleanly (telemetry flushed, clock record marked stopped); `received` keeps
        // the signal, so the command ends with 128 + it, as a stopped program does.
        let signals = StopSignals { sig in
            received.set(sig)
            runner.stop()
        }
        defer { signals.cancel() }

        let quiet = invocation.flag("--quiet")
        if !quiet {
            report(
                "simulating \(options.devices) devices, scenario \(scenario.name), seed \(options.seed), speed \(speed), "
                    + "\(options.start.iso8601) to \((options.start + options.duration).iso8601), store \(path)")
        }
        var lastLine = wall.now()
        // On a terminal, a progress line of simulated time (done of the run, speed, time left) under the log.
        let bar = ProgressReporter.standardError(
            label: "simulate", unit: .simulatedSeconds, total: options.duration.microseconds / 1_000_000, quiet: quiet)
        defer { bar.finish() }
        do {
            try runner.run { stats, notes in
                guard !quiet else { return }
                bar.update(done: (stats.now - options.start).microseconds / 1_000_000)
                for n in notes { bar.note("  \(n)") }
                let w = wall.now()
                if w - lastLine >= .seconds(Int64(5)) || stats.now >= simulation.end {
                    bar.note(progressLine(stats))
                    lastLine = w
                }
            }
        } catch {
            throw CommandError("the simulation stopped: \(error)")
        }
        let stats = simulation.statistics()
        if invocation.flag("--json") {
            print(
                try summaryJSON(
                    stats, scenario: scenario, options: options, stopped: runner.isStopped,
                    exchangeURL: invocation.value("--exchange"), lastToken: simulation.lastToken()))
        } else {
            print(summaryText(stats, scenario: scenario, options: options, stopped: runner.isStopped))
        }
        if stats.refusedChanges > 0 {
            report(
                "rollout: \(stats.refusedChanges) scripted change\(stats.refusedChanges == 1 ? " was" : "s were") refused by the "
                    + "write path (the simulator acts as 'simulator', under the same policies as anyone)")
            return .refused
        }
        if let sig = received.signal { return ExitCode(stoppedBy: sig) }
        return .ok
    }

    static let ordinaryStoreOption = Option.flag(
        "--on-ordinary-store",
        help: "Run although the store was not created as a drill store (recorded in its audit log).")

    /// The session a simulation writes into, as the simulator (see `Wiring.drillSession`).
    static func drillSession(
        path: String, invocation: Invocation, scenario: Scenario, command: String, start: Instant? = nil,
        clock: any Clock
    ) throws -> RolloutSession {
        try Wiring.drillSession(
            path: path, seed: scenario.rolloutSeed, actor: FleetOptions.simulatorActor,
            operatorID: { try Wiring.operatorID(invocation) }, command: command, scenario: scenario.name,
            onOrdinaryStore: invocation.flag("--on-ordinary-store"), start: start, clock: clock)
    }

    /// The simulation on a store: telemetry through the ingest path of real data, scripted changes through the
    /// session's write path, and auto-kill after every landed minute (the simulator's process computes the
    /// verdict, so it acts on HALT like the console and `watch`).
    static func simulation(
        scenario: Scenario, options: FleetOptions, session: RolloutSession, source: String,
        exchange: FleetExchange = .inProcess
    ) throws -> FleetSimulation {
        let sink = StoreTelemetrySink(counters: try session.telemetryCounters(), source: source)
        let simulation = try FleetSimulation(
            scenario: scenario, options: options, config: session.templates, sink: sink,
            writePath: try session.writePath(), exchange: exchange)
        let monitor = try session.monitor(telemetryClock: simulation.clock)
        let path = try session.writePath()
        nonisolated(unsafe) let unsafeMonitor = monitor
        sink.afterCommit = { _ in
            if case .published(let stored, let proposal, _)? = try unsafeMonitor.autoKillIfHalted(using: path) {
                simulation.noteExternal("auto-kill published version \(stored.info.number): \(proposal.summary)")
            }
        }
        return simulation
    }

    /// `--exchange URL`: the server's API, and from the server's store (read only) the demo authority it trusts
    /// and the app the devices are. The server and the fleet must agree on both, so both are read from the store
    /// the server runs on rather than given twice.
    static func remoteExchange(_ inv: Invocation, storePath: String, wall: any Clock) throws -> FleetExchange {
        guard let url = inv.value("--exchange") else {
            for option in ["--exchange-store", "--app-id"] where inv.value(option) != nil {
                throw inv.usageError("\(option) needs --exchange URL")
            }
            return .inProcess
        }
        let transport: LoopbackHTTPClient
        do { transport = try LoopbackHTTPClient(url: url) } catch { throw inv.usageError("--exchange: \(error)") }
        let serverPath = inv.value("--exchange-store") ?? storePath
        guard !serverPath.isEmpty else { throw inv.usageError("--exchange-store needs a path") }
        let serverLabel = Wiring.storeLabel(serverPath)
        let state: any AppCheckState
        do {
            state = try Wiring.appCheckState(
                location: serverPath, readOnly: true, keyPath: Wiring.teamStoreKeyPath(inv.environment)
            ).state
        } catch {
            throw CommandError(
                "--exchange: cannot read the server's store \(serverLabel) (its demo authority and apps): \(error)")
        }
        guard let configuration = try state.configuration() else {
            throw CommandError(
                "--exchange: \(serverLabel) has no App Check project or apps; register the fleet's app there: "
                    + "rollout appcheck app add APP_ID --project-number N --project-id ID --team T --bundle B --trust-demo")
        }
        let trusting = configuration.apps.filter(\.trustsDemoRoot)
        let app: AppAttestApp
        if let id = inv.value("--app-id") {
            guard let found = configuration.apps.first(where: { $0.appId == id }) else {
                throw CommandError("--exchange: app \(id) is not registered in \(serverLabel)")
            }
            guard found.trustsDemoRoot else {
                throw CommandError(
                    "--exchange: app \(id) does not trust the demo authority, so simulated devices cannot attest to it "
                        + "(register a drill app with --trust-demo; never a real app)")
            }
            app = found
        } else {
            guard trusting.count == 1 else {
                throw CommandError(
                    trusting.isEmpty
                        ? "--exchange: no app in \(serverLabel) trusts the demo authority; register a drill app with "
                            + "'rollout appcheck app add ... --trust-demo'"
                        : "--exchange: \(trusting.count) apps in \(serverLabel) trust the demo authority; pick one with --app-id ("
                            + trusting.map(\.appId).joined(separator: ", ") + ")")
            }
            app = trusting[0]
        }
        guard let material = try state.demoAuthority() else {
            throw CommandError(
                "--exchange: \(serverLabel) has no demo authority yet; 'rollout serve --trust-demo' on it creates one")
        }
        let authority: DemoCertificateAuthority
        do { authority = try DemoCertificateAuthority(material: material) } catch {
            throw CommandError("--exchange: the demo authority in \(serverLabel) does not load: \(error)")
        }
        let api = RemoteAppCheckExchange(transport: transport, project: configuration.project.number)
        return .remote(
            RemoteFleetExchange(
                exchange: api, authority: authority, appId: app.appId, identity: app.identity,
                environment: app.environment, wall: wall))
    }

    /// The first stop signal received.
    final class SignalBox: @unchecked Sendable {
        private let lock = Lock()
        private var value: Int32?
        func set(_ s: Int32) { lock.withLock { if value == nil { value = s } } }
        var signal: Int32? { lock.withLock { value } }
    }

    static func report(_ line: String) {
        StandardStream.error.write((line + "\n"))
    }

    static func progressLine(_ s: FleetStatistics) -> String {
        let exposed = s.eligibleDevices > 0 ? Double(s.exposedDevices) / Double(s.eligibleDevices) * 100 : 0
        return "\(s.now.iso8601)  v\(s.templateVersion)  exposed \(cFormat("%.1f", exposed))% of eligible  "
            + "in session \(s.devicesInSession)  sessions \(s.sessions)  attest \(s.attestations)+\(s.assertions) ok "
            + "\(s.failureCount) failed (\(s.throttled) throttled)  crashes \(s.fatalCrashes)"
    }

    static func summaryText(_ s: FleetStatistics, scenario: Scenario, options: FleetOptions, stopped: Bool) -> String {
        var lines = [
            "scenario \(scenario.name): \(options.devices) devices, seed \(options.seed)"
                + (stopped ? ", stopped at \(s.now.iso8601)" : ", \(options.start.iso8601) to \(s.now.iso8601)"),
            "events \(s.events) (sha256 \(s.eventDigest))",
            "sessions \(s.sessions), config fetches \(s.configFetches), template version \(s.templateVersion)",
            "App Attest: \(s.attestations) attestations, \(s.assertions) assertions, \(s.failureCount) failures, "
                + "\(s.throttled) throttled by Apple, \(s.keysGenerated) keys generated",
            "exposed: \(s.exposedDevices) of \(s.eligibleDevices) eligible devices",
            "crashes: \(s.fatalCrashes) fatal, \(s.nonfatalCrashes) non-fatal",
        ]
        if !s.failures.isEmpty {
            lines.append(
                "failures by class: "
                    + s.failures.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }

    static func summaryJSON(
        _ s: FleetStatistics, scenario: Scenario, options: FleetOptions, stopped: Bool, exchangeURL: String? = nil,
        lastToken: String? = nil
    ) throws -> String {
        var object: [String: Any] = [
            "scenario": scenario.name, "devices": options.devices, "seed": options.seed,
            "start": options.start.iso8601, "end": s.now.iso8601, "stopped": stopped,
            "events": s.events, "eventDigest": s.eventDigest, "sessions": s.sessions, "configFetches": s.configFetches,
            "templateVersion": s.templateVersion, "attestations": s.attestations, "assertions": s.assertions,
            "failures": s.failures, "throttled": s.throttled, "keysGenerated": s.keysGenerated,
            "eligibleDevices": s.eligibleDevices, "exposedDevices": s.exposedDevices, "fatalCrashes": s.fatalCrashes,
            "nonfatalCrashes": s.nonfatalCrashes, "publishedChanges": s.publishedChanges,
            "refusedChanges": s.refusedChanges,
        ]
        if let url = exchangeURL {
            object["exchange"] = ["url": url, "lastToken": AnyJSON.orNull(lastToken)] as [String: Any]
        }
        return AnyJSON.compact(object)
    }
}
