import Glibc
import Platform
import COpenSSL

/// SHA-256 through libcrypto.
///
/// The one-shot and incremental forms use libcrypto's low-level SHA-256 API, which avoids the per-call context
/// allocation of EVP and is the fastest path for the many short inputs of percentile evaluation.
public enum SHA256 {
    public static let digestLength = 32

    // The generic entry points are inlinable so that callers specialise them: unspecialised, the first call of a
    // process with each type looks up its `RawBytes` conformance at run time, a scan of every conformance
    // record in the binary (about a quarter of a million instructions).

    /// The digest of `bytes`.
    @inlinable public static func hash<Bytes: RawBytes>(_ bytes: Bytes) -> [UInt8] {
        // SHA256_Init/Update/Final call the block function directly; OpenSSL 3's one-shot SHA256() fetches the
        // algorithm from a provider on every call, which costs more than hashing a short input.
        var h = Hasher()
        h.update(bytes)
        return h.finish()
    }

    /// The digest of the UTF-8 bytes of `string`.
    public static func hash(_ string: String) -> [UInt8] {
        var s = string
        return s.withUTF8 { hash(UnsafeRawBufferPointer($0)) }
    }

    /// Lowercase hex of the digest of `bytes`.
    @inlinable public static func hex<Bytes: RawBytes>(_ bytes: Bytes) -> String { Hex.encode(hash(bytes)) }

    /// An incremental hasher; `copy()` lets a common prefix be hashed once and reused.
    public struct Hasher: Sendable {
        @usableFromInline var context = SHA256_CTX()

        public init() { SHA256_Init(&context) }

        @inlinable public mutating func update<Bytes: RawBytes>(_ bytes: Bytes) {
            bytes.withUnsafeBytes { buf in _ = SHA256_Update(&context, buf.baseAddress, buf.count) }
        }

        public mutating func update(_ buffer: UnsafeRawBufferPointer) {
            _ = SHA256_Update(&context, buffer.baseAddress, buffer.count)
        }

        public mutating func update(_ string: String) {
            var s = string
            s.withUTF8 { buf in _ = SHA256_Update(&context, buf.baseAddress, buf.count) }
        }

        /// Finishes into `out` (32 bytes) without allocating.
        public mutating func finish(into out: UnsafeMutablePointer<UInt8>) { SHA256_Final(out, &context) }

        public mutating func finish() -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 32)
            out.withUnsafeMutableBufferPointer { finish(into: $0.baseAddress!) }
            return out
        }
    }
}

/// HMAC through libcrypto (SHA-1 for TOTP, SHA-256 elsewhere): OpenSSL's `HMAC_CTX` over OpenSSL's digests,
/// given as legacy `EVP_MD`s (COpenSSL's shim) so that a short-lived process does not pay OpenSSL 3's provider
/// fetch for one MAC. The one-shot `HMAC()` fetches "HMAC" and the digest by name.
public enum HMAC {
    public enum Algorithm: Sendable { case sha1, sha256 }

    /// The two digests and the ENGINE that offers them (COpenSSL's shim): naming an ENGINE spares the first HMAC
    /// of a process OpenSSL's question of whether one is configured, which loads openssl.cnf.
    private struct Digests: @unchecked Sendable {
        let sha256: OpaquePointer
        let sha1: OpaquePointer
        let engine: OpaquePointer
        init() {
            sha256 = rollout_legacy_md_new(1)!
            sha1 = rollout_legacy_md_new(0)!
            engine = rollout_legacy_engine_new(sha256, sha1)!
        }
    }
    private static let digests = Digests()

    @inlinable
    public static func authenticate<K: RawBytes, M: RawBytes>(_ algorithm: Algorithm, key: K, message: M) -> [UInt8] {
        key.withUnsafeBytes { k in message.withUnsafeBytes { m in authenticate(algorithm, key: k, message: m) } }
    }

    /// The MAC of `message` under `key`.
    @usableFromInline
    static func authenticate(_ algorithm: Algorithm, key k: UnsafeRawBufferPointer, message m: UnsafeRawBufferPointer) -> [UInt8] {
        let digests = digests
        let md = algorithm == .sha1 ? digests.sha1 : digests.sha256
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard let context = HMAC_CTX_new() else { fatalError("HMAC_CTX_new: out of memory") }
        defer { HMAC_CTX_free(context) }
        // An empty key: HMAC_Init_ex takes a NULL key as "keep the previous one"; pass a valid pointer.
        let ok = withUnsafeBytes(of: UInt8(0)) { zero in
            HMAC_Init_ex(context, k.baseAddress ?? zero.baseAddress, Int32(k.count), md, digests.engine) == 1
                && HMAC_Update(context, m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count) == 1
                && HMAC_Final(context, &out, &length) == 1
        }
        precondition(ok && length > 0, "libcrypto refused an HMAC")
        return Array(out.prefix(Int(length)))
    }
}

/// Cryptographically secure random bytes from the kernel (`getrandom`, the source libcrypto's DRBG seeds from).
///
/// Not libcrypto's `RAND_bytes`: its first call in a process instantiates the DRBG, fetching its AES cipher
/// through OpenSSL 3's provider tables, about 3 million instructions, an eighth of a whole `rollout nudge`
/// (whose new ETag takes 16 random bytes).
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { buffer in
            var filled = 0
            while filled < buffer.count {
                let n = getrandom(buffer.baseAddress! + filled, buffer.count - filled, 0)
                if n < 0 && errno == EINTR { continue }
                precondition(n > 0, "getrandom failed: the system random source is unavailable (errno \(errno))")
                filled += n
            }
        }
        return out
    }
}

/// Constant-time comparison for secrets and MACs.
public func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
}
