import COpenSSL

/// AES-256-GCM through libcrypto's EVP interface: authenticated encryption of small secrets at rest.
///
/// `seal` draws a fresh 96-bit nonce for every message and returns `nonce ‖ ciphertext ‖ tag` (12 + n + 16
/// bytes); `open` checks the tag (over the ciphertext and the associated data) before returning anything.
public enum AESGCM {
    public static let keySize = 32
    public static let nonceSize = 12
    public static let tagSize = 16

    /// Why a sealed box did not open: too short, or the tag does not match (wrong key, edited bytes, or other
    /// associated data).
    public struct OpenError: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Encrypts `plaintext` under `key` (32 bytes), binding `associatedData`.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8] = []) -> [UInt8] {
        precondition(key.count == keySize, "AES-256-GCM needs a 32-byte key")
        let nonce = SecureRandom.bytes(nonceSize)
        guard let ctx = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new failed: out of memory") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
        ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceSize), nil) == 1
        ok = ok && EVP_EncryptInit_ex(ctx, nil, nil, key, nonce) == 1
        var length: Int32 = 0
        if !associatedData.isEmpty {
            ok = ok && EVP_EncryptUpdate(ctx, nil, &length, associatedData, Int32(associatedData.count)) == 1
        }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var written: Int32 = 0
        if !plaintext.isEmpty {
            ok = ok && EVP_EncryptUpdate(ctx, &ciphertext, &written, plaintext, Int32(plaintext.count)) == 1
        }
        var final: Int32 = 0
        ok =
            ok
            && ciphertext.withUnsafeMutableBufferPointer {
                EVP_EncryptFinal_ex(ctx, $0.baseAddress! + Int(written), &final)
            } == 1
        var tag = [UInt8](repeating: 0, count: tagSize)
        ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, Int32(tagSize), &tag) == 1
        precondition(ok, "AES-256-GCM encryption failed in libcrypto")
        return nonce + ciphertext.prefix(Int(written + final)) + tag
    }

    /// Decrypts a box made by `seal` with the same key and associated data.
    public static func open(_ box: [UInt8], key: [UInt8], associatedData: [UInt8] = []) throws(OpenError) -> [UInt8] {
        precondition(key.count == keySize, "AES-256-GCM needs a 32-byte key")
        guard box.count >= nonceSize + tagSize else { throw OpenError(description: "too short to be a sealed secret") }
        let nonce = Array(box.prefix(nonceSize))
        let ciphertext = Array(box.dropFirst(nonceSize).dropLast(tagSize))
        var tag = Array(box.suffix(tagSize))
        guard let ctx = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new failed: out of memory") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nil, nil, nil) == 1
        ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, Int32(nonceSize), nil) == 1
        ok = ok && EVP_DecryptInit_ex(ctx, nil, nil, key, nonce) == 1
        var length: Int32 = 0
        if !associatedData.isEmpty {
            ok = ok && EVP_DecryptUpdate(ctx, nil, &length, associatedData, Int32(associatedData.count)) == 1
        }
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var written: Int32 = 0
        if !ciphertext.isEmpty {
            ok = ok && EVP_DecryptUpdate(ctx, &plaintext, &written, ciphertext, Int32(ciphertext.count)) == 1
        }
        ok = ok && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, Int32(tagSize), &tag) == 1
        var final: Int32 = 0
        ok =
            ok
            && plaintext.withUnsafeMutableBufferPointer {
                EVP_DecryptFinal_ex(ctx, $0.baseAddress! + Int(written), &final)
            } == 1
        guard ok else { throw OpenError(description: "the authentication tag does not match (wrong key or edited)") }
        return Array(plaintext.prefix(Int(written + final)))
    }
}
