import FirebaseFake
import Foundation
import GoogleDataSources
import JSON
import Rollout
import RolloutApp
import SQLiteStore
import Telemetry
import TelemetrySources
import TestSupport
import Testing
import Timekeeping

/// The recorded answers of `rollout demo --source recorded` (Tests/Recorded/ga4-realtime-N.json): answers of the
/// strict fake's realtime report (written from analyticsdata.v1beta.json, checked with google-api-python-client) for
/// a fleet growing between recordings. `ROLLOUT_RECORD_ANSWERS=1` records them again.
@Suite("recorded answers", .serialized)
struct RecordedAnswersTests {
    static var directory: String { TestSupport.packageRoot.appendingPathComponent("Tests/Recorded").path }

    /// Each recorded answer has the shape the fake answers now (members, headers), and reads as sessions and crashes
    /// of both arms; recording again (with the variable set) writes three answers from the fake.
    @Test func theRecordedAnswersAreTheFakesAnswers() throws {
        let fake = try FakeFirebase(tls: true)
        let now = Int64(Date().timeIntervalSince1970)
        let source = try RealtimeSourceTests.source(fake)
        var fresh: [JSONValue] = []
        for (i, seed) in [UInt64(71), 72, 73].enumerated() {
            // A fleet arriving in three waves: each recording sees more of it.
            try ExportFleet(
                seed: seed, installations: 300, minutes: 28, start: Instant(seconds: now - 29 * 60),
                cohortAsProperty: true
            ).load(into: fake)
            let answer = try source.call.call(
                "POST", fake.origin + "/v1beta/" + RealtimeSourceTests.property + ":runRealtimeReport",
                body: source.request,
                what: "GA4 runRealtimeReport")
            fresh.append(answer)
            if ProcessInfo.processInfo.environment["ROLLOUT_RECORD_ANSWERS"] == "1" {
                try FileManager.default.createDirectory(atPath: Self.directory, withIntermediateDirectories: true)
                try (answer.compactText + "\n").write(
                    toFile: Self.directory + "/ga4-realtime-\(i + 1).json", atomically: true, encoding: .utf8)
            }
        }
        let recorded = try RecordedAnswers(directory: Self.directory)
        #expect(recorded.answers.count == 3)
        for (i, bytes) in recorded.answers.enumerated() {
            let answer = try JSONParser().parse(bytes)
            #expect(
                answer.objectValue?.keys.sorted() == fresh[i].objectValue?.keys.sorted(), "ga4-realtime-\(i + 1).json")
            #expect(
                answer["dimensionHeaders"] == fresh[i]["dimensionHeaders"]
                    && answer["metricHeaders"] == fresh[i]["metricHeaders"])
            let (counts, rows) = try AnalyticsRealtimeSource.counts(
                answer, source: "recorded", cohortDimension: "customUser:AppAttestCohort", nowMinute: 1_000)
            #expect(rows > 10)
            for cohort in [Cohort.enabled, .control] {
                #expect(
                    counts.contains { $0.key.kind == .session && $0.key.cohort == cohort && $0.value > 0 }, "\(cohort)")
            }
        }
    }

    /// The demo's store: the console's picture, fed from the recording through the source path, lands the answer's
    /// counts (the store's sessions are those of the report) and says the source answered.
    @Test func theDemoConsoleLandsTheRecordedCounts() throws {
        let dir = try TestSupport.temporaryDirectory("recorded-demo")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        let wall = Int64(Date().timeIntervalSince1970)
        let clock = ManualClock(Instant(seconds: wall))
        let session = try RecordedDemo.open(path: path, operatorID: "ana@example.com", clock: clock)
        let console = try session.consoleSource(environment: [:], recordedAnswers: Self.directory)
        // The console pulls beside its pictures: a later picture shows the pull.
        var picture = try console.snapshot()
        let deadline = Date(timeIntervalSinceNow: 20)
        while !picture.events.contains(where: { $0.text.hasPrefix("source recorded: realtime data age") }), Date() < deadline {
            usleep(20_000)
            picture = try console.snapshot()
        }
        #expect(
            picture.events.contains { $0.text.hasPrefix("source recorded: realtime data age") }, "\(picture.events)")
        let state = try #require(try session.sources(environment: [:]).state("recorded"))
        #expect(state.lastSuccess == clock.now() && state.lastError == nil)
        let answer = try JSONParser().parse(try RecordedAnswers(directory: Self.directory).answers[0])
        let (counts, _) = try AnalyticsRealtimeSource.counts(
            answer, source: "recorded", cohortDimension: "customUser:AppAttestCohort",
            nowMinute: BucketLevel.minute.bucket(clock.now().microseconds))
        let store = try RolloutStore(path: path, create: false)
        let totals = try store.telemetryCounters().allTimeTotals()
        for cohort in [Cohort.enabled, .control] {
            let want = counts.filter { $0.key.kind == .session && $0.key.cohort == cohort }.values.reduce(0, +)
            #expect(want > 0 && totals.sum(.session, cohort: cohort) == want, "\(cohort)")
        }
        #expect(try session.monitor().status().assessment.context.sourceSilences.isEmpty)
    }
}
