import Foundation
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry

/// xoshiro256** seeded through splitmix64: a small, fast, reproducible generator for simulations.
struct Xoshiro256: RandomNumberGenerator {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    init(seed: UInt64) {
        var x = seed
        func next() -> UInt64 {
            x &+= 0x9E37_79B9_7F4A_7C15
            var z = x
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        s = (next(), next(), next(), next())
    }

    mutating func next() -> UInt64 {
        let result = rotl(s.1 &* 5, 7) &* 9
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = rotl(s.3, 45)
        return result
    }

    private func rotl(_ x: UInt64, _ k: UInt64) -> UInt64 { (x << k) | (x >> (64 - k)) }
}

/// A simulated rollout watched minute by minute (pure arithmetic, no store).
///
/// An app with about 6 million sessions a day (≈ 4,200 a minute) and a fatal crash rate of 0.2% per session.
/// The exposed band is [0, N], control the equal band above 50 (or (N, 100] above 50). After a change devices
/// pick up the new configuration gradually (exponential, 10-minute mean), so the split of sessions, π0, moves.
struct SimulatedRollout {
    var looks = 200
    var sessionsPerMinute = 4_200.0
    var crashRate = 0.002
    var rateRatio = 1.0
    /// (look, percent) steps; the first entry is the starting percentage.
    var schedule: [(Int, Double)] = [(0, 10)]
    var propagationMinutes = 10.0
    /// New users entering an arm per minute, as a share of the arm's sessions (early in a rollout most sessions
    /// come from users not seen in the arm yet); each fatal crash is a distinct user's.
    var newUsersPerSession = 0.25
    /// The look from which exposed users crash `rateRatio` times as often (0: from the start).
    var harmFrom = 0

    static func bands(_ n: Double) -> (exposed: Double, control: Double) {
        (n / 100, (n <= 50 ? n : 100 - n) / 100)
    }

    /// Runs once through the real path (counter looks → `RolloutWatch` → snapshot → verdict) and tells
    /// whether the verdict is HALT. HALT is sticky (the SPRT never withdraws a declared harm), so the verdict
    /// after the last look says whether it fired at any of the looks.
    func run(_ rng: inout Xoshiro256, configuration: CrashMonitorConfiguration = CrashMonitorConfiguration()) -> Bool {
        verdicts(&rng, configuration: configuration).last!.level == .halt
    }

    /// The verdict after every look, through the one assessment (`TelemetrySnapshot.assess`) with default rules.
    func verdicts(
        _ rng: inout Xoshiro256, configuration: CrashMonitorConfiguration = CrashMonitorConfiguration(),
        every: Int = Int.max
    ) -> [Verdict] {
        var out: [Verdict] = []
        let start = Instant(seconds: 1_780_000_020)
        var watch = RolloutWatch(configuration: WatchConfiguration(since: start, crash: configuration))
        let firstMinute = BucketLevel.minute.bucket(start.microseconds)
        var previous = Self.bands(schedule[0].1)
        var current = previous
        var changedAt = 0
        var step = 1
        for look in 0..<looks {
            if step < schedule.count, schedule[step].0 == look {
                // Whatever share had propagated becomes the starting point of the next change.
                let w = 1 - exp(-Double(look - changedAt) / propagationMinutes)
                previous = (
                    previous.exposed + (current.exposed - previous.exposed) * w,
                    previous.control + (current.control - previous.control) * w
                )
                current = Self.bands(schedule[step].1)
                changedAt = look
                step += 1
            }
            let w = step == 1 ? 1 : 1 - exp(-Double(look - changedAt) / propagationMinutes)
            let exposed = previous.exposed + (current.exposed - previous.exposed) * w
            let control = previous.control + (current.control - previous.control) * w
            let es = rng.poisson(sessionsPerMinute * exposed)
            let cs = rng.poisson(sessionsPerMinute * control)
            let ec = rng.poisson(Double(es) * crashRate * (look >= harmFrom ? rateRatio : 1))
            let cc = rng.poisson(Double(cs) * crashRate)
            let eu = rng.poisson(Double(es) * newUsersPerSession)
            let cu = rng.poisson(Double(cs) * newUsersPerSession)
            watch.fold(
                CounterLook(
                    level: .minute, bucket: firstMinute + Int64(look),
                    counts: [
                        CounterKey(.session, .enabled): es, CounterKey(.session, .control): cs,
                        CounterKey(.crash, .enabled, detail: 1): ec, CounterKey(.crash, .control, detail: 1): cc,
                        CounterKey(.usersEntered, .enabled): eu, CounterKey(.usersEntered, .control): cu,
                        CounterKey(.usersCrashed, .enabled): min(ec, eu), CounterKey(.usersCrashed, .control): min(cc, cu),
                    ]))
            if look == looks - 1 || (look + 1) % every == 0 {
                let end = start + .minutes(Int64(look + 1))
                let snapshot = watch.snapshot(
                    now: end, pending: [], presence: [], sessionsLastDay: 0, newestEvent: end, lastBatchAt: end)
                let percent = schedule.last { $0.0 <= look }!.1
                out.append(snapshot.assess(RolloutContext(currentMicroPercent: Int64(percent * 1_000_000))).verdict)
            }
        }
        return out
    }

    static let threeChanges: [(Int, Double)] = [(0, 5), (50, 10), (100, 20), (150, 60)]
    /// The same ramp on to 100% at look 200, where the control group is gone, and 200 more looks there.
    static let toFull: [(Int, Double)] = [(0, 5), (50, 10), (100, 20), (150, 60), (200, 100)]
}

@Suite("Calibration by simulation")
struct CalibrationTests {
    static let runs = 1_000

    func haltRate(_ rollout: SimulatedRollout, seed: UInt64) -> Double {
        var rng = Xoshiro256(seed: seed)
        var halts = 0
        for _ in 0..<Self.runs where rollout.run(&rng) { halts += 1 }
        return Double(halts) / Double(Self.runs)
    }

    @Test("no true difference: HALT in at most 5% of 1,000 runs of 200 looks")
    func nullSteady() {
        let rate = haltRate(SimulatedRollout(), seed: 1)
        print("null, steady 10%: HALT in \(String(format: "%.1f", rate * 100))% of runs")
        #expect(rate <= 0.05)
    }

    @Test("no true difference with three percentage changes: HALT in at most 5%")
    func nullWithChanges() {
        let rate = haltRate(SimulatedRollout(schedule: SimulatedRollout.threeChanges), seed: 2)
        print("null, 5 → 10 → 20 → 60%: HALT in \(String(format: "%.1f", rate * 100))% of runs")
        #expect(rate <= 0.05)
    }

    @Test("a true +50% crash rate: HALT in at least 80% of runs")
    func harmSteady() {
        let rate = haltRate(SimulatedRollout(rateRatio: 1.5), seed: 3)
        print("+50%, steady 10%: HALT in \(String(format: "%.1f", rate * 100))% of runs")
        #expect(rate >= 0.80)
    }

    /// "Not enough data yet" is a HOLD that refuses increases: how often does a rollout without any harm sit in it?
    /// At this volume (≈ 420 exposed sessions a minute at 10%, a quarter of them from new users) +50% needs about
    /// 10,000 users per arm, reached after roughly 100 minutes.
    @Test("no true difference at realistic volume: how often the verdict is HOLD 'not enough data yet'")
    func notEnoughDataRate() {
        var rng = Xoshiro256(seed: 5)
        let runs = 200
        var final = 0
        var byLook = [Int](repeating: 0, count: 20)
        for _ in 0..<runs {
            let verdicts = SimulatedRollout().verdicts(&rng, every: 10)
            for (i, v) in verdicts.enumerated() where v.level == .hold && v.reason.hasPrefix("not enough data yet") {
                byLook[i] += 1
            }
            if let v = verdicts.last, v.level == .hold, v.reason.hasPrefix("not enough data yet") { final += 1 }
        }
        let curve = byLook.enumerated().map { "\(($0.offset + 1) * 10) min \(String(format: "%.0f", Double($0.element) / Double(runs) * 100))%" }
        print("null, steady 10%: HOLD 'not enough data yet' by look: " + curve.joined(separator: ", "))
        print("null, steady 10%: HOLD 'not enough data yet' after 200 looks in \(String(format: "%.1f", Double(final) / Double(runs) * 100))% of runs")
        // Early on the sample cannot show +50%: HOLD, by design; after 200 minutes it can.
        #expect(byLook[0] == runs)
        #expect(Double(final) / Double(runs) <= 0.05)

        // The same with three mid-run changes (5 → 10 → 20 → 60%): starting at 5%, the arms fill more slowly.
        var changed = [Int](repeating: 0, count: 20)
        for _ in 0..<runs {
            for (i, v) in SimulatedRollout(schedule: SimulatedRollout.threeChanges).verdicts(&rng, every: 10).enumerated()
            where v.level == .hold && v.reason.hasPrefix("not enough data yet") {
                changed[i] += 1
            }
        }
        let curve2 = changed.enumerated().map { "\(($0.offset + 1) * 10) min \(String(format: "%.0f", Double($0.element) / Double(runs) * 100))%" }
        print("null, 5 → 10 → 20 → 60%: HOLD 'not enough data yet' by look: " + curve2.joined(separator: ", "))
        #expect(changed[0] == runs)
        #expect(Double(changed[19]) / Double(runs) <= 0.05)
    }

    /// Issue 35, item 11: at 100% the control group is gone. The SPRT used to weigh every crash of a look without
    /// control sessions at an earlier look's exposed share, so each one counted as harm and a healthy rollout left
    /// at 100% reached HALT (in nearly every run). Now those looks go to the baseline test.
    @Test("no true difference, ramp on to 100% and 200 minutes there: HALT in at most 5% of 1,000 runs")
    func nullAtFull() {
        let rate = haltRate(SimulatedRollout(looks: 400, schedule: SimulatedRollout.toFull), seed: 6)
        print("null, 5 → 10 → 20 → 60 → 100%: HALT in \(String(format: "%.1f", rate * 100))% of runs")
        #expect(rate <= 0.05)
    }

    /// #37's enforcement needs an OK verdict at 100%: the healthy ramp ends OK (the baseline test says why).
    @Test("no true difference at 100%: the verdict after 200 minutes there is OK in at least 90% of 200 runs")
    func okAtFull() {
        var rng = Xoshiro256(seed: 7)
        let runs = 200
        var ok = 0
        var others: [String: Int] = [:]
        for _ in 0..<runs {
            let v = SimulatedRollout(looks: 400, schedule: SimulatedRollout.toFull).verdicts(&rng).last!
            if v.level == .ok && v.reason.hasPrefix("control group gone since") {
                ok += 1
            } else {
                others[v.level.description + " " + String(v.reason.prefix(40)), default: 0] += 1
            }
        }
        print("null at 100%: OK (against the control's rate before it left) in \(ok) of \(runs) runs; others \(others)")
        #expect(Double(ok) / Double(runs) >= 0.9)
    }

    /// A regression that arrives with the step to 100% (exposed users crash 1.5× as often from minute 200 on): the
    /// SPRT sees it while the control group drains away, the baseline test after it has gone.
    @Test("a +50% crash rate from the step to 100% on: HALT in at least 80% of 1,000 runs")
    func harmAtFull() {
        var rng = Xoshiro256(seed: 8)
        var halts = 0
        var byBaseline = 0
        for _ in 0..<Self.runs {
            let v = SimulatedRollout(looks: 400, rateRatio: 1.5, schedule: SimulatedRollout.toFull, harmFrom: 200)
                .verdicts(&rng).last!
            guard v.level == .halt else { continue }
            halts += 1
            if v.reason.hasPrefix("exposed users crash more than the control group did before it left") { byBaseline += 1 }
        }
        let rate = Double(halts) / Double(Self.runs)
        print(
            "+50% from the step to 100% on: HALT in \(String(format: "%.1f", rate * 100))% of runs "
                + "(\(byBaseline) by the baseline test after the control left)")
        #expect(rate >= 0.80)
    }

    @Test("a true +50% crash rate with three percentage changes: HALT in at least 80%")
    func harmWithChanges() {
        let rate = haltRate(SimulatedRollout(rateRatio: 1.5, schedule: SimulatedRollout.threeChanges), seed: 4)
        print("+50%, 5 → 10 → 20 → 60%: HALT in \(String(format: "%.1f", rate * 100))% of runs")
        #expect(rate >= 0.80)
    }
}
