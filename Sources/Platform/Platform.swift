/// The few operating-system services the program needs beyond the standard library, on Glibc directly: locks,
/// a condition, threads, `printf`-style number formatting, standard streams, whole-file reads, paths and a child
/// process. They replace corelibs Foundation's `NSLock`, `NSCondition`, `Thread`, `String(format:)`,
/// `FileHandle`, `NSString` path methods and `Process`: linking that Foundation (with CoreFoundation) made every
/// start of the program map and relocate 50 MB more. Everything else comes from FoundationEssentials.
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: locks

/// A mutual-exclusion lock (not recursive). `RecursiveLock` and `Condition` are this lock with more.
public class Lock: @unchecked Sendable {
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public convenience init() { self.init(recursive: false) }

    fileprivate init(recursive: Bool) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        if recursive { pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_RECURSIVE)) }
        precondition(pthread_mutex_init(mutex, &attributes) == 0, "pthread_mutex_init")
        pthread_mutexattr_destroy(&attributes)
    }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }
    public final func lock() { pthread_mutex_lock(mutex) }
    public final func unlock() { pthread_mutex_unlock(mutex) }
    @inlinable public final func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A lock the thread that holds it may take again.
public final class RecursiveLock: Lock, @unchecked Sendable {
    public init() { super.init(recursive: true) }
}

/// A lock with a condition variable: `wait` releases the lock until signalled or until the time runs out.
public final class Condition: Lock, @unchecked Sendable {
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        // Timed waits measure on the monotonic clock, so a change of the wall clock neither cuts nor stretches them.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(condition, &attributes) == 0, "pthread_cond_init")
        pthread_condattr_destroy(&attributes)
        super.init(recursive: false)
    }
    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
    }
    public func signal() { pthread_cond_signal(condition) }
    public func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits (the lock held) until signalled or the deadline; false when the deadline passed.
    public func wait(until deadline: Deadline) -> Bool {
        var d = deadline.timespecValue
        return pthread_cond_timedwait(condition, mutex, &d) != ETIMEDOUT
    }

    /// Waits (the lock held) until signalled or `seconds` pass; false when they passed.
    public func wait(seconds: Double) -> Bool { wait(until: Deadline(secondsFromNow: seconds)) }
}

// MARK: threads

/// Runs `body` on a new detached thread.
public func detachThread(_ body: @escaping @Sendable () -> Void) {
    precondition(tryDetachThread(body), "pthread_create failed")
}

/// Runs `body` on a new detached thread; false (and `body` never runs) when the system has no thread to give.
public func tryDetachThread(_ body: @escaping @Sendable () -> Void) -> Bool {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let status = pthread_create(
        &thread, nil,
        { raw in
            let box = Unmanaged<AnyObject>.fromOpaque(raw!).takeRetainedValue() as! Box
            box.body()
            return nil
        }, box)
    guard status == 0 else {
        Unmanaged<AnyObject>.fromOpaque(box).release()
        return false
    }
    pthread_detach(thread)
    return true
}

// MARK: formatting

/// The C locale's numbers (`LC_NUMERIC_MASK`, a macro that does not import), so a decimal point prints as a
/// full stop whatever `setlocale` the console made.
nonisolated(unsafe) private let cLocale: locale_t? = newlocale(Int32(1) << LC_NUMERIC, "C", nil)

/// `printf`-style formatting of numbers (`%.2f`, `%04x`, `%+.3f`, `%.1e`...), in the C locale. Arguments are
/// numbers only: `%s` and `%@` are not for this.
public func cFormat(_ format: String, _ arguments: any CVarArg...) -> String {
    withVaList(arguments) { list in
        let previous = uselocale(cLocale)
        defer { uselocale(previous) }
        var buffer = [CChar](repeating: 0, count: 128)
        let length = buffer.withUnsafeMutableBufferPointer { vsnprintf($0.baseAddress, $0.count, format, list) }
        guard length >= 0 else { return "" }
        if Int(length) < buffer.count { return String(decoding: buffer.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        // Longer than the buffer: a second pass needs a fresh va_list.
        return withVaList(arguments) { again in
            var big = [CChar](repeating: 0, count: Int(length) + 1)
            _ = big.withUnsafeMutableBufferPointer { vsnprintf($0.baseAddress, $0.count, format, again) }
            return String(decoding: big.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}

// MARK: standard streams and files

/// The process's standard streams, written and read whole through their descriptors (no stdio buffering).
public enum StandardStream {
    case output, error

    private var descriptor: Int32 { self == .output ? 1 : 2 }

    /// Writes all of `text`, retrying short writes and interrupted calls; a closed pipe drops the rest.
    public func write(_ text: String) {
        var copy = text
        _ = copy.withUTF8 { writeAll(descriptor, UnsafeRawBufferPointer($0)) }
    }

    /// Writes all of `bytes`.
    public func write(_ bytes: [UInt8]) { _ = bytes.withUnsafeBytes { writeAll(descriptor, $0) } }

    /// Reads standard input to its end, or to `limit` bytes (then one more, so a caller can tell it was longer).
    public static func readInput(limit: Int = .max) -> [UInt8] { readAll(0, limit: limit) ?? [] }
}

/// Writes all of `bytes`, retrying short writes and interrupted calls; false (errno set) when a write fails.
@discardableResult private func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    guard var p = bytes.baseAddress else { return true }
    var left = bytes.count
    while left > 0 {
        let n = Glibc.write(fd, p, left)
        if n < 0 {
            if errno == EINTR { continue }
            return false
        }
        p += n
        left -= n
    }
    return true
}

/// Reads from `fd` until end of file or more than `limit` bytes (at most limit + 1 are returned); nil when a read
/// fails (a directory, say).
private func readAll(_ fd: Int32, limit: Int) -> [UInt8]? {
    // The chunk is neither zeroed nor larger than the read can use: a 100-byte header read zeroed 64 KiB (16
    // pages to fault in, every store open).
    let size = limit == .max ? 65_536 : min(65_536, limit + 1)
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { chunk -> [UInt8]? in
        var out: [UInt8] = []
        while out.count <= limit {
            let want = min(chunk.count, limit == .max ? chunk.count : limit + 1 - out.count)
            let n = Glibc.read(fd, chunk.baseAddress, want)
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return nil
            }
            if n == 0 { break }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: chunk[0..<n]))
        }
        return out
    }
}

/// A failed file operation: the path and the system's words for errno.
public struct FileError: Error, CustomStringConvertible, Sendable {
    public let path: String
    public let code: Int32
    public var reason: String { String(cString: strerror(code)) }
    public var description: String { "\(path): \(reason)" }
    public init(_ path: String, code: Int32 = errno) {
        self.path = path
        self.code = code
    }
}

/// Files through their descriptors: whole or prefix reads, atomic replacement, directories.
public enum Files {
    /// The first `limit` bytes (at least 1) of a file, or all of it when shorter. Throws when it cannot be opened
    /// or read (missing, no permission, a directory).
    public static func read(_ path: String, limit: Int = .max) throws(FileError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw FileError(path) }
        defer { close(fd) }
        guard let bytes = readAll(fd, limit: limit == .max ? .max : max(0, limit - 1)) else { throw FileError(path) }
        return bytes
    }

    /// Replaces the file at `path` with `bytes` whole or not at all: a temporary file beside it, written and
    /// synced, then renamed over it, and the directory synced. A new file gets `mode`.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) throws(FileError) {
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode)
        guard fd >= 0 else { throw FileError(path) }
        let written = bytes.withUnsafeBytes { writeAll(fd, $0) }
        let failure = !written ? errno : fsync(fd) != 0 ? errno : 0
        close(fd)
        guard failure == 0 else {
            unlink(temporary)
            throw FileError(path, code: failure)
        }
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw FileError(path, code: code)
        }
        let directory = Path.directory(of: path)
        let dfd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_CLOEXEC)
        if dfd >= 0 {
            _ = fsync(dfd)
            close(dfd)
        }
    }

    /// Makes `directory` and its missing parents, each new one with `mode`.
    public static func makeDirectories(_ directory: String, mode: mode_t = 0o700) throws(FileError) {
        guard !directory.isEmpty, access(directory, F_OK) != 0 else { return }
        try makeDirectories(Path.directory(of: directory), mode: mode)
        if mkdir(directory, mode) != 0, errno != EEXIST { throw FileError(directory) }
    }

    /// Whether `path` names a directory (following links); nil when nothing is there (or it cannot be seen).
    public static func isDirectory(_ path: String) -> Bool? {
        var s = stat()
        guard stat(path, &s) == 0 else { return nil }
        return (s.st_mode & S_IFMT) == S_IFDIR
    }

    /// The size in bytes of the file at `path` (following links), or nil.
    public static func size(_ path: String) -> Int? {
        var s = stat()
        guard stat(path, &s) == 0 else { return nil }
        return Int(s.st_size)
    }

    /// The path of the running executable (Linux: `/proc/self/exe`).
    public static var executablePath: String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

// MARK: paths

/// Path arithmetic on strings, as `NSString`'s path methods do it: trailing slashes do not count, the root
/// stays the root.
public enum Path {
    private static func trimmed(_ path: String) -> Substring {
        var s = Substring(path)
        while s.count > 1, s.hasSuffix("/") { s = s.dropLast() }
        return s
    }

    /// `a/b/c` → `a/b`; `a` → ``; `/a` → `/`; `/` → `/`.
    public static func directory(of path: String) -> String {
        let s = trimmed(path)
        guard let slash = s.lastIndex(of: "/") else { return "" }
        if slash == s.startIndex { return "/" }
        var head = s[..<slash]
        while head.count > 1, head.hasSuffix("/") { head = head.dropLast() }
        return String(head)
    }

    /// `a/b/c.txt` → `c.txt`; `/` → `/`.
    public static func lastComponent(of path: String) -> String {
        let s = trimmed(path)
        if s == "/" { return "/" }
        guard let slash = s.lastIndex(of: "/") else { return String(s) }
        return String(s[s.index(after: slash)...])
    }

    /// `c.txt` → `c`; `.profile` → `.profile`; `a.b.c` → `a.b`.
    public static func deletingExtension(_ name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex, !name[dot...].contains("/") else { return name }
        return String(name[..<dot])
    }

    /// `a` + `b` → `a/b` (one slash between them).
    public static func join(_ a: String, _ b: String) -> String {
        if a.isEmpty { return b }
        return a.hasSuffix("/") ? a + b : a + "/" + b
    }
}

// MARK: child processes

/// Runs `/bin/sh -c command` with standard input from /dev/null and returns its exit status and standard
/// output (standard error passes through).
///
/// At most `outputLimit` bytes of output are read: a command that prints more is ended and refused
/// (`ChildProcessError.outputTooLong`), having cost no more than the limit. With `cancellation`, the command runs in
/// a process group of its own, and once the cancellation is cancelled (a stop, a time bound) the whole group is
/// killed (SIGKILL: a `sleep` the shell started dies with it), reaped, and `ChildProcessError.cancelled` thrown
/// within about a tenth of a second. Without one, the command stays in the caller's process group, so that a
/// terminal's Ctrl-C reaches it as it reaches the caller.
public func runShell(
    _ command: String, outputLimit: Int = .max, cancellation: Cancellation? = nil
) throws(ChildProcessError) -> (status: Int32, output: [UInt8]) {
    var pipeFDs: [Int32] = [-1, -1]
    guard pipe(&pipeFDs) == 0 else { throw ChildProcessError("pipe: \(String(cString: strerror(errno)))") }
    // Neither end leaks into another child; the child gets the write end as its descriptor 1 only.
    _ = fcntl(pipeFDs[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(pipeFDs[1], F_SETFD, FD_CLOEXEC)
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, pipeFDs[1], 1)
    // The child starts with no signal blocked and every signal at its default: a thread of this process may have
    // some blocked (Dispatch blocks them in its workers), and a child inherits the mask and ignored signals.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var none = sigset_t()
    sigemptyset(&none)
    var all = sigset_t()
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attributes, &none)
    posix_spawnattr_setsigdefault(&attributes, &all)
    var flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
    let ownGroup = cancellation != nil
    if ownGroup {
        // Process group 0: a new group whose id is the child's pid, so that `kill(-pid)` reaches its children too.
        posix_spawnattr_setpgroup(&attributes, 0)
        flags |= POSIX_SPAWN_SETPGROUP
    }
    posix_spawnattr_setflags(&attributes, Int16(flags))
    var pid: pid_t = 0
    let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(command), nil]
    defer { for a in argv { free(a) } }
    let status = posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, environ)
    close(pipeFDs[1])
    guard status == 0 else {
        close(pipeFDs[0])
        throw ChildProcessError("cannot start /bin/sh: \(String(cString: strerror(status)))")
    }
    let child = ChildProcess(pid: pid, ownGroup: ownGroup)
    defer { close(pipeFDs[0]) }
    let output: [UInt8]
    do { output = try child.read(pipeFDs[0], limit: outputLimit, cancellation: cancellation) } catch {
        child.end()
        throw error
    }
    return (try child.exitStatus(cancellation: cancellation), output)
}

/// A child `runShell` started: its output read within a limit and a cancellation, its end waited for or forced.
private struct ChildProcess {
    let pid: pid_t
    let ownGroup: Bool
    /// How often a wait looks at the cancellation.
    static let slice: Int32 = 100

    /// The output up to end of file; throws (the child still running) past `limit` or once cancelled.
    func read(_ fd: Int32, limit: Int, cancellation: Cancellation?) throws(ChildProcessError) -> [UInt8] {
        let size = limit == .max ? 65_536 : min(65_536, limit + 1)
        var chunk = [UInt8](repeating: 0, count: size)
        var out: [UInt8] = []
        while true {
            if cancellation?.isCancelled == true { throw .cancelled }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let n = poll(&ready, 1, cancellation == nil ? -1 : Self.slice)
            if n < 0 && errno != EINTR { throw ChildProcessError("poll: \(String(cString: strerror(errno)))") }
            if n <= 0 { continue }
            // At most one byte past the limit is read: enough to tell the output is too long.
            let want = limit == .max ? chunk.count : min(chunk.count, limit + 1 - out.count)
            let got = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, want) }
            if got < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw ChildProcessError("read: \(String(cString: strerror(errno)))")
            }
            if got == 0 { return out }
            out.append(contentsOf: chunk[0..<got])
            if out.count > limit { throw .outputTooLong(limit) }
        }
    }

    /// Waits for the child to exit: its status (128 + the signal when a signal ended it). Once `cancellation` is
    /// cancelled, ends it instead and throws.
    func exitStatus(cancellation: Cancellation?) throws(ChildProcessError) -> Int32 {
        var wait: Int32 = 0
        while true {
            let r = waitpid(pid, &wait, cancellation == nil ? 0 : WNOHANG)
            if r == pid { break }
            if r < 0 {
                if errno == EINTR { continue }
                throw ChildProcessError("waitpid: \(String(cString: strerror(errno)))")
            }
            // Output closed, the shell still running (it closed its standard output, or a child holds it).
            if cancellation!.wait(seconds: Double(Self.slice) / 1000) {
                end()
                throw .cancelled
            }
        }
        // WIFEXITED / WEXITSTATUS, by hand: the macros do not import.
        let exited = wait & 0x7f == 0
        return exited ? (wait >> 8) & 0xff : 128 + (wait & 0x7f)
    }

    /// Kills the child (its process group when it has one of its own) and reaps it.
    func end() {
        kill(ownGroup ? -pid : pid, SIGKILL)
        var wait: Int32 = 0
        while waitpid(pid, &wait, 0) < 0 && errno == EINTR {}
    }
}

public struct ChildProcessError: Error, CustomStringConvertible, Sendable {
    public let description: String
    /// The command was ended because its `cancellation` was cancelled.
    public var cancelled = false
    /// The command was ended because it printed more than this many bytes.
    public var outputLimit: Int?
    public init(_ description: String) { self.description = description }

    static let cancelled: ChildProcessError = {
        var e = ChildProcessError("ended: cancelled")
        e.cancelled = true
        return e
    }()

    static func outputTooLong(_ limit: Int) -> ChildProcessError {
        var e = ChildProcessError("ended: it printed more than \(limit) bytes")
        e.outputLimit = limit
        return e
    }
}

// MARK: percent-encoding

/// Percent-encoding of every UTF-8 byte that is not an ASCII letter or digit or one of `keeping` (ASCII), as
/// `%XX` with capitals.
public func percentEncoded(_ s: String, keeping: String) -> String {
    let kept = Set(keeping.utf8)
    let hex = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    out.reserveCapacity(s.utf8.count)
    for b in s.utf8 {
        let alphanumeric =
            (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z")) || (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z"))
            || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
        if alphanumeric || kept.contains(b) {
            out.append(b)
        } else {
            out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
        }
    }
    return String(decoding: out, as: UTF8.self)
}

// MARK: the user

/// The user running the program, from the password database (for defaults when the environment says nothing).
public enum CurrentUser {
    /// The home directory (`pw_dir`), else `/`.
    public static var home: String {
        guard let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir else { return "/" }
        return String(cString: dir)
    }

    /// The login name (`pw_name`), else the numeric uid.
    public static var name: String {
        guard let pw = getpwuid(getuid()), let name = pw.pointee.pw_name else { return String(getuid()) }
        return String(cString: name)
    }

    /// The machine's host name (`gethostname`), else `localhost`: what operator ids and publish intents are
    /// stamped with. Foundation's `ProcessInfo.hostName` gives the same, but building `ProcessInfo` (its
    /// environment, arguments and process name) cost every CLI write 65k instructions.
    public static var hostName: String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let ok = buffer.withUnsafeMutableBytes { gethostname($0.baseAddress!.assumingMemoryBound(to: CChar.self), $0.count - 1) }
        let end = buffer.firstIndex(of: 0) ?? buffer.count
        guard ok == 0, end > 0 else { return "localhost" }
        return String(decoding: buffer[..<end], as: UTF8.self)
    }
}

// MARK: the program's arguments

public enum ProgramArguments {
    /// The program's arguments, its name first: `CommandLine.arguments`, or the kernel's copy in
    /// /proc/self/cmdline when the Swift runtime found none. On Linux the runtime finds argv from a constructor, by
    /// walking back from `environ` on the initial stack; a preloaded library whose constructor ran first and added
    /// an environment variable (libfaketime does) has moved `environ` to the heap by then, and the program saw no
    /// arguments at all: `rollout kill --reason …` printed its help and exited 0, having done nothing.
    public static func current() -> [String] {
        let arguments = CommandLine.arguments
        guard arguments.isEmpty, let bytes = try? Files.read("/proc/self/cmdline") else { return arguments }
        return split(bytes)
    }

    /// The NUL-terminated strings of `bytes`, as /proc/PID/cmdline holds them (an empty argument is an empty
    /// string; bytes after the last NUL, if any, are one more argument).
    public static func split(_ bytes: [UInt8]) -> [String] {
        var result: [String] = []
        var start = 0
        for (i, byte) in bytes.enumerated() where byte == 0 {
            result.append(String(decoding: bytes[start..<i], as: UTF8.self))
            start = i + 1
        }
        if start < bytes.count { result.append(String(decoding: bytes[start...], as: UTF8.self)) }
        return result
    }
}
