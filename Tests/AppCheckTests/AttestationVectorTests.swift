import AppCheck
import Crypto
import Foundation
import Testing
import TestSupport
import Timekeeping

@Suite struct AttestationVectorTests {
    @Test(arguments: AppAttestVector.names)
    func verifiesAtItsTime(_ name: String) throws {
        let v = try AppAttestVector.load(name)
        let report = AttestationVerifier().evaluate(
            attestation: v.attestation, keyId: v.keyId, clientDataHash: v.clientDataHash, app: v.app,
            environment: v.environment, at: v.verifyAt)
        for c in report.checks { print(name, c.outcome, c.name, c.detail) }
        #expect(report.passed, "\(report.failure?.description ?? "")")
        #expect(report.checks.map(\.outcome).allSatisfy { $0 == .passed })
        let key = try #require(report.value)
        #expect(SHA256.hash(key.publicKey) == v.keyId)
        #expect(key.certificateNotAfter == v.leafNotAfter)
    }
}
