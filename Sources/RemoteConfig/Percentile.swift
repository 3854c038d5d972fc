import Crypto

/// Firebase's assignment of an installation to a micro-percentile, bit for bit.
///
/// SHA-256 of `seed + "." + randomizationId` (just the id when the seed is empty), the whole 32-byte digest read
/// as one unsigned big-endian integer, modulo 100,000,000. The seed prefix is hashed once and its state copied
/// per id, so a percentile costs one SHA-256 compression of the id plus the final block.
public struct PercentileHasher: Sendable {
    public static let modulus: UInt64 = 100_000_000

    private let prefix: SHA256.Hasher

    public init(seed: String) {
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
    ///
    /// With the digest as words w0...w3 (most significant first), N mod m = Σ (wᵢ mod m)·(2^(64·(3−i)) mod m)
    /// mod m. Each product is below 10^16 and the four of them sum below 2^64, so five remainders by a constant
    /// (which the compiler turns into multiplications) replace 256-bit division.
    @inline(__always)
    public static func reduce(digest: UnsafeRawBufferPointer) -> UInt64 {
        let m: UInt64 = 100_000_000
        // 2^192, 2^128 and 2^64 modulo 10^8.
        let c3: UInt64 = 34_512_896
        let c2: UInt64 = 68_211_456
        let c1: UInt64 = 9_551_616
        let w0 = UInt64(bigEndian: digest.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
        let w1 = UInt64(bigEndian: digest.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        let w2 = UInt64(bigEndian: digest.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
        let w3 = UInt64(bigEndian: digest.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        return ((w0 % m) &* c3 &+ (w1 % m) &* c2 &+ (w2 % m) &* c1 &+ w3 % m) % m
    }
}
