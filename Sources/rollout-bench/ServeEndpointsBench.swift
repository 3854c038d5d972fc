import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import PostgresStore
import SQLiteStore
import StoreSupport
import TestSupport
import Timekeeping

/// `rollout serve` per endpoint over loopback, at 1, 8 and 64 clients (keep-alive connections, one thread each):
/// `generateAppAttestChallenge`, `exchangeAppAttestAttestation` (demo-CA attestations), `exchangeAppAttestAssertion`,
/// `exchangeDebugToken` and the limited-use consume (`verifyAppCheckToken`; its tokens are minted before the window,
/// so the window holds consumes alone), then a SIGKILL drill under load.
///
/// Peers measured in the same run: `openssl speed` per core (the server's cryptography per request: challenge 1
/// HMAC-SHA256 of about 64 bytes, since a challenge authenticates itself and issuing it writes nothing;
/// attestation 2 P-256 verifies and 1 RSA-2048 signature, assertion 1 P-256 verify and 1 RSA-2048 signature, debug
/// token 1 RSA-2048 signature), times the cores, and one `fdatasync` of this file system (a group commit syncs
/// twice: the WAL and the witness). The clients run on the same cores as the server (the attestation clients sign a
/// credential certificate per request), so every figure is what both together reach.
///
/// Bounded: `ROLLOUT_BENCH_ENDPOINT_SECONDS` (default 3, at most 20) per endpoint and client count. Profiling aids:
/// `ROLLOUT_BENCH_ENDPOINTS` (see `run`) and `ROLLOUT_BENCH_THREADS` (the server's worker threads, default 16).
enum ServeEndpointsBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "serve-endpoints",
            title: "rollout serve per endpoint at 1, 8 and 64 clients vs openssl speed per core; SIGKILL drill", run: run)
    ]

    static let app = ServeBench.app
    static let identity = ServeBench.identity
    static func path(_ method: String) -> String { "/v1/projects/bench/apps/\(app):\(method)" }
    static let verifyPath = "/v1beta/projects/bench:verifyAppCheckToken"

    /// `verifyAppCheckToken` for `token`, with the server's bearer token, as a backend asks it.
    static func verify(_ http: LoopbackHTTPClient, _ token: String) throws -> (status: Int, body: [UInt8]) {
        let r = try http.request(
            "POST", verifyPath,
            headers: [("Content-Type", "application/json"), ("Authorization", "Bearer \(ServeBench.bearerToken)")],
            body: Array("{\"appCheckToken\":\"\(token)\"}".utf8))
        return (r.status, r.body)
    }

    /// Latencies of the measured method, errors of any request, from all client threads.
    final class Tally: @unchecked Sendable {
        let lock = NSLock()
        var latencies: [UInt64] = []
        var errors = 0
        var firstError: String?
        func record(_ ns: UInt64) { lock.withLock { latencies.append(ns) } }
        func fail(_ e: String) {
            lock.withLock {
                errors += 1
                if firstError == nil { firstError = e }
            }
        }
    }

    /// A transport that times only the requests of one method, and only those that start inside the window.
    final class MethodTimer: AppCheckHTTPTransport, @unchecked Sendable {
        let client: LoopbackHTTPClient
        let method: String
        let tally: Tally
        let windowStart: UInt64
        init(_ client: LoopbackHTTPClient, method: String, tally: Tally, windowStart: UInt64) {
            self.client = client
            self.method = method
            self.tally = tally
            self.windowStart = windowStart
        }
        func post(path: String, body: [UInt8]) throws -> (status: Int, body: [UInt8]) {
            let start = Stopwatch.nanoseconds()
            let r = try client.post(path: path, body: body)
            if path.hasSuffix(":" + method), start >= windowStart, r.status == 200 {
                tally.record(Stopwatch.nanoseconds() - start)
            }
            return r
        }
    }

    enum Endpoint: String, CaseIterable {
        case challenge, attestation, assertion, debugToken = "debug token", consume = "limited-use consume"
    }

    struct Figures {
        var rate: Double
        var p50: Double
        var p99: Double
        var errors: Int
        var firstError: String?
        /// The server's CPU seconds (user and system, all threads) per second of the measured window: the cores
        /// it used.
        var serverCores: Double?
    }

    /// CPU seconds `pid` has used so far (user and system, all threads), from /proc/PID/stat.
    static func cpuSeconds(of pid: pid_t) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return 0 }
        // After "pid (comm)": field 3 is the state; utime and stime are fields 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func json(_ bytes: [UInt8]) -> JSONValue? { try? JSONParser().parse(String(decoding: bytes, as: UTF8.self)) }

    /// `clients` threads hitting `endpoint` for `seconds` after a warm-up (attestations for the assertion clients).
    /// `ports`: the servers' ports, client i asking the (i mod count)th; `server`: the process whose CPU is measured.
    static func measure(
        _ endpoint: Endpoint, clients: Int, seconds: Double, ports: [UInt16], authority: DemoCertificateAuthority,
        debugToken: String, server: pid_t?
    ) -> Figures {
        let tally = Tally()
        // The consume clients' tokens are minted before the window (one RSA signature each on the server), so the
        // window holds consumes alone, as it holds one endpoint's requests for every other endpoint.
        let minted = endpoint == .consume
            ? mintLimitedUseTokens(clients: clients, ports: ports, debugToken: debugToken, tally: tally) : nil
        let warmUp = endpoint == .assertion ? 1.5 : 0.3
        let windowStart = Stopwatch.nanoseconds() + UInt64(warmUp * 1e9)
        let deadline = windowStart + UInt64(seconds * 1e9)
        let group = DispatchGroup()
        let ends = Tally()
        for c in 0..<clients {
            group.enter()
            Thread.detachNewThread {
                defer {
                    ends.record(Stopwatch.nanoseconds())
                    group.leave()
                }
                do {
                    let http = try LoopbackHTTPClient(host: "127.0.0.1", port: ports[c % ports.count])
                    try loop(endpoint, http: http, tally: tally, windowStart: windowStart, deadline: deadline,
                        authority: authority, debugToken: debugToken, tokens: minted?[c] ?? [])
                } catch {
                    tally.fail("\(error)")
                }
            }
        }
        func waitUntil(_ t: UInt64) {
            while Stopwatch.nanoseconds() < t { usleep(UInt32(min(100_000, (t - min(t, Stopwatch.nanoseconds())) / 1000 + 1))) }
        }
        waitUntil(windowStart)
        let cpu0 = server.map(cpuSeconds(of:))
        // Every client stops at the deadline, or earlier when its minted tokens run out: the window is then
        // as long as the last client kept asking.
        while Stopwatch.nanoseconds() < deadline, ends.lock.withLock({ ends.latencies.count }) < clients {
            usleep(UInt32(min(20_000, (deadline - min(deadline, Stopwatch.nanoseconds())) / 1000 + 1)))
        }
        let cpu1 = server.map(cpuSeconds(of:))
        let cpuEnd = min(deadline, Stopwatch.nanoseconds())
        group.wait()
        let windowEnd = min(deadline, ends.latencies.max() ?? deadline)
        let window = max(Double(windowEnd) - Double(windowStart), 1e6) / 1e9
        let cpuWindow = max(Double(cpuEnd) - Double(windowStart), 1e6) / 1e9
        let sorted = tally.latencies.sorted()
        // A window in which nothing was answered measured nothing: it counts as an error, never as a figure.
        if sorted.isEmpty { tally.fail("no \(endpoint.rawValue) answered in the window") }
        func pct(_ p: Double) -> Double {
            sorted.isEmpty ? 0 : Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6
        }
        return Figures(
            rate: Double(sorted.count) / window, p50: pct(0.5), p99: pct(0.99), errors: tally.errors,
            firstError: tally.firstError,
            serverCores: cpu0.flatMap { c0 in cpu1.map { ($0 - c0) / cpuWindow } })
    }

    /// Limited-use tokens for the consume clients, minted through `exchangeDebugToken` by `clients` connections at
    /// once before the window: `ROLLOUT_BENCH_CONSUME_TOKENS` in all (default 40,000, at least 100 per client: more than a window consumes here).
    static func mintLimitedUseTokens(clients: Int, ports: [UInt16], debugToken: String, tally: Tally) -> [[String]] {
        let total = Int(ProcessInfo.processInfo.environment["ROLLOUT_BENCH_CONSUME_TOKENS"] ?? "") ?? 40_000
        let each = max(100, total / clients)
        let body = Array("{\"debugToken\":\"\(debugToken)\",\"limitedUse\":true}".utf8)
        nonisolated(unsafe) var tokens = [[String]](repeating: [], count: clients)
        let lock = NSLock()
        DispatchQueue.concurrentPerform(iterations: clients) { c in
            var mine: [String] = []
            do {
                let http = try LoopbackHTTPClient(host: "127.0.0.1", port: ports[c % ports.count])
                for _ in 0..<each {
                    let r = try http.post(path: path("exchangeDebugToken"), body: body)
                    guard r.status == 200, let token = json(r.body)?["token"]?.stringValue else {
                        throw BenchError("limited-use token: HTTP \(r.status)")
                    }
                    mine.append(token)
                }
            } catch {
                tally.fail("\(error)")
            }
            lock.withLock { tokens[c] = mine }
        }
        return tokens
    }

    static func loop(
        _ endpoint: Endpoint, http: LoopbackHTTPClient, tally: Tally, windowStart: UInt64, deadline: UInt64,
        authority: DemoCertificateAuthority, debugToken: String, tokens: [String] = []
    ) throws {
        func timed(_ path: String, _ body: [UInt8], verifying token: String? = nil) throws -> [UInt8] {
            let start = Stopwatch.nanoseconds()
            let r = try token.map { try verify(http, $0) } ?? http.post(path: path, body: body)
            guard r.status == 200 else { throw BenchError("\(path): HTTP \(r.status)") }
            if start >= windowStart { tally.record(Stopwatch.nanoseconds() - start) }
            return r.body
        }
        let debugBody = Array("{\"debugToken\":\"\(debugToken)\"}".utf8)
        switch endpoint {
        case .challenge:
            while Stopwatch.nanoseconds() < deadline {
                do { _ = try timed(path("generateAppAttestChallenge"), Array("{}".utf8)) } catch {
                    tally.fail("\(error)")
                }
            }
        case .debugToken:
            while Stopwatch.nanoseconds() < deadline {
                do { _ = try timed(path("exchangeDebugToken"), debugBody) } catch { tally.fail("\(error)") }
            }
        case .consume:
            for token in tokens {
                guard Stopwatch.nanoseconds() < deadline else { break }
                do {
                    let answer = try timed(verifyPath, [], verifying: token)
                    if json(answer)?["alreadyConsumed"] != nil { throw BenchError("a fresh token was already consumed") }
                } catch {
                    tally.fail("\(error)")
                }
            }
        case .attestation, .assertion:
            let method = endpoint == .attestation ? "exchangeAppAttestAttestation" : "exchangeAppAttestAssertion"
            let remote = RemoteAppCheckExchange(
                transport: MethodTimer(http, method: method, tally: tally, windowStart: windowStart), project: "bench")
            let key = try SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
            let client = SimulatedAppCheckClient(key: key, appId: app)
            if endpoint == .assertion { _ = try client.attest(with: remote, at: SystemClock().now()) }
            while Stopwatch.nanoseconds() < deadline {
                do {
                    if endpoint == .attestation {
                        _ = try client.attest(with: remote, at: SystemClock().now())
                    } else {
                        _ = try client.token(from: remote, at: SystemClock().now())
                    }
                } catch {
                    tally.fail("\(error)")
                }
            }
        }
    }

    /// A limited-use token's `jti` and `exp`, read from its payload (the server verified it).
    static func tokenIdAndExpiry(_ token: String) -> (String, Int64)? {
        let parts = token.split(separator: ".")
        guard parts.count == 3, let payload = Base64.decode(String(parts[1]), .jwt),
            let claims = json(payload), let id = claims["jti"]?.stringValue,
            let exp = claims["exp"]?.numberValue?.double
        else { return nil }
        return (id, Int64(exp))
    }

    /// HMACs per second from `openssl speed -bytes 64 -hmac sha256` (its figure is thousands of bytes per second).
    static func hmacPerSecond(_ lines: [String]) throws -> Double {
        guard let line = lines.last(where: { $0.hasPrefix("hmac(sha256)") }),
            let field = line.split(separator: " ").last, field.hasSuffix("k"), let k = Double(field.dropLast())
        else { throw BenchError("openssl speed printed no hmac(sha256) figure") }
        return k * 1000 / 64
    }

    /// Seconds of one 4 KiB write and `fdatasync` in `directory` (the median of 50).
    static func syncSeconds(in directory: String) -> Double {
        let path = directory + "/sync-probe"
        let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        defer {
            close(fd)
            unlink(path)
        }
        let block = [UInt8](repeating: 1, count: 4096)
        var samples: [Double] = []
        for i in 0..<50 {
            let start = Stopwatch.nanoseconds()
            _ = block.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t(i * 4096)) }
            fdatasync(fd)
            samples.append(Double(Stopwatch.nanoseconds() - start) / 1e9)
        }
        return samples.sorted()[samples.count / 2]
    }

    static func run() throws {
        let env = ProcessInfo.processInfo.environment
        let seconds = min(20, max(1, Double(env["ROLLOUT_BENCH_ENDPOINT_SECONDS"] ?? "") ?? 3))
        let rollout = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("rollout").path
        guard FileManager.default.isExecutableFile(atPath: rollout) else {
            throw BenchError("\(rollout) not built (make bench builds it)")
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-endpoints-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        _ = try runCapture(rollout, ["init", "--store", store, "--seed", "bench"])
        _ = try runCapture(
            rollout,
            [
                "appcheck", "app", "add", app, "--project-number", "777", "--project-id", "bench", "--team",
                identity.teamId, "--bundle", identity.bundleId, "--trust-demo", "--store", store,
            ])
        let debugToken = try runCapture(
            rollout, ["appcheck", "debug-token", "add", "--app", app, "--name", "bench", "--store", store]
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        let authority = try DemoCertificateAuthority.loadOrCreate(
            in: AppCheckStateTables(database: RolloutStore(path: store, create: false).database))

        // The peers: openssl speed on one core (the median of three runs), and one sync of this file system.
        let speed = OpenSSLSpeedRuns(try (0..<3).map { _ in try AppCheckBench.openSSLSpeedRun(["ecdsap256", "rsa2048"]) })
        let p256Verify = try speed.median(row: "ecdsa (nistp256)", column: "verify/s")
        let rsaSign = try speed.median(row: "rsa 2048", column: "sign/s")
        let hmac = try (0..<3).map { _ in
            try hmacPerSecond(try AppCheckBench.openSSLSpeedRun(["-bytes", "64", "-hmac", "sha256"]))
        }.sorted()[1]
        let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
        let sync = syncSeconds(in: dir.path)
        print(
            "  openssl speed here, one core: HMAC-SHA256 (64 bytes) \(formatFigure(hmac))/s, P-256 verify "
                + "\(formatFigure(p256Verify))/s, RSA-2048 sign \(formatFigure(rsaSign))/s; \(Int(cores)) cores; "
                + "one fdatasync \(formatFigure(sync * 1e3)) ms")
        let ceilings: [Endpoint: (String, Double)] = [
            .challenge: ("1 HMAC-SHA256 per core x cores", cores * hmac),
            .attestation: ("2 P-256 verifies + 1 RSA sign per core x cores", cores / (2 / p256Verify + 1 / rsaSign)),
            .assertion: ("1 P-256 verify + 1 RSA sign per core x cores", cores / (1 / p256Verify + 1 / rsaSign)),
            .debugToken: ("1 RSA sign per core x cores", cores * rsaSign),
        ]

        let (server, port) = try ServeBench.serverProcess(
            rollout, store: store, log: dir.appendingPathComponent("access.log").path, threads: Int(env["ROLLOUT_BENCH_THREADS"] ?? "") ?? 16)
        defer {
            if server.isRunning {
                kill(server.processIdentifier, SIGTERM)
                server.waitUntilExit()
            }
        }
        // `ROLLOUT_BENCH_ENDPOINTS` (e.g. `consume:64,assertion`): only the endpoints whose name holds one of the
        // words, at the client count given (every count when none), and no kill drill. A profiling aid: every
        // endpoint and count when unset.
        let only = (env["ROLLOUT_BENCH_ENDPOINTS"] ?? "").split(separator: ",").map { $0.split(separator: ":").map(String.init) }
        func selected(_ endpoint: Endpoint, _ clients: Int) -> Bool {
            only.isEmpty || only.contains { endpoint.rawValue.contains($0[0]) && ($0.count == 1 || $0[1] == "\(clients)") }
        }
        var challengeRates: [Int: Double] = [:]
        for endpoint in Endpoint.allCases {
            for clients in [1, 8, 64] where selected(endpoint, clients) {
                let f = measure(
                    endpoint, clients: clients, seconds: seconds, ports: [port], authority: authority,
                    debugToken: debugToken, server: server.processIdentifier)
                let label = "\(endpoint.rawValue), \(clients) client\(clients == 1 ? "" : "s")"
                print(
                    "  \(label): \(formatFigure(f.rate)) req/s, p50 \(formatFigure(f.p50)) ms, p99 "
                        + "\(formatFigure(f.p99)) ms, \(f.errors) errors; serve used \(formatFigure(f.serverCores ?? 0)) of "
                        + "\(Int(cores)) cores")
                if let e = f.firstError { print("    first error: \(e)") }
                if let (what, ceiling) = ceilings[endpoint] {
                    // Against every core of the machine (the clients run on them too), and against the cores the
                    // server used in the window: the issue's target is the second, "x cores used".
                    report("  \(label) req/s", value: f.rate, unit: "req/s", against: ("ceiling: \(what)", ceiling))
                    let used = max(f.serverCores ?? cores, 0.01)
                    report(
                        "  \(label) req/s", value: f.rate, unit: "req/s",
                        against: ("ceiling per core x \(formatFigure(used)) cores serve used", ceiling / cores * used),
                        target: endpoint == .assertion && clients > 1 ? (0.5, true) : nil)
                }
                if endpoint == .challenge { challengeRates[clients] = f.rate }
                switch (endpoint, clients) {
                case (.challenge, 8):
                    report("  \(label) req/s", value: f.rate, unit: "req/s", limit: 10_000, higherIsBetter: true)
                    report("  \(label) p99", value: f.p99, unit: "ms", limit: 10, higherIsBetter: false)
                case (.consume, _):
                    report("  \(label) p50", value: f.p50, unit: "ms", limit: 2, higherIsBetter: false)
                    if clients > 1 {
                        // Each client waits for its answer before it asks again (a closed loop): by Little's law the
                        // mean time a request spends is clients / throughput, so a p50 of 2 ms for all of them asks for
                        // about clients / 2 ms requests a second from the machine that also runs the clients.
                        let challenge = challengeRates[clients].map { ", challenge (no signature, no token) \(formatFigure($0)) req/s" }
                        print(
                            "    closed loop: \(clients) clients / \(formatFigure(f.rate)) req/s = \(formatFigure(Double(clients) / f.rate * 1_000)) ms "
                                + "mean; p50 <= 2 ms for all \(clients) needs about \(formatFigure(Double(clients) / 0.002)) req/s"
                                + (challenge ?? ""))
                    }
                default: break
                }
                report("  \(label) errors", value: Double(f.errors), unit: "requests", limit: 0, higherIsBetter: false)
            }
        }
        kill(server.processIdentifier, SIGTERM)
        server.waitUntilExit()
        if only.isEmpty {
            try killDrill(rollout: rollout, store: store, dir: dir.path, authority: authority, debugToken: debugToken)
        }
    }

    /// SIGKILL while 8 clients ask for challenges, assert and consume limited-use tokens: afterwards every
    /// answered challenge authenticates and is unused, every device's stored counter is its last answered assertion's
    /// (or higher: an assertion committed whose answer the kill cut off), and every consumption answered is
    /// recorded (consuming the token again says it was consumed).
    static func killDrill(
        rollout: String, store: String, dir: String, authority: DemoCertificateAuthority, debugToken: String
    ) throws {
        let (server, port) = try ServeBench.serverProcess(
            rollout, store: store, log: dir + "/access-kill.log", threads: 16)
        final class Answered: @unchecked Sendable {
            let lock = NSLock()
            var challenges: [[UInt8]] = []
            var counters: [Int: (artifact: [UInt8], counter: UInt32)] = [:]
            var consumed: [(id: String, expiresAt: Int64)] = []
            var stop = false
        }
        let answered = Answered()
        let group = DispatchGroup()
        for i in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard let http = try? LoopbackHTTPClient(host: "127.0.0.1", port: port) else { return }
                let key = try? SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
                let client = key.map { SimulatedAppCheckClient(key: $0, appId: app) }
                let remote = RemoteAppCheckExchange(transport: http, project: "bench")
                while !answered.lock.withLock({ answered.stop }) {
                    switch i % 3 {
                    case 0:
                        guard let r = try? http.post(path: path("generateAppAttestChallenge"), body: Array("{}".utf8)),
                            r.status == 200, let c = json(r.body)?["challenge"]?.stringValue.flatMap({ Base64.decode($0) })
                        else { return }
                        answered.lock.withLock { answered.challenges.append(c) }
                    case 1:
                        guard let client, let key, (try? client.token(from: remote, at: SystemClock().now())) != nil
                        else { return }
                        answered.lock.withLock { answered.counters[i] = (client.artifact!, key.counter) }
                    default:
                        let body = Array("{\"debugToken\":\"\(debugToken)\",\"limitedUse\":true}".utf8)
                        guard let r = try? http.post(path: path("exchangeDebugToken"), body: body), r.status == 200,
                            let token = json(r.body)?["token"]?.stringValue,
                            let v = try? verify(http, token),
                            v.status == 200, json(v.body)?["alreadyConsumed"] == nil,
                            let (id, expiresAt) = tokenIdAndExpiry(token)
                        else { return }
                        answered.lock.withLock { answered.consumed.append((id, expiresAt)) }
                    }
                }
            }
        }
        usleep(1_500_000)
        kill(server.processIdentifier, SIGKILL)
        server.waitUntilExit()
        answered.lock.withLock { answered.stop = true }
        group.wait()
        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        var lost = 0
        // An answered challenge is lost when the store can no longer redeem it: another exchange on the store must
        // authenticate it (it carries its own proof) and find it unused.
        let exchange = try AppCheckExchange(configuration: try state.configuration()!, state: state, clock: SystemClock())
        for c in answered.challenges {
            let expiresAt = try? exchange.authenticChallengeExpiry(c, appId: app)
            if try expiresAt.map({ try state.redeemChallenge(c, appId: app, expiresAt: $0) }) != .redeemed { lost += 1 }
        }
        for (_, d) in answered.counters {
            let stored = try state.attestedKey(appId: app, artifactDigest: SHA256.hash(d.artifact))
            if (stored?.counter ?? 0) < d.counter || stored == nil { lost += 1 }
        }
        for t in answered.consumed
        where try state.consumeToken(id: t.id, expiresAt: Instant(seconds: t.expiresAt)) { lost += 1 }
        print(
            "  SIGKILL after 1.5 s of 8 clients: \(answered.challenges.count) challenges, "
                + "\(answered.counters.count) devices' counters, \(answered.consumed.count) consumptions answered before it")
        report("answered state lost to SIGKILL", value: Double(lost), unit: "items", limit: 0, higherIsBetter: false)
    }
}

/// `openssl speed` runs' lines, read as `AppCheckBench.OpenSSLSpeed` does.
struct OpenSSLSpeedRuns {
    let speed: AppCheckBench.OpenSSLSpeed
    init(_ outputs: [[String]]) { speed = AppCheckBench.OpenSSLSpeed(outputs: outputs) }
    func median(row: String, column: String) throws -> Double { try speed.figure(row: row, column: column).median }
}

/// Two `rollout serve` processes on one PostgreSQL team store against one: limited-use consumes (each a durable
/// write of the consumed token to the store, group-committed per process; a challenge writes nothing since it
/// authenticates itself, so it would measure the machine's cores, not the store; the tokens are minted before the
/// window, from both processes when there are two) from 16 clients, all on one
/// process and then 8 on each, with the same server, then the replay check across both: each of 40 devices sends
/// one assertion to both processes at once, and exactly one of the two is answered with a token.
enum ServePostgresBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "serve-postgres", title: "two rollout serve processes on one PostgreSQL store vs one; replay across them",
            run: run)
    ]

    static func run() throws {
        let env = ProcessInfo.processInfo.environment
        let seconds = min(20, max(1, Double(env["ROLLOUT_BENCH_ENDPOINT_SECONDS"] ?? "") ?? 3))
        let rollout = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("rollout").path
        let server = try PostgresServer(tcp: false, durable: true)
        defer { server.stop() }
        let conninfo = try server.database("serve")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-serve-pg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let environment = [
            "ROLLOUT_STORE_KEY": dir.appendingPathComponent("team.key").path, "ROLLOUT_OPERATOR": "bench@rollout",
        ]
        @discardableResult
        func cli(_ arguments: [String]) throws -> String {
            let p = Process()
            let out = Pipe()
            p.executableURL = URL(fileURLWithPath: rollout)
            p.arguments = arguments + ["--store", conninfo]
            p.environment = env.merging(environment) { $1 }
            p.standardOutput = out
            p.standardError = FileHandle.nullDevice
            try p.run()
            let printed = out.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            guard p.terminationStatus == 0 else { throw BenchError("rollout \(arguments.joined(separator: " ")) failed") }
            return String(decoding: printed, as: UTF8.self)
        }
        try cli(["init", "--seed", "bench"])
        try cli([
            "appcheck", "app", "add", ServeBench.app, "--project-number", "777", "--project-id", "bench", "--team",
            ServeBench.identity.teamId, "--bundle", ServeBench.identity.bundleId, "--trust-demo",
        ])
        let debugToken = try cli(["appcheck", "debug-token", "add", "--app", ServeBench.app, "--name", "bench"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        func start(_ name: String) throws -> (Process, UInt16) {
            try ServeBench.serverProcess(
                rollout, store: conninfo, log: dir.appendingPathComponent("\(name).log").path, threads: 16,
                environment: environment)
        }
        let a = try start("a")
        let b = try start("b")
        defer {
            for p in [a.0, b.0] where p.isRunning {
                kill(p.processIdentifier, SIGTERM)
                p.waitUntilExit()
            }
        }
        let authority = try DemoCertificateAuthority.loadOrCreate(
            in: PostgresAppCheckState(
                store: try PostgresConfigStore(conninfo: conninfo), key: try StoreKey.load(environment["ROLLOUT_STORE_KEY"]!)))

        /// The machine's busy share of all its cores over a load (from /proc/stat): whether the cores, not the
        /// store, bound it.
        func machineTicks() -> (busy: Double, all: Double) {
            guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
                let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
            else { return (0, 0) }
            let f = line.split(separator: " ").dropFirst().compactMap { Double($0) }
            guard f.count >= 5 else { return (0, 0) }
            let all = f.prefix(8).reduce(0, +)
            return (all - f[3] - f[4], all)
        }
        func load(_ ports: [UInt16]) -> (ServeEndpointsBench.Figures, Double) {
            let t0 = machineTicks()
            let f = ServeEndpointsBench.measure(
                .consume, clients: 16, seconds: seconds, ports: ports, authority: authority, debugToken: debugToken,
                server: nil)
            let t1 = machineTicks()
            // Includes the minting before the window (RSA signatures, as busy as the window itself).
            return (f, t1.all > t0.all ? (t1.busy - t0.busy) / (t1.all - t0.all) : 0)
        }
        let (one, busyOne) = load([a.1])
        let (two, busyTwo) = load([a.1, b.1])
        for (label, f, busy) in [("one process", one, busyOne), ("two processes", two, busyTwo)] {
            print(
                "  limited-use consumes, 16 clients, \(label): \(formatFigure(f.rate)) req/s, p50 \(formatFigure(f.p50)) ms, p99 "
                    + "\(formatFigure(f.p99)) ms, \(f.errors) errors; the machine's cores \(Int((busy * 100).rounded()))% busy")
            if let e = f.firstError { print("    first error: \(e)") }
        }
        report(
            "two serve processes on one PostgreSQL store", value: two.rate, unit: "req/s",
            against: ("one process", one.rate), target: (1.6, true))
        print("    (\(ProcessInfo.processInfo.activeProcessorCount) cores for both processes, PostgreSQL and the 16 clients)")

        // Replay across the processes: one assertion, both processes at once, exactly one token.
        let ports = [a.1, b.1]
        @Sendable func remote(_ i: Int) throws -> RemoteAppCheckExchange {
            try RemoteAppCheckExchange(transport: LoopbackHTTPClient(host: "127.0.0.1", port: ports[i]), project: "bench")
        }
        var doubles = 0
        var none = 0
        for _ in 0..<40 {
            let key = try SimulatedAppAttestKey(authority: authority, app: ServeBench.identity, environment: .production)
            let client = SimulatedAppCheckClient(key: key, appId: ServeBench.app)
            _ = try client.attest(with: try remote(0), at: SystemClock().now())
            let challenge = try remote(1).generateChallenge(appId: ServeBench.app).challenge
            let assertion = try key.assertion(clientDataHash: SHA256.hash(client.artifact! + challenge))
            let results = NSLock()
            nonisolated(unsafe) var answered = 0
            let artifact = client.artifact!
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                if let r = try? remote(i),
                    (try? r.exchangeAssertion(
                        appId: ServeBench.app, artifact: artifact, assertion: assertion, challenge: challenge,
                        limitedUse: false)) != nil
                {
                    results.withLock { answered += 1 }
                }
            }
            if answered > 1 { doubles += 1 }
            if answered == 0 { none += 1 }
        }
        print("  replay across the two processes: 40 assertions each sent to both at once; \(none) answered by neither")
        report("assertions answered twice", value: Double(doubles), unit: "of 40", limit: 0, higherIsBetter: false)
        report("errors", value: Double(one.errors + two.errors + none), unit: "requests", limit: 0, higherIsBetter: false)
    }
}
