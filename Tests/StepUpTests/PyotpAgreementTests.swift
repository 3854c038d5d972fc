import Crypto
import Foundation
import StepUp
import Testing
import TestSupport
import Timekeeping

/// Differential tests against pyotp (PyPI, pinned in scripts/requirements.txt), driven in one process each.
@Suite("Agreement with pyotp")
struct PyotpAgreementTests {
    /// Runs `script` in the peer python with `input` as JSON on stdin; returns its stdout parsed as JSON.
    private func peer(_ script: String, input: Any) throws -> Any {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: input), as: UTF8.self)
        let result = try TestSupport.run(
            try TestSupport.python(), ["-c", script], stdin: json, environment: ["TZ": "UTC"])
        try #require(result.status == 0, "pyotp peer failed: \(result.stderr)")
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
    }

    /// 1,000 random secrets of random lengths at random times (step boundaries included), 6 to 8 digits.
    @Test func codesAgreeForAThousandRandomSecretsAndTimes() throws {
        var generator = SystemRandomNumberGenerator()
        var cases: [(secret: TOTPSecret, time: Int64, digits: Int)] = []
        for i in 0..<1000 {
            let secret = TOTPSecret.generate(byteCount: Int.random(in: 10...40, using: &generator))
            var time = Int64.random(in: 0...4_102_444_800, using: &generator)  // up to 2100
            if i % 10 == 0 { time = time / 30 * 30 + [-1, 0, 29][i / 10 % 3] }  // around a step edge
            cases.append((secret, max(0, time), [6, 6, 6, 7, 8][i % 5]))
        }
        let script = """
            import json, sys, pyotp
            out = [pyotp.TOTP(c["secret"], digits=c["digits"]).at(c["time"]) for c in json.load(sys.stdin)]
            print(json.dumps(out))
            """
        let input = cases.map { ["secret": $0.secret.base32, "time": $0.time, "digits": $0.digits] as [String: Any] }
        let theirs = try #require(try peer(script, input: input) as? [String])
        try #require(theirs.count == cases.count)
        var disagreements: [String] = []
        for (c, code) in zip(cases, theirs) {
            let ours = try TOTP(digits: c.digits).code(secret: c.secret, at: Instant(seconds: c.time))
            if ours != code { disagreements.append("t=\(c.time) digits=\(c.digits): ours \(ours), pyotp \(code)") }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
    }

    /// Our ±1-step window accepts exactly the codes pyotp's `verify(valid_window=1)` accepts.
    @Test func windowAgreesWithPyotpVerify() throws {
        let secret = TOTPSecret.generate()
        let now = Instant(seconds: 1_780_000_015)
        let current = TOTP.standard.step(at: now)
        // The codes of steps -3...+3 around now, plus random codes.
        var codes = (-3...3).map { TOTP.standard.code(secret: secret, step: current + Int64($0)) }
        for _ in 0..<50 { codes.append(String(format: "%06d", Int.random(in: 0..<1_000_000))) }
        let script = """
            import json, sys, pyotp
            c = json.load(sys.stdin)
            t = pyotp.TOTP(c["secret"])
            print(json.dumps([t.verify(code, for_time=c["time"], valid_window=1) for code in c["codes"]]))
            """
        let theirs = try #require(
            try peer(script, input: ["secret": secret.base32, "time": now.seconds, "codes": codes] as [String: Any])
                as? [Bool])
        let verifier = CodeVerifier()
        let record = OperatorRecord(id: try OperatorID("ana"), secret: secret, enrolledAt: Instant(seconds: 0))
        let ours = codes.map { verifier.verify($0, record: record, at: now).outcome.isAccepted }
        #expect(ours == theirs)
        #expect(ours.prefix(7) == [false, false, true, true, true, false, false])
    }

    /// pyotp reads our otpauth URIs back to the same account, issuer, secret and parameters, and a strict
    /// RFC 3986 reading (split, then unescape each part) gives the same label.
    @Test(arguments: ["ana@laptop", "Ana María", "oncall+rollouts@example.com", "x/y z"])
    func provisioningURIReadsBackInPyotp(account: String) throws {
        let secret = TOTPSecret.generate()
        let uri = OTPAuthURI(secret: secret, issuer: "rollout", account: account).absoluteString
        #expect(uri.hasPrefix("otpauth://totp/rollout:"))
        #expect(uri.hasSuffix("&issuer=rollout&algorithm=SHA1&digits=6&period=30"))
        #expect(!uri.contains(" "))
        let script = """
            import json, sys, pyotp, urllib.parse
            uri = json.load(sys.stdin)[0]
            t = pyotp.parse_uri(uri)
            parts = urllib.parse.urlsplit(uri)
            issuer, account = parts.path[1:].split(":", 1)
            q = urllib.parse.parse_qs(parts.query)
            print(json.dumps({"name": t.name, "issuer": t.issuer, "secret": t.secret, "digits": t.digits,
                "interval": t.interval, "code": t.at(1780000000), "strictIssuer": urllib.parse.unquote(issuer),
                "strictAccount": urllib.parse.unquote(account), "queryIssuer": q["issuer"][0]}))
            """
        let theirs = try #require(try peer(script, input: [uri]) as? [String: Any])
        #expect(theirs["name"] as? String == account)
        #expect(theirs["issuer"] as? String == "rollout")
        #expect(theirs["secret"] as? String == secret.base32)
        #expect(theirs["digits"] as? Int == 6)
        #expect(theirs["interval"] as? Int == 30)
        #expect(theirs["code"] as? String == TOTP.standard.code(secret: secret, at: Instant(seconds: 1_780_000_000)))
        #expect(theirs["strictAccount"] as? String == account)
        #expect(theirs["strictIssuer"] as? String == "rollout")
        #expect(theirs["queryIssuer"] as? String == "rollout")
    }

    /// Characters that would break the label or the query are escaped (checked by the strict reading only:
    /// pyotp unescapes the whole URI before splitting it, so it cannot read these back).
    @Test func separatorsInIssuerAndAccountAreEscaped() throws {
        let secret = TOTPSecret(bytes: Array("12345678901234567890".utf8))
        let uri = OTPAuthURI(secret: secret, issuer: "Acme & Co: ops", account: "a?b#c=d&e").absoluteString
        #expect(
            uri == "otpauth://totp/Acme%20%26%20Co%3A%20ops:a%3Fb%23c%3Dd%26e?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
                + "&issuer=Acme%20%26%20Co%3A%20ops&algorithm=SHA1&digits=6&period=30")
        let script = """
            import json, sys, urllib.parse
            parts = urllib.parse.urlsplit(json.load(sys.stdin)[0])
            issuer, account = parts.path[1:].split(":", 1)
            q = urllib.parse.parse_qs(parts.query)
            print(json.dumps([urllib.parse.unquote(issuer), urllib.parse.unquote(account), q["issuer"][0], q["secret"][0]]))
            """
        let theirs = try #require(try peer(script, input: [uri]) as? [String])
        #expect(theirs == ["Acme & Co: ops", "a?b#c=d&e", "Acme & Co: ops", secret.base32])
    }
}
