import Foundation
import Testing
import TestSupport

/// `rollout watch` prints when the verdict's level or the kind of its reason changes, not whenever a number inside
/// the reason moves (a run printed 8 lines of ~290 characters in 8 s because the reason carries live numbers), and
/// a heartbeat while nothing changes.
@Suite(.serialized)
struct WatchOutputTests {
    /// A simulation feeds a drill store (the reason's numbers move every simulated minute) while `watch` looks.
    @Test func movingNumbersInTheSameReasonPrintNothingNew() throws {
        let dir = try TestSupport.temporaryDirectory("watch-output")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("drill.db").path
        let bin = try TestSupport.rolloutBinary()
        let sim = Process()
        sim.executableURL = URL(fileURLWithPath: bin)
        sim.arguments = [
            "simulate", "--store", store, "--scenario", "busy", "--speed", "600", "--duration", "2h", "--devices", "3000",
            "--quiet",
        ]
        var env = ProcessInfo.processInfo.environment
        env["ROLLOUT_OPERATOR"] = "ana@example.com"
        sim.environment = env
        sim.standardOutput = FileHandle.nullDevice
        sim.standardError = FileHandle.nullDevice
        sim.standardInput = FileHandle.nullDevice
        try sim.run()
        defer { TestSupport.stop(sim) }
        func look() throws -> [String: Any]? {
            let r = try TestSupport.run(bin, ["watch", "--store", store, "--read-only", "--looks", "1", "--json"])
            return r.stdout.isEmpty ? nil : try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any]
        }
        // Wait until the crash comparison has users (its reason then carries their numbers).
        let deadline = Date(timeIntervalSinceNow: 60)
        while Date() < deadline, (try look()?["reason"] as? String)?.contains("exposed vs") != true { usleep(50_000) }

        let watch = try TestSupport.run(
            bin, ["watch", "--store", store, "--read-only", "--json", "--interval", "0.3", "--looks", "20", "--heartbeat", "3600"])
        let looks = try watch.stdout.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(!looks.isEmpty)
        func kind(_ o: [String: Any]) -> String {
            let level = o["level"] as? String ?? "?"
            let top = (o["findings"] as? [[String: Any]] ?? []).first { $0["level"] as? String == level }
            return level + " " + (top?["topic"] as? String ?? "?")
        }
        let kinds = looks.map(kind)
        for (a, b) in zip(kinds, kinds.dropFirst()) {
            #expect(a != b, "two lines for one level and reason kind: \(kinds)\n\(watch.stdout)")
        }
        // The numbers did move meanwhile: the last look's reason is not the first's.
        let reasons = looks.compactMap { $0["reason"] as? String }
        let after = try look()?["reason"] as? String
        #expect(after != nil && after != reasons.first, "the reason did not move: \(reasons), \(after ?? "")")
    }

    @Test func aHeartbeatRepeatsTheVerdictWhileNothingChanges() throws {
        let dir = try TestSupport.temporaryDirectory("watch-heartbeat")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(bin, ["init", "--store", store]).status == 0)
        let quiet = try TestSupport.run(bin, ["watch", "--store", store, "--read-only", "--interval", "0.1", "--looks", "5"])
        #expect(quiet.stdout.split(separator: "\n").count == 1, "\(quiet.stdout)")
        let beat = try TestSupport.run(
            bin, ["watch", "--store", store, "--read-only", "--interval", "0.2", "--looks", "5", "--heartbeat", "0.2"])
        #expect(beat.stdout.split(separator: "\n").count == 5, "\(beat.stdout)")
        #expect(try TestSupport.run(bin, ["watch", "--store", store, "--heartbeat", "0"]).status == 2)
    }

    /// `mv S S.gone` under a running watch: it says the store was removed or replaced and ends with 1, as when
    /// the store cannot be read, instead of going on judging a file that nothing writes to any more.
    @Test func aStoreMovedAwayEndsWatchWithAnError() throws {
        let dir = try TestSupport.temporaryDirectory("watch-moved")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s.db").path
        let bin = try TestSupport.rolloutBinary()
        #expect(try TestSupport.run(bin, ["init", "--store", store]).status == 0)
        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: bin)
        watch.arguments = ["watch", "--store", store, "--interval", "0.1"]
        let out = Pipe()
        let err = Pipe()
        watch.standardOutput = out
        watch.standardError = err
        watch.standardInput = FileHandle.nullDevice
        try watch.run()
        defer { TestSupport.stop(watch) }
        // Looking: its first verdict line.
        let first = BackgroundCall { String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) }
        let line = try #require(first.result(within: 10))
        #expect(line.contains("HOLD"), "\(line)")

        #expect(rename(store, store + ".gone") == 0)
        let deadline = Date(timeIntervalSinceNow: 10)
        while watch.isRunning, Date() < deadline { usleep(20_000) }
        try #require(!watch.isRunning, "watch still runs 10 s after its store was moved away")
        #expect(watch.terminationStatus == 1)
        let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(message.contains("the store was removed or replaced") && message.contains(store), "\(message)")
    }
}
