import JSON
import Platform
import Rollout
import Telemetry
import TelemetrySources
import Timekeeping
import WebClient

/// The Crashlytics API v1alpha (`firebasecrashlytics.v1alpha.json`): `projects.apps.events.list`, GET
/// `v1alpha/{parent}/events` with `filter.interval.startTime` / `endTime` (RFC 3339), `pageSize` and `pageToken`.
///
/// v1alpha may change: it stays behind this one type. Each event is a crash in the minute of its `eventTime`,
/// in the cohort of its custom key `AppAttestCohort` (none without), fatal when its issue's `errorType` is
/// `FATAL`. Crash events are few (a crash rate of 0.2% of sessions), so the events themselves are pulled and
/// counted here; installations are not (the crashed-users figure needs each installation's first crash since the
/// origin, which the BigQuery source computes where the data is). An event outside the interval asked for, an
/// event id seen twice, a repeated page token, more than `maximumEvents` events or more than `maximumPages` pages is a
/// bad answer; pages still coming after `deadline` fail the pull as unavailable.
public final class CrashlyticsEventsSource: @unchecked Sendable {
    public let name: String
    /// `projects/{project}/apps/{app id}`.
    public let parent: String
    /// The events it reads: the app's crashes.
    public let ledger: SourceLedger
    public let origin: String
    public let call: SourceCaller
    public var pageSize = 1000
    public var maximumEvents = 500_000
    /// Pages read in one pull: a bound on a server that names a next page without end (pages may hold fewer
    /// events than `pageSize`, so this is well above `maximumEvents` / `pageSize`).
    public var maximumPages = 2_000
    /// How long one pull may page.
    public var deadline = Instant.Duration.minutes(5)

    public static let scope = "https://www.googleapis.com/auth/cloud-platform"

    public init(name: String, project: String, app: String, origin: String = "https://firebasecrashlytics.googleapis.com", call: SourceCaller) {
        self.name = name
        parent = "projects/" + percentEncoded(project, keeping: "-._~") + "/apps/" + percentEncoded(app, keeping: "-._~:")
        ledger = .crashlyticsAPI(project: project, app: app)
        self.origin = origin.hasSuffix("/") ? String(origin.dropLast()) : origin
        self.call = call
    }

    public func pull(_ plan: PullPlan) throws(SourceError) -> SourcePull {
        func bad(_ field: String, _ reason: String) -> SourceError {
            SourceError(.badAnswer, source: name, "Crashlytics' answer: \(field) \(reason)")
        }
        let before = call.bytesReceived
        var counts: [AggregateKey: Int64] = [:]
        var ids: Set<String> = []
        var tokens: Set<String> = []
        var token: String?
        var pages = 0
        let start = call.clock.now()
        repeat {
            var q = [
                "filter.interval.startTime=" + percentEncoded(plan.from.iso8601, keeping: "-._~"),
                "filter.interval.endTime=" + percentEncoded(plan.through.iso8601, keeping: "-._~"), "pageSize=\(pageSize)",
            ]
            if let token { q.append("pageToken=" + percentEncoded(token, keeping: "-._~")) }
            let answer = try call.call(
                "GET", origin + "/v1alpha/" + parent + "/events?" + q.joined(separator: "&"), what: "Crashlytics events.list")
            pages += 1
            for (i, event) in (answer["events"]?.arrayValue ?? []).enumerated() {
                let at = "events[\(i)] of page \(pages)"
                guard let id = event["eventId"]?.stringValue ?? event["name"]?.stringValue, !id.isEmpty else {
                    throw bad(at, "has no eventId")
                }
                guard ids.insert(id).inserted else { throw bad(at, "repeats event \(id.prefix(60))") }
                guard ids.count <= maximumEvents else { throw bad("events", "are more than \(maximumEvents)") }
                guard let text = event["eventTime"]?.stringValue, let time = ISO8601.parse(text) else {
                    throw bad("\(at).eventTime", "is not an RFC 3339 time")
                }
                guard time >= plan.from, time < plan.through else {
                    throw bad("\(at).eventTime", "\(text.prefix(40)) is outside the interval asked for")
                }
                let cohortValue = event["customKeys"]?["AppAttestCohort"]
                guard cohortValue == nil || cohortValue?.stringValue != nil else {
                    throw bad("\(at).customKeys.AppAttestCohort", "is not a string")
                }
                let fatal = event["issue"]?["errorType"]?.stringValue == "FATAL"
                let key: AggregateKey
                do {
                    key = try AggregateKey.parse(
                        minute: BucketLevel.minute.bucket(time.microseconds), cohort: cohortValue?.stringValue ?? "none",
                        kind: "crash", provider: "", detail: fatal ? "fatal" : "nonfatal")
                } catch { throw SourceError(.badAnswer, source: name, "Crashlytics' answer: \(at): \(error)") }
                counts[key, default: 0] += 1
            }
            token = answer["nextPageToken"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
            if let token {
                guard tokens.insert(token).inserted else { throw bad("nextPageToken", "repeats an earlier page's token") }
                guard pages < maximumPages else { throw bad("nextPageToken", "names a page past the \(maximumPages) accepted") }
                guard call.clock.now() - start < deadline else {
                    throw SourceError(
                        .unavailable, source: name,
                        "Crashlytics events.list was still paging (nextPageToken after page \(pages)) after \(deadline.seconds) s")
                }
            }
        } while token != nil
        return SourcePull(
            source: name, ledger: ledger, plan: plan, counts: counts, rows: ids.count, bytes: call.bytesReceived - before,
            note: "\(ids.count) crash events in \(pages) page(s)")
    }
}
