import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import SQLiteStore
import Timekeeping

/// `rollout serve` under load on loopback: 64 simulated devices (demo authority) attest once and then assert
/// in a loop against the server process, with a SIGTERM in the middle and a restart on the same store.
///
/// Bounded: `ROLLOUT_BENCH_SERVE_SECONDS` (default 20, at most 60) in total, 64 clients
/// (`ROLLOUT_BENCH_SERVE_CLIENTS`, at most 64). Printed: HTTP requests/s, p50/p99 latency as the clients see it,
/// the share of the server's request time spent in cryptography (each operation timed alone on this machine,
/// times its count, over the server's summed request time from its access log), errors (any failed request
/// before the SIGTERM or after the restart: limit 0), and lost state (devices whose stored counter differs from
/// their last answered assertion after the SIGTERM, or whose artifact no longer works after the restart: limit 0).
enum ServeBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "serve", title: "rollout serve on loopback: 64 devices, SIGTERM and restart in the middle", run: run),
        BenchSuite(
            name: "serve-slowloris",
            title: "rollout serve on loopback: 8 honest clients while 300 connections trickle their headers",
            run: SlowLorisDrill.run),
    ]

    static let app = "1:777:ios:bench"
    static let identity = AppIdentity(teamId: "BENCH12345", bundleId: "com.example.bench")

    /// Times each HTTP request.
    final class TimedTransport: AppCheckHTTPTransport, @unchecked Sendable {
        let client: LoopbackHTTPClient
        let record: @Sendable (UInt64) -> Void
        init(_ client: LoopbackHTTPClient, record: @escaping @Sendable (UInt64) -> Void) {
            self.client = client
            self.record = record
        }
        func post(path: String, body: [UInt8]) throws -> (status: Int, body: [UInt8]) {
            let start = Stopwatch.nanoseconds()
            let r = try client.post(path: path, body: body)
            record(Stopwatch.nanoseconds() - start)
            return r
        }
    }

    final class Shared: @unchecked Sendable {
        let lock = NSLock()
        var latencies: [UInt64] = []
        var errors: [String] = []
        var phase = 0  // 0: first server, 1: draining, 2: second server, 3: stop
        var port: UInt16 = 0
        var devices: [Int: (artifact: [UInt8], counter: UInt32)] = [:]
        var afterRestartOK = Set<Int>()
        /// Devices with a request under way.
        var busy = 0
        var attestations = 0
        var assertions = 0
    }

    /// The servers' bearer token (`verifyAppCheckToken` needs it), written next to the access log.
    static let bearerToken = "bench-bearer-token-0123456789abcdef"

    static func serverProcess(
        _ rollout: String, store: String, log: String, threads: Int = 2, environment: [String: String] = [:]
    ) throws -> (Process, UInt16) {
        let tokenFile = log + ".bearer-token"
        try bearerToken.write(toFile: tokenFile, atomically: true, encoding: .utf8)
        let p = Process()
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        p.executableURL = URL(fileURLWithPath: rollout)
        p.arguments = [
            "serve", "--listen", "127.0.0.1:0", "--trust-demo", "--store", store, "--rate-limit", "0", "--no-events",
            "--threads", "\(threads)", "--access-log", log, "--events-token-file", tokenFile,
        ]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        var banner = Data()
        while !banner.contains(0x0A) {
            let chunk = out.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw BenchError("rollout serve exited before serving") }
            banner += chunk
        }
        let first = String(decoding: banner, as: UTF8.self).split(separator: "\n")[0]
        guard let port = first.split(separator: ":").last.flatMap({ UInt16($0) }) else {
            throw BenchError("no port in '\(first)'")
        }
        return (p, port)
    }

    static func run() throws {
        let env = ProcessInfo.processInfo.environment
        let seconds = min(60, max(4, Double(env["ROLLOUT_BENCH_SERVE_SECONDS"] ?? "") ?? 20))
        let clients = min(64, max(1, Int(env["ROLLOUT_BENCH_SERVE_CLIENTS"] ?? "") ?? 64))
        let rollout = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("rollout").path
        guard FileManager.default.isExecutableFile(atPath: rollout) else {
            throw BenchError("\(rollout) not built (make bench builds it)")
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollout-serve-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        let log = dir.appendingPathComponent("access.log").path
        // Commands open existing stores only: `rollout init` first, as a user does.
        _ = try runCapture(rollout, ["init", "--store", store, "--seed", "bench"])
        let setup = Process()
        setup.executableURL = URL(fileURLWithPath: rollout)
        setup.arguments = [
            "appcheck", "app", "add", app, "--project-number", "777", "--project-id", "bench", "--team",
            identity.teamId, "--bundle", identity.bundleId, "--trust-demo", "--store", store,
        ]
        setup.standardOutput = FileHandle.nullDevice
        try setup.run()
        setup.waitUntilExit()
        guard setup.terminationStatus == 0 else { throw BenchError("rollout appcheck app add failed") }
        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        let authority = try DemoCertificateAuthority.loadOrCreate(in: state)

        var (server, port) = try serverProcess(rollout, store: store, log: log)
        let shared = Shared()
        shared.port = port
        let group = DispatchGroup()
        for i in 0..<clients {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                device(i, shared: shared, authority: authority)
            }
        }
        let start = Stopwatch.nanoseconds()
        usleep(UInt32(seconds / 2 * 1e6))
        shared.lock.withLock { shared.phase = 1 }
        kill(server.processIdentifier, SIGTERM)
        server.waitUntilExit()
        let firstExit = server.terminationStatus
        let drained = Stopwatch.nanoseconds()
        // The last answers reach their devices just after the server exits.
        for _ in 0..<2000 where shared.lock.withLock({ shared.busy }) > 0 { usleep(1_000) }
        // Lost state after the SIGTERM: every answered assertion's counter is stored.
        // A stored counter above the last answered one is not lost state: the server committed an assertion whose
        // answer the device never read (it was cut off by the shutdown); the device's next assertion counts higher
        // still and goes through. Below, or missing, would be an answered request the store forgot.
        var lost = 0
        var unread = 0
        let snapshot = shared.lock.withLock { shared.devices }
        for (_, d) in snapshot {
            let stored = try state.attestedKey(appId: app, artifactDigest: SHA256.hash(d.artifact))
            if let stored, stored.counter > d.counter {
                unread += 1
            } else if stored?.counter != d.counter {
                lost += 1
                print("  lost: stored counter \(stored.map { "\($0.counter)" } ?? "none"), last answered \(d.counter)")
            }
        }
        (server, port) = try serverProcess(rollout, store: store, log: log)
        let restarted = Stopwatch.nanoseconds()
        shared.lock.withLock {
            shared.port = port
            shared.phase = 2
        }
        usleep(UInt32(seconds / 2 * 1e6))
        shared.lock.withLock { shared.phase = 3 }
        group.wait()
        let end = Stopwatch.nanoseconds()
        kill(server.processIdentifier, SIGTERM)
        server.waitUntilExit()

        let wall = Double((drained - start) + (end - restarted)) / 1e9
        let (latencies, errors, resumed, attestations, assertions) = shared.lock.withLock {
            (
                shared.latencies.sorted(), shared.errors, shared.afterRestartOK.count, shared.attestations,
                shared.assertions
            )
        }
        lost += snapshot.count - snapshot.keys.filter { shared.afterRestartOK.contains($0) }.count
        func pct(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) / 1e6
        }
        print(
            "  \(clients) clients, \(formatFigure(wall)) s of traffic (SIGTERM and restart in the middle), \(latencies.count) HTTP requests"
        )
        report("requests", value: Double(latencies.count) / wall, unit: "req/s")
        report("latency p50", value: pct(0.50), unit: "ms")
        report("latency p99", value: pct(0.99), unit: "ms")
        let busy = try serverBusySeconds(log)
        let crypto = try cryptoSeconds(attestations: attestations, assertions: assertions, authority: authority)
        report("time in cryptography", value: 100 * crypto / max(busy, 1e-9), unit: "% of the server's request time")
        print(
            "  first server exit status \(firstExit) after SIGTERM; \(resumed) of \(snapshot.count) devices asserted again after the restart"
        )
        print("  \(unread) devices had an assertion committed whose answer the shutdown cut off (they asserted again after the restart)")
        if let e = errors.first { print("  first error: \(e)") }
        report("errors", value: Double(errors.count), unit: "requests", limit: 0, higherIsBetter: false)
        report("lost state", value: Double(lost), unit: "devices", limit: 0, higherIsBetter: false)
    }

    /// One simulated device: attests, then asserts until the run ends; pauses over the SIGTERM and restart.
    static func device(_ i: Int, shared: Shared, authority: DemoCertificateAuthority) {
        guard let key = try? SimulatedAppAttestKey(authority: authority, app: identity, environment: .production) else {
            shared.lock.withLock { shared.errors.append("device \(i): no key") }
            return
        }
        let client = SimulatedAppCheckClient(key: key, appId: app)
        var currentPort: UInt16 = 0
        var remote: RemoteAppCheckExchange?
        while true {
            let (phase, port) = shared.lock.withLock { (shared.phase, shared.port) }
            if phase == 3 { return }
            if phase == 1 {
                usleep(2_000)
                continue
            }
            if port != currentPort || remote == nil {
                guard let http = try? LoopbackHTTPClient(host: "127.0.0.1", port: port) else { return }
                let timed = TimedTransport(http) { ns in shared.lock.withLock { shared.latencies.append(ns) } }
                remote = RemoteAppCheckExchange(transport: timed, project: "bench")
                currentPort = port
            }
            let attested = client.hasAttested
            shared.lock.withLock { shared.busy += 1 }
            do {
                _ = try client.token(from: remote!, at: SystemClock().now())
                shared.lock.withLock {
                    shared.busy -= 1
                    if attested { shared.assertions += 1 } else { shared.attestations += 1 }
                    if phase == 2 { shared.afterRestartOK.insert(i) }
                    shared.devices[i] = (client.artifact!, key.counter)
                }
            } catch {
                shared.lock.withLock {
                    shared.busy -= 1
                    // Refusals while the first server drains are expected; anything else is an error.
                    if shared.phase == phase { shared.errors.append("device \(i): \(error)") }
                }
            }
        }
    }

    /// The server's summed request time (its access log's durations).
    static func serverBusySeconds(_ path: String) throws -> Double {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var total = 0.0
        for line in text.split(separator: "\n") {
            if let ms = (try? JSONParser().parse(String(line)))?["durationMs"]?.numberValue?.double {
                total += ms / 1000
            }
        }
        return total
    }

    /// The server's cryptography for this many attestations and assertions, each operation timed alone here:
    /// attestation verification, assertion verification, and one RS256 signature per token.
    static func cryptoSeconds(attestations: Int, assertions: Int, authority: DemoCertificateAuthority) throws -> Double
    {
        let clock = ManualClock(SystemClock().now())
        let state = InMemoryAppCheckState()
        _ = state.saveDemoAuthority(authority.material)
        let exchange = try AppCheckExchange(
            configuration: AppCheckConfiguration(
                project: AppCheckProject(number: "777", id: "bench"),
                apps: [AppAttestApp(appId: app, identity: identity, environment: .production, trustsDemoRoot: true)]),
            state: state, clock: clock)
        let key = try SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
        let challenge = Array(repeating: UInt8(7), count: 32)
        let attestation = try key.attestation(clientDataHash: SHA256.hash(challenge), at: clock.now())
        guard let root = Certificate(der: authority.material.rootCertificate) else { throw BenchError("demo root") }
        let verifier = AttestationVerifier(trust: .apple(and: root))
        let attested = try verifier.verify(
            attestation: attestation, keyId: key.keyId, clientDataHash: SHA256.hash(challenge), app: identity,
            environment: .production, at: clock.now())
        guard let publicKey = P256PublicKey(uncompressedPoint: attested.publicKey) else { throw BenchError("key") }
        let assertion = try key.assertion(clientDataHash: SHA256.hash(challenge))
        let assertionVerifier = AssertionVerifier(app: identity)
        let issuer = AppCheckTokenIssuer(key: exchange.tokenVerifier.keys[0])
        let claims = AppCheckTokenClaims.firebase(
            project: exchange.configuration.project, appId: app, issuedAt: clock.now(), ttl: .hours(1), tokenId: nil)
        // Seconds per operation, each the median of three samples of half a second.
        let attest = try Timing.measure(samples: 3, minimum: 0.5) {
            _ = try verifier.verify(
                attestation: attestation, keyId: key.keyId, clientDataHash: SHA256.hash(challenge), app: identity,
                environment: .production, at: clock.now())
        }.median
        let assert = try Timing.measure(samples: 3, minimum: 0.5) {
            _ = try assertionVerifier.verify(
                assertion: assertion, clientDataHash: SHA256.hash(challenge), publicKey: publicKey, previousCounter: 0)
        }.median
        let sign = try Timing.measure(samples: 3, minimum: 0.5) { _ = try issuer.token(claims) }.median
        print(
            "  per operation here: attestation verify \(formatFigure(attest * 1e3)) ms, assertion verify "
                + "\(formatFigure(assert * 1e3)) ms, RS256 token signature \(formatFigure(sign * 1e3)) ms")
        return Double(attestations) * (attest + sign) + Double(assertions) * (assert + sign)
    }
}

/// The slow-client drill: 8 honest clients ask for challenges, each request on a new connection (what a device
/// does when its token is due), first alone and then while 300 connections trickle their heads at the server
/// (one header line each per second, reopened as soon as the server closes one), all from 127.0.0.1 like the
/// honest clients, so a cap per address cannot tell them apart.
///
/// Bounded: `ROLLOUT_BENCH_SLOWLORIS_SECONDS` (default 60, at least 5, at most 120) under attack, a sixth of it
/// alone first. Printed: the honest p99 latency under attack against alone (ratio), with the limit that no honest
/// request waits longer than the server's deadline for a head under pressure (2 s: the longest a trickling
/// connection keeps a slot once three quarters are taken), and the honest errors (limit 0).
enum SlowLorisDrill {
    /// 300 connections that send a request line and then one header line per `interval`, never ending the head.
    final class Attacker: @unchecked Sendable {
        let port: UInt16
        let lock = NSLock()
        var stopped = false
        var closedByServer = 0
        var failedOpens = 0

        init(port: UInt16) { self.port = port }

        func open() -> Int32? {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var tv = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = port.bigEndian
            inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr)
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            let line = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".utf8)
            guard rc == 0, line.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) > 0 else {
                close(fd)
                lock.withLock { failedOpens += 1 }
                return nil
            }
            return fd
        }

        /// Keeps `count` trickling connections until `stop()`.
        func run(count: Int, interval: Double) {
            var fds = (0..<count).compactMap { _ in open() }
            let trickle = Array("X-Trickle: a\r\n".utf8)
            var due = Date().addingTimeInterval(interval)
            while !lock.withLock({ stopped }) {
                var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                _ = poll(&polls, nfds_t(polls.count), Int32(max(1, min(100, due.timeIntervalSinceNow * 1000))))
                let sending = Date() >= due
                if sending { due = due.addingTimeInterval(interval) }
                func trickled(_ fd: Int32) -> Bool {
                    trickle.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } > 0
                }
                var kept: [Int32] = []
                var lost = 0
                for p in polls {
                    let gone = p.revents != 0 || (sending && !trickled(p.fd))
                    if gone {
                        close(p.fd)
                        lost += 1
                    } else {
                        kept.append(p.fd)
                    }
                }
                if lost > 0 { lock.withLock { closedByServer += lost } }
                fds = kept + (0..<(count - kept.count)).compactMap { _ in open() }
            }
            for fd in fds { close(fd) }
        }

        func stop() { lock.withLock { stopped = true } }
    }

    /// Honest clients' latencies and errors.
    final class Honest: @unchecked Sendable {
        let lock = NSLock()
        var latencies: [UInt64] = []
        var errors: [String] = []
        var stopped = false
    }

    /// `clients` threads asking for challenges on new connections for `seconds`.
    static func honest(port: UInt16, clients: Int, seconds: Double) -> Honest {
        let tally = Honest()
        let group = DispatchGroup()
        let path = "/v1/projects/bench/apps/\(ServeBench.app):generateAppAttestChallenge"
        for _ in 0..<clients {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                while !tally.lock.withLock({ tally.stopped }) {
                    let start = Stopwatch.nanoseconds()
                    do {
                        let client = try LoopbackHTTPClient(host: "127.0.0.1", port: port)
                        client.timeoutSeconds = 20
                        let r = try client.post(path: path, body: Array("{}".utf8))
                        guard r.status == 200 else { throw BenchError("status \(r.status)") }
                        tally.lock.withLock { tally.latencies.append(Stopwatch.nanoseconds() - start) }
                    } catch {
                        tally.lock.withLock { tally.errors.append("\(error)") }
                    }
                }
            }
        }
        usleep(UInt32(seconds * 1e6))
        tally.lock.withLock { tally.stopped = true }
        group.wait()
        return tally
    }

    static func run() throws {
        let env = ProcessInfo.processInfo.environment
        let seconds = min(120, max(5, Double(env["ROLLOUT_BENCH_SLOWLORIS_SECONDS"] ?? "") ?? 60))
        let rollout = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("rollout").path
        guard FileManager.default.isExecutableFile(atPath: rollout) else {
            throw BenchError("\(rollout) not built (make bench builds it)")
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollout-slowloris-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        _ = try runCapture(rollout, ["init", "--store", store, "--seed", "bench"])
        _ = try runCapture(
            rollout,
            [
                "appcheck", "app", "add", ServeBench.app, "--project-number", "777", "--project-id", "bench", "--team",
                ServeBench.identity.teamId, "--bundle", ServeBench.identity.bundleId, "--store", store,
            ])
        let (server, port) = try ServeBench.serverProcess(
            rollout, store: store, log: dir.appendingPathComponent("access.log").path)
        defer {
            kill(server.processIdentifier, SIGTERM)
            server.waitUntilExit()
        }
        let alone = honest(port: port, clients: 8, seconds: seconds / 6)
        let attacker = Attacker(port: port)
        let attack = DispatchGroup()
        attack.enter()
        Thread.detachNewThread {
            attacker.run(count: 300, interval: 1)
            attack.leave()
        }
        let attacked = honest(port: port, clients: 8, seconds: seconds)
        attacker.stop()
        attack.wait()

        func p99(_ t: Honest) -> Double {
            let sorted = t.latencies.sorted()
            return sorted.isEmpty ? 0 : Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]) / 1e6
        }
        let (closed, failedOpens) = attacker.lock.withLock { (attacker.closedByServer, attacker.failedOpens) }
        print(
            "  \(formatFigure(seconds)) s under attack: \(attacked.latencies.count) honest requests (alone, "
                + "\(formatFigure(seconds / 6)) s: \(alone.latencies.count)); the server closed \(closed) trickling "
                + "connections (\(failedOpens) failed to open)")
        let label = "honest p99 under 300 trickling connections"
        report(label, value: p99(attacked), unit: "ms", against: ("alone", p99(alone)))
        report(label, value: p99(attacked), unit: "ms", limit: 2000, higherIsBetter: false)
        if let e = (alone.errors + attacked.errors).first { print("  first error: \(e)") }
        report(
            "honest errors", value: Double(alone.errors.count + attacked.errors.count), unit: "requests", limit: 0,
            higherIsBetter: false)
    }
}
