import Foundation
import Rollout
import Telemetry
import TelemetrySources
import Timekeeping

/// Conformance checks of the `SourceStateStore` port (a telemetry source's watermark and pull ledger), which every
/// store implements: a pull lands once through the store's telemetry commit, a re-pull or an overlap adds only the
/// difference, whichever source's name it comes under (the ledger is the events', `SourceLedger`), a failure
/// changes no figure, and a read-only handle writes nothing.
///
/// Each check gets a fresh store from the factory; `open` is another read-write handle on it (another connection,
/// as another process would have), with the telemetry counters of the same store.
public enum SourceStateConformance {
    public struct Fixture {
        public var open: () throws -> (sources: any SourceStateStore, counters: any TelemetryCounters)
        public var openReadOnly: () throws -> any SourceStateStore

        public init(
            open: @escaping () throws -> (sources: any SourceStateStore, counters: any TelemetryCounters),
            openReadOnly: @escaping () throws -> any SourceStateStore
        ) {
            self.open = open
            self.openReadOnly = openReadOnly
        }
    }

    public typealias Factory = () throws -> Fixture

    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a source never pulled has no state", neverPulled),
        ("a pull lands its counts through the telemetry commit and sets the watermark; the same pull again adds nothing", landsOnce),
        ("an overlapping pull commits only the difference, a count taken back included", overlap),
        ("a failure changes no counter, ledger or watermark, and the next success clears it", failure),
        ("a read-only handle refuses pulls and failures and nothing is written", readOnly),
        ("two handles committing the same pull at once count it once", concurrent),
        ("a pull of another source over the same events lands in the same ledger and adds only the difference", sameEvents),
        ("a ledger records the events it read up to the end of its last pull", reads),
    ]

    static let expect = ConfigStoreConformance.expect
    public static let now = Instant(seconds: 1_780_000_000 + 30 * 60 + 20)
    public static let origin = Instant(seconds: 1_780_000_000 - 60 * 60)

    public static func plan(_ watermark: Instant?, at now: Instant = now) -> PullPlan {
        PullPlan(now: now, watermark: watermark, origin: origin, overlap: .minutes(10))
    }

    /// Sessions and crashes per minute and cohort over the plan's last minutes.
    public static func counts(_ plan: PullPlan, sessions: Int64 = 40) -> [AggregateKey: Int64] {
        var out: [AggregateKey: Int64] = [:]
        for minute in (plan.throughMinute - 5)..<plan.throughMinute {
            out[AggregateKey(minute: minute, cohort: .enabled, kind: .session)] = sessions
            out[AggregateKey(minute: minute, cohort: .control, kind: .session)] = sessions + 1
            out[AggregateKey(minute: minute, cohort: .enabled, kind: .crash, detail: "fatal")] = 2
        }
        return out
    }

    /// The ledger the checks' pulls land in: a BigQuery source's over GA4 property 1's export.
    public static let ledger = SourceLedger.bigQuery(analytics: "demo-rollout.analytics_1", crashlytics: nil)

    public static func pull(_ plan: PullPlan, _ counts: [AggregateKey: Int64], source: String = "bq") -> SourcePull {
        SourcePull(source: source, ledger: ledger, plan: plan, counts: counts, rows: counts.count, bytes: 0)
    }

    /// Sessions and crashes landed, per cohort (from the store's counters, every minute ever landed).
    static func landed(_ counters: any TelemetryCounters) throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for (k, v) in try counters.allTimeTotals().counts where k.kind == .session || k.kind == .crash {
            out["\(k.kind)/\(k.cohort)", default: 0] += v
        }
        return out.filter { $0.value != 0 }
    }

    static func expected(_ counts: [AggregateKey: Int64]) -> [String: Int64] {
        var out: [String: Int64] = [:]
        for (k, v) in counts { out["\(k.kind)/\(k.cohort)", default: 0] += v }
        return out.filter { $0.value != 0 }
    }

    static func neverPulled(_ factory: Factory) throws {
        let (sources, _) = try factory().open()
        try expect(try sources.sourceState(ledger.key) == nil, "a source never pulled has a state")
        try expect(try sources.sourceLedgers().isEmpty, "a store never pulled has ledgers")
    }

    static func landsOnce(_ factory: Factory) throws {
        let fixture = try factory()
        let (sources, counters) = try fixture.open()
        let p = plan(nil)
        let counts = counts(p)
        let changes = try sources.commitPull(pull(p, counts), at: now)
        try expect(changes == counts, "the first pull committed \(changes.count) changes, not its \(counts.count) counts")
        let (_, other) = try fixture.open()
        let seen = try landed(other)
        try expect(seen == expected(counts), "another handle sees \(seen), not \(expected(counts))")
        let batches = try other.batches()
        try expect(batches.count == 1 && batches[0].source == "source:bq", "the batch log is \(batches)")
        let state = try sources.sourceState(ledger.key)
        try expect(
            state?.watermark == p.nextWatermark && state?.lastSuccess == now && state?.lastError == nil,
            "the state after a pull is \(String(describing: state))")
        let again = try sources.commitPull(pull(p, counts), at: now + .seconds(Int64(5)))
        try expect(again.isEmpty, "the same pull again committed \(again)")
        try expect(try landed(counters) == expected(counts), "the same pull again changed the counters")
        try expect(try counters.batches().count == 1, "the same pull again landed a batch")
    }

    static func overlap(_ factory: Factory) throws {
        let (sources, counters) = try factory().open()
        let first = plan(nil)
        let before = counts(first)
        try sources.commitPull(pull(first, before), at: now)
        // A minute later: the watermark's overlap covers the earlier minutes; one late crash arrived, one session
        // count was revised down, and the new minute has its counts.
        let later = now + .minutes(1)
        let second = plan(try sources.sourceState(ledger.key)?.watermark, at: later)
        try expect(second.fromMinute < first.throughMinute, "the second plan does not overlap the first")
        var after = before
        let late = AggregateKey(minute: first.throughMinute - 2, cohort: .enabled, kind: .crash, detail: "fatal")
        let revised = AggregateKey(minute: first.throughMinute - 1, cohort: .control, kind: .session)
        let fresh = AggregateKey(minute: second.throughMinute - 1, cohort: .enabled, kind: .session)
        after[late, default: 0] += 1
        after[revised, default: 0] -= 3
        after[fresh] = 17
        let changes = try sources.commitPull(pull(second, after), at: later)
        try expect(changes == [late: 1, revised: -3, fresh: 17], "the overlapping pull committed \(changes)")
        let figures = try landed(counters)
        try expect(figures == expected(after), "the counters are \(figures), not \(expected(after))")
    }

    static func failure(_ factory: Factory) throws {
        let (sources, counters) = try factory().open()
        let p = plan(nil)
        try sources.commitPull(pull(p, counts(p)), at: now)
        let figures = try landed(counters)
        try sources.recordFailure(ledger: ledger.key, message: "BigQuery answered 503", at: now + .minutes(1))
        var state = try sources.sourceState(ledger.key)
        try expect(
            state?.lastError == "BigQuery answered 503" && state?.lastAttempt == now + .minutes(1)
                && state?.lastSuccess == now && state?.watermark == p.nextWatermark,
            "the state after a failure is \(String(describing: state))")
        try expect(try landed(counters) == figures, "a failure changed the counters")
        // A failure of a source never pulled is noted too.
        let realtime = SourceLedger.analyticsRealtime(property: "2").key
        try sources.recordFailure(ledger: realtime, message: "quota exhausted", at: now)
        try expect(try sources.sourceState(realtime)?.lastError == "quota exhausted", "a first failure is not noted")
        try expect(try sources.sourceState(realtime)?.lastSuccess == nil, "a failure counts as a success")
        let later = now + .minutes(2)
        try sources.commitPull(pull(plan(p.nextWatermark, at: later), counts(p)), at: later)
        state = try sources.sourceState(ledger.key)
        try expect(state?.lastError == nil && state?.lastSuccess == later, "a success left \(String(describing: state))")
        try expect(try landed(counters) == figures, "the same counts after the failure were counted again")
    }

    static func readOnly(_ factory: Factory) throws {
        let fixture = try factory()
        let reader = try fixture.openReadOnly()
        let p = plan(nil)
        var refused = 0
        do { try reader.commitPull(pull(p, counts(p)), at: now) } catch { refused += 1 }
        do { try reader.recordFailure(ledger: ledger.key, message: "x", at: now) } catch { refused += 1 }
        try expect(refused == 2, "a read-only handle accepted \(2 - refused) of a pull and a failure")
        let (sources, counters) = try fixture.open()
        try expect(try sources.sourceState(ledger.key) == nil, "a refused pull left a state")
        try expect(try landed(counters).isEmpty && (try counters.batches()).isEmpty, "a refused pull landed counts")
    }

    static func concurrent(_ factory: Factory) throws {
        let fixture = try factory()
        let (mine, counters) = try fixture.open()
        nonisolated(unsafe) let other = try fixture.open().sources
        let p = plan(nil)
        // The first pull of a source (no state row yet), then a re-pull with one late crash, each by both at once.
        var late = counts(p)
        late[AggregateKey(minute: p.throughMinute - 1, cohort: .enabled, kind: .crash, detail: "fatal"), default: 0] += 1
        for counts in [counts(p), late] {
            nonisolated(unsafe) var theirs: Result<Int, any Error>?
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) {
                theirs = Result { try other.commitPull(pull(p, counts), at: now).count }
            }
            let ours = Result { try mine.commitPull(pull(p, counts), at: now).count }
            group.wait()
            let committed = [try ours.get(), try theirs!.get()].sorted()
            let first = counts == late ? 1 : counts.count
            try expect(committed == [0, first], "the two commits changed \(committed) keys, not [0, \(first)]")
            let figures = try landed(counters)
            try expect(figures == expected(counts), "two commits at once counted \(figures), not \(expected(counts))")
        }
    }

    static func sameEvents(_ factory: Factory) throws {
        let (sources, counters) = try factory().open()
        let p = plan(nil)
        let counts = counts(p)
        try sources.commitPull(pull(p, counts), at: now)
        // A source under another name over the same export (`bq` removed and added again as `bq2`, or the same
        // property's realtime report): its pull of the same minutes finds what `bq` landed.
        let again = try sources.commitPull(pull(p, counts, source: "bq2"), at: now + .minutes(1))
        try expect(again.isEmpty, "a pull of the same events under another name committed \(again)")
        try expect(try landed(counters) == expected(counts), "a pull of the same events under another name counted them twice")
        // One late crash: only that.
        var late = counts
        let key = AggregateKey(minute: p.throughMinute - 1, cohort: .control, kind: .crash, detail: "fatal")
        late[key, default: 0] += 1
        let changes = try sources.commitPull(pull(p, late, source: "bq2"), at: now + .minutes(2))
        try expect(changes == [key: 1], "the late crash under another name committed \(changes)")
        let figures = try landed(counters)
        try expect(figures == expected(late), "the counters are \(figures), not \(expected(late))")
        let state = try sources.sourceState(ledger.key)
        try expect(state?.lastSuccess == now + .minutes(2), "the ledger's state is \(String(describing: state))")
    }

    static func reads(_ factory: Factory) throws {
        let (sources, _) = try factory().open()
        let p = plan(nil)
        try sources.commitPull(pull(p, counts(p)), at: now)
        let first = try sources.sourceLedgers()
        try expect(
            first == [SourceLedgerRecord(key: ledger.key, watermark: p.nextWatermark, reads: [ledger.events[0]: p.throughMinute])],
            "the ledgers after a pull are \(first)")
        // The same ledger pulled later with a Crashlytics table added: both events, each up to its own end.
        let later = now + .minutes(3)
        let q = plan(p.nextWatermark, at: later)
        let both = SourceLedger.bigQuery(analytics: "demo-rollout.analytics_1", crashlytics: "demo-rollout.firebase_crashlytics.app_IOS_REALTIME")
        try expect(both.key == ledger.key, "a Crashlytics table changes the ledger's key")
        var pulled = pull(q, counts(q))
        pulled.ledger = both
        try sources.commitPull(pulled, at: later)
        // A failure records no read.
        try sources.recordFailure(ledger: ledger.key, message: "BigQuery answered 503", at: later + .minutes(1))
        let second = try sources.sourceLedgers()
        try expect(
            second == [
                SourceLedgerRecord(
                    key: ledger.key, watermark: q.nextWatermark,
                    reads: [both.events[0]: q.throughMinute, both.events[1]: q.throughMinute])
            ],
            "the ledgers after the second pull are \(second)")
        let third = plan(q.nextWatermark, at: later + .minutes(2))
        try sources.commitPull(pull(third, counts(third)), at: later + .minutes(2))
        let dropped = try sources.sourceLedgers().first?.reads
        try expect(
            dropped == [ledger.events[0]: third.throughMinute, both.events[1]: q.throughMinute],
            "a table no longer read keeps the end of what was landed from it: \(String(describing: dropped))")
    }

    // MARK: The move of schema 10's ledgers (SQLite 10 → 11, PostgreSQL 12 → 13)

    /// The sources configured in the store before the move: `bq` and `bq2` over one export (what `source add`
    /// now refuses), and a Crashlytics API source.
    public static func legacyConfigurations() throws -> [SourceConfiguration] {
        [
            try SourceConfiguration(name: "bq", project: "demo-rollout", analytics: "demo-rollout.analytics_1", origin: origin),
            try SourceConfiguration(name: "bq2", project: "demo-rollout", analytics: "demo-rollout.analytics_1", origin: origin),
            try SourceConfiguration(
                name: "crashes", kind: .crashlyticsAPI, project: "demo-rollout", analytics: "", app: legacyApp, origin: origin),
        ]
    }

    static let legacyApp = "1:123456789012:ios:0123456789abcdef"

    /// Lands what `bq`, `bq2` and `crashes` pulled before the move, each under a ledger of its own (`bq2` two
    /// minutes earlier, over three of `bq`'s minutes: both landed, so those sessions are counted twice), and
    /// returns the key each was landed under with the source's name, which the backend's rows must be moved back
    /// to (with the schema of that version) before migrating.
    public static func landLegacyPulls(_ sources: any SourceStateStore) throws -> [String: String] {
        var names: [String: String] = [:]
        for (name, at, crash) in [("bq", now, false), ("bq2", now - .minutes(2), false), ("crashes", now, true)] {
            let legacy = SourceLedger(events: [.analyticsExport("legacy.\(name)")])
            let p = plan(nil, at: at)
            var counted = counts(p)
            if crash { counted = counted.filter { $0.key.kind == .crash } }
            var pulled = pull(p, counted, source: name)
            pulled.ledger = legacy
            try sources.commitPull(pulled, at: at)
            names[legacy.key] = name
        }
        return names
    }

    /// After the move: the ledgers are the events', `bq`'s and `bq2`'s merged (counts added, the earlier
    /// watermark, the events read up to the later end), nothing is left under a name, the counters are as they
    /// were, and the next pull of the export takes back what was counted twice in its window.
    public static func checkMovedLedgers(_ sources: any SourceStateStore, _ counters: any TelemetryCounters) throws {
        let (bq, bq2) = (plan(nil), plan(nil, at: now - .minutes(2)))
        let export = ledger.key
        let app = SourceLedger.crashlyticsAPI(project: "demo-rollout", app: legacyApp)
        let ledgers = try sources.sourceLedgers()
        try expect(
            ledgers == [
                SourceLedgerRecord(key: app.key, watermark: bq.nextWatermark, reads: [app.events[0]: bq.throughMinute]),
                SourceLedgerRecord(key: export, watermark: bq2.nextWatermark, reads: [ledger.events[0]: bq.throughMinute]),
            ],
            "the moved ledgers are \(ledgers)")
        for name in ["bq", "bq2", "crashes"] {
            try expect(try sources.sourceState(name) == nil, "a state is left under the name \(name)")
        }
        let merged = try sources.sourceState(export)
        try expect(merged?.lastSuccess == now, "the merged state is \(String(describing: merged))")
        var twice = expected(counts(bq))
        for (k, v) in expected(counts(bq2)) { twice[k, default: 0] += v }
        for (k, v) in expected(counts(bq).filter { $0.key.kind == .crash }) { twice[k, default: 0] += v }
        let moved = try landed(counters)
        try expect(moved == twice, "the move changed the counters: \(moved), not \(twice)")
        // The export's next pull, from the earlier watermark less the overlap: what it says now is counted once.
        let next = plan(bq2.nextWatermark, at: now)
        try expect(next.fromMinute <= bq2.throughMinute - 5, "the next pull does not cover bq2's minutes")
        try sources.commitPull(pull(next, counts(bq)), at: now + .minutes(1))
        var once = expected(counts(bq))
        for (k, v) in expected(counts(bq).filter { $0.key.kind == .crash }) { once[k, default: 0] += v }
        let after = try landed(counters)
        try expect(after == once, "after the next pull the counters are \(after), not \(once)")
    }
}
