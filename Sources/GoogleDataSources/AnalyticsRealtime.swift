import JSON
import Platform
import Rollout
import Telemetry
import TelemetrySources
import Timekeeping
import WebClient

/// What the Google Analytics Data API said about a property's quota (`propertyQuota`, asked for with
/// `returnPropertyQuota`): tokens left per day and hour, and the concurrent requests allowed.
public struct PropertyQuota: Hashable, Sendable, CustomStringConvertible {
    public var tokensPerDayRemaining: Int64?
    public var tokensPerHourRemaining: Int64?
    public var tokensPerProjectPerHourRemaining: Int64?
    public var concurrentRequestsRemaining: Int64?

    /// Below this many tokens left in the hour (or the day), the source stops pulling until the quota refills:
    /// a realtime report costs a few tokens, and the rest of the property's users share the quota.
    public static let reserve: Int64 = 50

    public var exhausted: Bool {
        [tokensPerHourRemaining, tokensPerDayRemaining, tokensPerProjectPerHourRemaining].contains {
            ($0 ?? .max) < Self.reserve
        }
    }

    public var description: String {
        func t(_ v: Int64?) -> String { v.map(String.init) ?? "?" }
        return "quota: \(t(tokensPerHourRemaining)) tokens left this hour, \(t(tokensPerDayRemaining)) today"
    }
}

/// The Google Analytics Data API v1beta realtime report (`analyticsdata.v1beta.json`,
/// `properties.runRealtimeReport`: POST `v1beta/{property}:runRealtimeReport`, scope `analytics.readonly`).
///
/// One report per pull: the last 30 minutes by `minutesAgo`, `eventName` and the cohort as a user-scoped custom
/// dimension (`customUser:AppAttestCohort`), metrics `eventCount` and `activeUsers`, only rollout's events, and
/// `returnPropertyQuota`. Counts become minute counters (minute = the request's minute − `minutesAgo`):
/// `session_start` sessions, `AppAttestSuccess` successes, `AppAttestFailure` failures (realtime reports carry no
/// event parameters, so a failure's class is unknown: counted as `unknownSystemFailure`), `app_exception` fatal
/// crashes (the `fatal` parameter is not reported either). `activeUsers` is shown, never counted: users are not
/// additive over minutes, and realtime gives no first-seen minute.
public final class AnalyticsRealtimeSource: @unchecked Sendable {
    public let name: String
    public let property: String
    public let origin: String
    public let cohortDimension: String
    public let call: SourceCaller
    /// The quota the last report stated.
    public private(set) var quota: PropertyQuota?
    /// When (the pull's `now`) that report was asked for: an exhausted quota holds the source only until the
    /// hour it was read in ends (`tokensPerHour` refills by the hour), then one report asks again.
    public private(set) var quotaRead: Instant?

    public static let scope = "https://www.googleapis.com/auth/analytics.readonly"
    static let events = ["session_start", "AppAttestSuccess", "AppAttestFailure", "app_exception"]
    /// The minutes a standard property's realtime report covers.
    public static let window: Int64 = 30

    public init(
        name: String, property: String, origin: String = "https://analyticsdata.googleapis.com",
        cohortDimension: String = "customUser:AppAttestCohort", call: SourceCaller
    ) {
        self.name = name
        self.property = property.hasPrefix("properties/") ? property : "properties/" + property
        self.origin = origin.hasSuffix("/") ? String(origin.dropLast()) : origin
        self.cohortDimension = cohortDimension
        self.call = call
    }

    /// The events it reads: the property's.
    public var ledger: SourceLedger { .analyticsRealtime(property: property) }

    /// The report asked for (the same every pull).
    public var request: JSONValue {
        .object(
            JSONObject([
                ("dimensions", .array([["name": "minutesAgo"], ["name": "eventName"], ["name": .string(cohortDimension)]])),
                ("metrics", .array([["name": "eventCount"], ["name": "activeUsers"]])),
                (
                    "dimensionFilter",
                    [
                        "filter": [
                            "fieldName": "eventName", "inListFilter": ["values": .array(Self.events.map { .string($0) })],
                        ]
                    ]
                ),
                ("minuteRanges", .array([["startMinutesAgo": .number(JSONNumber(Self.window - 1)), "endMinutesAgo": 0]])),
                ("limit", "100000"),
                ("returnPropertyQuota", true),
            ]))
    }

    /// The pull plan of a realtime source: the report's 30 minutes, whatever the watermark (the ledger makes the
    /// overlap count once).
    public static func plan(now: Instant) -> PullPlan {
        PullPlan(now: now, watermark: nil, origin: now - .minutes(window - 1), overlap: .minutes(0))
    }

    public func pull(now: Instant) throws(SourceError) -> SourcePull {
        if let quota, quota.exhausted, let read = quotaRead, now.seconds / 3600 == read.seconds / 3600 {
            let next = Instant(seconds: (read.seconds / 3600 + 1) * 3600)
            throw SourceError(
                .unavailable, source: name, "the property's realtime \(quota); waiting for it to refill (asking again at \(next))")
        }
        let before = call.bytesReceived
        let answer = try call.call(
            "POST", origin + "/v1beta/" + property + ":runRealtimeReport", body: request, what: "GA4 runRealtimeReport")
        let q = answer["propertyQuota"]
        func remaining(_ k: String) -> Int64? { q?[k]?["remaining"]?.numberValue?.int64 }
        quota = PropertyQuota(
            tokensPerDayRemaining: remaining("tokensPerDay"), tokensPerHourRemaining: remaining("tokensPerHour"),
            tokensPerProjectPerHourRemaining: remaining("tokensPerProjectPerHour"),
            concurrentRequestsRemaining: remaining("concurrentRequests"))
        quotaRead = now
        let plan = Self.plan(now: now)
        let (counts, rows) = try Self.counts(answer, source: name, cohortDimension: cohortDimension, nowMinute: plan.throughMinute - 1)
        return SourcePull(
            source: name, ledger: ledger, plan: plan, counts: counts, rows: rows, bytes: call.bytesReceived - before,
            note: "\(rows) rows, \(quota!)")
    }

    /// The minute counters of a realtime report's answer (`nowMinute` is the request's minute, `minutesAgo` 0), and
    /// its rows; a row that breaks the report's shape is a bad answer naming the field. Pure: what a pull lands,
    /// and what the per-source calibration feeds the statistics.
    public static func counts(_ answer: JSONValue, source name: String, cohortDimension: String, nowMinute: Int64)
        throws(SourceError) -> (counts: [AggregateKey: Int64], rows: Int)
    {
        func bad(_ field: String, _ reason: String) -> SourceError {
            SourceError(.badAnswer, source: name, "GA4's answer: \(field) \(reason)")
        }
        let dimensions = answer["dimensionHeaders"]?.arrayValue?.map { $0["name"]?.stringValue ?? "" }
        guard dimensions == ["minutesAgo", "eventName", cohortDimension] else {
            throw bad("dimensionHeaders", "are \(dimensions ?? []), not the dimensions asked for")
        }
        let metrics = answer["metricHeaders"]?.arrayValue?.map { $0["name"]?.stringValue ?? "" }
        guard metrics == ["eventCount", "activeUsers"] else { throw bad("metricHeaders", "are \(metrics ?? [])") }
        var counts: [AggregateKey: Int64] = [:]
        var seen: Set<[String]> = []
        let rows = answer["rows"]?.arrayValue ?? []
        for (i, row) in rows.enumerated() {
            guard let d = row["dimensionValues"]?.arrayValue?.map({ $0["value"]?.stringValue }), d.count == 3,
                let ago = d[0].flatMap({ Int64($0) }), let event = d[1], let cohortText = d[2]
            else { throw bad("rows[\(i)].dimensionValues", "are not three strings") }
            guard let m = row["metricValues"]?.arrayValue?.map({ $0["value"]?.stringValue }), m.count == 2,
                let n = m[0].flatMap({ Int64($0) }), n >= 0
            else { throw bad("rows[\(i)].metricValues", "are not two counts in strings") }
            guard ago >= 0, ago < Self.window else { throw bad("rows[\(i)] minutesAgo", "\(ago) is outside 0 ... \(Self.window - 1)") }
            guard n <= PullLedger.maximumCount else {
                throw bad("rows[\(i)].metricValues[0] (eventCount)", "\(n) is more than the \(PullLedger.maximumCount) accepted")
            }
            // The minute as read, not as written: "3" and "03" are one minute.
            guard seen.insert([String(ago), event, cohortText]).inserted else { throw bad("rows[\(i)]", "repeat an earlier row") }
            let cohort: String = cohortText == "(not set)" ? "none" : cohortText
            let kind: String
            var detail = ""
            switch event {
            case "session_start": kind = "session"
            case "AppAttestSuccess": kind = "attestationSuccess"
            case "AppAttestFailure":
                kind = "attestationFailure"
                detail = "unknownSystemFailure"
            case "app_exception":
                kind = "crash"
                detail = "fatal"
            default: throw bad("rows[\(i)] eventName", "'\(event.prefix(40))' was not asked for")
            }
            let key: AggregateKey
            do {
                key = try AggregateKey.parse(minute: nowMinute - ago, cohort: cohort, kind: kind, provider: "", detail: detail)
            } catch { throw SourceError(.badAnswer, source: name, "GA4's answer: rows[\(i)]: \(error)") }
            guard PullLedger.add(n, to: &counts, at: key) else {
                throw bad("rows[\(i)].metricValues[0] (eventCount)", "the rows of \(key) add up to more than \(PullLedger.maximumCount)")
            }
        }
        return (counts, rows.count)
    }
}
