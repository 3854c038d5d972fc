import AppCheck
import Crypto
import Foundation
import Testing
import TestSupport
import Timekeeping

/// Every forgery of issue 5's catalogue, each rejected with its own reason (exchange-level forgeries such as
/// replayed challenges and tokens are in ExchangeTests).
@Suite struct ForgeryCatalogueTests {
    let kayak = try! AppAttestVector.load("webauthn4j-kayak-2020")
    let veehaitch = try! AppAttestVector.load("veehaitch-ios-14.4")

    func verdict(
        _ v: AppAttestVector, attestation: [UInt8]? = nil, keyId: [UInt8]? = nil, clientDataHash: [UInt8]? = nil,
        app: AppIdentity? = nil, environment: AppAttestEnvironment? = nil,
        verifier: AttestationVerifier = AttestationVerifier()
    ) -> AttestationError? {
        verifier.evaluate(
            attestation: attestation ?? v.attestation, keyId: keyId ?? v.keyId,
            clientDataHash: clientDataHash ?? v.clientDataHash,
            app: app ?? v.app, environment: environment ?? v.environment, at: v.verifyAt
        ).failure
    }

    func modified(_ v: AppAttestVector, _ change: (inout AttestationObject) -> Void) -> [UInt8] {
        var o = try! AttestationObject(cbor: v.attestation)
        change(&o)
        return o.encoded()
    }

    @Test func untouchedVectorsPass() {
        #expect(verdict(kayak) == nil)
        #expect(verdict(veehaitch) == nil)
    }

    @Test(arguments: [0, 31, 32, 36, 40, 60, 100, 163])
    func flippedBitInAuthData(_ index: Int) {
        let forged = modified(kayak) { $0.authenticatorData = $0.authenticatorData.flipping(bit: 0, at: index) }
        #expect(verdict(kayak, attestation: forged) == .nonceMismatch)
    }

    @Test func flippedBitInTheNonceExtension() throws {
        let leaf = try AttestationObject(cbor: kayak.attestation).certificates[0]
        let nonceAt = try #require(leaf.firstRange(of: [0x30, 0x24, 0xa1, 0x22, 0x04, 0x20])).upperBound
        let forged = modified(kayak) { $0.certificates[0] = leaf.flipping(bit: 3, at: nonceAt + 7) }
        #expect(verdict(kayak, attestation: forged) == .certificateSignatureInvalid(depth: 0))
    }

    @Test func flippedBitInTheLeafSignature() throws {
        let forged = modified(kayak) {
            $0.certificates[0] = $0.certificates[0].flipping(bit: 0, at: $0.certificates[0].count - 1)
        }
        #expect(verdict(kayak, attestation: forged) == .certificateSignatureInvalid(depth: 0))
    }

    @Test func flippedBitInTheIntermediateSignature() throws {
        let forged = modified(kayak) {
            $0.certificates[1] = $0.certificates[1].flipping(bit: 0, at: $0.certificates[1].count - 1)
        }
        #expect(verdict(kayak, attestation: forged) == .certificateSignatureInvalid(depth: 1))
    }

    @Test func wrongChallenge() {
        #expect(verdict(kayak, clientDataHash: SHA256.hash("another challenge")) == .nonceMismatch)
    }

    @Test func wrongTeamOrBundle() {
        #expect(
            verdict(kayak, app: AppIdentity(teamId: "8YE23NZS58", bundleId: kayak.app.bundleId)) == .rpIdHashMismatch)
        #expect(
            verdict(kayak, app: AppIdentity(teamId: kayak.app.teamId, bundleId: "com.kayak.travel2"))
                == .rpIdHashMismatch)
    }

    @Test func wrongKeyId() {
        #expect(verdict(kayak, keyId: veehaitch.keyId) == .keyIdMismatch)
        #expect(verdict(kayak, keyId: Array(kayak.keyId.dropLast())) == .keyIdMismatch)
    }

    @Test func developmentAaguidWhereProductionIsRequired() {
        #expect(
            verdict(veehaitch, environment: .production)
                == .aaguidMismatch(expected: .production, found: "'appattestdevelop'"))
        #expect(
            verdict(kayak, environment: .development)
                == .aaguidMismatch(expected: .development, found: "'appattest\\0\\0\\0\\0\\0\\0\\0'"))
    }

    @Test func chainToAnotherRoot() {
        let trustsOnlyDemo = AttestationVerifier(trust: TrustAnchors([Demo.authority.root]))
        guard case .untrustedChain = verdict(kayak, verifier: trustsOnlyDemo) else {
            Issue.record("expected untrustedChain, got \(String(describing: verdict(kayak, verifier: trustsOnlyDemo)))")
            return
        }
        // The leaf alone, without Apple's intermediate, does not reach the root either.
        let leafOnly = modified(kayak) { $0.certificates.removeLast() }
        guard case .untrustedChain = verdict(kayak, attestation: leafOnly) else {
            Issue.record("expected untrustedChain for a leaf without its intermediate")
            return
        }
    }

    @Test func demoLeafSentToAnAppThatTrustsAppleOnly() throws {
        let device = try SimulatedAppAttestKey(authority: Demo.authority, app: Demo.app, environment: .production)
        let cdh = SHA256.hash("challenge")
        let attestation = try device.attestation(clientDataHash: cdh, at: Demo.time)
        let appleOnly = AttestationVerifier().evaluate(
            attestation: attestation, keyId: device.keyId, clientDataHash: cdh, app: Demo.app,
            environment: .production, at: Demo.time)
        #expect(appleOnly.failure == .demoRootNotTrusted)
        let demoTrusting = Demo.verifier.evaluate(
            attestation: attestation, keyId: device.keyId, clientDataHash: cdh, app: Demo.app,
            environment: .production, at: Demo.time)
        #expect(demoTrusting.passed)
    }

    @Test func demoForgeriesWithAValidChain() throws {
        let key = try P256PrivateKey()
        let keyId = SHA256.hash(key.publicPoint)
        let cdh = SHA256.hash("c")
        func check(_ authData: [UInt8], nonce: [UInt8]? = nil, environment: AppAttestEnvironment = .production) throws
            -> AttestationError?
        {
            let a = try Demo.attestation(key: key, authData: authData, clientDataHash: cdh, nonce: nonce)
            return Demo.verifier.evaluate(
                attestation: a, keyId: keyId, clientDataHash: cdh, app: Demo.app, environment: environment,
                at: Demo.time
            ).failure
        }
        #expect(try check(Demo.authData(key: key)) == nil)
        #expect(try check(Demo.authData(key: key, signCount: 1)) == .nonZeroSignCount(1))
        #expect(try check(Demo.authData(key: key, credentialId: SHA256.hash("other"))) == .credentialIdMismatch)
        #expect(try check(Demo.authData(key: key), nonce: SHA256.hash("not the nonce")) == .nonceMismatch)
        #expect(
            try check(Demo.authData(key: key, environment: .development))
                == .aaguidMismatch(expected: .production, found: "'appattestdevelop'"))
        // Seen on iOS 27: extension bytes after the COSE key with the extension flag clear are accepted.
        #expect(
            try check(
                Demo.authData(
                    key: key, flags: 0x40, trailing: CBOR.map([.init(.text("ext"), .bytes([1, 2]))]).encoded())) == nil)
        #expect(try check(Demo.authData(key: key, flags: 0xC0, trailing: [0xa0])) == nil)
    }

    @Test func structuralForgeries() throws {
        #expect(verdict(kayak, attestation: modified(kayak) { $0.format = "packed" }) == .unsupportedFormat("packed"))
        #expect(
            verdict(kayak, attestation: modified(kayak) { $0.certificates[1] = Array($0.certificates[1].prefix(100)) })
                == .malformedCertificate(index: 1))
        #expect(
            verdict(kayak, attestation: modified(kayak) { $0.certificates[0] += [0] })
                == .malformedCertificate(index: 0))
        #expect(
            verdict(
                kayak,
                attestation: modified(kayak) { $0.certificates += Array(repeating: $0.certificates[1], count: 7) })
                == .malformedAttestation("attStmt.x5c holds 9 certificates, more than 8"))
        let shortAuthData = modified(kayak) { $0.authenticatorData = Array($0.authenticatorData.prefix(50)) }
        #expect(
            verdict(kayak, attestation: shortAuthData)
                == .malformedAttestation("authData: authenticator data has no attested credential data"))
        let badCredentialLength = modified(kayak) { $0.authenticatorData[53] = 0xff }
        #expect(
            verdict(kayak, attestation: badCredentialLength)
                == .malformedAttestation("authData: credentialId length 65312 runs past the authenticator data"))
    }

    @Test func truncatedOversizedAndDeeplyNestedCBOR() {
        let a = kayak.attestation
        for cut in [0, 1, 10, 1000, a.count / 2, a.count - 1] {
            guard case .malformedAttestation(let reason) = verdict(kayak, attestation: Array(a.prefix(cut))) else {
                Issue.record("truncation at \(cut) not reported as malformed")
                continue
            }
            #expect(reason.contains("truncated") || reason.contains("past the end"), "\(reason)")
        }
        #expect(
            verdict(kayak, attestation: a + [0])
                == .malformedAttestation("1 trailing bytes after the CBOR item at byte \(a.count)"))
        let oversized = modified(kayak) { $0.receipt = [UInt8](repeating: 7, count: 70_000) }
        #expect(
            verdict(kayak, attestation: oversized)
                == .malformedAttestation("CBOR input of \(oversized.count) bytes exceeds the limit of 65536"))
        let nested = [UInt8](repeating: 0x81, count: 40) + [0x00]
        #expect(verdict(kayak, attestation: nested) == .malformedAttestation("CBOR nesting deeper than 16 at byte 16"))
        let huge: [UInt8] = [0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        #expect(
            verdict(kayak, attestation: huge)
                == .malformedAttestation("CBOR length 18446744073709551615 at byte 0 runs past the end of the input"))
    }

    @Test func assertionForgeries() throws {
        let v = veehaitch
        let a = try #require(v.assertions.first)
        let key = try #require(
            P256PublicKey(
                uncompressedPoint: try AttestationVerifier().verify(
                    attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
                    environment: v.environment, at: v.verifyAt
                ).publicKey))
        let verifier = AssertionVerifier(app: v.app)
        func verdict(_ bytes: [UInt8], cdh: [UInt8]? = nil, previous: UInt32 = 0, using: AssertionVerifier? = nil)
            -> AssertionError?
        {
            (using ?? verifier).evaluate(
                assertion: bytes, clientDataHash: cdh ?? a.clientDataHash, publicKey: key, previousCounter: previous
            ).failure
        }
        #expect(verdict(a.bytes) == nil)
        var o = try AssertionObject(cbor: a.bytes)
        let signature = o.signature
        o.signature = signature.flipping(bit: 0, at: signature.count - 1)
        #expect(verdict(o.encoded()) == .signatureInvalid)
        o.signature = signature
        o.authenticatorData = o.authenticatorData.flipping(bit: 0, at: 36)
        #expect(verdict(o.encoded()) == .signatureInvalid)
        #expect(verdict(a.bytes, cdh: SHA256.hash("wrong challenge")) == .signatureInvalid)
        #expect(verdict(a.bytes, previous: 1) == .counterNotIncreasing(previous: 1, received: 1))
        #expect(verdict(a.bytes, previous: 7) == .counterNotIncreasing(previous: 7, received: 1))
        #expect(
            verdict(a.bytes, using: AssertionVerifier(app: AppIdentity(teamId: "6MURL8TA57", bundleId: "other")))
                == .rpIdHashMismatch)
        guard case .malformedAssertion = verdict(Array(a.bytes.prefix(20))) else {
            Issue.record("truncated assertion not reported as malformed")
            return
        }
        let swapped = CBOR.map([.init(.text("signature"), .text("x")), .init(.text("authenticatorData"), .bytes([]))])
            .encoded()
        #expect(verdict(swapped) == .malformedAssertion("missing byte field signature"))
    }
}
