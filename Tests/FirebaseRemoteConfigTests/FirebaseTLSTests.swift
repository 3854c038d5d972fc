import FirebaseFake
import FirebaseRemoteConfig
import WebClient
import Foundation
import JSON
import TestSupport
import Testing

/// The built binary against the strict fake served over HTTPS with a CA made for the test, and against answers
/// no client should hold: TLS is verified (peer and host name) with a one-line error naming what failed, and an
/// oversized answer is refused as it arrives, within a bounded memory.
@Suite(.serialized)
struct FirebaseTLSTests {
    /// A line of stderr that is not empty.
    static func lines(_ text: String) -> [Substring] { text.split(separator: "\n").filter { !$0.isEmpty } }

    @Test func theTestCAWorksAndEachCertificateFaultIsOneLineNamingItsCauseWithNothingWritten() throws {
        let fake = try FakeFirebase(template: existingTemplate, tls: true)
        #expect(fake.origin.hasPrefix("https://localhost:"))
        let initialised = try fake.rollout(["init", "--seed", "rollout-2026"])
        #expect(initialised.status == 0, "\(initialised.stderr)")
        let set = try fake.rollout(["set", "10", "--reason", "over https"])
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try fake.headNumber() == 3)
        let tokens = try fake.stat("token")
        #expect(tokens >= 2, "the binary fetched its access tokens over https")

        // (certificate served, environment, what the one line must name)
        let faults: [(String, [String: String], String)] = [
            ("expired", [:], "certificate has expired"),
            ("otherhost", [:], "localhost"),
            ("stranger", [:], "unable to get local issuer certificate"),
            // The system's CA store does not know the test CA.
            ("good", ["SSL_CERT_FILE": "", "CURL_CA_BUNDLE": ""], "unable to get local issuer certificate"),
        ]
        for (certificate, environment, cause) in faults {
            try fake.serveCertificate(certificate)
            let r = try fake.rollout(["nudge", "+1", "--reason", "must not land"], environment: environment)
            let context = Comment(rawValue: "\(certificate): \(r.stderr)")
            print("tls \(certificate): \(r.stderr)", terminator: "")
            #expect(r.status == 1, context)
            #expect(Self.lines(r.stderr).count == 1, context)
            #expect(r.stderr.contains(cause), context)
            #expect(r.stderr.contains("https://localhost:\(fake.port)"), context)
            #expect(try fake.headNumber() == 3, context)
        }
        // A certificate for another host fails on the host name, not on the issuer.
        try fake.serveCertificate("otherhost")
        let other = try fake.rollout(["status"])
        #expect(
            other.stderr.contains("subject name") || other.stderr.contains("does not match"), "\(other.stderr)")

        try fake.serveCertificate("good")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(verify.stdout)\(verify.stderr)")
        let status = try fake.json(["status"])
        #expect(status["rollout"]?["percentage"]?.stringValue == "10")
        // A CA bundle that does not exist is named, and nothing is sent.
        let none = fake.directory.path + "/none.pem"
        let missing = try fake.rollout(["status"], environment: ["CURL_CA_BUNDLE": none, "SSL_CERT_FILE": none])
        #expect(missing.status == 1 && Self.lines(missing.stderr).count == 1, "\(missing.stderr)")
        #expect(missing.stderr.contains("none.pem"), "\(missing.stderr)")
    }

    /// Runs the built binary on the fake and returns its result and peak resident set (KiB) as the kernel counted
    /// it for that process alone.
    static func measured(_ fake: FakeFirebase, _ arguments: [String], timeout: String = "60") throws
        -> (TestSupport.ProcessResult, Int)
    {
        let report = fake.directory.appendingPathComponent("rss-\(UUID().uuidString)").path
        let wrapper = """
            import resource, subprocess, sys
            r = subprocess.run(sys.argv[2:])
            open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
            sys.exit(r.returncode)
            """
        var env = fake.environment(operator: "ana@example.com")
        env["ROLLOUT_FIREBASE_TIMEOUT"] = timeout
        let r = try TestSupport.run(
            try TestSupport.python(),
            ["-c", wrapper, report, try TestSupport.rolloutBinary()] + arguments + ["--state", fake.stateLocation],
            environment: env)
        let kib = Int(try String(contentsOfFile: report, encoding: .utf8)) ?? -1
        return (r, kib)
    }

    @Test(arguments: ["giant_body", "declared_giant", "gzip_bomb"])
    func anOversizedAnswerIsRefusedAsItArrivesWithinABoundedMemory(_ fault: String) throws {
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)

        // Reads (the token endpoint's answer, then the API's listVersions, which is retried: every attempt
        // gets the fault): refused, one line, the process small.
        var readKiB: [Int] = []
        for (match, command) in [("token", ["status"]), ("list", ["history"])] {
            try fake.fault(fault, match: match, count: 20)
            defer { try? fake.clearFaults() }
            let (read, kib) = try Self.measured(fake, command)
            #expect(read.status == 1, "\(fault) on \(match): \(read.stdout)\(read.stderr)")
            #expect(read.stderr.contains("larger than 16 MiB"), "\(fault) on \(match): \(read.stderr)")
            #expect(Self.lines(read.stderr).count == 1, "\(fault) on \(match): \(read.stderr)")
            #expect(kib > 0 && kib <= 100 * 1024, "\(fault) on \(match): peak RSS \(kib) KiB")
            #expect(try fake.stat("faults_pending") < 20, "\(fault) on \(match): the fault was not reached")
            readKiB.append(kib)
        }

        // A publish Firebase applied before its oversized answer: the answer is refused, the intent stays and
        // is settled (by this command or the next), so the live version has its audit record.
        try fake.fault(fault, match: "publish")
        let (write, writeKiB) = try Self.measured(fake, ["nudge", "+1", "--reason", "oversized answer"])
        #expect(writeKiB > 0 && writeKiB <= 100 * 1024, "\(fault): peak RSS \(writeKiB) KiB")
        print("oversized answer \(fault): peak RSS \(readKiB) KiB (token, list), \(writeKiB) KiB (publish): \(write.stderr)", terminator: "")
        #expect(try fake.headNumber() == 4, "\(fault): Firebase applied the nudge (\(write.stderr))")
        #expect(try fake.rollout(["status"]).status == 0)
        let audit = try fake.json(["audit", "show", "--limit", "100"]).arrayValue ?? []
        let four = audit.filter { $0["version"]?.numberValue?.int64 == 4 && $0["result"]?.stringValue == "published" }
        #expect(four.count == 1, "\(fault): the applied nudge's audit record: \(audit)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(fault): \(verify.stdout)\(verify.stderr)")
    }
}

/// The fault drill of a publish through the built binary: each way an answer can be lost, malformed, contradictory
/// or refused, on the publish and on the token endpoint. Whatever the command said, after the next command every
/// version rollout published in Firebase has exactly one audit record, the chain verifies, nothing was published
/// twice, and the process stayed within 100 MB.
@Suite(.serialized)
struct FirebasePublishFaultDrillTests {
    static let cases: [(fault: String, match: String, seconds: Double)] = [
        ("no_etag", "publish", 0), ("invalid_json", "publish", 0), ("conflict_after", "publish", 0),
        ("drop_after", "publish", 0), ("slow_body", "publish", 0), ("redirect", "publish", 0),
        ("html_5xx", "publish", 0), ("rate_limited", "publish", 1), ("bad_request", "publish", 0),
        ("bad_request", "token", 0), ("unauthenticated", "token", 0), ("unavailable", "token", 0),
        ("html_5xx", "token", 0), ("gzip_bomb", "publish", 0),
    ]

    @Test(arguments: 0..<cases.count)
    func aPublishWhoseAnswerGoesWrongIsNeverLiveWithoutItsAuditRecord(_ index: Int) throws {
        let (fault, match, seconds) = Self.cases[index]
        let label = "\(fault) on \(match)"
        let fake = try FakeFirebase(template: existingTemplate)
        #expect(try fake.rollout(["init", "--seed", "rollout-2026"]).status == 0)
        #expect(try fake.rollout(["set", "10", "--reason", "start"]).status == 0)
        #expect(try fake.headNumber() == 3)

        try fake.fault(fault, match: match, count: 1, seconds: seconds)
        let (nudge, kib) = try FirebaseTLSTests.measured(fake, ["nudge", "+1", "--reason", "drill"], timeout: "3")
        print("drill \(label): exit \(nudge.status), peak RSS \(kib) KiB: \(nudge.stderr)", terminator: "")
        #expect(kib > 0 && kib <= 100 * 1024, "\(label): peak RSS \(kib) KiB")
        if nudge.status != 0 {
            #expect(FirebaseTLSTests.lines(nudge.stderr).count == 1, "\(label): \(nudge.stderr)")
        }
        try fake.clearFaults()

        // The next command settles whatever is pending.
        let status = try fake.rollout(["status"])
        #expect(status.status == 0, "\(label): \(status.stderr)")
        let head = try fake.headNumber()
        #expect(head == 3 || head == 4, "\(label): published twice? head v\(head)")
        let audit = try fake.json(["audit", "show", "--limit", "100"]).arrayValue ?? []
        let published = audit.filter { $0["result"]?.stringValue == "published" }
            .compactMap { $0["version"]?.numberValue?.int64 }.sorted()
        #expect(published == Array(2...Int64(head)), "\(label): published records \(published), Firebase head v\(head)")
        let verify = try fake.rollout(["audit", "verify"])
        #expect(verify.status == 0, "\(label): \(verify.stdout)\(verify.stderr)")
        if head == 4 {
            #expect(try fake.json(["status"])["rollout"]?["percentage"]?.stringValue == "11", "\(label)")
        }
    }
}
