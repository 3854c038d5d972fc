import Foundation
import TestSupport
import Testing

@testable import TelemetryIngest

/// The ingest's input is read on a thread of its own, a few chunks ahead of the parse: the bytes must come out
/// exactly in order, a read error must come out where it happened, and the descriptor must be closed once the
/// reader is done with it (never while a read may still use its number).
@Suite("read ahead")
struct ReadAheadTests {
    static func drain(_ reader: ReadAhead) throws -> [UInt8] {
        var out: [UInt8] = []
        while let bytes = try reader.next() { out.append(contentsOf: bytes) }
        return out
    }

    static func temporaryFile(_ bytes: [UInt8]) throws -> String {
        let path = NSTemporaryDirectory() + "read-ahead-\(UUID().uuidString)"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// What descriptor `fd` refers to (`/proc/self/fd`), nil when it is closed.
    static func target(_ fd: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count)
        return n < 0 ? nil : String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Waits (bounded) until `fd` no longer refers to `opened`: closed, or its number reused by another test.
    static func closed(_ fd: Int32, opened: String?) -> Bool {
        guard let opened else { return false }
        return TestSupport.eventually { target(fd) != opened }
    }

    @Test("a file comes out byte for byte, across chunk boundaries of every alignment, and its descriptor is closed")
    func fileInOrder() throws {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        let bytes = (0..<100_003).map { _ -> UInt8 in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        let path = try Self.temporaryFile(bytes)
        defer { unlink(path) }
        // Chunk sizes that divide the file, do not, and exceed it; one chunk in flight and several; read on the
        // reader's thread and (as without a thread to give) on the caller's.
        for ownThread in [true, false] {
            for (chunkBytes, chunks) in [(1, 1), (7, 2), (4096, 4), (100_003, 1), (1 << 20, 4)] {
                let fd = open(path, O_RDONLY)
                try #require(fd >= 0)
                let opened = Self.target(fd)
                var reader: ReadAhead? = ReadAhead(
                    fd: fd, size: Int64(bytes.count), chunkBytes: chunkBytes, chunks: chunks, ownThread: ownThread)
                let read = try Self.drain(reader!)
                #expect(read == bytes, "chunks of \(chunkBytes), \(chunks) in flight, own thread \(ownThread)")
                #expect(try reader!.next() == nil, "the end stays the end")
                // On its own thread the reader closes the descriptor at the end; on the caller's, when released.
                if !ownThread { reader = nil }
                #expect(Self.closed(fd, opened: opened), "the descriptor is closed")
                _ = reader
            }
        }
    }

    /// How many of the pages of the file at `path` are in the page cache (`mincore` over a mapping of it).
    static func residentPages(_ path: String) throws -> (resident: Int, pages: Int) {
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        let size = Int(lseek(fd, 0, SEEK_END))
        let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
        try #require(map != MAP_FAILED)
        defer { munmap(map, size) }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        var vector = [UInt8](repeating: 0, count: (size + pageSize - 1) / pageSize)
        try #require(mincore(map, size, &vector) == 0)
        return (vector.filter { $0 & 1 != 0 }.count, vector.count)
    }

    @Test("a regular file's pages are released behind the reader, so a large input does not fill the page cache")
    func pagesReleasedBehind() throws {
        // In the package's build directory (a disk file system: a tmpfs keeps its pages whatever is advised).
        let path = TestSupport.packageRoot.appendingPathComponent(".build/read-ahead-\(UUID().uuidString)").path
        var state: UInt64 = 7
        let bytes = (0..<(16 << 20) + 12_345).map { _ -> UInt8 in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { unlink(path) }
        // Written back and read once: every page is cached and clean (a dirty page is not released).
        let sync = open(path, O_RDONLY)
        try #require(sync >= 0)
        try #require(fsync(sync) == 0)
        close(sync)
        _ = try Data(contentsOf: URL(fileURLWithPath: path))
        let before = try Self.residentPages(path)
        try #require(before.resident == before.pages, "the file is cached before it is read")
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        let reader = ReadAhead(fd: fd, size: Int64(bytes.count), chunkBytes: 64 << 10, chunks: 2, readAhead: 4 << 20)
        #expect(try Self.drain(reader) == bytes)
        // Released in steps of half the read-ahead (2 MiB, the largest folio of the page cache here) and at the end.
        let after = try Self.residentPages(path)
        #expect(after.resident == 0, "\(after.resident) of \(after.pages) pages still cached")
    }

    @Test("a pipe is read to its end, however its writer splits it")
    func pipeInOrder() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        let text = Array((0..<5000).map { "line \($0)\n" }.joined().utf8)
        let writeEnd = fds[1]
        let writer = Thread {
            var offset = 0
            var step = 1
            while offset < text.count {
                let n = min(step, text.count - offset)
                _ = text[offset..<offset + n].withUnsafeBytes { write(writeEnd, $0.baseAddress, n) }
                offset += n
                step = step % 997 + 13
            }
            close(writeEnd)
        }
        writer.start()
        let opened = Self.target(fds[0])
        let reader = ReadAhead(fd: fds[0], size: nil, chunkBytes: 512, chunks: 3)
        #expect(try Self.drain(reader) == text)
        #expect(Self.closed(fds[0], opened: opened))
    }

    @Test("a read that fails comes out as an error after the bytes before it, and ends the input")
    func readError() throws {
        // read(2) on a directory fails with EISDIR: the first chunk is the error.
        let directory = NSTemporaryDirectory() + "read-ahead-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { rmdir(directory) }
        let fd = open(directory, O_RDONLY | O_DIRECTORY)
        try #require(fd >= 0)
        let opened = Self.target(fd)
        let reader = ReadAhead(fd: fd, size: nil, chunkBytes: 64, chunks: 2)
        let error = #expect(throws: ReadAheadError.self) { _ = try reader.next() }
        #expect(error?.errorNumber == EISDIR)
        #expect(try reader.next() == nil, "the input ends with its error")
        #expect(Self.closed(fd, opened: opened))
        #expect("\(ReadAheadError(errorNumber: EISDIR))" == String(cString: strerror(EISDIR)))
    }

    @Test("a reader released before the end stops its thread and closes the descriptor")
    func releasedEarly() throws {
        let bytes = [UInt8](repeating: 0x61, count: 1 << 20)
        let path = try Self.temporaryFile(bytes)
        defer { unlink(path) }
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        let opened = Self.target(fd)
        do {
            let reader = ReadAhead(fd: fd, size: Int64(bytes.count), chunkBytes: 4096, chunks: 2)
            let first = try #require(try reader.next())
            #expect(first.count == 4096)
        }
        // The thread was waiting for a spare chunk (the file is 256 of them): the release wakes it, and it ends.
        #expect(Self.closed(fd, opened: opened))
    }
}
