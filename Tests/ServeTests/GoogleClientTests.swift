import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import Testing
import TestSupport
import Timekeeping

/// google-api-python-client, built from Google's discovery document with its endpoint pointed at the server,
/// calls every method; the tokens verify with firebase-admin's `app_check.verify_token` against the served JWKS.
@Suite(.serialized) struct GoogleClientTests {
    @Test func googleClientCallsEveryMethodAndFirebaseAdminVerifiesTheTokens() throws {
        let f = try ServerFixture()
        let discovery = try ServerFixture.discoveryDocument()
        let app = ServerFixture.app.appId
        let byNumber = "projects/\(ServerFixture.project.number)/apps/\(app)"
        let byId = "projects/\(ServerFixture.project.id)/apps/\(app)"
        func call(_ calls: [[String: Any]]) throws -> [String: [String: Any]] {
            let answer = try f.python(["op": "call", "endpoint": f.endpoint, "discovery": discovery, "calls": calls])
            return try #require(answer as? [String: [String: Any]])
        }
        func body(_ a: [String: [String: Any]], _ id: String) throws -> [String: Any] {
            let entry = try #require(a[id], "no answer for \(id)")
            #expect(entry["status"] as? Int == 200, "\(id): \(entry)")
            return try #require(entry["body"] as? [String: Any], "\(id): \(entry)")
        }

        // 1. Challenges (project number, project id, oauthClients), the JWKS, a debug token.
        let first = try call([
            [
                "id": "c1", "resource": "projects.apps", "method": "generateAppAttestChallenge",
                "params": ["app": byNumber], "body": [:],
            ],
            [
                "id": "c2", "resource": "projects.apps", "method": "generateAppAttestChallenge",
                "params": ["app": byId], "body": [:],
            ],
            [
                "id": "c3", "resource": "oauthClients", "method": "generateAppAttestChallenge",
                "params": ["app": "oauthClients/\(app)"], "body": [:],
            ],
            ["id": "jwks", "resource": "jwks", "method": "get", "params": ["name": "jwks"]],
            [
                "id": "debug", "resource": "projects.apps", "method": "exchangeDebugToken", "params": ["app": byNumber],
                "body": ["debugToken": ServerFixture.debugToken],
            ],
            [
                "id": "debug-oauth", "resource": "oauthClients", "method": "exchangeDebugToken",
                "params": ["app": "oauthClients/\(app)"],
                "body": ["debugToken": ServerFixture.debugToken, "limitedUse": true],
            ],
            [
                "id": "badDebug", "resource": "projects.apps", "method": "exchangeDebugToken",
                "params": ["app": byNumber],
                "body": ["debugToken": "not-a-registered-debug-token"],
            ],
        ])
        var challenges: [[UInt8]] = []
        for id in ["c1", "c2", "c3"] {
            let b = try body(first, id)
            #expect(b["ttl"] as? String == "300s")
            let text = try #require(b["challenge"] as? String)
            challenges.append(try #require(Base64.decode(text)))
        }
        #expect(Set(challenges.map(Hex.encode)).count == 3)
        let keys = try #require(try body(first, "jwks")["keys"] as? [[String: Any]])
        #expect(keys.count == 1 && keys[0]["kty"] as? String == "RSA" && keys[0]["alg"] as? String == "RS256")
        let debug = try body(first, "debug")
        #expect(debug["ttl"] as? String == "3600s")
        #expect(try body(first, "debug-oauth")["ttl"] as? String == "300s")
        let bad = try #require(first["badDebug"])
        #expect(bad["status"] as? Int == 403)
        #expect(
            (bad["error"] as? [String: Any]).flatMap { $0["error"] as? [String: Any] }?["status"] as? String
                == "PERMISSION_DENIED")

        // 2. The attestation, made by a simulated device for challenge 1.
        let key = try f.newKey()
        let attestation = try key.attestation(clientDataHash: SHA256.hash(challenges[0]), at: f.clock.now())
        let second = try call([
            [
                "id": "attest", "resource": "projects.apps", "method": "exchangeAppAttestAttestation",
                "params": ["app": byNumber],
                "body": [
                    "attestationStatement": Base64.encode(attestation), "challenge": Base64.encode(challenges[0]),
                    "keyId": Base64.encode(key.keyId),
                ],
            ]
        ])
        let attested = try body(second, "attest")
        let artifactText = try #require(attested["artifact"] as? String)
        let artifact = try #require(Base64.decode(artifactText))
        let attestToken = try #require(attested["appCheckToken"] as? [String: Any])
        #expect(attestToken["ttl"] as? String == "3600s")

        // 3. Assertions for challenges 2 (projects/...) and 3 (oauthClients/...).
        let a2 = try key.assertion(clientDataHash: SHA256.hash(artifact + challenges[1]))
        let a3 = try key.assertion(clientDataHash: SHA256.hash(artifact + challenges[2]))
        let third = try call([
            [
                "id": "assert", "resource": "projects.apps", "method": "exchangeAppAttestAssertion",
                "params": ["app": byId],
                "body": [
                    "artifact": Base64.encode(artifact), "assertion": Base64.encode(a2),
                    "challenge": Base64.encode(challenges[1]),
                ],
            ],
            [
                "id": "assert-oauth", "resource": "oauthClients", "method": "exchangeAppAttestAssertion",
                "params": ["app": "oauthClients/\(app)"],
                "body": [
                    "artifact": Base64.encode(artifact), "assertion": Base64.encode(a3),
                    "challenge": Base64.encode(challenges[2]),
                    "limitedUse": true,
                ],
            ],
            [
                "id": "replay", "resource": "projects.apps", "method": "exchangeAppAttestAssertion",
                "params": ["app": byId],
                "body": [
                    "artifact": Base64.encode(artifact), "assertion": Base64.encode(a2),
                    "challenge": Base64.encode(challenges[1]),
                ],
            ],
        ])
        let asserted = try body(third, "assert")
        let assertedOAuth = try body(third, "assert-oauth")
        #expect(assertedOAuth["ttl"] as? String == "300s")
        #expect(third["replay"]?["status"] as? Int == 403)

        // 4. firebase-admin verifies every token against the served JWKS.
        let tokens: [String: String] = [
            "attestation": try #require(attestToken["token"] as? String),
            "assertion": try #require(asserted["token"] as? String),
            "assertion-limited": try #require(assertedOAuth["token"] as? String),
            "debug": try #require(debug["token"] as? String),
        ]
        let verdicts = try f.python([
            "op": "verify", "jwks_url": f.endpoint + "/v1/jwks", "project_id": ServerFixture.project.id,
            "tokens": tokens,
        ])
        for name in tokens.keys {
            #expect(verdicts[name] as? String == "ok:\(app)", "\(name): \(verdicts[name] ?? "missing")")
        }
        // The server's own verifier agrees (and the store holds the key with the counter of the last assertion).
        for (name, token) in tokens {
            #expect(f.holder.exchange().evaluateToken(token, consume: false).passed, "\(name)")
        }
        let record = try #require(try f.tables.attestedKey(appId: app, artifactDigest: SHA256.hash(artifact)))
        #expect(record.counter == 2)
        // One access-log line per request.
        #expect(f.log.all.filter { $0.path.hasSuffix(":exchangeAppAttestAssertion") }.count == 3)
    }

    @Test func firebaseAdminRejectsATokenOfAKeyNoLongerServed() throws {
        let f = try ServerFixture()
        let token = try f.attest().token
        // A rotation with a short overlap (the CLI insists on the longest token TTL; the library takes any), then
        // past it: the old key leaves the JWKS, and a verifier that fetches it finds no key for the token.
        try AppCheckExchange.rotateSigningKeys(state: f.tables, now: f.clock.now(), overlap: .minutes(1))
        f.clock.advance(by: .minutes(2))
        f.holder.refresh(at: f.clock.now())
        let verdicts = try f.python([
            "op": "verify", "jwks_url": f.endpoint + "/v1/jwks", "project_id": ServerFixture.project.id,
            "tokens": ["old": token],
        ])
        #expect((verdicts["old"] as? String)?.hasPrefix("rejected") == true, "\(verdicts)")
    }
}
