#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The row formats `rollout ingest` reads.
public enum TelemetryFormat: String, Sendable, CaseIterable {
    /// Our own compact NDJSON (`NativeFormat`).
    case native
    /// Google Analytics 4 BigQuery export rows (`GA4Format`).
    case ga4
    /// Crashlytics BigQuery export rows (`CrashlyticsFormat`).
    case crashlytics
}

/// A line that could not be read.
public struct IngestProblem: Hashable, Sendable, CustomStringConvertible {
    public var line: Int
    public var reason: String
    public var description: String { "line \(line): \(reason)" }
}

/// Splits a byte stream into lines and reads each into a `TelemetryBatch`, noting bad lines by number.
///
/// Bytes arrive in chunks of any size (`feed`); a line cut by a chunk boundary is kept until the rest arrives.
/// Complete lines are read in place, without copying. Blank lines are skipped; a trailing `\r` is dropped.
public final class TelemetryIngest {
    public let format: TelemetryFormat
    public let batch: TelemetryBatch
    /// Lines seen so far (the number of the last complete line).
    public private(set) var lines = 0
    /// Rows counted as events.
    public private(set) var recorded = 0
    /// Rows of other events or platforms, left aside.
    public private(set) var ignored = 0
    /// Every bad line up to `maximumReportedProblems`; `problemCount` counts them all.
    public private(set) var problems: [IngestProblem] = []
    public private(set) var problemCount = 0
    public let maximumReportedProblems: Int
    private var carry: [UInt8] = []
    /// Native lines parsed but not yet recorded (see `TelemetryBatch.record(_ block:)`); they point into the
    /// bytes being fed, so the block is recorded before `feed` returns and before a carried line is dropped.
    private let block = UnsafeMutableBufferPointer<ParsedEvent>.allocate(capacity: 32)
    private var blockCount = 0

    public init(format: TelemetryFormat, batch: TelemetryBatch = TelemetryBatch(), maximumReportedProblems: Int = 100) {
        self.format = format
        self.batch = batch
        self.maximumReportedProblems = maximumReportedProblems
    }

    deinit { block.deallocate() }

    private func flushBlock() {
        guard blockCount > 0 else { return }
        batch.record(UnsafeMutableBufferPointer(rebasing: block[0..<blockCount]))
        blockCount = 0
    }

    /// Reads every complete line in `bytes` (after any partial line left by the previous chunk).
    public func feed(_ bytes: UnsafeRawBufferPointer) {
        guard var p = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        let end = p + bytes.count
        if !carry.isEmpty {
            guard let nl = memchr(p, 0x0A, end - p).map({ UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) })
            else {
                carry.append(contentsOf: UnsafeBufferPointer(start: p, count: end - p))
                return
            }
            carry.append(contentsOf: UnsafeBufferPointer(start: p, count: nl - p))
            carry.withUnsafeBytes { readLine($0) }
            flushBlock()
            carry.removeAll(keepingCapacity: true)
            p = nl + 1
        }
        defer { flushBlock() }
        while p < end {
            guard let nl = memchr(p, 0x0A, end - p).map({ UnsafePointer($0.assumingMemoryBound(to: UInt8.self)) })
            else {
                carry.append(contentsOf: UnsafeBufferPointer(start: p, count: end - p))
                return
            }
            readLine(UnsafeRawBufferPointer(start: p, count: nl - p))
            p = nl + 1
        }
    }

    /// Reads the last line when the input does not end with a newline.
    public func finish() {
        guard !carry.isEmpty else { return }
        carry.withUnsafeBytes { readLine($0) }
        flushBlock()
        carry.removeAll(keepingCapacity: true)
    }

    /// Starts counting a new batch (the batch itself is emptied by its owner); line numbers go on.
    public func resetCounts() {
        recorded = 0
        ignored = 0
        problems.removeAll()
        problemCount = 0
    }

    @inline(__always)
    private func readLine(_ raw: UnsafeRawBufferPointer) {
        lines += 1
        var n = raw.count
        if n > 0, raw[n - 1] == 0x0D { n -= 1 }
        if n == 0 { return }
        let line = UnsafeRawBufferPointer(start: raw.baseAddress, count: n)
        do throws(LineError) {
            switch format {
            case .native:
                var escapedID: String?
                let e = try NativeFormat.parse(line, batch, escapedID: &escapedID)
                if var text = escapedID {
                    flushBlock()
                    text.withUTF8 { NativeFormat.record(UnsafeRawBufferPointer($0), e, batch) }
                } else {
                    block[blockCount] = e
                    blockCount += 1
                    if blockCount == block.count { flushBlock() }
                }
                recorded += 1
            case .ga4:
                if try GA4Format.read(line, into: batch) == .recorded { recorded += 1 } else { ignored += 1 }
            case .crashlytics:
                if try CrashlyticsFormat.read(line, into: batch) == .recorded { recorded += 1 } else { ignored += 1 }
            }
        } catch {
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
            problemCount += 1
            if problems.count < maximumReportedProblems {
                problems.append(IngestProblem(line: lines, reason: error.reason))
            }
        }
    }
}
