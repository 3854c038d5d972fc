import Foundation
import Rollout
import Telemetry
import Timekeeping

/// Conformance checks of the `TelemetryCounters` port.
///
/// Each check gets a fresh, empty store from the factory and opens handles on it: `open` another read-write
/// handle (another connection, as another process would have), `openReadOnly` one whose writes are refused.
public enum TelemetryCountersConformance {
    public struct Fixture {
        public var open: () throws -> any TelemetryCounters
        public var openReadOnly: () throws -> any TelemetryCounters

        public init(
            open: @escaping () throws -> any TelemetryCounters,
            openReadOnly: @escaping () throws -> any TelemetryCounters
        ) {
            self.open = open
            self.openReadOnly = openReadOnly
        }
    }

    /// Makes a fresh store with no telemetry.
    public typealias Factory = () throws -> Fixture

    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a new store has no events, batches or installations", emptyStore),
        ("an empty batch writes nothing and returns nil", emptyBatch),
        ("a commit returns what it added, and the batch log lists it with increasing ids", receipts),
        ("the counters are the fold of the events (cohorts, user-level transitions, installations, reasons)", fold),
        ("the same events in one batch or in three give the same counters and snapshot", splitEqualsWhole),
        ("a landed batch again adds its events again, but each installation enters and crashes once", duplicateBatch),
        (
            "the snapshot since the start equals the stored totals, and a cold reader sees what a warm one sees",
            snapshot
        ),
        ("counter looks list each minute's and hour's rows, oldest first, only inside the range", counterLooks),
        ("a read-only handle refuses a batch and nothing is written", readOnlyRefuses),
        ("a batch is seen whole or not at all by a concurrent reader", wholeOrNothing),
        ("the last day's distinct active and crashed users, by latest cohort, give crash-free users", windowedCrashFree),
    ]

    /// Runs every check; the first failure names its rule.
    public static func all(_ factory: Factory) throws {
        for check in checks { try ConformanceFailure.naming(check.name) { try check.run(factory) } }
    }

    static let expect = ConfigStoreConformance.expect

    /// On a minute boundary.
    static let t0 = Instant(seconds: 1_780_000_020)

    static func event(
        _ seconds: Int64, _ id: String, _ kind: TelemetryEventKind, _ cohort: Cohort,
        provider: AttestationProvider = .appAttest
    ) -> TelemetryEvent {
        TelemetryEvent(
            time: t0 + .seconds(seconds), installationID: id, kind: kind, cohort: cohort, provider: provider,
            osVersion: "17.4", appVersion: "3.2.1")
    }

    static func batch(_ events: some Sequence<TelemetryEvent>) -> TelemetryBatch {
        let b = TelemetryBatch()
        for e in events { b.record(e) }
        return b
    }

    /// Three installations over two minutes: moves between cohorts, fatal and non-fatal crashes, a rejection.
    static let events: [TelemetryEvent] = [
        event(0, "a", .sessionStart, .none),
        event(10, "a", .configFetch(templateVersion: 41), .none),
        event(70, "a", .configFetch(templateVersion: 42), .enabled),
        event(71, "a", .sessionStart, .enabled),
        event(72, "a", .attestationSuccess, .enabled),
        event(73, "a", .crash(fatal: true), .enabled, provider: .unspecified),
        event(74, "a", .crash(fatal: true), .enabled, provider: .unspecified),
        event(80, "b", .sessionStart, .control, provider: .deviceCheck),
        event(81, "b", .configFetch(templateVersion: 42), .control, provider: .deviceCheck),
        event(82, "b", .crash(fatal: false), .control, provider: .unspecified),
        event(90, "c", .sessionStart, .enabled, provider: .debug),
        event(91, "c", .attestationFailure(.rejected(reason: "badChain")), .enabled, provider: .debug),
        event(92, "c", .attestationFailure(.serverUnavailable), .enabled, provider: .debug),
    ]

    static let configuration = GuardrailSettings().watchConfiguration(since: t0)

    static func emptyStore(_ factory: Factory) throws {
        let counters = try factory().open()
        try expect(try counters.newestEvent() == nil, "a new store has a newest event")
        try expect(try counters.batches().isEmpty, "a new store lists batches")
        try expect(try counters.installationCount() == 0, "a new store counts installations")
        try expect(try counters.installation("a") == nil, "a new store knows installation a")
        try expect(try counters.allTimeTotals().counts.isEmpty, "a new store has counters")
        let s = try counters.snapshot(configuration, now: t0 + .minutes(5))
        try expect(!s.hasTelemetry && s.newestEvent == nil && s.lastBatchAt == nil, "a new store's snapshot has data")
    }

    static func emptyBatch(_ factory: Factory) throws {
        let counters = try factory().open()
        try expect(try counters.commit(TelemetryBatch(), source: "test", at: t0) == nil, "an empty batch has a receipt")
        try expect(try counters.batches().isEmpty, "an empty batch is in the batch log")
    }

    static func receipts(_ factory: Factory) throws {
        let fixture = try factory()
        let counters = try fixture.open()
        guard let first = try counters.commit(batch(events.prefix(7)), source: "one", at: t0 + .minutes(3)) else {
            throw ConformanceFailure("a batch of 7 events returned no receipt")
        }
        try expect(
            first.events == 7 && first.installations == 1 && first.source == "one"
                && first.committedAt == t0 + .minutes(3) && first.earliest == t0
                && first.latest == t0 + .seconds(Int64(74)),
            "the receipt is \(first)")
        guard let second = try counters.commit(batch(events.dropFirst(7)), source: "two", at: t0 + .minutes(4)) else {
            throw ConformanceFailure("a batch of 6 events returned no receipt")
        }
        try expect(second.id > first.id, "batch ids \(first.id), \(second.id) do not increase")
        try expect(second.events == 6 && second.installations == 2, "the second receipt is \(second)")
        let log = try counters.batches()
        try expect(log == [first, second], "the batch log is \(log), not the two receipts oldest first")
        try expect(
            try counters.newestEvent() == t0 + .seconds(Int64(92)), "the newest event is not the latest event time")
        let installations = try counters.installationCount()
        try expect(installations == 3, "\(installations) installations, not 3")
        try expect(try fixture.open().batches() == log, "another handle lists a different batch log")
    }

    static func fold(_ factory: Factory) throws {
        let fixture = try factory()
        let counters = try fixture.open()
        _ = try counters.commit(batch(events), source: "test", at: t0 + .minutes(5))
        // Read back through another handle: what landed is in the store, not in the writer's memory.
        let reader = try fixture.open()
        let all = try reader.allTimeTotals()
        let expected: [(String, Int64, Int64)] = [
            ("enabled sessions", all.sum(.session, cohort: .enabled), 2),
            ("control sessions", all.sum(.session, cohort: .control), 1),
            ("none sessions", all.sum(.session, cohort: .none), 1),
            ("enabled fatal crashes", all.sum(.crash, cohort: .enabled, fatal: true), 2),
            ("control non-fatal crashes", all.sum(.crash, cohort: .control, fatal: false), 1),
            ("users entering enabled", all.sum(.usersEntered, cohort: .enabled), 2),
            ("users entering none", all.sum(.usersEntered, cohort: .none), 1),
            ("users entering control", all.sum(.usersEntered, cohort: .control), 1),
            ("users crashing in enabled", all.sum(.usersCrashed, cohort: .enabled), 1),
            ("users crashing in control (not fatal)", all.sum(.usersCrashed, cohort: .control), 0),
        ]
        for (what, got, want) in expected { try expect(got == want, "\(what): \(got), not \(want)") }
        guard let a = try reader.installation("a") else { throw ConformanceFailure("installation a is missing") }
        try expect(
            a.cohort == .enabled && a.sessions == 2 && a.templateVersion == 42 && a.enteredCohorts == 0b011
                && a.crashedCohorts == 0b010,
            "installation a is \(a)")
        let failures = all.failuresByDetail()
        guard let rejected = failures.keys.first(where: { $0.errorClass == .rejected }),
            let unavailable = failures.keys.first(where: { $0.errorClass == .serverUnavailable })
        else { throw ConformanceFailure("the failures by detail are \(failures)") }
        try expect(try reader.reason(of: rejected) == "badChain", "the rejection's reason is not badChain")
        let rejectedText = try reader.describe(rejected)
        try expect(rejectedText == "rejected:badChain", "the rejection reads \(rejectedText)")
        try expect(try reader.reason(of: unavailable) == nil, "Apple's class has a rejection reason")
        let unavailableText = try reader.describe(unavailable)
        try expect(
            unavailableText == unavailable.errorClass.description, "Apple's class reads \(unavailableText)")
    }

    /// Crash-free users over the last 24 hours (whole hours) need, per arm, the distinct users active in the window
    /// and those whose latest fatal crash is in it: repeated crashes count once, a crash before the window does not
    /// count, a user counts in the cohort of their latest event, and it holds across batches and handles.
    static func windowedCrashFree(_ factory: Factory) throws {
        let fixture = try factory()
        let counters = try fixture.open()
        let day: Int64 = 3600
        // Long before the window: "old" crashes, "gone" is active; neither counts as crashed in the window.
        _ = try counters.commit(
            batch([
                event(0, "old", .sessionStart, .enabled), event(5, "old", .crash(fatal: true), .enabled, provider: .unspecified),
                event(2 * day, "gone", .sessionStart, .enabled),
            ]), source: "test", at: t0 + .hours(3))
        // In the window: "a" crashes twice, "b" crashes in control, "d" crashes while exposed and then reports control.
        _ = try counters.commit(
            batch([
                event(29 * day, "a", .sessionStart, .enabled),
                event(29 * day + 10, "a", .crash(fatal: true), .enabled, provider: .unspecified),
                event(29 * day + 20, "a", .crash(fatal: true), .enabled, provider: .unspecified),
                event(29 * day, "b", .sessionStart, .control),
                event(29 * day + 10, "b", .crash(fatal: true), .control, provider: .unspecified),
                event(29 * day + 30, "d", .crash(fatal: true), .enabled, provider: .unspecified),
                event(29 * day + 40, "e", .crash(fatal: false), .control, provider: .unspecified),
            ]), source: "test", at: t0 + .hours(29))
        _ = try counters.commit(
            batch([
                event(30 * day, "old", .sessionStart, .enabled), event(30 * day, "b", .sessionStart, .control),
                event(30 * day, "d", .sessionStart, .control),
            ]), source: "test", at: t0 + .hours(30))
        for reader in [counters, try fixture.open()] {
            let a = try reader.snapshot(configuration, now: t0 + .hours(30) + .minutes(5)).activity
            try expect(
                a.activeByCohort[.enabled] == 2 && a.activeByCohort[.control] == 3,
                "active in the window: \(a.activeByCohort), not 2 exposed (old, a) and 3 control (b, d, e)")
            try expect(
                (a.crashedByCohort[.enabled] ?? 0) == 1 && (a.crashedByCohort[.control] ?? 0) == 2,
                "crashed in the window: \(a.crashedByCohort), not 1 exposed (a) and 2 control (b, d)")
            try expect(
                a.crashFreeUsers(.enabled) == 0.5 && abs((a.crashFreeUsers(.control) ?? 0) - 1.0 / 3) < 1e-12,
                "crash-free users \(String(describing: a.crashFreeUsers(.enabled))), \(String(describing: a.crashFreeUsers(.control)))")
            try expect(a.crashFreeUsers(.none) == nil, "crash-free users without active users in the arm")
        }
        // "old"'s crash long ago is outside the window, and its latest crash is stored with it.
        let old = try counters.installation("old")
        try expect(old?.lastCrashAt == (t0 + .seconds(Int64(5))).microseconds, "old's latest crash is \(String(describing: old))")
    }

    static func counterLooks(_ factory: Factory) throws {
        let fixture = try factory()
        _ = try fixture.open().commit(batch(events), source: "test", at: t0 + .minutes(5))
        let reader = try fixture.open()
        let first = BucketLevel.minute.bucket(t0.microseconds)
        let minutes = try reader.counterLooks(.minute, from: first - 5, to: first + 5)
        try expect(minutes.map(\.bucket) == [first, first + 1], "the minute looks are \(minutes.map(\.bucket))")
        let m0 = CounterTotals(minutes[0].counts)
        let m1 = CounterTotals(minutes[1].counts)
        try expect(
            m0.sum(.session, cohort: .none) == 1 && m0.sum(.session, cohort: .enabled) == 0,
            "the first minute holds \(minutes[0].counts)")
        try expect(
            m1.sum(.session, cohort: .enabled) == 2 && m1.sum(.crash, cohort: .enabled, fatal: true) == 2
                && m1.sum(.attestationSuccess, cohort: .enabled) == 1
                && m1.sum(.attestationFailure, cohort: .enabled) == 2,
            "the second minute holds \(minutes[1].counts)")
        let only = try reader.counterLooks(.minute, from: first + 1, to: first + 2)
        try expect(only.map(\.bucket) == [first + 1], "a one-minute range gave \(only.map(\.bucket))")
        try expect(try reader.counterLooks(.minute, from: first + 2, to: first + 60).isEmpty, "an empty range has looks")
        let hour = BucketLevel.hour.bucket(t0.microseconds)
        let hours = try reader.counterLooks(.hour, from: hour, to: hour + 1)
        var summed = CounterTotals()
        for look in minutes { summed.add(look.counts) }
        try expect(
            hours.count == 1 && CounterTotals(hours[0].counts).sum(.session) == summed.sum(.session),
            "the hour look \(hours.map(\.counts)) is not the sum of its minutes")
    }

    static func comparable(_ s: TelemetrySnapshot) -> [AnyHashable] {
        [
            s.now, s.since, s.newestEvent, s.settledThrough, s.totals, s.preRollout, s.windows, s.series,
            s.currentMinute, s.crash, s.failureMonitors, s.activity, s.fetchedVersions,
        ]
    }

    static func splitEqualsWhole(_ factory: Factory) throws {
        let whole = try factory().open()
        let split = try factory().open()
        _ = try whole.commit(batch(events), source: "test", at: t0 + .minutes(5))
        for part in [events[0..<4], events[4..<9], events[9...]] {
            _ = try split.commit(batch(part), source: "test", at: t0 + .minutes(5))
        }
        try expect(try whole.allTimeTotals() == split.allTimeTotals(), "the totals differ")
        for id in ["a", "b", "c"] {
            try expect(try whole.installation(id) == split.installation(id), "installation \(id) differs")
        }
        let now = t0 + .minutes(30)
        try expect(
            comparable(try whole.snapshot(configuration, now: now))
                == comparable(try split.snapshot(configuration, now: now)),
            "the snapshots differ")
    }

    static func duplicateBatch(_ factory: Factory) throws {
        let counters = try factory().open()
        let b = batch(events)
        _ = try counters.commit(b, source: "test", at: t0 + .minutes(5))
        let once = try counters.allTimeTotals()
        _ = try counters.commit(b, source: "test", at: t0 + .minutes(6))
        let twice = try counters.allTimeTotals()
        try expect(try counters.batches().count == 2, "the batch log does not list both commits")
        try expect(
            twice.sum(.session, cohort: .enabled) == 2 * once.sum(.session, cohort: .enabled),
            "sessions did not double")
        for cohort in Cohort.allCases {
            try expect(
                twice.sum(.usersEntered, cohort: cohort) == once.sum(.usersEntered, cohort: cohort)
                    && twice.sum(.usersCrashed, cohort: cohort) == once.sum(.usersCrashed, cohort: cohort),
                "users entering or crashing in \(cohort) were counted again")
        }
        try expect(try counters.installationCount() == 3, "installations were counted again")
        try expect(try counters.installation("a")?.sessions == 4, "installation a's sessions did not add up")
    }

    static func snapshot(_ factory: Factory) throws {
        let fixture = try factory()
        let warm = try fixture.open()
        // Land minute by minute, reading between commits (the warm reader folds as it goes).
        for minute in 0..<3 {
            let part = events.filter { ($0.time - t0).microseconds / 60_000_000 == Int64(minute) }
            _ = try warm.commit(batch(part), source: "test", at: t0 + .minutes(Int64(minute + 1)))
            _ = try warm.snapshot(configuration, now: t0 + .minutes(Int64(minute + 1)))
        }
        let now = t0 + .minutes(30)
        let s = try warm.snapshot(configuration, now: now)
        try expect(s.totals == (try warm.allTimeTotals()), "the snapshot's totals are not the stored totals")
        try expect(
            s.newestEvent == t0 + .seconds(Int64(92)),
            "the snapshot's newest event is \(String(describing: s.newestEvent))")
        try expect(s.hasTelemetry, "the snapshot has no telemetry")
        let cold = try fixture.open().snapshot(configuration, now: now)
        try expect(comparable(cold) == comparable(s), "a cold reader's snapshot differs from the warm reader's")
    }

    static func readOnlyRefuses(_ factory: Factory) throws {
        let fixture = try factory()
        let writer = try fixture.open()
        _ = try writer.commit(batch(events.prefix(4)), source: "test", at: t0 + .minutes(1))
        let before = (try writer.allTimeTotals(), try writer.batches())
        let reader = try fixture.openReadOnly()
        var refused = false
        do { _ = try reader.commit(batch(events.suffix(5)), source: "test", at: t0 + .minutes(2)) } catch {
            refused = true
        }
        try expect(refused, "a read-only handle landed a batch")
        try expect(try writer.allTimeTotals() == before.0 && writer.batches() == before.1, "the refused batch wrote")
        try expect(try reader.batches() == before.1, "the read-only handle does not read the log")
    }

    static func wholeOrNothing(_ factory: Factory) throws {
        let fixture = try factory()
        let writer = try fixture.open()
        let reader = try fixture.open()
        let perBatch = 50
        let batches = 12
        nonisolated(unsafe) var torn: [Int64] = []
        nonisolated(unsafe) var readerError: Error?
        nonisolated(unsafe) var done = false
        let lock = NSLock()
        nonisolated(unsafe) let r = reader
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            while !lock.withLock({ done }) {
                do {
                    let n = try r.allTimeTotals().sum(.session, cohort: .enabled)
                    if n % Int64(perBatch) != 0 { lock.withLock { torn.append(n) } }
                } catch {
                    lock.withLock { readerError = error }
                    return
                }
            }
        }
        for k in 0..<batches {
            let part = (0..<perBatch).map { i in
                event(Int64(k * 60 + i % 60), "i\(k)-\(i)", .sessionStart, .enabled)
            }
            _ = try writer.commit(batch(part), source: "test", at: t0 + .minutes(Int64(k + 1)))
        }
        lock.withLock { done = true }
        group.wait()
        if let readerError { throw ConformanceFailure("the concurrent reader failed: \(readerError)") }
        try expect(torn.isEmpty, "a reader saw partial batches: \(torn.prefix(5)) sessions")
        try expect(
            try reader.allTimeTotals().sum(.session, cohort: .enabled) == Int64(perBatch * batches),
            "the reader does not see every batch at the end")
    }
}
