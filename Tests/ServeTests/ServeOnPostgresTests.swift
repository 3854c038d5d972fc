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

/// Two `rollout serve` processes on one PostgreSQL team store (a real server, `initdb` in a temporary directory)
/// act as one exchange: a challenge issued by one is redeemed once across both (a forged one at neither, and one
/// issued before a key rotation still after it), an artifact attested at one is asserted at the other, both publish the same JWKS, and a limited-use token is consumed once by `token verify
/// --consume` from any process.
@Suite(.serialized) struct ServeOnPostgresTests {
    static let app = "1:515151:ios:postgres"
    static let identity = AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.pg")

    @Test func twoServersOnOneStoreShareTheExchangeState() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-pg")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let uri = server.uris(of: conninfo).socket
        let keyPath = dir.appendingPathComponent("team.key").path
        let environment = ["ROLLOUT_STORE_KEY": keyPath, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"]
        @Sendable func cli(_ arguments: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run(rollout, arguments + ["--store", uri], environment: environment)
        }
        // This machine has no team key: init makes it (it seals the store).
        let initialized = try cli(["init"])
        #expect(initialized.status == 0, "\(initialized.stderr)")
        #expect(initialized.stderr.contains("created the team store key \(keyPath)"), "\(initialized.stderr)")
        let add = try cli([
            "appcheck", "app", "add", Self.app, "--project-number", "515151", "--project-id", "serve-pg", "--team",
            Self.identity.teamId, "--bundle", Self.identity.bundleId, "--trust-demo",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        let tokenFile = dir.appendingPathComponent("events-token").path
        try "a-token-read-from-a-file-0123456789\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)

        let a = try ServeProcess.start(
            rollout,
            [
                "--trust-demo", "--store", uri, "--rate-limit", "0", "--events-token-file", tokenFile, "--access-log",
                dir.appendingPathComponent("a.log").path,
            ], environment: environment)
        defer { if a.process.isRunning { a.process.terminate() } }
        let b = try ServeProcess.start(
            rollout,
            [
                "--trust-demo", "--store", uri, "--rate-limit", "0", "--no-events", "--access-log",
                dir.appendingPathComponent("b.log").path,
            ], environment: environment)
        defer { if b.process.isRunning { b.process.terminate() } }
        let remoteA = RemoteAppCheckExchange(
            transport: try LoopbackHTTPClient(host: "127.0.0.1", port: a.port), project: "serve-pg")
        let remoteB = RemoteAppCheckExchange(
            transport: try LoopbackHTTPClient(host: "127.0.0.1", port: b.port), project: "serve-pg")

        // The devices' authority is the one both servers trust: read back from the store (opened with the key).
        let state = PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: conninfo), key: try StoreKey.load(keyPath))
        let authority = try DemoCertificateAuthority.loadOrCreate(in: state)
        let key = try SimulatedAppAttestKey(authority: authority, app: Self.identity, environment: .production)

        // A challenge from A, attested at B; the same attestation again (at A or B) is a replay of the challenge.
        let challenge = try remoteA.generateChallenge(appId: Self.app).challenge
        let attestation = try key.attestation(clientDataHash: SHA256.hash(challenge), at: SystemClock().now())
        let attested = try remoteB.attest(
            appId: Self.app, attestation: attestation, keyId: key.keyId, challenge: challenge, limitedUse: true)
        for remote in [remoteA, remoteB] {
            #expect {
                _ = try remote.attest(
                    appId: Self.app, attestation: attestation, keyId: key.keyId, challenge: challenge, limitedUse: false
                )
            } throws: {
                ($0 as? AppCheckExchangeError)?.code == "challengeAlreadyUsed"
            }
        }

        // Racing: one assertion on a fresh challenge sent to both servers from 6 threads is accepted exactly once.
        let raced = try remoteB.generateChallenge(appId: Self.app).challenge
        let assertion = try key.assertion(clientDataHash: SHA256.hash(attested.artifact + raced))
        let lock = NSLock()
        nonisolated(unsafe) var outcomes: [String] = []
        DispatchQueue.concurrentPerform(iterations: 6) { i in
            let outcome: String
            do {
                let remote = RemoteAppCheckExchange(
                    transport: try LoopbackHTTPClient(host: "127.0.0.1", port: i % 2 == 0 ? a.port : b.port),
                    project: "serve-pg")
                _ = try remote.exchangeAssertion(
                    appId: Self.app, artifact: attested.artifact, assertion: assertion, challenge: raced,
                    limitedUse: false)
                outcome = "ok"
            } catch let e as AppCheckExchangeError {
                outcome = e.code
            } catch {
                outcome = "\(error)"
            }
            lock.withLock { outcomes.append(outcome) }
        }
        #expect(
            outcomes.filter { $0 == "ok" }.count == 1 && outcomes.filter { $0 == "challengeAlreadyUsed" }.count == 5,
            "\(outcomes)")
        // A challenge with one changed byte is no challenge of theirs, at either server.
        var forged = try remoteA.generateChallenge(appId: Self.app).challenge
        forged[forged.count / 2] ^= 0x80
        for remote in [remoteA, remoteB] {
            #expect {
                _ = try remote.exchangeAssertion(
                    appId: Self.app, artifact: attested.artifact,
                    assertion: try key.assertion(clientDataHash: SHA256.hash(attested.artifact + forged)),
                    challenge: forged, limitedUse: false)
            } throws: {
                ($0 as? AppCheckExchangeError)?.code == "unknownChallenge"
            }
        }
        // The counter moved for both: the next assertion, at A, is accepted, and the key's counter is its.
        let next = try remoteA.generateChallenge(appId: Self.app).challenge
        let fromA = try remoteA.exchangeAssertion(
            appId: Self.app, artifact: attested.artifact,
            assertion: try key.assertion(clientDataHash: SHA256.hash(attested.artifact + next)),
            challenge: next, limitedUse: false)
        #expect(
            try state.attestedKey(appId: Self.app, artifactDigest: SHA256.hash(attested.artifact))?.counter
                == key.counter)

        // One signing key, one JWKS.
        let jwksA = try LoopbackHTTPClient(host: "127.0.0.1", port: a.port).request("GET", "/v1/jwks")
        let jwksB = try LoopbackHTTPClient(host: "127.0.0.1", port: b.port).request("GET", "/v1/jwks")
        #expect(jwksA.status == 200 && jwksA.body == jwksB.body)
        // firebase-admin (the peer) accepts a token of each server against the other's JWKS.
        let request: [String: Any] = [
            "project_id": "serve-pg", "jwks": try JSONSerialization.jsonObject(with: Data(jwksB.body)),
            "tokens": ["from A": fromA.token, "from B": attested.token.token],
        ]
        let peer = try TestSupport.run(
            try TestSupport.python(),
            [TestSupport.packageRoot.appendingPathComponent("Tests/AppCheckTests/firebase_admin_tokens.py").path],
            stdin: String(decoding: try JSONSerialization.data(withJSONObject: request), as: UTF8.self))
        #expect(peer.status == 0, "\(peer.stderr)")
        #expect(
            try JSONSerialization.jsonObject(with: Data(peer.stdout.utf8)) as? [String: String]
                == ["from A": "ok:" + Self.app, "from B": "ok:" + Self.app], "\(peer.stdout)")

        // The limited-use token from B: consumed once by one CLI process, refused as a replay by the next; a
        // read-only consumption is refused (exit 4) before anything is recorded.
        let token = attested.token.token
        #expect(try cli(["token", "verify", token, "--consume", "--read-only"]).status == 4)
        let first = try cli(["token", "verify", token, "--consume"])
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        let second = try cli(["token", "verify", token, "--consume"])
        #expect(second.status == 1 && second.stdout.contains("replay"), "\(second.stdout)\(second.stderr)")
        #expect(try cli(["token", "verify", token]).status == 0)
        // Six processes consuming one fresh limited-use token at once: exactly one is accepted.
        let fresh = try remoteA.generateChallenge(appId: Self.app).challenge
        let limited = try remoteA.exchangeAssertion(
            appId: Self.app, artifact: attested.artifact,
            assertion: try key.assertion(clientDataHash: SHA256.hash(attested.artifact + fresh)), challenge: fresh,
            limitedUse: true
        ).token
        nonisolated(unsafe) var statuses: [Int32] = []
        DispatchQueue.concurrentPerform(iterations: 6) { _ in
            let status = (try? cli(["token", "verify", limited, "--consume"]))?.status ?? -1
            lock.withLock { statuses.append(status) }
        }
        #expect(statuses.sorted() == [0, 1, 1, 1, 1, 1], "\(statuses)")

        // POST /v1/events on A lands in the team store's telemetry.
        let events = try LoopbackHTTPClient(host: "127.0.0.1", port: a.port).request(
            "POST", "/v1/events", headers: [("Authorization", "Bearer a-token-read-from-a-file-0123456789")],
            body: Array(
                #"{"t":\#(SystemClock().now().microseconds),"i":"fid-1","k":"success","c":"enabled","p":"appAttest"}"#
                    .utf8))
        #expect(events.status == 200, "\(String(decoding: events.body, as: UTF8.self))")
        #expect(try PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo)).batches().count == 1)

        // Keys rotated from the CLI reach both servers' JWKS.
        let beforeRotation = try remoteA.generateChallenge(appId: Self.app).challenge
        #expect(try cli(["appcheck", "keys", "rotate"]).status == 0)
        let keys = try cli(["appcheck", "keys", "list"])
        #expect(keys.stdout.split(separator: "\n").count == 2, "\(keys.stdout)")
        for port in [a.port, b.port] {
            var published = 0
            for _ in 0..<100 where published != 2 {
                let jwks = try LoopbackHTTPClient(host: "127.0.0.1", port: port).request("GET", "/v1/jwks")
                published = (try? JSONParser().parse(jwks.body))?["keys"]?.arrayValue?.count ?? -1
                if published != 2 { usleep(100_000) }
            }
            #expect(published == 2, "the server on port \(port) publishes \(published) keys after the rotation")
        }
        // The challenge keys rotate with the signing keys: one issued by A before the rotation redeems at B after
        // it, and one B issues now redeems at A.
        for (challenge, remote) in [(beforeRotation, remoteB), (try remoteB.generateChallenge(appId: Self.app).challenge, remoteA)] {
            _ = try remote.exchangeAssertion(
                appId: Self.app, artifact: attested.artifact,
                assertion: try key.assertion(clientDataHash: SHA256.hash(attested.artifact + challenge)),
                challenge: challenge, limitedUse: false)
        }

        for serve in [a, b] {
            kill(serve.process.processIdentifier, SIGTERM)
            serve.process.waitUntilExit()
            #expect(serve.process.terminationStatus == 0)
            let stderr = serve.stderrText
            #expect(stderr.contains("every answered request's state is in postgresql"), "\(stderr)")
        }
    }
}
