#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The last of what the program took from FoundationEssentials, on the standard library and libc: linked, it
// brought about 20,000 relocations (with the regular-expression modules it pulls in) that every start of every
// `rollout` process applied, half a millisecond of each short command.

/// Bytes in contiguous memory, readable without a copy: arrays, slices and raw buffers. (Foundation's
/// `ContiguousBytes`, for the types this program hashes and signs.)
public protocol RawBytes {
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: RawBytes {}
extension ArraySlice: RawBytes {}
extension ContiguousArray: RawBytes {}
extension UnsafeRawBufferPointer: RawBytes {
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try body(self) }
}
extension UnsafeMutableRawBufferPointer: RawBytes {
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(self))
    }
}

/// The process's environment, read from `environ` when asked (Foundation's `ProcessInfo.environment`): a
/// variable set twice counts once, the first one, as `getenv` reads it.
public enum Environment {
    public static var current: [String: String] {
        var result: [String: String] = [:]
        var p = environ
        while let entry = p.pointee {
            let text = String(cString: entry)
            if let eq = text.firstIndex(of: "="), result[String(text[..<eq])] == nil {
                result[String(text[..<eq])] = String(text[text.index(after: eq)...])
            }
            p += 1
        }
        return result
    }
}

/// A random (version 4) UUID in its canonical upper-case form, as Foundation's `UUID().uuidString` writes it.
public func randomUUIDString() -> String {
    var g = SystemRandomNumberGenerator()
    var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &g) }
    bytes[6] = bytes[6] & 0x0F | 0x40
    bytes[8] = bytes[8] & 0x3F | 0x80
    let digits = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(36)
    for (i, b) in bytes.enumerated() {
        if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
        out.append(digits[Int(b >> 4)])
        out.append(digits[Int(b & 0x0F)])
    }
    return String(decoding: out, as: UTF8.self)
}

extension Files {
    /// Whether anything is at `path` (following links).
    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// The directory for temporary files: `$TMPDIR` when set, else `/tmp`.
    public static var temporaryDirectory: String {
        if let t = getenv("TMPDIR"), t.pointee != 0 { return String(cString: t) }
        return "/tmp"
    }

    /// Removes `path` and, if it is a directory, everything under it (symbolic links are removed, never
    /// followed). Nothing there is not an error.
    public static func removeTree(_ path: String) throws(FileError) {
        var s = stat()
        guard lstat(path, &s) == 0 else {
            if errno == ENOENT { return }
            throw FileError(path)
        }
        if (s.st_mode & S_IFMT) == S_IFDIR {
            guard let dir = opendir(path) else { throw FileError(path) }
            var names: [String] = []
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(dir)
            for name in names { try removeTree(Path.join(path, name)) }
            guard rmdir(path) == 0 || errno == ENOENT else { throw FileError(path) }
        } else {
            guard unlink(path) == 0 || errno == ENOENT else { throw FileError(path) }
        }
    }

    /// Makes a new directory with a unique name under `parent` (`mkdtemp`, mode 0700) and returns its path.
    public static func makeTemporaryDirectory(in parent: String = temporaryDirectory, prefix: String) throws(FileError)
        -> String
    {
        var template = Array(Path.join(parent, prefix + "XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) != nil }
        guard made else { throw FileError(Path.join(parent, prefix)) }
        return String(cString: template)
    }
}

extension StringProtocol {
    /// The range of the first occurrence of `text` (by Unicode scalars' bytes, as `firstRange(of:)` on
    /// UTF-8 text), or nil.
    public func range(ofText text: some StringProtocol) -> Range<Index>? {
        let needle = Array(text.utf8)
        guard !needle.isEmpty else { return startIndex..<startIndex }
        let hay = utf8
        var i = hay.startIndex
        while i != hay.endIndex {
            var j = i
            var k = 0
            while k < needle.count, j != hay.endIndex, hay[j] == needle[k] {
                hay.formIndex(after: &j)
                k += 1
            }
            if k == needle.count { return i..<j }
            hay.formIndex(after: &i)
        }
        return nil
    }

    /// The text split at every `separator` (which is not empty), empty pieces kept, as
    /// `components(separatedBy:)` does.
    public func pieces(separatedBy separator: some StringProtocol) -> [String] {
        var result: [String] = []
        var rest = self[...]
        while let r = rest.range(ofText: separator) {
            result.append(String(rest[..<r.lowerBound]))
            rest = rest[r.upperBound...]
        }
        result.append(String(rest))
        return result
    }
}

/// A moment on the monotonic clock (`CLOCK_MONOTONIC`): for time limits, waits and rates, which a change of the
/// wall clock must not stretch or cut. The one place that reads that clock.
public struct Deadline: Comparable, Sendable {
    /// Nanoseconds on the monotonic clock.
    public let nanoseconds: Int64
    /// The farthest a deadline is put from now, either way (about 31 years): beyond it, "never".
    public static let farthestSeconds = 1e9

    public static var now: Deadline {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Deadline(nanoseconds: Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec))
    }

    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// `seconds` from now, clamped to `farthestSeconds` either way; an infinite value is the farthest, and NaN is
    /// now.
    public init(secondsFromNow seconds: Double) {
        let clamped = seconds.isNaN ? 0 : max(-Self.farthestSeconds, min(seconds, Self.farthestSeconds))
        self.init(nanoseconds: Deadline.now.nanoseconds + Int64((clamped * 1e9).rounded()))
    }

    /// Seconds from the clock's origin (an arbitrary moment, the same for the whole machine): for rates and
    /// intervals, never shown as a time.
    public var seconds: Double { Double(nanoseconds) / 1e9 }
    /// Seconds from now until the deadline: negative once it has passed.
    public var secondsLeft: Double { Double(nanoseconds - Deadline.now.nanoseconds) / 1e9 }
    public var hasPassed: Bool { Deadline.now >= self }
    /// Seconds since `earlier`.
    public func seconds(since earlier: Deadline) -> Double { Double(nanoseconds - earlier.nanoseconds) / 1e9 }

    /// The moment as a `timespec` for `pthread_cond_timedwait` (never before the clock's origin).
    public var timespecValue: timespec {
        let n = max(0, nanoseconds)
        return timespec(tv_sec: Int(n / 1_000_000_000), tv_nsec: Int(n % 1_000_000_000))
    }

    public static func < (a: Deadline, b: Deadline) -> Bool { a.nanoseconds < b.nanoseconds }
}
