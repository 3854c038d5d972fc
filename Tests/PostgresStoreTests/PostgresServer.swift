import Foundation
import TestSupport

/// A real PostgreSQL server for the tests: Debian's binaries (`/usr/lib/postgresql/*/bin`), `initdb` into a fresh
/// temporary directory, listening only on a Unix socket in that directory (`listen_addresses = ''`), started with
/// `pg_ctl` and stopped (immediate shutdown) when the test process exits. As root (CI) the server runs as the
/// unprivileged `nobody`, since PostgreSQL refuses to run as root; the database superuser is `rollout`, with
/// `trust` authentication, which only the socket's directory permissions expose.
final class PostgresServer: @unchecked Sendable {
    let directory: String
    let bin: String
    private let lock = NSLock()
    private var databases = 0

    /// The one server of this test process, started on first use.
    static let shared: Result<PostgresServer, Error> = Result { try PostgresServer() }

    static func get() throws -> PostgresServer { try shared.get() }

    private init() throws {
        let fm = FileManager.default
        let versions = (try? fm.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let newest = versions.compactMap(Int.init).max() else {
            throw TestSupport.Failure("no PostgreSQL server binaries in /usr/lib/postgresql (Debian package postgresql; scripts/deps.sh test)")
        }
        bin = "/usr/lib/postgresql/\(newest)/bin"
        var template = Array("/tmp/rollout-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestSupport.Failure("mkdtemp failed") }
        directory = String(cString: made)
        chmod(directory, 0o755)
        let asRoot = getuid() == 0
        if asRoot, let pw = getpwnam("nobody") {
            chown(directory, pw.pointee.pw_uid, pw.pointee.pw_gid)
        }
        try run("initdb", ["-D", directory + "/data", "-U", "rollout", "--auth=trust", "-E", "UTF8", "--no-sync"])
        let conf = """
            listen_addresses = ''
            unix_socket_directories = '\(directory)'
            fsync = off
            max_connections = 60
            """
        try (try String(contentsOfFile: directory + "/data/postgresql.conf", encoding: .utf8) + "\n" + conf + "\n")
            .write(toFile: directory + "/data/postgresql.conf", atomically: false, encoding: .utf8)
        // The server inherits pg_ctl's descriptors: the shell points them at /dev/null so the captured pipes close.
        let ctl = (asRoot ? "/usr/sbin/runuser -u nobody -- " : "") + bin + "/pg_ctl"
        // system(3), not Process: the daemon must not inherit a pipe the test process waits on.
        let started = system("\(ctl) -D '\(directory)/data' -l '\(directory)/server.log' -w -t 60 start </dev/null >/dev/null 2>&1")
        guard started == 0 else {
            throw TestSupport.Failure("pg_ctl start failed (\(started)); see \(directory)/server.log")
        }
        PostgresServer.running = (bin, directory)
        atexit {
            guard let (bin, dir) = PostgresServer.running else { return }
            let stop = Process()
            stop.executableURL = URL(fileURLWithPath: getuid() == 0 ? "/usr/sbin/runuser" : bin + "/pg_ctl")
            stop.arguments = (getuid() == 0 ? ["-u", "nobody", "--", bin + "/pg_ctl"] : []) + ["-D", dir + "/data", "-m", "immediate", "-w", "stop"]
            stop.standardOutput = FileHandle.nullDevice
            stop.standardError = FileHandle.nullDevice
            try? stop.run()
            stop.waitUntilExit()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    nonisolated(unsafe) static var running: (String, String)?

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
    var adminConninfo: String { "host=\(directory) dbname=postgres user=rollout" }

    /// Creates a fresh, empty database and returns its connection string.
    func freshDatabase() throws -> String {
        let n = lock.withLock { databases += 1; return databases }
        let name = "t\(getpid())_\(n)"
        let psql = try TestSupport.run(
            bin + "/psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", adminConninfo, "-c", "CREATE DATABASE \(name)"])
        guard psql.status == 0 else { throw TestSupport.Failure("CREATE DATABASE failed: \(psql.stderr)") }
        return "host=\(directory) dbname=\(name) user=rollout"
    }
}
