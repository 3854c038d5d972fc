#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Telemetry

/// A spilled run of installations in an unnamed temporary file (`tmpfile`, gone when closed): the disk behind
/// `TelemetryBatch`'s spill for the batches an ingest reads into.
final class TemporarySpillFile: SpillFile {
    private let file: UnsafeMutablePointer<FILE>

    /// A new empty file, nil when none can be made (no space for temporary files).
    static func make() -> (any SpillFile)? { TemporarySpillFile() }

    private init?() {
        guard let file = tmpfile() else { return nil }
        // The batch writes whole chunks of 256 KiB: stdio buffers none of it.
        setvbuf(file, nil, _IONBF, 0)
        self.file = file
    }

    deinit { fclose(file) }

    func write(_ bytes: UnsafeRawBufferPointer) -> Bool { fwrite(bytes.baseAddress, bytes.count, 1, file) == 1 }

    func finishWriting() -> Bool { fflush(file) == 0 }

    func rewind() throws(SpillError) {
        guard fseek(file, 0, SEEK_SET) == 0 else {
            throw SpillError(
                description: "rewinding a spilled run of installations failed: \(String(cString: strerror(errno)))")
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws(SpillError) -> Int {
        let got = fread(buffer.baseAddress, 1, buffer.count, file)
        if got == 0, ferror(file) != 0 {
            throw SpillError(
                description: "reading a spilled run of installations back failed: \(String(cString: strerror(errno)))")
        }
        return got
    }
}

extension TelemetryBatch {
    /// Lets the batch spill its installations to unnamed temporary files once its table reaches `spillLimit`.
    public func spillToTemporaryFiles() { spillFiles = TemporarySpillFile.make }
}
