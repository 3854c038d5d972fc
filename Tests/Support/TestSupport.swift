import Foundation

/// Paths and process helpers shared by the test targets.
///
/// Tests that need a real peer (firebase-admin, pyattest, pyotp, pyte) use `python`, which fails loudly when the
/// virtualenv is missing: such tests never skip.
public enum TestSupport {
    /// The package root (the directory holding Package.swift).
    public static let packageRoot: URL = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url }
        }
        fatalError("Package.swift not found above \(#filePath)")
    }()

    /// `../shared` beside the package (or $ROLLOUT_SHARED): the real test vectors and helper tools.
    public static let shared: URL = {
        if let s = ProcessInfo.processInfo.environment["ROLLOUT_SHARED"] { return URL(fileURLWithPath: s) }
        return packageRoot.deletingLastPathComponent().appendingPathComponent("shared")
    }()

    public static func vector(_ relative: String) throws -> URL {
        let url = shared.appendingPathComponent("vectors").appendingPathComponent(relative)
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw Failure("test vector missing: \(url.path) (expected ../shared beside the repository or $ROLLOUT_SHARED)")
        }
        return url
    }

    /// The virtualenv's python with the pinned peers (`make test` creates it; `scripts/pyenv.sh` alone does too).
    public static func python() throws -> String {
        let path = ProcessInfo.processInfo.environment["ROLLOUT_PYTHON"]
            ?? packageRoot.appendingPathComponent(".venv/bin/python").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw Failure("python peer environment missing at \(path): run scripts/pyenv.sh (make test does)")
        }
        return path
    }

    /// The debug `rollout` binary built by `swift build` (the test run builds it first).
    public static func rolloutBinary() throws -> String {
        for config in ["debug", "release"] {
            let p = packageRoot.appendingPathComponent(".build/\(config)/rollout").path
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        throw Failure("rollout binary not built: run swift build first")
    }

    /// A fresh temporary directory, removed by the caller when it wishes.
    public static func temporaryDirectory(_ label: String = "rollout-test") throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    public struct ProcessResult: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// The environment that runs a program under libfaketime with `FAKETIME=spec` (`@2026-01-01 00:00:00` starts
    /// its clock there, `-58m` shifts it), without Debian's `faketime` wrapper. The wrapper names a semaphore and a
    /// shared-memory object after its own pid, exclusively, and removes them only when it ends normally: a killed
    /// wrapper leaves them in /dev/shm, and a later wrapper given the same pid (pid_max is 32768; a test run starts
    /// far more processes) fails with "sem_open: File exists" before the program runs at all (a CI run failed so).
    /// The library alone names its own pair the same way but, when the name is taken, goes on without them (each
    /// process here keeps its own clock anyway, as under the wrapper).
    public static func fakeTime(_ spec: String) -> [String: String] {
        ["FAKETIME": spec, "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"]
    }

    /// Runs a program to completion, feeding `stdin`, and captures its output; under libfaketime with `fakeTime`
    /// (see `fakeTime(_:)`) when it is given.
    @discardableResult
    public static func run(
        _ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String] = [:],
        currentDirectory: URL? = nil, fakeTime spec: String? = nil
    ) throws -> ProcessResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment.merging(spec.map(fakeTime) ?? [:], uniquingKeysWith: { $1 }) { env[k] = v }
        process.environment = env
        if let currentDirectory { process.currentDirectoryURL = currentDirectory }
        let out = Pipe()
        let err = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        // The child gets its ends through dup2, which clears close-on-exec; no other child may inherit them.
        for handle in [out.fileHandleForReading, out.fileHandleForWriting, err.fileHandleForReading,
            err.fileHandleForWriting, input.fileHandleForReading, input.fileHandleForWriting]
        {
            keepPrivate(handle)
        }
        try process.run()
        let group = DispatchGroup()
        nonisolated(unsafe) var outData = Data()
        nonisolated(unsafe) var errData = Data()
        group.enter()
        DispatchQueue.global().async { outData = out.fileHandleForReading.readDataToEndOfFile(); group.leave() }
        group.enter()
        DispatchQueue.global().async { errData = err.fileHandleForReading.readDataToEndOfFile(); group.leave() }
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
        group.wait()
        return ProcessResult(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self))
    }

    /// Runs `arguments` (the program first) with stderr on a pseudo-terminal (python's `pty`) and stdout on a pipe:
    /// the exit status, what the terminal received and what stdout received.
    public static func runWithStderrOnTerminal(_ arguments: [String], environment: [String: String] = [:]) throws -> (
        status: Int32, terminal: String, stdout: String
    ) {
        let script = """
            import os, pty, subprocess, sys
            master, slave = pty.openpty()
            p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
            os.close(slave)
            got = b''
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                got += chunk
            out = p.stdout.read()
            p.wait()
            sys.stdout.write('%d\\n%s\\0%s' % (p.returncode, got.decode('utf-8', 'replace'), out.decode()))
            """
        let r = try run(try python(), ["-c", script] + arguments, environment: environment)
        let lines = r.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        let rest = lines.count > 1 ? String(lines[1]) : ""
        let parts = rest.split(separator: "\0", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int32(lines.first ?? "") ?? -1, String(parts.first ?? ""), parts.count > 1 ? String(parts[1]) : "")
    }

    /// Marks our end of a pipe close-on-exec, so that no process another test spawns meanwhile inherits it: a
    /// daemon holding the write end of a helper's stdin (the shared PostgreSQL server lives until the test
    /// process exits) keeps the helper from ever seeing the end of its input.
    public static func keepPrivate(_ handle: FileHandle) {
        let fd = handle.fileDescriptor
        _ = fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC)
    }

    /// Stops a helper process for good: it was asked to stop (its stdin closed, a SIGTERM), and gets `grace`
    /// seconds before SIGKILL. A child spawned from a test's worker thread inherits that thread's blocked signals,
    /// SIGTERM among them, so SIGTERM alone can leave `waitUntilExit` waiting forever; SIGKILL cannot be blocked.
    public static func stop(_ process: Process, grace: Double = 3) {
        guard process.isRunning else {
            process.waitUntilExit()
            return
        }
        process.terminate()
        let deadline = Date().addingTimeInterval(grace)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// Starts `python SCRIPT ARGUMENTS` (a strict fake that prints `PORT n` when it listens and exits when its
    /// stdin closes) and returns the process, its stdin and the port. Stop it with `input`'s close and `stop`.
    public static func startFake(_ script: String, _ arguments: [String]) throws -> (
        process: Process, input: Pipe, port: Int
    ) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try python())
        process.arguments = [script] + arguments
        let input = Pipe()
        let out = Pipe()
        process.standardInput = input
        process.standardOutput = out
        try process.run()
        var line: [UInt8] = []
        while true {
            guard let b = out.fileHandleForReading.readData(ofLength: 1).first else {
                throw Failure("the fake exited before it was ready")
            }
            if b == 10 { break }
            line.append(b)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else { throw Failure("the fake said \(text)") }
        return (process, input, port)
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ d: String) { description = d }
    }
}

extension TestSupport {
    /// docs/POSTGRES.md's roles section as statements, exactly as documented (`CREATE ROLE` and `GRANT` lines).
    public static func documentedRoleStatements() throws -> [String] {
        let doc = try String(contentsOf: packageRoot.appendingPathComponent("docs/POSTGRES.md"), encoding: .utf8)
        guard let section = doc.components(separatedBy: "## Roles (least privilege)").dropFirst().first else {
            throw Failure("docs/POSTGRES.md has no roles section")
        }
        return section.components(separatedBy: "\n").filter { $0.hasPrefix("    CREATE ROLE") || $0.hasPrefix("    GRANT") }
            .map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// Whether `statement` failing with `sqlState` means its role exists already. Roles belong to the server, not
    /// to a database: another test of this process made it (duplicate_object, 42710), or is making it at this
    /// moment and won on pg_authid's unique index (unique_violation, 23505; CI caught two tests racing).
    public static func roleExistsAlready(_ statement: String, sqlState: String?) -> Bool {
        statement.hasPrefix("CREATE ROLE") && ["42710", "23505"].contains(sqlState ?? "")
    }
}
