#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Signals turned into wake-ups of the run loop, and a last-resort terminal restore on a crash.
///
/// Handlers only write one byte (the signal number) into a pipe, which is async-signal-safe; the run loop reads
/// the pipe and reacts on its own thread, where it may call curses. The handlers are installed before `newterm`,
/// so ncurses does not install its own (it only does when the disposition is still the default). On a crash
/// (SIGSEGV, SIGILL, SIGTRAP from a Swift trap, SIGABRT, SIGBUS, SIGFPE) the handler writes the terminal's own
/// reset sequence and restores the saved line settings, then hands the signal to whoever handled it before.
enum SignalTrap {
    /// SIGINT, SIGTERM, SIGHUP end the console; SIGWINCH resizes it.
    static let watched: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGWINCH]
    static let crashes: [Int32] = [SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT]

    /// The self-pipe: the run loop polls `read`; handlers and background threads write to `write`.
    static let pipeEnds: (read: Int32, write: Int32) = {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return (-1, -1) }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return (fds[0], fds[1])
    }()

    /// What the crash handler needs, prepared while the terminal is set up (never allocated in the handler).
    nonisolated(unsafe) static var resetBytes = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)
    nonisolated(unsafe) static var resetCount = 0
    nonisolated(unsafe) static var terminalFD: Int32 = -1
    nonisolated(unsafe) static var savedMode = termios()
    nonisolated(unsafe) static var hasSavedMode = false
    nonisolated(unsafe) static var previous = UnsafeMutablePointer<sigaction>.allocate(capacity: 65)

    /// Installs the handlers; idempotent until `uninstall`.
    static func install() {
        _ = pipeEnds
        for sig in watched { setHandler(sig, wakeHandler, saveInto: previous + Int(sig)) }
        for sig in crashes { setHandler(sig, crashHandler, saveInto: previous + Int(sig)) }
        // A parent may hand down a mask blocking these (test runners do); the input thread must receive them.
        var set = sigset_t()
        sigemptyset(&set)
        for sig in watched { sigaddset(&set, sig) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// Puts back the dispositions found by `install`.
    static func uninstall() {
        for sig in watched + crashes { sigaction(sig, previous + Int(sig), nil) }
        hasSavedMode = false
        resetCount = 0
    }

    /// Remembers how to give the terminal back if the process dies: the line settings and a reset sequence.
    static func arm(fd: Int32, mode: termios, reset: [UInt8]) {
        terminalFD = fd
        savedMode = mode
        hasSavedMode = true
        let n = min(reset.count, 256)
        for i in 0..<n { resetBytes[i] = reset[i] }
        resetCount = n
    }

    /// Wakes the run loop from another thread (data arrived); 0 is never a signal number.
    static func wake() {
        var byte: UInt8 = 0
        _ = write(pipeEnds.write, &byte, 1)
    }

    /// Drains the pipe and returns the signals found in it (wake-ups from threads are dropped).
    static func drain() -> [Int32] {
        var signals: [Int32] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let n = read(pipeEnds.read, &buffer, buffer.count)
            if n <= 0 { break }
            for b in buffer[0..<n] where b != 0 { signals.append(Int32(b)) }
        }
        return signals
    }

    private static func setHandler(
        _ sig: Int32, _ handler: @convention(c) (Int32) -> Void, saveInto old: UnsafeMutablePointer<sigaction>
    ) {
        var action = sigaction()
        #if canImport(Glibc)
            action.__sigaction_handler = unsafeBitCast(handler, to: sigaction.__Unnamed_union___sigaction_handler.self)
        #else
            action.__sigaction_u = unsafeBitCast(handler, to: __sigaction_u.self)
        #endif
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(sig, &action, old)
    }
}

private let wakeHandler: @convention(c) (Int32) -> Void = { sig in
    var byte = UInt8(truncatingIfNeeded: sig)
    _ = write(SignalTrap.pipeEnds.write, &byte, 1)
}

private let crashHandler: @convention(c) (Int32) -> Void = { sig in
    if SignalTrap.resetCount > 0 { _ = write(SignalTrap.terminalFD, SignalTrap.resetBytes, SignalTrap.resetCount) }
    if SignalTrap.hasSavedMode { _ = tcsetattr(SignalTrap.terminalFD, TCSANOW, &SignalTrap.savedMode) }
    // Hand over to the previous disposition (the Swift runtime's backtracer, or the default core dump); the
    // signal is re-delivered when this handler returns.
    sigaction(sig, SignalTrap.previous + Int(sig), nil)
    if sig == SIGABRT || sig == SIGTRAP { raise(sig) }
}
