import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import PostgresStore
import SQLiteStore
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// Group commit keeps the answer's promise: `rollout serve` killed with SIGKILL in the middle of traffic (clients
/// asking for challenges, asserting, and consuming limited-use tokens, all at once so that their writes share
/// groups) loses nothing it answered. Afterwards, on the store: every challenge answered is there and unused
/// (it redeems now), every device's counter is at least its last answered assertion's, and every answered
/// consumption is recorded (consuming the token id again is refused). On an SQLite store file and on a
/// PostgreSQL team store.
@Suite(.serialized) struct ServeKillDrillTests {
    static let app = "1:616161:ios:kill"
    static let identity = AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.kill")

    final class Answered: @unchecked Sendable {
        let lock = NSLock()
        var challenges: [[UInt8]] = []
        var counters: [Int: (artifact: [UInt8], counter: UInt32)] = [:]
        var consumed: [(id: String, expiresAt: Int64)] = []
        var assertions = 0
        var stop = false
        /// Set just before the kill: a request failing after it ends its client; one failing before is retried
        /// (a loaded machine may refuse a connection), so every kind reaches its count.
        var killing = false
        var killed: Bool { lock.withLock { killing } }
        var counts: (Int, Int, Int) { lock.withLock { (challenges.count, assertions, consumed.count) } }
    }

    /// The server's bearer token, which `verifyAppCheckToken` needs (`--events-token-file`, written by `tokenFile`).
    static let bearerToken = "kill-drill-bearer-token-0123456789"

    /// Writes `bearerToken` into `directory` and returns the file's path.
    static func tokenFile(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("bearer-token").path
        try bearerToken.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func json(_ bytes: [UInt8]) -> JSONValue? { try? JSONParser().parse(String(decoding: bytes, as: UTF8.self)) }

    /// A limited-use token's `jti` and `exp`.
    static func idAndExpiry(_ token: String) -> (String, Int64)? {
        let parts = token.split(separator: ".")
        guard parts.count == 3, let payload = Base64.decode(String(parts[1]), .jwt), let claims = json(payload),
            let id = claims["jti"]?.stringValue, let exp = claims["exp"]?.numberValue?.double
        else { return nil }
        return (id, Int64(exp))
    }

    /// Runs 9 clients (3 of each kind) against `port` until each kind has answers and then SIGKILLs `serve`.
    static func drive(_ serve: ServeProcess, authority: DemoCertificateAuthority, debugToken: String) throws
        -> Answered
    {
        let answered = Answered()
        let base = "/v1/projects/kill/apps/\(app):"
        let group = DispatchGroup()
        for i in 0..<9 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard var http = try? LoopbackHTTPClient(host: "127.0.0.1", port: serve.port),
                    var key = try? SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
                else { return }
                var client = SimulatedAppCheckClient(key: key, appId: app)
                var remote = RemoteAppCheckExchange(transport: http, project: "kill")
                /// After a failure before the kill, a fresh connection and device: a connection that timed out, or a
                /// client whose exchange failed half-way (its key attested, its answer lost), cannot go on.
                func renew() {
                    guard let h = try? LoopbackHTTPClient(host: "127.0.0.1", port: serve.port),
                        let k = try? SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
                    else { return }
                    (http, key) = (h, k)
                    client = SimulatedAppCheckClient(key: k, appId: app)
                    remote = RemoteAppCheckExchange(transport: h, project: "kill")
                }
                // A failure before the kill is retried; the first failure after it ends the client.
                while !answered.lock.withLock({ answered.stop }) {
                    switch i % 3 {
                    case 0:
                        guard let r = try? http.post(path: base + "generateAppAttestChallenge", body: Array("{}".utf8)),
                            r.status == 200,
                            let c = json(r.body)?["challenge"]?.stringValue.flatMap({ Base64.decode($0) })
                        else {
                            if answered.killed { return }
                            renew()
                            continue
                        }
                        answered.lock.withLock { answered.challenges.append(c) }
                    case 1:
                        guard (try? client.token(from: remote, at: SystemClock().now())) != nil else {
                            if answered.killed { return }
                            renew()
                            continue
                        }
                        answered.lock.withLock {
                            answered.counters[i] = (client.artifact!, key.counter)
                            answered.assertions += 1
                        }
                    default:
                        let body = Array("{\"debugToken\":\"\(debugToken)\",\"limitedUse\":true}".utf8)
                        guard let r = try? http.post(path: base + "exchangeDebugToken", body: body), r.status == 200,
                            let token = json(r.body)?["token"]?.stringValue,
                            let v = try? http.request(
                                "POST", "/v1beta/projects/kill:verifyAppCheckToken",
                                headers: [("Authorization", "Bearer \(bearerToken)")],
                                body: Array("{\"appCheckToken\":\"\(token)\"}".utf8)),
                            v.status == 200, json(v.body)?["alreadyConsumed"] == nil,
                            let (id, expiresAt) = idAndExpiry(token)
                        else {
                            if answered.killed { return }
                            renew()
                            continue
                        }
                        answered.lock.withLock { answered.consumed.append((id, expiresAt)) }
                    }
                }
            }
        }
        // Until every kind has a good number of answers (bounded), then the kill with requests in flight.
        for _ in 0..<12_000 {
            let (c, a, t) = answered.counts
            if c >= 40 && a >= 20 && t >= 20 { break }
            usleep(10_000)
        }
        answered.lock.withLock { answered.killing = true }
        kill(serve.process.processIdentifier, SIGKILL)
        serve.process.waitUntilExit()
        answered.lock.withLock { answered.stop = true }
        group.wait()
        return answered
    }

    /// What the kill lost: answered items the store no longer has.
    static func lost(_ answered: Answered, in state: any AppCheckState) throws -> [String] {
        var lost: [String] = []
        // A challenge carries its own proof: an exchange built afresh on the store (another process) must
        // authenticate it and find it unused.
        let exchange = try AppCheckExchange(configuration: try #require(try state.configuration()), state: state, clock: SystemClock())
        for c in answered.challenges {
            do {
                let r = try state.redeemChallenge(
                    c, appId: app, expiresAt: try exchange.authenticChallengeExpiry(c, appId: app))
                if r != .redeemed { lost.append("challenge \(Hex.encode(c)): \(r)") }
            } catch {
                lost.append("challenge \(Hex.encode(c)): \(error)")
            }
        }
        for (i, d) in answered.counters {
            let stored = try state.attestedKey(appId: app, artifactDigest: SHA256.hash(d.artifact))
            if stored == nil || stored!.counter < d.counter {
                lost.append("device \(i): counter \(stored.map { "\($0.counter)" } ?? "none") < answered \(d.counter)")
            }
        }
        for t in answered.consumed where try state.consumeToken(id: t.id, expiresAt: Instant(seconds: t.expiresAt)) {
            lost.append("consumed token \(t.id) was not recorded")
        }
        return lost
    }

    static func prepare(_ cli: ([String]) throws -> TestSupport.ProcessResult) throws -> String {
        try #require(try cli(["init"]).status == 0)
        let add = try cli([
            "appcheck", "app", "add", app, "--project-number", "616161", "--project-id", "kill", "--team",
            identity.teamId, "--bundle", identity.bundleId, "--trust-demo",
        ])
        try #require(add.status == 0, "\(add.stderr)")
        let debug = try cli(["appcheck", "debug-token", "add", "--app", app, "--name", "drill"])
        try #require(debug.status == 0, "\(debug.stderr)")
        return debug.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func sigkillOnAnSQLiteStoreLosesNoAnsweredState() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-kill")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        let debugToken = try Self.prepare { try TestSupport.run(rollout, $0 + ["--store", store]) }
        let serve = try ServeProcess.start(
            rollout,
            [
                "--trust-demo", "--store", store, "--rate-limit", "0", "--no-events", "--events-token-file",
                try Self.tokenFile(in: dir),
            ])
        defer { if serve.process.isRunning { serve.process.terminate() } }
        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        let answered = try Self.drive(
            serve, authority: try DemoCertificateAuthority.loadOrCreate(in: state), debugToken: debugToken)
        #expect(serve.process.terminationReason == .uncaughtSignal)
        let (c, a, t) = answered.counts
        #expect(c >= 40 && a >= 20 && t >= 20, "answered before the kill: \(c) challenges, \(a) assertions, \(t) consumptions")
        let lost = try Self.lost(answered, in: state)
        #expect(lost.isEmpty, "\(lost.prefix(5))")
        // The store still verifies: the tallies of the per-request tables match their rows.
        let verify = try TestSupport.run(rollout, ["audit", "verify", "--store", store])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
    }

    @Test func sigkillOnAPostgresStoreLosesNoAnsweredState() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-kill-pg")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let uri = server.uris(of: conninfo).socket
        let keyPath = dir.appendingPathComponent("team.key").path
        let environment = ["ROLLOUT_STORE_KEY": keyPath, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"]
        let debugToken = try Self.prepare { try TestSupport.run(rollout, $0 + ["--store", uri], environment: environment) }
        let serve = try ServeProcess.start(
            rollout,
            [
                "--trust-demo", "--store", uri, "--rate-limit", "0", "--no-events", "--events-token-file",
                try Self.tokenFile(in: dir),
            ], environment: environment)
        defer { if serve.process.isRunning { serve.process.terminate() } }
        let state = PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: conninfo), key: try StoreKey.load(keyPath))
        let answered = try Self.drive(
            serve, authority: try DemoCertificateAuthority.loadOrCreate(in: state), debugToken: debugToken)
        #expect(serve.process.terminationReason == .uncaughtSignal)
        let (c, a, t) = answered.counts
        #expect(c >= 40 && a >= 20 && t >= 20, "answered before the kill: \(c) challenges, \(a) assertions, \(t) consumptions")
        let lost = try Self.lost(answered, in: state)
        #expect(lost.isEmpty, "\(lost.prefix(5))")
    }
}
