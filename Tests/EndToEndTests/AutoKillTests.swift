import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import TestSupport
import Testing
import Timekeeping

/// Auto-kill runs wherever a verdict is computed by a process that may write, and publishes exactly one kill.
@Suite(.serialized) struct AutoKillTests {
    static let actor = "guardrail (auto-kill)"

    static func kills(_ path: String) throws -> [VersionInfo] {
        let store = try RolloutStore(path: path, create: false)
        return try store.configStore().versions(limit: 300, before: nil).filter { $0.updateUser == actor }
    }

    /// The simulator acts only as itself, so `simulate` gets no --operator.
    static func rollout(_ path: String, _ args: [String]) throws -> TestSupport.ProcessResult {
        let asOperator = args.first == "simulate" ? [] : ["--operator", "ana@example.com"]
        return try TestSupport.run(try TestSupport.rolloutBinary(), args + ["--store", path] + asOperator)
    }

    /// `simulate` computes the verdict after every simulated minute it lands: with auto-kill on, the first HALT
    /// is acted on at once (within one refresh: the minute after it becomes visible), and only once.
    @Test("simulate crash-regression with auto-kill on: exactly one kill, within one refresh of the first HALT")
    func simulateKillsOnce() throws {
        let dir = try TestSupport.temporaryDirectory("autokill-sim")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("team.db").path
        #expect(try Self.rollout(path, ["init", "--seed", "rollout-sim"]).status == 0)
        #expect(try Self.rollout(path, ["policy", "set", "guardrails.auto-kill", "on"]).status == 0)
        // An ordinary store (made by init): refused without the flag, nothing written...
        let refused = try Self.rollout(path, ["simulate", "--scenario", "crash-regression", "--speed", "max", "--duration", "1m"])
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("is not a drill store"))
        // ...and with it, recorded in the audit log.
        let sim = try Self.rollout(
            path,
            [
                "simulate", "--scenario", "crash-regression", "--devices", "6000", "--speed", "max", "--duration", "2h",
                "--seed", "3", "--on-ordinary-store",
            ])
        #expect(sim.status == 0, "\(sim.stderr)")
        let kills = try Self.kills(path)
        #expect(kills.count == 1, "\(kills)")
        let kill = try #require(kills.first)
        #expect(kill.description.hasPrefix("guardrail: exposed users crash more than control: SPRT"))
        // The SPRT declared harm at the end of a minute (in the reason); the verdict shows it once that minute
        // settles (2 minutes); the kill follows at the next landed minute.
        let declared = try #require(
            kill.description.components(separatedBy: ") at ").dropFirst().first.flatMap { ISO8601.parse(String($0.prefix(24))) })
        let note = try #require(sim.stderr.split(separator: "\n").first { $0.contains("auto-kill published version") })
        let killedAt = try #require(ISO8601.parse(note.trimmingCharacters(in: .whitespaces).components(separatedBy: "  ")[0]))
        #expect(killedAt >= declared)
        #expect(killedAt - declared <= .minutes(3) + .seconds(Int64(5)), "declared \(declared), killed \(killedAt)")
        let status = try Self.rollout(path, ["status", "--json"])
        #expect(status.stdout.contains("\"state\": \"killed\""), "\(status.stdout)")
        let audit = try Self.rollout(path, ["audit", "show", "--json"]).stdout
        #expect(audit.contains("simulate on an ordinary store"))
        #expect(audit.contains(Self.actor))
    }

    /// Two consoles and two `watch` processes see the same HALT at once: one kill between them.
    @Test("two consoles and two watches on one store publish one kill between them")
    func concurrentWatchersKillOnce() throws {
        let dir = try TestSupport.temporaryDirectory("autokill-many")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("drill.db").path
        // HALT with auto-kill off: the rollout stays exposed.
        let sim = try Self.rollout(
            path,
            ["simulate", "--scenario", "crash-regression", "--devices", "6000", "--speed", "max", "--duration", "2h", "--seed", "3", "--quiet"])
        #expect(sim.status == 0, "\(sim.stderr)")
        #expect(try Self.rollout(path, ["status", "--check"]).status == 7)
        #expect(try Self.kills(path).isEmpty)
        #expect(try Self.rollout(path, ["policy", "set", "guardrails.auto-kill", "on"]).status == 0)

        let binary = try TestSupport.rolloutBinary()
        let watches = (0..<2).map { _ in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: binary)
            p.arguments = ["watch", "--json", "--interval", "0.1", "--looks", "30", "--store", path]
            p.standardOutput = Pipe()
            p.standardError = Pipe()
            return p
        }
        let consoles = try (0..<2).map { _ in
            let session = try Wiring.session(path: path, operatorID: "ana@example.com")
            return try StoreConsoleSource(
                path: path, clock: SystemClock(), operatorID: "ana@example.com", readOnly: false, project: "test",
                autoKill: session)
        }
        for w in watches { try w.run() }
        let group = DispatchGroup()
        let failures = Failures()
        for console in consoles {
            let c = console
            group.enter()
            Thread.detachNewThread {
                for _ in 0..<15 {
                    do { _ = try c.snapshot() } catch { failures.add("\(error)") }
                    usleep(100_000)
                }
                group.leave()
            }
        }
        group.wait()
        var outputs: [String] = []
        for w in watches {
            w.waitUntilExit()
            outputs.append(String(decoding: (w.standardOutput as! Pipe).fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
            #expect(w.terminationStatus == 7)
        }
        #expect(failures.all.isEmpty, "\(failures.all)")
        let kills = try Self.kills(path)
        #expect(kills.count == 1, "\(kills.map(\.number))")
        // Each watch printed the HALT as JSON lines; at most one of them says it published the kill.
        let published = outputs.flatMap { $0.split(separator: "\n") }.filter { $0.contains("\"autoKill\":\"auto-kill:") }
        #expect(published.count <= 1)
        for out in outputs { #expect(out.contains("\"level\":\"HALT\"")) }
    }

    final class Failures: @unchecked Sendable {
        private let lock = NSLock()
        private var list: [String] = []
        func add(_ s: String) { lock.withLock { list.append(s) } }
        var all: [String] { lock.withLock { list } }
    }
}
