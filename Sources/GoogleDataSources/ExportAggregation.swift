import JSON
import Platform
import Rollout
import Telemetry
import TelemetrySources
import Timekeeping

/// Where the exports live in BigQuery: the GA4 export's dataset (`analytics_<property id>`, holding
/// `events_YYYYMMDD` and, with streaming export, `events_intraday_YYYYMMDD`) and optionally the Crashlytics
/// realtime export's table (`firebase_crashlytics.<bundle>_IOS_REALTIME`).
public struct ExportTables: Hashable, Sendable {
    /// The project that runs (and pays for) the queries.
    public var project: String
    /// `project.dataset` of the GA4 export.
    public var analytics: String
    /// `project.dataset.table` of the Crashlytics streaming export, if any.
    public var crashlytics: String?
    public var location: String?

    public init(project: String, analytics: String, crashlytics: String? = nil, location: String? = nil) throws(SourceError) {
        for (name, value, parts) in [("analytics", analytics, 2), ("crashlytics", crashlytics ?? "a.b.c", 3)] {
            let p = value.split(separator: ".", omittingEmptySubsequences: false)
            guard p.count == parts, p.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy(Self.identifierByte) }) else {
                throw SourceError(
                    .refused, source: name,
                    "'\(value.prefix(80))' is not \(parts == 2 ? "project.dataset" : "project.dataset.table") (letters, digits, _ and -)")
            }
        }
        self.project = project
        self.analytics = analytics
        self.crashlytics = crashlytics
        self.location = location
    }

    static func identifierByte(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95 || b == 45
    }
}

/// The one query rollout runs on the exports: counts per minute × cohort × kind × provider × detail, with the
/// aggregation pushed down to BigQuery, so that a 10M-user app's events never stream through one process.
///
/// It reads the rows `rollout ingest --format ga4|crashlytics` reads and maps them the same way (see
/// `GA4Format` and `CrashlyticsFormat` in TelemetryIngest): `session_start`, `AppAttestSuccess`,
/// `AppAttestFailure` (class from `error_class`, else `error_code`, else `reason` as a rejection),
/// `app_exception` (fatal unless `fatal` is 0) and `AppAttestConfigFetch`, iOS rows only, the cohort from the
/// event parameter `AppAttestCohort`, else the user property. A daily table replaces the intraday table of its
/// day (both exist for a while after the day ends; counting both would count twice).
///
/// Besides the additive counts it returns, per minute and cohort, the installations whose first event in the
/// cohort (`usersEntered`) and first fatal crash in the cohort (`usersCrashed`) since `@origin_us` fell in
/// that minute: the one figure about distinct installations the crash comparison needs, computed where the
/// events are (see `AggregateKey` on what is additive).
///
/// With the Crashlytics export in the query, it alone counts crashes: Crashlytics logs each fatal crash to a
/// linked Analytics property as `app_exception` as well, so GA4's `app_exception` rows are not read (each crash
/// once, not twice). Installations enter a cohort by their GA4 events only: a Crashlytics row names the
/// installation by another identifier (`installation_uuid`, not `user_pseudo_id`), so counting it would add each
/// crashed installation as a second user; crashed users are Crashlytics' installations, one per first fatal crash.
public enum ExportAggregation {
    public static let columns = ["minute", "cohort", "kind", "provider", "detail", "n"]

    /// The query's text. Identifiers are checked by `ExportTables`; everything else is a parameter.
    public static func sql(_ tables: ExportTables) -> String {
        let crashlytics =
            tables.crashlytics.map { table in
                """
                  UNION ALL
                  SELECT UNIX_MICROS(event_timestamp) AS t, installation_uuid AS installation,
                    (SELECT value FROM UNNEST(custom_keys) WHERE key = 'AppAttestCohort' LIMIT 1) AS raw_cohort,
                    'crash' AS kind, '' AS provider, IF(is_fatal, 'fatal', 'nonfatal') AS detail, 'crashlytics' AS src
                  FROM `\(table)`
                  WHERE event_timestamp >= TIMESTAMP_MICROS(@origin_us) AND event_timestamp < TIMESTAMP_MICROS(@through_us)
                    AND (platform IS NULL OR platform = 'IOS')
                """
            } ?? ""
        // Crashlytics logs each fatal crash to Analytics as `app_exception` too: with its export in the query,
        // crashes are its rows alone.
        let ga4Events = ["session_start", "AppAttestSuccess", "AppAttestFailure"] + (tables.crashlytics == nil ? ["app_exception"] : [])
            + ["AppAttestConfigFetch"]
        return """
            -- rollout: telemetry counts per minute x cohort x kind from the GA4 and Crashlytics exports
            WITH daily AS (
              SELECT DISTINCT _TABLE_SUFFIX AS day FROM `\(tables.analytics).events_*`
              WHERE REGEXP_CONTAINS(_TABLE_SUFFIX, r'^[0-9]{8}$') AND _TABLE_SUFFIX BETWEEN @first_day AND @last_day
            ),
            ga4 AS (
              SELECT event_timestamp AS t, user_pseudo_id AS installation, event_name,
                COALESCE(
                  (SELECT value.string_value FROM UNNEST(event_params) WHERE key = 'AppAttestCohort' LIMIT 1),
                  (SELECT value.string_value FROM UNNEST(user_properties) WHERE key = 'AppAttestCohort' LIMIT 1)) AS raw_cohort,
                (SELECT value.string_value FROM UNNEST(event_params) WHERE key = 'provider' LIMIT 1) AS provider,
                (SELECT value.string_value FROM UNNEST(event_params) WHERE key = 'error_class' LIMIT 1) AS error_class,
                (SELECT value.int_value FROM UNNEST(event_params) WHERE key = 'error_code' LIMIT 1) AS error_code,
                (SELECT value.string_value FROM UNNEST(event_params) WHERE key = 'reason' LIMIT 1) AS reason,
                (SELECT COALESCE(value.int_value, SAFE_CAST(value.string_value AS INT64)) FROM UNNEST(event_params) WHERE key = 'fatal' LIMIT 1) AS fatal
              FROM `\(tables.analytics).events_*`
              WHERE (_TABLE_SUFFIX BETWEEN @first_day AND @last_day
                  OR (STARTS_WITH(_TABLE_SUFFIX, 'intraday_') AND SUBSTR(_TABLE_SUFFIX, 10) BETWEEN @first_day AND @last_day
                      AND SUBSTR(_TABLE_SUFFIX, 10) NOT IN (SELECT day FROM daily)))
                AND event_timestamp >= @origin_us AND event_timestamp < @through_us
                AND event_name IN (\(ga4Events.map { "'\($0)'" }.joined(separator: ", ")))
                AND (platform IS NULL OR platform = 'IOS')
            ),
            events AS (
              SELECT t, installation, raw_cohort,
                CASE event_name WHEN 'session_start' THEN 'session' WHEN 'AppAttestSuccess' THEN 'attestationSuccess'
                  WHEN 'AppAttestFailure' THEN 'attestationFailure' WHEN 'app_exception' THEN 'crash'
                  ELSE 'configFetch' END AS kind,
                IF(event_name IN ('AppAttestSuccess', 'AppAttestFailure'), COALESCE(provider, ''), '') AS provider,
                CASE event_name
                  WHEN 'AppAttestFailure' THEN CASE
                    WHEN error_class = 'rejected' THEN CONCAT('rejected:', COALESCE(reason, ''))
                    WHEN error_class IS NOT NULL THEN error_class
                    WHEN error_code IS NOT NULL THEN CASE error_code WHEN 0 THEN 'unknownSystemFailure'
                      WHEN 1 THEN 'featureUnsupported' WHEN 2 THEN 'invalidInput' WHEN 3 THEN 'invalidKey'
                      WHEN 4 THEN 'serverUnavailable' ELSE CAST(error_code AS STRING) END
                    ELSE CONCAT('rejected:', COALESCE(reason, '')) END
                  WHEN 'app_exception' THEN IF(fatal = 0, 'nonfatal', 'fatal')
                  ELSE '' END AS detail, 'ga4' AS src
              FROM ga4
            \(crashlytics)
            ),
            normalised AS (
              SELECT t, installation, kind, provider, detail, src,
                CASE LOWER(COALESCE(raw_cohort, '')) WHEN 'exposed' THEN 'enabled' WHEN '' THEN 'none'
                  ELSE LOWER(raw_cohort) END AS cohort
              FROM events
            ),
            firsts AS (
              SELECT installation, cohort, MIN(IF(src = 'ga4', t, NULL)) AS entered,
                MIN(IF(kind = 'crash' AND detail = 'fatal', t, NULL)) AS crashed
              FROM normalised GROUP BY installation, cohort
            )
            SELECT DIV(t, 60000000) AS minute, cohort, kind, provider, detail, COUNT(*) AS n
            FROM normalised WHERE t >= @from_us GROUP BY minute, cohort, kind, provider, detail
            UNION ALL
            SELECT DIV(entered, 60000000), cohort, 'usersEntered', '', '', COUNT(*)
            FROM firsts WHERE entered >= @from_us GROUP BY 1, 2
            UNION ALL
            SELECT DIV(crashed, 60000000), cohort, 'usersCrashed', '', '', COUNT(*)
            FROM firsts WHERE crashed >= @from_us GROUP BY 1, 2
            ORDER BY minute, cohort, kind, provider, detail
            """
    }

    /// The parameters for a pull of `plan` with the source's `origin`: the window in microseconds, and the
    /// tables' day suffixes (UTC) that can hold it, which prunes the wildcard table to those days.
    public static func parameters(plan: PullPlan, origin: Instant) -> [QueryParameter] {
        func day(_ t: Instant) -> String {
            let (y, m, d) = ISO8601.civil(fromDays: BucketLevel.day.bucket(t.microseconds))
            return String(y) + (m < 10 ? "0" : "") + String(m) + (d < 10 ? "0" : "") + String(d)
        }
        let last = plan.through - .seconds(Int64(1))
        return [
            QueryParameter("origin_us", origin.microseconds), QueryParameter("from_us", plan.from.microseconds),
            QueryParameter("through_us", plan.through.microseconds), QueryParameter("first_day", day(origin)),
            QueryParameter("last_day", day(last)),
        ]
    }

    /// The pulled rows as counts, refusing a row that `ingest` would refuse or that lies outside the plan, and a
    /// row that comes twice (the query groups by these texts: twice means a broken answer). Texts that differ
    /// only in spelling (`appAttest`, `app_attest`) are one key, their counts added; a count, or a key's sum, past
    /// `PullLedger.maximumCount` is a bad answer.
    public static func counts(_ result: QueryResult, plan: PullPlan, source: String) throws(SourceError) -> [AggregateKey: Int64] {
        var counter = Counter(plan: plan, source: source, expectedRows: result.rows.count)
        for (i, row) in result.rows.enumerated() { try counter.add(row, index: i) }
        return counter.counts
    }

    /// `counts`, a row at a time: what a pull checks as each page arrives, so that a bad row fails the pull at its
    /// page, before the pages after it are asked for.
    public struct Counter {
        public let plan: PullPlan
        public let source: String
        public private(set) var counts: [AggregateKey: Int64] = [:]
        private var seen: Set<[String?]> = []

        public init(plan: PullPlan, source: String, expectedRows: Int = 0) {
            self.plan = plan
            self.source = source
            counts.reserveCapacity(expectedRows)
            seen.reserveCapacity(expectedRows)
        }

        /// Adds row number `i` of the answer (its cells in `ExportAggregation.columns` order).
        public mutating func add(_ row: [String?], index i: Int) throws(SourceError) {
            let source = self.source
            func field(_ c: Int) throws(SourceError) -> String {
                guard let v = row[c] else {
                    throw SourceError(.badAnswer, source: source, "row \(i): \(columns[c]) is null")
                }
                return v
            }
            guard let minute = Int64(try field(0)), minute >= plan.fromMinute, minute < plan.throughMinute else {
                throw SourceError(.badAnswer, source: source, "row \(i): minute '\(row[0] ?? "")' is outside the pulled window")
            }
            guard let n = Int64(try field(5)), n > 0 else {
                throw SourceError(.badAnswer, source: source, "row \(i): n '\(row[5] ?? "")' is not a positive count")
            }
            guard n <= PullLedger.maximumCount else {
                throw SourceError(.badAnswer, source: source, "row \(i): n \(n) is more than the \(PullLedger.maximumCount) accepted")
            }
            var detail = try field(4)
            if try field(2) == "attestationFailure", let code = Int64(detail) {
                guard let c = AttestationErrorClass(dcErrorCode: code) else {
                    throw SourceError(.badAnswer, source: source, "row \(i): detail: error_code \(code) is not a DCError code (0 ... 4)")
                }
                detail = c.description
            }
            let key: AggregateKey
            do {
                key = try AggregateKey.parse(minute: minute, cohort: try field(1), kind: try field(2), provider: try field(3), detail: detail)
            } catch { throw SourceError(.badAnswer, source: source, "row \(i): \(error)") }
            guard seen.insert(Array(row.prefix(5))).inserted else {
                throw SourceError(.badAnswer, source: source, "row \(i): \(key) comes twice")
            }
            guard PullLedger.add(n, to: &counts, at: key) else {
                throw SourceError(
                    .badAnswer, source: source, "row \(i): n: the rows of \(key) add up to more than \(PullLedger.maximumCount)")
            }
        }
    }
}

/// A BigQuery source: one query per pull over the exports, its rows turned into counts.
public final class BigQuerySource: @unchecked Sendable {
    public let name: String
    public let tables: ExportTables
    public let client: BigQueryClient
    public let origin: Instant

    public init(name: String, tables: ExportTables, client: BigQueryClient, origin: Instant) {
        self.name = name
        self.tables = tables
        self.client = client
        self.origin = origin
    }

    /// The events it reads: the GA4 export's and the Crashlytics table's.
    public var ledger: SourceLedger { .bigQuery(analytics: tables.analytics, crashlytics: tables.crashlytics) }

    public func pull(_ plan: PullPlan) throws(SourceError) -> SourcePull {
        let before = client.call.bytesReceived
        // Each row is checked as its page arrives: a bad one fails the pull before the next page is asked for.
        var counter = ExportAggregation.Counter(plan: plan, source: name)
        let result = try client.query(
            ExportAggregation.sql(tables), parameters: ExportAggregation.parameters(plan: plan, origin: origin),
            columns: ExportAggregation.columns
        ) { (row, i) throws(SourceError) in try counter.add(row, index: i) }
        let counts = counter.counts
        var note = "\(result.rows.count) rows in \(result.pages) page(s)"
        if let b = result.bytesProcessed { note += ", \(b) bytes processed" }
        return SourcePull(
            source: name, ledger: ledger, plan: plan, counts: counts, rows: result.rows.count, bytes: client.call.bytesReceived - before,
            note: note)
    }
}
