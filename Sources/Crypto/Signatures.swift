import COpenSSL

/// Signature verification with libcrypto for keys that arrive as raw public keys (a security key's COSE key):
/// ECDSA on P-256 with SHA-256 (COSE ES256) and Ed25519 (COSE EdDSA). Nothing of our own but the plumbing.
public enum SignatureVerifier {
    /// True when `signature` (DER ECDSA) is valid for `message` under the P-256 key `publicKey` (`04 ‖ X ‖ Y`, or
    /// `X ‖ Y`); false for a key that is not a point on the curve.
    public static func es256(publicKey: [UInt8], signature: [UInt8], message: [UInt8]) -> Bool {
        let point = publicKey.count == 64 ? [0x04] + publicKey : publicKey
        guard point.count == 65, point[0] == 0x04, let key = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1) else {
            return false
        }
        defer { EC_KEY_free(key) }
        guard point.withUnsafeBufferPointer({ EC_KEY_oct2key(key, $0.baseAddress, $0.count, nil) }) == 1 else {
            ERR_clear_error()
            return false
        }
        let digest = SHA256.hash(message)
        let rc = signature.withUnsafeBufferPointer { s in
            ECDSA_verify(0, digest, Int32(digest.count), s.baseAddress, Int32(s.count), key)
        }
        if rc != 1 { ERR_clear_error() }
        return rc == 1
    }

    /// True when `signature` (64 bytes) is valid for `message` under the Ed25519 key `publicKey` (32 bytes).
    public static func ed25519(publicKey: [UInt8], signature: [UInt8], message: [UInt8]) -> Bool {
        guard publicKey.count == 32, signature.count == 64,
            let key = publicKey.withUnsafeBufferPointer({ EVP_PKEY_new_raw_public_key(NID_ED25519, nil, $0.baseAddress, 32) })
        else {
            ERR_clear_error()
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, nil, nil, key) == 1 else {
            ERR_clear_error()
            return false
        }
        let rc = EVP_DigestVerify(ctx, signature, signature.count, message, message.count)
        if rc != 1 { ERR_clear_error() }
        return rc == 1
    }
}
