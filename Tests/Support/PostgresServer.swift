import Foundation

/// A real PostgreSQL server for the tests: Debian's binaries (`/usr/lib/postgresql/*/bin`), `initdb` into a fresh
/// temporary directory, listening only on a Unix socket in that directory (`listen_addresses = ''`), started with
/// `pg_ctl` and stopped (immediate shutdown) when the test process exits. As root (CI) the server runs as the
/// unprivileged `nobody`, since PostgreSQL refuses to run as root; the database superuser is `rollout`, with
/// `trust` authentication, which only the socket's directory permissions expose.
/// Shared by the PostgreSQL store tests and the end-to-end console tests; `make bench` starts a durable one.
public final class PostgresServer: @unchecked Sendable {
    public let directory: String
    let bin: String
    private let lock = NSLock()
    private var databases = 0

    /// The loopback TCP port (127.0.0.1) when the server listens there too; nil: the Unix socket only.
    public let port: Int?

    /// The one server of this test process, started on first use: Unix socket and loopback TCP.
    static let shared: Result<PostgresServer, Error> = Result { try PostgresServer(tcp: true) }

    public static func get() throws -> PostgresServer { try shared.get() }

    /// A private server (a drill that restarts it must not disturb the shared one's tests).
    ///
    /// `durable`: the durability a team store runs with (`initdb` syncs its files, `fsync` on: every COMMIT waits
    /// for the disk), which the benchmarks measure; the tests' servers skip both, as nothing they check depends on
    /// a sync reaching the disk (the crash drills kill processes, never the machine).
    public init(tcp: Bool, durable: Bool = false) throws {
        let fm = FileManager.default
        let versions = (try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let newest = versions.compactMap(Int.init).max() else {
            throw TestSupport.Failure("no PostgreSQL server binaries in /usr/lib/postgresql (Debian package postgresql; scripts/deps.sh test)")
        }
        bin = "/usr/lib/postgresql/\(newest)/bin"
        port = tcp ? try Self.freeLoopbackPort() : nil
        var template = Array("/tmp/rollout-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestSupport.Failure("mkdtemp failed") }
        directory = String(cString: made)
        chmod(directory, 0o755)
        let asRoot = getuid() == 0
        if asRoot, let pw = getpwnam("nobody") {
            chown(directory, pw.pointee.pw_uid, pw.pointee.pw_gid)
        }
        try run("initdb", ["-D", directory + "/data", "-U", "rollout", "--auth=trust", "-E", "UTF8"] + (durable ? [] : ["--no-sync"]))
        let conf = """
            listen_addresses = '\(tcp ? "127.0.0.1" : "")'
            \(port.map { "port = \($0)" } ?? "")
            unix_socket_directories = '\(directory)'
            \(durable ? "" : "fsync = off")
            max_connections = 80
            """
        try (try String(contentsOfFile: directory + "/data/postgresql.conf", encoding: .utf8) + "\n" + conf + "\n")
            .write(toFile: directory + "/data/postgresql.conf", atomically: false, encoding: .utf8)
        // The server inherits pg_ctl's descriptors: the shell points them at /dev/null so the captured pipes close.
        let ctl = (asRoot ? "/usr/sbin/runuser -u nobody -- " : "") + bin + "/pg_ctl"
        // system(3), not Process: the daemon must not inherit a pipe the test process waits on.
        let started = system(try detached("\(ctl) -D '\(directory)/data' -l '\(directory)/server.log' -w -t 60 start"))
        guard started == 0 else {
            throw TestSupport.Failure("pg_ctl start failed (\(started)); see \(directory)/server.log")
        }
        let closing = PostgresServer.runningLock.withLock { () -> Bool in
            if !PostgresServer.closing { PostgresServer.running.append((bin, directory)) }
            return PostgresServer.closing
        }
        if closing {
            Self.stop(bin: bin, directory: directory)
            try? FileManager.default.removeItem(atPath: directory)
            throw TestSupport.Failure("the process is ending: its new PostgreSQL server was stopped at once")
        }
        _ = Self.stopAllAtExit
    }

    /// `stopAll` registered to run at the process's exit, once whatever the number of servers started.
    private static let stopAllAtExit: Void = { atexit { PostgresServer.stopAll() } }()

    nonisolated(unsafe) static var running: [(String, String)] = []
    /// Set by `stopAll`: no server starts any more.
    nonisolated(unsafe) static var closing = false
    static let runningLock = NSLock()

    /// Stops every server this process started and removes their directories, and keeps any other from starting:
    /// what the process's exit does (`atexit`), and what a process ended by a signal calls (`rollout-bench`).
    public static func stopAll() {
        let all = runningLock.withLock { () -> [(String, String)] in
            closing = true
            defer { running = [] }
            return running
        }
        for (bin, dir) in all {
            stop(bin: bin, directory: dir)
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    /// Stops the server now and removes its directory (a benchmark suite's server, before the next suite runs);
    /// otherwise that happens when the process exits.
    public func stop() {
        let dir = directory
        let wasRunning = Self.runningLock.withLock {
            let n = Self.running.count
            Self.running.removeAll { $0.1 == dir }
            return Self.running.count < n
        }
        guard wasRunning else { return }
        Self.stop(bin: bin, directory: dir)
        try? FileManager.default.removeItem(atPath: dir)
    }

    private static func stop(bin: String, directory dir: String) {
        let stop = Process()
        stop.executableURL = URL(fileURLWithPath: getuid() == 0 ? "/usr/sbin/runuser" : bin + "/pg_ctl")
        stop.arguments = (getuid() == 0 ? ["-u", "nobody", "--", bin + "/pg_ctl"] : []) + ["-D", dir + "/data", "-m", "immediate", "-w", "stop"]
        stop.standardOutput = FileHandle.nullDevice
        stop.standardError = FileHandle.nullDevice
        try? stop.run()
        stop.waitUntilExit()
    }

    /// Stops the server (immediate shutdown: clients lose their connections mid-transaction), stays down for
    /// `downtime` seconds (clients cannot connect), and starts it again.
    public func restart(downtime: Double = 0) throws {
        try restart(downFor: downtime, orUntil: { true }, atMost: downtime)
    }

    /// Stops the server and keeps it down for at least `minimum` seconds and then until `met()` holds (polled
    /// every 20 ms), at most `maximum` seconds, and starts it again. A drill that needs a client to meet the
    /// outage waits for that rather than for a time a loaded machine may not honour.
    public func restart(downFor minimum: Double, orUntil met: () -> Bool, atMost maximum: Double) throws {
        Self.stop(bin: bin, directory: directory)
        let down = DispatchTime.now()
        func elapsed() -> Double { Double(DispatchTime.now().uptimeNanoseconds - down.uptimeNanoseconds) / 1e9 }
        while elapsed() < minimum || (!met() && elapsed() < maximum) { usleep(20_000) }
        let ctl = (getuid() == 0 ? "/usr/sbin/runuser -u nobody -- " : "") + bin + "/pg_ctl"
        let started = system(try detached("\(ctl) -D '\(directory)/data' -l '\(directory)/server.log' -w -t 60 start"))
        guard started == 0 else { throw TestSupport.Failure("pg_ctl start after the restart failed (\(started))") }
    }

    /// A shell command line that runs `command` with stdin, stdout and stderr on /dev/null and every other
    /// descriptor closed. The server outlives the test that starts it, so whatever it inherited stays open until
    /// the test process exits: another test's pipe (a helper's stdin, a child's stdout) would never reach its end.
    func detached(_ command: String) throws -> String {
        let script = directory + "/start.sh"
        try """
            # 255 is the script bash is reading (close-on-exec already).
            for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ] && [ "$n" -ne 255 ]; then eval "exec $n>&-"; fi; done
            exec \(command)

            """.write(toFile: script, atomically: true, encoding: .utf8)
        return "/bin/bash '\(script)' </dev/null >/dev/null 2>&1"
    }

    /// A loopback port nobody listens on now (bound and released; the server binds it right after).
    private static func freeLoopbackPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupport.Failure("socket failed") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard bound else { throw TestSupport.Failure("cannot bind a loopback port") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Runs a server binary (as `nobody` under root); throws with its output when it fails.
    private func run(_ tool: String, _ arguments: [String]) throws {
        let asRoot = getuid() == 0
        let result = try TestSupport.run(
            asRoot ? "/usr/sbin/runuser" : bin + "/" + tool, (asRoot ? ["-u", "nobody", "--", bin + "/" + tool] : []) + arguments)
        guard result.status == 0 else {
            throw TestSupport.Failure("\(tool) failed (\(result.status)): \(result.stderr) \(result.stdout)")
        }
    }

    /// The connection string of the server's `postgres` database.
    public var adminConninfo: String { "host=\(directory)\(portParameter) dbname=postgres user=rollout" }

    /// The socket file's name carries the port: ` port=N` when it is not the default.
    private var portParameter: String { port.map { " port=\($0)" } ?? "" }

    /// Creates a fresh, empty database and returns its connection string.
    public func freshDatabase() throws -> String {
        let n = lock.withLock { databases += 1; return databases }
        return try database("t\(getpid())_\(n)")
    }

    /// Creates the empty database `name` (letters, digits and `_`) and returns its connection string.
    public func database(_ name: String) throws -> String {
        let psql = try TestSupport.run(
            bin + "/psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", adminConninfo, "-c", "CREATE DATABASE \(name)"])
        guard psql.status == 0 else { throw TestSupport.Failure("CREATE DATABASE failed: \(psql.stderr)") }
        return "host=\(directory)\(portParameter) dbname=\(name) user=rollout"
    }

    /// Ends every session on the database of `conninfo` (but the one asking) as an administrator's
    /// `pg_terminate_backend` does, a failover in miniature; returns how many there were.
    public func terminateSessions(of conninfo: String) throws -> Int {
        let psql = try TestSupport.run(
            bin + "/psql",
            [
                "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c",
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
            ])
        guard psql.status == 0, let n = Int(psql.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestSupport.Failure("pg_terminate_backend failed: \(psql.stderr)")
        }
        return n
    }

    /// The URIs of a database for the CLI (`--store postgresql://...`): over the Unix socket, and over loopback
    /// TCP when the server listens there.
    public func uris(of conninfo: String) -> (socket: String, tcp: String?) {
        let name = conninfo.split(separator: " ").first { $0.hasPrefix("dbname=") }!.dropFirst("dbname=".count)
        return ("postgresql:///\(name)?host=\(directory)&user=rollout" + (port.map { "&port=\($0)" } ?? ""), port.map { "postgresql://rollout@127.0.0.1:\($0)/\(name)" })
    }
}
