import Crypto
import Foundation
import Rollout
import SecurityKey
import SoftwareAuthenticator
import StepUp
import Testing
import TestSupport

/// A real peer on the client side: python-fido2's own CTAP2 client (`Ctap2` over `CtapHidDevice`, speaking CTAPHID
/// to the software authenticator served on a Unix socket) signs rollout's change document, and rollout's write path
/// (the step-up policy's `SecurityKeyVerifier` against the sealed credential) accepts it, and refuses it when the
/// signature, the authenticator data or the signed hash is not the document's.
@Suite("python-fido2's client approves through rollout's write path")
struct PythonFido2ClientTests {
    typealias W = WritePathSecurityKeyTests

    @Test func anAssertionFromPythonFido2IsAcceptedAndRefusedWhenTampered() throws {
        let f = try W.Fixture()
        let credential = try f.enrol("ana@laptop")
        let socketPath = f.directory.appendingPathComponent("key.sock").path
        let served = try AuthenticatorSocket(path: socketPath, authenticator: f.key)
        defer { served.stop() }
        let request = f.request(100)
        let document = f.policy.changeDocument(for: try f.path.preview(request).proposal)
        let before = try f.version()

        func pythonAssertion(over hash: [UInt8]) throws -> SecurityKeyAssertion {
            let input: [String: Any] = [
                "socket": socketPath, "rp": credential.relyingParty, "credential": Hex.encode(credential.credentialID),
                "clientDataHash": Hex.encode(hash),
            ]
            let script = TestSupport.packageRoot.appendingPathComponent("Tests/SecurityKeyTests/python_fido2_client.py").path
            let result = try TestSupport.run(
                try TestSupport.python(), [script],
                stdin: String(decoding: try JSONSerialization.data(withJSONObject: input), as: UTF8.self))
            try #require(result.status == 0, "\(result.stderr)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            #expect((answer["versions"] as? [String])?.contains("FIDO_2_0") == true)
            return SecurityKeyAssertion(
                credentialID: try #require(Hex.decode(answer["credential"] as? String ?? "")),
                authenticatorData: try #require(Hex.decode(answer["authData"] as? String ?? "")),
                signature: try #require(Hex.decode(answer["signature"] as? String ?? "")))
        }
        func presenting(_ assertion: SecurityKeyAssertion) -> WritePath.Request {
            var r = request
            r.secondFactor = SecondFactorEvidence(document, assertion)
            return r
        }

        // Signed over another document's hash (the same change at 50%), presented with this document: refused.
        var other = document
        other.to = 50_000_000
        let overOther = try pythonAssertion(over: other.clientDataHash)
        #expect(try f.refusal(presenting(overOther))?.kind == .stepUpFailed)
        // This document's hash, but a signature byte or the flags changed: refused.
        var bad = try pythonAssertion(over: document.clientDataHash)
        bad.signature[bad.signature.count - 1] ^= 0x01
        #expect(try f.refusal(presenting(bad))?.kind == .stepUpFailed)
        var noUV = try pythonAssertion(over: document.clientDataHash)
        noUV.authenticatorData[32] &= ~AuthenticatorDataHeader.userVerified
        #expect(try f.refusal(presenting(noUV))?.kind == .stepUpFailed)
        #expect(try f.version() == before)

        // As python-fido2 returned it: published once.
        let good = try pythonAssertion(over: document.clientDataHash)
        #expect(good.credentialID == credential.credentialID)
        #expect(try f.refusal(presenting(good)) == nil)
        #expect(try f.version() == before + 1)
        #expect(try f.stepUpAudit().result == .stepUpAccepted)
    }
}
