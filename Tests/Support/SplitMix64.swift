import FleetSimulator
import Foundation

/// splitmix64, seeded: the same values for the same seed (random test inputs that a failure can name). The
/// simulator's generator, under the name the tests give it: one definition of the algorithm.
public typealias SplitMix64 = SimulationRandom

extension SimulationRandom {
    /// Seeded with `state` as it is (`init(seed:)`).
    public init(state: UInt64) { self.init(seed: state) }

    /// A value in `0..<n`.
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// The samplers of the simulated fleets in the tests and benchmarks, for any seeded generator: one definition, so
/// a calibration figure in a test and in `make bench` come from the same arithmetic.
extension RandomNumberGenerator {
    /// Uniform in (0, 1), never 0 (it goes under `log`): 53 random bits, centred.
    public mutating func uniform() -> Double { (Double(next() >> 11) + 0.5) / 9_007_199_254_740_992.0 }

    /// Standard normal by Box–Muller.
    public mutating func normal() -> Double { (-2 * log(uniform())).squareRoot() * cos(2 * Double.pi * uniform()) }

    /// Poisson: Knuth's product of uniforms below e^-mean for small means, a rounded normal above 50.
    public mutating func poisson(_ mean: Double) -> Int64 {
        if mean <= 0 { return 0 }
        if mean > 50 { return max(0, Int64((mean + mean.squareRoot() * normal()).rounded())) }
        let limit = exp(-mean)
        var k: Int64 = 0
        var product = uniform()
        while product > limit {
            k += 1
            product *= uniform()
        }
        return k
    }
}
