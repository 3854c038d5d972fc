import Monitoring
import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import Timekeeping

/// The telemetry data path as a user meets it: `rollout status --json` on a long rollout, and `rollout ingest` of a
/// large file with millions of distinct installations, both whole processes.
enum DataPathBench {
    static let suites: [BenchSuite] = [
        BenchSuite(name: "data-status", title: "rollout status --json, cold process, 7-day rollout", run: status),
        BenchSuite(
            name: "data-ingest", title: "rollout ingest, 10M events, 1M and 5M installations, cold cache", run: ingest),
    ]

    // MARK: status

    /// A store holding a 10% rollout that started 7 days ago with about `perMinute` events a minute, landed through
    /// the real commit path one pre-aggregated batch per day (the counters a real ingest of those events leaves),
    /// plus 100,000 installations active on the last day. The fold is materialised after the first day, so the
    /// commits of the next six days advance it.
    static func longRollout(_ path: String, scale: Int64) throws -> Int {
        let store = try RolloutStore(path: path)
        let tables = try store.withDatabase { try TelemetryTables(database: $0) }
        let day0 = BucketLevel.day.bucket(SystemClock().now().microseconds) - 7
        func day(_ d: Int64) -> Instant { BucketLevel.day.start(day0 + d) }
        let configStore = try store.configStore()
        _ = try configStore.initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: "bench", actor: "bench", time: day(0) - .hours(1))
        }
        _ = try WritePath(store: configStore, clock: ManualClock(day(0)), newSeed: { "bench" }).execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 10))), actor: "bench",
                reason: "bench: a 7-day rollout at 10%",
                origin: "BENCH"))
        var total = 0
        for d in Int64(0)..<7 {
            let batch = TelemetryBatch()
            for m in 0..<1440 {
                let at = BucketLevel.minute.start((day0 + d) * 1440 + Int64(m))
                for (key, n) in TelemetryBench.minuteTraffic(m) { batch.addCounts(key, at: at, count: n / scale) }
            }
            total += batch.eventCount
            try tables.commit(batch, source: "bulk day \(d)", at: day(d + 1))
            if d == 0 {
                _ = try RolloutMonitor(store: store, clock: ManualClock(day(1) + .minutes(3))).status()
                guard try store.withDatabase({ try FoldTable.load(from: $0) }) != nil else {
                    throw BenchError("the first status did not materialise the fold")
                }
            }
        }
        let batch = TelemetryBatch()
        for i in 0..<100_000 {
            let cohort: Cohort = [.enabled, .control, .none, .none][i % 4]
            batch.record(
                TelemetryEvent(
                    time: day(7) - .seconds(Int64(i % 86_000)), installationID: "fid-\(i)",
                    kind: .configFetch(templateVersion: i % 10 == 0 ? 1 : 2), cohort: cohort, provider: .appAttest,
                    osVersion: "17.4"))
        }
        total += batch.eventCount
        try tables.commit(batch, source: "installations", at: day(7))
        return total
    }

    static func status() throws {
        let rollout = try WholeProcessBench.rolloutBinary()
        let dir = try TelemetryBench.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var medians: [Int64: Double] = [:]
        for scale in [Int64(10), 1] {
            let path = dir + "/status-\(scale).db"
            var events = 0
            let fill = try Stopwatch.time { events = try longRollout(path, scale: scale) }
            print("  \(formatFigure(Double(events))) events over 7 days, filled in \(String(format: "%.1f", fill)) s")
            let run = WholeProcessBench.Run(executable: rollout, arguments: ["status", "--json", "--store", path])
            let t = try WholeProcessBench.time(run)
            WholeProcessBench.show("status --json at \(formatFigure(Double(events))) events", t)
            medians[scale] = t.median
            if scale == 1 {
                report(
                    "status --json, whole process, 7 days, \(formatFigure(Double(events))) events",
                    value: t.median * 1000, unit: "ms", limit: 10, higherIsBetter: false)
                // The same command when the fold is gone (what every call cost before it was materialised): it
                // folds the whole rollout and stores the fold again.
                let db = try SQLiteDatabase(path: path)
                try db.transaction { try FoldTable.clear(in: db) }
                let refold = try WholeProcessBench.once(run)
                report(
                    "status --json without the stored fold (folds 7 days, stores it)", value: refold * 1000, unit: "ms",
                    against: ("with it", t.median * 1000))
            }
        }
        report(
            "status --json at 100M events", value: medians[1]! * 1000, unit: "ms",
            against: ("at 10M events", medians[10]! * 1000), target: (1.2, false))
    }

    // MARK: ingest

    static func ingest() throws {
        let rollout = try WholeProcessBench.rolloutBinary()
        let dir = try TelemetryBench.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let dropped = dropPageCache()
        print(
            dropped
                ? "  page cache dropped before each run (/proc/sys/vm/drop_caches)"
                : "  /proc/sys/vm/drop_caches is not writable here: the file's pages are evicted with posix_fadvise(DONTNEED) instead"
        )
        for installations in [1_000_000, 5_000_000] {
            let file = dir + "/native-\(installations).ndjson"
            try TelemetryBench.writeNative(file, events: 10_000_000, installations: installations, span: 6 * 3600)
            evict(file)
            if dropped { _ = dropPageCache() }
            let store = dir + "/ingest-\(installations).db"
            _ = try WholeProcessBench.once(
                WholeProcessBench.Run(executable: rollout, arguments: ["init", "--store", store]))
            var peak = 0
            let seconds = try Stopwatch.time {
                peak = try TelemetryBench.peakRSSOfChild(rollout, ["ingest", "--store", store, file])
            }
            try? FileManager.default.removeItem(atPath: file)
            let label = "ingest 10M events, \(installations / 1_000_000)M installations"
            report(
                "\(label), whole process", value: 10_000_000 / seconds, unit: "events/s", limit: 1_000_000,
                higherIsBetter: true)
            // A peer: sqlite3 only writing the same number of installations as rows of their own (the store's
            // layout before blocks), ids of the same shape, in id order, in one durable transaction; generating
            // and sorting the rows is part of its time as the spill and merge are of ours.
            let floor = try installationRowsBySQLite(dir + "/floor-\(installations).db", rows: installations)
            report(
                "\(label), whole process", value: seconds, unit: "s",
                against: ("sqlite3 writing \(installations / 1_000_000)M installation rows alone", floor))
            report(
                "\(label), peak RSS", value: Double(peak) / 1_048_576, unit: "MiB", limit: 300, higherIsBetter: false)
        }
    }

    /// Seconds `sqlite3` takes to insert `rows` installation rows, one row each (the table the store had before
    /// schema 7), in one durable transaction on a WAL file, as a whole process.
    static func installationRowsBySQLite(_ path: String, rows: Int) throws -> Double {
        do {
            let db = try SQLiteDatabase(path: path)
            try db.execute(
                """
                CREATE TABLE telemetry_installations(
                    id TEXT PRIMARY KEY NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
                    cohort INTEGER NOT NULL, provider INTEGER NOT NULL, os_major INTEGER NOT NULL,
                    sessions INTEGER NOT NULL, entered INTEGER NOT NULL, crashed INTEGER NOT NULL,
                    fetched_at INTEGER, template_version INTEGER) WITHOUT ROWID;
                """)
        }
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        let sql =
            "PRAGMA synchronous=FULL; PRAGMA cache_size=32768; BEGIN IMMEDIATE; "
            + "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows - 1)) "
            + "INSERT INTO telemetry_installations SELECT 'fid-' || x || '-7Yc2x9Q', t, t + 60000000, x % 4, 1, 17, 1, "
            + "1, 0, t, 42 FROM (SELECT x, 1780000000000000 + x * 4000 AS t FROM c) ORDER BY 1; COMMIT;"
        let seconds = try WholeProcessBench.once(WholeProcessBench.Run(executable: "/usr/bin/sqlite3", arguments: [path, sql]))
        let check = try SQLiteDatabase(path: path)
        let n = try check.query("SELECT count(*) FROM telemetry_installations")[0][0].int ?? 0
        guard n == Int64(rows) else { throw BenchError("sqlite3 wrote \(n) installation rows, not \(rows)") }
        return seconds
    }

    /// Drops the whole page cache when this process may (root outside a container); false otherwise.
    static func dropPageCache() -> Bool {
        sync()
        guard let f = fopen("/proc/sys/vm/drop_caches", "w") else { return false }
        defer { fclose(f) }
        return fputs("3\n", f) >= 0 && fflush(f) == 0
    }

    /// Evicts one file's pages from the page cache (written back first, so that they are clean).
    static func evict(_ path: String) {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return }
        defer { close(fd) }
        fdatasync(fd)
        _ = posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED))
    }
}
