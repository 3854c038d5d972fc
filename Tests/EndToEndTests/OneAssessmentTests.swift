import Console
import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import Telemetry
import TestSupport
import Testing
import Timekeeping

/// One store, one instant, one verdict: `status --json`, `telemetry --json` (the built binary), the console's
/// model and the guardrail policy of the write path agree on level, reasons and counts.
@Suite(.serialized) struct OneAssessmentTests {
    /// A finished simulation freezes telemetry time at its end, so every reader sees the same instant.
    static func crashRegressionStore() throws -> (path: String, dir: URL) {
        let dir = try TestSupport.temporaryDirectory("one-truth")
        let path = dir.appendingPathComponent("drill.db").path
        let sim = try TestSupport.run(
            try TestSupport.rolloutBinary(),
            [
                "simulate", "--scenario", "crash-regression", "--devices", "6000", "--speed", "max", "--duration", "2h",
                "--seed", "3", "--store", path, "--quiet",
            ])
        #expect(sim.status == 0, "\(sim.stderr)")
        return (path, dir)
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    struct Seen: Equatable, CustomStringConvertible {
        var level: String
        var reason: String
        var findings: [String]
        var counts: [Int64]
        var description: String { "\(level): \(reason) \(counts) [\(findings.count) findings]" }
    }

    static func seen(_ assessment: [String: Any]) throws -> Seen {
        let findings = try #require(assessment["findings"] as? [[String: Any]]).map { $0["text"] as? String ?? "" }
        let counts = try #require(assessment["counts"] as? [String: [String: Any]])
        var numbers: [Int64] = []
        for arm in ["exposed", "control"] {
            for key in ["sessions", "fatalCrashes", "users", "crashedUsers"] {
                numbers.append((counts[arm]?[key] as? NSNumber)?.int64Value ?? -1)
            }
        }
        return Seen(
            level: assessment["level"] as? String ?? "", reason: assessment["reason"] as? String ?? "", findings: findings,
            counts: numbers)
    }

    @Test("crash-regression, 2 h: status --json, telemetry --json, the console's model and the guardrail see one verdict")
    func oneVerdictEverywhere() throws {
        let (path, dir) = try Self.crashRegressionStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let binary = try TestSupport.rolloutBinary()

        let status = try TestSupport.run(binary, ["status", "--json", "--store", path])
        #expect(status.status == 0, "\(status.stderr)")
        let fromStatus = try Self.seen(try #require(try Self.json(status.stdout)["assessment"] as? [String: Any]))

        let telemetry = try TestSupport.run(binary, ["telemetry", "--json", "--store", path])
        #expect(telemetry.status == 0, "\(telemetry.stderr)")
        let telemetryJSON = try Self.json(telemetry.stdout)
        #expect(telemetryJSON["hypothetical"] as? Bool == false)
        let fromTelemetry = try Self.seen(try #require(telemetryJSON["assessment"] as? [String: Any]))

        // The console's source, as `rollout console` builds it (no auto-kill: this test only reads).
        let source = try StoreConsoleSource(
            path: path, clock: SystemClock(), operatorID: "ana@example.com", readOnly: true, project: "test")
        let model = try source.snapshot()
        let consoleStatus = try source.status()

        // The guardrail, as the write path consults it for an increase.
        let session = try Wiring.session(path: path, operatorID: "ana@example.com", readOnly: true)
        let preview = try session.writePath().preview(
            WritePath.Request(intent: .rollout(.nudge(RemoteConfig.MicroPercent(percent: 5))), actor: "ana@example.com", origin: "TEST"))
        let guardrail = try #require(preview.reports.first { $0.policy == "guardrail" })
        let guardrailInput = try session.monitor().guardrailInput()

        #expect(fromStatus.level == "HALT", "\(fromStatus)")
        #expect(fromStatus == fromTelemetry, "status \(fromStatus) vs telemetry \(fromTelemetry)")
        #expect(fromStatus.findings.count >= 2)

        // The console: the same level, the reason first, the same findings, the same counts.
        #expect(model.crash.verdict == .halt)
        #expect(model.crash.reasons.first == fromStatus.reason)
        #expect(Set(model.crash.reasons) == Set(fromStatus.findings))
        let t = consoleStatus.snapshot.crash.totals
        #expect(
            [t.exposedSessions, t.exposedCrashes, t.exposedUsers, t.exposedCrashedUsers, t.controlSessions, t.controlCrashes, t.controlUsers, t.controlCrashedUsers]
                == fromStatus.counts)
        #expect(Int64(model.crash.exposed.users) == fromStatus.counts[2])
        #expect(Int64(model.crash.control.sessions) == fromStatus.counts[4])

        // The guardrail: the same verdict, and it refuses the increase for it.
        #expect("\(guardrailInput.verdict.level)" == fromStatus.level)
        #expect(guardrailInput.verdict.reason == fromStatus.reason)
        #expect(guardrailInput.verdict.findings.map(\.text) == fromStatus.findings)
        #expect(guardrail.lines.first == "verdict HALT: \(fromStatus.reason)")
        guard case .refuse = guardrail.decision else {
            Issue.record("the guardrail allowed an increase at HALT")
            return
        }

        // status --check exits with the verdict.
        let check = try TestSupport.run(binary, ["status", "--check", "--store", path])
        #expect(check.status == 7, "\(check.stderr)")
        // A what-if is labelled and differs from the store's own view only where asked.
        let whatIf = try TestSupport.run(binary, ["telemetry", "--percent", "0", "--store", path])
        #expect(whatIf.stdout.hasPrefix("HYPOTHETICAL: exposed 0% (a what-if; not the store's verdict)"), "\(whatIf.stdout)")
        // Data age is never negative anywhere.
        for text in [status.stdout, telemetry.stdout] {
            #expect(!text.contains("\"dataAgeSeconds\" : -"))
        }
    }
}
