import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import Timekeeping

/// Publish latency of the config store through the real write path, against a bare SQLite transaction with the
/// same durability measured in the same run.
enum StoreBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "store", title: "config store: compare-and-swap publish latency vs a bare durable SQLite transaction"
        ) {
            try publishLatency()
        }
    ]

    static let publishes = 1_000

    /// Each sample of the write path is what a CLI `nudge` runs once its store is open: the session's write path
    /// with the policies the CLI runs (the telemetry guardrail and step-up verification, `Wiring.policies`), then
    /// `execute`: read the newest version, apply the operation, ask the policies, diff, then one `BEGIN IMMEDIATE`
    /// transaction that checks the ETag and inserts the version, its audit record and the chain head. The floor is
    /// `BEGIN IMMEDIATE`, one insert of a row as large as the version and audit rows together, `COMMIT`, on a
    /// second file with the same pragmas (WAL, synchronous=FULL). The two alternate sample by sample so that load
    /// from other processes hits both alike.
    static func publishLatency() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "rollout-bench-store-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let storePath = directory.appendingPathComponent("rollout.db").path
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let session = try Wiring.createStore(path: storePath, seed: "bench", operatorID: "bench@rollout")
        let config = session.config
        func execute(_ intent: WritePath.Intent) throws {
            let request = WritePath.Request(intent: intent, actor: "bench@rollout", reason: "bench", origin: Wiring.origin)
            guard case .published = try session.writePath().execute(request) else {
                throw BenchError("a bench write published nothing")
            }
        }
        func nudge(_ i: Int) throws { try execute(.rollout(.nudge(MicroPercent(i % 2 == 0 ? 100_000 : -100_000)))) }
        try execute(.rollout(.set(MicroPercent(percent: 10))))

        // The floor's row: as many bytes as a version row plus its audit record.
        let newest = try config.current()
        let audit = try config.auditRecords(limit: 1, before: nil)[0]
        let rowBytes =
            newest.template.strippingVersionInfo().json.compactText.utf8.count + 64 * 4 + audit.entry.detail.utf8.count
            + 200
        let floor = try SQLiteDatabase(path: directory.appendingPathComponent("floor.db").path)
        try floor.execute("CREATE TABLE rows (n INTEGER PRIMARY KEY, etag TEXT, payload BLOB)")
        let payload = [UInt8](repeating: 0x61, count: rowBytes)
        func bare(_ i: Int) throws {
            try floor.transaction {
                _ = try floor.query("SELECT etag FROM rows ORDER BY n DESC LIMIT 1")
                try floor.run("INSERT INTO rows (etag, payload) VALUES (?, ?)", [.text("etag-\(i)"), .blob(payload)])
            }
        }

        for i in 0..<50 {
            try nudge(i)
            try bare(i)
        }
        var published: [Double] = []
        var floorSamples: [Double] = []
        for i in 0..<publishes {
            published.append(try Stopwatch.time { try nudge(i) } * 1_000)
            floorSamples.append(try Stopwatch.time { try bare(i) } * 1_000)
        }
        let integrity = try config.verifyIntegrity()
        guard integrity.versions == 2 + 50 + publishes else {
            throw BenchError("expected \(2 + 50 + publishes) versions, found \(integrity.versions)")
        }

        published.sort()
        floorSamples.sort()
        func percentile(_ sorted: [Double], _ p: Double) -> Double {
            sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
        }
        print(
            "  \(publishes) publishes through the CLI's write path and policies (nudge, guardrail, step-up, CAS, audit) on \(directory.path); floor row \(rowBytes) bytes"
        )
        report(
            "publish p50", value: percentile(published, 0.50), unit: "ms",
            against: ("bare durable SQLite transaction p50", percentile(floorSamples, 0.50)))
        report(
            "publish p99", value: percentile(published, 0.99), unit: "ms",
            against: ("bare durable SQLite transaction p99", percentile(floorSamples, 0.99)))
        report("publish p99", value: percentile(published, 0.99), unit: "ms", limit: 5, higherIsBetter: false)
        print("  audit chain verified after the run: \(integrity.auditRecords) records, \(integrity.versions) versions")
    }
}
