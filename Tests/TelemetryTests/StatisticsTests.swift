import Foundation
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry

@Suite("Statistics (FACTS §5)")
struct StatisticsTests {
    @Test("normal quantiles")
    func quantiles() {
        #expect(abs(StandardNormal.quantile(0.975) - 1.959963985) < 1e-8)
        #expect(abs(StandardNormal.quantile(0.95) - 1.644853627) < 1e-8)
        #expect(abs(StandardNormal.quantile(0.8) - 0.841621234) < 1e-8)
        #expect(abs(StandardNormal.quantile(0.001) + 3.090232306) < 1e-8)
    }

    @Test("minimum detectable effect: 0.2% crash rate, +25% needs about 111,000 users per arm")
    func detectableEffect() {
        let n = DetectableEffect.usersPerArm(baseline: 0.002, relativeIncrease: 0.25, alpha: 0.05, power: 0.8)
        #expect(abs(n - 111_000) < 500, "\(n)")
        let back = DetectableEffect.smallestRelativeIncrease(usersPerArm: n, baseline: 0.002, alpha: 0.05, power: 0.8)
        #expect(abs(back! - 0.25) < 1e-6)
        // Fewer users, larger effects only; far too few, none within tenfold.
        #expect(
            DetectableEffect.smallestRelativeIncrease(usersPerArm: n / 4, baseline: 0.002, alpha: 0.05, power: 0.8)!
                > 0.45)
        #expect(
            DetectableEffect.smallestRelativeIncrease(usersPerArm: 50, baseline: 0.002, alpha: 0.05, power: 0.8) == nil)
    }

    @Test("SPRT: each crash adds y·ln(π1/π0) + (1−y)·ln((1−π1)/(1−π0)); bounds from α and β")
    func sprt() {
        var t = CrashSPRT(harmRatio: 1.5, alpha: 0.05, beta: 0.1)
        #expect(abs(t.harmBound - log(0.9 / 0.05)) < 1e-12)
        #expect(abs(t.noHarmBound - log(0.1 / 0.95)) < 1e-12)
        #expect(abs(t.harmfulShare(0.5) - 0.6) < 1e-12)
        t.observe(exposedCrashes: 1, controlCrashes: 0, exposedShare: 0.5, at: Instant(seconds: 60))
        #expect(abs(t.logLikelihoodRatio - log(0.6 / 0.5)) < 1e-12)
        // With a quarter of the exposure exposed, π1 = 1.5·0.25/(1.5·0.25 + 0.75) = 1/3.
        t.observe(exposedCrashes: 2, controlCrashes: 3, exposedShare: 0.25, at: Instant(seconds: 120))
        let expected = log(0.6 / 0.5) + 2 * log((1.0 / 3) / 0.25) + 3 * log((2.0 / 3) / 0.75)
        #expect(abs(t.logLikelihoodRatio - expected) < 1e-12)
        #expect(!t.harmDeclared)
        // Crashes all on the exposed side cross the harm bound, and harm stays declared.
        t.observe(exposedCrashes: 20, controlCrashes: 0, exposedShare: 0.5, at: Instant(seconds: 180))
        #expect(t.harmDeclaredAt == Instant(seconds: 180))
        t.observe(exposedCrashes: 0, controlCrashes: 500, exposedShare: 0.5, at: Instant(seconds: 240))
        #expect(t.harmDeclared)
        #expect(t.logLikelihoodRatio < t.noHarmBound)
        #expect(!t.noHarmShown)
    }

    /// Issue 35, item 11: once the control group is gone, exposed crashes are weighed against the control's rate
    /// before it left, at its upper bound; the comparison freezes that baseline at the first look without control
    /// sessions, and the stored fold keeps it.
    @Test("baseline test: upper bound, the SPRT step, and the comparison's switch to it when control sessions stop")
    func baselineTest() throws {
        // 40 crashes in 10,000 sessions: Wilson's 97.5% one-sided upper bound of 0.4%.
        var b = try #require(BaselineCrashTest(harmRatio: 1.5, alpha: 0.05, crashes: 40, sessions: 10_000, at: Instant(seconds: 0)))
        let z = 1.959963985
        let n = 10_000.0
        let p = 0.004
        let wilson = (p + z * z / (2 * n) + z * (p * (1 - p) / n + z * z / (4 * n * n)).squareRoot()) / (1 + z * z / n)
        #expect(abs(b.baselineUpperRate - wilson) < 1e-9)
        #expect(abs(b.harmBound - log(40)) < 1e-12)
        b.observe(sessions: 1_000, crashes: 3, at: Instant(seconds: 60))
        let step = 3 * log(1.5) + 997 * log((1 - 1.5 * wilson) / (1 - wilson))
        #expect(abs(b.logLikelihoodRatio - step) < 1e-9)
        #expect(!b.harmDeclared)
        b.observe(sessions: 10_000, crashes: 90, at: Instant(seconds: 120))
        #expect(b.harmDeclaredAt == Instant(seconds: 120))
        // A rate that 1.5× its bound would make no rate: no test.
        #expect(BaselineCrashTest(harmRatio: 1.5, alpha: 0.05, crashes: 9, sessions: 10, at: Instant(seconds: 0)) == nil)

        var c = CrashComparison()
        c.observe(CrashLook(exposedSessions: 5_000, controlSessions: 5_000, exposedCrashes: 20, controlCrashes: 20), at: Instant(seconds: 60))
        let sprt = c.sprt
        // The last control sessions: the look's own share, as before.
        c.observe(CrashLook(exposedSessions: 9_990, controlSessions: 10, exposedCrashes: 40, controlCrashes: 0), at: Instant(seconds: 120))
        #expect(c.sprt.logLikelihoodRatio != sprt.logLikelihoodRatio)
        #expect(c.baseline == nil)
        // Control gone: the SPRT stands still (it used to borrow the cumulative share and count each crash as harm).
        let before = c.sprt
        c.observe(CrashLook(exposedSessions: 10_000, exposedCrashes: 40), at: Instant(seconds: 180))
        #expect(c.sprt == before)
        let baseline = try #require(c.baseline)
        #expect(baseline.baselineCrashes == 20 && baseline.baselineSessions == 5_010)
        #expect(baseline.exposedSessions == 10_000 && baseline.exposedCrashes == 40)
        #expect(baseline.frozenAt == Instant(seconds: 180))

        // The stored fold carries the baseline test.
        var watch = RolloutWatch(configuration: WatchConfiguration(since: Instant(seconds: 0)))
        watch.crash = c
        let bytes = RolloutFold(watch: watch, cursorMinute: 3, lastBatch: 1).encoded()
        let back = try RolloutFold(decoding: bytes)
        #expect(back.watch.crash == c)
        #expect(back.encoded() == bytes)
    }

    /// Issue 35, item 11 (seen in tmux: `◆ WATCH exposed crash rate per user is higher (always-valid p = 0.013)` two
    /// simulated hours into a healthy 100%): with the control gone, the exposed arm's users keep entering and
    /// crashing while the control's totals stand still, so crashed-user shares drift apart without any harm.
    @Test("at 100% the per-user and per-session differences stand where both arms were last seen together")
    func differencesStandStillWithoutControl() {
        var c = CrashComparison()
        // Both arms alike: 2% of users crash in each look.
        for minute in 1...30 {
            c.observe(
                CrashLook(
                    exposedSessions: 2_000, controlSessions: 2_000, exposedCrashes: 40, controlCrashes: 40, exposedUsers: 500,
                    controlUsers: 500, exposedCrashedUsers: 10, controlCrashedUsers: 10), at: Instant(seconds: Int64(60 * minute)))
        }
        let sessions = c.sessionDifference
        let users = c.userDifference
        // 100%: the same healthy fleet, all exposed. Old users keep having first crashes, new users still enter.
        for minute in 31...150 {
            c.observe(
                CrashLook(exposedSessions: 4_000, exposedCrashes: 80, exposedUsers: 200, exposedCrashedUsers: 30),
                at: Instant(seconds: Int64(60 * minute)))
        }
        #expect(c.sessionDifference == sessions)
        #expect(c.userDifference == users)
        #expect(c.userDifference.pValue > 0.05)
        // The cumulative shares did drift apart: left in, they would have been read as harm.
        let t = c.totals
        #expect(Double(t.exposedCrashedUsers) / Double(t.exposedUsers) > 2 * Double(t.controlCrashedUsers) / Double(t.controlUsers))
        // A look with both arms again compares everything.
        c.observe(
            CrashLook(exposedSessions: 2_000, controlSessions: 2_000, exposedCrashes: 40, controlCrashes: 40), at: Instant(seconds: 9_060))
        #expect(c.userDifference != users)
    }

    /// The explorer's kill and resume at 60%: the kill's last exposed stragglers made a look without control
    /// sessions, the baseline froze, and the verdict said "control group gone since" hours after the control group
    /// was back at 30%. Where the control group is comes from the looks: gone from the first look with exposed
    /// sessions and none in control, back with its next session. The baseline test stays one test: it weighs the
    /// looks without control sessions only, keeps its Λ while the control is back, and goes on from it if it leaves
    /// again (starting it again at each return would give every straggler at 100% a fresh chance of a false alarm,
    /// and throw away the evidence gathered so far).
    @Test("the control group gone, back and gone again: when it left is tracked, and the baseline test is one test")
    func controlGoneAndBack() throws {
        var c = CrashComparison()
        let both = CrashLook(exposedSessions: 5_000, controlSessions: 5_000, exposedCrashes: 20, controlCrashes: 20)
        c.observe(both, at: Instant(seconds: 60))
        c.observe(both, at: Instant(seconds: 120))
        #expect(c.controlGoneSince == nil)
        // A kill's last exposed stragglers.
        c.observe(CrashLook(exposedSessions: 5), at: Instant(seconds: 180))
        #expect(c.controlGoneSince == Instant(seconds: 180))
        let frozen = try #require(c.baseline)
        #expect(frozen.frozenAt == Instant(seconds: 180) && frozen.exposedSessions == 5)
        // Killed: no sessions in either arm say nothing about the control group.
        c.observe(CrashLook(), at: Instant(seconds: 240))
        #expect(c.controlGoneSince == Instant(seconds: 180))
        // Resumed: the control group is back with its first session, and the live comparison goes on.
        c.observe(CrashLook(exposedSessions: 100, controlSessions: 1), at: Instant(seconds: 300))
        #expect(c.controlGoneSince == nil)
        #expect(c.exposedShare == 100.0 / 101.0)
        c.observe(both, at: Instant(seconds: 360))
        #expect(c.controlGoneSince == nil)
        #expect(c.baseline == frozen)
        // Control sessions alone (another kill's stragglers the other way round) keep it present.
        c.observe(CrashLook(controlSessions: 3), at: Instant(seconds: 420))
        #expect(c.controlGoneSince == nil)
        // At 100%: gone again since this look, and the same baseline test weighs it, its Λ carried on.
        c.observe(CrashLook(exposedSessions: 10_000, exposedCrashes: 40), at: Instant(seconds: 480))
        #expect(c.controlGoneSince == Instant(seconds: 480))
        let again = try #require(c.baseline)
        #expect(again.frozenAt == Instant(seconds: 180) && again.baselineCrashes == frozen.baselineCrashes)
        #expect(again.exposedSessions == 10_005 && again.exposedCrashes == 40)
        #expect(again.logLikelihoodRatio < frozen.logLikelihoodRatio)
        c.observe(CrashLook(exposedSessions: 10_000, exposedCrashes: 40), at: Instant(seconds: 540))
        #expect(c.controlGoneSince == Instant(seconds: 480))

        // The stored fold carries where the control group is.
        var watch = RolloutWatch(configuration: WatchConfiguration(since: Instant(seconds: 0)))
        watch.crash = c
        let bytes = RolloutFold(watch: watch, cursorMinute: 10, lastBatch: 1).encoded()
        let back = try RolloutFold(decoding: bytes)
        #expect(back.watch.crash == c)
        #expect(back.watch.crash.controlGoneSince == Instant(seconds: 480))
    }

    /// A harm the baseline test declared while the control group was gone stays declared when it comes back.
    @Test("harm declared against the control's old rate stays declared once control sessions are back")
    func baselineHarmStaysDeclared() throws {
        var c = CrashComparison()
        let both = CrashLook(exposedSessions: 10_000, controlSessions: 10_000, exposedCrashes: 40, controlCrashes: 40)
        c.observe(both, at: Instant(seconds: 60))
        c.observe(CrashLook(exposedSessions: 10_000, exposedCrashes: 120), at: Instant(seconds: 120))
        let declared = try #require(c.baseline?.harmDeclaredAt)
        #expect(c.harmDeclared)
        for minute in 3...30 { c.observe(both, at: Instant(seconds: Int64(60 * minute))) }
        #expect(c.controlGoneSince == nil)
        #expect(c.harmDeclared)
        #expect(c.baseline?.harmDeclaredAt == declared)
    }

    @Test("mSPRT: Λ, the always-valid p-value (a running minimum) and the confidence sequence as written")
    func mixture() {
        let (theta, v, tau2) = (0.001, 1e-7, 1e-6)
        let lambda = (v / (v + tau2)).squareRoot() * exp(tau2 * theta * theta / (2 * v * (v + tau2)))
        #expect(
            abs(exp(MixtureSPRT.logLikelihoodRatio(estimate: theta, variance: v, mixingVariance: tau2)) - lambda) < 1e-9
                * lambda)
        var m = MixtureSPRT(alpha: 0.05)
        m.observe(estimate: theta, variance: v, mixingVariance: tau2)
        #expect(abs(m.pValue - min(1, 1 / lambda)) < 1e-12)
        let h = (v * (v + tau2) / tau2 * (log((v + tau2) / v) - 2 * log(0.05))).squareRoot()
        #expect(abs(m.interval!.lowerBound - (theta - h)) < 1e-15)
        #expect(abs(m.interval!.upperBound - (theta + h)) < 1e-15)
        let before = m.pValue
        m.observe(estimate: 0, variance: v, mixingVariance: tau2)
        #expect(m.pValue == before)
        #expect(m.interval!.contains(0))
    }

    @Test("CUSUM: stays at zero on the baseline, alarms on a sustained shift, never negative")
    func cusum() {
        var c = BernoulliCUSUM(baseline: 0.05, shifted: 0.10, threshold: 5)
        for _ in 0..<100 { c.observe(attempts: 1000, failures: 40) }
        #expect(c.statistic == 0)
        #expect(!c.alarmed)
        c.observe(attempts: 1000, failures: 100)
        let up = 100 * log(2.0) + 900 * log(0.9 / 0.95)
        #expect(abs(c.statistic - up) < 1e-9)
        #expect(c.alarmed)
    }

    @Test("sample ratio mismatch: χ² of observed vs expected cohort sizes")
    func sampleRatio() {
        let t = SampleRatioTest(observed: [5_210, 4_790], expectedShares: [0.5, 0.5])
        #expect(abs(t.chiSquare - 17.64) < 1e-9)
        #expect(t.pValue < 1e-4 && t.pValue > 1e-5)
        #expect(SampleRatioTest(observed: [5_010, 4_990], expectedShares: [0.5, 0.5]).pValue > 0.8)
        #expect(SampleRatioTest(observed: [6_000, 4_000], expectedShares: [0.6, 0.4]).chiSquare == 0)
    }

    @Test("a naive z-test re-checked at every look raises false alarms far above 5% (what the sequential tests avoid)")
    func naiveLooksInflate() {
        var rng = Xoshiro256(seed: 7)
        var naive = 0
        let runs = 400
        for _ in 0..<runs {
            var e = CrashLook()
            var alarmed = false
            for _ in 0..<200 {
                let es = rng.poisson(420)
                let cs = rng.poisson(420)
                e += CrashLook(
                    exposedSessions: es, controlSessions: cs, exposedCrashes: rng.poisson(Double(es) * 0.002),
                    controlCrashes: rng.poisson(Double(cs) * 0.002))
                let p1 = Double(e.exposedCrashes) / Double(e.exposedSessions)
                let p0 = Double(e.controlCrashes) / Double(e.controlSessions)
                let p = Double(e.exposedCrashes + e.controlCrashes) / Double(e.exposedSessions + e.controlSessions)
                let se = (p * (1 - p) * (1 / Double(e.exposedSessions) + 1 / Double(e.controlSessions))).squareRoot()
                if se > 0, (p1 - p0) / se > 1.645 { alarmed = true }
            }
            if alarmed { naive += 1 }
        }
        #expect(Double(naive) / Double(runs) > 0.15, "naive false alarms: \(naive) of \(runs)")
    }
}
