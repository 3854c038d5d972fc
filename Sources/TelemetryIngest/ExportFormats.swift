import JSON
import Rollout
import Telemetry
import Timekeeping

/// Whether a row of an export was counted or left aside as not ours.
public enum RowOutcome: Sendable {
    case recorded
    /// Another event, or another platform: real exports hold much more than our events.
    case ignored
}

/// A parameter value of a GA4 export row: the first non-null of `string_value`, `int_value`, `double_value`
/// and `float_value`.
enum ParameterValue {
    case absent
    case string(ByteSpan)
    case integer(Int64)
    case double(Double)

    var isAbsent: Bool { if case .absent = self { true } else { false } }

    func integer(_ name: String) throws(LineError) -> Int64 {
        switch self {
        case .integer(let v): return v
        case .double(let d) where d.rounded() == d && abs(d) < 9e15: return Int64(d)
        case .string(let s):
            var inner = JSONScanner(s.raw, names: nil)
            if !s.escaped, let v = try? inner.integer(), inner.p == inner.end { return v }
            throw LineError("parameter \(name) = \"\(s.text)\" is not an integer")
        default: throw LineError("parameter \(name) is not an integer")
        }
    }

    func text(_ name: String) throws(LineError) -> ByteSpan {
        guard case .string(let s) = self else { throw LineError("parameter \(name) is not a string") }
        return s
    }
}

/// Rows of the Google Analytics 4 BigQuery export (FACTS §6), one JSON object per line.
///
/// Events read (others are ignored, as are rows whose `platform` is not `IOS`):
/// - `AppAttestSuccess` → attestation success.
/// - `AppAttestFailure` → failure; the class from the event parameter `error_class` (a class name or
///   `rejected`), else `error_code` (the `DCError.Code` integer); a parameter `reason` gives the exchange
///   server's reason and, alone, means a rejection.
/// - `session_start` → session start (GA4 logs it automatically).
/// - `app_exception` → crash (Crashlytics logs it to Analytics), fatal unless the parameter `fatal` is 0.
/// - `AppAttestConfigFetch` → config fetch; the template version from the parameter `template_version`.
///
/// The cohort comes from the event parameter `AppAttestCohort`, else the user property of that name, else
/// `none`; the provider from the event parameter `provider`. The installation is `user_pseudo_id`, the time
/// `event_timestamp` (microseconds), the OS `device.operating_system_version` and the app `app_info.version`.
public enum GA4Format {
    public static func read(
        _ line: UnsafeRawBufferPointer, into batch: TelemetryBatch, window: EventTimeWindow, names: MemberNames
    ) throws(LineError) -> RowOutcome
    {
        var s = JSONScanner(line, names: names)
        var object = try s.beginObject()
        var name: ByteSpan?
        var time: Int64?
        var id: ByteSpan?
        var platform: ByteSpan?
        var osMajor: UInt8 = 0
        var params = Parameters()
        var cohortProperty = ParameterValue.absent
        while let key = try s.member(&object) {
            if key.equals("event_name") {
                name = try s.string()
            } else if key.equals("event_timestamp") {
                time = try s.integer()
            } else if key.equals("user_pseudo_id") {
                id = s.null() ? nil : try s.string()
            } else if key.equals("platform") {
                platform = s.null() ? nil : try s.string()
            } else if key.equals("event_params") {
                try readParameters(&s) { k, v in params.take(k, v) }
            } else if key.equals("user_properties") {
                try readParameters(&s) { k, v in if k.equals("AppAttestCohort") { cohortProperty = v } }
            } else if key.equals("device") {
                if !s.null() {
                    try readObject(&s) { k, s throws(LineError) in
                        if k.equals("operating_system_version"), !s.null() {
                            osMajor = osMajorVersion(try s.string().raw)
                        } else {
                            try s.skipValue()
                        }
                    }
                }
            } else {
                try s.skipValue()
            }
        }
        try s.finish()
        guard let name else { throw LineError("missing event_name") }
        if let platform, !platform.equals("IOS") { return .ignored }
        let kind: CounterKind
        var detail: UInt16 = 0
        var version: Int64 = 0
        if name.equals("session_start") {
            kind = .session
        } else if name.equals("AppAttestSuccess") {
            kind = .attestationSuccess
        } else if name.equals("AppAttestFailure") {
            kind = .attestationFailure
            detail = try failureDetail(params, batch)
        } else if name.equals("app_exception") {
            kind = .crash
            var isFatal = true
            if !params.fatal.isAbsent { isFatal = try params.fatal.integer("fatal") != 0 }
            detail = isFatal ? 1 : 0
        } else if name.equals("AppAttestConfigFetch") {
            kind = .configFetch
            guard !params.templateVersion.isAbsent else {
                throw LineError("AppAttestConfigFetch without the parameter template_version")
            }
            version = try params.templateVersion.integer("template_version")
        } else {
            return .ignored
        }
        guard let time else { throw LineError("missing event_timestamp") }
        try window.check(time, field: "event_timestamp")
        guard let id, id.count > 0 else { throw LineError("missing user_pseudo_id") }
        try checkInstallationID(id, field: "user_pseudo_id")
        let cohortValue = params.cohort.isAbsent ? cohortProperty : params.cohort
        let cohort = cohortValue.isAbsent ? .none : try NativeFormat.cohort(try cohortValue.text("AppAttestCohort"))
        let provider =
            params.provider.isAbsent ? .unspecified : try NativeFormat.provider(try params.provider.text("provider"))
        record(
            batch, time: time, id: id, kind: kind, cohort: cohort, provider: provider, detail: detail, osMajor: osMajor,
            version: version)
        return .recorded
    }

    static func failureDetail(_ params: Parameters, _ batch: TelemetryBatch) throws(LineError) -> UInt16 {
        let reason: String? = params.reason.isAbsent ? nil : try params.reason.text("reason").text
        if !params.errorClass.isAbsent {
            let text = try params.errorClass.text("error_class")
            if text.equals("rejected") { return batch.failureDetail(.rejected(reason: reason ?? "")) }
            return try NativeFormat.errorDetail(text, batch)
        }
        if !params.errorCode.isAbsent {
            let code = try params.errorCode.integer("error_code")
            guard let c = AttestationErrorClass(dcErrorCode: code) else {
                throw LineError("error_code \(code) is not a DCError code (0 ... 4)")
            }
            return UInt16(c.dcErrorCode!)
        }
        if let reason { return batch.failureDetail(.rejected(reason: reason)) }
        throw LineError("AppAttestFailure without error_class, error_code or reason")
    }

    /// The event parameters we read.
    struct Parameters {
        var cohort = ParameterValue.absent
        var errorClass = ParameterValue.absent
        var errorCode = ParameterValue.absent
        var reason = ParameterValue.absent
        var fatal = ParameterValue.absent
        var templateVersion = ParameterValue.absent
        var provider = ParameterValue.absent

        @inline(__always)
        mutating func take(_ key: ByteSpan, _ value: ParameterValue) {
            if key.equals("AppAttestCohort") {
                cohort = value
            } else if key.equals("error_class") {
                errorClass = value
            } else if key.equals("error_code") {
                errorCode = value
            } else if key.equals("reason") {
                reason = value
            } else if key.equals("fatal") {
                fatal = value
            } else if key.equals("template_version") {
                templateVersion = value
            } else if key.equals("provider") {
                provider = value
            }
        }
    }

    /// Walks `[{key, value: {string_value | int_value | double_value | float_value}}]` (or null).
    static func readParameters(
        _ s: inout JSONScanner, _ body: (ByteSpan, ParameterValue) throws(LineError) -> Void
    ) throws(LineError) {
        if s.null() { return }
        try s.beginArray()
        var first = true
        while try s.element(&first) {
            var inner = try s.beginObject()
            var key: ByteSpan?
            var value = ParameterValue.absent
            while let k = try s.member(&inner) {
                if k.equals("key") {
                    key = try s.string()
                } else if k.equals("value"), !s.null() {
                    try readObject(&s) { vk, s throws(LineError) in
                        if !value.isAbsent {
                            try s.skipValue()
                        } else if s.null() {
                            return
                        } else if vk.equals("string_value") {
                            value = .string(try s.string())
                        } else if vk.equals("int_value") {
                            value = .integer(try s.integer())
                        } else if vk.equals("double_value") || vk.equals("float_value") {
                            value = .double(try s.number())
                        } else {
                            try s.skipValue()
                        }
                    }
                } else {
                    try s.skipValue()
                }
            }
            guard let key else { throw LineError("a parameter without \"key\" at column \(s.column)") }
            try body(key, value)
        }
    }
}

/// Walks an object's members, handing each key and the scanner positioned at its value to `body`, which must
/// consume the value.
@inline(__always)
func readObject(_ s: inout JSONScanner, _ body: (ByteSpan, inout JSONScanner) throws(LineError) -> Void)
    throws(LineError)
{
    var object = try s.beginObject()
    while let k = try s.member(&object) { try body(k, &s) }
}

@inline(__always)
func record(
    _ batch: TelemetryBatch, time: Int64, id: ByteSpan, kind: CounterKind, cohort: Cohort,
    provider: AttestationProvider,
    detail: UInt16, osMajor: UInt8, version: Int64
) {
    if id.escaped {
        var text = id.text
        text.withUTF8 {
            batch.record(
                time: time, id: UnsafeRawBufferPointer($0), kind: kind, cohort: cohort, provider: provider,
                detail: detail,
                osMajor: osMajor, templateVersion: version)
        }
    } else {
        batch.record(
            time: time, id: id.raw, kind: kind, cohort: cohort, provider: provider, detail: detail, osMajor: osMajor,
            templateVersion: version)
    }
}

/// Rows of the Crashlytics BigQuery export (FACTS §6), one JSON object per line; every iOS row is a crash.
///
/// Fatal when `is_fatal` is true (or, in the newer schema, `error_type` is `FATAL`); the cohort from the custom
/// key `AppAttestCohort`; the installation is `installation_uuid`, the time `event_timestamp` (a timestamp
/// text such as `2026-05-20 10:00:00.123456 UTC` or RFC 3339, or integer microseconds), the OS
/// `operating_system.display_version`, the app `application.display_version`. Rows whose `platform` is not
/// `IOS` are ignored. Crashlytics' installation ids differ from Analytics' `user_pseudo_id`: crash-free users
/// then compare crashed installations with session-reporting installations of the same cohort, which is sound
/// as long as both describe the same population.
public enum CrashlyticsFormat {
    public static func read(
        _ line: UnsafeRawBufferPointer, into batch: TelemetryBatch, window: EventTimeWindow, names: MemberNames
    ) throws(LineError) -> RowOutcome
    {
        var s = JSONScanner(line, names: names)
        var object = try s.beginObject()
        var time: Int64?
        var id: ByteSpan?
        var fatal: Bool?
        var platform: ByteSpan?
        var osMajor: UInt8 = 0
        var cohort = ParameterValue.absent
        while let key = try s.member(&object) {
            if key.equals("event_timestamp") {
                if s.peek() == 0x22 {
                    let text = try s.string()
                    do {
                        time = try ISO8601.parseReportingError(text.text).microseconds
                    } catch {
                        throw LineError("event_timestamp \(error)")
                    }
                } else {
                    time = try s.integer()
                }
            } else if key.equals("installation_uuid") {
                id = s.null() ? nil : try s.string()
            } else if key.equals("is_fatal") {
                if !s.null() { fatal = try s.bool() }
            } else if key.equals("error_type") {
                if !s.null() {
                    let t = try s.string()
                    if fatal == nil { fatal = !t.equals("NON_FATAL") }
                }
            } else if key.equals("platform") {
                platform = s.null() ? nil : try s.string()
            } else if key.equals("operating_system") {
                if !s.null() {
                    try readObject(&s) { k, s throws(LineError) in
                        if k.equals("display_version"), !s.null() {
                            osMajor = osMajorVersion(try s.string().raw)
                        } else {
                            try s.skipValue()
                        }
                    }
                }
            } else if key.equals("custom_keys") {
                if !s.null() {
                    try s.beginArray()
                    var firstKey = true
                    while try s.element(&firstKey) {
                        var k: ByteSpan?
                        var v = ParameterValue.absent
                        try readObject(&s) { m, s throws(LineError) in
                            if m.equals("key") {
                                k = try s.string()
                            } else if m.equals("value"), s.peek() == 0x22 {
                                v = .string(try s.string())
                            } else {
                                try s.skipValue()
                            }
                        }
                        if let k, k.equals("AppAttestCohort") { cohort = v }
                    }
                }
            } else {
                try s.skipValue()
            }
        }
        try s.finish()
        if let platform, !platform.equals("IOS") { return .ignored }
        guard let time else { throw LineError("missing event_timestamp") }
        try window.check(time, field: "event_timestamp")
        guard let id, id.count > 0 else { throw LineError("missing installation_uuid") }
        try checkInstallationID(id, field: "installation_uuid")
        guard let fatal else { throw LineError("missing is_fatal (or error_type)") }
        let c = cohort.isAbsent ? .none : try NativeFormat.cohort(try cohort.text("AppAttestCohort"))
        record(
            batch, time: time, id: id, kind: .crash, cohort: c, provider: .unspecified, detail: fatal ? 1 : 0,
            osMajor: osMajor, version: 0)
        return .recorded
    }
}
