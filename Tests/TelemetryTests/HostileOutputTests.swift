import Foundation
import TestSupport
import Testing

/// Issue 13: text from device telemetry reaches the terminal only escaped.
@Suite("hostile telemetry output")
struct HostileOutputTests {
    static let hostileJSON = #"rejected:\u001b]0;pwned\u0007\u001b[2J"#

    @Test("an error class with a title change and a screen clear comes out of 'rollout telemetry' escaped")
    func telemetryTextEscapesErrorClasses() throws {
        let db = try TestSupport.temporaryDirectory("hostile").appendingPathComponent("store.db").path
        // A rollout started ten minutes ago, so that the events below count (telemetry counts from the start).
        for args in [["init", "--store", db], ["set", "10", "--reason", "start", "--store", db]] {
            let r = try TestSupport.run(try TestSupport.rolloutBinary(), args, fakeTime: "-10m")
            #expect(r.status == 0, "\(r.stderr)")
        }
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000) - 60_000_000
        let input = (0..<3).map { #"{"t":\#(now + Int64($0)),"i":"fid-\#($0)","k":"failure","e":"\#(Self.hostileJSON)","c":"enabled","p":"appAttest"}"# }
            .joined(separator: "\n") + "\n"
        let ingest = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", "--store", db, "-"], stdin: input)
        #expect(ingest.status == 0, "\(ingest.stdout)\(ingest.stderr)")
        let r = try TestSupport.run(try TestSupport.rolloutBinary(), ["telemetry", "--store", db])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!r.stdout.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 }, "\(r.stdout.debugDescription)")
        #expect(r.stdout.contains(#"rejected:\u001b]0;pwned\u0007\u001b[2J 3"#), "\(r.stdout)")
        let json = try TestSupport.run(try TestSupport.rolloutBinary(), ["telemetry", "--json", "--store", db])
        #expect(!json.stdout.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 })
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let classes = object?["failuresByClass"] as? [String: Any]
        #expect(classes?["rejected:\u{1b}]0;pwned\u{07}\u{1b}[2J"] as? Int == 3, "\(json.stdout)")
    }

    @Test("a bad line quoting escapes is reported escaped by 'rollout ingest'")
    func ingestProblemsAreEscaped() throws {
        let db = try TestSupport.temporaryDirectory("hostile").appendingPathComponent("store.db").path
        #expect(try TestSupport.run(try TestSupport.rolloutBinary(), ["init", "--store", db]).status == 0)
        let r = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["ingest", "--store", db, "-"],
            stdin: #"{"t":1780000000000000,"i":"a","k":"\u001b]0;pwned\u0007"}"# + "\n")
        #expect(r.status == 1)
        #expect(!r.stdout.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 })
        #expect(r.stdout.contains(#"unknown kind "\u001b]0;pwned\u0007""#), "\(r.stdout)")
    }
    @Test("a member named twice is read and counted by 'rollout ingest', refused with --strict")
    func duplicateMembersAreCountedOrRefused() throws {
        let db = try TestSupport.temporaryDirectory("hostile").appendingPathComponent("store.db").path
        #expect(try TestSupport.run(try TestSupport.rolloutBinary(), ["init", "--store", db]).status == 0)
        let line = #"{"t":1780000000000000,"i":"a","i":"b","k":"session","c":"none"}"# + "\n"
        let lenient = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", "--store", db, "-"], stdin: line)
        #expect(lenient.status == 0, "\(lenient.stderr)")
        #expect(lenient.stdout.contains("1 line with a member named twice"), "\(lenient.stdout)")
        #expect(lenient.stdout.contains("line 1:"), "\(lenient.stdout)")
        let strict = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", "--strict", "--store", db, "-"], stdin: line)
        #expect(strict.status != 0, "\(strict.stdout)")
    }
}
