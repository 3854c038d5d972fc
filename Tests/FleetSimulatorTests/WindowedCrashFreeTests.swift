import FleetSimulator
import Foundation
import Monitoring
import Rollout
import SQLiteStore
import Telemetry
import Testing
import Timekeeping

/// Crash-free users over the last 24 hours (Crashlytics' definition: users active in the window without a fatal
/// crash in it, over users active in it) against the cumulative share since the rollout started, on a simulated
/// fleet whose telemetry goes through the ingest path into a store file.
@Suite struct WindowedCrashFreeTests {
    /// Runs `scenario` into a store, reading the status as the console does at each of `hours`.
    static func figures(_ text: String, devices: Int, hours: [Int64]) throws -> [(windowed: (Double?, Double?), cumulative: Double?)] {
        let (store, dir) = try Fixture.storeFile()
        defer { try? FileManager.default.removeItem(at: dir) }
        let scenario = try Scenario.parse(text, name: "windowed")
        let sink = try StoreTelemetrySink(store: store)
        let simulation = try FleetSimulation(
            scenario: scenario, options: FleetOptions(scenario: scenario, devices: devices, seed: 35, start: Fixture.start),
            config: try store.configStore(), sink: sink)
        var out: [(windowed: (Double?, Double?), cumulative: Double?)] = []
        for h in hours {
            try simulation.advance(to: Fixture.start + .hours(h))
            try sink.flush(at: simulation.clock.now())
            let status = try RolloutMonitor(store: store, clock: simulation.clock).status()
            let a = status.snapshot.activity
            let cumulative = status.snapshot.crash.totals.exposedCrashedUserRate.map { 1 - $0 }
            out.append(((a.crashFreeUsers(.enabled), a.crashFreeUsers(.control)), cumulative))
        }
        return out
    }

    /// 24 sessions a day, 0.5% of them ending in a fatal crash: a user active all day crashes with probability
    /// 1 − 0.995^24 ≈ 11.3%, so about 88.7% of a day's users are crash-free, whichever day.
    @Test func aHealthyFleetKeepsWindowedCrashFreeUsersLevelWhileTheCumulativeShareFalls() throws {
        let text = "duration 74h\nsessions-per-day 24\nsession-length 4m\ncrash-rate 0.5%\nrollout 50%\n"
        let f = try Self.figures(text, devices: 2000, hours: [26, 50, 74])
        let expected = pow(1 - 0.005, 24.0)
        for (i, point) in f.enumerated() {
            let (exposed, control) = point.windowed
            guard let exposed, let control else {
                Issue.record("no windowed figure at point \(i)")
                return
            }
            // About 1,000 users per arm: one standard deviation is about one point; users with fewer than 24 sessions
            // in the window (the daily curve, a first or last day) put the figure a little above 0.887.
            #expect(abs(exposed - expected) < 0.05, "exposed \(exposed) at point \(i), expected about \(expected)")
            #expect(abs(control - expected) < 0.05, "control \(control) at point \(i), expected about \(expected)")
        }
        let windowed = f.compactMap(\.windowed.0)
        #expect(windowed.max()! - windowed.min()! < 0.04, "the windowed figure moves: \(windowed)")
        // The cumulative share keeps falling as days add up: about 1 − 0.995^(24 d).
        let cumulative = f.compactMap(\.cumulative)
        #expect(cumulative.count == 3 && cumulative[0] - cumulative[2] > 0.12, "the cumulative share is \(cumulative)")
        #expect(cumulative[2] < windowed[2] - 0.1, "cumulative \(cumulative[2]) vs windowed \(windowed[2])")
    }

    /// A fatal bug for exposed users only (2% more crashes per session): their day's crash-free share drops far
    /// below the control group's, which stays at the healthy level.
    @Test func aCrashRegressionDropsTheExposedArmsWindowedFigure() throws {
        let text = "duration 26h\nsessions-per-day 24\nsession-length 4m\ncrash-rate 0.5%\nexposed-crash-rate 2%\nrollout 50%\n"
        let f = try Self.figures(text, devices: 2000, hours: [26])
        guard let exposed = f[0].windowed.0, let control = f[0].windowed.1 else {
            Issue.record("no windowed figure")
            return
        }
        let healthy = pow(1 - 0.005, 24.0)
        #expect(abs(control - healthy) < 0.05, "control \(control)")
        #expect(exposed < control - 0.15, "exposed \(exposed) vs control \(control)")
    }
}
