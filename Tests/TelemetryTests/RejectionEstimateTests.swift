import Rollout
import Telemetry
import Testing

/// What enforcement would reject, from a window's counters: outdated clients (sessions without a cohort) and
/// failed attestations among the rest, every provider.
struct RejectionEstimateTests {
    static func totals(_ entries: [(CounterKey, Int64)]) -> CounterTotals {
        CounterTotals(Dictionary(entries, uniquingKeysWith: +))
    }

    @Test func outdatedClientsAndFailuresCombine() throws {
        let t = Self.totals([
            (CounterKey(.session, .enabled), 900), (CounterKey(.session, .none), 100),
            (CounterKey(.attestationSuccess, .enabled, provider: .appAttest), 760),
            (CounterKey(.attestationSuccess, .enabled, provider: .deviceCheck), 40),
            (CounterKey(.attestationFailure, .enabled, provider: .appAttest), 200),
        ])
        let e = t.rejectionEstimate
        #expect(e.outdated == 0.1)
        #expect(abs((e.failed ?? 0) - 0.2) < 1e-12)
        let share = try #require(e.share)
        #expect(abs(share - 0.28) < 1e-12)
    }

    @Test func aHealthyCurrentFleetRejectsNothingAndAnEmptyWindowCannotTell() {
        let healthy = Self.totals([
            (CounterKey(.session, .enabled), 500),
            (CounterKey(.attestationSuccess, .enabled, provider: .appAttest), 300),
        ])
        #expect(healthy.rejectionEstimate.share == 0)
        #expect(CounterTotals().rejectionEstimate.share == nil)
        // Attempts without sessions (a source that sends only attestation events): the failure share alone.
        let attemptsOnly = Self.totals([
            (CounterKey(.attestationSuccess, .enabled, provider: .appAttest), 3),
            (CounterKey(.attestationFailure, .enabled, provider: .appAttest), 1),
        ])
        #expect(attemptsOnly.rejectionEstimate.share == 0.25)
    }
}
