import Foundation
import TestSupport

/// A `rollout serve` child process on a loopback port it picked itself (`--listen 127.0.0.1:0`), for the tests
/// that drive the real executable.
///
/// Its standard error (the access log, one line per request, unless `--access-log` moves it) is drained as it
/// comes: an undrained pipe fills after some 64 KiB, and then every worker of `serve` blocks on its next log line
/// and the server stops answering (the kill drill met exactly that: 10 s, then 30 s stalls, on a busy run).
struct ServeProcess {
    let process: Process
    let port: UInt16
    let stdout: Pipe
    private let errors: Drain

    /// What `serve` wrote to its standard error, once it has exited (waits for it).
    var stderrText: String {
        process.waitUntilExit()
        return errors.text()
    }

    /// Reads a pipe to its end on a thread of its own.
    final class Drain: @unchecked Sendable {
        private let lock = NSCondition()
        private var data = Data()
        private var ended = false

        init(_ pipe: Pipe) {
            let handle = pipe.fileHandleForReading
            Thread.detachNewThread {
                while true {
                    let chunk = handle.availableData
                    self.lock.withLock {
                        if chunk.isEmpty { self.ended = true } else { self.data += chunk }
                        self.lock.broadcast()
                    }
                    if chunk.isEmpty { return }
                }
            }
        }

        /// Everything read, once the pipe's writer has closed it (bounded: 60 s after that is not expected).
        func text() -> String {
            lock.withLock {
                let deadline = Date().addingTimeInterval(60)
                while !ended && lock.wait(until: deadline) {}
                return String(decoding: data, as: UTF8.self)
            }
        }
    }

    /// Starts `rollout serve ARGUMENTS --listen 127.0.0.1:0` (with `environment` added to this process's) and waits
    /// for its first line, which names the port.
    static func start(_ rollout: String, _ arguments: [String], environment: [String: String] = [:]) throws -> ServeProcess {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: rollout)
        process.arguments = ["serve", "--listen", "127.0.0.1:0"] + arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        var banner = Data()
        while !banner.contains(0x0A) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty {
                let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                throw TestSupport.Failure("serve exited: \(text)")
            }
            banner += chunk
        }
        let firstLine = String(decoding: banner, as: UTF8.self).split(separator: "\n")[0]
        guard let port = firstLine.split(separator: ":").last.flatMap({ UInt16($0) }) else {
            throw TestSupport.Failure("no port in serve's first line '\(firstLine)'")
        }
        return ServeProcess(process: process, port: port, stdout: out, errors: Drain(err))
    }

    /// `rollout init` and `rollout appcheck app add APP ... --trust-demo` on a new store at `store`.
    static func prepareStore(
        _ rollout: String, store: String, app: String, projectNumber: String, projectId: String, team: String,
        bundle: String, trustDemo: Bool = true
    ) throws {
        let initialized = try TestSupport.run(rollout, ["init", "--store", store])
        guard initialized.status == 0 else { throw TestSupport.Failure("init: \(initialized.stderr)") }
        let add = try TestSupport.run(
            rollout,
            [
                "appcheck", "app", "add", app, "--project-number", projectNumber, "--project-id", projectId, "--team",
                team, "--bundle", bundle, "--store", store,
            ] + (trustDemo ? ["--trust-demo"] : []))
        guard add.status == 0 else { throw TestSupport.Failure("appcheck app add: \(add.stderr)") }
    }
}
