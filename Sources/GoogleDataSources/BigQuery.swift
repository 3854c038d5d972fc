import JSON
import Platform
import Timekeeping
import WebClient

/// A named parameter of a standard-SQL query (`@name`), as `jobs.query` takes it.
public struct QueryParameter: Sendable, Hashable {
    public enum ParameterType: String, Sendable, Hashable { case int64 = "INT64", string = "STRING" }
    public var name: String
    public var type: ParameterType
    public var value: String

    public init(_ name: String, _ value: Int64) {
        self.name = name
        type = .int64
        self.value = String(value)
    }

    public init(_ name: String, _ value: String) {
        self.name = name
        type = .string
        self.value = value
    }

    var json: JSONValue {
        ["name": .string(name), "parameterType": ["type": .string(type.rawValue)], "parameterValue": ["value": .string(value)]]
    }
}

/// What a query returned: its rows (each cell a string or null, as BigQuery sends every scalar), and its cost.
public struct QueryResult: Sendable {
    public var columns: [String]
    public var rows: [[String?]]
    public var pages: Int
    /// `totalBytesProcessed` as BigQuery reported it (what the query scanned and is billed for).
    public var bytesProcessed: Int64?
    public var polls: Int

    public init(columns: [String], rows: [[String?]], pages: Int = 1, bytesProcessed: Int64? = nil, polls: Int = 0) {
        self.columns = columns
        self.rows = rows
        self.pages = pages
        self.bytesProcessed = bytesProcessed
        self.polls = polls
    }
}

/// BigQuery's REST API v2 (`bigquery.v2.json`): `jobs.query` (POST `projects/{projectId}/queries`) and
/// `jobs.getQueryResults` (GET `projects/{projectId}/queries/{jobId}`).
///
/// Standard SQL only (`useLegacySql: false`) with named parameters. When the answer says `jobComplete: false`
/// the job is polled with `getQueryResults` (each poll waits up to `timeoutMs` on the server, and rollout leaves at
/// least `firstPollWait`, doubling up to `longestPollWait`, between polls whatever the server does) until complete
/// or `deadline`; rows then come in pages chained by `pageToken`, read within the same `deadline`. Rows are
/// `{f: [{v}]}` with every scalar a string. A repeated page token, a later page without rows that still names a next
/// page, more than `maximumPages` pages, a row of the wrong width, a schema other than the one asked for or more
/// than `maximumRows` rows is a bad answer: the pull fails and nothing is written. A job that reports `errors`
/// fails the pull, complete or not. All the answers of one query together (its polls and pages) may hold
/// `SourceCaller.maximumAnswerBytes`: each call may receive what is left of it, and is refused as it arrives past
/// that; each row is handed to the caller's check as its page is read, so a bad row fails the pull at its page.
public final class BigQueryClient: @unchecked Sendable {
    public let origin: String
    public let project: String
    public let location: String?
    public let call: SourceCaller
    let clock: any Clock
    /// Rows accepted from one query (the aggregated queries return minutes × cohorts × kinds).
    public var maximumRows = 1_000_000
    /// How long a query may run, polls included.
    public var deadline = Instant.Duration.minutes(5)
    /// The server-side wait of each call (`timeoutMs`).
    public var serverWait = Instant.Duration.seconds(Int64(10))
    public var pageRows = 10_000
    /// Pages read from one query: far more than `maximumRows` / `pageRows`, a bound on a server that pages forever.
    public var maximumPages = 10_000
    /// The least time between two polls of a job that is not complete, doubled after each poll up to
    /// `longestPollWait`: a server that answers `jobComplete: false` at once is not asked again at once.
    public var firstPollWait = Instant.Duration.seconds(Int64(1))
    public var longestPollWait = Instant.Duration.seconds(Int64(30))

    /// The scopes `jobs.query` documents; rollout asks for the first.
    public static let scope = "https://www.googleapis.com/auth/bigquery"

    public init(origin: String = "https://bigquery.googleapis.com", project: String, location: String? = nil, call: SourceCaller, clock: any Clock) {
        self.origin = origin.hasSuffix("/") ? String(origin.dropLast()) : origin
        self.project = project
        self.location = location
        self.call = call
        self.clock = clock
    }

    var base: String { origin + "/bigquery/v2/projects/" + percentEncoded(project, keeping: "-._~:") }

    /// Runs `sql` and returns every row; `columns` are the names the result must have, in order. `check` sees each
    /// row (and its number) as its page is read; what it throws fails the query there.
    public func query(
        _ sql: String, parameters: [QueryParameter], columns: [String],
        check: ((_ row: [String?], _ index: Int) throws(SourceError) -> Void)? = nil
    ) throws(SourceError) -> QueryResult {
        let source = call.source
        // The bytes of the query's answers so far, and how many: every answer may hold what is left of the limit.
        var received = 0
        var answers = 0
        func ask(
            _ method: String, _ url: String, body: JSONValue? = nil, what: String
        ) throws(SourceError) -> JSONValue {
            let before = call.bytesReceived
            defer {
                received += call.bytesReceived - before
                answers += 1
            }
            return try call.call(method, url, body: body, what: what, earlier: answers == 0 ? nil : (received, answers))
        }
        func bad(_ field: String, _ reason: String) -> SourceError {
            SourceError(.badAnswer, source: source, "BigQuery's answer: \(field) \(reason)")
        }
        var members: [(String, JSONValue)] = [
            ("query", .string(sql)), ("useLegacySql", .bool(false)), ("parameterMode", .string("NAMED")),
            ("queryParameters", .array(parameters.map(\.json))),
            ("timeoutMs", .number(JSONNumber(Int64(serverWait.microseconds / 1000)))),
            ("maxResults", .number(JSONNumber(pageRows))),
        ]
        if let location { members.append(("location", .string(location))) }
        let request = JSONObject(members)
        let start = clock.now()
        var answer = try ask("POST", base + "/queries", body: .object(request), what: "BigQuery jobs.query")
        guard let job = answer["jobReference"]?["jobId"]?.stringValue, !job.isEmpty else {
            throw bad("jobReference.jobId", "is missing")
        }
        let jobLocation = answer["jobReference"]?["location"]?.stringValue ?? location
        func resultsURL(_ pageToken: String?) -> String {
            var q = ["timeoutMs=\(serverWait.microseconds / 1000)", "maxResults=\(pageRows)"]
            if let jobLocation { q.append("location=" + percentEncoded(jobLocation, keeping: "-._~")) }
            if let pageToken { q.append("pageToken=" + percentEncoded(pageToken, keeping: "-._~")) }
            return base + "/queries/" + percentEncoded(job, keeping: "-._~") + "?" + q.joined(separator: "&")
        }
        func outOfTime(_ what: String) -> SourceError {
            SourceError(.unavailable, source: source, "BigQuery job \(job) \(what) within \(deadline.seconds) s")
        }
        var polls = 0
        var pollWait = firstPollWait
        var asked = start
        while true {
            guard let complete = answer["jobComplete"] else { throw bad("jobComplete", "is missing") }
            guard let done = complete.boolValue else { throw bad("jobComplete", "is \(complete.kindName), not a boolean") }
            if let errors = answer["errors"]?.arrayValue, !errors.isEmpty {
                let m = errors.first?["message"]?.stringValue ?? "an error"
                throw SourceError(.refused, source: source, "BigQuery job \(job) \(done ? "failed" : "reports errors while running"): \(m)")
            }
            if done { break }
            guard clock.now() - start < deadline else { throw outOfTime("did not complete") }
            // The server may answer at once, whatever timeoutMs asked: wait out what is left of pollWait.
            let left = deadline.microseconds - (clock.now() - start).microseconds
            let pause = min(pollWait.microseconds - (clock.now() - asked).microseconds, left)
            if pause > 0 { call.pause(Instant.Duration(microseconds: pause)) }
            guard clock.now() - start < deadline else { throw outOfTime("did not complete") }
            pollWait = min(pollWait * 2, longestPollWait)
            polls += 1
            asked = clock.now()
            answer = try ask("GET", resultsURL(nil), what: "BigQuery jobs.getQueryResults")
        }
        guard let fields = answer["schema"]?["fields"]?.arrayValue else { throw bad("schema.fields", "is missing") }
        let names = fields.map { $0["name"]?.stringValue ?? "" }
        guard names == columns else { throw bad("schema.fields", "are \(names), expected \(columns)") }
        guard let totalText = answer["totalRows"]?.stringValue, let total = Int(totalText), total >= 0 else {
            throw bad("totalRows", "is not a count in a string")
        }
        guard total <= maximumRows else { throw bad("totalRows", "is \(total), more than the \(maximumRows) accepted") }
        let bytes = answer["totalBytesProcessed"]?.stringValue.flatMap { Int64($0) }
        var rows: [[String?]] = []
        rows.reserveCapacity(total)
        var seenTokens: Set<String> = []
        var pages = 0
        while true {
            pages += 1
            for (i, row) in (answer["rows"]?.arrayValue ?? []).enumerated() {
                guard let cells = row["f"]?.arrayValue, cells.count == columns.count else {
                    throw bad("rows[\(rows.count)].f", "does not hold \(columns.count) cells (page \(pages), row \(i))")
                }
                var out: [String?] = []
                for (c, cell) in cells.enumerated() {
                    guard let v = cell["v"] else { throw bad("rows[\(rows.count)].f[\(c)].v", "is missing") }
                    if v.isNull { out.append(nil); continue }
                    guard let s = v.stringValue else { throw bad("rows[\(rows.count)].f[\(c)].v (\(columns[c]))", "is \(v.kindName), not a string") }
                    out.append(s)
                }
                try check?(out, rows.count)
                rows.append(out)
                guard rows.count <= total else { throw bad("rows", "hold more than totalRows (\(total))") }
            }
            guard let token = answer["pageToken"]?.stringValue, !token.isEmpty else { break }
            guard seenTokens.insert(token).inserted else { throw bad("pageToken", "repeats an earlier page's token") }
            // The first answer may hold no rows yet (a large result is paged from the start); a later page that
            // holds none but names another is a server paging without end.
            guard pages == 1 || !(answer["rows"]?.arrayValue ?? []).isEmpty else {
                throw bad("pageToken", "names a next page after page \(pages), which held no rows")
            }
            guard pages < maximumPages else { throw bad("pageToken", "names a page past the \(maximumPages) accepted") }
            guard clock.now() - start < deadline else { throw outOfTime("was still paging (pageToken after page \(pages))") }
            answer = try ask("GET", resultsURL(token), what: "BigQuery jobs.getQueryResults")
            if answer["jobComplete"]?.boolValue == false { throw bad("jobComplete", "is false on a later page") }
        }
        guard rows.count == total else { throw bad("rows", "hold \(rows.count) rows, totalRows says \(total)") }
        return QueryResult(columns: columns, rows: rows, pages: pages, bytesProcessed: bytes, polls: polls)
    }
}
