import Crypto
import Testing

/// `HMAC.authenticate` (OpenSSL's HMAC_CTX over legacy EVP_MDs) against the published vectors of RFC 4231
/// (HMAC-SHA-256) and RFC 2202 (HMAC-SHA-1, the TOTP MAC), including a key longer than the block and empty input.
struct HMACVectorTests {
    @Test(arguments: [
        ([UInt8](repeating: 0x0b, count: 20), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        ([UInt8](repeating: 0xaa, count: 131), "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ([], "", "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"),
    ])
    func sha256(key: [UInt8], message: String, expected: String) {
        #expect(Hex.encode(HMAC.authenticate(.sha256, key: key, message: Array(message.utf8))) == expected)
    }

    @Test(arguments: [
        ([UInt8](repeating: 0x0b, count: 20), "Hi There", "b617318655057264e28bc0b6fb378c8ef146be00"),
        (Array("Jefe".utf8), "what do ya want for nothing?", "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
    ])
    func sha1(key: [UInt8], message: String, expected: String) {
        #expect(Hex.encode(HMAC.authenticate(.sha1, key: key, message: Array(message.utf8))) == expected)
    }
}
