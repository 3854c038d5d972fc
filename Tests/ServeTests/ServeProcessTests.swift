import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// The `rollout serve` process: SIGTERM in the middle of traffic lets the requests in flight finish, exits 0,
/// and every answered request's state is in the store (`rollout token verify` accepts its tokens).
@Suite(.serialized) struct ServeProcessTests {
    static let app = "1:424242:ios:process"

    final class Tally: @unchecked Sendable {
        let lock = NSLock()
        var tokens: [String] = []
        /// Per device: the artifact and the counter of its last assertion answered with 200.
        var devices: [(artifact: [UInt8], counter: UInt32)] = []
        var errorsBeforeStop: [String] = []
        func add(_ t: String) { lock.withLock { tokens.append(t) } }
    }

    /// Two `serve` processes on one SQLite store act as one exchange for challenges: one issued by A (a write-free
    /// answer) is attested at B, then refused as a replay at both; a forged one is refused at both.
    @Test func twoServersOnOneSQLiteStoreRedeemEachChallengeOnce() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-two")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        let identity = AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.process")
        try ServeProcess.prepareStore(
            rollout, store: store, app: Self.app, projectNumber: "424242", projectId: "serve-process",
            team: identity.teamId, bundle: identity.bundleId)
        let servers = try (0..<2).map { _ in
            try ServeProcess.start(rollout, ["--trust-demo", "--store", store, "--rate-limit", "0", "--no-events"])
        }
        defer { for s in servers where s.process.isRunning { s.process.terminate() } }
        let remotes = try servers.map {
            RemoteAppCheckExchange(
                transport: try LoopbackHTTPClient(host: "127.0.0.1", port: $0.port), project: "serve-process")
        }
        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        let key = try SimulatedAppAttestKey(
            authority: try DemoCertificateAuthority.loadOrCreate(in: state), app: identity, environment: .production)
        let challenge = try remotes[0].generateChallenge(appId: Self.app).challenge
        let attestation = try key.attestation(clientDataHash: SHA256.hash(challenge), at: SystemClock().now())
        _ = try remotes[1].attest(
            appId: Self.app, attestation: attestation, keyId: key.keyId, challenge: challenge, limitedUse: false)
        var forged = try remotes[1].generateChallenge(appId: Self.app).challenge
        forged[0] ^= 0x01
        for remote in remotes {
            for (c, code) in [(challenge, "challengeAlreadyUsed"), (forged, "unknownChallenge")] {
                #expect {
                    _ = try remote.attest(
                        appId: Self.app, attestation: attestation, keyId: key.keyId, challenge: c, limitedUse: false)
                } throws: {
                    ($0 as? AppCheckExchangeError)?.code == code
                }
            }
        }
    }

    @Test func sigtermFinishesRequestsInFlightAndKeepsEveryAnsweredState() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-process")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        try ServeProcess.prepareStore(
            rollout, store: store, app: Self.app, projectNumber: "424242", projectId: "serve-process",
            team: "ABCDE12345", bundle: "com.example.process")
        let tokenFile = dir.appendingPathComponent("events-token").path
        try "a-token-read-from-a-file-0123456789\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)

        let serve = try ServeProcess.start(
            rollout,
            [
                "--trust-demo", "--store", store, "--events-token-file", tokenFile, "--rate-limit", "0", "--access-log",
                dir.appendingPathComponent("access.log").path,
            ])
        let process = serve.process
        defer { if process.isRunning { process.terminate() } }
        let port = serve.port

        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        let authority = try DemoCertificateAuthority.loadOrCreate(in: state)
        let identity = AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.process")
        let tally = Tally()
        let stopped = NSLock()
        nonisolated(unsafe) var signalled = false
        let group = DispatchGroup()
        for _ in 0..<6 {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                do {
                    let remote = RemoteAppCheckExchange(
                        transport: try LoopbackHTTPClient(host: "127.0.0.1", port: port), project: "serve-process")
                    let key = try SimulatedAppAttestKey(authority: authority, app: identity, environment: .production)
                    let client = SimulatedAppCheckClient(key: key, appId: Self.app)
                    var slot: Int?
                    while true {
                        let token: AppCheckToken
                        do { token = try client.token(from: remote, at: SystemClock().now()) } catch {
                            if !stopped.withLock({ signalled }) {
                                tally.lock.withLock { tally.errorsBeforeStop.append("\(error)") }
                            }
                            return
                        }
                        tally.add(token.token)
                        let artifact = client.artifact!
                        tally.lock.withLock {
                            if let slot {
                                tally.devices[slot].counter = key.counter
                            } else {
                                tally.devices.append((artifact, key.counter))
                                slot = tally.devices.count - 1
                            }
                        }
                    }
                } catch {
                    tally.lock.withLock { tally.errorsBeforeStop.append("setup: \(error)") }
                }
            }
        }
        // SIGTERM once traffic is flowing.
        for _ in 0..<3000 where tally.lock.withLock({ tally.tokens.count }) < 60 { usleep(10_000) }
        stopped.withLock { signalled = true }
        kill(process.processIdentifier, SIGTERM)
        group.wait()
        process.waitUntilExit()
        let stderr = serve.stderrText
        #expect(process.terminationStatus == 0, "\(stderr)")
        #expect(stderr.contains("SIGTERM: finishing requests in flight"))
        #expect(tally.errorsBeforeStop.isEmpty, "\(tally.errorsBeforeStop)")
        #expect(tally.tokens.count >= 60)

        // Every answered state is in the store: each device's counter is the one of its last answered assertion.
        for device in tally.devices {
            let record = try #require(
                try state.attestedKey(appId: Self.app, artifactDigest: SHA256.hash(device.artifact)))
            #expect(record.counter == device.counter)
        }
        // The tokens verify against the store's keys, from the CLI too.
        let verifier = try AppCheckTokenVerifier(state: state)
        let now = SystemClock().now()
        #expect(tally.tokens.allSatisfy { verifier.evaluate($0, at: now).passed })
        let cli = try TestSupport.run(rollout, ["token", "verify", tally.tokens.last!, "--store", store])
        #expect(cli.status == 0, "\(cli.stdout)\(cli.stderr)")
        // One access-log line per answered request, each a JSON object.
        let log = try String(contentsOfFile: dir.appendingPathComponent("access.log").path, encoding: .utf8)
        let lines = log.split(separator: "\n")
        #expect(lines.count >= tally.tokens.count * 2)
        #expect(lines.allSatisfy { (try? JSONParser().parse(String($0)))?["status"] != nil })
    }

    @Test func appcheckCommandsRegisterAppsDebugTokensAndRotateKeys() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-appcheck-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("store.db").path
        func cli(_ args: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run(rollout, args + ["--store", store])
        }
        try #require(try cli(["init"]).status == 0)
        #expect(try cli(["appcheck", "app", "add", "1:5:ios:a", "--team", "ABCDE12345", "--bundle", "b"]).status == 2)
        let add = try cli([
            "appcheck", "app", "add", "1:5:ios:a", "--project-number", "5", "--project-id", "five", "--team",
            "ABCDE12345", "--bundle", "com.example.a", "--token-ttl", "2h",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        // One project per store.
        let other = try cli([
            "appcheck", "app", "add", "1:6:ios:b", "--project-number", "6", "--project-id", "six", "--team",
            "ABCDE12345", "--bundle", "com.example.b",
        ])
        #expect(other.status != 0 && other.stderr.contains("one project per store"))
        let debug = try cli(["appcheck", "debug-token", "add", "--app", "1:5:ios:a", "--name", "ci"])
        #expect(debug.status == 0)
        let token = debug.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(UUID(uuidString: token) != nil)
        let state = try AppCheckStateTables(database: RolloutStore(path: store, create: false).database)
        #expect(try state.hasDebugToken(appId: "1:5:ios:a", digest: SHA256.hash(Array(token.utf8))))
        #expect(try cli(["appcheck", "debug-token", "list"]).stdout.contains("1:5:ios:a  ci"))
        #expect(try cli(["appcheck", "debug-token", "add", "--app", "1:9:ios:none"]).status != 0)

        // Rotation: the overlap must cover the longest token lifetime (2 h here).
        let first = try AppCheckExchange.loadOrCreateSigningKeys(state: state, now: SystemClock().now())
        let short = try cli(["appcheck", "keys", "rotate", "--overlap", "1h"])
        #expect(short.status == 2 && short.stderr.contains("shorter than the longest token lifetime"))
        #expect(try state.signingKeys().count == 1)
        #expect(try cli(["appcheck", "keys", "rotate"]).status == 0)
        let keys = try state.signingKeys()
        #expect(keys.count == 2)
        let old = try #require(keys.first { $0.kid == first[0].kid })
        let retires = try #require(old.retiresAt)
        #expect(retires - old.createdAt >= .hours(2))
        #expect(keys.filter { $0.retiresAt == nil }.count == 1)
        let list = try cli(["appcheck", "keys", "list"]).stdout
        #expect(list.contains("signing") && list.contains("published until"))
        #expect(try cli(["appcheck", "keys", "rotate", "--read-only"]).status != 0)
        #expect(try state.signingKeys().count == 2)
    }
}
