import AppCheck
import Crypto
import Foundation
import Testing
import TestSupport
import Timekeeping

/// firebase-admin 7.7.0's `app_check.verify_token` (the peer) accepts our tokens and rejects the same bad ones.
///
/// It checks the header (RS256, typ JWT), the signature against the JWKS, `aud` containing `projects/<id>`,
/// `iss` starting with Firebase's issuer, `sub`, and expiry; it runs under faketime at the exchange's instant.
@Suite struct FirebaseAdminTokenTests {
    @Test func firebaseAdminAgreesWithOurTokenVerdicts() throws {
        let python = try TestSupport.python()
        let f = try ExchangeFixture()
        let attested = try f.attest()
        let limited = try f.assert(artifact: attested.artifact, limitedUse: true)
        let issuer = AppCheckTokenIssuer(key: f.exchange.tokenVerifier.keys[0])
        let now = f.clock.now()
        var misaddressed = AppCheckTokenClaims.firebase(
            project: ExchangeFixture.project, appId: ExchangeFixture.demoApp.appId, issuedAt: now,
            ttl: .hours(1), tokenId: nil)
        misaddressed.audience = ["projects/999", "projects/another-project"]
        let expired = AppCheckTokenClaims.firebase(
            project: ExchangeFixture.project, appId: ExchangeFixture.demoApp.appId,
            issuedAt: now - .hours(2), ttl: .hours(1), tokenId: nil)
        let stranger = AppCheckTokenIssuer(key: try AppCheckSigningKey.generate(createdAt: now))
        var tampered = attested.token.token.split(separator: ".").map(String.init)
        tampered[1] = Base64.encodeURL(
            Array(
                String(decoding: Base64.decode(tampered[1])!, as: UTF8.self)
                    .replacingOccurrences(of: "ios:demo", with: "ios:evil").utf8))
        let tokens: [String: String] = [
            "attestation token": attested.token.token,
            "limited-use assertion token": limited.token,
            "wrong audience": try issuer.token(misaddressed),
            "expired": try issuer.token(expired),
            "unknown signing key": try stranger.token(
                .firebase(
                    project: ExchangeFixture.project, appId: ExchangeFixture.demoApp.appId,
                    issuedAt: now, ttl: .hours(1), tokenId: nil)),
            "tampered subject": tampered.joined(separator: "."),
        ]
        let request: [String: Any] = [
            "project_id": ExchangeFixture.project.id,
            "jwks": try JSONSerialization.jsonObject(with: Data(f.exchange.jwks())),
            "tokens": tokens,
        ]
        let stamp = (now + .minutes(1)).iso8601.replacingOccurrences(of: "T", with: " ").prefix(19)
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/AppCheckTests/firebase_admin_tokens.py").path
        let result = try TestSupport.run(
            python, [script],
            stdin: String(decoding: try JSONSerialization.data(withJSONObject: request), as: UTF8.self),
            environment: ["TZ": "UTC", "FAKETIME_DONT_FAKE_MONOTONIC": "1"], fakeTime: "@\(stamp)")
        try #require(result.status == 0, "firebase-admin failed: \(result.stderr)")
        let theirs = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: String])
        f.clock.advance(by: .minutes(1))
        for (name, token) in tokens {
            let ours = f.exchange.evaluateToken(token, consume: false)
            let expected = ours.value.map { "ok:" + $0.subject } ?? "rejected"
            #expect(
                theirs[name] == expected,
                "\(name): firebase-admin says \(theirs[name] ?? "nothing"), we say \(expected) \(ours.failure?.code ?? "")"
            )
        }
        #expect(theirs["attestation token"] == "ok:" + ExchangeFixture.demoApp.appId)
        #expect(theirs.values.filter { $0 == "rejected" }.count == 4)
    }
}
