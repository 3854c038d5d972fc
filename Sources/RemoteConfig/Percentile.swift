import Crypto

/// Firebase's assignment of an installation to a micro-percentile, bit for bit.
///
/// SHA-256 of `seed + "." + randomizationId` (just the id when the seed is empty), the whole 32-byte digest read
/// as one unsigned big-endian integer, modulo 100,000,000. The seed prefix is hashed once and its state copied
/// per id, so a percentile costs one SHA-256 compression of the id plus the final block.
public struct PercentileHasher: Sendable {
    public static let modulus: UInt64 = 100_000_000
    /// 2^64 mod 10^8, to fold the digest word by word without 128-bit division.
    static let twoTo64ModM: UInt64 = UInt64((UInt128(1) << 64) % UInt128(modulus))

    private let prefix: SHA256.Hasher
    public let seed: String

    public init(seed: String) {
        self.seed = seed
        var h = SHA256.Hasher()
        if !seed.isEmpty { h.update(seed + ".") }
        prefix = h
    }

    /// The micro-percentile `0 ... 99_999_999` of `randomizationId`.
    @inlinable
    public func microPercentile(of randomizationId: String) -> Int64 {
        var id = randomizationId
        return id.withUTF8 { microPercentile(utf8: UnsafeRawBufferPointer($0)) }
    }

    /// The micro-percentile of an id given as UTF-8 bytes.
    public func microPercentile(utf8 id: UnsafeRawBufferPointer) -> Int64 {
        var h = prefix
        h.update(id)
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 32) { buf in
            h.finish(into: buf.baseAddress!)
            return Int64(PercentileHasher.reduce(digest: UnsafeRawBufferPointer(buf)))
        }
    }

    /// The 256-bit big-endian integer in `digest` modulo 10^8.
    public static func reduce(digest: UnsafeRawBufferPointer) -> UInt64 {
        var r: UInt64 = 0
        for w in 0..<4 {
            let word = UInt64(bigEndian: digest.loadUnaligned(fromByteOffset: w * 8, as: UInt64.self))
            // r < 10^8 and 2^64 mod 10^8 < 10^8, so r * c < 10^16 fits in 64 bits.
            r = (r * twoTo64ModM + word % modulus) % modulus
        }
        return r
    }
}
