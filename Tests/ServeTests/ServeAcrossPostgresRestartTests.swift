import AppCheck
import Crypto
import ExchangeServer
import Foundation
import PostgresStore
import SQLiteStore
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// A `rollout serve` on PostgreSQL outlives a restart of the database server: requests that meet the lost
/// connection fail (503), and the next ones connect again, with the state from before the restart intact.
@Suite(.serialized) struct ServeAcrossPostgresRestartTests {
    static let app = "1:525252:ios:restart"
    static let identity = AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.restart")

    @Test func serveReconnectsAfterTheDatabaseServerRestarts() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-serve-pg-restart")
        defer { try? FileManager.default.removeItem(at: dir) }
        // A private server: restarting it must not disturb the shared one's tests.
        let server = try PostgresServer(tcp: false)
        let conninfo = try server.freshDatabase()
        let uri = server.uris(of: conninfo).socket
        let keyPath = dir.appendingPathComponent("team.key").path
        let environment = ["ROLLOUT_STORE_KEY": keyPath, "ROLLOUT_OPERATOR": "ana@test"]
        #expect(try TestSupport.run(rollout, ["init", "--store", uri], environment: environment).status == 0)
        let add = try TestSupport.run(
            rollout,
            [
                "appcheck", "app", "add", Self.app, "--project-number", "525252", "--project-id", "restart", "--team",
                Self.identity.teamId, "--bundle", Self.identity.bundleId, "--trust-demo", "--store", uri,
            ], environment: environment)
        #expect(add.status == 0, "\(add.stderr)")
        let serve = try ServeProcess.start(
            rollout, ["--trust-demo", "--store", uri, "--rate-limit", "0", "--no-events", "--access-log", "/dev/null"],
            environment: environment)
        defer { if serve.process.isRunning { serve.process.terminate() } }
        let state = PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: conninfo), key: try StoreKey.load(keyPath))
        let authority = try DemoCertificateAuthority.loadOrCreate(in: state)
        let client = SimulatedAppCheckClient(
            key: try SimulatedAppAttestKey(authority: authority, app: Self.identity, environment: .production),
            appId: Self.app)
        let remote = RemoteAppCheckExchange(
            transport: try LoopbackHTTPClient(host: "127.0.0.1", port: serve.port), project: "restart")
        _ = try client.token(from: remote, at: SystemClock().now())

        try server.restart(downtime: 0.5)
        // Each request that meets the lost connection fails; the next one connects again.
        var failures: [String] = []
        var token: AppCheckToken?
        for _ in 0..<4 where token == nil {
            do { token = try client.token(from: remote, at: SystemClock().now()) } catch { failures.append("\(error)") }
        }
        #expect(token != nil, "\(failures)")
        #expect(failures.count <= 2, "\(failures)")
        // From then on every request is answered, and the key attested before the restart still asserts.
        for _ in 0..<5 { _ = try client.token(from: remote, at: SystemClock().now()) }
        let record = try PostgresAppCheckState(
            store: try PostgresConfigStore(conninfo: conninfo), key: try StoreKey.load(keyPath)
        )
        .attestedKey(appId: Self.app, artifactDigest: SHA256.hash(client.artifact!))
        #expect(record?.counter == client.key.counter)
        print("serve across a PostgreSQL restart: \(failures.count) request(s) failed before reconnecting: \(failures)")
        kill(serve.process.processIdentifier, SIGTERM)
        serve.process.waitUntilExit()
        #expect(serve.process.terminationStatus == 0)
    }
}
