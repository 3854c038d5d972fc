#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import JSON
import Telemetry
import Platform
import Timekeeping

/// The row formats `rollout ingest` reads.
public enum TelemetryFormat: String, Sendable, CaseIterable {
    /// Our own compact NDJSON (`NativeFormat`).
    case native
    /// Google Analytics 4 BigQuery export rows (`GA4Format`).
    case ga4
    /// Crashlytics BigQuery export rows (`CrashlyticsFormat`).
    case crashlytics
}

/// A line that could not be read, or (in `TelemetryIngest.warnings`) one read with a warning.
public struct IngestProblem: Hashable, Sendable, CustomStringConvertible {
    public var line: Int
    public var reason: String
    public var description: String { "line \(line): \(reason)" }
}

/// The bounds every line of telemetry must keep: anything a device or an export file carries is hostile until
/// checked, and one line must not be able to grow the store or the memory of `ingest` without bound.
public enum IngestLimits {
    /// The longest line read, in bytes (before the newline). Native lines are about 150 bytes and GA4 and
    /// Crashlytics rows a few kilobytes; a longer line is reported by its number and skipped without being
    /// buffered whole.
    public static let maximumLineBytes = 1 << 20
    /// The longest installation id, in bytes. Firebase installation ids are 22 characters, GA4's
    /// `user_pseudo_id` and Crashlytics' `installation_uuid` about 32 to 40; 256 leaves room for any of them.
    public static let maximumInstallationIDBytes = 256
    /// How far before the rollout's start an event may be (its baseline).
    public static let history = Instant.Duration.days(30)
    /// How far after `now` an event may be: device clocks run ahead.
    public static let clockSkew = Instant.Duration.minutes(5)
}

/// The times an ingested event may carry: from `IngestLimits.history` before the rollout's start (or the Unix
/// epoch when no rollout has started) to `IngestLimits.clockSkew` after now. An event outside is a bad line,
/// reported by its number and never stored: an event dated years ahead would otherwise stay the "newest event"
/// forever and hide that telemetry stopped.
public struct EventTimeWindow: Hashable, Sendable, CustomStringConvertible {
    public var earliest: Instant
    public var latest: Instant

    /// `now` is the ingest's clock reading; `rolloutStart` is `RolloutMonitor.Status.startedAt` (nil when none).
    public init(now: Instant, rolloutStart: Instant?) {
        earliest = max(Instant(microseconds: 0), rolloutStart.map { $0 - IngestLimits.history } ?? Instant(microseconds: 0))
        latest = now + IngestLimits.clockSkew
    }

    public var description: String { "\(earliest.iso8601) to \(latest.iso8601)" }

    /// Refuses an event time (microseconds) outside the window, naming the field.
    @inline(__always)
    func check(_ micros: Int64, field: String) throws(LineError) {
        guard micros >= earliest.microseconds, micros <= latest.microseconds else { throw refusal(micros, field) }
    }

    private func refusal(_ micros: Int64, _ field: String) -> LineError {
        let t = Instant(microseconds: micros).iso8601
        if micros > latest.microseconds {
            return LineError("\(field) \(t) is in the future (latest accepted \(latest.iso8601): now + 5 minutes of clock skew)")
        }
        return LineError("\(field) \(t) is too old (earliest accepted \(earliest.iso8601): 30 days before the rollout started)")
    }
}

/// Refuses an installation id longer than `IngestLimits.maximumInstallationIDBytes`, naming the field.
@inline(__always)
func checkInstallationID(_ id: ByteSpan, field: String) throws(LineError) {
    guard id.count > IngestLimits.maximumInstallationIDBytes else { return }
    let length = id.escaped ? id.text.utf8.count : id.count
    guard length > IngestLimits.maximumInstallationIDBytes else { return }
    throw LineError("\(field) is \(length) bytes long (at most \(IngestLimits.maximumInstallationIDBytes))")
}

/// Splits a byte stream into lines and reads each into a `TelemetryBatch`, noting bad lines by number.
///
/// Bytes arrive in chunks of any size (`feed`); a line cut by a chunk boundary is kept until the rest arrives,
/// up to `IngestLimits.maximumLineBytes` (a longer line is skipped to its end and reported). Complete lines are
/// parsed in place, without copying; a parsed native event keeps only its installation id, copied into a block of
/// events that is recorded in place or, with `concurrentRecording`, on a second thread (`BlockRecorder`). Blank lines are skipped; a trailing `\r` is dropped. Event times must lie
/// in `window`; a member named twice in one object is a bad line under `DuplicateKeyPolicy.reject` and a
/// warning (`warnings`, `warningCount`) under `.count`.
public final class TelemetryIngest {
    public let format: TelemetryFormat
    public let batch: TelemetryBatch
    public let window: EventTimeWindow
    /// Lines seen so far (the number of the last complete line).
    public private(set) var lines = 0
    /// Rows counted as events.
    public private(set) var recorded = 0
    /// Rows of other events or platforms, left aside.
    public private(set) var ignored = 0
    /// Every bad line up to `maximumReportedProblems`; `problemCount` counts them all.
    public private(set) var problems: [IngestProblem] = []
    public private(set) var problemCount = 0
    /// Lines read despite a member named twice (under `DuplicateKeyPolicy.count`), up to
    /// `maximumReportedProblems`; `warningCount` counts them all.
    public private(set) var warnings: [IngestProblem] = []
    public private(set) var warningCount = 0
    public let maximumReportedProblems: Int
    /// The member names of the line being read, for duplicate keys (reused by every line).
    private let memberNames = MemberNames()
    private var carry: [UInt8] = []
    /// The length of the line being skipped because it is longer than `IngestLimits.maximumLineBytes`.
    private var skipping: Int?
    /// Native lines parsed but not yet recorded (see `TelemetryBatch.record(_ block:)`), their ids copied into
    /// the block; recorded when the block fills, when `feed` returns, and by `drain()`.
    private var block: EventBlock
    /// The thread that records blocks while the next lines are parsed (`concurrentRecording`), nil when blocks
    /// are recorded in place.
    private let recorder: BlockRecorder?

    /// `concurrentRecording` (native format only) records parsed lines into `batch` on a second thread while
    /// the next ones are parsed: until `drain()` returns, the caller must not read or change `batch`.
    public init(
        format: TelemetryFormat, window: EventTimeWindow, duplicateKeys: DuplicateKeyPolicy = .count,
        batch: TelemetryBatch = TelemetryBatch(), maximumReportedProblems: Int = 100, concurrentRecording: Bool = false
    ) {
        self.format = format
        self.window = window
        self.batch = batch
        self.maximumReportedProblems = maximumReportedProblems
        memberNames.policy = duplicateKeys
        if batch.spillFiles == nil { batch.spillToTemporaryFiles() }
        let recorder = concurrentRecording && format == .native ? BlockRecorder(batch: batch) : nil
        self.recorder = recorder
        block = recorder?.take() ?? EventBlock()
    }

    deinit { recorder?.stop() }

    private func flushBlock() {
        guard !block.isEmpty else { return }
        if let recorder {
            recorder.submit(block)
            block = recorder.take()
        } else {
            batch.record(block.filled)
            block.removeAll()
        }
    }

    /// Records every line read so far into `batch`: after it returns, `batch` is the caller's to read, land or
    /// empty (with `concurrentRecording`, until the next `feed`).
    public func drain() {
        flushBlock()
        recorder?.drain()
    }

    /// Events recorded or waiting to be, in the current batch (`batch.eventCount` once drained).
    public var batchEvents: Int { recorder == nil ? batch.eventCount : recorded }

    /// Queues one parsed native event with its id bytes.
    @inline(__always)
    private func append(_ e: ParsedEvent, id: UnsafeRawBufferPointer) {
        if !block.fits(idLength: id.count) { flushBlock() }
        block.append(e, id: id)
    }

    /// Reads every complete line in `bytes` (after any partial line left by the previous chunk).
    public func feed(_ bytes: UnsafeRawBufferPointer) {
        guard var p = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        let end = p + bytes.count
        func newline(_ from: UnsafePointer<UInt8>) -> UnsafePointer<UInt8>? {
            memchr(from, 0x0A, end - from).map { UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) }
        }
        if skipping != nil || !carry.isEmpty {
            guard let nl = newline(p) else {
                keep(p, end - p)
                return
            }
            keep(p, nl - p)
            if let length = skipping {
                tooLong(length)
                skipping = nil
            } else {
                carry.withUnsafeBytes { readLine($0) }
            }
            carry.removeAll(keepingCapacity: true)
            p = nl + 1
        }
        defer { flushBlock() }
        while p < end {
            guard let nl = newline(p) else {
                keep(p, end - p)
                return
            }
            if nl - p > IngestLimits.maximumLineBytes {
                tooLong(nl - p)
            } else {
                readLine(UnsafeRawBufferPointer(start: p, count: nl - p))
            }
            p = nl + 1
        }
    }

    /// Keeps the start of a line cut by the end of a chunk, or counts it once it is too long to keep.
    private func keep(_ p: UnsafePointer<UInt8>, _ n: Int) {
        if let length = skipping {
            skipping = length + n
        } else if carry.count + n > IngestLimits.maximumLineBytes {
            skipping = carry.count + n
            carry = []
        } else {
            carry.append(contentsOf: UnsafeBufferPointer(start: p, count: n))
        }
    }

    private func tooLong(_ length: Int) {
        lines += 1
        problem("the line is \(length) bytes long (at most \(IngestLimits.maximumLineBytes)); skipped unread")
    }

    /// Notes a bad line; the reason quotes the line's text, so it is made safe to show (`Sanitiser`) here, once.
    private func problem(_ reason: String) {
        problemCount += 1
        if problems.count < maximumReportedProblems {
            problems.append(IngestProblem(line: lines, reason: Sanitiser.escape(reason)))
        }
    }

    /// Reads the last line when the input does not end with a newline.
    public func finish() {
        if let length = skipping {
            tooLong(length)
            skipping = nil
        } else if !carry.isEmpty {
            carry.withUnsafeBytes { readLine($0) }
        }
        carry.removeAll(keepingCapacity: true)
        drain()
    }

    /// Starts counting a new batch (the batch itself is emptied by its owner); line numbers go on.
    public func resetCounts() {
        recorded = 0
        ignored = 0
        problems.removeAll()
        problemCount = 0
        warnings.removeAll()
        warningCount = 0
    }

    @inline(__always)
    private func readLine(_ raw: UnsafeRawBufferPointer) {
        lines += 1
        var n = raw.count
        if n > 0, raw[n - 1] == 0x0D { n -= 1 }
        if n == 0 { return }
        let line = UnsafeRawBufferPointer(start: raw.baseAddress, count: n)
        let names = memberNames
        names.resetFindings()
        do throws(LineError) {
            switch format {
            case .native:
                var escapedID: String?
                let e = try NativeFormat.parse(line, batch, window: window, names: names, escapedID: &escapedID)
                if var text = escapedID {
                    text.withUTF8 { append(e, id: UnsafeRawBufferPointer($0)) }
                } else {
                    append(e, id: UnsafeRawBufferPointer(start: e.id, count: e.idLength))
                }
                recorded += 1
            case .ga4:
                if try GA4Format.read(line, into: batch, window: window, names: names) == .recorded { recorded += 1 } else { ignored += 1 }
            case .crashlytics:
                if try CrashlyticsFormat.read(line, into: batch, window: window, names: names) == .recorded {
                    recorded += 1
                } else {
                    ignored += 1
                }
            }
            if names.duplicates > 0 {
                warningCount += 1
                if warnings.count < maximumReportedProblems {
                    let name = Sanitiser.escape(names.firstDuplicate.map { String($0.prefix(64)) } ?? "")
                    warnings.append(
                        IngestProblem(
                            line: lines,
                            reason: "member name \"\(name)\" given twice (\(names.duplicates) duplicate\(names.duplicates == 1 ? "" : "s")); the last value was used"))
                }
            }
        } catch {
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
            problem(error.reason)
        }
    }
}
