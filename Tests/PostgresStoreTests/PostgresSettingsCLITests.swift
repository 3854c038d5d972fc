import Foundation
@testable import PostgresStore
import Rollout
import RolloutApp
import StepUp
import SQLiteStore
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// The built `rollout` binary's settings commands, `watch` and `ingest` on a real PostgreSQL server: the same
/// intents of the settings write path as on SQLite, in the PostgreSQL tables, audited in the same transaction,
/// refused on a read-only store (exit 4); auto-kill from `watch` publishes exactly one kill.
@Suite(.serialized)
struct PostgresSettingsCLITests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-settings")
        key = directory.appendingPathComponent("team.key").path
    }

    func rollout(_ arguments: [String], store: String?, stdin: String? = nil) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + (store.map { ["--store", $0] } ?? []),
            stdin: stdin ?? "",
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"])
    }

    func json(_ r: TestSupport.ProcessResult) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any] ?? [:]
    }

    @Test func operatorAndPolicyCommandsUseThePostgresTables() throws {
        let server = try PostgresServer.get()
        let conninfo = try server.uris(of: server.freshDatabase()).socket
        #expect(try rollout(["init", "--seed", "pg-settings"], store: conninfo).status == 0)
        let store = try PostgresConfigStore(conninfo: conninfo)
        let auditBefore = try store.auditRecords(limit: 1000, before: nil).count

        // A guardrail setting: in guardrail_settings, audited; the same value again changes nothing.
        let set = try rollout(["policy", "set", "guardrails.auto-kill", "on"], store: conninfo)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try PostgresGuardrailSettings(store: store).guardrailSettings().autoKill)
        #expect(
            try rollout(["policy", "set", "guardrails.auto-kill", "on"], store: conninfo).stdout.contains(
                "nothing changed"))
        #expect(try rollout(["policy", "set", "guardrails.no-such-key", "on"], store: conninfo).status == 2)
        // Read-only: refused (exit 4), nothing written.
        let ro = try rollout(["policy", "set", "guardrails.auto-kill", "off", "--read-only"], store: conninfo)
        #expect(ro.status == 4, "\(ro.stderr)")
        #expect(try PostgresGuardrailSettings(store: store).guardrailSettings().autoKill)
        let shown = try json(try rollout(["policy", "show", "--json"], store: conninfo))
        #expect((shown["guardrails"] as? [String: Any])?["guardrails.auto-kill"] as? String == "on")
        #expect(shown["enforced"] as? Bool == false)

        // Enrolment: pending (secret shown once), then confirmed with a code; the secret is sealed with the team key.
        let started = try rollout(["operator", "enroll", "--qr", "none"], store: conninfo)
        #expect(started.status == 0, "\(started.stderr)")
        let uri = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = try #require(uri.split(separator: "secret=").last?.split(separator: "&").first)
        let secret = try #require(TOTPSecret(base32: String(base32)))
        let stepUp = PostgresStepUpStore(store: store, key: try StoreKey.load(key))
        #expect(try stepUp.pendingEnrolments().map(\.id.rawValue) == ["ana@test"])
        #expect(try rollout(["operator", "enroll", "--read-only", "--code", "000000"], store: conninfo).status == 4)
        let step = TOTP.standard.step(at: SystemClock().now())
        let confirmed = try rollout(
            ["operator", "enroll", "--code", TOTP.standard.code(secret: secret, step: step)], store: conninfo)
        #expect(confirmed.status == 0, "\(confirmed.stderr)")
        #expect(try stepUp.operators().map(\.id.rawValue) == ["ana@test"])
        #expect(try stepUp.pendingEnrolments().isEmpty)
        let listed = try json(try rollout(["operator", "list", "--json"], store: conninfo))
        #expect(listed["enforced"] as? Bool == true)
        #expect((listed["operators"] as? [[String: Any]])?.first?["id"] as? String == "ana@test")

        // Step-up is on: a policy change needs a code (refused without one, exit 4), then passes with a fresh one.
        let noCode = try rollout(["policy", "set", "increase-over", "7"], store: conninfo)
        #expect(noCode.status == 4, "\(noCode.stderr)")
        #expect(try stepUp.stepUpPolicy().settings.first { $0.key == "increase-over" }?.value != "7")
        let withCode = try rollout(
            ["policy", "set", "increase-over", "7", "--code", TOTP.standard.code(secret: secret, step: step + 1)],
            store: conninfo)
        #expect(withCode.status == 0, "\(withCode.stderr)")
        #expect(try stepUp.stepUpPolicy().settings.first { $0.key == "increase-over" }?.value == "7")

        // Removing the last operator (with their code) turns step-up off.
        // (A fresh code: the next time step's, on a clock 30 s ahead, so that the code window holds it.)
        let removed = try TestSupport.run(
            try TestSupport.rolloutBinary(),
            [
                "operator", "remove", "ana@test", "--code", TOTP.standard.code(secret: secret, step: step + 2), "--store",
                conninfo,
            ],
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test"], fakeTime: "+30s")
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(removed.stdout.contains("Step-up verification is now off"))
        #expect(try stepUp.operators().isEmpty)

        // Everything is in the PostgreSQL store's audit chain, which still verifies.
        let records = try store.auditRecords(limit: 1000, before: nil)
        let actions = records.map(\.entry.action)
        #expect(actions.filter { $0 == "policy set guardrails.auto-kill" }.count == 1)
        #expect(actions.contains("policy set increase-over"))
        #expect(actions.contains("operator enroll"))
        #expect(actions.contains("step-up policy-change increase-over 7"))
        #expect(actions.contains("operator remove"))
        #expect(records.contains { $0.entry.action.contains("step-up") || $0.entry.result != .recorded })
        #expect(records.count > auditBefore)
        #expect(!records.contains { "\($0.entry)".contains(String(base32)) })
        #expect(try rollout(["audit", "verify"], store: conninfo).status == 0)
    }

    /// A fresh PostgreSQL store whose telemetry says HALT (auto-kill off, so it stays exposed), as a libpq URI.
    func haltedStore() throws -> String {
        let server = try PostgresServer.get()
        let conninfo = try server.uris(of: server.freshDatabase()).socket
        func past(_ arguments: [String], minutesAgo: Int) throws -> TestSupport.ProcessResult {
            try TestSupport.run(
                try TestSupport.rolloutBinary(), arguments + ["--store", conninfo],
                environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test"], fakeTime: "-\(minutesAgo)m")
        }
        #expect(try past(["init", "--seed", "pg-autokill"], minutesAgo: 30).status == 0)
        // The rollout started 20 minutes ago at 50%, so that exposed and control are the same size.
        #expect(try past(["set", "50", "--reason", "start"], minutesAgo: 20).status == 0)
        // Ten minutes of equal sessions in both groups, and crashes almost only among exposed devices (auto-kill
        // is still off: the store is left at HALT).
        let start = Int64(Date().timeIntervalSince1970) - 4 * 60
        var lines: [String] = []
        for minute in 0..<10 {
            let t = (start - Int64(minute) * 60) * 1_000_000
            for d in 0..<40 {
                lines.append(
                    #"{"t":\#(t + Int64(d)),"i":"e-\#(minute)-\#(d)","k":"session","c":"enabled","p":"appAttest"}"#)
                lines.append(
                    #"{"t":\#(t + Int64(d)),"i":"c-\#(minute)-\#(d)","k":"session","c":"control","p":"appAttest"}"#)
            }
            for d in 0..<6 {
                lines.append(#"{"t":\#(t + 100 + Int64(d)),"i":"e-\#(minute)-\#(d)","k":"crash","c":"enabled"}"#)
            }
        }
        let ingest = try rollout(["ingest", "-"], store: conninfo, stdin: lines.joined(separator: "\n") + "\n")
        try #require(ingest.status == 0, "\(ingest.stderr)")
        let check = try rollout(["status", "--check"], store: conninfo)
        #expect(check.status == 7, "\(check.stdout)")

        return conninfo
    }

    /// Two writable consoles on one halted PostgreSQL store run auto-kill: exactly one kill between them, shown
    /// in both; a read-only console only looks.
    @Test func consolesAutoKillOnce() throws {
        let conninfo = try haltedStore()
        #expect(try rollout(["policy", "set", "guardrails.auto-kill", "on"], store: conninfo).status == 0)
        let viewer = try PostgresConsoleSource(
            team: try Wiring.teamSession(conninfo: conninfo, operatorID: "viewer@test", readOnly: true, keyPath: key),
            conninfo: conninfo,
            project: "test", fallback: 0)
        #expect(try viewer.status().assessment.verdict.level == .halt)
        _ = try viewer.snapshot()
        let store = try PostgresConfigStore(conninfo: conninfo)
        func kills() throws -> [VersionInfo] {
            try store.versions(limit: 1000, before: nil).filter { $0.updateUser == "guardrail (auto-kill)" }
        }
        #expect(try kills().isEmpty)

        let consoles = try (0..<2).map { i in
            try PostgresConsoleSource(
                team: try Wiring.teamSession(conninfo: conninfo, operatorID: "console\(i)@test", keyPath: key), conninfo: conninfo,
                project: "test", fallback: 0)
        }
        let failures = NSLock()
        nonisolated(unsafe) var errors: [String] = []
        DispatchQueue.concurrentPerform(iterations: consoles.count) { i in
            for _ in 0..<5 {
                do { _ = try consoles[i].snapshot() } catch { failures.withLock { errors.append("\(error)") } }
                usleep(20_000)
            }
        }
        #expect(errors.isEmpty, "\(errors)")
        #expect(try kills().count == 1)
        for c in consoles + [viewer] { #expect(try c.snapshot().condition.state == .killed) }
        #expect(try rollout(["audit", "verify"], store: conninfo).status == 0)
    }

    /// A HALT from ingested telemetry: `watch` on the PostgreSQL store publishes one kill through the
    /// write path (two watchers at once, one kill between them); a read-only watch only looks.
    @Test func watchAutoKillsOnceAndIngestRefusesReadOnly() throws {
        let conninfo = try haltedStore()
        // Read-only: a look, no kill; auto-kill off: no kill either.
        #expect(try rollout(["watch", "--looks", "2", "--interval", "0.05"], store: conninfo).status == 7)
        #expect(try rollout(["policy", "set", "guardrails.auto-kill", "on"], store: conninfo).status == 0)
        #expect(
            try rollout(["watch", "--looks", "2", "--interval", "0.05", "--read-only"], store: conninfo).status == 7)
        let store = try PostgresConfigStore(conninfo: conninfo)
        func kills() throws -> [VersionInfo] {
            try store.versions(limit: 1000, before: nil).filter { $0.updateUser == "guardrail (auto-kill)" }
        }
        #expect(try kills().isEmpty)

        // A refused ingest on the read-only store: exit 4, nothing landed.
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events =
            (0..<20).map {
                #"{"t":\#(now - Int64($0) * 1_000_000),"i":"pg-ro-\#($0)","k":"session","c":"\#($0 % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
            }.joined(separator: "\n") + "\n"
        let batchesBefore = try store.connection.query("SELECT count(*) FROM telemetry_batches").first?.first ?? nil
        let refused = try rollout(["ingest", "-", "--read-only"], store: conninfo, stdin: events)
        #expect(refused.status == 4, "\(refused.stdout) \(refused.stderr)")
        #expect(
            try store.connection.query("SELECT count(*) FROM telemetry_batches").first?.first ?? nil == batchesBefore)

        let binary = try TestSupport.rolloutBinary()
        let watches = try (0..<2).map { _ in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: binary)
            p.arguments = ["watch", "--json", "--interval", "0.05", "--looks", "10", "--store", conninfo]
            p.environment = ProcessInfo.processInfo.environment.merging(["ROLLOUT_STORE_KEY": key]) { $1 }
            p.standardOutput = Pipe()
            p.standardError = Pipe()
            try p.run()
            return p
        }
        var published = 0
        for w in watches {
            let out = String(
                decoding: (w.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            w.waitUntilExit()
            #expect(w.terminationStatus == 7)
            published += out.split(separator: "\n").filter { $0.contains("\"autoKill\":\"auto-kill:") }.count
        }
        let k = try kills()
        #expect(k.count == 1, "\(k.map(\.number))")
        #expect(published == 1)
        #expect(try rollout(["status", "--json"], store: conninfo).stdout.contains("\"state\": \"killed\""))
        #expect(try rollout(["audit", "verify"], store: conninfo).status == 0)
    }
}
