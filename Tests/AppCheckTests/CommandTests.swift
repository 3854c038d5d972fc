import AppCheck
import Crypto
import Foundation
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// `rollout attest verify` and `rollout token verify`, through the built binary.
@Suite struct CommandTests {
    func rollout(_ args: [String]) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), args, environment: ["ROLLOUT_STORE": "/nonexistent/rollout-test.db"])
    }

    func attestArgs(_ v: AppAttestVector, at: Instant? = nil, rawHash: Bool = false) throws -> [String] {
        var args = [
            "attest", "verify", "--attestation", Base64.encode(v.attestation), "--key-id",
            Base64.encode(v.keyId, urlSafe: true, padded: false),
            "--team", v.app.teamId, "--bundle", v.app.bundleId, "--env", v.environment.rawValue, "--at",
            (at ?? v.verifyAt).iso8601,
        ]
        if let data = v.clientData, !rawHash {
            args += ["--client-data", Base64.encode(data)]
        } else {
            args += ["--client-data-hash", Base64.encode(v.clientDataHash)]
        }
        if let a = v.assertions.first {
            args += [
                "--assertion", Base64.encode(a.bytes), "--assertion-client-data",
                Base64.encode(try #require(a.clientData)),
            ]
        }
        return args
    }

    @Test(arguments: AppAttestVector.names)
    func everyCheckPassesAtTheVectorsTime(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        let r = try rollout(try attestArgs(v))
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").filter { $0.hasPrefix("  ") }
        #expect(lines.count == 9 + (v.assertions.isEmpty ? 0 : 4))
        #expect(lines.allSatisfy { $0.hasPrefix("  pass  ") })
        #expect(r.stdout.hasSuffix("verified: every check passed\n"))

        let json = try rollout(try attestArgs(v) + ["--json"])
        #expect(json.status == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["verified"] as? Bool == true)
        #expect(object["publicKey"] as? String != nil)
    }

    @Test func rejectsAnExpiredLeafAndSaysWhy() throws {
        let v = try AppAttestVector.load("veehaitch-ios-14.4")
        let r = try rollout(try attestArgs(v, at: v.leafNotAfter + .days(1)))
        #expect(r.status == 1)
        #expect(
            r.stdout.contains(
                "  FAIL  certificate chain  certificateExpired: the credential certificate expired at 2021-01-25T12:13:35.000Z"
            ))
        #expect(r.stdout.contains("  pass  nonce"))
        #expect(r.stdout.contains("assertion: not run, the attestation did not verify"))
        #expect(r.stdout.contains("rejected: certificateExpired"))
    }

    @Test func appleSampleTakesTheRawHash() throws {
        let v = try AppAttestVector.load("apple-guide-2024")
        #expect(try rollout(try attestArgs(v, rawHash: true)).status == 0)
        var args = try attestArgs(v, rawHash: true)
        let i = try #require(args.firstIndex(of: "--client-data-hash"))
        args[i] = "--client-data"
        let r = try rollout(args)
        #expect(r.status == 1)
        #expect(r.stdout.contains("FAIL  nonce"))
    }

    @Test func usageErrorsExitTwo() throws {
        let v = try AppAttestVector.load("webauthn4j-kayak-2020")
        let both = try rollout(try attestArgs(v) + ["--client-data-hash", "AAAA"])
        #expect(both.status == 2)
        #expect(both.stderr.contains("not both"))
        #expect(try rollout(["attest", "verify", "--attestation", "%%%"]).status == 2)
        #expect(try rollout(try attestArgs(v).map { $0 == "production" ? "staging" : $0 }).status == 2)
        #expect(try rollout(try attestArgs(v).map { $0 == v.verifyAt.iso8601 ? "yesterday" : $0 }).status == 2)
    }

    @Test func tokenVerifyChecksReplayInTheStore() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-cli").appendingPathComponent("store.db").path
        let token: AppCheckToken
        do {
            let f = try ExchangeFixture(state: AppCheckStateTables(database: RolloutStore(path: path).database))
            token = try f.attest(limitedUse: true).token
        }
        let at = (Demo.time + .minutes(1)).iso8601
        let verify = ["token", "verify", token.token, "--store", path, "--at", at]
        let plain = try rollout(verify)
        #expect(plain.status == 0, "\(plain.stdout)\(plain.stderr)")
        #expect(plain.stdout.contains("  pass  signature"))
        let first = try rollout(verify + ["--consume"])
        #expect(first.status == 0)
        #expect(first.stdout.contains("  pass  replay"))
        let second = try rollout(verify + ["--consume", "--json"])
        #expect(second.status == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(second.stdout.utf8)) as? [String: Any])
        #expect((object["token"] as? [String: Any])?["error"] as? String == "alreadyConsumed")
        #expect((object["claims"] as? [String: Any])?["jti"] as? String == token.claims.tokenId)

        let late = try rollout([
            "token", "verify", token.token, "--store", path, "--at", (Demo.time + .minutes(6)).iso8601,
        ])
        #expect(late.status == 1)
        #expect(late.stdout.contains("FAIL  expiry"))
        let forged = try rollout(["token", "verify", token.token.dropLast(4) + "AAAA", "--store", path, "--at", at])
        #expect(forged.status == 1)
        #expect(forged.stdout.contains("FAIL  signature"))
    }

    /// Issue 13: a token's header is the attacker's text; its check details reach the terminal escaped.
    @Test func tokenVerifyEscapesTheHeadersTextForTheTerminal() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-hostile-kid").appendingPathComponent("store.db").path
        _ = try ExchangeFixture(state: AppCheckStateTables(database: RolloutStore(path: path).database))
        let header = #"{"alg":"RS256","typ":"JWT","kid":"\u001b]0;pwned\u0007\u001b[2J"}"#
        let token = Base64.encodeURL(Array(header.utf8)) + "." + Base64.encodeURL(Array("{}".utf8)) + ".c2ln"
        let r = try rollout(["token", "verify", token, "--store", path])
        #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
        #expect(!r.stdout.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 }, "\(r.stdout.debugDescription)")
        #expect(r.stdout.contains(#"\u001b]0;pwned\u0007"#), "\(r.stdout)")
    }

    /// Issue 13: an unsigned token with exp 2^62 crashed the binary (SIGILL) before the signature was checked.
    @Test func tokenVerifyRefusesExtremeClaimsWithAMessage() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-hostile").appendingPathComponent("store.db").path
        let issuer: AppCheckTokenIssuer
        do {
            let f = try ExchangeFixture(state: AppCheckStateTables(database: RolloutStore(path: path).database))
            let stored = try #require(try f.state.signingKeys().first)
            issuer = AppCheckTokenIssuer(
                key: try AppCheckSigningKey(privateKeyDER: stored.privateKeyDER, createdAt: Demo.time))
        }
        let claims =
            "{\"sub\":\"\(ExchangeFixture.demoApp.appId)\",\"aud\":[\"projects/123456789012\"],"
            + "\"iss\":\"https://firebaseappcheck.googleapis.com/123456789012\",\"exp\":4611686018427387904,\"iat\":1780000000}"
        let unsigned =
            Base64.encodeURL(Array("{\"alg\":\"none\",\"typ\":\"JWT\",\"kid\":\"\(issuer.key.kid)\"}".utf8)) + "."
            + Base64.encodeURL(Array(claims.utf8)) + "."
        let at = (Demo.time + .minutes(1)).iso8601
        for consume in [[], ["--consume"]] {
            let r = try rollout(["token", "verify", unsigned, "--store", path, "--at", at] + consume)
            #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
            #expect(r.stdout.contains("rejected: unsupportedHeader: unsupported token header: alg is none, not RS256"))
            #expect(r.stdout.contains("  skip  expiry"))
        }
        let signed = try issuer.token(payload: Array(claims.utf8))
        let r = try rollout(["token", "verify", signed, "--store", path, "--at", at, "--consume"])
        #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains("  pass  signature"))
        #expect(
            r.stdout.contains(
                "rejected: invalidClaim: claim exp: 4611686018427387904 is outside 0 ... 253402300799 (1970 to 9999)"))
        let json = try rollout(["token", "verify", signed, "--store", path, "--at", at, "--json"])
        #expect(json.status == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect((object["token"] as? [String: Any])?["error"] as? String == "invalidClaim")
        #expect(object["claims"] == nil)
    }

    @Test func trustDemoUsesTheStoresDemoRoot() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-demo-cli").appendingPathComponent("store.db").path
        let state = try AppCheckStateTables(database: RolloutStore(path: path).database)
        let authority = try DemoCertificateAuthority.loadOrCreate(in: state)
        let device = try SimulatedAppAttestKey(authority: authority, app: Demo.app, environment: .development)
        let challenge = Array("simulated challenge".utf8)
        let attestation = try device.attestation(clientDataHash: SHA256.hash(challenge), at: Demo.time)
        let args = [
            "attest", "verify", "--attestation", Base64.encode(attestation), "--key-id", Base64.encode(device.keyId),
            "--team", Demo.app.teamId, "--bundle", Demo.app.bundleId, "--client-data", Base64.encode(challenge),
            "--env", "development", "--at", (Demo.time + .hours(1)).iso8601, "--store", path,
        ]
        let appleOnly = try rollout(args)
        #expect(appleOnly.status == 1)
        #expect(appleOnly.stdout.contains("FAIL  certificate chain  demoRootNotTrusted"))
        let trusting = try rollout(args + ["--trust-demo"])
        #expect(trusting.status == 0, "\(trusting.stdout)")
        #expect(
            trusting.stdout.contains("anchored in Apple App Attestation Root CA / rollout Demo App Attestation Root CA")
        )
    }

    @Test func tokenVerifyNeedsAStore() throws {
        let r = try rollout(["token", "verify", "a.b.c"])
        #expect(r.status == 1)
        #expect(
            r.stderr
                == "rollout: no store at /nonexistent/rollout-test.db (create one with 'rollout init --store /nonexistent/rollout-test.db')\n"
        )
        let empty = try TestSupport.temporaryDirectory("appcheck-empty").appendingPathComponent("store.db").path
        _ = try RolloutStore(path: empty)
        let e = try rollout(["token", "verify", "a.b.c", "--store", empty])
        #expect(e.status == 1)
        #expect(e.stderr.contains("no App Check configuration"))
    }
}
