#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Telemetry

/// Why reading an ingest's input failed.
public struct ReadAheadError: Error, CustomStringConvertible {
    public let errorNumber: Int32
    public var description: String { String(cString: strerror(errorNumber)) }
}

/// Reads a file descriptor on a thread of its own, a few chunks ahead of the thread that parses them.
///
/// Copying a file's bytes out of the page cache was a sixth of the parsing thread's time in a large ingest (the
/// `read` system call's copy); here it overlaps with the parse. The bytes come out exactly in the file's order,
/// and an error of `read` is thrown by `next()` in the place of the bytes that follow it. A regular file of
/// known size is also announced to the kernel `readAhead` bytes ahead (`POSIX_FADV_WILLNEED`), so a cold file
/// does not stall each read for the disk, and the pages already read are released (`POSIX_FADV_DONTNEED`): the
/// input is read once, and a 1.2 GB file left in the page cache took as much fresh memory as it was long (on a
/// virtual machine that backs its memory only when first touched, most of a large ingest's system time), where
/// released pages are taken again by the next read-ahead and by the store's own writes.
///
/// The reader owns the descriptor from `init` on and closes it when its thread ends (at the end of the input,
/// at an error, or after the reader is released), so a descriptor number is never reused under a read still in
/// flight. Standard input (0) is never closed.
public final class ReadAhead {
    final class Chunk {
        let bytes: UnsafeMutableRawBufferPointer
        var count = 0
        var errorNumber: Int32 = 0
        init(size: Int) { bytes = .allocate(byteCount: size, alignment: 16) }
        deinit { bytes.deallocate() }
    }

    private let chunks: Handoff<Chunk>
    private var current: Chunk?
    private var ended = false
    /// Set only when no thread could be started: `next()` then reads itself.
    private var source: Source?

    /// Starts reading `fd`; `size` is a regular file's size (nil for a pipe). Without a thread to give (or with
    /// `ownThread` false, for tests), the chunks are read on the caller's thread, one at a time.
    public init(
        fd: Int32, size: Int64?, chunkBytes: Int = 1 << 20, chunks count: Int = 4, readAhead: Int64 = 32 << 20,
        ownThread: Bool = true
    ) {
        let chunks = Handoff((0..<max(1, count)).map { _ in Chunk(size: chunkBytes) })
        self.chunks = chunks
        let source = Source(fd: fd, size: size, readAhead: readAhead)
        if ownThread, let thread = WorkerThread.start({ source.run(chunks) }) {
            thread.detach()  // never joined: a read from a pipe may outlast the reader
        } else {
            self.source = source
        }
    }

    deinit {
        chunks.cancel()
        source?.closeDescriptor()
    }

    /// The next bytes of the input, nil at its end. They stay valid until the next call.
    public func next() throws(ReadAheadError) -> UnsafeRawBufferPointer? {
        if let current {
            chunks.giveBack(current)
            self.current = nil
        }
        guard !ended else { return nil }
        // No thread: one chunk is read here, through the same hand-off.
        if let source { _ = source.step(chunks) }
        guard let chunk = chunks.next() else {
            ended = true
            return nil
        }
        current = chunk
        if chunk.errorNumber != 0 {
            ended = true
            throw ReadAheadError(errorNumber: chunk.errorNumber)
        }
        if chunk.count == 0 {
            ended = true
            return nil
        }
        return UnsafeRawBufferPointer(rebasing: chunk.bytes[0..<chunk.count])
    }

    /// The descriptor and where its reads are, used by one thread at a time.
    final class Source: @unchecked Sendable {
        let fd: Int32
        let size: Int64?
        let readAhead: Int64
        private var offset: Int64 = 0
        private var requestedUpTo: Int64 = 0
        /// The last two places the pages read were released up to (`POSIX_FADV_DONTNEED`).
        private var released: (previous: Int64, last: Int64) = (0, 0)
        private var closed = false

        init(fd: Int32, size: Int64?, readAhead: Int64) {
            self.fd = fd
            self.size = size
            self.readAhead = readAhead
            if size != nil { _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_SEQUENTIAL)) }
        }

        /// Reads the next chunk into a spare one and hands it on; false once no more will follow (the end of the
        /// input or an error, recorded in the chunk handed, or the reader released).
        func step(_ chunks: Handoff<Chunk>) -> Bool {
            guard let chunk = chunks.takeSpare() else { return false }
            fill(chunk)
            chunks.hand(chunk)
            return chunk.count > 0
        }

        /// Reads into `chunk`: 0 bytes at the end of the input, or an error number.
        private func fill(_ chunk: Chunk) {
            if let size, offset + readAhead / 2 >= requestedUpTo, requestedUpTo < size {
                _ = posix_fadvise(fd, off_t(requestedUpTo), off_t(readAhead), Int32(POSIX_FADV_WILLNEED))
                requestedUpTo += readAhead
            }
            var n: Int
            repeat { n = read(fd, chunk.bytes.baseAddress, chunk.bytes.count) } while n < 0 && errno == EINTR
            chunk.errorNumber = n < 0 ? errno : 0
            chunk.count = max(0, n)
            offset += Int64(chunk.count)
            // The pages read are released every half read-ahead and at the end, each time from where the time
            // before began: the kernel drops only whole folios, and one across the last boundary is whole now.
            if size != nil, offset - released.last >= readAhead / 2 || (n == 0 && offset > released.previous) {
                let from = released.previous
                _ = posix_fadvise(fd, off_t(from), off_t(offset - from), Int32(POSIX_FADV_DONTNEED))
                released = (released.last, offset)
            }
        }

        /// The thread's loop: fills spare chunks until the input ends or the reader is released.
        func run(_ chunks: Handoff<Chunk>) {
            while step(chunks) {}
            chunks.close()
            closeDescriptor()
        }

        func closeDescriptor() {
            guard !closed else { return }
            closed = true
            if fd != 0 { _ = close(fd) }
        }
    }
}
