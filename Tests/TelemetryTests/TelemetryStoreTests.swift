import Foundation
import Rollout
import SQLiteStore
import TelemetryFixtures
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry

@Suite("Telemetry store")
struct TelemetryStoreTests {
    @Test("a batch lands with counters per cohort, user-level transitions, activity and propagation")
    func landing() throws {
        let tables = try temporaryTables()
        let events = [
            event(0, "a", .sessionStart, .none),
            event(10, "a", .configFetch(templateVersion: 41), .none),
            event(70, "a", .configFetch(templateVersion: 42), .enabled),
            event(71, "a", .sessionStart, .enabled),
            event(72, "a", .attestationSuccess, .enabled),
            event(73, "a", .crash(fatal: true), .enabled, provider: .unspecified),
            event(74, "a", .crash(fatal: true), .enabled, provider: .unspecified),
            event(80, "b", .sessionStart, .control, provider: .deviceCheck, os: "13.7"),
            event(81, "b", .configFetch(templateVersion: 42), .control, provider: .deviceCheck, os: "13.7"),
            event(82, "b", .crash(fatal: false), .control, provider: .unspecified, os: "13.7"),
            event(90, "c", .sessionStart, .enabled, provider: .debug),
            event(91, "c", .attestationFailure(.rejected(reason: "badChain")), .enabled, provider: .debug),
            event(92, "c", .attestationFailure(.serverUnavailable), .enabled, provider: .debug),
        ]
        let receipt = try #require(try tables.commit(batch(events), source: "test", at: t0 + .minutes(5)))
        #expect(receipt.events == 13)
        #expect(receipt.installations == 3)

        let all = try tables.allTimeTotals()
        #expect(all.sum(.session, cohort: .enabled) == 2)
        #expect(all.sum(.session, cohort: .control) == 1)
        #expect(all.sum(.session, cohort: .none) == 1)
        #expect(all.sum(.crash, cohort: .enabled, fatal: true) == 2)
        #expect(all.sum(.crash, cohort: .control, fatal: false) == 1)
        #expect(all.sum(.usersEntered, cohort: .enabled) == 2)  // a (moved from none) and c
        #expect(all.sum(.usersEntered, cohort: .none) == 1)
        #expect(all.sum(.usersEntered, cohort: .control) == 1)
        #expect(all.sum(.usersCrashed, cohort: .enabled) == 1)  // a, once for two fatal crashes
        #expect(all.sum(.usersCrashed, cohort: .control) == 0)  // b's crash was not fatal
        let rejected = all.failuresByDetail().keys.first { $0.errorClass == .rejected }!
        #expect(try tables.describe(rejected) == "rejected:badChain")

        let a = try #require(try tables.installation("a"))
        #expect(a.cohort == .enabled)
        #expect(a.sessions == 2)
        #expect(a.templateVersion == 42)
        #expect(a.enteredCohorts == 0b011)
        #expect(a.crashedCohorts == 0b010)
        #expect(try tables.installation("b")?.canAttest == false)
        #expect(try tables.installation("c")?.canAttest == false)

        let now = t0 + .minutes(6)
        let snap = try tables.snapshot(WatchConfiguration(since: t0), now: now)
        #expect(snap.totals.sum(.session) == 4)
        #expect(snap.activity.active == 3)
        #expect(snap.activity.activeByCohort == [.enabled: 2, .control: 1])
        #expect(snap.activity.attestCapable == 1)
        #expect(snap.activity.sessionsLastDay == 4)
        #expect(snap.fetchedVersions == [42: 2])
        let exposure = snap.exposureCheck(RolloutContext(currentMicroPercent: 10_000_000))
        #expect(exposure.propagation == 2.0 / 3.0)
        #expect(exposure.observedExposure == 2.0 / 3.0)
        #expect(snap.newestEvent == t0 + .seconds(Int64(92)))
        #expect(snap.lastBatchAt == t0 + .minutes(5))
        // Minute 0 holds a's first session and fetch; minute 1 the rest.
        #expect(snap.windows[2].totals.sum(.session) == 4)
        #expect(snap.sparkline(.session).suffix(6) == [1, 3, 0, 0, 0, 0])
    }

    @Test("a second batch updates installations without counting them twice")
    func secondBatch() throws {
        let tables = try temporaryTables()
        try tables.commit(
            batch([event(0, "a", .sessionStart, .enabled), event(5, "a", .crash(fatal: true), .enabled)]), source: "1",
            at: t0)
        try tables.commit(
            batch([
                event(3600, "a", .sessionStart, .enabled), event(3605, "a", .crash(fatal: true), .enabled),
                event(3700, "a", .sessionStart, .control),
            ]),
            source: "2", at: t0)
        let all = try tables.allTimeTotals()
        #expect(all.sum(.usersEntered, cohort: .enabled) == 1)
        #expect(all.sum(.usersCrashed, cohort: .enabled) == 1)
        #expect(all.sum(.usersEntered, cohort: .control) == 1)
        #expect(try tables.installation("a")?.sessions == 3)
        #expect(try tables.installation("a")?.cohort == .control)
        // Presence moved: a is counted once, in its latest cohort and hour.
        let snap = try tables.snapshot(WatchConfiguration(since: t0), now: t0 + .hours(2))
        #expect(snap.activity.activeByCohort == [.control: 1])
        #expect(try tables.batches().map(\.source) == ["1", "2"])
    }

    /// The commit looks up only ids up to the largest stored one (past it none can be stored): ids on both sides
    /// of it, equal to it, extending it, and holding a NUL, each counted once.
    @Test("ids around the largest stored id are found, and ids past it are new")
    func idsAroundTheLargestStoredID() throws {
        let tables = try temporaryTables()
        let first = ["b", "d", "d\u{0}x"]
        try tables.commit(batch(first.map { event(0, $0, .sessionStart, .enabled) }), source: "1", at: t0)
        let second = ["a", "b", "c", "d", "d\u{0}", "d\u{0}x", "d\u{0}x\u{0}", "d\u{0}y", "da", "e"]
        try tables.commit(batch(second.map { event(60, $0, .sessionStart, .enabled) }), source: "2", at: t0)
        #expect(try tables.installationCount() == Set(first + second).count)
        #expect(try tables.allTimeTotals().sum(.usersEntered, cohort: .enabled) == Int64(Set(first + second).count))
        for id in first { #expect(try tables.installation(id)?.sessions == 2, "\(id.debugDescription)") }
        for id in Set(second).subtracting(first) {
            #expect(try tables.installation(id)?.sessions == 1, "\(id.debugDescription)")
        }
    }

    @Test("the snapshot reads inside a transaction the caller already holds (the write path's compare-and-swap)")
    func insideTransaction() throws {
        let tables = try temporaryTables()
        try tables.commit(batch([event(0, "a", .sessionStart, .enabled)]), source: "1", at: t0)
        let sessions = try tables.database.transaction(immediate: true) { () throws -> Int64 in
            try tables.snapshot(WatchConfiguration(since: t0), now: t0 + .minutes(5)).totals.sum(.session)
        }
        #expect(sessions == 1)
        #expect(try tables.database.query("PRAGMA cache_size").first?.first?.int == -2000)
    }

    @Test("rejection reasons keep their catalog id across batches")
    func reasons() throws {
        let tables = try temporaryTables()
        try tables.commit(
            batch([event(0, "a", .attestationFailure(.rejected(reason: "x")), .enabled)]), source: "1", at: t0)
        try tables.commit(
            batch([
                event(1, "b", .attestationFailure(.rejected(reason: "y")), .enabled),
                event(2, "c", .attestationFailure(.rejected(reason: "x")), .enabled),
            ]), source: "2", at: t0)
        var byReason: [String: Int64] = [:]
        for (d, n) in try tables.allTimeTotals().failuresByDetail() { byReason[try tables.describe(d)] = n }
        #expect(byReason == ["rejected:x": 2, "rejected:y": 1])
    }

    /// Thirty minutes of a small rollout in several batches; crashes lean to the exposed side.
    func traffic(minutes: Range<Int64>) -> [TelemetryBatch] {
        var rng = Xoshiro256(seed: 11)
        return minutes.map { m in
            var events: [TelemetryEvent] = []
            for i in 0..<40 {
                let cohort: Cohort = i % 2 == 0 ? .enabled : .control
                let id = "i\(i)-\(m / 10)"
                let s = m * 60 + Int64(i)
                events.append(event(s, id, .sessionStart, cohort))
                if rng.uniform() < (cohort == .enabled ? 0.3 : 0.1) {
                    events.append(event(s + 1, id, .crash(fatal: true), cohort))
                }
                if cohort == .enabled {
                    events.append(
                        event(
                            s + 2, id, rng.uniform() < 0.9 ? .attestationSuccess : .attestationFailure(.invalidKey),
                            cohort))
                }
            }
            return batch(events)
        }
    }

    @Test("a reader that folds minute by minute agrees with a fresh reader")
    func incrementalFolding() throws {
        let tables = try temporaryTables()
        let config = WatchConfiguration(since: t0)
        for (m, b) in traffic(minutes: 0..<30).enumerated() {
            try tables.commit(b, source: "m\(m)", at: t0 + .minutes(Int64(m) + 1))
            _ = try tables.snapshot(config, now: t0 + .minutes(Int64(m) + 1) + .seconds(Int64(30)))
        }
        let now = t0 + .minutes(40)
        let warm = try tables.snapshot(config, now: now)
        let cold = try TelemetryTables(database: tables.database).snapshot(config, now: now)
        #expect(warm.totals == cold.totals)
        #expect(warm.crash == cold.crash)
        #expect(warm.crash.looks == 30)
        #expect(warm.crash.sprt.harmDeclared)
        #expect(warm.totals == (try tables.allTimeTotals()))
    }

    @Test("late events older than the folded point make the next query fold again")
    func lateData() throws {
        let tables = try temporaryTables()
        let config = WatchConfiguration(since: t0)
        let batches = traffic(minutes: 0..<20)
        for b in batches.dropFirst(10) { try tables.commit(b, source: "recent", at: t0 + .minutes(21)) }
        let before = try tables.snapshot(config, now: t0 + .minutes(25))
        for b in batches.prefix(10) { try tables.commit(b, source: "late", at: t0 + .minutes(26)) }
        let after = try tables.snapshot(config, now: t0 + .minutes(27))
        let fresh = try TelemetryTables(database: tables.database).snapshot(config, now: t0 + .minutes(27))
        #expect(after.totals != before.totals)
        #expect(after.totals == fresh.totals)
        #expect(after.crash == fresh.crash)
        #expect(after.crash.looks == 20)
    }

    @Test("minute rows expire but totals since the start stay whole, read from hour rows")
    func retention() throws {
        let tables = try temporaryTables(retention: TelemetryRetention(minutes: .hours(2), hours: .days(90)))
        var events: [TelemetryEvent] = []
        for h in 0..<6 {
            for i in 0..<5 { events.append(event(Int64(h) * 3600 + Int64(i) * 60, "u\(i)", .sessionStart, .enabled)) }
        }
        try tables.commit(batch(events), source: "six hours", at: t0 + .hours(6))
        let minuteRows = try tables.database.query("SELECT count(*) FROM telemetry_counters WHERE level = 0")[0][0].int!
        #expect(minuteRows < 15)  // only the last two hours keep minutes
        let snap = try tables.snapshot(WatchConfiguration(since: t0), now: t0 + .hours(6))
        #expect(snap.totals.sum(.session) == 30)
        #expect(snap.crash.totals.exposedSessions == 30)
    }

    @Test("the store grows with installations and time, not with events")
    func growth() throws {
        func rows(_ tables: TelemetryTables) throws -> (Int64, Int, Int64) {
            (
                try tables.database.query("SELECT count(*) FROM telemetry_counters")[0][0].int!,
                try tables.installationCount(),
                try tables.database.query("SELECT count(*) FROM telemetry_installation_blocks")[0][0].int!
            )
        }
        func fill(repeats: Int) throws -> (Int64, Int, Int64) {
            let tables = try temporaryTables()
            for r in 0..<repeats {
                var events: [TelemetryEvent] = []
                for i in 0..<200 {
                    events.append(
                        event(
                            Int64(i % 60), "u\(i)", i % 3 == 0 ? .crash(fatal: true) : .sessionStart,
                            i % 2 == 0 ? .enabled : .control))
                }
                try tables.commit(batch(events), source: "r\(r)", at: t0)
            }
            #expect(try tables.allTimeTotals().sum(.session) == Int64(repeats) * 133)
            return try rows(tables)
        }
        let small = try fill(repeats: 2)
        let large = try fill(repeats: 10)
        #expect(small == large)
        #expect(large.1 == 200)
    }
}
