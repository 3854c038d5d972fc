import Crypto
import FleetSimulator
import Telemetry
import Testing
import Timekeeping

/// Same seed, same events in the same order; compared by SHA-256 over a canonical encoding computed here,
/// independently of the simulator's own digest.
@Suite struct DeterminismTests {
    /// A scenario that exercises every moving part: a nudge, Apple's capacity and back-off, OS updates that
    /// invalidate keys, a release whose attestations the exchange rejects, crashes of both kinds.
    static let busy = """
        summary every moving part
        duration 1h
        sessions-per-day 24
        session-length 4m
        realtime 50%
        apple-capacity 0.5/s
        token-ttl 30m
        os-upgrades-per-day 100%
        upgrade-invalid-key 100%
        assert-failure.invalidKey 20%
        crash-rate 1%
        exposed-crash-rate 1%
        rollout 10%
        at 20m rollout 40%
        at 30m release 3.2.0 adoption 80%/h app-id WRONGTEAM1.dev.rollout.fleet
        at 45m apple-capacity 20/s
        """

    static func digest(_ events: [TelemetryEvent]) -> String {
        var h = SHA256.Hasher()
        for e in events {
            let kind: String =
                switch e.kind {
                case .attestationSuccess: "S"
                case .attestationFailure(let c): "F\(c)"
                case .crash(let fatal): fatal ? "C1" : "C0"
                case .sessionStart: "L"
                case .configFetch(let v): "V\(v)"
                }
            h.update(
                "\(e.time.microseconds),\(e.installationID),\(kind),\(e.cohort),\(e.provider),\(e.osVersion),\(e.appVersion);"
            )
        }
        return Hex.encode(h.finish())
    }

    @Test func sameSeedGivesTheSameEventStream() throws {
        let scenario = try Scenario.parse(Self.busy, name: "busy")
        let (a, sa) = try Fixture.run(scenario, devices: 3000, seed: 42)
        let (b, sb) = try Fixture.run(scenario, devices: 3000, seed: 42)
        #expect(sa.events.count == sb.events.count)
        #expect(Self.digest(sa.events) == Self.digest(sb.events))
        #expect(a.statistics().eventDigest == b.statistics().eventDigest)
        #expect(a.statistics() == b.statistics().with(cryptoNanoseconds: a.statistics().cryptoNanoseconds))

        // The run really exercised the model: every kind of event, throttling, rejections by the exchange.
        let s = a.statistics()
        #expect(s.sessions > 1000 && s.configFetches > 1000 && s.fatalCrashes > 10 && s.nonfatalCrashes > 10)
        #expect(s.attestations > 100 && s.assertions > 0 && s.throttled > 0 && s.osUpgrades > 0)
        #expect((s.failures["rejected:rpIdHashMismatch"] ?? 0) > 0)
        #expect((s.failures["invalidKey"] ?? 0) > 0)
        #expect(s.publishedChanges == 2 && s.templateVersion == 3)
        #expect(s.events == sa.events.count)
        // Events come in time order.
        #expect(zip(sa.events, sa.events.dropFirst()).allSatisfy { $0.time <= $1.time })
    }

    @Test func anotherSeedGivesAnotherStream() throws {
        let scenario = try Scenario.parse(Self.busy, name: "busy")
        let (_, a) = try Fixture.run(scenario, devices: 1500, seed: 1, duration: .minutes(20))
        let (_, b) = try Fixture.run(scenario, devices: 1500, seed: 2, duration: .minutes(20))
        #expect(Self.digest(a.events) != Self.digest(b.events))
    }

    @Test func theSimulatorsDigestMatchesItsDocumentedEncoding() throws {
        let scenario = try Scenario.parse(Self.busy, name: "busy")
        let (simulation, sink) = try Fixture.run(scenario, devices: 500, seed: 9, duration: .minutes(30))
        var h = SHA256.Hasher()
        for e in sink.events { h.update(EventDigest.line(e)) }
        #expect(Hex.encode(h.finish()) == simulation.statistics().eventDigest)
        let fetch = try #require(sink.events.first { if case .configFetch = $0.kind { true } else { false } })
        #expect(EventDigest.line(fetch).hasPrefix("\(fetch.time.microseconds)|\(fetch.installationID)|fetch:"))
    }
}

extension FleetStatistics {
    func with(cryptoNanoseconds: UInt64) -> FleetStatistics {
        var c = self
        c.cryptoNanoseconds = cryptoNanoseconds
        return c
    }
}
