import Testing
import Timekeeping

@testable import Telemetry

/// The numbers behind each finding (the console's verdict pane) come from the very tests that decided it.
@Suite("Finding evidence")
struct FindingEvidenceTests {
    @Test("HALT by the SPRT carries its statistic, bounds, samples and what would change")
    func harm() throws {
        var f = WatchFixture()
        f.run(minutes: 60, exposedCrashes: 4, controlCrashes: 2)
        let a = f.snapshot(at: 63).assess(tenPercent)
        let halt = try #require(a.verdict.findings.first { $0.level == .halt })
        let e = try #require(halt.evidence)
        let sprt = f.snapshot(at: 63).crash.sprt
        #expect(e.test.hasPrefix("SPRT on fatal crashes (harm 1.50×"))
        #expect(e.statistic?.hasPrefix("Λ = \(String(format: "%.2f", sprt.logLikelihoodRatio)) (") == true, "\(e)")
        #expect(
            e.threshold
                == "harm at Λ ≥ \(String(format: "%.2f", sprt.harmBound)), no harm at Λ ≤ \(String(format: "%.2f", sprt.noHarmBound))"
        )
        #expect(
            e.samples?.hasPrefix("60,000 exposed vs 60,000 control sessions; 6,000 exposed vs 6,000 control users")
                == true, "\(e)")
        #expect(e.wouldChange.hasPrefix("harm once declared stays declared"))
    }

    @Test("not enough data names the power target, the users per arm and how many more are needed")
    func notEnoughData() throws {
        var f = WatchFixture()
        f.run(minutes: 30)
        let a = f.snapshot(at: 33).assess(tenPercent)
        let hold = try #require(a.verdict.findings.first { $0.text.hasPrefix("not enough data") })
        let e = try #require(hold.evidence)
        #expect(e.statistic == "+90% detectable")
        #expect(e.threshold == "+50% or less")
        #expect(e.samples == "3,000 exposed vs 3,000 control users")
        #expect(
            e.wouldChange
                == "OK once the smallest detectable increase is at most +50%: about 5,453 more users per arm (8,453 per arm)"
        )
    }

    @Test("stale data and a throttling alarm say which limit they crossed")
    func staleAndThrottled() throws {
        var f = WatchFixture()
        f.run(minutes: 30)
        let stale = try #require(
            f.snapshot(at: 60, newest: 30).assess(tenPercent).verdict.findings.first { $0.topic == .data }?.evidence)
        #expect(stale.threshold == "stale after 10 min" && stale.statistic == "newest event 30 min old")
        #expect(VerdictLevel.allCases.map(\.labelText) == ["✓ OK", "◆ WATCH", "‖ HOLD", "✗ HALT"])
    }
}
