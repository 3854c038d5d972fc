import FleetSimulator
import Foundation
import Rollout
import Telemetry
import Testing
import Timekeeping

/// The fault scenarios do what they say: Apple throttles a big nudge and recovers, a bad build is rejected by
/// the real exchange and crashes for everybody, a long fetch interval slows propagation.
@Suite struct FaultScenarioTests {
    /// App Attest attempts and failures of one class per minute since the start.
    static func perMinute(_ events: [TelemetryEvent], failing: AttestationErrorClass) -> [Int: (
        attempts: Int, failures: Int
    )] {
        var out: [Int: (attempts: Int, failures: Int)] = [:]
        for e in events {
            let minute = Int((e.time - Fixture.start).microseconds / 60_000_000)
            switch e.kind {
            case .attestationSuccess: out[minute, default: (0, 0)].attempts += 1
            case .attestationFailure(let c):
                out[minute, default: (0, 0)].attempts += 1
                if c == failing { out[minute, default: (0, 0)].failures += 1 }
            default: break
            }
        }
        return out
    }

    static func sum(_ m: [Int: (attempts: Int, failures: Int)], _ range: Range<Int>) -> (attempts: Int, failures: Int) {
        range.reduce((0, 0)) { acc, k in (acc.0 + (m[k]?.attempts ?? 0), acc.1 + (m[k]?.failures ?? 0)) }
    }

    @Test func throttlingAppearsAfterTheNudgeAndClears() throws {
        var scenario = try Fixture.scenario("throttling")
        // A quarter of the scenario's fleet, so a quarter of Apple's capacity: the same load per capacity.
        let devices = 5000
        scenario.parameters.appleCapacity *= Double(devices) / Double(scenario.devices)
        let (simulation, sink) = try Fixture.run(scenario, devices: devices, seed: 3)
        let m = Self.perMinute(sink.events, failing: .serverUnavailable)
        let before = Self.sum(m, 0..<30)
        let burst = Self.sum(m, 30..<35)
        let late = Self.sum(m, 60..<90)
        // Before the nudge: the background rate only.
        #expect(Double(before.failures) <= 0.05 * Double(max(before.attempts, 1)) + 2, "\(before)")
        // Right after it: Apple refuses a large share of attestations.
        #expect(burst.attempts > 100)
        #expect(Double(burst.failures) >= 0.2 * Double(burst.attempts), "\(burst)")
        // Devices back off and retry; half an hour later it has cleared while attestations go on.
        #expect(Double(late.failures) <= 0.03 * Double(late.attempts), "\(late)")
        #expect(late.attempts - late.failures > 100)
        // The throttled devices retried with back-off (doubling from 30 s) and got through.
        let stats = simulation.statistics()
        #expect(stats.throttled > 50)
        let throttledIDs = Set(
            sink.events.compactMap { e -> String? in
                if case .attestationFailure(.serverUnavailable) = e.kind, e.time >= Fixture.start + .minutes(30) {
                    return e.installationID
                }
                return nil
            })
        let recovered = Set(
            sink.events.compactMap { e -> String? in
                if case .attestationSuccess = e.kind, throttledIDs.contains(e.installationID) {
                    return e.installationID
                }
                return nil
            })
        #expect(
            Double(recovered.count) > 0.5 * Double(throttledIDs.count), "\(recovered.count) of \(throttledIDs.count)")
        // No device retries faster than the back-off allows: 30 s × 0.75 at least between throttled attempts.
        var lastFailure: [String: Instant] = [:]
        for e in sink.events {
            guard case .attestationFailure(.serverUnavailable) = e.kind else { continue }
            if let previous = lastFailure[e.installationID], e.time - previous < .minutes(30) {
                #expect(e.time - previous >= .seconds(Int64(22)))
            }
            lastFailure[e.installationID] = e.time
        }
    }

    @Test func aBadBuildIsRejectedByTheExchangeAndCrashesForEverybody() throws {
        let (_, sink) = try Fixture.run(try Fixture.scenario("bad-build"), devices: 4000, seed: 4)
        let release = Fixture.start + .minutes(15)
        var rejected = 0
        var sessions: [Bool: (sessions: Int, crashes: Int)] = [:]
        for e in sink.events {
            if case .attestationFailure(.rejected(let reason)) = e.kind {
                rejected += 1
                #expect(reason == "rpIdHashMismatch")
                #expect(e.appVersion == "3.2.0" && e.time >= release)
            }
            let bad = e.appVersion == "3.2.0"
            if case .sessionStart = e.kind { sessions[bad, default: (0, 0)].sessions += 1 }
            if case .crash(true) = e.kind { sessions[bad, default: (0, 0)].crashes += 1 }
        }
        #expect(rejected > 20)
        // 3.2.0 crashes about four times as often (0.5% + 1.5% vs 0.5%), in both cohorts alike.
        let good = try #require(sessions[false])
        let badBuild = try #require(sessions[true])
        #expect(badBuild.sessions > 1000)
        let ratio =
            (Double(badBuild.crashes) / Double(badBuild.sessions)) / (Double(good.crashes) / Double(good.sessions))
        #expect(ratio > 2.5 && ratio < 6.5, "crash-rate ratio \(ratio)")
        for cohort in [Cohort.control, .none] {
            #expect(
                sink.events.contains {
                    $0.appVersion == "3.2.0" && $0.cohort == cohort && $0.kind == .crash(fatal: true)
                })
        }
    }

    @Test func aLongFetchIntervalSlowsPropagation() throws {
        let slow = try Fixture.scenario("slow-propagation")
        var fast = slow
        fast.parameters.fetchInterval = .minutes(10)
        fast.parameters.realtime = 0.5
        func propagated(_ s: Scenario) throws -> Double {
            let (simulation, sink) = try Fixture.run(s, devices: 8000, seed: 8, duration: .hours(2))
            // Devices that launched since the nudge at 1h: how many run the new version?
            let nudge = Fixture.start + .hours(1)
            let launched = Set(sink.events.filter { $0.kind == .sessionStart && $0.time > nudge }.map(\.installationID))
            let active = simulation.deviceSnapshots().filter { launched.contains($0.installationID) }
            #expect(active.count > 500)
            return Double(active.filter { $0.fetchedVersion == 3 }.count) / Double(active.count)
        }
        let slowShare = try propagated(slow)
        let fastShare = try propagated(fast)
        #expect(slowShare < 0.6, "slow: \(slowShare)")
        #expect(fastShare > 0.8, "fast: \(fastShare)")
    }

    @Test func anOSUpdateThatInvalidatesTheKeyLeadsToANewAttestation() throws {
        let quiet = ["unknownSystemFailure", "featureUnsupported", "invalidInput", "invalidKey", "serverUnavailable"]
            .flatMap { ["attest-failure.\($0) 0%", "assert-failure.\($0) 0%"] }.joined(separator: "\n")
        let scenario = try Scenario.parse(
            """
            duration 3h
            sessions-per-day 48
            token-ttl 30m
            os-upgrades-per-day 100%
            upgrade-invalid-key 100%
            \(quiet)
            rollout 100%
            """, name: "upgrades")
        let (simulation, sink) = try Fixture.run(scenario, devices: 800, seed: 12)
        let s = simulation.statistics()
        let invalid = sink.events.filter { $0.kind == .attestationFailure(.invalidKey) }
        #expect(invalid.count > 5 && s.failureCount == invalid.count)
        var firstOS: [String: String] = [:]
        var attestedAgain = 0
        for e in sink.events {
            if firstOS[e.installationID] == nil { firstOS[e.installationID] = e.osVersion }
        }
        for failure in invalid {
            // Only after an OS update, and the device then attests a new key.
            #expect(failure.osVersion != firstOS[failure.installationID])
            if sink.events.contains(where: {
                $0.installationID == failure.installationID && $0.kind == .attestationSuccess && $0.time > failure.time
            }) {
                attestedAgain += 1
            }
        }
        #expect(attestedAgain > 0)
        // One key per install plus one per invalidated key, nothing else.
        let attested = Set(sink.events.filter { $0.kind == .attestationSuccess }.map(\.installationID))
        #expect(s.keysGenerated == attested.count + attestedAgain)
    }
}
