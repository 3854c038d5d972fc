import Glibc
import Timekeeping

/// The standard normal distribution.
public enum StandardNormal {
    /// P(Z ≤ z).
    public static func cdf(_ z: Double) -> Double { 0.5 * erfc(-z / 2.0.squareRoot()) }

    /// The z with P(Z ≤ z) = p, by bisection on `cdf` (called rarely; exact to about 1e-12).
    public static func quantile(_ p: Double) -> Double {
        precondition(p > 0 && p < 1, "a probability strictly between 0 and 1")
        var lo = -40.0
        var hi = 40.0
        for _ in 0..<100 {
            let mid = (lo + hi) / 2
            if cdf(mid) < p { lo = mid } else { hi = mid }
            if hi - lo < 1e-13 { break }
        }
        return (lo + hi) / 2
    }
}

/// The allocation-robust sequential probability ratio test on crashes (FACTS §5).
///
/// Each fatal crash is a coin flip: from an exposed session (y = 1) or a control session. With no difference
/// in crash rate the chance it is exposed is π0, the exposed share of the sessions at that moment; with a
/// harmful rate ratio r it is π1 = rπ0 / (rπ0 + 1 − π0). Λ sums the log-likelihood ratios of the crashes. Because
/// π0 is taken look by look, the test stays valid when the percentage (and so the allocation) changes.
///
/// Harm is declared once Λ ≥ ln((1 − β)/α) and stays declared. Λ ≤ ln(β/(1 − α)) means "no harm of r× or
/// more shown"; the test keeps running (a rollout goes on and later harm must still be caught), so that state
/// can be left again.
public struct CrashSPRT: Hashable, Sendable {
    public let harmRatio: Double
    public let alpha: Double
    public let beta: Double
    public internal(set) var logLikelihoodRatio = 0.0
    public internal(set) var exposedCrashes: Int64 = 0
    public internal(set) var controlCrashes: Int64 = 0
    /// When Λ first reached the harm bound.
    public internal(set) var harmDeclaredAt: Instant?

    public init(harmRatio: Double, alpha: Double, beta: Double) {
        precondition(harmRatio > 1 && alpha > 0 && alpha < 1 && beta > 0 && beta < 1)
        self.harmRatio = harmRatio
        self.alpha = alpha
        self.beta = beta
    }

    /// ln((1 − β)/α): harm at or above.
    public var harmBound: Double { log((1 - beta) / alpha) }
    /// ln(β/(1 − α)): no harm at or below.
    public var noHarmBound: Double { log(beta / (1 - alpha)) }

    public var harmDeclared: Bool { harmDeclaredAt != nil }
    public var noHarmShown: Bool { !harmDeclared && logLikelihoodRatio <= noHarmBound }

    /// The exposed share of crashes expected under harm when the exposed share of exposure is `share`.
    public func harmfulShare(_ share: Double) -> Double { harmRatio * share / (harmRatio * share + 1 - share) }

    /// Adds one look's crashes, all at the exposed share of exposure `share` (0 < share < 1).
    public mutating func observe(
        exposedCrashes e: Int64, controlCrashes c: Int64, exposedShare share: Double, at time: Instant
    ) {
        guard e + c > 0, share > 0, share < 1 else { return }
        let p1 = harmfulShare(share)
        logLikelihoodRatio += Double(e) * log(p1 / share) + Double(c) * log((1 - p1) / (1 - share))
        exposedCrashes += e
        controlCrashes += c
        if harmDeclaredAt == nil, logLikelihoodRatio >= harmBound { harmDeclaredAt = time }
    }
}

/// An always-valid test and confidence sequence for a difference θ (the mixture SPRT of FACTS §5).
///
/// Each look supplies the current estimate θ, its variance V and the mixing variance τ²; the p-value is the
/// running minimum of 1/Λ and the interval is valid at every look, however often it is checked.
public struct MixtureSPRT: Hashable, Sendable {
    public let alpha: Double
    public internal(set) var pValue = 1.0
    public internal(set) var estimate: Double?
    public internal(set) var interval: ClosedRange<Double>?

    public init(alpha: Double) { self.alpha = alpha }

    /// ln Λ = ½ ln(V/(V+τ²)) + τ²θ²/(2V(V+τ²)).
    public static func logLikelihoodRatio(estimate θ: Double, variance v: Double, mixingVariance t: Double) -> Double {
        0.5 * log(v / (v + t)) + t * θ * θ / (2 * v * (v + t))
    }

    /// θ ± sqrt(V(V+τ²)/τ² · (ln((V+τ²)/V) − 2 ln α)).
    public static func halfWidth(variance v: Double, mixingVariance t: Double, alpha: Double) -> Double {
        (v * (v + t) / t * (log((v + t) / v) - 2 * log(alpha))).squareRoot()
    }

    /// Adds a look; the interval is clipped to `possible`, the values θ can take at all (a difference of two
    /// rates lies within −1 and 1), so that no impossible bound is ever shown.
    public mutating func observe(
        estimate θ: Double, variance v: Double, mixingVariance t: Double, possible: ClosedRange<Double> = -1...1
    ) {
        guard v > 0, t > 0, v.isFinite, θ.isFinite else { return }
        let l = Self.logLikelihoodRatio(estimate: θ, variance: v, mixingVariance: t)
        pValue = min(pValue, exp(-l))
        estimate = θ
        let h = Self.halfWidth(variance: v, mixingVariance: t, alpha: alpha)
        interval = max(possible.lowerBound, θ - h)...min(possible.upperBound, θ + h)
    }
}

/// A Bernoulli CUSUM for one failure class against a baseline rate (FACTS §5).
///
/// S = max(0, S + x·ln(p1/p0) + (1−x)·ln((1−p1)/(1−p0))) per attempt; here a look adds its n attempts with x
/// failures at once, which is the same sum taken in one step.
public struct BernoulliCUSUM: Hashable, Sendable {
    public let baseline: Double
    public let shifted: Double
    public let threshold: Double
    public private(set) var statistic = 0.0

    public init(baseline p0: Double, shifted p1: Double, threshold h: Double) {
        precondition(p0 > 0 && p0 < 1 && p1 > p0 && p1 < 1 && h > 0)
        baseline = p0
        shifted = p1
        threshold = h
    }

    public var alarmed: Bool { statistic >= threshold }

    public mutating func observe(attempts n: Int64, failures x: Int64) {
        guard n > 0 else { return }
        let up = log(shifted / baseline)
        let down = log((1 - shifted) / (1 - baseline))
        statistic = max(0, statistic + Double(x) * up + Double(n - x) * down)
    }
}

/// Pearson's χ² test of observed group sizes against expected shares (sample ratio mismatch).
public struct SampleRatioTest: Hashable, Sendable {
    public var observed: [Int64]
    public var expectedShares: [Double]
    public var chiSquare: Double
    /// Upper tail of χ² with (groups − 1) degrees of freedom; only 2 groups are used here (one degree).
    public var pValue: Double

    public init(observed: [Int64], expectedShares: [Double]) {
        precondition(observed.count == 2 && expectedShares.count == 2, "two groups")
        self.observed = observed
        self.expectedShares = expectedShares
        let total = Double(observed.reduce(0, +))
        var chi = 0.0
        if total > 0 {
            for (o, share) in zip(observed, expectedShares) where share > 0 {
                let e = total * share
                chi += (Double(o) - e) * (Double(o) - e) / e
            }
        }
        chiSquare = chi
        pValue = erfc((chi / 2).squareRoot())
    }
}

/// Sample sizes and detectable effects for comparing two proportions (FACTS §5).
public enum DetectableEffect {
    /// n ≈ (z₁₋α + z₁₋β)²·(p0(1−p0) + p1(1−p1))/(p1−p0)² users per arm to detect p0 → p0·(1 + increase),
    /// one-sided at level α with the given power.
    public static func usersPerArm(baseline p0: Double, relativeIncrease: Double, alpha: Double, power: Double)
        -> Double
    {
        usersPerArm(baseline: p0, relativeIncrease: relativeIncrease, z: z(alpha: alpha, power: power))
    }

    /// z₁₋α + z₁₋β, computed once per search (each quantile is a bisection of its own).
    static func z(alpha: Double, power: Double) -> Double {
        StandardNormal.quantile(1 - alpha) + StandardNormal.quantile(power)
    }

    static func usersPerArm(baseline p0: Double, relativeIncrease: Double, z: Double) -> Double {
        let p1 = p0 * (1 + relativeIncrease)
        return z * z * (p0 * (1 - p0) + p1 * (1 - p1)) / ((p1 - p0) * (p1 - p0))
    }

    /// The smallest relative increase detectable with `usersPerArm` users in each arm, or nil when even a
    /// tenfold increase is not (or the baseline is 0 or 1).
    public static func smallestRelativeIncrease(
        usersPerArm n: Double, baseline p0: Double, alpha: Double, power: Double
    ) -> Double? {
        guard n > 0, p0 > 0, p0 < 1 else { return nil }
        let ceiling = min(9.0, (1 / p0 - 1) * 0.999)
        let z = z(alpha: alpha, power: power)
        guard usersPerArm(baseline: p0, relativeIncrease: ceiling, z: z) <= n else { return nil }
        var lo = 0.0
        var hi = ceiling
        for _ in 0..<80 {
            let mid = (lo + hi) / 2
            if usersPerArm(baseline: p0, relativeIncrease: mid, z: z) > n {
                lo = mid
            } else {
                hi = mid
            }
        }
        return hi
    }
}

/// The crash test once the control group is gone (at 100% nobody is left in control): the exposed group's fatal
/// crashes per session against the control group's rate as it was before it left, with that rate's uncertainty
/// carried in.
///
/// The control's x crashes in n sessions give p⁺, the one-sided upper confidence bound of its rate (Wilson, level
/// 1 − α/2). An SPRT at level α/2 then weighs each exposed session: Λ += y·ln r + (1 − y)·ln((1 − r·p⁺)/(1 − p⁺)).
/// When exposed users crash no more than control did (rate p ≤ control's true rate), and that rate is at most p⁺
/// (probability ≥ 1 − α/2), exp Λ is a nonnegative supermartingale (each step's mean is p·r + (1 − p)(1 − r·p⁺)/
/// (1 − p⁺) ≤ 1 for p ≤ p⁺), so by Ville's inequality Λ ever reaching ln(2/α) has probability ≤ α/2: a false
/// alarm at most α in all, however long the rollout stays at 100%. A real r× regression moves the exposed rate
/// well above p⁺ (the baseline's bound is a few percent above its estimate for a control of thousands of
/// sessions), so Λ climbs.
public struct BaselineCrashTest: Hashable, Sendable {
    public let harmRatio: Double
    /// The whole test's false-alarm level: α/2 for the baseline's bound, α/2 for the SPRT.
    public let alpha: Double
    /// The control group's fatal crashes and sessions the baseline was frozen from.
    public let baselineCrashes: Int64
    public let baselineSessions: Int64
    /// The upper bound of the control's rate: the rate tested as "no harm".
    public let baselineUpperRate: Double
    /// When the baseline froze (the end of the first look without control sessions).
    public let frozenAt: Instant
    public internal(set) var logLikelihoodRatio = 0.0
    /// Exposed sessions and fatal crashes weighed since the baseline froze (looks without control sessions only).
    public internal(set) var exposedSessions: Int64 = 0
    public internal(set) var exposedCrashes: Int64 = 0
    public internal(set) var harmDeclaredAt: Instant?

    /// A test against the control's `crashes` in `sessions`, or nil when that rate cannot be tested against
    /// (no sessions, or its upper bound times `harmRatio` is not a rate).
    public init?(harmRatio: Double, alpha: Double, crashes: Int64, sessions: Int64, at time: Instant) {
        guard sessions > 0, crashes >= 0, harmRatio > 1, alpha > 0, alpha < 1 else { return nil }
        let upper = Self.upperBound(crashes: min(crashes, sessions), sessions: sessions, level: 1 - alpha / 2)
        guard upper > 0, harmRatio * upper < 1 else { return nil }
        self.harmRatio = harmRatio
        self.alpha = alpha
        baselineCrashes = crashes
        baselineSessions = sessions
        baselineUpperRate = upper
        frozenAt = time
    }

    /// Restores a test as stored (a persisted fold).
    init(
        harmRatio: Double, alpha: Double, baselineCrashes: Int64, baselineSessions: Int64, baselineUpperRate: Double,
        frozenAt: Instant
    ) {
        self.harmRatio = harmRatio
        self.alpha = alpha
        self.baselineCrashes = baselineCrashes
        self.baselineSessions = baselineSessions
        self.baselineUpperRate = baselineUpperRate
        self.frozenAt = frozenAt
    }

    /// The control's estimated rate (x / n).
    public var baselineRate: Double { Double(baselineCrashes) / Double(baselineSessions) }
    /// ln(2/α): harm at or above.
    public var harmBound: Double { log(2 / alpha) }
    public var harmDeclared: Bool { harmDeclaredAt != nil }
    /// The exposed rate since the baseline froze (nil before any session).
    public var exposedRate: Double? { exposedSessions > 0 ? Double(exposedCrashes) / Double(exposedSessions) : nil }

    /// Adds one look's exposed sessions and fatal crashes.
    public mutating func observe(sessions n: Int64, crashes x: Int64, at time: Instant) {
        guard n > 0 else { return }
        let y = min(max(0, x), n)
        let p = baselineUpperRate
        logLikelihoodRatio += Double(y) * log(harmRatio) + Double(n - y) * log((1 - harmRatio * p) / (1 - p))
        exposedSessions += n
        exposedCrashes += y
        if harmDeclaredAt == nil, logLikelihoodRatio >= harmBound { harmDeclaredAt = time }
    }

    /// The one-sided Wilson upper bound of x / n at confidence `level`.
    static func upperBound(crashes x: Int64, sessions n: Int64, level: Double) -> Double {
        let z = StandardNormal.quantile(level)
        let nn = Double(n)
        let p = Double(x) / nn
        let centre = p + z * z / (2 * nn)
        let spread = z * (p * (1 - p) / nn + z * z / (4 * nn * nn)).squareRoot()
        return min(1, (centre + spread) / (1 + z * z / nn))
    }
}
