import Foundation
import Testing
import TestSupport

/// The guardrail in the CLI's write path: once telemetry arms it, a HOLD refuses increases (exit 4, audited)
/// unless overridden with a reason; decreases and kills always pass.
struct GuardrailCLITests {
    @Test func holdRefusesIncreasesButNeverKillsOrDecreases() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        func rollout(_ args: String..., stdin: String? = nil) throws -> TestSupport.ProcessResult {
            try TestSupport.run(bin, args + ["--store", store, "--operator", "ana@example.com"], stdin: stdin)
        }
        #expect(try rollout("init").status == 0)
        // Not armed yet (no telemetry): the first step is allowed.
        #expect(try rollout("set", "10", "--reason", "start").status == 0)
        let status0 = try rollout("status", "--json").stdout
        #expect(status0.contains("\"armed\": false") && status0.contains("\"verdict\": \"HOLD\""))

        // Sessions from exposed devices only: telemetry arms the guardrails, and with no control group it is HOLD.
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let lines = (0..<30).map { #"{"t":\#(now - Int64($0) * 1_000_000),"i":"fid-\#($0)","k":"session","c":"enabled","p":"appAttest","os":"17.4"}"# }
        let ingest = try rollout("ingest", "--format", "native", "-", stdin: lines.joined(separator: "\n") + "\n")
        #expect(ingest.status == 0, "\(ingest.stderr)")
        let status1 = try rollout("status", "--json").stdout
        #expect(status1.contains("\"armed\": true") && status1.contains("\"verdict\": \"HOLD\""))
        // `policy show` does not contradict it: the by-hand switch is off, and the table says what off means.
        let armedRow = try rollout("policy", "show").stdout.split(separator: "\n").first { $0.hasPrefix("guardrails.armed ") }
        #expect(
            armedRow.map { $0.contains(" off ") && $0.contains("armed as soon as this rollout's telemetry arrives") } == true,
            "\(armedRow.map(String.init) ?? "no guardrails.armed row")")

        let refused = try rollout("nudge", "+5", "--reason", "more")
        #expect(refused.status == 4)
        #expect(refused.stderr.hasPrefix("rollout: refused by guardrail: "))
        #expect(try rollout("status", "--json").stdout.contains("\"microPercent\": 10000000"))

        #expect(try rollout("nudge", "+5", "--override-guardrail").status == 2)
        let overridden = try rollout("nudge", "+5", "--override-guardrail", "--reason", "drill: verified by hand")
        #expect(overridden.status == 0, "\(overridden.stderr)")
        #expect(try rollout("nudge", "-2").status == 0)
        #expect(try rollout("kill", "--reason", "drill").status == 0)

        let audit = try rollout("audit", "show", "--json").stdout
        #expect(audit.contains("refused by policy"))
        #expect(audit.contains("guardrail override"))
        #expect(try rollout("audit", "verify").status == 0)
    }

    /// With auto-kill on, telemetry that drives the verdict to HALT kills the rollout through the write path.
    @Test func autoKillOnHaltKillsTheRollout() throws {
        let dir = try TestSupport.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        func rollout(_ args: [String], stdin: String? = nil, minutesAgo: Int = 0) throws -> TestSupport.ProcessResult {
            let command = args + ["--store", store, "--operator", "ana@example.com"]
            if minutesAgo == 0 { return try TestSupport.run(bin, command, stdin: stdin) }
            return try TestSupport.run(bin, command, stdin: stdin, fakeTime: "-\(minutesAgo)m")
        }
        #expect(try rollout(["init"], minutesAgo: 30).status == 0)
        // The rollout started 20 minutes ago at 50%, so that exposed and control are the same size.
        #expect(try rollout(["set", "50", "--reason", "start"], minutesAgo: 20).status == 0)
        #expect(try rollout(["policy", "set", "guardrails.auto-kill", "on"]).status == 0)

        // Ten minutes of equal sessions in both groups, and crashes almost only among exposed devices.
        let now = Int64(Date().timeIntervalSince1970) - 4 * 60
        var lines: [String] = []
        for minute in 0..<10 {
            let t = (now - Int64(minute) * 60) * 1_000_000
            for d in 0..<40 {
                lines.append(#"{"t":\#(t + Int64(d)),"i":"e-\#(minute)-\#(d)","k":"session","c":"enabled","p":"appAttest"}"#)
                lines.append(#"{"t":\#(t + Int64(d)),"i":"c-\#(minute)-\#(d)","k":"session","c":"control","p":"appAttest"}"#)
            }
            for d in 0..<6 { lines.append(#"{"t":\#(t + 100 + Int64(d)),"i":"e-\#(minute)-\#(d)","k":"crash","c":"enabled"}"#) }
        }
        let ingest = try rollout(["ingest", "-"], stdin: lines.joined(separator: "\n") + "\n")
        #expect(ingest.status == 0, "\(ingest.stderr)")
        #expect(ingest.stderr.contains("auto-kill"))
        let status = try rollout(["status", "--json"]).stdout
        #expect(status.contains("\"state\": \"killed\""))
        #expect(status.contains("\"updateUser\": \"guardrail (auto-kill)\""))
        #expect(status.contains("\"description\": \"guardrail: "))
        #expect(try rollout(["audit", "verify"]).status == 0)
    }
}
