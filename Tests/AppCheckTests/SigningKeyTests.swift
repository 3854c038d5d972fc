@testable import AppCheck
import Crypto
import Testing
import Timekeeping

/// A token signing key signs with `RSA_sign` on its RSA structure (what `openssl speed rsa2048` times) rather than
/// through `EVP_DigestSign`: RSASSA-PKCS1-v1_5 is deterministic, so both paths must give the same bytes, for a
/// fresh key and for one loaded from the store's DER.
@Suite struct SigningKeyTests {
    @Test func rsaSignGivesTheEVPSignature() throws {
        let fresh = try AppCheckSigningKey.generate(createdAt: Instant(seconds: 1_700_000_000))
        let loaded = try AppCheckSigningKey(privateKeyDER: fresh.privateKeyDER, createdAt: fresh.createdAt)
        #expect(loaded.kid == fresh.kid)
        for message in [[], Array("eyJhbGciOiJSUzI1NiJ9.e30".utf8), [UInt8](repeating: 0xa5, count: 1000)] {
            for key in [fresh, loaded] {
                let signature = try key.sign(message)
                #expect(signature.count == 256)
                #expect(signature == (try key.signThroughEVP(message)))
                #expect(key.isValidSignature(signature, for: message))
                #expect(!key.isValidSignature(signature, for: message + [0]))
            }
        }
    }

    /// Threads share one key: every signature is still the deterministic one.
    @Test func concurrentSignaturesAreAllCorrect() async throws {
        let key = try AppCheckSigningKey.generate(createdAt: Instant(seconds: 1_700_000_000))
        let message = Array("header.payload".utf8)
        let expected = try key.signThroughEVP(message)
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 { group.addTask { try (0..<10).allSatisfy { _ in try key.sign(message) == expected } } }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == Array(repeating: true, count: 8))
    }
}
