import Foundation
import PostgresStore
import Testing
import TestSupport

/// Access through the built binary, the same on every backend: the PostgreSQL viewer role of docs/POSTGRES.md runs
/// the read commands, and every write refused because of access (`--read-only` on a file or a team store, the
/// viewer role) exits 4 with nothing written.
@Suite(.serialized)
struct PostgresViewerCLITests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-viewer")
        key = directory.appendingPathComponent("team.key").path
    }

    func rollout(_ arguments: [String], store: String) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + ["--store", store],
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"])
    }

    /// A team store made by `rollout init` with the documented roles: its owner's and its viewer's URIs.
    func teamStore(_ seed: String) throws -> (owner: String, viewer: String) {
        let server = try PostgresServer.get()
        let conninfo = try server.freshDatabase()
        let uri = server.uris(of: conninfo).socket
        let created = try rollout(["init", "--seed", seed], store: uri)
        try #require(created.status == 0, "\(created.stderr)")
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        return (uri, uri.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer"))
    }

    /// A plan file and a telemetry file for the write attempts.
    func files() throws -> (plan: String, events: String) {
        let plan = directory.appendingPathComponent("ramp.plan").path
        try "name ramp\nstep 5% hold 1h\nstep 10%\n".write(toFile: plan, atomically: true, encoding: .utf8)
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events =
            (0..<10).map {
                #"{"t":\#(now - Int64($0) * 1_000_000),"i":"v-\#($0)","k":"session","c":"\#($0 % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
            }.joined(separator: "\n") + "\n"
        let file = directory.appendingPathComponent("events.ndjson").path
        try events.write(toFile: file, atomically: true, encoding: .utf8)
        return (plan, file)
    }

    /// The writes an operator can attempt, each of which an access refusal must end with exit 4.
    func writes() throws -> [[String]] {
        let (plan, events) = try files()
        return [
            ["nudge", "+1", "--reason", "more"],
            ["kill", "--reason", "stop"],
            ["policy", "set", "guardrails.auto-kill", "on"],
            ["plan", "start", plan],
            ["ingest", events, "--quiet"],
        ]
    }

    /// The viewer reads what an on-call engineer looks at: `status` (text and JSON), `telemetry`, `operator list`
    /// and `policy show`, with an operator enrolled (whose secret the viewer may not read); `plan status`,
    /// `history` and `audit show`.
    @Test func theViewerRoleRunsTheReadCommands() throws {
        let (owner, viewer) = try teamStore("pg-viewer-reads")
        try #require(try rollout(["set", "5", "--reason", "start"], store: owner).status == 0)
        let enrol = try rollout(["operator", "enroll", "--qr", "none"], store: owner)
        try #require(enrol.status == 0, "\(enrol.stderr)")

        let status = try rollout(["status"], store: viewer)
        #expect(status.status == 0 && status.stdout.contains("version"), "\(status.status) \(status.stderr)")
        let json = try rollout(["status", "--json"], store: viewer)
        #expect(json.status == 0 && json.stdout.contains("\"percentage\""), "\(json.status) \(json.stderr)")
        let telemetry = try rollout(["telemetry"], store: viewer)
        #expect(telemetry.status == 0, "\(telemetry.status) \(telemetry.stderr)")
        let operators = try rollout(["operator", "list"], store: viewer)
        #expect(operators.status == 0, "\(operators.status) \(operators.stderr)")
        #expect(operators.stdout.contains("pending (not confirmed)"), "\(operators.stdout)")
        let policy = try rollout(["policy", "show"], store: viewer)
        #expect(policy.status == 0, "\(policy.status) \(policy.stderr)")
        // The plan, the history and the audit log.
        let plan = try rollout(["plan", "start", try files().plan], store: owner)
        try #require(plan.status == 0, "\(plan.stderr)")
        for read in [["plan", "status"], ["history"], ["audit", "show"]] {
            let r = try rollout(read, store: viewer)
            #expect(r.status == 0 && !r.stdout.isEmpty, "\(read): \(r.status) \(r.stderr)")
        }
    }

    /// The viewer role's writes are refused by the server: exit 4 (as `--read-only`), nothing written.
    @Test func theViewerRolesWritesExitFour() throws {
        let (owner, viewer) = try teamStore("pg-viewer-writes")
        let before = try rollout(["audit", "verify", "--json"], store: owner)
        try #require(before.status == 0, "\(before.stderr)")
        for write in try writes() {
            let r = try rollout(write, store: viewer)
            #expect(r.status == 4, "\(write): \(r.status) \(r.stderr)")
        }
        let after = try rollout(["audit", "verify", "--json"], store: owner)
        #expect(after.stdout == before.stdout, "the viewer wrote something")
    }

    /// `--read-only` refuses every write with exit 4 on a store file and on a team store alike.
    @Test(arguments: ["file", "postgresql"])
    func readOnlyWritesExitFourOnEveryBackend(_ backend: String) throws {
        let store: String
        if backend == "file" {
            store = directory.appendingPathComponent("rollout.db").path
            let created = try rollout(["init", "--seed", "ro-file"], store: store)
            try #require(created.status == 0, "\(created.stderr)")
        } else {
            store = try teamStore("ro-team").owner
        }
        for write in try writes() {
            let r = try rollout(write + ["--read-only"], store: store)
            #expect(r.status == 4, "\(backend) \(write): \(r.status) \(r.stderr)")
        }
        #expect(try rollout(["status", "--read-only"], store: store).status == 0)
    }

    /// A simulation writes only into a drill store file: on a team store or a Firebase project `simulate` is a
    /// typed refusal (exit 4), not a file named after the connection string.
    @Test(arguments: ["postgresql:///rollout-drill?host=/nonexistent", "firebase:drill-project"])
    func aSimulationOnATeamStoreOrAFirebaseProjectIsRefused(_ store: String) throws {
        let r = try TestSupport.run(
            try TestSupport.rolloutBinary(),
            ["simulate", "--scenario", "steady", "--devices", "10", "--duration", "1m", "--store", store],
            environment: ["ROLLOUT_STORE_KEY": key, "NO_COLOR": "1"])
        #expect(r.status == 4 && r.stderr.contains("drill store file"), "\(r.status) \(r.stderr)")
        let scheme = String(store.prefix { $0 != ":" }) + ":"
        let cwd = FileManager.default.currentDirectoryPath
        #expect(!FileManager.default.fileExists(atPath: cwd + "/" + scheme), "created \(scheme) in \(cwd)")
    }
}
