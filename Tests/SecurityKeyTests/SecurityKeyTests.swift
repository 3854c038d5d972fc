import Crypto
import Foundation
import SecurityKey
import SoftwareAuthenticator
import StepUp
import Testing
import TestSupport
import Timekeeping

/// A security key enrolled and asked to approve change documents through the real libfido2 code path (the
/// software authenticator sits behind libfido2's transport hooks), then verified the way the write path does:
/// without the device, with libcrypto.
@Suite("Security keys: libfido2, the software authenticator and the verifier")
struct SecurityKeyTests {
    static let now = Instant(seconds: 1_780_000_000)
    static let rp = "rollout:/srv/rollout/app.rollout"

    let key = SoftwareAuthenticator()
    var device: SecurityKeyDevice {
        let key = self.key
        return SecurityKeyDevice(name: key.path) { key.open($0) }
    }

    static func document(to: Int64 = 100_000_000, baseVersion: Int = 41, operatorID: String = "ana@laptop")
        -> ChangeDocument
    {
        ChangeDocument(
            store: "/srv/rollout/app.rollout", baseVersion: baseVersion, baseETag: "etag-\(baseVersion)",
            parameter: "rollout_enabled", kind: .set, from: 50_000_000, to: to, detail: "", reason: "all clear",
            operatorID: operatorID, nonce: SecureRandom.bytes(16), expiresAt: now + .minutes(5))
    }

    func enrol(_ id: String = "ana@laptop") throws -> SecurityKeyCredential {
        try SecurityKeyClient.enrol(try OperatorID(id), relyingParty: Self.rp, device: device, pin: nil, at: Self.now)
    }

    @Test("enrol and approve: libfido2 talks CTAP2 to the key, the assertion verifies without the device")
    func approved() throws {
        let credential = try enrol()
        #expect(credential.algorithm == .es256)
        #expect(credential.publicKey.count == 65)
        #expect(credential.signCount == 1)
        // getInfo when libfido2 opened the device, then makeCredential; getInfo again, then getAssertion.
        let document = Self.document()
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(key.commands == [0x04, 0x01, 0x04, 0x02])
        let (outcome, updated) = SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now)
        #expect(outcome == .accepted(signCount: 2))
        #expect(updated.signCount == 2)
        let header = try #require(AuthenticatorDataHeader(assertion.authenticatorData))
        #expect(header.flags & 0x05 == 0x05)
        #expect(header.relyingPartyHash == SHA256.hash(Self.rp))
    }

    @Test("a signature over another change is refused: another percentage, another base version, another operator")
    func otherDocument() throws {
        let credential = try enrol()
        let signed = Self.document()
        let assertion = try SecurityKeyClient.approve(signed, with: credential, device: device, pin: nil)
        var others: [ChangeDocument] = []
        for change in [{ (d: inout ChangeDocument) in d.to = 99_000_000 }, { $0.baseVersion = 42 }, { $0.baseETag = "etag-42" }, { $0.operatorID = "ben@desk" }] {
            var d = signed
            change(&d)
            others.append(d)
        }
        for other in others {
            let (outcome, kept) = SecurityKeyVerifier.verify(assertion, over: other, credential: credential, at: Self.now)
            #expect(outcome == .badSignature)
            #expect(kept.signCount == credential.signCount)
        }
    }

    @Test("user verification off, user presence off: refused")
    func flags() throws {
        let credential = try enrol()
        key.faults = [.noUserVerification]
        let document = Self.document()
        var assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome == .userNotVerified)
        key.faults = [.noUserPresence]
        assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome == .userNotPresent)
    }

    @Test("a counter that does not increase is refused as a cloned key; a replayed assertion likewise")
    func counter() throws {
        var credential = try enrol()
        let document = Self.document()
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        let first = SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now)
        #expect(first.outcome == .accepted(signCount: 2))
        credential = first.credential
        // The same assertion again.
        #expect(
            SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome
                == .counterNotIncreased(stored: 2, presented: 2))
        // A clone of the key as it was before: its counter repeats.
        key.setSignCount(1)
        let cloned = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(
            SecurityKeyVerifier.verify(cloned, over: document, credential: credential, at: Self.now).outcome
                == .counterNotIncreased(stored: 2, presented: 2))
        key.faults = [.frozenCounter]
        let frozen = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(
            SecurityKeyVerifier.verify(frozen, over: document, credential: credential, at: Self.now).outcome
                == .counterNotIncreased(stored: 2, presented: 2))
    }

    @Test("a key that keeps no counter (0 at enrolment and at every assertion) is accepted; one that had counted and reports 0 is not")
    func keyWithoutCounter() throws {
        var credential = try enrol()
        credential.signCount = 0
        key.setSignCount(0)
        key.faults = [.frozenCounter]
        let document = Self.document()
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome == .accepted(signCount: 0))
        credential.signCount = 3
        #expect(
            SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome
                == .counterNotIncreased(stored: 3, presented: 0))
    }

    @Test("a document whose expiry is further ahead than any rollout makes is refused, however good the signature")
    func distantExpiry() throws {
        let credential = try enrol()
        var document = Self.document()
        document.expiresAt = Self.now + .hours(24)
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(
            SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome
                == .expiresTooLate(at: document.expiresAt))
        // Within the longest lifetime it is good.
        #expect(
            SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now + .hours(24) - .minutes(10))
                .outcome.isAccepted)
    }

    @Test("an expired document is refused, however good the signature")
    func expired() throws {
        let credential = try enrol()
        let document = Self.document()
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        #expect(
            SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: document.expiresAt).outcome
                == .expired(at: document.expiresAt))
    }

    @Test("another operator's credential, and a key asked for another relying party")
    func otherCredentialAndRelyingParty() throws {
        let ana = try enrol("ana@laptop")
        let ben = try enrol("ben@desk")
        let document = Self.document()
        let bensAssertion = try SecurityKeyClient.approve(document, with: ben, device: device, pin: nil)
        #expect(SecurityKeyVerifier.verify(bensAssertion, over: document, credential: ana, at: Self.now).outcome == .otherCredential)
        // A stored credential whose relying party is not the one the key signed for.
        var elsewhere = ben
        elsewhere.relyingParty = "rollout:/srv/rollout/other.rollout"
        #expect(SecurityKeyVerifier.verify(bensAssertion, over: document, credential: elsewhere, at: Self.now).outcome == .wrongRelyingParty)
        // And the key itself finds no credential for another relying party (CTAP2_ERR_NO_CREDENTIALS through libfido2).
        #expect(throws: SecurityKeyError.self) {
            try SecurityKeyClient.approve(document, with: elsewhere, device: device, pin: nil)
        }
    }

    @Test("a forged signature (the right data, another key) is refused")
    func forged() throws {
        let credential = try enrol()
        let other = try enrol("mallory@evil")
        let document = Self.document()
        var assertion = try SecurityKeyClient.approve(document, with: other, device: device, pin: nil)
        assertion.credentialID = credential.credentialID
        #expect(SecurityKeyVerifier.verify(assertion, over: document, credential: credential, at: Self.now).outcome == .badSignature)
    }

    /// python-fido2 (PyPI `fido2`, pinned in scripts/requirements.txt) checks what rollout produced: it parses the
    /// authenticator data with its own `AuthenticatorData`, checks the rpIdHash and the UP/UV flags, and verifies the
    /// signature with its `ES256` COSE key over `authData ‖ SHA-256(document)`; and it refuses a tampered document.
    @Test("python-fido2 verifies an assertion rollout obtained through libfido2")
    func pythonFido2Agrees() throws {
        let credential = try enrol()
        let document = Self.document()
        let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
        var tampered = document
        tampered.to = 99_000_000
        let input: [String: Any] = [
            "rp": Self.rp, "x": Hex.encode(credential.publicKey[1..<33]), "y": Hex.encode(credential.publicKey[33..<65]),
            "authData": Hex.encode(assertion.authenticatorData), "signature": Hex.encode(assertion.signature),
            "documents": [Hex.encode(document.canonicalBytes), Hex.encode(tampered.canonicalBytes)],
        ]
        let path = TestSupport.packageRoot.appendingPathComponent("Tests/SecurityKeyTests/python_fido2_check.py").path
        let json = String(decoding: try JSONSerialization.data(withJSONObject: input), as: UTF8.self)
        let result = try TestSupport.run(try TestSupport.python(), [path], stdin: json)
        try #require(result.status == 0, "python-fido2 peer failed: \(result.stderr)")
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        #expect(answer["rpIdHash"] as? Bool == true)
        #expect(answer["userPresent"] as? Bool == true)
        #expect(answer["userVerified"] as? Bool == true)
        #expect(answer["counter"] as? Int == 2)
        #expect(answer["verified"] as? [Bool] == [true, false])
    }
}
