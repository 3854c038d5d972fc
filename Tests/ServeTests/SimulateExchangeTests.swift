import Foundation
import JSON
import SQLiteStore
import Testing
import TestSupport

/// `rollout simulate --exchange URL`: the fleet's devices attest and assert against a `rollout serve` process over
/// HTTP, with the demo authority of the server's store; the server's store then holds every attested key, and
/// `rollout token verify` on it accepts a token a device received.
@Suite(.serialized) struct SimulateExchangeTests {
    static let app = "1:434343:ios:fleet"

    static func count(_ table: String, in store: String) throws -> Int64 {
        let s = try RolloutStore(path: store, create: false, access: .readOnly)
        return try s.withDatabase { try $0.query("SELECT count(*) FROM \(table)")[0][0].int ?? -1 }
    }

    @Test func theFleetAttestsAndAssertsOverHTTPAndTheServersStoreVerifiesItsTokens() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-simulate-exchange")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = dir.appendingPathComponent("server.db").path
        let drill = dir.appendingPathComponent("drill.db").path
        try ServeProcess.prepareStore(
            rollout, store: server, app: Self.app, projectNumber: "434343", projectId: "fleet-exchange",
            team: "ROLLOUTSIM", bundle: "dev.rollout.fleet")
        let scenario = dir.appendingPathComponent("exchange.scenario").path
        try """
        summary  every device exposed, attesting against a server
        duration 90m
        devices  40
        token-ttl 30m
        sessions-per-day 96
        session-length   4m
        rollout 100%
        """.write(toFile: scenario, atomically: true, encoding: .utf8)

        let serve = try ServeProcess.start(
            rollout, ["--trust-demo", "--store", server, "--no-events", "--rate-limit", "0", "--access-log", "/dev/null"])
        defer { if serve.process.isRunning { serve.process.terminate() } }
        let url = "http://127.0.0.1:\(serve.port)"
        let run = try TestSupport.run(
            rollout,
            [
                "simulate", "--scenario", scenario, "--speed", "max", "--store", drill, "--exchange", url,
                "--exchange-store", server, "--json", "--quiet",
            ])
        try #require(run.status == 0, "\(run.stderr)")
        let summary = try #require(try JSONParser().parse(Array(run.stdout.utf8)).objectValue)
        let attestations = try #require(summary["attestations"]?.numberValue?.int64)
        let assertions = try #require(summary["assertions"]?.numberValue?.int64)
        #expect(attestations > 0)
        // No device was refused by the server: the only failures are the model's own (Apple's classes).
        let failures = summary["failures"]?.objectValue ?? JSONObject()
        #expect(!failures.keys.contains { $0.hasPrefix("rejected") }, "\(failures)")
        let exchange = try #require(summary["exchange"]?.objectValue)
        #expect(exchange["url"]?.stringValue == url)
        let token = try #require(exchange["lastToken"]?.stringValue)

        // The server holds one attested key per attestation it answered, and issued every token.
        #expect(try Self.count("appcheck_keys", in: server) == attestations)
        // Tokens live 30 minutes, so devices in session refreshed theirs with assertions over the 90 minutes.
        #expect(assertions > 0)

        // `rollout token verify` on the server's store (read-only, so it changes nothing) accepts the device's token.
        let verify = try TestSupport.run(rollout, ["token", "verify", token, "--store", server, "--read-only", "--json"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        let report = try #require(try JSONParser().parse(Array(verify.stdout.utf8)).objectValue)
        #expect(report["verified"]?.boolValue == true)
        #expect(report["claims"]?.objectValue?["sub"]?.stringValue == Self.app)
        // The drill store's own exchange state is empty: it cannot verify the token.
        #expect(try TestSupport.run(rollout, ["token", "verify", token, "--store", drill, "--read-only"]).status != 0)

        serve.process.terminate()
        serve.process.waitUntilExit()
    }

    @Test func withoutADemoTrustingAppTheSimulationIsRefusedBeforeAnythingIsCreated() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-simulate-exchange-refused")
        defer { try? FileManager.default.removeItem(at: dir) }
        let server = dir.appendingPathComponent("server.db").path
        let drill = dir.appendingPathComponent("drill.db").path
        let common = ["simulate", "--scenario", "steady", "--speed", "max", "--duration", "5m", "--store", drill, "--quiet"]

        try #require(try TestSupport.run(rollout, ["init", "--store", server]).status == 0)
        // No app at all in the server's store.
        let none = try TestSupport.run(
            rollout, common + ["--exchange", "http://127.0.0.1:9", "--exchange-store", server])
        #expect(none.status == 1)
        #expect(none.stderr.contains("no App Check project or apps"), "\(none.stderr)")

        // An app that does not trust the demo authority (a real app) cannot be used by simulated devices.
        let add = try TestSupport.run(
            rollout,
            [
                "appcheck", "app", "add", Self.app, "--project-number", "434343", "--project-id", "fleet-exchange",
                "--team", "ABCDE12345", "--bundle", "com.example.real", "--store", server,
            ])
        try #require(add.status == 0, "\(add.stderr)")
        let real = try TestSupport.run(
            rollout, common + ["--exchange", "http://127.0.0.1:9", "--exchange-store", server, "--app-id", Self.app])
        #expect(real.status == 1)
        #expect(real.stderr.contains("does not trust the demo authority"), "\(real.stderr)")

        // Not a loopback URL, and the options that need --exchange without it: usage errors.
        #expect(
            try TestSupport.run(rollout, common + ["--exchange", "http://10.0.0.1:80", "--exchange-store", server]).status
                == 2)
        #expect(try TestSupport.run(rollout, common + ["--exchange-store", server]).status == 2)
        #expect(!FileManager.default.fileExists(atPath: drill))
    }
}
