import Foundation
import JSON
import Rollout
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry
@testable import TelemetryIngest

/// Issue 13: limits on what one line of telemetry can carry, each refused by its line number and field.
@Suite("ingest limits")
struct IngestLimitTests {
    static let now = Instant(seconds: 1_780_086_400)
    static let started = Instant(seconds: 1_779_000_000)
    static let window = EventTimeWindow(now: now, rolloutStart: started)

    func line(t: Int64, id: String = "fid-a", kind: String = "session") -> String {
        #"{"t":\#(t),"i":"\#(id)","k":"\#(kind)","c":"enabled"}"#
    }

    @Test("a line with a 200 MB installation id is refused without being buffered, and the next line is read")
    func hugeIDIsRefusedByLineLength() {
        let ingest = TelemetryIngest(format: .native, window: Self.window)
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
        let start = Array(#"{"t":1780000000000000,"k":"session","i":""#.utf8)
        start.withUnsafeBytes { ingest.feed($0) }
        for _ in 0..<200 { chunk.withUnsafeBytes { ingest.feed($0) } }
        Array(("\"}\n" + line(t: 1_780_000_001_000_000) + "\n").utf8).withUnsafeBytes { ingest.feed($0) }
        ingest.finish()
        #expect(ingest.problemCount == 1)
        #expect(ingest.problems.first?.line == 1)
        let length = start.count + 200 << 20 + 2
        #expect(ingest.problems.first?.reason == "the line is \(length) bytes long (at most 1048576); skipped unread")
        #expect(ingest.recorded == 1)
        #expect(ingest.batch.installationCount == 1)
    }

    @Test("an installation id over 256 bytes is refused naming the field, in every format")
    func longIDIsRefused() {
        let long = String(repeating: "x", count: 257)
        let native = ingest(line(t: 1_780_000_000_000_000, id: long) + "\n" + line(t: 1_780_000_000_000_000, id: String(repeating: "y", count: 256)), format: .native, window: Self.window)
        #expect(native.problems == [IngestProblem(line: 1, reason: "installation id \"i\" is 257 bytes long (at most 256)")])
        #expect(native.recorded == 1)
        let ga4 = ingest(
            #"{"event_name":"session_start","event_timestamp":"1780000000000000","user_pseudo_id":"\#(long)","platform":"IOS"}"#,
            format: .ga4, window: Self.window)
        #expect(ga4.problems.map(\.reason) == ["user_pseudo_id is 257 bytes long (at most 256)"])
        let crash = ingest(
            #"{"event_timestamp":1780000000000000,"installation_uuid":"\#(long)","is_fatal":true,"platform":"IOS"}"#,
            format: .crashlytics, window: Self.window)
        #expect(crash.problems.map(\.reason) == ["installation_uuid is 257 bytes long (at most 256)"])
    }

    @Test("an event 30 days in the future is refused by its line number and never stored")
    func futureEventIsRefused() throws {
        let future = Self.now + .days(30)
        let text = [
            line(t: 1_780_000_000_000_000, id: "ok"),
            line(t: future.microseconds, id: "future"),
            line(t: Int64.max, id: "max"),
            line(t: (Self.now + .minutes(5)).microseconds, id: "skewed"),
            line(t: (Self.now + .minutes(5)).microseconds + 1, id: "beyond"),
        ].joined(separator: "\n")
        let i = ingest(text, format: .native, window: Self.window)
        #expect(i.problems.map(\.line) == [2, 3, 5])
        #expect(i.problems[0].reason.hasPrefix("event time \"t\" \(future.iso8601) is in the future (latest accepted "))
        var ids: [String] = []
        try i.batch.forEachInstallation { id, _ in ids.append(id) }
        #expect(ids == ["ok", "skewed"])
        #expect(i.batch.latest == Self.now + .minutes(5))
    }

    @Test("events older than 30 days before the rollout's start are refused; with no rollout only the epoch bounds")
    func oldEventIsRefused() {
        let old = (Self.started - .days(30)).microseconds - 1
        let i = ingest(line(t: old) + "\n" + line(t: old + 1) + "\n" + line(t: -1), format: .native, window: Self.window)
        #expect(i.problems.map(\.line) == [1, 3])
        #expect(i.problems[0].reason.contains("is too old"))
        let none = EventTimeWindow(now: Self.now, rolloutStart: nil)
        #expect(none.earliest == Instant(microseconds: 0))
        #expect(ingest(line(t: 1), format: .native, window: none).problems.isEmpty)
        let crash = ingest(
            #"{"event_timestamp":"2027-01-01T00:00:00Z","installation_uuid":"c","is_fatal":true,"platform":"IOS"}"#,
            format: .crashlytics, window: Self.window)
        #expect(crash.problems.first?.reason.hasPrefix("event_timestamp 2027-01-01T00:00:00.000Z is in the future") == true)
    }

    @Test("a duplicate key is a bad line in strict mode and a counted warning otherwise")
    func duplicateKeys() throws {
        let text = #"{"t":1780000000000000,"i":"a","k":"session","i":"b"}"# + "\n" + line(t: 1_780_000_000_000_000, id: "c")
            + "\n" + #"{"t":1780000000000000,"i":"d","k":"session","x":{"y":1,"y":2}}"#
        let strict = ingest(text, format: .native, window: Self.window, duplicateKeys: .reject)
        #expect(strict.problems.map(\.line) == [1, 3])
        #expect(strict.problems[0].reason == #"duplicate member name "i" at column 45"#)
        #expect(strict.recorded == 1)
        let lenient = ingest(text, format: .native, window: Self.window, duplicateKeys: .count)
        #expect(lenient.problems.isEmpty)
        #expect(lenient.recorded == 3)
        #expect(lenient.warningCount == 2)
        #expect(lenient.warnings.map(\.line) == [1, 3])
        #expect(lenient.warnings[0].reason.hasPrefix(#"member name "i" given twice"#))
        var ids: [String] = []
        try lenient.batch.forEachInstallation { id, _ in ids.append(id) }
        #expect(ids == ["b", "c", "d"])
        // An escaped spelling of the same name is the same name, as JSONParser decides.
        let escaped = ingest(#"{"t":1780000000000000,"i":"a","k":"session","\u0069":"b"}"#, format: .native, window: Self.window, duplicateKeys: .reject)
        #expect(escaped.problemCount == 1)
    }

    @Test("problem reasons quoting the line are escaped for the terminal")
    func reasonsAreEscaped() {
        let i = ingest(#"{"t":1780000000000000,"i":"a","k":"\u001b[2J"}"#, format: .native, window: Self.window)
        #expect(i.problems.map(\.reason) == [#"unknown kind "\u001b[2J" (expected success, failure, crash, session or fetch)"#])
    }

    @Test("the hash tables are keyed: the same id hashes differently under another key")
    func hashIsKeyed() {
        let id = Array("fid-7Yc2".utf8)
        let a = id.withUnsafeBytes { hashBytes($0.baseAddress!, $0.count, key: (1, 2)) }
        let b = id.withUnsafeBytes { hashBytes($0.baseAddress!, $0.count, key: (1, 3)) }
        let c = id.withUnsafeBytes { hashBytes($0.baseAddress!, $0.count, key: (1, 2)) }
        #expect(a != b)
        #expect(a == c)
        #expect(InstallationTable().hashKey == processHashKey)
    }
}
