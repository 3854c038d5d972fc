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
    private var closed = false

    /// Starts `command` (program and arguments, quoted for the shell here) in a `width`×`height` pane.
    ///
    /// `environment` is set for the program; a nil value removes the variable (e.g. `["TERM": nil]`).
    init(
        _ command: [String], width: Int = 80, height: Int = 24, environment: [String: String?] = [:],
        terminal: String = "tmux-256color", directory: URL? = nil
    ) throws {
        tmux = try Self.findTmux()
        socket = "rollout-e2e-\(UUID().uuidString.prefix(8))"
        // env takes its options (-u NAME) before the assignments.
        var env = ["env"]
        let sorted = environment.sorted { $0.key < $1.key }
        for (key, value) in sorted where value == nil { env += ["-u", key] }
        for (key, value) in sorted { if let value { env.append("\(key)=\(value)") } }
        var shell = (env + command).map(Self.quote).joined(separator: " ")
        if let directory { shell = "cd \(Self.quote(directory.path)) && exec " + shell }
        try run([
            "start-server", ";",
            "set-option", "-g", "default-terminal", terminal, ";",
            "set-option", "-g", "remain-on-exit", "on", ";",
            "set-option", "-g", "history-limit", "0", ";",
            "new-session", "-d", "-s", "main", "-x", String(width), "-y", String(height), shell,
        ])
    }

    deinit { close() }

    /// Stops the tmux server (and with it the program, if still running).
    func close() {
        guard !closed else { return }
        closed = true
        _ = try? run(["kill-server"], check: false)
    }

    /// The pane's text, one line per row, trailing spaces removed.
    func screen() throws -> String {
        try run(["capture-pane", "-p", "-t", "main"])
    }

    /// The pane's text with colour and attribute escape sequences (`capture-pane -e`).
    func screenWithAttributes() throws -> String {
        try run(["capture-pane", "-p", "-e", "-t", "main"])
    }

    /// Waits until the screen satisfies `predicate`; returns that screen, or fails with the last one seen.
    @discardableResult
    func waitUntil(
        _ what: String, timeout: TimeInterval = 10, _ predicate: (String) -> Bool
    ) throws -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        var last = ""
        repeat {
            last = try screen()
            if predicate(last) { return last }
            usleep(20_000)
        } while Date() < deadline
        throw Failure(description: "timed out after \(timeout)s waiting for \(what); the screen was:\n\(last)")
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

    /// Resizes the terminal the program sees.
    func resize(width: Int, height: Int) throws {
        try run(["resize-window", "-t", "main", "-x", String(width), "-y", String(height)])
    }

    /// The program's exit status once it has ended, waiting up to `timeout`.
    func exitStatus(timeout: TimeInterval = 10) throws -> Int32 {
        let deadline = Date(timeIntervalSinceNow: timeout)
        repeat {
            let fields = try run(["display-message", "-p", "-t", "main", "#{pane_dead} #{pane_dead_status}"])
                .split(separator: " ")
            if fields.first == "1", fields.count > 1,
                let status = Int32(fields[1].trimmingCharacters(in: .whitespacesAndNewlines))
            {
                return status
            }
            usleep(20_000)
        } while Date() < deadline
        throw Failure(description: "the program still runs after \(timeout)s; the screen was:\n\(try screen())")
    }

    /// The process id of the program in the pane (to send it a signal).
    func programPID() throws -> Int32 {
        let text = try run(["display-message", "-p", "-t", "main", "#{pane_pid}"])
        guard let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw Failure(description: "no pane pid in '\(text)'")
        }
        return pid
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
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw Failure(description: "pipe failed") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addclose(&actions, fds[1])
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
