import FleetSimulator
import Foundation
import Testing
import Timekeeping

@Suite struct FleetMakeupTests {
    @Test func installationIDsLookLikeFirebases() {
        var seen = Set<String>()
        for i in 0..<10_000 {
            let id = InstallationID.make(seed: 7, index: i)
            #expect(InstallationID.isWellFormed(id), "\(id)")
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
        #expect(InstallationID.make(seed: 7, index: 3) == InstallationID.make(seed: 7, index: 3))
        #expect(InstallationID.make(seed: 7, index: 3) != InstallationID.make(seed: 8, index: 3))
        // All four possible first characters occur (the first four bits are 0111).
        #expect(Set(seen.map { $0.first! }) == ["c", "d", "e", "f"])
        #expect(!InstallationID.isWellFormed("aAAAAAAAAAAAAAAAAAAAAA") && !InstallationID.isWellFormed("cAAA"))
    }

    @Test func aLargerFleetOnlyAddsDevices() throws {
        let scenario = try Scenario.parse("duration 30m\nrollout 10%\n", name: "sizes")
        let small = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 1000, seed: 3, start: Fixture.start),
            config: try Fixture.memoryStore(), sink: DiscardingSink()
        ).deviceSnapshots()
        let large = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 3000, seed: 3, start: Fixture.start),
            config: try Fixture.memoryStore(), sink: DiscardingSink()
        ).deviceSnapshots()
        #expect(Array(large.prefix(1000)) == small)
    }

    @Test func theMixFollowsTheParameters() throws {
        let scenario = try Scenario.parse(
            "duration 30m\nos-versions 17.4:80% 13.2:20%\nsimulators 10%\nrealtime 40%\n", name: "mix")
        let devices = try FleetSimulation(
            scenario: scenario,
            options: FleetOptions(scenario: scenario, devices: 20_000, seed: 2, start: Fixture.start),
            config: try Fixture.memoryStore(), sink: DiscardingSink()
        ).deviceSnapshots()
        func share(_ f: (DeviceSnapshot) -> Bool) -> Double { Double(devices.filter(f).count) / Double(devices.count) }
        #expect(abs(share { $0.osVersion.hasPrefix("13.") } - 0.2) < 0.015)
        #expect(abs(share(\.isSimulator) - 0.1) < 0.01)
        #expect(abs(share(\.realtime) - 0.4) < 0.015)
        // Before any launch every device runs the config cached before the start: version 1, not started.
        #expect(devices.allSatisfy { $0.fetchedVersion == 1 && !$0.flag && $0.cohort == .none })
    }

    @Test func sessionsFollowTheDailyCurve() throws {
        // A whole day: launches are busiest in the local evening and quietest at night.
        let scenario = try Scenario.parse("duration 24h\nutc-offsets 0:100%\nsessions-per-day 6\n", name: "day")
        let start = ISO8601.parse("2026-05-20T00:00:00Z")!
        let sink = RecordingSink()
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: 2000, seed: 1, start: start),
            config: try Fixture.memoryStore(), sink: sink)
        try simulation.run()
        var perHour = [Int](repeating: 0, count: 24)
        for e in sink.events where e.kind == .sessionStart {
            perHour[Int((e.time - start).microseconds / 3_600_000_000)] += 1
        }
        let total = perHour.reduce(0, +)
        #expect(abs(Double(total) / 2000 - 6) < 0.5, "\(total) sessions")
        #expect(perHour[19] > 3 * perHour[6], "\(perHour)")
        #expect(perHour.firstIndex(of: perHour.max()!)! >= 16)
    }
}
