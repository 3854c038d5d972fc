import Foundation
import GoogleDataSources
import JSON
import SQLiteStore
import Telemetry
import TelemetrySources
import Timekeeping
import WebClient

/// A BigQuery pull as `rollout follow` makes it, against the strict fake's BigQuery (Tests/FirebaseFake) answering
/// for fleets of 10,000 and 1,000,000 events a minute: the aggregation runs in BigQuery, so the rows, bytes and CPU
/// of a pull depend on minutes, cohorts and kinds, not on the events.
enum SourceBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "source-pull", title: "BigQuery pull of 60 minutes, 10k vs 1M events a minute", run: pull)
    ]

    static func pull() throws {
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("rollout-source-bench-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let fake = try BenchGoogleFake(project: "bench", in: dir)
        defer { fake.close() }
        let origin = fake.origin
        let key = fake.serviceAccount
        let transport = CurlTransport()
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.parse(key.compactText, source: "bench key"), transport: transport, clock: SystemClock(),
            scope: BigQueryClient.scope)
        let clock = SystemClock()
        let call = SourceCaller(source: "bench", project: "bench", tokens: tokens, transport: transport, clock: clock)
        let client = BigQueryClient(origin: origin, project: "bench", call: call, clock: clock)
        let source = BigQuerySource(
            name: "bench", tables: try ExportTables(project: "bench", analytics: "bench.analytics_1"), client: client,
            origin: clock.now() - .minutes(59))
        var figures: [(rate: Int, rows: Int, bytes: Int, cpu: Double, wall: Double)] = []
        for rate in [10_000, 1_000_000] {
            _ = try transport.send(
                HTTPRequest(
                    method: "POST", url: origin + "/_fake/data/options", headers: [("Content-Type", "application/json")],
                    body: Array(#"{"synthetic_per_minute": \#(rate)}"#.utf8), timeout: .seconds(Int64(10))))
            let store = try RolloutStore(path: dir.appendingPathComponent("store-\(rate).db").path)
            let plan = PullPlan(now: clock.now(), watermark: nil, origin: source.origin, overlap: .minutes(10))
            _ = try source.pull(plan)  // a first pull warms the token and the connection
            let cpu0 = Stopwatch.threadCPUSeconds()
            let start = Stopwatch.nanoseconds()
            let pulled = try source.pull(plan)
            try store.commitPull(pulled, at: clock.now())
            let wall = Double(Stopwatch.nanoseconds() - start) / 1e9
            let cpu = Stopwatch.threadCPUSeconds() - cpu0
            figures.append((rate, pulled.rows, pulled.bytes, cpu, wall))
            print(
                "  \(rate) events/min, 60 minutes (\(rate * 60) events): \(pulled.rows) rows, \(pulled.bytes) bytes received, "
                    + String(format: "%.1f ms CPU, %.1f ms wall (query, pages, ledger and commit)", cpu * 1000, wall * 1000))
        }
        report(
            "rows pulled at 1M events/min", value: Double(figures[1].rows), unit: "rows",
            against: ("at 10k events/min", Double(figures[0].rows)), target: (ratio: 1.5, higherIsBetter: false))
        report("CPU of one pull at 1M events/min", value: figures[1].cpu * 1000, unit: "ms", limit: 600, higherIsBetter: false)
    }
}
