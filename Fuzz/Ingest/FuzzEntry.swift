import Rollout
import Timekeeping

@testable import Telemetry
@testable import TelemetryIngest

// libFuzzer entry for the ingest line readers: native NDJSON, GA4 export rows and Crashlytics export rows,
// through TelemetryIngest as `rollout ingest` feeds them. The first byte picks the format and the duplicate-key
// policy, the second the chunk size (lines cut across chunks). Properties: no trap; every line is counted
// once (recorded, ignored, bad, or blank); every stored installation id is at most 256 bytes and every stored
// event time lies in the window.
private let window = EventTimeWindow(now: Instant(seconds: 1_780_086_400), rolloutStart: Instant(seconds: 1_779_000_000))

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data, size >= 2 else { return 0 }
    let format = TelemetryFormat.allCases[Int(data[0] % 3)]
    let ingest = TelemetryIngest(format: format, window: window, duplicateKeys: data[0] & 4 == 0 ? .count : .reject)
    let chunk = Int(data[1]) + 1
    var p = data + 2
    let end = data + size
    while p < end {
        let n = min(chunk, end - p)
        ingest.feed(UnsafeRawBufferPointer(start: p, count: n))
        p += n
    }
    ingest.finish()
    precondition(ingest.recorded + ingest.ignored + ingest.problemCount <= ingest.lines, "a line was counted twice")
    precondition(ingest.batch.eventCount == ingest.recorded, "a recorded row is not exactly one event")
    // The batch spills to a temporary file past its memory bound; reading it back fails only on I/O errors.
    try! ingest.batch.forEachInstallation { id, delta in
        precondition(id.utf8.count <= IngestLimits.maximumInstallationIDBytes, "an installation id over the limit was stored")
        precondition(delta.firstSeen >= window.earliest.microseconds && delta.lastSeen <= window.latest.microseconds,
            "an event outside the window was stored")
    }
    return 0
}
