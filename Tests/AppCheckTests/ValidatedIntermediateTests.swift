@testable import AppCheck
import Crypto
import Foundation
import Testing
import Timekeeping

/// The short path of chain verification (`TrustAnchors.verify`): once a full validation anchored an intermediate,
/// chains through the same DER skip the anchor's signature on it, and nothing else. Every verdict must be the one
/// a verifier without the short path gives.
@Suite struct ValidatedIntermediateTests {
    /// A verifier with its own anchors (so its cache starts empty) over the demo authority `ca`.
    func verifier(_ ca: DemoCertificateAuthority) -> (AttestationVerifier, TrustAnchors) {
        let anchors = TrustAnchors(ca.trustAnchors.certificates)
        return (AttestationVerifier(trust: anchors), anchors)
    }

    func attestation(_ ca: DemoCertificateAuthority, at time: Instant, validity: Instant.Duration = .days(3))
        throws -> (attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8])
    {
        let key = try P256PrivateKey()
        let cdh = SHA256.hash(Array("challenge \(time.seconds)".utf8))
        let authData = Demo.authData(key: key)
        var hasher = SHA256.Hasher()
        hasher.update(authData)
        hasher.update(cdh)
        let leaf = try ca.credentialCertificate(for: key, nonce: hasher.finish(), at: time, validity: validity)
        let object = AttestationObject(
            certificates: [leaf.der, ca.intermediate.der], receipt: [1], authenticatorData: authData)
        return (object.encoded(), SHA256.hash(key.publicPoint), cdh)
    }

    func verdict(
        _ v: AttestationVerifier, _ a: (attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8]), at time: Instant
    ) -> AttestationError? {
        v.evaluate(
            attestation: a.attestation, keyId: a.keyId, clientDataHash: a.clientDataHash, app: Demo.app,
            environment: .production, at: time
        ).failure
    }

    @Test func theSecondChainThroughAnIntermediateTakesTheShortPath() throws {
        let (v, anchors) = verifier(Demo.authority)
        let first = try attestation(Demo.authority, at: Demo.time)
        #expect(verdict(v, first, at: Demo.time) == nil)
        #expect(anchors.shortPathVerifications == 0)
        for i in 1...3 {
            let t = Demo.time + .hours(Int64(i))
            #expect(verdict(v, try attestation(Demo.authority, at: t), at: t) == nil)
        }
        #expect(anchors.shortPathVerifications == 3)
    }

    /// Each refusal after the intermediate was anchored equals the refusal of a verifier that never saw it.
    @Test func refusalsOnTheShortPathReadAsTheFullVerdict() throws {
        let (warm, anchors) = verifier(Demo.authority)
        #expect(verdict(warm, try attestation(Demo.authority, at: Demo.time), at: Demo.time) == nil)
        let stranger = try DemoCertificateAuthority.generate()
        var cases: [(String, (attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8]), Instant)] = [
            ("leaf expired", try attestation(Demo.authority, at: Demo.time), Demo.time + .days(4)),
            ("leaf not yet valid", try attestation(Demo.authority, at: Demo.time), Demo.time - .hours(1)),
        ]
        // A leaf issued by another authority's intermediate but presented with this one: same names, other key.
        var forged = try attestation(stranger, at: Demo.time)
        var object = try AttestationObject(cbor: forged.attestation)
        object.certificates[1] = Demo.authority.intermediate.der
        forged.attestation = object.encoded()
        cases.append(("leaf signed by another key", forged, Demo.time))
        for (name, a, time) in cases {
            let cold = verifier(Demo.authority).0
            let expected = verdict(cold, a, at: time)
            #expect(expected != nil, "\(name): the full verification refuses it")
            #expect(verdict(warm, a, at: time) == expected, "\(name)")
        }
        #expect(anchors.shortPathVerifications == 0)
    }

    /// The short path does not check the anchor's signature, but it does check the anchor's validity period: a
    /// chain whose root has expired while its intermediate and leaf are valid is refused as before.
    @Test func anExpiredAnchorIsRefusedAfterItsIntermediateWasAnchored() throws {
        let from = ISO8601.parse("2020-01-01T00:00:00Z")!
        let rootUntil = ISO8601.parse("2026-06-10T00:00:00Z")!
        let ca = try DemoCertificateAuthority.generate(
            root: from...rootUntil, intermediate: from...ISO8601.parse("2100-01-01T00:00:00Z")!)
        let (warm, anchors) = verifier(ca)
        #expect(verdict(warm, try attestation(ca, at: Demo.time), at: Demo.time) == nil)
        let late = rootUntil + .days(1)
        let a = try attestation(ca, at: late - .hours(1))
        let expected = verdict(verifier(ca).0, a, at: late)
        // (The root is not in x5c, so the error does not carry its notAfter.)
        #expect(expected == .certificateExpired(depth: 2, notAfter: nil, at: late))
        #expect(verdict(warm, a, at: late) == expected)
        // Up to the root's notAfter second, inclusive, it verifies (on the short path).
        let b = try attestation(ca, at: rootUntil - .hours(1))
        #expect(verdict(warm, b, at: rootUntil) == nil)
        #expect(anchors.shortPathVerifications == 1)
    }

    /// Apple's three real chains share one intermediate: after the first, the others take the short path and
    /// verify as they do alone.
    @Test func realChainsThroughApplesIntermediate() throws {
        let anchors = TrustAnchors([AppleAppAttestationRoot.certificate])
        let warm = AttestationVerifier(trust: anchors)
        let vectors = try AppAttestVector.all()
        for v in vectors {
            let alone = AttestationVerifier(trust: TrustAnchors([AppleAppAttestationRoot.certificate]))
            func run(_ verifier: AttestationVerifier, at time: Instant) -> AttestationError? {
                verifier.evaluate(
                    attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
                    environment: v.environment, at: time
                ).failure
            }
            #expect(run(warm, at: v.verifyAt) == nil, "\(v.name)")
            // Long after the leaves expired, the refusal is the same with or without the short path.
            let later = v.verifyAt + .days(30)
            #expect(run(warm, at: later) == run(alone, at: later), "\(v.name)")
            #expect(run(alone, at: later) != nil)
        }
        #expect(anchors.shortPathVerifications == vectors.count - 1)
    }
}
