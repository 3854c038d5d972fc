import Foundation
import Testing
import TestSupport

/// `rollout demo --source recorded` in a real terminal: the console fed through the source path (the GA4 realtime
/// source's caller, its reading of the report, the ledger and the store's telemetry commit) from the recorded answers
/// in Tests/Recorded, no network: the counts of the recording show, and the source's pull is in the log.
@Suite("demo: the console through recorded GA4 answers", .serialized)
struct RecordedDemoTests {
    @Test func theRecordedDemoShowsLiveCounts() throws {
        let binary = try TestSupport.rolloutBinary()
        let recorded = TestSupport.packageRoot.appendingPathComponent("Tests/Recorded").path
        let session = try TerminalSession(
            [binary, "demo", "--source", "recorded:" + recorded, "--operator", "ana@example.com"], width: 120,
            height: 40,
            environment: ["NO_COLOR": "1"])
        defer { session.close() }
        let screen = try session.waitUntil("the recorded counts", timeout: 60) {
            $0.contains("source recorded: realtime data age") && !$0.contains("✓ 0 success")
        }
        // The header names the demo, once it is not flashing a verdict that rose moments ago (six seconds at most).
        let header = try session.waitUntil("the header naming the recorded demo", timeout: 15) {
            $0.contains("demo · recorded GA4 realtime")
        }
        #expect(header.contains("demo · recorded GA4 realtime"), "\(header)")
        // Sessions of both arms and attestations, as the recording states them.
        #expect(
            screen.range(of: #"sessions +[0-9.]+% of [1-9][0-9]*"#, options: .regularExpression) != nil, "\(screen)")
        #expect(screen.range(of: #"✓ [1-9][0-9,]* success"#, options: .regularExpression) != nil, "\(screen)")
        try session.press("q")
        #expect(try session.exitStatus(timeout: 30) == 0)
    }

    /// A directory without a recording is an error naming it, before any screen.
    @Test func aMissingRecordingIsAnError() throws {
        let binary = try TestSupport.rolloutBinary()
        let dir = try TestSupport.temporaryDirectory("recorded-none")
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try TestSupport.run(
            binary, ["demo", "--source", "recorded:" + dir.path, "--operator", "ana@example.com"])
        #expect(r.status != 0 && r.stderr.contains("holds no recorded answer"), "\(r.stderr)")
        let usage = try TestSupport.run(binary, ["demo", "--source", "bigquery", "--operator", "ana@example.com"])
        #expect(usage.status == 2 && usage.stderr.contains("--source takes recorded"), "\(usage.stderr)")
    }
}
