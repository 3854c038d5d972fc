import AppCheck
import Crypto
import Foundation
import Testing
import TestSupport
import Timekeeping

/// The real attestations in ../shared/vectors/appattest/ at their own instants, and after their leaves expire.
@Suite struct AttestationVectorTests {
    @Test(arguments: AppAttestVector.names)
    func verifiesAtItsTimeWithEveryCheckPassing(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        let report = AttestationVerifier().evaluate(
            attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
            environment: v.environment, at: v.verifyAt)
        #expect(report.passed, "\(report.failure?.description ?? "")")
        #expect(
            report.checks.map(\.name) == [
                "format", "certificateChain", "nonce", "keyId", "rpIdHash", "signCount", "aaguid", "credentialId",
                "credentialKey",
            ])
        #expect(report.checks.allSatisfy { $0.outcome == .passed })
        let key = try #require(report.value)
        #expect(SHA256.hash(key.publicKey) == v.keyId)
        #expect(key.environment == v.environment)
        #expect(key.certificateNotAfter == v.leafNotAfter)
        #expect(!key.receipt.isEmpty)
    }

    @Test(arguments: AppAttestVector.names)
    func assertionsVerifyWithTheAttestedKey(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        let key = try AttestationVerifier().verify(
            attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
            environment: v.environment, at: v.verifyAt)
        for a in v.assertions {
            let counter = try AssertionVerifier(app: v.app).verify(
                assertion: a.bytes, clientDataHash: a.clientDataHash, publicKey: key.publicKey,
                previousCounter: a.previousCounter)
            #expect(counter == a.expectedCounter, "\(a.name)")
        }
    }

    @Test(arguments: AppAttestVector.names)
    func failsOnceTheLeafHasExpired(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        let verifier = AttestationVerifier()
        func verdict(_ t: Instant) -> AttestationError? {
            verifier.evaluate(
                attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
                environment: v.environment, at: t
            ).failure
        }
        #expect(verdict(v.leafNotAfter - .seconds(Int64(1))) == nil)
        // Valid through the notAfter second itself (RFC 5280 §4.1.2.5), and from the notBefore second.
        #expect(verdict(v.leafNotAfter) == nil)
        #expect(verdict(v.leafNotBefore) == nil)
        let after = v.leafNotAfter + .seconds(Int64(1))
        #expect(verdict(after) == .certificateExpired(depth: 0, notAfter: v.leafNotAfter, at: after))
        let later = v.leafNotAfter + .days(400)
        #expect(verdict(later) == .certificateExpired(depth: 0, notAfter: v.leafNotAfter, at: later))
        let before = v.leafNotBefore - .seconds(Int64(1))
        #expect(verdict(before) == .certificateNotYetValid(depth: 0, notBefore: v.leafNotBefore, at: before))
    }

    @Test(arguments: AppAttestVector.names)
    func reEncodingIsByteIdentical(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        #expect(try AttestationObject(cbor: v.attestation).encoded() == v.attestation)
        for a in v.assertions { #expect(try AssertionObject(cbor: a.bytes).encoded() == a.bytes) }
    }

    @Test func pinnedRootMatchesThePublishedCertificate() throws {
        let pem = try String(
            contentsOf: try TestSupport.vector("appattest/apple-app-attestation-root-ca.pem"), encoding: .utf8)
        let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        #expect(Base64.decode(body) == AppleAppAttestationRoot.der)
        #expect(
            SHA256.hex(AppleAppAttestationRoot.der)
                == "1cb9823ba28ba6ad2d33a006941de2ae4f513ef1d4e831b9f7e0fa7b6242c932")
        #expect(AppleAppAttestationRoot.certificate.subjectCommonName == "Apple App Attestation Root CA")
        #expect(AppleAppAttestationRoot.certificate.notAfter == ISO8601.parse("2045-03-15T00:00:00Z"))
    }

    /// Apple's published sample passes the raw challenge as clientDataHash; hashing it (the Firebase flow) fails.
    @Test func appleSampleNeedsTheRawClientDataHash() throws {
        let v = try AppAttestVector.load("apple-guide-2024")
        let hashed = AttestationVerifier().evaluate(
            attestation: v.attestation, keyId: v.keyId, clientDataHash: SHA256.hash(v.clientDataHash), app: v.app,
            environment: v.environment, at: v.verifyAt)
        #expect(hashed.failure == .nonceMismatch)
    }
}
