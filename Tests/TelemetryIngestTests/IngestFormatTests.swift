import Foundation
import JSON
import Rollout
import Testing
import Timekeeping

@testable import Telemetry
@testable import TelemetryIngest

/// The window of these tests' events: they happen around 1_780_000_000 s (2026-05-28), the rollout started
/// at `rolloutStart`, and now is a day after.
let testWindow = EventTimeWindow(now: Instant(seconds: 1_780_086_400), rolloutStart: Instant(seconds: 1_779_000_000))

/// Reads `text` as one input and returns the ingest (its batch and problems).
func ingest(
    _ text: String, format: TelemetryFormat, chunk: Int? = nil, window: EventTimeWindow = testWindow,
    duplicateKeys: DuplicateKeyPolicy = .count
) -> TelemetryIngest {
    let ingest = TelemetryIngest(format: format, window: window, duplicateKeys: duplicateKeys)
    let bytes = Array(text.utf8)
    let size = chunk ?? max(1, bytes.count)
    var i = 0
    while i < bytes.count {
        let end = min(bytes.count, i + size)
        bytes[i..<end].withUnsafeBytes { ingest.feed($0) }
        i = end
    }
    ingest.finish()
    return ingest
}

extension TelemetryBatch {
    /// Events of `kind` in `cohort` (crashes: fatal only when `fatal` is given).
    func count(_ kind: CounterKind, _ cohort: Cohort, fatal: Bool? = nil, errorClass: ErrorClassBucket? = nil) -> Int64
    {
        CounterTotals(eventTotals()).sum(kind, cohort: cohort, errorClass: errorClass, fatal: fatal)
    }
}

@Suite("Native NDJSON")
struct NativeFormatTests {
    static let lines = """
        {"t":1780000000000000,"i":"fid-a","k":"session","c":"enabled","p":"appAttest","os":"17.4","app":"3.2.1"}
        {"t":1780000001000000,"i":"fid-a","k":"success","c":"enabled","p":"appAttest","os":"17.4","app":"3.2.1"}
        {"t":1780000002000000,"i":"fid-b","k":"failure","e":"serverUnavailable","c":"enabled","p":"appAttest"}
        {"t":1780000002500000,"i":"fid-b","k":"failure","e":4,"c":"enabled","p":"appAttest"}
        {"t":1780000003000000,"i":"fid-c","k":"failure","e":"rejected:nonceMismatch","c":"enabled","p":"appAttest"}
        {"t":1780000004000000,"i":"fid-d","k":"session","c":"control","p":"deviceCheck","os":"16.0"}
        {"t":1780000005000000,"i":"fid-d","k":"crash","c":"control"}
        {"t":1780000006000000,"i":"fid-d","k":"crash","fatal":false,"c":"control"}
        {"t":1780000007000000,"i":"fid-e","k":"fetch","v":"42","c":"none","future":{"nested":[1,2,{"x":null}]}}
        {"k":"session","c":"none","i":"fid-\\u00e9\\"q","t":1780000008000000}
        """

    @Test("every kind, field order, escapes and unknown keys")
    func everyKind() throws {
        let i = ingest(Self.lines, format: .native)
        #expect(i.problems.isEmpty, "\(i.problems)")
        #expect(i.recorded == 10)
        let b = i.batch
        #expect(b.count(.session, .enabled) == 1)
        #expect(b.count(.attestationSuccess, .enabled) == 1)
        #expect(b.count(.attestationFailure, .enabled, errorClass: .serverUnavailable) == 2)
        #expect(b.count(.attestationFailure, .enabled, errorClass: .rejected) == 1)
        #expect(b.reasons == ["nonceMismatch"])
        #expect(b.count(.crash, .control, fatal: true) == 1)
        #expect(b.count(.crash, .control, fatal: false) == 1)
        #expect(b.count(.configFetch, .none) == 1)
        #expect(b.count(.session, .none) == 1)
        var ids: [String: InstallationDelta] = [:]
        try b.forEachInstallation { ids[$0] = $1 }
        #expect(Set(ids.keys) == ["fid-a", "fid-b", "fid-c", "fid-d", "fid-e", "fid-é\"q"])
        #expect(ids["fid-d"]!.crashed(.control) == 1_780_000_005_000_000)
        #expect(ids["fid-d"]!.osMajor == 16)
        #expect(ids["fid-d"]!.provider == .deviceCheck)
        #expect(ids["fid-e"]!.templateVersion == 42)
        #expect(ids["fid-a"]!.sessions == 1)
    }

    @Test("chunk boundaries anywhere give the same result, CRLF too")
    func chunking() {
        let whole = ingest(Self.lines + "\nnot json\n", format: .native)
        for size in [1, 2, 7, 64, 333] {
            let split = ingest(
                Self.lines.replacingOccurrences(of: "\n", with: "\r\n") + "\r\nnot json\r\n", format: .native,
                chunk: size)
            #expect(split.batch.eventTotals() == whole.batch.eventTotals())
            #expect(split.problems == whole.problems)
            #expect(split.batch.installationCount == whole.batch.installationCount)
        }
        #expect(whole.problems == [IngestProblem(line: 11, reason: "expected '{' at column 1, found 'n'")])
    }

    @Test("malformed lines are reported by number with a reason, good lines still count")
    func malformed() {
        let text = """
            {"t":1780000000000000,"i":"a","k":"session","c":"enabled"}
            {"t":1780000000000000,"i":"a","k":"session","c":"enabled"
            {"t":1780000000000000,"k":"session"}
            {"t":"soon","i":"a","k":"session"}
            {"t":1780000000000000,"i":"a","k":"failure"}
            {"t":1780000000000000,"i":"a","k":"failure","e":"tooBusy"}
            {"t":1780000000000000,"i":"a","k":"session","c":"beta"}
            {"t":1780000000000000,"i":"a","k":"fetch"}
            {"t":1780000000000000,"i":"a","k":"session",}

            {"t":1.5,"i":"a","k":"session"}
            {"t":1780000000000000,"i":"a","k":"session"} x
            {"t":1780000000000000,"i":"","k":"session"}
            {"t":1780000000000000,"i":"a","k":"failure","e":7}
            {"t":1780000000000000,"i":"a","k":"session","c":"control"}
            """
        let i = ingest(text, format: .native)
        #expect(i.recorded == 2)
        let reasons = Dictionary(uniqueKeysWithValues: i.problems.map { ($0.line, $0.reason) })
        #expect(Set(reasons.keys) == [2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14])
        #expect(reasons[2]!.contains("unterminated object"))
        #expect(reasons[3] == "missing \"i\" (installation id)")
        #expect(reasons[4]!.contains("expected an integer"))
        #expect(reasons[5] == "a failure needs \"e\" (its error class)")
        #expect(reasons[6]!.hasPrefix("unknown error class \"tooBusy\""))
        #expect(reasons[7] == "cohort \"beta\" is not enabled, control or none")
        #expect(reasons[8] == "a fetch needs \"v\" (the template version)")
        #expect(reasons[9]!.contains("expected a string"))
        #expect(reasons[11]!.contains("not a fraction"))
        #expect(reasons[12]!.contains("unexpected text after the JSON value"))
        #expect(reasons[13] == "missing \"i\" (installation id)")
        #expect(reasons[14] == "error code 7 is not a DCError code (0 ... 4)")
    }
}

/// Hand-written rows following the GA4 BigQuery export schema (FACTS §6), with the noise real rows carry.
enum GA4Rows {
    static func row(
        name: String, micros: Int64, user: String, params: String, properties: String = "[]", os: String = "iOS 17.4.1",
        platform: String = "IOS"
    ) -> String {
        """
        {"event_date":"20260528","event_timestamp":"\(micros)","event_name":"\(name)","event_params":[{"key":"ga_session_id","value":{"string_value":null,"int_value":"1780000000","float_value":null,"double_value":null}},\(params)],"event_previous_timestamp":null,"event_value_in_usd":null,"event_bundle_sequence_id":"7","event_server_timestamp_offset":"1234","user_id":null,"user_pseudo_id":"\(user)","privacy_info":{"analytics_storage":"Yes","ads_storage":"No","uses_transient_token":"No"},"user_properties":\(properties),"user_first_touch_timestamp":"1779000000000000","user_ltv":null,"device":{"category":"mobile","mobile_brand_name":"Apple","mobile_model_name":"iPhone 15","operating_system":"iOS","operating_system_version":"\(os)","language":"en-us","is_limited_ad_tracking":"No","time_zone_offset_seconds":"7200"},"geo":{"city":"Berlin","country":"Germany"},"app_info":{"id":"com.example.app","version":"3.2.1","firebase_app_id":"1:1234:ios:abcd"},"traffic_source":{"name":"(direct)","medium":"(none)","source":"(direct)"},"stream_id":"4242","platform":"\(platform)","items":[],"is_active_user":true}
        """
    }

    static func param(_ key: String, string: String) -> String {
        #"{"key":"\#(key)","value":{"string_value":"\#(string)","int_value":null,"float_value":null,"double_value":null}}"#
    }

    static func param(_ key: String, int: Int64, quoted: Bool = true) -> String {
        let v = quoted ? "\"\(int)\"" : "\(int)"
        return
            #"{"key":"\#(key)","value":{"string_value":null,"int_value":\#(v),"float_value":null,"double_value":null}}"#
    }

    static let cohortProperty =
        #"[{"key":"AppAttestCohort","value":{"string_value":"control","int_value":null,"set_timestamp_micros":"1779999999000000"}}]"#

    /// 3 enabled sessions, 2 control sessions (one via the user property), 4 enabled successes, failures of
    /// three kinds, 2 crashes (1 fatal), 1 fetch, and rows we must ignore.
    static let file: [String] = [
        row(
            name: "session_start", micros: 1_780_000_000_000_000, user: "u1",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "session_start", micros: 1_780_000_010_000_000, user: "u2",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "session_start", micros: 1_780_000_020_000_000, user: "u1",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "session_start", micros: 1_780_000_030_000_000, user: "u3",
            params: param("AppAttestCohort", string: "control")),
        row(
            name: "session_start", micros: 1_780_000_040_000_000, user: "u4",
            params: param("engagement_time_msec", int: 10), properties: cohortProperty),
        row(
            name: "AppAttestSuccess", micros: 1_780_000_001_000_000, user: "u1",
            params: param("AppAttestCohort", string: "enabled") + "," + param("provider", string: "appAttest")),
        row(
            name: "AppAttestSuccess", micros: 1_780_000_002_000_000, user: "u1",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "AppAttestSuccess", micros: 1_780_000_011_000_000, user: "u2",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "AppAttestSuccess", micros: 1_780_000_012_000_000, user: "u2",
            params: param("AppAttestCohort", string: "enabled")),
        row(
            name: "AppAttestFailure", micros: 1_780_000_013_000_000, user: "u2",
            params: param("AppAttestCohort", string: "enabled") + "," + param("error_code", int: 4)),
        row(
            name: "AppAttestFailure", micros: 1_780_000_014_000_000, user: "u2",
            params: param("error_code", int: 3, quoted: false) + "," + param("AppAttestCohort", string: "enabled")),
        row(
            name: "AppAttestFailure", micros: 1_780_000_015_000_000, user: "u5",
            params: param("AppAttestCohort", string: "enabled") + "," + param("error_class", string: "rejected") + ","
                + param("reason", string: "counterNotIncreasing")),
        row(
            name: "app_exception", micros: 1_780_000_016_000_000, user: "u2",
            params: param("AppAttestCohort", string: "enabled") + "," + param("fatal", int: 1)),
        row(
            name: "app_exception", micros: 1_780_000_031_000_000, user: "u3",
            params: param("AppAttestCohort", string: "control") + "," + param("fatal", int: 0)),
        row(
            name: "AppAttestConfigFetch", micros: 1_780_000_032_000_000, user: "u3",
            params: param("AppAttestCohort", string: "control") + "," + param("template_version", int: 42)),
        row(
            name: "screen_view", micros: 1_780_000_033_000_000, user: "u3",
            params: param("firebase_screen", string: "Home")),
        row(
            name: "session_start", micros: 1_780_000_034_000_000, user: "android-1",
            params: param("AppAttestCohort", string: "enabled"), platform: "ANDROID"),
    ]
}

@Suite("GA4 BigQuery export rows")
struct GA4FormatTests {
    @Test("hand-written rows give the right counts per cohort")
    func countsPerCohort() throws {
        let i = ingest(GA4Rows.file.joined(separator: "\n") + "\n", format: .ga4)
        #expect(i.problems.isEmpty, "\(i.problems)")
        #expect(i.recorded == 15)
        #expect(i.ignored == 2)
        let b = i.batch
        #expect(b.count(.session, .enabled) == 3)
        #expect(b.count(.session, .control) == 2)
        #expect(b.count(.session, .none) == 0)
        #expect(b.count(.attestationSuccess, .enabled) == 4)
        #expect(b.count(.attestationFailure, .enabled) == 3)
        #expect(b.count(.attestationFailure, .enabled, errorClass: .serverUnavailable) == 1)
        #expect(b.count(.attestationFailure, .enabled, errorClass: .invalidKey) == 1)
        #expect(b.count(.attestationFailure, .enabled, errorClass: .rejected) == 1)
        #expect(b.reasons == ["counterNotIncreasing"])
        #expect(b.count(.crash, .enabled, fatal: true) == 1)
        #expect(b.count(.crash, .control, fatal: false) == 1)
        #expect(b.count(.configFetch, .control) == 1)
        #expect(b.installationCount == 5)
        var u3: InstallationDelta?
        try b.forEachInstallation { id, d in if id == "u3" { u3 = d } }
        #expect(u3?.templateVersion == 42)
        #expect(u3?.osMajor == 17)
        let providers = CounterTotals(b.eventTotals()).sum(.attestationSuccess, cohort: .enabled, provider: .appAttest)
        #expect(providers == 1)
    }

    @Test("malformed rows are reported by line")
    func malformed() {
        let rows = [
            GA4Rows.file[0],
            #"{"event_name":"session_start","event_timestamp":"1780000000000000","user_pseudo_id":null,"platform":"IOS"}"#,
            GA4Rows.row(
                name: "AppAttestFailure", micros: 1_780_000_000_000_000, user: "u9",
                params: GA4Rows.param("AppAttestCohort", string: "enabled")),
            GA4Rows.row(
                name: "session_start", micros: 1_780_000_000_000_000, user: "u9",
                params: GA4Rows.param("AppAttestCohort", string: "beta")),
            String(GA4Rows.file[1].dropLast(40)),
            GA4Rows.row(
                name: "AppAttestFailure", micros: 1_780_000_000_000_000, user: "u9",
                params: GA4Rows.param("error_code", int: 9)),
            #"{"event_name":"session_start","user_pseudo_id":"u9","platform":"IOS"}"#,
            GA4Rows.row(
                name: "AppAttestConfigFetch", micros: 1_780_000_000_000_000, user: "u9",
                params: GA4Rows.param("template_version", string: "v42")),
            GA4Rows.file[2],
        ]
        let i = ingest(rows.joined(separator: "\n"), format: .ga4)
        #expect(i.recorded == 2)
        let reasons = Dictionary(uniqueKeysWithValues: i.problems.map { ($0.line, $0.reason) })
        #expect(Set(reasons.keys) == [2, 3, 4, 5, 6, 7, 8])
        #expect(reasons[2] == "missing user_pseudo_id")
        #expect(reasons[3] == "AppAttestFailure without error_class, error_code or reason")
        #expect(reasons[4] == "cohort \"beta\" is not enabled, control or none")
        #expect(reasons[5]!.contains("column"))
        #expect(reasons[6] == "error_code 9 is not a DCError code (0 ... 4)")
        #expect(reasons[7] == "missing event_timestamp")
        #expect(reasons[8] == "parameter template_version = \"v42\" is not an integer")
    }
}

/// Hand-written rows following the Crashlytics BigQuery export schema (FACTS §6).
enum CrashlyticsRows {
    static func row(
        id: String, time: String, fatal: String = "true", cohort: String? = "enabled", platform: String = "IOS"
    ) -> String {
        let keys =
            cohort.map { #"[{"key":"screen","value":"Home"},{"key":"AppAttestCohort","value":"\#($0)"}]"# } ?? "[]"
        return """
            {"platform":"\(platform)","bundle_identifier":"com.example.app","event_id":"e-\(id)-\(time.hashValue & 0xffff)","is_fatal":\(fatal),"issue_id":"3f2a9c","issue_title":"AppCheckCore.swift line 88","issue_subtitle":"EXC_BREAKPOINT","event_timestamp":"\(time)","received_timestamp":"\(time)","device":{"manufacturer":"Apple","model":"iPhone15,2","architecture":"arm64e"},"memory":{"used":"412000000","free":"90000000"},"storage":{"used":"1","free":"2"},"operating_system":{"display_version":"17.4.1","name":"iOS","modification_state":"UNMODIFIED","type":"IOS","device_type":"MOBILE"},"application":{"build_version":"321","display_version":"3.2.1"},"user":{"name":null,"email":null,"id":null},"custom_keys":\(keys),"installation_uuid":"\(id)","crashlytics_sdk_version":"10.24.0","app_orientation":"PORTRAIT","device_orientation":"PORTRAIT","process_state":"FOREGROUND","logs":[],"breadcrumbs":[],"blame_frame":{"line":"88","file":"AppCheckCore.swift","symbol":"attest()","offset":"12","address":"4096","library":"App","owned":true,"blamed":true},"exceptions":[],"errors":[],"threads":[{"crashed":true,"frames":[{"line":"88","symbol":"attest()"}]}]}
            """
    }

    static let file: [String] = [
        row(id: "i1", time: "2026-05-28 20:26:40.123456 UTC"),
        row(id: "i1", time: "2026-05-28 20:27:40.000001 UTC"),
        row(id: "i2", time: "2026-05-28T20:28:00.5Z", fatal: "false"),
        row(id: "i3", time: "2026-05-28 20:29:00 UTC", cohort: "control"),
        row(id: "i4", time: "2026-05-28 20:29:30 UTC", fatal: "false", cohort: "control"),
        row(id: "i5", time: "2026-05-28 20:30:00 UTC", cohort: nil),
        row(id: "a1", time: "2026-05-28 20:30:00 UTC", platform: "ANDROID"),
    ]
}

@Suite("Crashlytics BigQuery export rows")
struct CrashlyticsFormatTests {
    @Test("hand-written rows give the right counts per cohort")
    func countsPerCohort() throws {
        let i = ingest(CrashlyticsRows.file.joined(separator: "\n"), format: .crashlytics)
        #expect(i.problems.isEmpty, "\(i.problems)")
        #expect(i.recorded == 6)
        #expect(i.ignored == 1)
        let b = i.batch
        #expect(b.count(.crash, .enabled, fatal: true) == 2)
        #expect(b.count(.crash, .enabled, fatal: false) == 1)
        #expect(b.count(.crash, .control, fatal: true) == 1)
        #expect(b.count(.crash, .control, fatal: false) == 1)
        #expect(b.count(.crash, .none, fatal: true) == 1)
        var crashedAt: [String: Int64?] = [:]
        try b.forEachInstallation { id, d in crashedAt[id] = d.crashed(d.cohort) }
        #expect(crashedAt["i1"] == .some(ISO8601.parse("2026-05-28T20:26:40.123456Z")!.microseconds))
        #expect(crashedAt["i2"] == .some(nil))
        #expect(b.earliest == ISO8601.parse("2026-05-28T20:26:40.123456Z"))
    }

    @Test("malformed rows are reported by line")
    func malformed() {
        let rows = [
            CrashlyticsRows.file[0],
            CrashlyticsRows.row(id: "i9", time: "yesterday"),
            CrashlyticsRows.row(id: "i9", time: "2026-05-28 20:29:00 UTC").replacingOccurrences(
                of: #""is_fatal":true,"#, with: ""),
            CrashlyticsRows.row(id: "", time: "2026-05-28 20:29:00 UTC"),
            CrashlyticsRows.row(id: "i9", time: "2026-05-28 20:29:00 UTC", cohort: "treatment"),
            "[]",
        ]
        let i = ingest(rows.joined(separator: "\n"), format: .crashlytics)
        #expect(i.recorded == 1)
        #expect(
            i.problems == [
                IngestProblem(line: 2, reason: "event_timestamp 'yesterday' is not an ISO 8601 instant: expected YYYY-MM-DDTHH:MM:SS"),
                IngestProblem(line: 3, reason: "missing is_fatal (or error_type)"),
                IngestProblem(line: 4, reason: "missing installation_uuid"),
                IngestProblem(line: 5, reason: "cohort \"treatment\" is not enabled, control or none"),
                IngestProblem(line: 6, reason: "expected '{' at column 1, found '['"),
            ])
    }
}
