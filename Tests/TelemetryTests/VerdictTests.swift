import Foundation
import Rollout
import SQLiteStore
import TelemetryFixtures
import Testing
import Timekeeping

@testable import Telemetry

/// Builds snapshots from hand-made minute looks through the same code the store uses.
struct WatchFixture {
    var watch: RolloutWatch
    let start = Instant(seconds: 1_780_000_020)

    init(_ configure: (inout WatchConfiguration) -> Void = { _ in }) {
        var c = WatchConfiguration(since: Instant(seconds: 1_780_000_020))
        configure(&c)
        watch = RolloutWatch(configuration: c)
    }

    /// `minutes` looks of steady traffic: sessions, fatal crashes, App Attest attempts and failures per minute.
    mutating func run(
        minutes: Int, from first: Int = 0, sessions: Int64 = 1000, exposedCrashes: Int64 = 2, controlCrashes: Int64 = 2,
        attempts: Int64 = 500, failures: [ErrorClassBucket: Int64] = [:],
        controlFailures: [ErrorClassBucket: Int64] = [:],
        users: Int64 = 100, activeControl: Int64 = 0
    ) {
        let m0 = BucketLevel.minute.bucket(start.microseconds)
        for m in first..<(first + minutes) {
            var counts: [CounterKey: Int64] = [:]
            for (cohort, crashes, fails) in [
                (Cohort.enabled, exposedCrashes, failures), (.control, controlCrashes, controlFailures),
            ] {
                counts[CounterKey(.session, cohort)] = sessions
                counts[CounterKey(.crash, cohort, detail: 1)] = crashes
                counts[CounterKey(.usersEntered, cohort)] = users
                counts[CounterKey(.usersCrashed, cohort)] = crashes / 2
                let failed = fails.values.reduce(0, +)
                let provider: AttestationProvider = cohort == .enabled ? .appAttest : .deviceCheck
                counts[CounterKey(.attestationSuccess, cohort, provider: provider)] = attempts - failed
                for (c, n) in fails {
                    counts[CounterKey(.attestationFailure, cohort, provider: provider, detail: UInt16(c.rawValue))] = n
                }
            }
            watch.fold(CounterLook(level: .minute, bucket: m0 + Int64(m), counts: counts))
        }
    }

    func snapshot(
        at minute: Int, active: [Cohort: Int64] = [.enabled: 5000, .control: 5000, .none: 90_000], newest: Int? = nil
    ) -> TelemetrySnapshot {
        let now = start + .minutes(Int64(minute))
        let hour = BucketLevel.hour.bucket(now.microseconds)
        let presence = active.map { PresenceRow(hour: hour, key: .active($0.key, eligible: true), delta: $0.value) }
        let newestEvent = watch.settledThrough.map { _ in start + .minutes(Int64(newest ?? minute)) - .seconds(Int64(5))
        }
        return watch.snapshot(
            now: now, pending: [], presence: presence, sessionsLastDay: 300_000, newestEvent: newestEvent,
            lastBatchAt: newestEvent)
    }
}

let tenPercent = RolloutContext(currentMicroPercent: 10_000_000)

@Suite("Verdict")
struct VerdictTests {
    @Test("no telemetry is HOLD, never OK, and guardrails are not armed until telemetry arrives")
    func missing() throws {
        let empty = WatchFixture().snapshot(at: 0)
        let a = empty.assess(tenPercent)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason == "no telemetry received yet; guardrails cannot judge the rollout")
        #expect(!a.armed)
        var enabled = tenPercent
        enabled.guardrailsEnabled = true
        #expect(empty.assess(enabled).armed)
        // The same through the store: an empty store.
        let tables = try temporaryTables()
        let fromStore = try tables.snapshot(WatchConfiguration(since: t0), now: t0).assess(tenPercent)
        #expect(fromStore.verdict.level == .hold)
    }

    @Test("stale telemetry is HOLD with its age in words")
    func stale() {
        var f = WatchFixture()
        f.run(minutes: 30)
        let a = f.snapshot(at: 60, newest: 30).assess(tenPercent)
        #expect(a.armed)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason.hasPrefix("telemetry is stale: newest event 30 min old (limit 10 min)"))
    }

    @Test("healthy traffic is OK, with crash-free rates and the detectable effect in the reason")
    func healthy() {
        var f = WatchFixture()
        // 9,000 users per arm, 1% of control crashed: +50% is detectable (8,453 per arm needed).
        f.run(minutes: 90)
        let a = f.snapshot(at: 93).assess(tenPercent)
        #expect(a.verdict.level == .ok, "\(a.verdict)")
        #expect(a.verdict.reason.contains("crash-free sessions 99.800% exposed vs 99.800% control"))
        #expect(a.verdict.reason.contains("smallest detectable increase +"))
        #expect(a.exposure.sampleRatio!.pValue == 1)
    }

    @Test("a silent telemetry source turns healthy traffic into HOLD, its silence the reason")
    func silentSource() {
        var f = WatchFixture()
        f.run(minutes: 90)
        var context = tenPercent
        context.sourceSilences = ["source bq silent since 2026-05-28T20:00:00Z", "source rt has not answered yet"]
        let a = f.snapshot(at: 93).assess(context)
        #expect(a.verdict.level == .hold, "\(a.verdict)")
        #expect(a.verdict.reason == "source bq silent since 2026-05-28T20:00:00Z; source rt has not answered yet")
        #expect(a.verdict.findings.first?.topic == .data && a.verdict.findings.first?.evidence != nil)
        // Without the silences the same figures are OK.
        #expect(f.snapshot(at: 93).assess(tenPercent).verdict.level == .ok)
    }

    @Test("too small a sample is HOLD 'not enough data yet', with users per arm, the detectable effect and what is missing")
    func notEnoughData() {
        var f = WatchFixture()
        f.run(minutes: 30)
        let a = f.snapshot(at: 33).assess(tenPercent)
        #expect(a.verdict.level == .hold)
        #expect(
            a.verdict.reason
                == "not enough data yet: 3,000 exposed vs 3,000 control users; smallest detectable crash-rate increase +90% "
                + "(needed: +50% or less); about 5,453 more users per arm needed (8,453 per arm), about 109 min at the last hour's 3,000 users/h")
        // A larger configured effect is detectable sooner: +100% is within reach of 3,000 users per arm.
        var relaxed = tenPercent
        relaxed.detectableEffect = 1.0
        #expect(f.snapshot(at: 33).assess(relaxed).verdict.level == .ok)
        // At 0% nobody is exposed: nothing to detect, so no HOLD for it.
        #expect(f.snapshot(at: 33).assess(RolloutContext(currentMicroPercent: 0)).verdict.findings.allSatisfy { !$0.text.hasPrefix("not enough data") })
    }

    @Test("intervals are clipped to what is possible: a difference of rates lies within −100 and +100 points")
    func clippedIntervals() {
        var f = WatchFixture()
        // Three users per arm, one crashed on each side: the raw interval runs far beyond ±1.
        f.run(minutes: 1, sessions: 3, exposedCrashes: 2, controlCrashes: 2, users: 3)
        let i = f.snapshot(at: 3).crash.userDifference
        let interval = try! #require(i.interval)
        #expect(interval.lowerBound >= -1 && interval.upperBound <= 1)
        #expect(interval.lowerBound == -1 || interval.upperBound == 1)
        let raw = MixtureSPRT.halfWidth(variance: 2 * (1.0 / 3) * (2.0 / 3) / 3, mixingVariance: 0.25 * (1.0 / 3) * (1.0 / 3), alpha: 0.05)
        #expect(raw > 1)
    }

    @Test("a failure ratio above the ceiling is HOLD even when the baseline learned it")
    func failureCeiling() {
        var f = WatchFixture { $0.failures.configuredBaseline = [.invalidKey: 0.3] }
        f.run(minutes: 90, failures: [.invalidKey: 150])
        let a = f.snapshot(at: 90).assess(tenPercent)
        #expect(!f.snapshot(at: 90).failureMonitors.first { $0.errorClass == .invalidKey }!.alarmed)
        #expect(a.verdict.level == .hold)
        #expect(
            a.verdict.findings.contains {
                $0.text.hasPrefix("failure ratio 30.0% of exposed App Attest attempts (2,250 of 7,500 in the last 15 min) is above the ceiling 20%")
            }, "\(a.verdict.findings)")
    }

    @Test("an observed attestation rate near Apple's guidance is HOLD")
    func attestationRate() {
        var f = WatchFixture()
        f.run(minutes: 90, users: 100)
        var tight = tenPercent
        tight.budget.perSecond = 2  // 100 new exposed installations a minute = 1.7/s ≥ 80% of 2/s
        let a = f.snapshot(at: 90).assess(tight)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason.hasPrefix("attestation rate near Apple's guidance: 1.7/s observed (500 new exposed installations in the last 5 min"))
        #expect(f.snapshot(at: 90).assess(tenPercent).verdict.level == .ok)
    }

    @Test("data age is never negative: an event stamped after now is 0 s old")
    func dataAgeNonNegative() {
        var f = WatchFixture()
        f.run(minutes: 5)
        let s = f.snapshot(at: 3, newest: 5)
        #expect(s.newestEvent! > s.now)
        #expect(s.dataAge == .seconds(Int64(0)))
    }

    @Test("a simulation that ended or went silent is HOLD, said in words")
    func simulationGone() {
        var f = WatchFixture()
        f.run(minutes: 90)
        var ended = tenPercent
        ended.timeSource = .finishedSimulation(endedAt: f.start)
        let a = f.snapshot(at: 93).assess(ended)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason.hasPrefix("the simulation writing this store ended at"))
        var lost = tenPercent
        lost.timeSource = .lostSimulation(lastHeartbeat: f.start)
        #expect(f.snapshot(at: 93).assess(lost).verdict.reason.hasPrefix("the simulation writing this store stopped answering"))
    }

    @Test("exposed users crashing more is HALT, stated with the SPRT and the rates")
    func harm() {
        var f = WatchFixture()
        f.run(minutes: 60, exposedCrashes: 4, controlCrashes: 2)
        let a = f.snapshot(at: 63).assess(tenPercent)
        #expect(a.verdict.level == .halt)
        #expect(a.verdict.reason.hasPrefix("exposed users crash more than control: SPRT Λ ="))
        #expect(a.verdict.reason.contains("fatal crashes per 1,000 sessions: exposed 4.00 vs control 2.00"))
    }

    /// One minute look of sessions and fatal crashes per arm (nothing else).
    static func crashLook(
        _ f: inout WatchFixture, minute: Int, exposed: Int64, control: Int64, exposedCrashes: Int64 = 0,
        controlCrashes: Int64 = 0
    ) {
        let m0 = BucketLevel.minute.bucket(f.start.microseconds)
        f.watch.fold(
            CounterLook(
                level: .minute, bucket: m0 + Int64(minute),
                counts: [
                    CounterKey(.session, .enabled): exposed, CounterKey(.session, .control): control,
                    CounterKey(.crash, .enabled, detail: 1): exposedCrashes,
                    CounterKey(.crash, .control, detail: 1): controlCrashes,
                ]))
    }

    static func percent(_ n: Int64) -> RolloutContext { RolloutContext(currentMicroPercent: n * 1_000_000) }

    /// The explorer's drill (`set 60`, `kill`, `resume`, `set 30` on a busy fleet): the kill's last exposed
    /// stragglers made a look without control sessions, and every OK verdict after it began "control group gone
    /// since T … exposed 0.00 since (0 of 5 sessions) … before it left:", at 30% with the control group's sessions
    /// rising, six simulated hours later. The comparison against the control's old rate is the verdict only at
    /// 100% with no control session since it left: not during a kill (the exposed group is what is gone), not
    /// for a quiet minute, and not once control sessions are back.
    @Test("'control group gone' only at 100% while no control session comes: not at a kill, nor after a resume")
    func controlGroupGoneOnlyAtFull() throws {
        func crashReason(_ a: Assessment) -> String { a.verdict.findings.first { $0.topic == .crashes }?.text ?? "" }
        var f = WatchFixture()
        f.run(minutes: 90)
        #expect(f.snapshot(at: 93).assess(Self.percent(40)).verdict.level == .ok)

        // A quiet minute at 40%: exposed sessions, none from control. The control group is not gone.
        Self.crashLook(&f, minute: 90, exposed: 800, control: 0, exposedCrashes: 1)
        let quiet = f.snapshot(at: 93).assess(Self.percent(40))
        #expect(quiet.verdict.level == .ok, "\(quiet.verdict)")
        #expect(!crashReason(quiet).contains("control group gone"), "\(crashReason(quiet))")
        Self.crashLook(&f, minute: 91, exposed: 1000, control: 1000, exposedCrashes: 2, controlCrashes: 2)

        // Killed: the exposed group drains last, five stragglers, then no sessions in either arm.
        Self.crashLook(&f, minute: 92, exposed: 5, control: 0)
        for minute in 93..<240 { Self.crashLook(&f, minute: minute, exposed: 0, control: 0) }
        let killed = f.snapshot(at: 243).assess(Self.percent(0))
        #expect(killed.verdict.level == .ok, "\(killed.verdict)")
        #expect(!crashReason(killed).contains("control group gone"), "\(crashReason(killed))")

        // Resumed, then 30%: both arms again.
        f.run(minutes: 120, from: 240)
        let resumed = f.snapshot(at: 363).assess(Self.percent(30))
        #expect(resumed.verdict.level == .ok, "\(resumed.verdict)")
        #expect(crashReason(resumed).hasPrefix("no "), "\(crashReason(resumed))")
        #expect(!crashReason(resumed).contains("control group gone"), "\(crashReason(resumed))")
        let evidence = resumed.verdict.findings.first { $0.topic == .crashes }?.evidence
        #expect(evidence?.test.hasPrefix("SPRT on fatal crashes (") == true, "\(String(describing: evidence))")

        // 100%: the control group drains and is gone from minute 362's look on; the comparison against its old rate
        // says since when, and weighs every exposed session without control sessions beside it.
        Self.crashLook(&f, minute: 360, exposed: 1900, control: 100, exposedCrashes: 4)
        for minute in 361..<420 { Self.crashLook(&f, minute: minute, exposed: 2000, control: 0, exposedCrashes: 4) }
        let full = f.snapshot(at: 423).assess(Self.percent(100))
        #expect(full.verdict.level == .ok, "\(full.verdict)")
        let gone = (f.start + .minutes(362)).iso8601
        #expect(
            crashReason(full).hasPrefix("control group gone since \(gone): no crash signal against its rate before"),
            "\(crashReason(full))")
        #expect(crashReason(full).contains("while it was gone (237 of 118,805 sessions)"), "\(crashReason(full))")
        // Killed at 100%: the exposed group is what is gone.
        #expect(!crashReason(f.snapshot(at: 423).assess(Self.percent(0))).contains("control group gone"))
    }

    /// Harm declared against the control's rate before it left stays HALT once the control group is back.
    @Test("HALT by the baseline test at 100% stays HALT after a step back down brings control sessions back")
    func baselineHaltStays() {
        var f = WatchFixture()
        f.run(minutes: 90)
        for minute in 90..<120 { Self.crashLook(&f, minute: minute, exposed: 2000, control: 0, exposedCrashes: 12) }
        let full = f.snapshot(at: 123).assess(Self.percent(100))
        #expect(full.verdict.level == .halt, "\(full.verdict)")
        #expect(full.verdict.reason.hasPrefix("exposed users crash more than the control group did before it left"))
        f.run(minutes: 60, from: 120)
        let back = f.snapshot(at: 183).assess(Self.percent(90))
        #expect(back.verdict.level == .halt, "\(back.verdict)")
        #expect(back.verdict.reason.hasPrefix("exposed users crash more than the control group did before it left"))
    }

    @Test("a group without sessions is HOLD: no comparison is possible")
    func oneSided() {
        var f = WatchFixture()
        f.run(minutes: 5, sessions: 0)
        let a = f.snapshot(at: 6).assess(tenPercent)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason == "no crash comparison yet: no sessions from the exposed or control group")
    }

    @Test("Apple throttling (serverUnavailable above baseline) is HOLD; so is every other class, each on its own")
    func failures() {
        var f = WatchFixture()
        f.run(
            minutes: 30, failures: [.serverUnavailable: 5, .invalidKey: 5],
            controlFailures: [.serverUnavailable: 5, .invalidKey: 5])
        f.run(
            minutes: 10, from: 30, failures: [.serverUnavailable: 40, .invalidKey: 5],
            controlFailures: [.serverUnavailable: 5, .invalidKey: 5])
        let throttled = f.snapshot(at: 41).assess(tenPercent)
        #expect(throttled.verdict.level == .hold)
        #expect(throttled.verdict.reason.hasPrefix("Apple is throttling attestations: serverUnavailable failures at"))

        var g = WatchFixture()
        g.run(minutes: 30, failures: [.invalidKey: 5], controlFailures: [.invalidKey: 5])
        g.run(minutes: 10, from: 30, failures: [.invalidKey: 40], controlFailures: [.invalidKey: 5])
        let a = g.snapshot(at: 41).assess(tenPercent)
        #expect(a.verdict.level == .hold)
        #expect(a.verdict.reason.hasPrefix("invalidKey failures at"))
        #expect(g.snapshot(at: 41).failureMonitors.first { $0.errorClass == .serverUnavailable }!.alarmed == false)
    }

    /// In a real rollout neither control nor pre-rollout devices attest: the exposed group's first settled window
    /// is the baseline, frozen, so throttling that starts later is still caught, and a group that stays degraded
    /// never becomes its own baseline.
    @Test("without control or pre-rollout attempts, the rollout's first window is the frozen baseline")
    func firstWindowBaseline() {
        func look(_ f: inout WatchFixture, minute: Int, failures: Int64) {
            let m0 = BucketLevel.minute.bucket(f.start.microseconds)
            var counts: [CounterKey: Int64] = [:]
            for cohort in [Cohort.enabled, .control] { counts[CounterKey(.session, cohort)] = 1000 }
            counts[CounterKey(.attestationSuccess, .enabled, provider: .appAttest)] = 500 - failures
            counts[CounterKey(.attestationFailure, .enabled, provider: .appAttest, detail: UInt16(ErrorClassBucket.serverUnavailable.rawValue))] = failures
            f.watch.fold(CounterLook(level: .minute, bucket: m0 + Int64(minute), counts: counts))
        }
        // Two hours at 1% serverUnavailable, then 30 minutes at 10%.
        var f = WatchFixture()
        for m in 0..<120 { look(&f, minute: m, failures: 5) }
        let quiet = f.snapshot(at: 121).failureMonitors.first { $0.errorClass == .serverUnavailable }!
        // The first 10 minutes: 5,000 attempts, 50 failures.
        guard case .firstWindow(let n, let through) = quiet.baselineSource else {
            Issue.record("expected the first window as the baseline, got \(quiet.baselineSource)")
            return
        }
        #expect(n == 5_000)
        #expect(through == f.start + .minutes(10))
        // The upper 95% bound of 50 in 5,000: a little above 1%.
        #expect(quiet.baseline! > 0.01 && quiet.baseline! < 0.013)
        #expect(!quiet.alarmed)
        for m in 120..<150 { look(&f, minute: m, failures: 50) }
        let throttled = f.snapshot(at: 151)
        #expect(throttled.failureMonitors.first { $0.errorClass == .serverUnavailable }!.alarmed)
        #expect(throttled.assess(tenPercent).verdict.reason.hasPrefix("Apple is throttling attestations"))
        // Degraded for three more hours: the baseline stays frozen at 1%, the alarm stays.
        for m in 150..<330 { look(&f, minute: m, failures: 50) }
        let still = f.snapshot(at: 331)
        let monitor = still.failureMonitors.first { $0.errorClass == .serverUnavailable }!
        #expect(monitor.baseline! == quiet.baseline!)
        #expect(monitor.alarmed)
        #expect(still.assess(tenPercent).verdict.level == .hold)

        // Too young a rollout: no baseline yet, said in words.
        var g = WatchFixture()
        for m in 0..<5 { look(&g, minute: m, failures: 5) }
        #expect(g.snapshot(at: 6).failureMonitors.allSatisfy { $0.baselineSource == .none })
    }

    @Test("a configured baseline replaces the observed one")
    func configuredBaseline() {
        var f = WatchFixture { $0.failures.configuredBaseline = [.serverUnavailable: 0.2] }
        f.run(minutes: 30, failures: [.serverUnavailable: 40])
        let m = f.snapshot(at: 31).failureMonitors.first { $0.errorClass == .serverUnavailable }!
        #expect(m.baselineSource == .configured)
        #expect(!m.alarmed)
    }

    @Test("a sample ratio mismatch is HOLD; the same split while a change above 50% propagates is not")
    func sampleRatio() {
        var f = WatchFixture()
        f.run(minutes: 90)
        let skewed = f.snapshot(at: 93, active: [.enabled: 5_400, .control: 4_600])
        let a = skewed.assess(tenPercent)
        #expect(a.verdict.level == .hold)
        #expect(
            a.verdict.reason.hasPrefix(
                "sample ratio mismatch: 5,400 enabled vs 4,600 control active installations, expected 50% : 50%"))
        var s = skewed
        s.fetchedVersions = [7: 2_000]
        let propagating = s.assess(RolloutContext(currentMicroPercent: 60_000_000, newestTemplateVersion: 7))
        #expect(propagating.verdict.level == .ok)
        #expect(
            propagating.verdict.findings.contains {
                $0.text.hasPrefix("cohort split off while the change propagates (20.0% on the newest version)")
            })
    }
}

@Suite("Guardrail policy and attestation budget")
struct GuardrailTests {
    static let hold = Verdict(findings: [Finding(.hold, .data, "telemetry is stale")])
    static let halt = Verdict(findings: [Finding(.halt, .crashes, "exposed users crash more")])
    static let ok = Verdict(findings: [Finding(.ok, .crashes, "no crash signal")])
    static let fleet = FleetActivity(
        activeByCohort: [.none: 10_000_000], attestCapable: 10_000_000, sessionsLastDay: 30_000_000)

    @Test("kills and decreases are never blocked, not even at HALT or over budget")
    func neverBlocked() {
        let input = GuardrailInput(
            armed: true, verdict: Self.halt, fleet: Self.fleet, budget: AttestationBudget(perDay: 1, perSecond: 0.001))
        #expect(
            GuardrailPolicy.evaluate(currentMicroPercent: 20_000_000, targetMicroPercent: 0, kind: .kill, input: input)
                .isAllowed)
        #expect(
            GuardrailPolicy.evaluate(
                currentMicroPercent: 20_000_000, targetMicroPercent: 10_000_000, kind: .decrease, input: input
            ).isAllowed)
    }

    @Test("increases are refused at HOLD and HALT once armed, allowed with a note when not armed")
    func verdictGate() {
        for verdict in [Self.hold, Self.halt] {
            let d = GuardrailPolicy.evaluate(
                currentMicroPercent: 1_000_000, targetMicroPercent: 2_000_000, kind: .increase,
                input: GuardrailInput(armed: true, verdict: verdict, fleet: Self.fleet))
            guard case .refuse(let r) = d else {
                Issue.record("expected a refusal")
                continue
            }
            #expect(r.cause == .verdict(verdict.level))
            #expect(r.reason == "guardrail \(verdict.level): \(verdict.reason)")
        }
        let unarmed = GuardrailPolicy.evaluate(
            currentMicroPercent: 0, targetMicroPercent: 1_000_000, kind: .increase,
            input: GuardrailInput(armed: false, verdict: Self.hold, fleet: nil))
        #expect(
            unarmed
                == .allow(notes: [
                    "guardrails not armed: no telemetry for this rollout yet",
                    "attestation load unknown: no active installations seen in the last 24 hours",
                ]))
    }

    @Test("load: newly eligible × launch rate against Apple's guidance, and the largest step that fits")
    func budget() {
        // 10 M attest-capable devices, 3 launches a day: 1% → 20% makes 1.9 M newly eligible; the peak is
        // 1.9 M × 3 / 86,400 × 2 ≈ 132/s, over 100/s. The largest step: 100 × 86,400 / (3 × 2) = 1.44 M devices,
        // 14.4 points, so 15.4%.
        let load = AttestationForecast.load(
            fromMicroPercent: 1_000_000, toMicroPercent: 20_000_000, fleet: Self.fleet, budget: AttestationBudget())
        #expect(abs(load.newlyEligible - 1_900_000) < 1e-6)
        #expect(abs(load.peakPerSecond - 1_900_000 * 3 / 86_400 * 2) < 1e-9)
        let d = GuardrailPolicy.evaluate(
            currentMicroPercent: 1_000_000, targetMicroPercent: 20_000_000, kind: .increase,
            input: GuardrailInput(armed: true, verdict: Self.ok, fleet: Self.fleet))
        guard case .refuse(let r) = d else {
            Issue.record("expected a refusal, got \(d)")
            return
        }
        #expect(r.cause == .attestationBudget)
        #expect(r.suggestedTargetMicroPercent == 15_400_000)
        #expect(r.reason.contains("the largest step that fits is to 15.4%"))
        let at = AttestationForecast.load(
            fromMicroPercent: 1_000_000, toMicroPercent: 15_400_000, fleet: Self.fleet, budget: AttestationBudget())
        let above = AttestationForecast.load(
            fromMicroPercent: 1_000_000, toMicroPercent: 15_410_000, fleet: Self.fleet, budget: AttestationBudget())
        #expect(at.fits(AttestationBudget()) && !above.fits(AttestationBudget()))
        // The daily limit binds for a huge fleet of rare launchers.
        let huge = FleetActivity(
            activeByCohort: [.none: 200_000_000], attestCapable: 200_000_000, sessionsLastDay: 200_000_000)
        let daily = AttestationForecast.largestFittingTarget(
            fromMicroPercent: 0, toMicroPercent: 100_000_000, fleet: huge, budget: AttestationBudget(perSecond: 1e9))
        #expect(daily == 5_000_000)
        #expect(
            GuardrailPolicy.evaluate(
                currentMicroPercent: 1_000_000, targetMicroPercent: 2_000_000, kind: .increase,
                input: GuardrailInput(armed: true, verdict: Self.ok, fleet: Self.fleet)
            ).isAllowed)
    }

    @Test("no step fits when even 0.01% is over budget")
    func nothingFits() {
        let d = GuardrailPolicy.evaluate(
            currentMicroPercent: 0, targetMicroPercent: 1_000_000, kind: .increase,
            input: GuardrailInput(
                armed: true, verdict: Self.ok, fleet: Self.fleet, budget: AttestationBudget(perSecond: 0.01)))
        guard case .refuse(let r) = d else {
            Issue.record("expected a refusal")
            return
        }
        #expect(r.suggestedTargetMicroPercent == nil)
        #expect(r.reason.hasSuffix("no increase fits now"))
    }
}
