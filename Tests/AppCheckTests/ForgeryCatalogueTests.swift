import AppCheck
import Crypto
import Foundation
import Testing
import TestSupport
import Timekeeping

/// Every forgery of issue 5's catalogue and issue 13's attestation leniencies, each rejected with its own reason
/// (exchange-level forgeries such as replayed challenges and tokens are in ExchangeTests and HostileTokenTests).
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

    @Test func aCredentialCertificateWithANonMinimalLengthIsCheckedAsSent() throws {
        // The kayak leaf with its TBSCertificate's length in a non-minimal long form (30 83 00 xx xx for 30 82 xx
        // xx). libcrypto parses it, and the signature covers the DER Apple signed, not these bytes: a parse that
        // encoded the certificate afresh (to set its key) would check the signature over the DER and accept it.
        let leaf = try AttestationObject(cbor: kayak.attestation).certificates[0]
        try #require(leaf.count > 8 && leaf[0] == 0x30 && leaf[1] == 0x82 && leaf[4] == 0x30 && leaf[5] == 0x82)
        let outer = ((Int(leaf[2]) << 8) | Int(leaf[3])) + 1
        let ber = [0x30, 0x82, UInt8(outer >> 8), UInt8(outer & 0xff), 0x30, 0x83, 0x00] + leaf[6...]
        #expect(Certificate(der: ber) != nil && Certificate(credentialDER: ber) != nil)
        let forged = modified(kayak) { $0.certificates[0] = ber }
        #expect(verdict(kayak, attestation: forged) == .certificateSignatureInvalid(depth: 0))
    }

    @Test func aCredentialCertificateParsesAsAnyCertificate() throws {
        // The credential certificate's parse (its key loaded from the point) answers as the general one does.
        let demoKey = try P256PrivateKey()
        let demoLeaf = try Demo.authority.credentialCertificate(
            for: demoKey, nonce: SHA256.hash("parse"), at: Demo.time)
        for der in [try AttestationObject(cbor: kayak.attestation).certificates[0], demoLeaf.der] {
            let general = try #require(Certificate(der: der))
            let credential = try #require(Certificate(credentialDER: der))
            #expect(credential.der == der)
            #expect(credential.hasP256Key && general.hasP256Key)
            #expect(credential.subjectPublicKeyBytes == general.subjectPublicKeyBytes)
            #expect(credential.subjectCommonName == general.subjectCommonName)
            #expect(credential.notBefore == general.notBefore && credential.notAfter == general.notAfter)
            #expect(
                credential.extensionValues(oid: AppAttestNonceExtension.oid)
                    == general.extensionValues(oid: AppAttestNonceExtension.oid))
            #expect(credential.isCertificateAuthority == general.isCertificateAuthority)
            #expect(credential.keyLoadedFromPoint && !general.keyLoadedFromPoint)
        }
        // A certificate whose key is not P-256 (Apple's intermediate, P-384) parses the general way.
        let intermediate = try AttestationObject(cbor: kayak.attestation).certificates[1]
        let parsed = try #require(Certificate(credentialDER: intermediate))
        #expect(!parsed.hasP256Key && parsed.der == intermediate && !parsed.keyLoadedFromPoint)
        // So does one that libcrypto would not encode back to the bytes received: the kayak leaf with its outer
        // length in a non-minimal long form (30 83 00 xx xx for 30 82 xx xx).
        let leaf = try AttestationObject(cbor: kayak.attestation).certificates[0]
        let longForm = [0x30, 0x83, 0x00] + leaf[2...]
        let reparsed = try #require(Certificate(credentialDER: longForm))
        #expect(!reparsed.keyLoadedFromPoint && reparsed.der == longForm)
        #expect(Certificate(credentialDER: Array(intermediate.dropLast())) == nil)
        #expect(Certificate(credentialDER: intermediate + [0]) == nil)
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

    /// Issue 13's attestation leniencies, built with the demo CA so every other check passes: each is refused
    /// with its own reason.
    struct ChainForgery {
        let key = try! P256PrivateKey()
        let cdh = SHA256.hash("chain forgery")
        var keyId: [UInt8] { SHA256.hash(key.publicPoint) }

        func verdict(_ attestation: [UInt8], at time: Instant = Demo.time) -> AttestationError? {
            Demo.verifier.evaluate(
                attestation: attestation, keyId: keyId, clientDataHash: cdh, app: Demo.app, environment: .production,
                at: time
            ).failure
        }

        func forged(
            authData: [UInt8]? = nil,
            nonceExtension: @escaping ([UInt8]) -> [UInt8] = AppAttestNonceExtension
                .extensionValue(nonce:), issuedBy: DemoCertificateAuthority.ForgedIssuer = .intermediate,
            certificateAuthority: Bool = false,
            chain: @escaping (Certificate) -> [[UInt8]] = { [$0.der, Demo.authority.intermediate.der] }
        ) throws -> [UInt8] {
            try Demo.forgedAttestation(
                key: key, authData: authData ?? Demo.authData(key: key), clientDataHash: cdh,
                nonceExtension: nonceExtension, issuedBy: issuedBy, certificateAuthority: certificateAuthority,
                chain: chain)
        }
    }

    @Test func theUnforgedDemoChainPasses() throws {
        let f = ChainForgery()
        #expect(f.verdict(try f.forged()) == nil)
    }

    @Test func nonMinimalDERLengthsInTheNonceExtension() throws {
        let f = ChainForgery()
        // The same SEQUENCE { [1] { OCTET STRING } } with one length in a long form DER forbids.
        let spellings: [(String, ([UInt8]) -> [UInt8], String)] = [
            (
                "SEQUENCE length 81 24", { [0x30, 0x81, 0x24, 0xa1, 0x22, 0x04, 0x20] + $0 },
                "byte 0 has a 3-byte header"
            ),
            ("[1] length 81 22", { [0x30, 0x25, 0xa1, 0x81, 0x22, 0x04, 0x20] + $0 }, "byte 2 has a 3-byte header"),
            (
                "OCTET STRING length 81 20", { [0x30, 0x25, 0xa1, 0x23, 0x04, 0x81, 0x20] + $0 },
                "byte 4 has a 3-byte header"
            ),
            (
                "SEQUENCE length 82 00 24", { [0x30, 0x82, 0x00, 0x24, 0xa1, 0x22, 0x04, 0x20] + $0 },
                "byte 0 has a 4-byte header"
            ),
            (
                "high-tag form of [1]", { [0x30, 0x25, 0xbf, 0x01, 0x22, 0x04, 0x20] + $0 },
                "byte 2 has a 3-byte header"
            ),
        ]
        for (name, spell, reason) in spellings {
            guard case .malformedNonceExtension(let r)? = f.verdict(try f.forged(nonceExtension: spell)) else {
                Issue.record("\(name): not refused as a malformed nonce extension")
                continue
            }
            #expect(r.contains(reason) && r.contains("non-minimal"), "\(name): \(r)")
        }
    }

    @Test func aCOSEKeyThatIsNotTheCertificatesKey() throws {
        let f = ChainForgery()
        let other = try P256PrivateKey()
        // The certificate, keyId and credentialId name f.key; the COSE key in authData is another key.
        #expect(
            f.verdict(try f.forged(authData: Demo.authData(key: f.key, coseKey: other.publicPoint)))
                == .credentialKeyMismatch)
        // A COSE key that is not an EC2 P-256 key at all.
        var badCurve = Demo.authData(key: f.key)
        let coseStart = 37 + 16 + 2 + 32
        let cose = AuthenticatorData.coseKey(uncompressedPoint: f.key.publicPoint).encoded()
        #expect(Array(badCurve[coseStart..<(coseStart + cose.count)]) == cose)
        // `-1: 1` (crv P-256) is the bytes 20 01; make it 20 02 (P-384).
        let crv = try #require(cose.firstRange(of: [0x20, 0x01])).lowerBound
        badCurve[coseStart + crv + 1] = 0x02
        #expect(f.verdict(try f.forged(authData: badCurve)) == .credentialKeyMismatch)
    }

    @Test func aCredentialCertificateIssuedByTheRootDirectly() throws {
        let f = ChainForgery()
        #expect(f.verdict(try f.forged(issuedBy: .root)) == .leafIssuedByRoot)
        #expect(f.verdict(try f.forged(issuedBy: .root, chain: { [$0.der] })) == .leafIssuedByRoot)
    }

    @Test func theRootUsedAsTheIntermediate() throws {
        let f = ChainForgery()
        #expect(
            f.verdict(try f.forged(issuedBy: .root, chain: { [$0.der, Demo.authority.root.der] }))
                == .rootAsIntermediate(index: 1))
        #expect(
            f.verdict(try f.forged(chain: { [$0.der, Demo.authority.root.der, Demo.authority.intermediate.der] }))
                == .rootAsIntermediate(index: 1))
    }

    @Test func caConstraintsAndChainLength() throws {
        let f = ChainForgery()
        guard case .caConstraintViolated(0, let reason)? = f.verdict(try f.forged(certificateAuthority: true)) else {
            Issue.record("a CA:TRUE credential certificate was not refused for its constraints")
            return
        }
        #expect(reason.contains("is a CA"))
        // A credential certificate used as the intermediate: libcrypto refuses a non-CA issuer.
        let middleKey = try P256PrivateKey()
        let middle = try Demo.authority.credentialCertificate(for: middleKey, nonce: SHA256.hash("m"), at: Demo.time)
        guard
            case .caConstraintViolated(1, _)? = f.verdict(
                try f.forged(
                    issuedBy: .certificate(middle, middleKey),
                    chain: { [$0.der, middle.der, Demo.authority.intermediate.der] }))
        else {
            Issue.record("a non-CA intermediate was not refused for its constraints")
            return
        }
        #expect(
            f.verdict(
                try f.forged(chain: { [$0.der, Demo.authority.intermediate.der, Demo.authority.intermediate.der] }))
                == .unexpectedChainLength(3))
    }

    /// RFC 5280 §4.1.2.5: a certificate is valid from notBefore through notAfter, inclusive.
    @Test func aCertificateIsValidAtItsNotAfterSecond() throws {
        let f = ChainForgery()
        let attestation = try f.forged()
        let notAfter = Demo.time + .days(3)
        #expect(f.verdict(attestation, at: Demo.time) == nil)
        #expect(f.verdict(attestation, at: notAfter) == nil)
        let after = notAfter + .seconds(Int64(1))
        #expect(f.verdict(attestation, at: after) == .certificateExpired(depth: 0, notAfter: notAfter, at: after))
        let before = Demo.time - .seconds(Int64(1))
        #expect(
            f.verdict(attestation, at: before) == .certificateNotYetValid(depth: 0, notBefore: Demo.time, at: before))
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
