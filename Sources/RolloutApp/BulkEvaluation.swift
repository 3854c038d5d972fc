#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import JSON
import RemoteConfig

/// `rollout evaluate`'s engine: installation ids streamed from a file descriptor, one value per id written to
/// another, in input order.
///
/// Ids are read in 1 MiB chunks and evaluated in place (no per-id allocation, no copy of the input); output is
/// staged in one buffer and written when it fills. Memory stays bounded by the longest line, however many ids
/// there are. Each line must be UTF-8; a bad line stops the run with its line number.
public struct BulkEvaluation {
    public enum Format: Sendable { case tsv, json }

    /// Why a run stopped.
    public enum Failure: Error, CustomStringConvertible {
        case notUTF8(line: Int)
        case read(String)
        case write(String)

        public var description: String {
            switch self {
            case .notUTF8(let line): "line \(line): ids must be UTF-8 text"
            case .read(let m): "cannot read the ids: \(m)"
            case .write(let m): "cannot write the values: \(m)"
            }
        }
    }

    private let program: TemplateEvaluator.ParameterHandle
    private let format: Format
    /// Percent-only templates take the result-index fast path; opaque terms need the notes of the slow path.
    private let fastPath: Bool
    private let tsvValues: [[UInt8]]
    /// Notes about conditions that cannot be known here (device or app properties), collected over the run.
    public private(set) var notes = Set<String>()
    /// Lines evaluated so far.
    public private(set) var count = 0

    public init(template: RemoteConfigTemplate, parameter: String, format: Format) {
        program = TemplateEvaluator(template).program(for: parameter)!
        self.format = format
        fastPath = format == .tsv && !template.conditions.contains { !$0.node.opaqueTerms.isEmpty }
        tsvValues = program.results.map { Array(($0.value ?? "").utf8) }
    }

    /// Evaluates every line of `input` and writes the results to `output`.
    public mutating func run(input: Int32, output: Int32) throws {
        var inBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        var out = OutputBuffer(fd: output, capacity: 1 << 20)
        defer {
            inBuffer.deallocate()
            out.deallocate()
        }
        var filled = 0
        var eof = false
        while !eof {
            if filled == inBuffer.count {
                // One line longer than the buffer: grow it (memory stays bounded by the longest line).
                let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: inBuffer.count * 2, alignment: 16)
                bigger.copyMemory(from: UnsafeRawBufferPointer(inBuffer))
                inBuffer.deallocate()
                inBuffer = bigger
            }
            let n = read(input, inBuffer.baseAddress! + filled, inBuffer.count - filled)
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure.read(String(cString: strerror(errno)))
            }
            if n == 0 { eof = true }
            filled += n
            let base = inBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var start = 0
            while start < filled {
                let rest = filled - start
                guard let hit = memchr(base + start, 10, rest) else {
                    // A last line without a newline is still an id.
                    if eof {
                        try line(UnsafeRawBufferPointer(start: base + start, count: rest), into: &out)
                        start = filled
                    }
                    break
                }
                let end = UnsafeRawPointer(hit) - UnsafeRawPointer(base)
                try line(UnsafeRawBufferPointer(start: base + start, count: end - start), into: &out)
                start = end + 1
            }
            if start > 0 {
                memmove(base, base + start, filled - start)
                filled -= start
            }
        }
        try out.flush()
    }

    private mutating func line(_ raw: UnsafeRawBufferPointer, into out: inout OutputBuffer) throws {
        count += 1
        var id = raw
        if let last = id.last, last == 13 { id = UnsafeRawBufferPointer(rebasing: id.dropLast()) }
        if !BulkEvaluation.isASCII(id), String(validating: id.bindMemory(to: UInt8.self), as: UTF8.self) == nil {
            throw Failure.notUTF8(line: count)
        }
        if fastPath {
            let value = tsvValues[program.resultIndex(utf8: id)]
            try out.append(id)
            try out.append(byte: 9)
            try value.withUnsafeBytes { v in try out.append(v) }
            try out.append(byte: 10)
            return
        }
        let v = program.value(utf8: id)
        notes.formUnion(v.notes)
        switch format {
        case .tsv:
            try out.append(id)
            try out.append(byte: 9)
            var text = v.value ?? ""
            try text.withUTF8 { u in try out.append(UnsafeRawBufferPointer(u)) }
            try out.append(byte: 10)
        case .json:
            let object: JSONValue = [
                "id": .string(String(decoding: id, as: UTF8.self)), "value": v.value.map { .string($0) } ?? .null,
                "source": .string(v.source.rawValue), "condition": v.condition.map { .string($0) } ?? .null,
            ]
            try JSONWriter().bytes(object).withUnsafeBytes { b in try out.append(b) }
            try out.append(byte: 10)
        }
    }

    /// Whether every byte is below 0x80, eight at a time.
    @inline(__always)
    static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var i = 0
        var acc: UInt64 = 0
        while i + 8 <= bytes.count {
            acc |= bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < bytes.count {
            acc |= UInt64(bytes[i])
            i += 1
        }
        return acc & 0x8080_8080_8080_8080 == 0
    }
}

/// A write buffer in front of a file descriptor.
private struct OutputBuffer {
    let fd: Int32
    let storage: UnsafeMutableRawBufferPointer
    var used = 0

    init(fd: Int32, capacity: Int) {
        self.fd = fd
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    func deallocate() { storage.deallocate() }

    @inline(__always)
    mutating func append(byte: UInt8) throws {
        if used == storage.count { try flush() }
        storage[used] = byte
        used += 1
    }

    @inline(__always)
    mutating func append(_ bytes: UnsafeRawBufferPointer) throws {
        if used + bytes.count > storage.count {
            try flush()
            if bytes.count > storage.count { return try writeAll(bytes) }
        }
        guard let source = bytes.baseAddress else { return }
        (storage.baseAddress! + used).copyMemory(from: source, byteCount: bytes.count)
        used += bytes.count
    }

    mutating func flush() throws {
        try writeAll(UnsafeRawBufferPointer(rebasing: storage[0..<used]))
        used = 0
    }

    private func writeAll(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw BulkEvaluation.Failure.write(String(cString: strerror(errno)))
            }
            offset += n
        }
    }
}
