import Crypto
import Testing

@Suite("Crypto's signature verification of raw public keys")
struct SignatureVerifierTests {
    /// RFC 8032 §7.1, TEST 1 (the empty message) and TEST 2 (one byte, 0x72).
    @Test("Ed25519: RFC 8032's vectors verify; a changed message or signature does not")
    func ed25519() throws {
        let key1 = try #require(Hex.decode("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
        let sig1 = try #require(
            Hex.decode(
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
            ))
        #expect(SignatureVerifier.ed25519(publicKey: key1, signature: sig1, message: []))
        #expect(!SignatureVerifier.ed25519(publicKey: key1, signature: sig1, message: [0]))
        let key2 = try #require(Hex.decode("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"))
        var sig2 = try #require(
            Hex.decode(
                "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
            ))
        #expect(SignatureVerifier.ed25519(publicKey: key2, signature: sig2, message: [0x72]))
        sig2[0] ^= 1
        #expect(!SignatureVerifier.ed25519(publicKey: key2, signature: sig2, message: [0x72]))
        #expect(!SignatureVerifier.ed25519(publicKey: Array(key2.dropLast()), signature: sig2, message: [0x72]))
    }

    @Test("ES256: a key that is not a point on P-256 verifies nothing")
    func notOnCurve() {
        var point = [UInt8](repeating: 1, count: 65)
        point[0] = 4
        #expect(!SignatureVerifier.es256(publicKey: point, signature: [0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01], message: [1]))
    }
}
