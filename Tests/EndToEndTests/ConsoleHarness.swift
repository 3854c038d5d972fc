import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A program running in a real terminal: tmux on a private socket, driven by keys and read back as text.
///
/// Each session has its own tmux server (`-L` with a unique socket name, `-f /dev/null` so no user configuration
/// leaks in), lets tmux set `TERM`, keeps the pane after the program exits to read its exit status, and is torn
/// down by `close()` or when released. Reads wait for text to appear instead of sleeping a fixed time.
final class TerminalSession {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let socket: String
    let tmux: String
    /// Where the wrapper shell writes the program's exit status (tmux's own `pane_dead_status` is sometimes
    /// never filled in when the server misses the child's exit).
    let statusFile: URL
    private var closed = false

    /// Starts `command` (program and arguments, quoted for the shell here) in a `width`×`height` pane.
    ///
    /// `environment` is set for the program; a nil value removes the variable (e.g. `["TERM": nil]`). The program
    /// runs under a small shell that records its exit status; that shell catches SIGINT, so Ctrl-C reaches the
    /// program the way it would in a terminal and the shell still writes the status afterwards. Closing the
    /// session hangs up the terminal, which ends both. With `shellCatchesHangUp` the shell catches SIGHUP too, as a
    /// parent that traps HUP does: the kernel then signals only that shell (the session leader) when the terminal
    /// goes away, and the program learns of it from its terminal alone.
    init(
        _ command: [String], width: Int = 80, height: Int = 24, environment: [String: String?] = [:],
        terminal: String = "tmux-256color", directory: URL? = nil, shellCatchesHangUp: Bool = false
    ) throws {
        tmux = try Self.findTmux()
        let id = UUID().uuidString.prefix(8)
        socket = "rollout-e2e-\(id)"
        statusFile = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-e2e-\(id).status")
        // env takes its options (-u NAME) before the assignments.
        var env = ["env"]
        let sorted = environment.sorted { $0.key < $1.key }
        for (key, value) in sorted where value == nil { env += ["-u", key] }
        for (key, value) in sorted { if let value { env.append("\(key)=\(value)") } }
        // Several arguments make tmux run the wrapper directly, without a shell of its own in between, so the
        // program is the wrapper's only child.
        let wrapper =
            (shellCatchesHangUp ? "trap : HUP; " : "") + "trap : INT; \"$@\"; echo $? > \(Self.quote(statusFile.path))"
        let directoryOption = directory.map { ["-c", $0.path] } ?? []
        try run(
            [
                "start-server", ";",
                "set-option", "-g", "default-terminal", terminal, ";",
                "set-option", "-g", "remain-on-exit", "on", ";",
                "set-option", "-g", "history-limit", "0", ";",
                "new-session", "-d", "-s", "main", "-x", String(width), "-y", String(height),
            ] + directoryOption + ["sh", "-c", wrapper, "rollout-e2e"] + env + command)
    }

    deinit { close() }

    /// Stops the tmux server (and with it the program, if still running).
    func close() {
        guard !closed else { return }
        closed = true
        _ = try? run(["kill-server"], check: false)
        try? FileManager.default.removeItem(at: statusFile)
    }

    /// Takes the terminal away from the program, as closing a terminal window does (the tmux session ends and its
    /// pseudo-terminal with it), keeping what `exitStatus` reads.
    func hangUp() throws {
        try run(["kill-session", "-t", "main"])
    }

    /// The pane's text, one line per row, trailing spaces removed.
    func screen() throws -> String {
        try run(["capture-pane", "-p", "-t", "main"])
    }

    /// The pane's text with the lines the terminal wrapped joined again (`capture-pane -J`): equal to `screen()`
    /// exactly when no line was longer than the pane.
    func joinedScreen() throws -> String {
        // -J also keeps trailing spaces, which `screen()` does not show.
        let joined = try run(["capture-pane", "-p", "-J", "-t", "main"])
        return joined.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            var l = Substring(line)
            while l.last == " " { l = l.dropLast() }
            return String(l)
        }.joined(separator: "\n")
    }

    /// The pane's text with colour and attribute escape sequences (`capture-pane -e`).
    func screenWithAttributes() throws -> String {
        try run(["capture-pane", "-p", "-e", "-t", "main"])
    }

    /// Waits until the screen satisfies `predicate`; returns that screen, or fails with the last one seen.
    ///
    /// The screen returned is a whole frame: a frame larger than the pseudo-terminal's buffer reaches tmux in
    /// pieces, and a capture between two of them shows the new frame's first rows over the old one's last. So a
    /// match counts once a second capture 40 ms later is the same (or, on a screen that keeps changing, after
    /// five matches in a row that each differed from the next).
    @discardableResult
    func waitUntil(
        _ what: String, timeout: TimeInterval = 10, _ predicate: (String) -> Bool
    ) throws -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var last = ""
        var unsettled = 0
        repeat {
            last = try screen()
            if predicate(last) {
                usleep(40_000)
                let again = try screen()
                if again == last || unsettled >= 4 || Date() >= deadline { return predicate(again) ? again : last }
                unsettled += 1
                continue
            }
            unsettled = 0
            usleep(20_000)
        } while Date() < deadline
        // The screen is also written to a file: some test runners drop issue text with box-drawing characters.
        let dump = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-e2e-timeout-\(socket).txt")
        try? last.write(to: dump, atomically: true, encoding: .utf8)
        throw Failure(description: "timed out after \(timeout)s waiting for \(what) (screen saved in \(dump.path)); the screen was:\n\(last)")
    }

    /// Waits until `text` appears on the screen.
    @discardableResult
    func waitFor(_ text: String, timeout: TimeInterval = 10) throws -> String {
        try waitUntil("'\(text)'", timeout: timeout) { $0.contains(text) }
    }

    /// Waits until `text` is gone from the screen.
    @discardableResult
    func waitForAbsence(of text: String, timeout: TimeInterval = 10) throws -> String {
        try waitUntil("'\(text)' to disappear", timeout: timeout) { !$0.contains(text) }
    }

    /// Sends tmux key names: `Enter`, `Escape`, `Tab`, `C-c`, `Left`, `+`.
    func press(_ keys: String...) throws {
        try run(["send-keys", "-t", "main"] + keys)
    }

    /// Types text literally.
    func type(_ text: String) throws {
        try run(["send-keys", "-t", "main", "-l", text])
    }

    /// Copies everything the program writes to the terminal from now on into `file` (tmux `pipe-pane -o`), to
    /// count the bytes an idle program writes.
    func captureOutput(to file: URL) throws {
        try run(["pipe-pane", "-o", "-t", "main", "cat >> " + Self.quote(file.path)])
    }

    /// Sends a left click at column `x`, row `y` (0-based) as an xterm reports it in its normal mouse mode (1000,
    /// the `kmous=\E[M` of tmux's terminfo): press then release, each `ESC [ M` and three bytes of 32 + value. The
    /// encoding stops at column and row 94 (the bytes must stay ASCII to pass through `send-keys -l`).
    func click(x: Int, y: Int) throws {
        precondition(x < 94 && y < 94, "the normal mouse encoding needs ASCII bytes")
        func event(_ button: Int) -> String {
            "\u{1B}[M" + String(UnicodeScalar(UInt8(32 + button))) + String(UnicodeScalar(UInt8(33 + x)))
                + String(UnicodeScalar(UInt8(33 + y)))
        }
        try run(["send-keys", "-t", "main", "-l", event(0) + event(3)])
    }

    /// Sends one notch of the mouse wheel at column `x`, row `y` in the same encoding as `click`: buttons 4 (up)
    /// and 5 (down) are reported as 64 and 65, with no release.
    func wheel(down: Bool, x: Int, y: Int) throws {
        precondition(x < 94 && y < 94, "the normal mouse encoding needs ASCII bytes")
        let event =
            "\u{1B}[M" + String(UnicodeScalar(UInt8(32 + (down ? 65 : 64)))) + String(UnicodeScalar(UInt8(33 + x)))
            + String(UnicodeScalar(UInt8(33 + y)))
        try run(["send-keys", "-t", "main", "-l", event])
    }

    /// The column and row where `text` first appears on the screen.
    func position(of text: String) throws -> (x: Int, y: Int)? {
        for (y, line) in try screen().split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if let r = line.range(of: text) { return (line[..<r.lowerBound].count, y) }
        }
        return nil
    }

    /// Whether the program asked the terminal to report mouse events: tmux's own record of the pane's modes
    /// (`mouse_any_flag`, set by `ESC [ ? 1000 h` and its siblings).
    func reportsMouse() throws -> Bool {
        try run(["display-message", "-p", "-t", "main", "#{mouse_any_flag}"]).trimmingCharacters(in: .whitespacesAndNewlines)
            == "1"
    }

    /// Resizes the terminal the program sees.
    func resize(width: Int, height: Int) throws {
        try run(["resize-window", "-t", "main", "-x", String(width), "-y", String(height)])
    }

    /// The program's exit status once it has ended (128 + N when signal N ended it), waiting up to `timeout`.
    func exitStatus(timeout: TimeInterval = 10) throws -> Int32 {
        let deadline = Date(timeIntervalSinceNow: timeout)
        repeat {
            if let text = try? String(contentsOf: statusFile, encoding: .utf8),
                let status = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return status
            }
            usleep(20_000)
        } while Date() < deadline
        throw Failure(
            description: "the program still runs after \(timeout)s; processes: \(processTree()); the screen was:\n"
                + ((try? screen()) ?? "(no terminal any more)"))
    }

    /// The pane's processes with their state and signal masks, for failure messages.
    func processTree() -> String {
        guard let text = try? run(["display-message", "-p", "-t", "main", "#{pane_pid}"]),
            let root = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
        else { return "unknown" }
        var out: [String] = []
        var queue = [root]
        while let pid = queue.first {
            queue.removeFirst()
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            let fields = status.split(separator: "\n").filter {
                $0.hasPrefix("Name") || $0.hasPrefix("State") || $0.hasPrefix("SigBlk") || $0.hasPrefix("SigIgn")
                    || $0.hasPrefix("SigCgt")
            }
            out.append("\(pid)[" + fields.joined(separator: ", ") + "]")
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
            queue += children.split(separator: " ").compactMap { Int32($0) }
        }
        return out.joined(separator: " ")
    }

    /// The process id of the program (the child of the pane's wrapper shell), to send it a signal.
    func programPID(timeout: TimeInterval = 5) throws -> Int32 {
        let text = try run(["display-message", "-p", "-t", "main", "#{pane_pid}"])
        guard let shell = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw Failure(description: "no pane pid in '\(text)'")
        }
        let deadline = Date(timeIntervalSinceNow: timeout)
        repeat {
            let children = (try? String(contentsOfFile: "/proc/\(shell)/task/\(shell)/children", encoding: .utf8)) ?? ""
            if let first = children.split(separator: " ").first, let pid = Int32(first) { return pid }
            usleep(20_000)
        } while Date() < deadline
        throw Failure(description: "the pane's shell \(shell) has no child process")
    }

    /// Whether the program rang the terminal bell since the session started (tmux's bell flag of the window; a
    /// detached session keeps it set).
    func bellRang() throws -> Bool {
        try run(["display-message", "-p", "-t", "main", "#{window_bell_flag}"]).trimmingCharacters(in: .whitespacesAndNewlines) == "1"
    }

    @discardableResult
    private func run(_ arguments: [String], check: Bool = true) throws -> String {
        let (status, output) = try Self.spawn(tmux, ["-L", socket, "-f", "/dev/null"] + arguments)
        if check && status != 0 {
            throw Failure(description: "tmux \(arguments.joined(separator: " ")) failed (\(status)): \(output)")
        }
        return output
    }

    /// Runs a program with a clean signal mask and default dispositions, returning its status and output.
    ///
    /// Not `Foundation.Process`: children it starts from the test runner inherit a mask blocking SIGCHLD and
    /// SIGTERM, and a tmux server started that way never notices its panes exit and ignores `kill-server`.
    static func spawn(_ program: String, _ arguments: [String]) throws -> (Int32, String) {
        // Close-on-exec from the start: tests run in parallel, and a pipe end leaking into another test's tmux
        // server (which lives on) would keep this read from ever seeing the end of the output.
        var fds: [Int32] = [-1, -1]
        guard GlibcExtensions.pipe2(&fds, O_CLOEXEC) == 0 else { throw Failure(description: "pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        // Nothing else of the test runner's (sockets, other tests' pipes) may reach the long-lived tmux server.
        GlibcExtensions.closeFrom(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, program, &actions, &attributes, argv, environ)
        closeDescriptor(fds[1])
        guard rc == 0 else {
            closeDescriptor(fds[0])
            throw Failure(description: "cannot start \(program): error \(rc)")
        }
        var output = Data()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fds[0], &buffer, buffer.count)
            if n > 0 {
                output.append(contentsOf: buffer[0..<n])
            } else if n == 0 || errno != EINTR {
                break
            }
        }
        closeDescriptor(fds[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let exitStatus = (status & 0x7F) == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        return (exitStatus, String(decoding: output, as: UTF8.self))
    }

    static func quote(_ word: String) -> String {
        if !word.isEmpty && word.allSatisfy({ $0.isLetter || $0.isNumber || "-_./=:@%+,".contains($0) }) { return word }
        return "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    static func findTmux() throws -> String {
        for path in ["/usr/bin/tmux", "/usr/local/bin/tmux", "/opt/homebrew/bin/tmux"]
        where FileManager.default.isExecutableFile(atPath: path) {
            return path
        }
        throw Failure(description: "tmux is not installed; the end-to-end console tests need it (apt-get install tmux)")
    }
}

private func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// GNU extensions the Glibc module does not export (they need _GNU_SOURCE); looked up by name once.
private enum GlibcExtensions {
    typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
    typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    static let pipe2Function = dlsym(dlopen(nil, RTLD_NOW), "pipe2").map { unsafeBitCast($0, to: Pipe2.self) }
    static let closeFromFunction = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: CloseFrom.self) }

    static func pipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32 {
        guard let f = pipe2Function else { return -1 }
        return f(fds, flags)
    }

    static func closeFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ lowest: Int32) {
        _ = closeFromFunction?(actions, lowest)
    }
}
