import AppCheck
import Crypto
import Foundation
import Testing
import Timekeeping

/// Tokens as an attacker writes them (issue 13): extreme claims, unsigned tokens, re-spelled segments.
@Suite struct HostileTokenTests {
    /// Time claims that no valid token carries, as JSON literals; every one was a trap or a lenient accept.
    static let extremeTimes = [
        "9223372036854775807", "-9223372036854775808", "4611686018427387904", "-4611686018427387904",
        "9223372036854775808", "18446744073709551616", "9223372036855", "-9223372036855", "253402300800", "-1",
        "1.5", "1780000000.0", "1e3", "1E400", "-1e400", "1.7976931348623157e308", "0.0000001", "-0.0",
        "1" + String(repeating: "0", count: 400), "\"1780000000\"", "null", "true", "[1780000000]", "{}",
    ]

    let fixture: ExchangeFixture
    let issuer: AppCheckTokenIssuer
    let now: Instant

    init() throws {
        fixture = try ExchangeFixture()
        let stored = try #require(try fixture.state.signingKeys().first)
        issuer = AppCheckTokenIssuer(
            key: try AppCheckSigningKey(privateKeyDER: stored.privateKeyDER, createdAt: Demo.time))
        now = fixture.clock.now()
    }

    func payload(iat: String, exp: String, jti: String? = nil) -> [UInt8] {
        var members = [
            "\"sub\":\"\(ExchangeFixture.demoApp.appId)\"",
            "\"aud\":[\"projects/123456789012\",\"projects/rollout-demo\"]",
            "\"iss\":\"https://firebaseappcheck.googleapis.com/123456789012\"", "\"exp\":\(exp)", "\"iat\":\(iat)",
        ]
        if let jti { members.append("\"jti\":\(jti)") }
        return Array("{\(members.joined(separator: ","))}".utf8)
    }

    func unsigned(_ payload: [UInt8]) -> String {
        Base64.encodeURL(Array("{\"alg\":\"none\",\"typ\":\"JWT\",\"kid\":\"\(issuer.key.kid)\"}".utf8)) + "."
            + Base64.encodeURL(payload) + "."
    }

    var verifier: AppCheckTokenVerifier { fixture.exchange.tokenVerifier }

    @Test(arguments: extremeTimes)
    func extremeExpiryIsAnErrorNamingTheClaim(_ value: String) throws {
        let iat = String(now.seconds)
        let signed = try issuer.token(payload: payload(iat: iat, exp: value))
        for report in [
            verifier.evaluate(signed, at: now), verifier.evaluate(signed, at: now, consumingIn: fixture.state),
        ] {
            guard case .invalidClaim(let claim, let reason)? = report.failure else {
                Issue.record("exp \(value): \(String(describing: report.failure))")
                continue
            }
            #expect(claim == "exp")
            #expect(!reason.isEmpty)
            let outcome = Dictionary(uniqueKeysWithValues: report.checks.map { ($0.name, $0.outcome) })
            #expect(outcome["signature"] == .passed)
            #expect(outcome["claims"] == .failed)
            #expect(outcome["expiry"] == .skipped)
        }
        // The unsigned token is refused at its header, before any claim is read.
        let none = verifier.evaluate(unsigned(payload(iat: iat, exp: value)), at: now, consumingIn: fixture.state)
        #expect(none.failure == .unsupportedHeader("alg is none, not RS256"))
        #expect(none.checks.first { $0.name == "expiry" }?.outcome == .skipped)
    }

    @Test(arguments: extremeTimes)
    func extremeIssueTimeIsAnErrorNamingTheClaim(_ value: String) throws {
        let signed = try issuer.token(payload: payload(iat: value, exp: String(now.seconds + 3600)))
        guard case .invalidClaim(let claim, _)? = verifier.evaluate(signed, at: now).failure else {
            Issue.record("iat \(value): \(String(describing: verifier.evaluate(signed, at: now).failure))")
            return
        }
        #expect(claim == "iat")
        #expect(
            verifier.evaluate(unsigned(payload(iat: value, exp: value)), at: now).failure
                == .unsupportedHeader("alg is none, not RS256"))
    }

    @Test func theReportedReproductionIsRefusedCleanly() throws {
        // Issue 13: {"alg":"none"} with exp 2^62 trapped in Instant(seconds:) before the signature was checked.
        let token = unsigned(payload(iat: "1780000000", exp: "4611686018427387904"))
        let report = verifier.evaluate(token, at: now, consumingIn: fixture.state)
        #expect(report.failure == .unsupportedHeader("alg is none, not RS256"))
        let signed = try issuer.token(payload: payload(iat: String(now.seconds), exp: "4611686018427387904"))
        #expect(
            verifier.evaluate(signed, at: now).failure
                == .invalidClaim(
                    claim: "exp", reason: "4611686018427387904 is outside 0 ... 253402300799 (1970 to 9999)"))
        #expect(
            verifier.evaluate(try issuer.token(payload: payload(iat: String(now.seconds), exp: "1.5")), at: now).failure
                == .invalidClaim(claim: "exp", reason: "1.5 is not a whole number of seconds"))
        #expect(
            verifier.evaluate(try issuer.token(payload: payload(iat: "\"x\"", exp: "1")), at: now).failure
                == .invalidClaim(claim: "iat", reason: "is a string, not a number"))
    }

    @Test func otherClaimsAreCheckedAndNamed() throws {
        let iat = String(now.seconds)
        let exp = String(now.seconds + 3600)
        func failure(_ json: String) throws -> AppCheckTokenError? {
            verifier.evaluate(try issuer.token(payload: Array(json.utf8)), at: now).failure
        }
        #expect(try failure("{}") == .invalidClaim(claim: "aud", reason: "missing"))
        #expect(
            try failure("{\"aud\":[],\"sub\":\"s\"}")
                == .invalidClaim(claim: "aud", reason: "is not a non-empty array of strings"))
        #expect(
            try failure("{\"aud\":7}") == .invalidClaim(claim: "aud", reason: "is a number, not a string or an array"))
        #expect(try failure("{\"aud\":\"projects/rollout-demo\"}") == .invalidClaim(claim: "sub", reason: "missing"))
        #expect(
            try failure("{\"aud\":\"a\",\"sub\":null}") == .invalidClaim(claim: "sub", reason: "is null, not a string"))
        #expect(
            verifier.evaluate(try issuer.token(payload: payload(iat: exp, exp: iat)), at: now).failure
                == .invalidClaim(claim: "exp", reason: "\(iat) is not after iat \(exp)"))
        #expect(
            verifier.evaluate(try issuer.token(payload: payload(iat: iat, exp: exp, jti: "5")), at: now).failure
                == .invalidClaim(claim: "jti", reason: "is a number, not a string"))
        #expect(
            verifier.evaluate(try issuer.token(payload: payload(iat: iat, exp: exp, jti: "\"\"")), at: now).failure
                == .invalidClaim(claim: "jti", reason: "is empty"))
        // Duplicate members are refused by the strict JSON parser, even under a valid signature.
        let duplicate = "{\"exp\":\(exp)," + String(decoding: payload(iat: iat, exp: exp).dropFirst(), as: UTF8.self)
        #expect(try failure(duplicate) == .malformedToken("not three base64url parts holding JSON objects"))
        // The latest representable time is still a valid expiry.
        #expect(verifier.evaluate(try issuer.token(payload: payload(iat: iat, exp: "253402300799")), at: now).passed)
        // An oversized token is refused before it is decoded.
        let huge = try issuer.token(
            payload: payload(iat: iat, exp: exp, jti: "\"\(String(repeating: "x", count: 20_000))\""))
        #expect(
            verifier.evaluate(huge, at: now).failure
                == .malformedToken("the token is \(huge.utf8.count) bytes, more than 16384"))
    }

    /// Issue 13: a consumed token re-spelled (`=` padding, the `+/` alphabet) was accepted again, 3 of 3 times.
    @Test func aConsumedTokenRespelledIsNotAcceptedAgain() throws {
        var token = try fixture.attest().token.token
        // Find a token whose signature segment has a URL-safe character to re-spell (nearly all have one).
        while !token.split(separator: ".")[2].contains(where: { $0 == "-" || $0 == "_" }) {
            fixture.clock.advance(by: .seconds(Int64(1)))
            token = try fixture.attest().token.token
        }
        let at = fixture.clock.now()
        #expect(verifier.evaluate(token, at: at, consumingIn: fixture.state).passed)
        #expect(verifier.evaluate(token, at: at, consumingIn: fixture.state).failure == .alreadyConsumed)
        let parts = token.split(separator: ".").map(String.init)
        let standard = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        let respelled = [
            token + "=", token + "==", parts[0] + "." + parts[1] + "." + standard,
            parts[0] + "=." + parts[1] + "." + parts[2], parts[0] + "." + parts[1] + "." + standard + "==",
        ]
        for variant in respelled {
            let report = verifier.evaluate(variant, at: at, consumingIn: fixture.state)
            #expect(report.failure == .malformedToken("not three base64url parts holding JSON objects"), "\(variant)")
            #expect(!report.passed)
        }
        // The replay key is the canonical signature bytes: that id is the one now consumed.
        let signature = try #require(Base64.decode(parts[2], .jwt))
        #expect(
            try fixture.state.consumeToken(id: "sig-sha256:" + SHA256.hex(signature), expiresAt: at + .hours(1))
                == false)
        // The HTTP method answers the same way.
        let body = Array("{\"appCheckToken\":\"\(token)=\"}".utf8)
        let response = fixture.exchange.handle(
            method: "verifyAppCheckToken", projectId: "rollout-demo", appId: nil, body: body)
        #expect(response.status == 403 || response.status == 400 || response.status == 401, "\(response.bodyText)")
        #expect(response.bodyText.contains("malformedToken"))
    }

    /// The replay key needs one byte string per signature: RS256 verification takes exactly the modulus size,
    /// so a signature with a leading zero byte added or removed, or the integer plus the modulus, is no signature.
    @Test func aSignatureHasOneByteSpelling() throws {
        let token = try fixture.attest().token.token
        let parts = token.split(separator: ".").map(String.init)
        let signature = try #require(Base64.decode(parts[2], .jwt))
        #expect(signature.count == 256)
        let input = parts[0] + "." + parts[1] + "."
        // The signature as an integer plus the modulus n (big-endian addition), which is the same value mod n.
        let n = try #require(issuer.key.jwk["n"])
        let modulus = try #require(Base64.decode(n, .jwt))
        var plusModulus = [UInt8](repeating: 0, count: 257)
        var carry = 0
        for i in 0..<257 {
            let a = i < signature.count ? Int(signature[signature.count - 1 - i]) : 0
            let b = i < modulus.count ? Int(modulus[modulus.count - 1 - i]) : 0
            let sum = a + b + carry
            plusModulus[256 - i] = UInt8(sum & 0xff)
            carry = sum >> 8
        }
        let sn = plusModulus.first == 0 ? Array(plusModulus.dropFirst()) : plusModulus
        for variant in [[0] + signature, Array(signature.dropFirst()), signature + [0], sn, [0] + sn] {
            #expect(verifier.evaluate(input + Base64.encodeURL(variant), at: now).failure == .signatureInvalid)
        }
    }

    @Test func limitedUseTokensAreConsumedByJti() throws {
        let token = try fixture.attest(limitedUse: true).token
        let at = fixture.clock.now()
        #expect(verifier.evaluate(token.token, at: at, consumingIn: fixture.state).passed)
        #expect(
            try fixture.state.consumeToken(id: try #require(token.claims.tokenId), expiresAt: at + .hours(1)) == false)
    }
}
