import Rollout
import Telemetry
import TelemetrySources
import Testing
import Timekeeping

@Suite("Pull plan, back-off and ledger")
struct PullLedgerTests {
    let origin = Instant(seconds: 1_780_000_000)

    @Test func theFirstPullStartsAtTheOriginAndLaterOnesOverlap() {
        let now = origin + .minutes(30) + .seconds(Int64(20))
        let first = PullPlan(now: now, watermark: nil, origin: origin, overlap: .minutes(10))
        #expect(first.from == BucketLevel.minute.start(BucketLevel.minute.bucket(origin.microseconds)))
        #expect(first.through == BucketLevel.minute.start(BucketLevel.minute.bucket(now.microseconds) + 1))
        let next = PullPlan(now: now + .minutes(5), watermark: first.nextWatermark, origin: origin, overlap: .minutes(10))
        #expect(next.from == first.nextWatermark - .minutes(10))
        #expect(next.minutes == 16)
    }

    /// A source whose origin lies days back catches up six hours a pull, each window starting where the last one
    /// ended less the overlap, until a window reaches now; an overlap longer than half the window still moves on.
    @Test func aSourceFarBehindCatchesUpAWindowAtATime() {
        let now = origin + .hours(50) + .seconds(Int64(20))
        var plan = PullPlan(now: now, watermark: nil, origin: origin, overlap: .minutes(10))
        var windows: [PullPlan] = []
        while true {
            windows.append(plan)
            if !plan.isBehind(now: now) { break }
            #expect(plan.minutes == PullPlan.longest && plan.nextWatermark == plan.through)
            plan = PullPlan(now: now, watermark: plan.nextWatermark, origin: origin, overlap: .minutes(10))
            if windows.count > 20 { break }
        }
        // 3,002 minutes from the origin's to now's: eight windows of 360 moving on by 350, then the last 202.
        #expect(windows.map(\.minutes) == Array(repeating: 360, count: 8) + [202])
        #expect(windows.first?.from == BucketLevel.minute.start(BucketLevel.minute.bucket(origin.microseconds)))
        #expect(zip(windows, windows.dropFirst()).allSatisfy { $1.from == $0.through - .minutes(10) })
        #expect(windows.last?.through == BucketLevel.minute.start(BucketLevel.minute.bucket(now.microseconds) + 1))
        #expect(windows.last?.nextWatermark == BucketLevel.minute.start(BucketLevel.minute.bucket(now.microseconds)))
        let long = PullPlan(now: now, watermark: nil, origin: origin, overlap: .hours(5))
        let after = PullPlan(now: now, watermark: long.nextWatermark, origin: origin, overlap: .hours(5))
        #expect(long.minutes == 601 && after.from > long.from)
    }

    @Test func retryAfterInSecondsOrAsADateIsHonouredUpToTheCap() {
        let b = SourceBackoff(attempts: 4, base: .seconds(Int64(1)), cap: .seconds(Int64(60)))
        let now = Instant(seconds: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(b.delay(retry: 1, retryAfter: "7", now: now, random: 0.5) == .seconds(Int64(7)))
        #expect(b.delay(retry: 1, retryAfter: "Sun, 06 Nov 1994 08:50:07 GMT", now: now, random: 0.5) == .seconds(Int64(30)))
        #expect(b.delay(retry: 1, retryAfter: "3600", now: now, random: 0.5) == .seconds(Int64(60)))
        #expect(b.delay(retry: 3, retryAfter: nil, now: now, random: 1) == .seconds(Int64(4)))
        #expect(b.delay(retry: 3, retryAfter: "soon", now: now, random: 0) == .seconds(Int64(2)))
    }

    @Test func aRepullCommitsOnlyTheDifferenceAndTakesBackWhatMoved() {
        let a = AggregateKey(minute: 10, cohort: .enabled, kind: .session)
        let b = AggregateKey(minute: 11, cohort: .enabled, kind: .usersEntered)
        let c = AggregateKey(minute: 9, cohort: .enabled, kind: .usersEntered)
        #expect(PullLedger.changes(pulled: [a: 5, b: 1], recorded: [a: 5, b: 1]).isEmpty)
        #expect(PullLedger.changes(pulled: [a: 7, c: 1], recorded: [a: 5, b: 1]) == [a: 2, b: -1, c: 1])
    }

    @Test func dimensionsRoundTripAndBadRowsNameTheirField() throws {
        let k = try AggregateKey.parse(minute: 3, cohort: "exposed", kind: "attestationFailure", provider: "appAttest", detail: "rejected:nonce/x")
        #expect(k.cohort == .enabled)
        #expect(AggregateKey(minute: 3, dimensions: k.dimensions) == k)
        #expect(throws: AggregateError(field: "cohort", reason: "'beta' is not enabled, control or none")) {
            try AggregateKey.parse(minute: 3, cohort: "beta", kind: "session", provider: "", detail: "")
        }
        #expect((try? AggregateKey.parse(minute: 3, cohort: "none", kind: "crash", provider: "", detail: "maybe")) == nil)
    }

    @Test func theBatchOfChangesCarriesFailureClassesAndFatality() {
        let batch = PullLedger.batch([
            AggregateKey(minute: 100, cohort: .enabled, kind: .attestationFailure, provider: .appAttest, detail: "serverUnavailable"): 3,
            AggregateKey(minute: 100, cohort: .control, kind: .crash, detail: "fatal"): 2,
        ])
        let totals = CounterTotals(batch.eventTotals())
        #expect(totals.sum(.attestationFailure, cohort: .enabled, errorClass: .serverUnavailable) == 3)
        #expect(totals.sum(.crash, cohort: .control, fatal: true) == 2)
    }

    /// Counts near Int64's limit (a store's ledger, or a source, gone wrong) do not trap the batch's event count: it
    /// stops at Int.max.
    @Test func aBatchOfHugeCountsSaturatesItsEventCount() {
        let batch = PullLedger.batch([
            AggregateKey(minute: 100, cohort: .enabled, kind: .session): .max,
            AggregateKey(minute: 100, cohort: .control, kind: .session): .max,
        ])
        #expect(batch.eventCount == Int.max)
    }

    /// A source that never answered, or not for its silent-after, is a reason to HOLD; one that answered lately
    /// is not.
    @Test func aSilentSourceIsAReasonToHold() {
        let now = origin + .hours(1)
        let fresh = SourceState(watermark: now, lastSuccess: now - .minutes(3), lastAttempt: now, lastError: "HTTP 429")
        #expect(fresh.silence(source: "bq", now: now, silentAfter: .minutes(10)) == nil)
        let silent = SourceState(watermark: now, lastSuccess: now - .minutes(11), lastAttempt: now, lastError: "HTTP 503")
        #expect(
            silent.silence(source: "bq", now: now, silentAfter: .minutes(10))
                == "source bq silent since \((now - .minutes(11)).iso8601): HTTP 503")
        let never = SourceState(watermark: nil, lastSuccess: nil, lastAttempt: now, lastError: nil)
        #expect(never.silence(source: "bq", now: now, silentAfter: .minutes(10)) == "source bq has not answered yet")
    }
}
