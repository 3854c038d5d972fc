#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The simulator's own seeded random numbers (SplitMix64): the same seed gives the same sequence everywhere.
///
/// Eight bytes of state, so that every device carries its own stream: a device's behaviour depends only on the
/// run's seed and its index, never on how many other devices there are or in which order they were processed.
/// Not for cryptography (keys and challenges come from libcrypto).
public struct SimulationRandom: RandomNumberGenerator, Hashable, Sendable {
    public private(set) var state: UInt64

    public init(seed: UInt64) { state = seed }

    /// An independent stream for `index` within the run seeded by `seed` (one per device, one per purpose).
    public init(seed: UInt64, stream: UInt64, index: UInt64) {
        state = SimulationRandom.mix(seed ^ SimulationRandom.mix(stream &* 0xD1B5_4A32_D192_ED03 ^ index))
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return SimulationRandom.mix(state)
    }

    /// The SplitMix64 finaliser: a bijective scramble of 64 bits.
    @inline(__always)
    public static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform double in [0, 1) with 53 random bits.
    @inline(__always)
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }

    /// True with probability `p`.
    @inline(__always)
    public mutating func chance(_ p: Double) -> Bool { p > 0 && unit() < p }

    /// An exponential variate with the given mean.
    public mutating func exponential(mean: Double) -> Double { -log(1 - unit()) * mean }

    /// A uniform double in `lower ..< upper`.
    public mutating func uniform(_ lower: Double, _ upper: Double) -> Double { lower + (upper - lower) * unit() }

    /// An index drawn with the given weights (which need not sum to 1); the last index when all are zero.
    public mutating func pick(weights: [Double]) -> Int {
        let total = weights.reduce(0, +)
        guard total > 0 else { return weights.count - 1 }
        var u = unit() * total
        for (i, w) in weights.enumerated() {
            if u < w { return i }
            u -= w
        }
        return weights.count - 1
    }
}
