import Foundation
import Platform
import TestSupport
import Testing

/// What replaced FoundationEssentials in the program, each against Foundation itself where Foundation has the same
/// operation (the tests may link Foundation; the program no longer does).
@Suite("Platform essentials")
struct EssentialsTests {
    static let texts = [
        "", "a", "ab", "a\r\nb", "\r\n", "a\r\n\r\nb\r\n", "\r\nx", "héllo\r\nwörld", "no separator", "\r\r\n\n",
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n", "emoji 👍🏽\r\n👍🏽",
    ]

    @Test("pieces(separatedBy:) splits as Foundation's components(separatedBy:) does")
    func pieces() {
        for text in Self.texts {
            // (Not "\n" alone: Foundation does not split inside the one character "\r\n"; `pieces` splits bytes.)
            for separator in ["\r\n", "b", "👍🏽", "héllo", "xyzzy"] {
                #expect(text.pieces(separatedBy: separator) == text.components(separatedBy: separator), "\(text.debugDescription) by \(separator.debugDescription)")
            }
        }
    }

    @Test("pieces(separatedBy:) splits at the separator's bytes, inside a CR LF too")
    func piecesAreBytes() {
        #expect("a\r\nb\nc".pieces(separatedBy: "\n") == ["a\r", "b", "c"])
        #expect("".pieces(separatedBy: ",") == [""])
        #expect(",".pieces(separatedBy: ",") == ["", ""])
    }

    @Test("range(ofText:) finds the first occurrence, as Foundation's range(of:) does, in strings and substrings")
    func rangeOfText() {
        for text in Self.texts + ["version sha256:abc", "x; version sha256:1 version sha256:2"] {
            for needle in ["\r\n", "b", "version sha256:", "👍🏽", "ö", "zz"] {
                let ours = text.range(ofText: needle)
                let theirs = text.range(of: needle)
                #expect(ours == theirs, "\(text.debugDescription) for \(needle.debugDescription)")
                let tail = text.dropFirst()
                #expect(tail.range(ofText: needle) == tail.range(of: needle))
            }
        }
        #expect("abc".range(ofText: "") == "abc".startIndex..<"abc".startIndex)
    }

    @Test("randomUUIDString is a version 4 UUID in Foundation's form, different each time")
    func uuid() throws {
        var seen = Set<String>()
        for _ in 0..<200 {
            let text = randomUUIDString()
            let parsed = try #require(UUID(uuidString: text), "\(text)")
            #expect(parsed.uuidString == text)
            let bytes = withUnsafeBytes(of: parsed.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4)
            #expect(bytes[8] >> 6 == 0b10)
            seen.insert(text)
        }
        #expect(seen.count == 200)
    }

    @Test("Environment.current is the process's environment")
    func environment() {
        let ours = Environment.current
        #expect(ours == ProcessInfo.processInfo.environment)
        #expect(ours["PATH"] != nil)
    }

    @Test("temporary directories are new, private and removed whole, links not followed")
    func temporaryTree() throws {
        let a = try Files.makeTemporaryDirectory(prefix: "essentials-")
        let b = try Files.makeTemporaryDirectory(prefix: "essentials-")
        #expect(a != b)
        #expect(Path.lastComponent(of: a).hasPrefix("essentials-"))
        var s = stat()
        #expect(stat(a, &s) == 0)
        #expect(s.st_mode & 0o777 == 0o700)
        // Something outside the tree that a link inside points at survives the removal.
        let outside = Path.join(b, "keep")
        try Files.writeAtomically(outside, [1, 2, 3])
        try Files.makeDirectories(Path.join(a, "x/y/z"))
        try Files.writeAtomically(Path.join(a, "x/y/file"), [4])
        try Files.writeAtomically(Path.join(a, "top"), [])
        #expect(symlink(b, Path.join(a, "x/link")) == 0)
        #expect(Files.exists(Path.join(a, "x/y/z")))
        try Files.removeTree(a)
        #expect(!Files.exists(a))
        #expect(try Files.read(outside) == [1, 2, 3])
        try Files.removeTree(a)  // nothing there: not an error
        try Files.removeTree(b)
        #expect(!Files.exists(b))
        #expect(throws: FileError.self) { try Files.makeTemporaryDirectory(in: "/nonexistent-parent", prefix: "x") }
    }

    @Test("temporaryDirectory follows TMPDIR as Foundation's does")
    func temporaryDirectory() {
        let foundation = FileManager.default.temporaryDirectory.path
        #expect(Files.temporaryDirectory == foundation || Files.temporaryDirectory + "/" == foundation)
    }

    @Test("a deadline counts down on the monotonic clock")
    func deadline() {
        let start = Deadline.now
        let d = Deadline(secondsFromNow: 0.05)
        #expect(!d.hasPassed)
        #expect(d.secondsLeft > 0 && d.secondsLeft <= 0.05)
        #expect(Deadline(secondsFromNow: -1).hasPassed)
        #expect(Deadline(secondsFromNow: -1).secondsLeft < 0)
        let later = Deadline.now
        #expect(later.seconds(since: start) >= 0)
        #expect(start <= later)
    }

    @Test("a deadline from any number of seconds is clamped, never traps, and waits on it end")
    func deadlineClamp() {
        let far = Deadline.farthestSeconds
        for value in [Double.infinity, 1e300, Double.greatestFiniteMagnitude] {
            let left = Deadline(secondsFromNow: value).secondsLeft
            #expect(left > far - 1 && left <= far, "\(value)")
        }
        for value in [-Double.infinity, -1e300] {
            let left = Deadline(secondsFromNow: value).secondsLeft
            #expect(left < -far + 1 && left > -far - 1, "\(value)")
        }
        let nan = Deadline(secondsFromNow: .nan)
        #expect(nan.hasPassed && nan.secondsLeft > -1)
        // The monotonic clock and the timespec handed to pthread_cond_timedwait agree.
        let d = Deadline(nanoseconds: 12 * 1_000_000_000 + 345)
        #expect(d.timespecValue.tv_sec == 12 && d.timespecValue.tv_nsec == 345)
        #expect(Deadline(nanoseconds: -5).timespecValue.tv_sec == 0)
        #expect(Deadline.now.seconds > 0)
        // A wait for a past or NaN number of seconds times out at once; a cancellation with an infinite bound
        // is not cancelled by its bound.
        let condition = Condition()
        condition.withLock {
            #expect(!condition.wait(seconds: -1))
            #expect(!condition.wait(seconds: .nan))
            #expect(!condition.wait(until: Deadline(nanoseconds: -5)))
        }
        let unbounded = Cancellation(seconds: .infinity)
        #expect(!unbounded.isCancelled && !unbounded.timedOut)
        #expect(Cancellation(seconds: .nan).timedOut)
        #expect(!unbounded.wait(seconds: -3))
    }

    @Test("RawBytes reads arrays, slices and raw buffers in place")
    func rawBytes() {
        func sum(_ b: some RawBytes) -> Int { b.withUnsafeBytes { $0.reduce(0) { $0 + Int($1) } } }
        let bytes: [UInt8] = [1, 2, 3, 250]
        #expect(sum(bytes) == 256)
        #expect(sum(bytes[1...]) == 255)
        #expect(sum(ContiguousArray(bytes)) == 256)
        bytes.withUnsafeBytes { #expect(sum($0) == 256) }
        var copy = bytes
        copy.withUnsafeMutableBytes { #expect(sum($0) == 256) }
    }
}
