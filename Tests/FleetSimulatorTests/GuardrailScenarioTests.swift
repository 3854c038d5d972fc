import FleetSimulator
import Foundation
import SQLiteStore
import Telemetry
import Testing

/// The scenarios drive the store's verdict as a console would read it: telemetry through the ingest path,
/// `RolloutMonitor` on the simulation's clock.
@Suite struct GuardrailScenarioTests {
    static let seeds: [UInt64] = [1, 2, 3]
    static let devices = 6_000

    @Test(arguments: seeds)
    func crashRegressionHalts(seed: UInt64) throws {
        let (stats, status) = try Fixture.verdict(
            try Fixture.scenario("crash-regression"), devices: Self.devices, seed: seed)
        let sprt = status.snapshot.crash.sprt
        #expect(status.assessment.verdict.level == .halt, "\(status.assessment.verdict)")
        #expect(status.assessment.verdict.findings.contains { $0.level == .halt && $0.topic == .crashes })
        #expect(sprt.harmDeclared)
        #expect(stats.fatalCrashes >= sprt.exposedCrashes + sprt.controlCrashes)
    }

    @Test(arguments: seeds)
    func steadyDoesNotHalt(seed: UInt64) throws {
        let (stats, status) = try Fixture.verdict(try Fixture.scenario("steady"), devices: Self.devices, seed: seed)
        let sprt = status.snapshot.crash.sprt
        #expect(status.assessment.verdict.level < .halt, "\(status.assessment.verdict)")
        #expect(!sprt.harmDeclared)
        // The comparison had data: crashes on both sides, so a HALT was possible had the rates differed.
        #expect(sprt.exposedCrashes > 0 && sprt.controlCrashes > 0)
        #expect(sprt.exposedCrashes + sprt.controlCrashes >= 10)
        #expect(stats.fatalCrashes > sprt.exposedCrashes + sprt.controlCrashes)
    }
}
