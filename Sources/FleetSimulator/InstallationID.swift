import Crypto

/// Firebase installation IDs (FIDs) for simulated devices.
///
/// A real FID is 17 random bytes whose first four bits are `0111`, base64url-encoded and cut to 22 characters,
/// so it starts with `c`, `d`, `e` or `f`. Simulated ones are shaped the same way from the run's seed and the
/// device index, so device `i` has the same id in a fleet of a thousand and of a million, and ids are computed
/// when needed instead of being stored.
public enum InstallationID {
    /// The id of device `index` in a run seeded by `seed`.
    public static func make(seed: UInt64, index: Int) -> String {
        var rng = SimulationRandom(seed: seed, stream: 0x4649_44, index: UInt64(index))
        var bytes = [UInt8](repeating: 0, count: 18)
        for w in 0..<3 {
            var v = rng.next()
            for b in 0..<6 where w * 6 + b < 18 {
                bytes[w * 6 + b] = UInt8(truncatingIfNeeded: v)
                v >>= 8
            }
        }
        bytes[0] = 0x70 | (bytes[0] & 0x0F)
        return String(Base64.encode(bytes.prefix(17), urlSafe: true, padded: false).prefix(22))
    }

    /// Whether `text` has the shape of an FID: 22 base64url characters, the first one of `c d e f`.
    public static func isWellFormed(_ text: String) -> Bool {
        let u = Array(text.utf8)
        guard u.count == 22, let first = u.first, (UInt8(ascii: "c")...UInt8(ascii: "f")).contains(first) else {
            return false
        }
        return u.allSatisfy { alphabet.contains($0) }
    }

    private static let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
}
