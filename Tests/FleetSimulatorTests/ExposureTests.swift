import FleetSimulator
import Foundation
import RemoteConfig
import Rollout
import Telemetry
import Testing
import Timekeeping

/// Who gets App Attest: the configured share of eligible devices, by Firebase's own percentile, growing only by
/// additions as the percentage rises, and never a device of the control group.
@Suite struct ExposureTests {
    static let scenario = """
        duration 2h
        sessions-per-day 48
        session-length 3m
        fetch-interval 10m
        realtime 50%
        rollout 10%
        at 1h rollout 25%
        """

    /// The micro-percentile firebase-admin assigns (FACTS §1), computed here from the id.
    static func percentile(_ id: String, seed: String = "rollout-sim") -> Int64 {
        PercentileHasher(seed: seed).microPercentile(of: id)
    }

    /// |share − p| within 4 standard errors of a binomial share over `n` devices.
    static func withinSamplingError(_ hits: Int, of n: Int, expected p: Double) -> Bool {
        let share = Double(hits) / Double(n)
        return abs(share - p) <= 4 * (p * (1 - p) / Double(n)).squareRoot()
    }

    @Test func exposureMatchesThePercentageAndOnlyGrows() throws {
        let parsed = try Scenario.parse(Self.scenario, name: "exposure")
        let sink = RecordingSink()
        let simulation = try FleetSimulation(
            scenario: parsed, options: FleetOptions(scenario: parsed, devices: 6000, seed: 5, start: Fixture.start),
            config: try Fixture.memoryStore(), sink: sink)

        try simulation.advance(to: Fixture.start + .minutes(59))
        let at10 = simulation.deviceSnapshots()
        try simulation.run()
        let at25 = simulation.deviceSnapshots()

        for (snapshot, version, percent) in [(at10, 2, 10.0), (at25, 3, 25.0)] {
            let propagated = snapshot.filter { $0.fetchedVersion == version }
            let eligible = propagated.filter(\.isEligible)
            // Most of the fleet has fetched the version (the rest has not launched since it was published).
            #expect(Double(propagated.count) > 0.7 * Double(snapshot.count), "\(propagated.count) propagated")
            let exposed = eligible.filter(\.flag).count
            #expect(
                Self.withinSamplingError(exposed, of: eligible.count, expected: percent / 100),
                "\(exposed) of \(eligible.count) eligible at \(percent)%")
            // Every device's flag and cohort are exactly what its percentile gives.
            let n = Int64(percent * 1_000_000)
            for d in propagated {
                let p = Self.percentile(d.installationID)
                #expect(d.flag == (p <= n))
                let expected: Cohort = p <= n ? .enabled : (p > 50_000_000 && p <= 50_000_000 + n ? .control : .none)
                #expect(d.cohort == expected)
            }
        }
        // Raising the percentage only adds devices.
        let before = Set(at10.filter(\.flag).map(\.index))
        let after = Set(at25.filter(\.flag).map(\.index))
        #expect(before.isSubset(of: after))
        #expect(after.count > before.count * 2)

        // Control devices never become exposed; only enabled devices attest.
        var seenControl = Set<String>()
        for e in sink.events {
            switch e.cohort {
            case .control: seenControl.insert(e.installationID)
            case .enabled:
                #expect(!seenControl.contains(e.installationID), "\(e.installationID) left control for exposure")
            case .none: break
            }
            if case .attestationSuccess = e.kind { #expect(e.cohort == .enabled && e.provider == .appAttest) }
            if case .attestationFailure = e.kind { #expect(e.cohort == .enabled && e.provider == .appAttest) }
        }
        #expect(seenControl.count > 500)
    }

    @Test func theProviderChainFollowsTheCodelab() throws {
        let parsed = try Scenario.parse(
            "duration 1h\nsessions-per-day 48\nsimulators 5%\nattest-unsupported 5%\nrollout 100%\n", name: "chain")
        let (simulation, sink) = try Fixture.run(parsed, devices: 2000, seed: 11)
        let devices = simulation.deviceSnapshots()
        let attesting = Set(
            sink.events.compactMap { e -> String? in
                if case .attestationSuccess = e.kind { return e.installationID }
                return nil
            })
        for d in devices where d.fetchedVersion == 2 {
            let major = Int(d.osVersion.split(separator: ".")[0])!
            let expected: AttestationProvider = d.isSimulator ? .debug : major < 14 ? .deviceCheck : .appAttest
            #expect(d.provider == expected)
            // Debug provider, DeviceCheck and unsupported hardware: never App Attest, no events.
            if !d.isEligible { #expect(!attesting.contains(d.installationID) && !d.hasAttested) }
        }
        #expect(devices.contains { $0.isSimulator } && devices.contains { !$0.supportsAppAttest && !$0.isSimulator })
        #expect(devices.contains { $0.provider == .deviceCheck })
        // Cryptography only where the real flow has it: one key and one attestation per install (again only
        // after invalidKey), and a new token (an assertion) only when the last one is about to expire.
        let s = simulation.statistics()
        let invalidKeys = s.failures["invalidKey"] ?? 0
        #expect(s.attestations >= attesting.count && s.attestations - attesting.count <= invalidKeys)
        #expect(s.keysGenerated >= attesting.count && s.keysGenerated <= attesting.count + invalidKeys)
        var lastToken: [String: Instant] = [:]
        for e in sink.events {
            guard case .attestationSuccess = e.kind else { continue }
            if let previous = lastToken[e.installationID] { #expect(e.time - previous >= .minutes(55)) }
            lastToken[e.installationID] = e.time
        }
        #expect(s.attestations > 1000)
    }
}
