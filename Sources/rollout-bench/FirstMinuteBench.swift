import Foundation

/// The first minute of a new user: `make demo` typed in a terminal after the project was built by a script
/// (`make test`, `make bench`: output to a pipe), timed to its first screen in a real terminal (tmux).
///
/// SwiftPM adds `-color-diagnostics` to every compile command when its output is a terminal, so before the
/// Makefile piped its builds this rebuilt the whole release binary (71.6 s to the first screen in a clean clone).
enum FirstMinuteBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "first-minute", title: "make demo in a terminal after a scripted build: seconds to the first screen", run: firstScreen)
    ]

    static func tmux(_ socket: String, _ arguments: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["tmux", "-L", socket] + arguments
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    static func firstScreen() throws {
        let root = FileManager.default.currentDirectoryPath
        guard FileManager.default.fileExists(atPath: root + "/Makefile") else {
            throw BenchError("run from the package root (make bench does)")
        }
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-first-minute-\(getpid())")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: home) }
        let socket = "rollout-bench-first-minute-\(getpid())"
        defer { _ = try? tmux(socket, ["kill-server"]) }
        let start = Stopwatch.nanoseconds()
        _ = try tmux(
            socket,
            [
                "new-session", "-d", "-x", "120", "-y", "40",
                "cd '\(root)' && HOME='\(home.path)' XDG_STATE_HOME='\(home.path)/state' make demo; sleep 60",
            ])
        var seconds = -1.0
        let deadline = start + 600 * 1_000_000_000
        while Stopwatch.nanoseconds() < deadline {
            if try tmux(socket, ["capture-pane", "-p"]).contains("AppAttestEnabled") {
                seconds = Double(Stopwatch.nanoseconds() - start) / 1e9
                break
            }
            usleep(50_000)
        }
        _ = try? tmux(socket, ["send-keys", "q"])
        guard seconds >= 0 else { throw BenchError("make demo drew no console within 600 s") }
        report("make demo to its first screen, in tmux, after the scripted release build", value: seconds, unit: "s", limit: 10, higherIsBetter: false)
    }
}
