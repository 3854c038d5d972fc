import Foundation
import TestSupport

/// A `rollout serve` child process on a loopback port it picked itself (`--listen 127.0.0.1:0`), for the tests
/// that drive the real executable.
struct ServeProcess {
    let process: Process
    let port: UInt16
    let stdout: Pipe
    let stderr: Pipe

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
        return ServeProcess(process: process, port: port, stdout: out, stderr: err)
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
