import FirebaseFake
import Foundation
import TestSupport
import Testing
import Timekeeping

/// A source's own words (a failing server's error message) reach the verdict, which every face shows: escaped in
/// each, so that a server cannot retitle, clear or recolour the operator's terminal. `rollout telemetry` printed
/// them raw while status, watch and the console escaped them.
@Suite("a hostile source's words are shown escaped", .serialized)
struct HostileSourceTextTests {
    @Test func theVerdictQuotingAFailingSourceIsEscapedByTelemetry() throws {
        let fake = try FakeFirebase(tls: true)
        let dir = try TestSupport.temporaryDirectory("hostile-source")
        let store = dir.appendingPathComponent("r.db").path
        let environment = [
            "ROLLOUT_OPERATOR": "ana@example.com", "NO_COLOR": "1", "HOME": dir.path,
            "XDG_STATE_HOME": dir.appendingPathComponent("xdg").path, "ROLLOUT_BIGQUERY_URL": fake.origin,
            "CURL_CA_BUNDLE": fake.caFile, "SSL_CERT_FILE": fake.caFile,
        ]
        func run(_ arguments: [String]) throws -> TestSupport.ProcessResult {
            try TestSupport.run(try TestSupport.rolloutBinary(), arguments + ["--store", store], environment: environment)
        }
        #expect(try run(["init", "--seed", "s"]).status == 0)
        let since = Instant(seconds: Int64(Date().timeIntervalSince1970) - 3600).iso8601
        let added = try run([
            "source", "add", "bq", "--bigquery", fake.project, "--analytics", "\(fake.project).analytics_123456",
            "--source-credentials", fake.keyFile, "--since", since,
        ])
        #expect(added.status == 0, "\(added.stderr)")
        let hostile = "bad \u{1B}]0;PWNED\u{07}\u{1B}[2J\u{1B}[31mRED \u{9B}31m \u{202E}"
        try fake.fault("bad_request", match: "bigquery_query", count: 50, value: hostile)
        _ = try run(["follow", "--looks", "1", "--interval", "0.01"])

        let shown = try run(["telemetry"])
        #expect(shown.stdout.contains("PWNED"), "the source's words are shown: \(shown.stdout)")
        for raw in ["\u{1B}", "\u{07}", "\u{9B}", "\u{202E}"] {
            #expect(!shown.stdout.contains(raw), "raw \(raw.unicodeScalars.first!.value) in: \(shown.stdout)")
        }
    }
}
