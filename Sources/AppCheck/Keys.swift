import COpenSSL
import Crypto
import Platform

/// A P-256 public key for verifying ECDSA signatures (an App Attest key, as stored after attestation).
///
/// Wraps a libcrypto `EC_KEY` on a shared P-256 group and verifies with `ECDSA_verify`, libcrypto's own ECDSA
/// (the function its provider calls under `EVP_DigestVerify`), through the low-level API that OpenSSL 3 marks
/// deprecated, as `SHA256` does. An assertion is verified with the key parsed from the stored point for every
/// request: built this way the key costs about 2 µs and the verification adds no provider fetches, against about
/// 20 µs for `EVP_PKEY_fromdata` (and 100 µs for a SubjectPublicKeyInfo decoder) plus 6 µs of `EVP_DigestVerify`
/// set-up, a quarter of the verification itself. The `EC_KEY`s themselves are reused (`Spares`): the point is
/// decoded and checked on the curve for every key, into a key that already holds its copy of the curve, which
/// halves the parse again (1.3 µs against 2.2 µs for a new key, its curve copied and freed). Safe to share
/// between threads: verification only reads the key.
public final class P256PublicKey: @unchecked Sendable {
    /// The 65-byte uncompressed point `04 ‖ X ‖ Y`.
    public let uncompressedPoint: [UInt8]
    private let key: OpaquePointer

    /// The DER prefix of a SubjectPublicKeyInfo for a P-256 key with an uncompressed point; the point follows.
    static let spkiPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
        0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    /// The curve, built once (each key takes a copy).
    private static let group = P256Group()

    private final class P256Group: @unchecked Sendable {
        let pointer: OpaquePointer
        init() { pointer = EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1)! }
    }

    /// Public-only `EC_KEY`s on the P-256 group, kept for the next key when one is released (at most `limit`).
    ///
    /// A spare holds nothing of the key it held but its point, which `EC_KEY_oct2key` overwrites: it never has a
    /// private key, and a key whose decode failed is freed rather than kept.
    private final class Spares: @unchecked Sendable {
        let lock = Lock()
        var keys: [OpaquePointer] = []
        static let limit = 64

        /// A spare, or a new key on the group; nil when libcrypto cannot allocate one.
        func take() -> OpaquePointer? {
            if let key = lock.withLock({ keys.popLast() }) { return key }
            guard let key = EC_KEY_new() else { return nil }
            guard EC_KEY_set_group(key, P256PublicKey.group.pointer) == 1 else {
                EC_KEY_free(key)
                return nil
            }
            return key
        }

        func give(_ key: OpaquePointer) {
            let kept = lock.withLock { () -> Bool in
                guard keys.count < Spares.limit else { return false }
                keys.append(key)
                return true
            }
            if !kept { EC_KEY_free(key) }
        }
    }

    private static let spares = Spares()

    /// Loads a point; nil when it is not 65 bytes starting with `04` or not on the curve (libcrypto checks).
    public init?(uncompressedPoint point: [UInt8]) {
        guard point.count == 65, point[0] == 0x04, let key = P256PublicKey.spares.take() else { return nil }
        // EC_KEY_oct2key decodes the point and rejects one that is not on the curve.
        guard point.withUnsafeBufferPointer({ EC_KEY_oct2key(key, $0.baseAddress, $0.count, nil) }) == 1 else {
            EC_KEY_free(key)
            ERR_clear_error()
            return nil
        }
        self.key = key
        self.uncompressedPoint = point
    }

    deinit { P256PublicKey.spares.give(key) }

    /// A new `EVP_PKEY` of libcrypto's legacy kind holding a copy of this key (made without a provider fetch), for
    /// the caller to free; nil when libcrypto cannot allocate one.
    func newLegacyKey() -> OpaquePointer? {
        guard let copy = EC_KEY_dup(key) else {
            ERR_clear_error()
            return nil
        }
        guard let pkey = EVP_PKEY_new() else {
            EC_KEY_free(copy)
            ERR_clear_error()
            return nil
        }
        guard EVP_PKEY_assign(pkey, EVP_PKEY_EC, UnsafeMutableRawPointer(copy)) == 1 else {
            EVP_PKEY_free(pkey)
            EC_KEY_free(copy)
            ERR_clear_error()
            return nil
        }
        return pkey
    }

    /// The SubjectPublicKeyInfo DER (what a PEM `PUBLIC KEY` block holds).
    public var subjectPublicKeyInfo: [UInt8] { P256PublicKey.spkiPrefix + uncompressedPoint }

    /// Loads the key of a SubjectPublicKeyInfo DER in the form `subjectPublicKeyInfo` writes (the algorithm
    /// `id-ecPublicKey`, the named curve P-256, an uncompressed point); nil for any other form or a point off the curve.
    public convenience init?(subjectPublicKeyInfo spki: [UInt8]) {
        let prefix = P256PublicKey.spkiPrefix
        guard spki.count == prefix.count + 65, spki.starts(with: prefix) else { return nil }
        self.init(uncompressedPoint: Array(spki.dropFirst(prefix.count)))
    }

    /// True when `signature` (DER ECDSA) is valid for `message` under ECDSA P-256 with SHA-256.
    ///
    /// The message is hashed here with SHA-256 and the digest verified; App Attest signs the 32-byte nonce as a
    /// message, so passing the nonce here is the correct, not a pre-hashed, verification.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        var digest = SHA256.Hasher()
        digest.update(message)
        let hash = digest.finish()
        let rc = signature.withUnsafeBufferPointer { s in
            ECDSA_verify(0, hash, Int32(hash.count), s.baseAddress, Int32(s.count), key)
        }
        if rc != 1 { ERR_clear_error() }
        return rc == 1
    }
}

/// A P-256 private key: the key a simulated device keeps in its "Secure Enclave" and the demo CA's keys.
public final class P256PrivateKey: @unchecked Sendable {
    let pkey: OpaquePointer
    /// The 65-byte uncompressed public point.
    public let publicPoint: [UInt8]

    /// Generates a fresh key from libcrypto's DRBG.
    ///
    /// The key is generated from a template holding the curve (`parameters`), whose group libcrypto copies: named
    /// by its curve instead, libcrypto built the group anew for every key, half of a key's generation.
    public convenience init() throws(OpenSSLError) {
        let template = try P256PrivateKey.parameters.get()
        guard let ctx = EVP_PKEY_CTX_new_from_pkey(nil, template.pointer, nil) else {
            throw OpenSSLError.last("EVP_PKEY_CTX_new_from_pkey")
        }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_keygen(ctx, &key) == 1, let key else {
            throw OpenSSLError.last("P-256 key generation")
        }
        try self.init(taking: key)
    }

    /// The P-256 domain parameters (an `EVP_PKEY` with the curve and no key), made once.
    private static let parameters: Result<Parameters, OpenSSLError> = Result { () throws(OpenSSLError) in
        try Parameters()
    }

    private final class Parameters: @unchecked Sendable {
        let pointer: OpaquePointer
        init() throws(OpenSSLError) {
            guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else {
                throw OpenSSLError.last("EVP_PKEY_CTX_new_id")
            }
            defer { EVP_PKEY_CTX_free(ctx) }
            var parameters: OpaquePointer?
            guard EVP_PKEY_paramgen_init(ctx) == 1,
                EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) == 1,
                EVP_PKEY_paramgen(ctx, &parameters) == 1, let parameters
            else { throw OpenSSLError.last("P-256 parameters") }
            pointer = parameters
        }
    }

    /// Loads a key from its DER private-key encoding (as `derRepresentation` writes it).
    public convenience init(der: [UInt8]) throws(OpenSSLError) {
        let key = try OpenSSL.privateKey(der: der)
        guard EVP_PKEY_is_a(key, "EC") == 1 else {
            EVP_PKEY_free(key)
            throw OpenSSLError(operation: "load P-256 key", reason: "not an EC key")
        }
        try self.init(taking: key)
    }

    private init(taking key: OpaquePointer) throws(OpenSSLError) {
        pkey = key
        var len = 0
        var point = [UInt8](repeating: 0, count: 65)
        let ok = EVP_PKEY_get_octet_string_param(key, "pub", &point, 65, &len)
        guard ok == 1, len == 65, point[0] == 0x04 else {
            EVP_PKEY_free(key)
            throw OpenSSLError.last("export the P-256 public point")
        }
        publicPoint = point
    }

    deinit { EVP_PKEY_free(pkey) }

    /// The DER private-key encoding, for persistence.
    public var derRepresentation: [UInt8] { OpenSSL.privateKeyDER(pkey) }

    /// The public half.
    public var publicKey: P256PublicKey { P256PublicKey(uncompressedPoint: publicPoint)! }

    /// ECDSA P-256 with SHA-256 over `message`; DER-encoded signature.
    public func signature(for message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        try OpenSSL.digestSign(pkey, message: message)
    }
}

/// A libcrypto failure, with libcrypto's own reason.
public struct OpenSSLError: Error, Hashable, Sendable, CustomStringConvertible {
    public var operation: String
    public var reason: String
    public init(operation: String, reason: String) {
        self.operation = operation
        self.reason = reason
    }
    public var description: String { "\(operation) failed: \(reason)" }

    /// The error from libcrypto's queue (cleared afterwards).
    static func last(_ operation: String) -> OpenSSLError {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return OpenSSLError(operation: operation, reason: "unknown libcrypto error") }
        var buf = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buf, buf.count)
        return OpenSSLError(
            operation: operation,
            reason: String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}

/// Small shared libcrypto routines: signing and verification through `EVP_DigestSign`/`Verify` (the token signing
/// key signs with `RSA_sign` and App Attest keys verify with `ECDSA_verify`, each on a key structure built once).
enum OpenSSL {
    static func digestVerify(_ pkey: OpaquePointer, signature: [UInt8], message: [UInt8]) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            ERR_clear_error()
            return false
        }
        let rc = signature.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in EVP_DigestVerify(ctx, s.baseAddress, s.count, m.baseAddress, m.count)
            }
        }
        if rc != 1 { ERR_clear_error() }
        return rc == 1
    }

    static func digestSign(_ pkey: OpaquePointer, message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw OpenSSLError.last("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw OpenSSLError.last("EVP_DigestSignInit")
        }
        var length = 0
        let sized = message.withUnsafeBufferPointer { m in EVP_DigestSign(ctx, nil, &length, m.baseAddress, m.count) }
        guard sized == 1 else { throw OpenSSLError.last("EVP_DigestSign") }
        var out = [UInt8](repeating: 0, count: length)
        let ok = out.withUnsafeMutableBufferPointer { o in
            message.withUnsafeBufferPointer { m in EVP_DigestSign(ctx, o.baseAddress, &length, m.baseAddress, m.count) }
        }
        guard ok == 1 else { throw OpenSSLError.last("EVP_DigestSign") }
        return Array(out.prefix(length))
    }

    static func privateKey(der: [UInt8]) throws(OpenSSLError) -> OpaquePointer {
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_AutoPrivateKey(nil, &p, buf.count)
        }
        guard let key else { throw OpenSSLError.last("load private key") }
        return key
    }

    static func privateKeyDER(_ pkey: OpaquePointer) -> [UInt8] { der { i2d_PrivateKey(pkey, $0) } }

    static func publicKeyDER(_ pkey: OpaquePointer) -> [UInt8] { der { i2d_PUBKEY(pkey, $0) } }

    /// What an `i2d_*` function writes: `encode(nil)` gives the length, `encode(&p)` writes at `p`; empty when
    /// libcrypto fails or writes another length.
    static func der(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) -> [UInt8] {
        let n = encode(nil)
        guard n > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: Int(n))
        let written = out.withUnsafeMutableBufferPointer { buf -> Int32 in
            var p: UnsafeMutablePointer<UInt8>? = buf.baseAddress
            return encode(&p)
        }
        return written == n ? out : []
    }
}
