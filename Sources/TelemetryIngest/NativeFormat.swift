import JSON
import Rollout
import Telemetry

/// The native NDJSON event format: one compact JSON object per line.
///
/// ```
/// {"t":1780000000123456,"i":"fid-7Yc2","k":"failure","e":"serverUnavailable","c":"enabled","p":"appAttest","os":"17.4","app":"3.2.1"}
/// ```
///
/// | key | required | meaning |
/// | --- | --- | --- |
/// | `t` | yes | event time, integer microseconds since the Unix epoch |
/// | `i` | yes | installation id (the Firebase installation ID), a non-empty string |
/// | `k` | yes | kind: `success`, `failure`, `crash`, `session` or `fetch` |
/// | `e` | for `failure` | error class: `serverUnavailable`, `invalidKey`, `invalidInput`, `featureUnsupported`, `unknownSystemFailure` (or its `DCError.Code` integer 0 ... 4), or `rejected:REASON` for a rejection by the exchange server |
/// | `fatal` | no | for `crash`: `true` (default) or `false` |
/// | `v` | for `fetch` | the Remote Config template version fetched (integer, or a string of digits as Firebase writes `versionNumber`) |
/// | `c` | no | cohort: `enabled`, `control` or `none` (default) |
/// | `p` | no | provider: `appAttest`, `deviceCheck` or `debug` |
/// | `os` | no | OS version, e.g. `17.4.1` (only the major version is kept) |
/// | `app` | no | app version |
///
/// Keys may come in any order; unknown keys are ignored so that newer writers stay readable. The reader is a
/// byte scanner that builds no tree and allocates nothing per line. Limits (`IngestLimits`): `t` within the
/// ingest's `EventTimeWindow`, `i` at most 256 bytes, the line at most 1 MiB, no key given twice.
public enum NativeFormat {
    /// Reads one line into `batch`; its time must lie in `window`.
    public static func read(
        _ line: UnsafeRawBufferPointer, into batch: TelemetryBatch, window: EventTimeWindow, names: MemberNames
    ) throws(LineError) {
        var escapedID: String?
        var e = try parse(line, batch, window: window, names: names, escapedID: &escapedID)
        if var text = escapedID {
            text.withUTF8 { record(UnsafeRawBufferPointer($0), e, batch) }
        } else {
            withUnsafeMutablePointer(to: &e) { batch.record(UnsafeMutableBufferPointer(start: $0, count: 1)) }
        }
    }

    static func record(_ id: UnsafeRawBufferPointer, _ e: ParsedEvent, _ batch: TelemetryBatch) {
        batch.record(
            time: e.time, id: id, kind: e.kind, cohort: e.cohort, provider: e.provider, detail: e.detail,
            osMajor: e.osMajor,
            templateVersion: e.version)
    }

    /// Parses one line; an id with escapes comes back decoded in `escapedID` (and `id` of the result is then
    /// not to be used).
    @inline(__always)
    static func parse(
        _ line: UnsafeRawBufferPointer, _ batch: TelemetryBatch, window: EventTimeWindow, names: MemberNames,
        escapedID: inout String?
    ) throws(LineError) -> ParsedEvent
    {
        var s = JSONScanner(line, names: names)
        var object = try s.beginObject()
        var time: Int64?
        var id: ByteSpan?
        var kind: CounterKind?
        var cohort = Cohort.none
        var provider = AttestationProvider.unspecified
        var errorDetail: UInt16?
        var fatal = true
        var version: Int64?
        var osMajor: UInt8 = 0
        while let key = try s.member(&object) {
            if key.escaped {
                try s.skipValue()
                continue
            }
            switch key.count {
            case 1:
                switch key.start.pointee {
                case 0x74: time = try s.integer()  // t
                case 0x69: id = try s.string()  // i
                case 0x6B: kind = try readKind(&s)  // k
                case 0x63: cohort = try readCohort(&s)  // c
                case 0x70: provider = try readProvider(&s)  // p
                case 0x65: errorDetail = try readErrorClass(&s, batch)  // e
                case 0x76: version = try s.integer()  // v
                default: try s.skipValue()
                }
            case 2 where key.equals("os"):
                osMajor = osMajorVersion(try s.string().raw)
            case 3 where key.equals("app"):
                _ = try s.string()
            case 5 where key.equals("fatal"):
                fatal = try s.bool()
            default:
                try s.skipValue()
            }
        }
        try s.finish()
        guard let time else { throw LineError("missing \"t\" (event time in microseconds)") }
        try window.check(time, field: "event time \"t\"")
        guard let id, id.count > 0 else { throw LineError("missing \"i\" (installation id)") }
        try checkInstallationID(id, field: "installation id \"i\"")
        guard let kind else { throw LineError("missing \"k\" (success, failure, crash, session or fetch)") }
        var detail: UInt16 = 0
        switch kind {
        case .attestationFailure:
            guard let errorDetail else { throw LineError("a failure needs \"e\" (its error class)") }
            detail = errorDetail
        case .crash: detail = fatal ? 1 : 0
        case .configFetch:
            guard version != nil else { throw LineError("a fetch needs \"v\" (the template version)") }
        default: break
        }
        if id.escaped { escapedID = id.text }
        return ParsedEvent(
            time: time, id: id.start, idLength: id.count, hash: 0,
            version: version ?? 0, detail: detail, kind: kind, cohort: cohort, provider: provider, osMajor: osMajor)
    }

    @inline(__always)
    static func readKind(_ s: inout JSONScanner) throws(LineError) -> CounterKind {
        let v = try s.string()
        if v.equals("session") { return .session }
        if v.equals("success") { return .attestationSuccess }
        if v.equals("failure") { return .attestationFailure }
        if v.equals("crash") { return .crash }
        if v.equals("fetch") { return .configFetch }
        throw LineError("unknown kind \"\(v.text)\" (expected success, failure, crash, session or fetch)")
    }

    @inline(__always)
    static func readCohort(_ s: inout JSONScanner) throws(LineError) -> Cohort {
        let v = try s.string()
        return try cohort(v)
    }

    @inline(__always)
    static func cohort(_ v: ByteSpan) throws(LineError) -> Cohort {
        if v.equals("enabled") { return .enabled }
        if v.equals("control") { return .control }
        if v.equals("none") || v.count == 0 { return .none }
        guard let c = Cohort(name: v.text) else {
            throw LineError("cohort \"\(v.text)\" is not enabled, control or none")
        }
        return c
    }

    @inline(__always)
    static func readProvider(_ s: inout JSONScanner) throws(LineError) -> AttestationProvider {
        let v = try s.string()
        return try provider(v)
    }

    static func provider(_ v: ByteSpan) throws(LineError) -> AttestationProvider {
        if v.equals("appAttest") { return .appAttest }
        if v.equals("deviceCheck") { return .deviceCheck }
        if v.equals("debug") { return .debug }
        guard let p = AttestationProvider(name: v.text) else {
            throw LineError("provider \"\(v.text)\" is not appAttest, deviceCheck or debug")
        }
        return p
    }

    static func readErrorClass(_ s: inout JSONScanner, _ batch: TelemetryBatch) throws(LineError) -> UInt16 {
        if s.peek() != 0x22 {
            let code = try s.integer()
            guard let c = AttestationErrorClass(dcErrorCode: code) else {
                throw LineError("error code \(code) is not a DCError code (0 ... 4)")
            }
            return UInt16(c.dcErrorCode!)
        }
        return try errorDetail(try s.string(), batch)
    }

    /// The detail code of an error class written as text.
    static func errorDetail(_ v: ByteSpan, _ batch: TelemetryBatch) throws(LineError) -> UInt16 {
        if v.equals("serverUnavailable") { return 4 }
        if v.equals("invalidKey") { return 3 }
        if v.equals("invalidInput") { return 2 }
        if v.equals("featureUnsupported") { return 1 }
        if v.equals("unknownSystemFailure") { return 0 }
        if !v.escaped, v.count >= 8, memcmp(v.start, "rejected", 8) == 0 {
            if v.count == 8 {
                return FailureDetail.rejectedBase
                    + batch.reasonID(bytes: UnsafeRawBufferPointer(start: v.start, count: 0))
            }
            if v.start[8] == 0x3A {
                return FailureDetail.rejectedBase
                    + batch.reasonID(bytes: UnsafeRawBufferPointer(start: v.start + 9, count: v.count - 9))
            }
        }
        guard let c = AttestationErrorClass(name: v.text) else {
            throw LineError(
                "unknown error class \"\(v.text)\" (expected serverUnavailable, invalidKey, invalidInput, "
                    + "featureUnsupported, unknownSystemFailure or rejected:REASON)")
        }
        return batch.failureDetail(c)
    }
}

/// `osMajorVersion` over raw bytes.
@inline(__always)
func osMajorVersion(_ bytes: UnsafeRawBufferPointer) -> UInt8 { majorVersion(bytes) }

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
