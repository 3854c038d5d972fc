import AppCheck
import Crypto
import Foundation
import JSON
import Testing
import Timekeeping

/// The request/response API: Firebase's JSON shapes, both spellings, every base64 variant, Google's errors.
@Suite struct ExchangeHTTPTests {
    let f = try! ExchangeFixture()
    let app = ExchangeFixture.demoApp.appId

    func call(_ method: String, _ body: [String: Any], project: String = "rollout-demo", app: String? = nil)
        -> AppCheckResponse
    {
        f.exchange.handle(
            method: method, projectId: project, appId: app ?? self.app,
            body: Array(try! JSONSerialization.data(withJSONObject: body)))
    }

    func challenge() throws -> [UInt8] {
        let r = f.exchange.handle(method: "generateAppAttestChallenge", projectId: "rollout-demo", appId: app, body: [])
        #expect(r.status == 200)
        #expect(r.json?["ttl"]?.stringValue == "300s")
        let text = try #require(r.json?["challenge"]?.stringValue)
        return try #require(Base64.decode(text))
    }

    static func spell(_ b: [UInt8], _ variant: Int) -> String {
        switch variant {
        case 0: Base64.encode(b)
        case 1: Base64.encode(b, padded: false)
        case 2: Base64.encode(b, urlSafe: true)
        default: Base64.encode(b, urlSafe: true, padded: false)
        }
    }

    @Test(arguments: [(false, 0), (true, 1), (false, 2), (true, 3)])
    func attestationAndAssertionExchangeInBothSpellings(snake: Bool, base64: Int) throws {
        let c = try challenge()
        let attestation = try f.device.attestation(clientDataHash: SHA256.hash(c), at: f.clock.now())
        let body: [String: Any] =
            snake
            ? [
                "attestation_statement": Self.spell(attestation, base64), "key_id": Self.spell(f.device.keyId, base64),
                "challenge": Self.spell(c, base64), "limited_use": false,
            ]
            : [
                "attestationStatement": Self.spell(attestation, base64), "keyId": Self.spell(f.device.keyId, base64),
                "challenge": Self.spell(c, base64),
            ]
        let r = call("exchangeAppAttestAttestation", body)
        #expect(r.status == 200, "\(r.bodyText)")
        let artifactText = try #require(r.json?["artifact"]?.stringValue)
        let artifact = try #require(Base64.decode(artifactText))
        let token = try #require(r.json?["appCheckToken"])
        #expect(token["ttl"]?.stringValue == "3600s")
        let tokenText = try #require(token["token"]?.stringValue)
        #expect(f.exchange.evaluateToken(tokenText, consume: false).passed)

        let c2 = try challenge()
        let assertion = try f.device.assertion(clientDataHash: SHA256.hash(artifact + c2))
        let key = snake ? "limited_use" : "limitedUse"
        let r2 = call(
            "exchangeAppAttestAssertion",
            [
                "artifact": Self.spell(artifact, base64), "assertion": Self.spell(assertion, base64),
                "challenge": Self.spell(c2, base64), key: true,
            ])
        #expect(r2.status == 200, "\(r2.bodyText)")
        #expect(r2.json?["ttl"]?.stringValue == "300s")
        let limited = try #require(r2.json?["token"]?.stringValue)

        let v1 = f.exchange.handle(
            method: "verifyAppCheckToken", projectId: "123456789012", appId: nil,
            body: Array("{\"app_check_token\":\"\(limited)\"}".utf8))
        #expect(v1.status == 200 && v1.bodyText == "{}")
        let v2 = f.exchange.handle(
            path: "/v1beta/projects/rollout-demo:verifyAppCheckToken",
            body: Array("{\"appCheckToken\":\"\(limited)\"}".utf8))
        #expect(v2.status == 200 && v2.bodyText == "{\"alreadyConsumed\":true}")
    }

    /// Issue 13: every spelling is accepted, but only in its canonical form (extra `=`, a mix of both alphabets
    /// or non-zero trailing bits are refused), so one challenge has one set of accepted texts.
    @Test func bytesFieldsAreDecodedCanonically() throws {
        let c = try challenge()
        let attestation = try f.device.attestation(clientDataHash: SHA256.hash(c), at: f.clock.now())
        let standard = Base64.encode(c)
        #expect(standard.hasSuffix("=") && !standard.hasSuffix("=="), "a 56-byte challenge has one padding character")
        let last = standard.index(standard.endIndex, offsetBy: -2)
        // The character before `=` carries two unused bits; setting one gives the same bytes to a lenient decoder.
        let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        let value = table.firstIndex(of: standard[last])!
        let trailingBits = standard.replacingCharacters(in: last...last, with: String(table[value | 1]))
        let url = Base64.encode(c, urlSafe: true, padded: false)
        var mixed = Base64.encode(c)
        if let plus = mixed.firstIndex(where: { $0 == "+" || $0 == "/" }) {
            mixed.replaceSubrange(plus...plus, with: mixed[plus] == "+" ? "-" : "_")
        } else {
            mixed = "-" + mixed.dropFirst()
        }
        for text in [standard + "=", standard + "==", url + "==", url + "===", " " + standard, trailingBits] {
            let r = call(
                "exchangeAppAttestAttestation",
                [
                    "attestationStatement": Base64.encode(attestation), "keyId": Base64.encode(f.device.keyId),
                    "challenge": text,
                ])
            #expect(r.status == 400, "\(text): \(r.bodyText)")
            #expect(r.bodyText.contains("field challenge is not non-empty base64"), "\(text)")
        }
        if mixed.contains(where: { $0 == "+" || $0 == "/" }) && mixed.contains(where: { $0 == "-" || $0 == "_" }) {
            let r = call(
                "exchangeAppAttestAttestation",
                [
                    "attestationStatement": Base64.encode(attestation), "keyId": Base64.encode(f.device.keyId),
                    "challenge": mixed,
                ])
            #expect(r.status == 400, "\(mixed): \(r.bodyText)")
        }
        // The challenge was never redeemed by the refused requests: its canonical spelling still works.
        let ok = call(
            "exchangeAppAttestAttestation",
            [
                "attestationStatement": Base64.encode(attestation), "keyId": Base64.encode(f.device.keyId),
                "challenge": url,
            ])
        #expect(ok.status == 200, "\(ok.bodyText)")
    }

    @Test func errorsUseGoogleShapeWithTheSpecificReason() throws {
        let c = try challenge()
        let attestation = try f.device.attestation(clientDataHash: SHA256.hash("not the challenge"), at: f.clock.now())
        let r = call(
            "exchangeAppAttestAttestation",
            [
                "attestationStatement": Base64.encode(attestation), "keyId": Base64.encode(f.device.keyId),
                "challenge": Base64.encode(c),
            ])
        #expect(r.status == 403)
        let error = try #require(r.json?["error"])
        #expect(error["status"]?.stringValue == "PERMISSION_DENIED")
        #expect(error["code"]?.numberValue?.int64 == 403)
        let detail = try #require(error["details"]?.arrayValue?.first)
        #expect(detail["reason"]?.stringValue == "nonceMismatch")
        #expect(detail["@type"]?.stringValue == "type.googleapis.com/google.rpc.ErrorInfo")
    }

    @Test func badRequestsAreRefusedWithTheirStatus() throws {
        func status(_ r: AppCheckResponse) -> (Int, String?) {
            (r.status, r.json?["error"]?["details"]?.arrayValue?.first?["reason"]?.stringValue)
        }
        let c = Base64.encode(try challenge())
        #expect(
            status(
                call(
                    "exchangeAppAttestAttestation",
                    ["attestationStatement": "AAAA", "keyId": "AAAA", "challenge": c, "extra": 1]))
                == (400, "invalidArgument"))
        #expect(
            status(
                call(
                    "exchangeAppAttestAttestation",
                    ["attestationStatement": "AAAA", "keyId": "AAAA", "key_id": "AAAA", "challenge": c]))
                == (400, "invalidArgument"))
        #expect(
            status(
                call("exchangeAppAttestAttestation", ["attestationStatement": "A A", "keyId": "AAAA", "challenge": c]))
                == (400, "invalidArgument"))
        #expect(
            status(call("exchangeAppAttestAttestation", ["keyId": "AAAA", "challenge": c])) == (400, "invalidArgument"))
        #expect(
            status(
                call(
                    "exchangeAppAttestAttestation",
                    ["attestationStatement": "AAAA", "keyId": "AAAA", "challenge": c, "limitedUse": 1]))
                == (400, "invalidArgument"))
        #expect(
            status(
                f.exchange.handle(
                    method: "exchangeAppAttestAttestation", projectId: "rollout-demo", appId: app,
                    body: Array("[1]".utf8)))
                == (400, "invalidArgument"))
        let duplicate = Array("{\"challenge\":\"\(c)\",\"challenge\":\"\(c)\"}".utf8)
        #expect(
            status(
                f.exchange.handle(
                    method: "exchangeAppAttestAssertion", projectId: "rollout-demo", appId: app, body: duplicate))
                == (400, "invalidArgument"))
        #expect(status(call("generateAppAttestChallenge", [:], project: "someone-else")) == (404, "unknownProject"))
        #expect(status(call("generateAppAttestChallenge", [:], app: "1:1:ios:nope")) == (404, "unknownApp"))
        #expect(status(call("exchangeSafetyNetToken", [:])) == (404, "unknownMethod"))
        #expect(
            status(
                call("exchangeAppAttestAttestation", ["attestationStatement": "AAAA", "keyId": "AAAA", "challenge": c]))
                == (403, "malformedAttestation"))
        #expect(
            status(
                call("exchangeAppAttestAttestation", ["attestationStatement": "AAAA", "keyId": "AAAA", "challenge": c]))
                == (403, "challengeAlreadyUsed"))
        #expect(
            status(
                call(
                    "exchangeAppAttestAssertion",
                    ["artifact": "AAAA", "assertion": "AAAA", "challenge": Base64.encode(try challenge())]))
                == (403, "unknownArtifact"))
        #expect(
            status(
                f.exchange.handle(
                    method: "verifyAppCheckToken", projectId: "rollout-demo", appId: nil,
                    body: Array("{\"appCheckToken\":\"x.y.z\"}".utf8)))
                == (403, "malformedToken"))
    }

    @Test func jwksServesEverySigningKey() throws {
        let r = f.exchange.handle(path: "/v1/jwks", body: [])
        #expect(r.status == 200)
        let keys = try #require(r.json?["keys"]?.arrayValue).map { k in
            Dictionary(
                uniqueKeysWithValues: (k.objectValue ?? JSONObject()).map { ($0.key, $0.value.stringValue ?? "") })
        }
        let kid = try #require(try f.state.signingKeys().first?.kid)
        #expect(keys.count == 1)
        #expect(
            keys[0]["kid"] == kid && keys[0]["kty"] == "RSA" && keys[0]["alg"] == "RS256" && keys[0]["use"] == "sig")
        #expect(keys[0]["e"] == "AQAB")
        #expect(Base64.decode(keys[0]["n"] ?? "")?.count == 256)
    }

    @Test func routesParse() {
        #expect(
            AppCheckRoute.parse(path: "/v1/projects/p/apps/1:2:ios:3:exchangeAppAttestAssertion")
                == AppCheckRoute(projectId: "p", appId: "1:2:ios:3", method: "exchangeAppAttestAssertion"))
        #expect(
            AppCheckRoute.parse(path: "v1beta/projects/123:verifyAppCheckToken")
                == AppCheckRoute(projectId: "123", appId: nil, method: "verifyAppCheckToken"))
        #expect(AppCheckRoute.parse(path: "/v1/jwks") == AppCheckRoute(projectId: nil, appId: nil, method: "jwks"))
        #expect(AppCheckRoute.parse(path: "/v2/projects/p/apps/a:x") == nil)
        #expect(AppCheckRoute.parse(path: "/v1/projects/p/other/a:x") == nil)
        #expect(AppCheckRoute.parse(path: "/v1/projects/p/apps/a") == nil)
        // Empty parts are skipped; the OAuth client form names no project; the last colon splits the method off.
        #expect(
            AppCheckRoute.parse(path: "//v1//projects/p///apps/1:2:ios:3:m/")
                == AppCheckRoute(projectId: "p", appId: "1:2:ios:3", method: "m"))
        #expect(
            AppCheckRoute.parse(path: "/v1/oauthClients/1:2:ios:3:exchangeDebugToken")
                == AppCheckRoute(projectId: nil, appId: "1:2:ios:3", method: "exchangeDebugToken"))
        #expect(AppCheckRoute.parse(path: "/v1/jwks/") == AppCheckRoute(projectId: nil, appId: nil, method: "jwks"))
        #expect(
            AppCheckRoute.parse(path: "/v1/projects/pé/apps/äpp:m")
                == AppCheckRoute(projectId: "pé", appId: "äpp", method: "m"))
        // Parts are the bytes between slashes: a combining mark after a slash starts the next part (a split by
        // Character kept "/\u{301}" as one character and so no slash, and answered the URL's 404).
        #expect(
            AppCheckRoute.parse(path: "/v1/projects/p/apps/\u{301}a:m")
                == AppCheckRoute(projectId: "p", appId: "\u{301}a", method: "m"))
        for refused in [
            "", "/", "v1", "/v1", "/v1/jwks/x", "/v1/projects", "/v1/projects/:m", "/v1/projects/p:",
            "/v1/projects/p/apps/a:", "/v1/projects/p/apps/:m", "/v1/projects/p/apps/a:m/x",
            "/v1/projects/p/apps/a/b/c:m", "/v1/oauthClients/a", "/v1/oauthClients/x/y:m",
            "/v1beta/projects/p/apps", "/V1/projects/p:m", "/v1/Projects/p:m",
        ] {
            #expect(AppCheckRoute.parse(path: refused) == nil, "\(refused)")
        }
    }
}
