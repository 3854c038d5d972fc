import AppCheck
import CommandLineKit
import Crypto
import ExchangeServer
import FleetSimulator
import Glibc
import Platform
import JSON
import Monitoring
import Rollout
import RolloutApp
import StepUp
import Timekeeping

/// `rollout serve` (the App Check exchange over HTTP, live telemetry intake) and `rollout appcheck` (the
/// exchange's registrations in the store: apps, debug tokens, signing keys).
enum ServeCommands {
    static let all: [Command] = [serve, appcheck]

    static let serve = Command(
        "serve", summary: "Serve the App Check exchange over HTTP, and take live telemetry on POST /v1/events.",
        discussion: "HTTP/1.1 on libmicrohttpd with Firebase App Check's REST API as Google's discovery document "
            + "describes it: POST /v1/projects/{project}/apps/{app}:generateAppAttestChallenge, "
            + ":exchangeAppAttestAttestation, :exchangeAppAttestAssertion, :exchangeDebugToken (also under "
            + "/v1/oauthClients/{app}), GET /v1/jwks, and for a backend POST "
            + "/v1beta/projects/{project}:verifyAppCheckToken (with the bearer token). Failed verification is 403 PERMISSION_DENIED, a "
            + "malformed request 400 INVALID_ARGUMENT, an unknown app 404, rate limiting 429, store trouble 503. "
            + "POST /v1/events takes native NDJSON (or a JSON array; ?format=ga4|crashlytics) "
            + "and lands it through the same ingest as 'rollout ingest'. The bearer token (Authorization: Bearer TOKEN, "
            + "--events-token-file or printed at start) guards both, and is checked before any body is read: "
            + "without it the answer is 401. GET /healthz answers while the store does. "
            + "One JSON access-log line per request goes to stderr (or --access-log). SIGTERM or SIGINT: stop "
            + "accepting, let requests in flight finish, exit 0. Every state change is committed before its answer.",
        options: [
            .value(
                "--listen", name: "HOST:PORT",
                help: "The IPv4 address and port (default 127.0.0.1:8080; port 0 picks one)."),
            .flag(
                "--trust-demo",
                help:
                    "Let apps registered with --trust-demo accept the store's demo authority (simulated devices). Never for real apps."
            ),
            .value("--threads", name: "N", help: "Worker threads (default 16; a request waiting for its group commit holds one)."),
            .value("--max-connections", name: "N", help: "Connections at once (default 256)."),
            .value("--timeout", name: "SECONDS", help: "Idle connection timeout (default 15)."),
            .value(
                "--header-timeout", name: "SECONDS",
                help:
                    "A request's headers must be complete this long after the connection opened or the last answer, however slowly bytes trickle (default 10; with 3/4 of --max-connections open, 2, and 0.5 after the request line)."
            ),
            .value(
                "--body-timeout", name: "SECONDS", help: "A request's body must be complete this long after its headers (default 30)."),
            .value(
                "--max-connections-per-address", name: "N",
                help: "Connections at once from one client address (default: half of --max-connections; none on a loopback --listen, where every client is 127.0.0.1; 0: no cap)."
            ),
            .value(
                "--rate-limit", name: "N",
                help: "Exchange requests per second per client address (default 100, burst 2N; 0: off)."),
            .value("--max-events-body", name: "BYTES", help: "Largest POST /v1/events body (default 8388608)."),
            .value(
                "--events-token-file", name: "PATH",
                help: "Read the bearer token for POST /v1/events and verifyAppCheckToken from this file (else a fresh one is printed)."),
            .flag("--no-events", help: "Do not serve POST /v1/events (the bearer token still guards verifyAppCheckToken)."),
            .value("--access-log", name: "PATH", help: "Append access-log lines to PATH instead of stderr."),
        ],
        examples: [
            "rollout appcheck app add 1:123456789:ios:abc --project-number 123456789 --project-id my-app \\",
            "    --team 8YE23NZS57 --bundle com.example.app --env production",
            "rollout serve --listen 127.0.0.1:8080",
            "curl -s http://127.0.0.1:8080/v1/jwks",
        ],
        action: { try runServe($0) })

    static let appcheck = Command(
        "appcheck", summary: "The exchange's registrations: apps, debug tokens, signing keys.",
        subcommands: [
            Command(
                "app", summary: "Apps registered for App Attest.",
                subcommands: [
                    Command(
                        "add", summary: "Register (or update) an app and the project it belongs to.",
                        options: [
                            .value("--project-number", name: "N", help: "The Firebase project number."),
                            .value("--project-id", name: "ID", help: "The Firebase project id."),
                            .value("--team", name: "TEAMID", help: "The Apple team identifier."),
                            .value("--bundle", name: "BUNDLE_ID", help: "The bundle identifier."),
                            .value(
                                "--env", name: "production|development",
                                help: "The App Attest environment (default production)."),
                            .value(
                                "--token-ttl", name: "DURATION",
                                help: "App Check token lifetime, 30m to 7d (default 1h)."),
                            .flag(
                                "--trust-demo",
                                help:
                                    "Accept the demo authority's credentials for this app (simulated devices; needs 'serve --trust-demo')."
                            ),
                            .value("--code", name: "CODE", help: "A one-time code, when step-up asks for one (policy key appcheck)."),
                        ],
                        positionals: [Positional("APP_ID", help: "The Firebase app id, e.g. 1:123456789:ios:abc.")],
                        action: { try addApp($0) }),
                    Command("list", summary: "List the project and its apps.", action: { try listApps($0) }),
                    Command(
                        "remove", summary: "Remove an app and its debug tokens: the exchange refuses it from then on.",
                        options: [.value("--code", name: "CODE", help: "A one-time code, when step-up asks for one (policy key appcheck)."),],
                        positionals: [Positional("APP_ID", help: "The Firebase app id.")],
                        action: { try removeApp($0) }),
                ]),
            Command(
                "debug-token", summary: "Debug tokens for the debug provider (simulators, CI).",
                subcommands: [
                    Command(
                        "add", summary: "Register a debug token for an app and print it.",
                        options: [
                            .value("--app", name: "APP_ID", help: "The app the token is for."),
                            .value("--name", name: "NAME", help: "A name to recognise it by (default: ci)."),
                            .value(
                                "--token", name: "TOKEN",
                                help: "The token (default: a fresh UUID, as Firebase's console makes)."),
                            .value("--code", name: "CODE", help: "A one-time code, when step-up asks for one (policy key appcheck)."),
                        ],
                        action: { try addDebugToken($0) }),
                    Command(
                        "list", summary: "List the registered debug tokens (names only).",
                        action: { try listDebugTokens($0) }),
                    Command(
                        "remove", summary: "Remove an app's debug tokens of a name.",
                        options: [
                            .value("--app", name: "APP_ID", help: "The app."),
                            .value("--name", name: "NAME", help: "The name."),
                            .value("--code", name: "CODE", help: "A one-time code, when step-up asks for one (policy key appcheck)."),
                        ],
                        action: { try removeDebugToken($0) }),
                ]),
            Command(
                "keys", summary: "Token signing keys.",
                subcommands: [
                    Command(
                        "rotate", summary: "Sign with a new key; the old ones stay in the JWKS for the overlap.",
                        discussion: "The new key signs every token from now on. The keys it replaces stay published "
                            + "at /v1/jwks (and keep verifying what they signed) until the overlap ends; it must be at "
                            + "least the longest token lifetime of the registered apps, so no valid token loses its key. "
                            + "A running server picks the rotation up within seconds.",
                        options: [
                            .value(
                                "--overlap", name: "DURATION",
                                help: "How long old keys stay published (default: the longest token TTL)."),
                            .value("--code", name: "CODE", help: "A one-time code, when step-up asks for one (policy key appcheck)."),
                        ],
                        action: { try rotateKeys($0) }),
                    Command("list", summary: "List the signing keys and their state.", action: { try listKeys($0) }),
                ]),
        ])

    // MARK: serve

    static func runServe(_ inv: Invocation) throws -> ExitCode {
        // SIGTERM and SIGINT are blocked first thing, so that every thread started from here on (libmicrohttpd's
        // workers among them) inherits the mask and the signal reaches only this thread's sigwait below.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGINT)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        let listen = inv.value("--listen") ?? "127.0.0.1:8080"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            throw inv.usageError("--listen needs HOST:PORT, e.g. 127.0.0.1:8080")
        }
        let host = String(listen[..<colon])
        func int(_ option: String, _ fallback: Int, min: Int = 1) throws -> Int {
            guard let text = inv.value(option) else { return fallback }
            guard let n = Int(text), n >= min else { throw inv.usageError("\(option) needs a whole number >= \(min)") }
            return n
        }
        var limits = HTTPServerLimits()
        limits.threads = try int("--threads", 16)
        limits.connectionLimit = try int("--max-connections", 256)
        limits.connectionTimeoutSeconds = try int("--timeout", 15)
        limits.headDeadlineSeconds = Double(try int("--header-timeout", 10))
        limits.bodyDeadlineSeconds = Double(try int("--body-timeout", 30))
        limits.deadlineUnderPressureSeconds = min(limits.deadlineUnderPressureSeconds, limits.headDeadlineSeconds)
        limits.headersUnderPressureSeconds = min(limits.headersUnderPressureSeconds, limits.headDeadlineSeconds)
        // On loopback every client is 127.0.0.1: a cap per address would be a second, smaller connection limit.
        let loopback = host.hasPrefix("127.")
        limits.connectionsPerAddress = try int(
            "--max-connections-per-address", loopback ? 0 : max(1, limits.connectionLimit / 2), min: 0)
        let rate = try int("--rate-limit", 100, min: 0)
        let eventsLimit = try int("--max-events-body", 8 * 1024 * 1024)

        let target = try Wiring.session(inv)
        let clock = target.clock
        createTeamKeyIfNeeded(inv)
        let state: any AppCheckState
        let abandonStateLockWaits: @Sendable () -> Void
        do {
            // Its own connection (the exchange's lock serialises it): on a file, opened as a store so that every
            // write re-seals; a read-only session's connection refuses writes.
            let source = try target.appCheckState()
            state = source.state
            abandonStateLockWaits = source.abandonLockWaits
        } catch {
            throw CommandError("cannot open the App Check tables of \(target.label): \(error)")
        }
        let trustDemo = inv.flag("--trust-demo")
        if trustDemo { _ = try DemoCertificateAuthority.loadOrCreate(in: state) }
        let holder: ExchangeHolder
        do {
            holder = try ExchangeHolder(state: state, clock: clock, trustDemo: trustDemo) { note($0) }
        } catch let e as AppCheckSetupError {
            throw CommandError("\(target.label): \(e.reason)")
        }
        let configuration = holder.exchange().configuration
        if !trustDemo, let stored = try state.configuration(), stored.apps.contains(where: \.trustsDemoRoot) {
            note("apps registered with --trust-demo accept only Apple's root in this run (no --trust-demo given)")
        }

        // One bearer token for the backend's routes, POST /v1/events and verifyAppCheckToken: it exists whether the
        // intake is on or not.
        let token: String
        var printedToken: String?
        if let file = inv.value("--events-token-file") {
            guard let bytes = try? Files.read(file), let text = String(validating: bytes, as: UTF8.self) else {
                throw CommandError("cannot read the bearer token file \(file)")
            }
            token = text.trimmingWhitespace()
            guard token.count >= 16 else {
                throw CommandError("\(file): the bearer token must have 16 characters or more")
            }
        } else {
            token = BearerToken.fresh()
            printedToken = token
        }
        var intake: EventsIntake?
        if !inv.flag("--no-events") {
            let checker = AutoKillCheck(target: target)
            let autoKill: @Sendable () -> Void = { checker.run() }
            // One monitor for the server's life: its start cache makes each request's look O(1) in the history.
            nonisolated(unsafe) let monitor = try target.monitor()
            let monitorLock = Lock()
            let start: @Sendable () -> Instant? = {
                monitorLock.lock()
                defer { monitorLock.unlock() }
                return try? monitor.status().startedAt
            }
            // Its own connection where the backend has them, so batches do not queue behind the exchange or the monitor.
            intake = EventsIntake(
                counters: try target.separateTelemetryCounters(), bearerToken: token, clock: clock, rolloutStart: start,
                afterCommit: autoKill)
        }
        let limiter = rate > 0 ? RateLimiter(rate: Double(rate), burst: Double(2 * rate), clock: clock) : nil
        // Past the drain of a stop, the calls still waiting for a store's lock give up (`HTTPHandler.drainEnded`).
        nonisolated(unsafe) let session = target
        let service = ExchangeService(
            holder: holder, intake: intake, limiter: limiter, bearerToken: token, eventsBodyLimit: eventsLimit,
            abandonLockWaits: {
                abandonStateLockWaits()
                session.abandonLockWaits()
            })

        let logFD: Int32
        if let path = inv.value("--access-log") {
            logFD = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            guard logFD >= 0 else { throw CommandError("cannot open \(path): \(String(cString: strerror(errno)))") }
        } else {
            logFD = 2
        }
        let log: @Sendable (AccessLogEntry) -> Void = { entry in
            let bytes = Array((entry.line + "\n").utf8)
            _ = bytes.withUnsafeBytes { write(logFD, $0.baseAddress, $0.count) }
        }

        let server: HTTPServer
        do {
            server = try HTTPServer(host: host, port: port, handler: service, limits: limits, clock: clock, log: log)
        } catch let e as HTTPServerError {
            throw CommandError(e.description)
        }
        let project = configuration.project
        var banner =
            "serving App Check for project \(project.id) (\(project.number)) on http://\(host):\(server.port)\n"
        for app in configuration.apps {
            banner +=
                "  app \(app.appId) (\(app.identity.appId), \(app.environment.rawValue)"
                + (app.trustsDemoRoot ? ", trusts the demo authority" : "") + ")\n"
        }
        if let printedToken { banner += "bearer token: \(printedToken)\n" }
        if intake != nil {
            banner += "events: POST http://\(host):\(server.port)/v1/events (Authorization: Bearer TOKEN)\n"
        }
        banner +=
            "verify: POST http://\(host):\(server.port)/v1beta/projects/\(project.id):verifyAppCheckToken "
            + "(Authorization: Bearer TOKEN)\n"
        StandardStream.output.write(banner)

        var received: Int32 = 0
        sigwait(&signals, &received)
        note("\(received == SIGTERM ? "SIGTERM" : "SIGINT"): finishing requests in flight")
        let unfinished = server.shutdown()
        if logFD != 2 { close(logFD) }
        if unfinished > 0 {
            note("stopped with \(unfinished) request(s) unfinished after \(Int(limits.drainSeconds)) s")
            return .failure
        }
        note("stopped; every answered request's state is in \(target.label)")
        return .ok
    }

    /// On a team store that never recorded a team store key, with none on this machine: creates it (the
    /// signing keys and the demo authority are sealed with it), as the first enrolment does.
    static func createTeamKeyIfNeeded(_ inv: Invocation) {
        if let created = try? Wiring.teamStoreKeyForEnrolment(inv) {
            StandardStream.error.write("rollout: created the team store key \(created): give it to every operator (mode 0600)\n")
        }
    }

    /// The same check as after 'rollout ingest' (new telemetry can turn the verdict to HALT, and with
    /// auto-kill on that kills the rollout), one batch at a time.
    final class AutoKillCheck: @unchecked Sendable {
        let target: RolloutSession
        let lock = Lock()
        init(target: RolloutSession) { self.target = target }
        func run() {
            lock.withLock {
                do {
                    if !target.readOnly,
                        case .published(let stored, let proposal, _)? = try target.monitor().autoKillIfHalted(
                            using: try target.writePath())
                    {
                        note(
                            "auto-kill: \(proposal.summary) (version \(stored.info.number)): \(stored.info.description)"
                        )
                    }
                } catch {
                    note("auto-kill check failed: \(error)")
                }
            }
        }
    }

    static func note(_ line: String) {
        StandardStream.error.write("rollout serve: \(line)\n")
    }

    // MARK: appcheck

    /// The App Check state of the invocation's store (a file or a PostgreSQL team store) for reading, its label for
    /// messages and the clock. Changes go through `register` (the settings write path), never through this.
    static func state(_ inv: Invocation) throws -> (state: any AppCheckState, label: String, clock: any Clock) {
        let session = try Wiring.session(inv)
        do {
            let source = try session.appCheckState()
            return (source.state, source.label, session.clock)
        } catch {
            throw CommandError("cannot open the App Check tables of \(session.label): \(error)")
        }
    }

    static func duration(_ inv: Invocation, _ option: String) throws -> Instant.Duration? {
        guard let text = inv.value(option) else { return nil }
        do { return try ScenarioValues.duration(text) } catch { throw inv.usageError("\(option): \(error)") }
    }

    /// Applies an App Check registration through the settings write path: validated, judged by step-up (policy
    /// key `appcheck`), applied and audited in one transaction; `--read-only` and refusals exit 4.
    static func register(_ inv: Invocation, _ change: SettingsWritePath.AppCheckChange) throws -> String {
        // The first write of private keys to a team store makes this machine's team store key, as 'operator
        // enroll' does (the exchange's keys are sealed with it); nothing on other stores or under --read-only.
        createTeamKeyIfNeeded(inv)
        let path = try OperatorCommands.settingsPath(inv)
        let actor = StoreLocation.operatorID(inv)
        // A code is read only when one will be asked for (a terminal prompt otherwise waits for nothing).
        let code = try path.read { db -> String? in
            guard try db.isEnforced(),
                !requiresStepUp(StepUpChange(.appCheckChange), policy: try db.stepUpPolicy()).isEmpty
            else { return nil }
            return try OperatorCommands.readCode(inv.value("--code"), prompt: "Code of \(actor)'s authenticator: ")
        }
        do {
            guard case .appCheckChanged(let done) = try OperatorCommands.settings(
                path, .appCheck(change), actor: actor, code: code)
            else { throw CommandError("the App Check change reported no outcome") }
            return done
        } catch WritePath.Failure.readOnly(let cause) {
            throw CommandError("refused: \(cause); nothing was changed", exit: .refused)
        }
    }

    static func addApp(_ inv: Invocation) throws -> ExitCode {
        guard let appId = inv.positional(0), !appId.isEmpty, !appId.contains("/") else {
            throw inv.usageError("missing APP_ID (a Firebase app id such as 1:123456789:ios:abc)")
        }
        func required(_ o: String) throws -> String {
            guard let v = inv.value(o), !v.isEmpty else { throw inv.usageError("missing \(o)") }
            return v
        }
        let existing = try OperatorCommands.settingsPath(inv).read { try $0.appCheckState().configuration() }
        let number = inv.value("--project-number") ?? existing?.project.number
        let id = inv.value("--project-id") ?? existing?.project.id
        guard let number, let id, !number.isEmpty, !id.isEmpty else {
            throw inv.usageError("the first app needs --project-number and --project-id")
        }
        guard number.allSatisfy(\.isNumber) else {
            throw inv.usageError("--project-number is the project's number (digits)")
        }
        guard let env = AppAttestEnvironment(rawValue: inv.value("--env") ?? "production") else {
            throw inv.usageError("--env must be production or development")
        }
        let ttl = try duration(inv, "--token-ttl") ?? .hours(1)
        guard AppAttestApp.tokenTTLRange.contains(ttl) else {
            throw inv.usageError("--token-ttl must be 30m to 7d (Firebase's bounds)")
        }
        let app = AppAttestApp(
            appId: appId, identity: AppIdentity(teamId: try required("--team"), bundleId: try required("--bundle")),
            environment: env, trustsDemoRoot: inv.flag("--trust-demo"), tokenTTL: ttl)
        let done = try register(inv, .registerApp(app, project: AppCheckProject(number: number, id: id)))
        print("registered \(done)")
        return .ok
    }

    static func removeApp(_ inv: Invocation) throws -> ExitCode {
        guard let appId = inv.positional(0), !appId.isEmpty else { throw inv.usageError("missing APP_ID") }
        print(try register(inv, .removeApp(appId: appId)))
        return .ok
    }

    static func listApps(_ inv: Invocation) throws -> ExitCode {
        let (state, label, _) = try Self.state(inv)
        guard let c = try state.configuration() else {
            print("no App Check apps in \(label) (rollout appcheck app add)")
            return .ok
        }
        print("project \(c.project.id) (\(c.project.number))")
        for a in c.apps {
            print(
                "  \(a.appId)  \(a.identity.appId)  \(a.environment.rawValue)  ttl \(Int(a.tokenTTL.seconds))s"
                    + (a.trustsDemoRoot ? "  trusts the demo authority" : ""))
        }
        return .ok
    }

    static func addDebugToken(_ inv: Invocation) throws -> ExitCode {
        guard let appId = inv.value("--app") else { throw inv.usageError("missing --app") }
        let token = inv.value("--token") ?? randomUUIDString()
        guard token.count >= 16 else { throw inv.usageError("--token must have 16 characters or more") }
        _ = try register(
            inv,
            .addDebugToken(
                DebugTokenRecord(
                    appId: appId, digest: SHA256.hash(Array(token.utf8)), name: inv.value("--name") ?? "ci",
                    createdAt: SystemClock().now())))
        print(token)
        return .ok
    }

    static func listDebugTokens(_ inv: Invocation) throws -> ExitCode {
        let (state, _, _) = try Self.state(inv)
        for t in try state.debugTokenSummaries() { print("\(t.appId)  \(t.name)  added \(t.createdAt.iso8601)") }
        return .ok
    }

    static func removeDebugToken(_ inv: Invocation) throws -> ExitCode {
        guard let appId = inv.value("--app"), let name = inv.value("--name") else {
            throw inv.usageError("give --app and --name")
        }
        print(try register(inv, .removeDebugToken(appId: appId, name: name)))
        return .ok
    }

    static func rotateKeys(_ inv: Invocation) throws -> ExitCode {
        print(try register(inv, .rotateKeys(overlap: try duration(inv, "--overlap"))))
        return .ok
    }

    static func listKeys(_ inv: Invocation) throws -> ExitCode {
        let (state, _, clock) = try Self.state(inv)
        let now = clock.now()
        let keys = try state.signingKeySummaries()
        let signing = AppCheckExchange.signingOrder(keys, at: now).last
        for k in keys {
            let what =
                k.kid == signing?.kid
                ? "signing" : k.isPublished(at: now) ? "published until \(k.retiresAt!.iso8601)" : "retired"
            print("\(k.kid)  created \(k.createdAt.iso8601)  \(what)")
        }
        return .ok
    }
}
