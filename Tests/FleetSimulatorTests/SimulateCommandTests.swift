import Foundation
import Testing
import TestSupport

/// `rollout simulate` as a user runs it: the built binary, a store file, the final summary.
@Suite struct SimulateCommandTests {
    static func simulate(store: String, extra: [String] = []) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(),
            [
                "simulate", "--scenario", "steady", "--devices", "400", "--speed", "max", "--duration", "20m",
                "--seed", "3", "--start", "2026-05-20T18:00:00Z", "--store", store, "--json",
            ] + extra)
    }

    @Test func twoRunsOnFreshStoresPrintTheSameDigest() throws {
        let dir = try TestSupport.temporaryDirectory("simulate-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        var digests: [String] = []
        for run in ["a", "b"] {
            let store = dir.appendingPathComponent("\(run).db").path
            let result = try Self.simulate(store: store)
            #expect(result.status == 0, "\(result.stderr)")
            let summary = try #require(
                try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            #expect(summary["scenario"] as? String == "steady" && summary["devices"] as? Int == 400)
            #expect((summary["events"] as? Int ?? 0) > 100)
            #expect(summary["end"] as? String == "2026-05-20T18:20:00.000Z")
            digests.append(summary["eventDigest"] as? String ?? "")
            // The scripted change went through the write path into the store, as the simulator.
            #expect(result.stderr.contains("published version 2: AppAttestEnabled 0% → 10%"))
            let status = try TestSupport.run(try TestSupport.rolloutBinary(), ["status", "--store", store, "--json"])
            #expect(status.status == 0 && status.stdout.contains("\"rollout-sim\""), "\(status.stdout)")
            let history = try TestSupport.run(try TestSupport.rolloutBinary(), ["history", "--store", store])
            #expect(history.stdout.contains("simulator"), "\(history.stdout)")
        }
        #expect(digests[0] == digests[1] && digests[0].count == 64)
    }

    @Test func listsScenariosAndRefusesBadInput() throws {
        let list = try TestSupport.run(try TestSupport.rolloutBinary(), ["simulate", "--list"])
        #expect(list.status == 0)
        for name in ["steady", "throttling", "crash-regression", "bad-build", "slow-propagation"] {
            #expect(list.stdout.contains(name))
        }
        let dir = try TestSupport.temporaryDirectory("simulate-cli")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("x.db").path
        for (args, message) in [
            (["--scenario", "nope"], "no such scenario"),
            (["--scenario", "steady", "--speed", "fast"], "--speed"),
            (["--scenario", "steady", "--devices", "0"], "--devices"),
            (["--devices", "10"], "--scenario is required"),
        ] {
            let r = try TestSupport.run(try TestSupport.rolloutBinary(), ["simulate", "--store", store] + args)
            #expect(r.status == 2, "\(args): \(r.stderr)")
            #expect(r.stderr.contains(message), "\(r.stderr)")
        }
        let readOnly = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["simulate", "--store", store, "--scenario", "steady", "--read-only"])
        #expect(readOnly.status == 4)
    }
}
