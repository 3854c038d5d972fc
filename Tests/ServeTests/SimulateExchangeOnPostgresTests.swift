import Foundation
import JSON
import PostgresStore
import Testing
import TestSupport

/// `rollout simulate --exchange URL --exchange-store postgresql://...`: the fleet attests and asserts against a
/// `rollout serve` on a PostgreSQL team store, with the demo authority read from that store (sealed with the team
/// key); the team store then holds every attested key and `token verify` on it accepts a device's token.
@Suite(.serialized) struct SimulateExchangeOnPostgresTests {
    static let app = "1:464646:ios:fleet"

    @Test func theFleetRunsAgainstAServerOnPostgres() throws {
        let rollout = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("rollout-simulate-exchange-pg")
        defer { try? FileManager.default.removeItem(at: dir) }
        let postgres = try PostgresServer.get()
        let conninfo = try postgres.freshDatabase()
        let server = postgres.uris(of: conninfo).socket
        let environment = [
            "ROLLOUT_STORE_KEY": dir.appendingPathComponent("team.key").path, "ROLLOUT_OPERATOR": "ana@test",
        ]
        func cli(_ arguments: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run(rollout, arguments, environment: environment)
        }
        #expect(try cli(["init", "--store", server]).status == 0)
        let add = try cli([
            "appcheck", "app", "add", Self.app, "--project-number", "464646", "--project-id", "fleet-pg", "--team",
            "ROLLOUTSIM",
            "--bundle", "dev.rollout.fleet", "--trust-demo", "--store", server,
        ])
        #expect(add.status == 0, "\(add.stderr)")
        let scenario = dir.appendingPathComponent("exchange.scenario").path
        try """
        summary  every device exposed, attesting against a server on PostgreSQL
        duration 60m
        devices  20
        token-ttl 30m
        sessions-per-day 96
        session-length   4m
        rollout 100%
        """.write(toFile: scenario, atomically: true, encoding: .utf8)

        let serve = try ServeProcess.start(
            rollout,
            ["--trust-demo", "--store", server, "--no-events", "--rate-limit", "0", "--access-log", "/dev/null"],
            environment: environment)
        defer { if serve.process.isRunning { serve.process.terminate() } }
        let url = "http://127.0.0.1:\(serve.port)"
        let drill = dir.appendingPathComponent("drill.db").path
        let run = try cli([
            "simulate", "--scenario", scenario, "--speed", "max", "--store", drill, "--exchange", url,
            "--exchange-store", server,
            "--json", "--quiet",
        ])
        try #require(run.status == 0, "\(run.stderr)")
        let summary = try #require(try JSONParser().parse(Array(run.stdout.utf8)).objectValue)
        let attestations = try #require(summary["attestations"]?.numberValue?.int64)
        #expect(attestations > 0)
        let failures = summary["failures"]?.objectValue ?? JSONObject()
        #expect(!failures.keys.contains { $0.hasPrefix("rejected") }, "\(failures)")
        let token = try #require(summary["exchange"]?.objectValue?["lastToken"]?.stringValue)

        // One attested key per answered attestation, in the team store.
        let keys = try PGConnection(conninfo).query("SELECT count(*) FROM appcheck_keys").first?.first ?? nil
        #expect(keys.flatMap { Int64($0) } == attestations)
        let verify = try cli(["token", "verify", token, "--store", server, "--read-only", "--json"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        #expect(try JSONParser().parse(Array(verify.stdout.utf8))["claims"]?["sub"]?.stringValue == Self.app)

        serve.process.terminate()
        serve.process.waitUntilExit()
    }
}
