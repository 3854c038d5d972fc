import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import Testing
import TestSupport
import Timekeeping

/// The status-code table of the exchange, one test per row, over real HTTP on 127.0.0.1. Every error body has
/// Google's shape `{"error": {"code", "message", "status"}}`.
@Suite struct StatusCodeTests {
    func expectError(
        _ r: (status: Int, json: JSONValue?), _ code: Int, _ status: String, reason: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(r.status == code, "\(r)", sourceLocation: sourceLocation)
        let error = r.json?["error"]
        #expect(error?["code"]?.numberValue?.int64 == Int64(code), sourceLocation: sourceLocation)
        #expect(error?["status"]?.stringValue == status, "\(r)", sourceLocation: sourceLocation)
        #expect(error?["message"]?.stringValue?.isEmpty == false, sourceLocation: sourceLocation)
        if let reason {
            #expect(
                error?["details"]?.arrayValue?.first?["reason"]?.stringValue == reason, "\(r)",
                sourceLocation: sourceLocation)
        }
    }

    @Test func malformedJSONIs400InvalidArgument() throws {
        let f = try ServerFixture()
        expectError(
            try f.post(f.appPath("exchangeAppAttestAttestation"), raw: Array("{\"challenge\": ".utf8)), 400,
            "INVALID_ARGUMENT")
    }

    @Test func malformedBase64Is400InvalidArgument() throws {
        let f = try ServerFixture()
        let c = try f.challenge()
        expectError(
            try f.post(
                f.appPath("exchangeAppAttestAttestation"),
                ["attestationStatement": "not base64 !!", "challenge": .string(Base64.encode(c)), "keyId": "AAAA"]),
            400, "INVALID_ARGUMENT")
    }

    @Test func unknownFieldIs400InvalidArgument() throws {
        let f = try ServerFixture()
        expectError(try f.post(f.appPath("generateAppAttestChallenge"), ["surprise": true]), 400, "INVALID_ARGUMENT")
    }

    @Test func failedAttestationIs403PermissionDenied() throws {
        let f = try ServerFixture()
        let key = try f.newKey()
        let c = try f.challenge()
        // Signed over another challenge: the nonce does not match.
        let attestation = try key.attestation(clientDataHash: SHA256.hash(Array("another".utf8)), at: f.clock.now())
        expectError(
            try f.post(
                f.appPath("exchangeAppAttestAttestation"),
                [
                    "attestation_statement": .string(Base64.encode(attestation)),
                    "challenge": .string(Base64.encode(c)),
                    "key_id": .string(Base64.encode(key.keyId)),
                ]),
            403, "PERMISSION_DENIED")
    }

    @Test func demoCredentialsWithoutTrustDemoAre403() throws {
        let f = try ServerFixture(trustDemo: false)
        let key = try f.newKey()
        let c = try f.challenge()
        let attestation = try key.attestation(clientDataHash: SHA256.hash(c), at: f.clock.now())
        expectError(
            try f.post(
                f.appPath("exchangeAppAttestAttestation"),
                [
                    "attestationStatement": .string(Base64.encode(attestation)), "challenge": .string(Base64.encode(c)),
                    "keyId": .string(Base64.encode(key.keyId)),
                ]),
            403, "PERMISSION_DENIED")
    }

    @Test func replayedChallengeIs403() throws {
        let f = try ServerFixture()
        let (key, artifact, _) = try f.attest()
        let c = try f.challenge()
        func assertion() throws -> JSONValue {
            [
                "artifact": .string(Base64.encode(artifact)),
                "assertion": .string(Base64.encode(try key.assertion(clientDataHash: SHA256.hash(artifact + c)))),
                "challenge": .string(Base64.encode(c)),
            ]
        }
        #expect(try f.post(f.appPath("exchangeAppAttestAssertion"), try assertion()).status == 200)
        expectError(
            try f.post(f.appPath("exchangeAppAttestAssertion"), try assertion()), 403, "PERMISSION_DENIED",
            reason: "challengeAlreadyUsed")
    }

    @Test func expiredChallengeIs403() throws {
        let f = try ServerFixture()
        let (key, artifact, _) = try f.attest()
        let c = try f.challenge()
        f.clock.advance(by: .minutes(6))
        expectError(
            try f.post(
                f.appPath("exchangeAppAttestAssertion"),
                [
                    "artifact": .string(Base64.encode(artifact)),
                    "assertion": .string(Base64.encode(try key.assertion(clientDataHash: SHA256.hash(artifact + c)))),
                    "challenge": .string(Base64.encode(c)),
                ]),
            403, "PERMISSION_DENIED", reason: "challengeExpired")
    }

    @Test func replayedAssertionCounterIs403() throws {
        let f = try ServerFixture()
        let (key, artifact, _) = try f.attest()
        // An assertion made for one challenge, kept, and sent again with a fresh challenge: its counter and
        // signature do not fit the new challenge.
        let c1 = try f.challenge()
        let a1 = try key.assertion(clientDataHash: SHA256.hash(artifact + c1))
        #expect(
            try f.post(
                f.appPath("exchangeAppAttestAssertion"),
                [
                    "artifact": .string(Base64.encode(artifact)), "assertion": .string(Base64.encode(a1)),
                    "challenge": .string(Base64.encode(c1)),
                ]
            ).status == 200)
        let c2 = try f.challenge()
        expectError(
            try f.post(
                f.appPath("exchangeAppAttestAssertion"),
                [
                    "artifact": .string(Base64.encode(artifact)), "assertion": .string(Base64.encode(a1)),
                    "challenge": .string(Base64.encode(c2)),
                ]),
            403, "PERMISSION_DENIED")
    }

    @Test func unknownDebugTokenIs403() throws {
        let f = try ServerFixture()
        expectError(
            try f.post(f.appPath("exchangeDebugToken"), ["debugToken": "11111111-2222-3333-4444-555555555555"]), 403,
            "PERMISSION_DENIED", reason: "unknownDebugToken")
    }

    @Test func unknownAppIs404() throws {
        let f = try ServerFixture()
        expectError(
            try f.post(f.appPath("generateAppAttestChallenge", app: "1:123456789:ios:other"), [:]), 404, "NOT_FOUND",
            reason: "unknownApp")
    }

    @Test func unknownProjectIs404() throws {
        let f = try ServerFixture()
        expectError(try f.post(f.appPath("generateAppAttestChallenge", project: "someone-else"), [:]), 404, "NOT_FOUND")
    }

    @Test func unknownPathAndWrongMethodAre404() throws {
        let f = try ServerFixture()
        let r = try f.client.request("GET", f.appPath("generateAppAttestChallenge"))
        expectError((r.status, try? JSONParser().parse(r.body)), 404, "NOT_FOUND")
        expectError(try f.post("/v1/projects/x/apps/y", [:]), 404, "NOT_FOUND")
    }

    @Test func rateLimitIs429ResourceExhausted() throws {
        let f = try ServerFixture(rateLimit: 2)
        #expect(try f.post(f.appPath("generateAppAttestChallenge"), [:]).status == 200)
        #expect(try f.post(f.appPath("generateAppAttestChallenge"), [:]).status == 200)
        let r = try f.client.request("POST", f.appPath("generateAppAttestChallenge"), body: Array("{}".utf8))
        expectError((r.status, try? JSONParser().parse(r.body)), 429, "RESOURCE_EXHAUSTED")
        #expect(r.headers["retry-after"] == "1")
        f.clock.advance(by: .seconds(Int64(1)))
        #expect(try f.post(f.appPath("generateAppAttestChallenge"), [:]).status == 200)
    }

    @Test func storeTroubleIs503Unavailable() throws {
        let f = try ServerFixture()
        let (key, artifact, _) = try f.attest()
        func assertion() throws -> JSONValue {
            let c = try f.challenge()
            return [
                "artifact": .string(Base64.encode(artifact)),
                "assertion": .string(Base64.encode(try key.assertion(clientDataHash: SHA256.hash(artifact + c)))),
                "challenge": .string(Base64.encode(c)),
            ]
        }
        let during = try assertion()
        f.state.fail(true)
        // Issuing a challenge needs no store (it authenticates itself); redeeming one does.
        #expect(try f.post(f.appPath("generateAppAttestChallenge"), [:]).status == 200)
        expectError(try f.post(f.appPath("exchangeAppAttestAssertion"), during), 503, "UNAVAILABLE")
        f.state.fail(false)
        #expect(try f.post(f.appPath("exchangeAppAttestAssertion"), try assertion()).status == 200)
    }

    /// Reproduction: a 503 carried the store's error to the client (`the store does not answer: ...`, `App Check
    /// state unavailable: ...`, `the batch was not ingested: ...`), paths and the system's messages included. Each
    /// body is now Google's generic one; the reason is in the server's access log, on the request's line.
    @Test func storeTroubleStaysInTheServersLog() throws {
        let f = try ServerFixture()
        let (key, artifact, _) = try f.attest()
        let c = try f.challenge()
        let assertion: JSONValue = [
            "artifact": .string(Base64.encode(artifact)),
            "assertion": .string(Base64.encode(try key.assertion(clientDataHash: SHA256.hash(artifact + c)))),
            "challenge": .string(Base64.encode(c)),
        ]
        let before = f.log.waitFor(3).count
        f.state.fail(true)
        f.counters.fail(true)
        let line = "{\"t\":\(f.clock.now().microseconds),\"i\":\"fid-1\",\"k\":\"success\"}\n"
        let answers = [
            try f.post(f.appPath("exchangeAppAttestAssertion"), assertion),
            try f.post(
                "/v1/events", raw: Array(line.utf8),
                headers: [("Authorization", "Bearer \(ServerFixture.eventsToken)")]),
            try { () throws -> (status: Int, json: JSONValue?) in
                let r = try f.client.request("GET", "/healthz")
                return (r.status, try? JSONParser().parse(r.body))
            }(),
        ]
        for r in answers {
            expectError(r, 503, "UNAVAILABLE")
            let text = String(decoding: JSONWriter().bytes(r.json ?? .null), as: UTF8.self)
            #expect(!text.contains("disk I/O error") && !text.contains("/srv/secret"), "\(text)")
        }
        let logged = f.log.waitFor(before + 3).dropFirst(before)
        #expect(logged.map(\.status) == [503, 503, 503])
        for entry in logged {
            #expect(entry.line.contains("disk I/O error"), "\(entry.line)")
        }
    }

    @Test func bodyOverTheLimitIs413() throws {
        let f = try ServerFixture(exchangeBodyLimit: 1024)
        let big = Array("{\"debugToken\": \"\(String(repeating: "x", count: 2000))\"}".utf8)
        let r = try f.client.request("POST", f.appPath("exchangeDebugToken"), body: big)
        expectError((r.status, try? JSONParser().parse(r.body)), 413, "INVALID_ARGUMENT")
        // The connection was closed after the refusal; the client reconnects and the server still serves.
        #expect(try f.post(f.appPath("generateAppAttestChallenge"), [:]).status == 200)
    }

    @Test func healthz() throws {
        let f = try ServerFixture()
        let r = try f.client.request("GET", "/healthz")
        #expect(r.status == 200)
        #expect((try JSONParser().parse(r.body))["status"]?.stringValue == "serving")
    }

    @Test func accessLogHasOneStructuredLinePerRequest() throws {
        let f = try ServerFixture()
        _ = try f.challenge()
        _ = try f.client.request("GET", "/nowhere")
        let entries = f.log.waitFor(2)
        try #require(entries.count == 2, "\(entries.map(\.line))")
        #expect(entries.map(\.status) == [200, 404])
        #expect(entries.map(\.method) == ["POST", "GET"])
        #expect(entries[0].bytesIn == 2 && entries[0].bytesOut > 0)
        let line = try JSONParser().parse(entries[1].line)
        for field in ["time", "method", "path", "status", "durationMs", "bytesIn", "bytesOut", "remote"] {
            #expect(line[field] != nil, "\(field) missing in \(entries[1].line)")
        }
        #expect(line["path"]?.stringValue == "/nowhere")
    }

    /// `durationMs` is the whole microseconds as milliseconds with exactly three decimals.
    @Test(arguments: [(Int64(0), "0.000"), (5, "0.005"), (40, "0.040"), (1_234, "1.234"), (1_000_000, "1000.000"),
        (86_400_000_123, "86400000.123")])
    func durationIsMillisecondsWithThreeDecimals(microseconds: Int64, shown: String) {
        let entry = AccessLogEntry(
            time: Instant(seconds: 0), method: "POST", path: "/", status: 200, durationMicroseconds: microseconds,
            bytesIn: 1, bytesOut: 2, remote: "127.0.0.1")
        #expect(entry.line.contains("\"durationMs\":\(shown),"), "\(entry.line)")
    }
}
