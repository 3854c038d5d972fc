import Foundation
import PostgresStore
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import TestSupport
import Timekeeping

/// The PostgreSQL team store: publish latency through the write path against a bare PostgreSQL transaction with
/// the same durability, and ingest throughput against the SQLite store, on a server this suite starts itself
/// (the tests' `PostgresServer`, durable: Debian's `postgresql`, `initdb` into a temporary directory, Unix socket
/// only, fsync and synchronous_commit on: the durability a team store runs with), stopped at the end.
enum PostgresBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "postgres",
            title: "PostgreSQL team store: publish p50/p99 vs a bare durable PostgreSQL transaction; ingest events/s vs SQLite"
        ) {
            let server = try PostgresServer(tcp: false, durable: true)
            defer { server.stop() }
            // `ROLLOUT_BENCH_POSTGRES=publish` or `ingest`: that half alone (a profile of one).
            let only = ProcessInfo.processInfo.environment["ROLLOUT_BENCH_POSTGRES"]
            if only != "ingest" { try publishLatency(server) }
            if only != "publish" { try ingestThroughput(server) }
        }
    ]

    static let publishes = 500
    static let ingestRounds = 5

    /// The fastest and slowest of a round's times, in ms: `41–58 ms`.
    static func spread(_ seconds: [Double]) -> String {
        String(format: "%.0f–%.0f ms", (seconds.min() ?? 0) * 1_000, (seconds.max() ?? 0) * 1_000)
    }

    /// Each sample is a whole `WritePath.execute` of a nudge (read the newest version, apply, diff, one transaction
    /// with the head row lock, the compare-and-swap, the version, its audit record, the head and the NOTIFY). The
    /// floor is one transaction on the same server: the same head row lock, one insert of a row as large as the
    /// version and audit rows together, COMMIT. The two alternate sample by sample.
    ///
    /// Two stores: one sealed with a team store key and a witness directory, as every `rollout` command writes
    /// (the seal checked after the head lock and renewed before COMMIT, the witness checked and advanced), and a
    /// bare connection's store (no key: the seal's state is still read and compared, nothing is renewed).
    static func publishLatency(_ server: PostgresServer) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-seal-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let sealing = PostgresSealing(
            key: PostgresSealKey(teamKey: (0..<32).map { _ in UInt8.random(in: 0...255) }, path: directory.path + "/team-store.key"),
            keyPath: directory.path + "/team-store.key", witnessDirectory: directory.path + "/rollout-witness")
        let t0 = SystemClock().now()
        let sealedStore = try PostgresConfigStore.create(conninfo: try server.database("publish_sealed"), sealing: sealing) {
            try SQLiteConfigStore.genesis(seed: "bench", actor: "bench@rollout", time: t0)
        }
        let conninfo = try server.database("publish")
        let store = try PostgresConfigStore.create(conninfo: conninfo) {
            try SQLiteConfigStore.genesis(seed: "bench", actor: "bench@rollout", time: t0)
        }
        let sealedPath = WritePath(store: sealedStore, clock: SystemClock(), newSeed: { "bench" })
        let path = WritePath(store: store, clock: SystemClock(), newSeed: { "bench" })
        func nudge(_ i: Int, on path: WritePath) throws {
            let request = WritePath.Request(
                intent: .rollout(.nudge(MicroPercent(i % 2 == 0 ? 100_000 : -100_000))), actor: "bench@rollout", reason: "bench",
                origin: "BENCH")
            guard case .published = try path.execute(request) else { throw BenchError("a bench nudge published nothing") }
        }
        for p in [sealedPath, path] {
            _ = try p.execute(
                WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 10))), actor: "bench@rollout", reason: "bench", origin: "BENCH"))
        }
        let rowBytes = try store.current().template.strippingVersionInfo().json.compactText.utf8.count + 64 * 4 + 300
        let floor = try PGConnection(conninfo)
        try floor.execute(
            "CREATE TABLE floor_head (id INTEGER PRIMARY KEY, n BIGINT); INSERT INTO floor_head VALUES (1, 0); "
                + "CREATE TABLE floor_rows (n BIGINT PRIMARY KEY, payload TEXT)")
        let payload = String(repeating: "a", count: rowBytes)
        func bare(_ i: Int) throws {
            try floor.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try floor.query("SELECT n FROM floor_head WHERE id = 1 FOR UPDATE")
            try floor.query("INSERT INTO floor_rows (n, payload) VALUES ($1, $2)", [String(i), payload])
            try floor.query("UPDATE floor_head SET n = $1 WHERE id = 1", [String(i)])
            try floor.execute("COMMIT")
        }
        for i in 0..<30 {
            try nudge(i, on: sealedPath)
            try nudge(i, on: path)
            try bare(-1 - i)
        }
        // What one publish costs in round trips to the server, on each store and the floor.
        func trips(_ connection: () -> Int, _ body: () throws -> Void) rethrows -> Int {
            let before = connection()
            try body()
            return connection() - before
        }
        let sealedTrips = try trips({ sealedStore.roundTrips }) { try nudge(0, on: sealedPath) }
        let bareTrips = try trips({ store.roundTrips }) { try nudge(0, on: path) }
        let floorTrips = try trips({ floor.roundTrips }) { try bare(-100) }
        var sealedSamples: [Double] = []
        var published: [Double] = []
        var floorSamples: [Double] = []
        for i in 0..<publishes {
            sealedSamples.append(try Stopwatch.time { try nudge(i, on: sealedPath) } * 1_000)
            published.append(try Stopwatch.time { try nudge(i, on: path) } * 1_000)
            floorSamples.append(try Stopwatch.time { try bare(i) } * 1_000)
        }
        let report0 = try store.verify()
        let sealedReport = try sealedStore.verify()
        for r in [report0, sealedReport] where r.versions != 2 + 31 + publishes {
            throw BenchError("expected \(2 + 31 + publishes) versions, found \(r.versions)")
        }
        _ = try sealedStore.verifySeal()
        sealedSamples.sort()
        published.sort()
        floorSamples.sort()
        func percentile(_ sorted: [Double], _ p: Double) -> Double {
            sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
        }
        print("  \(publishes) publishes through WritePath.execute (nudge, head lock, CAS, audit, NOTIFY) on each store; floor row \(rowBytes) bytes")
        print(
            "  round trips to the server per publish: sealed store \(sealedTrips), bare connection \(bareTrips); "
                + "the floor transaction \(floorTrips)")
        report(
            "publish p50, sealed store (seal and witness, as every rollout command)", value: percentile(sealedSamples, 0.50), unit: "ms",
            against: ("bare durable PostgreSQL transaction p50", percentile(floorSamples, 0.50)), target: (2, false))
        report(
            "publish p99, sealed store", value: percentile(sealedSamples, 0.99), unit: "ms",
            against: ("bare durable PostgreSQL transaction p99", percentile(floorSamples, 0.99)))
        report(
            "publish p50, bare connection (no key)", value: percentile(published, 0.50), unit: "ms",
            against: ("bare durable PostgreSQL transaction p50", percentile(floorSamples, 0.50)), target: (2, false))
        report(
            "publish p99, bare connection", value: percentile(published, 0.99), unit: "ms",
            against: ("bare durable PostgreSQL transaction p99", percentile(floorSamples, 0.99)))
        print("  audit chains verified after the run: \(report0.auditRecords) records, \(report0.versions) versions each; seal verified")
    }

    /// Batches of 20,000 events over 2,000 installations (sessions, attestations, crashes, fetches): events/s
    /// landed in PostgreSQL by one connection and by four at once, against the SQLite store in the same run.
    static func ingestThroughput(_ server: PostgresServer) throws {
        let t0 = Instant(seconds: 1_780_000_020)
        func batch(_ b: Int) -> TelemetryBatch {
            let out = TelemetryBatch()
            var state = UInt64(b + 1)
            for e in 0..<20_000 {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                let installation = "inst-\(Int(state >> 40) % 2_000)"
                let cohort: Cohort = (state >> 20) % 2 == 0 ? .enabled : .control
                let kind: TelemetryEventKind
                switch (state >> 8) % 10 {
                case 0: kind = .crash(fatal: true)
                case 1: kind = .attestationFailure(.serverUnavailable)
                case 2: kind = .configFetch(templateVersion: 3)
                case 3, 4, 5: kind = .attestationSuccess
                default: kind = .sessionStart
                }
                out.record(
                    TelemetryEvent(
                        time: t0 + .seconds(Int64(b * 60 + e % 60)), installationID: installation, kind: kind, cohort: cohort,
                        provider: .appAttest, osVersion: "17.4", appVersion: "3.2.1"))
            }
            return out
        }
        let batches = (0..<12).map(batch)
        let events = Double(batches.reduce(0) { $0 + $1.eventCount })

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-pg-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Rounds of the same batches, each into a fresh SQLite store and a fresh database, the two alternating; the
        // line compares the medians. One round lasts about a tenth of a second, so a single one was at the mercy of
        // the scheduler (0.67x and 0.83x in two runs of the same code).
        var sqliteSeconds: [Double] = []
        var pgSeconds: [Double] = []
        // Each batch's seconds, per round: where a round's time goes (the first batches find empty stores, and a new
        // connection prepares its statements on first use).
        var sqliteBatchSeconds: [[Double]] = []
        var pgBatchSeconds: [[Double]] = []
        var batchTrips = 0.0
        var oneTrip = (landed: 0, refused: 0)
        var tables: (any TelemetryCounters)?
        for round in 0..<ingestRounds {
            let sqlite = try RolloutStore(path: directory.appendingPathComponent("rollout-\(round).db").path)
            let into = try sqlite.telemetryCounters()
            var perBatch: [Double] = []
            sqliteSeconds.append(
                try Stopwatch.time {
                    for (i, b) in batches.enumerated() { perBatch.append(try Stopwatch.time { try into.commit(b, source: "b\(i)", at: t0) }) }
                })
            sqliteBatchSeconds.append(perBatch)
            tables = into

            let one = try server.database("ingest1_\(round)")
            let oneStore = try PostgresConfigStore.create(conninfo: one) {
                try SQLiteConfigStore.genesis(seed: "bench", actor: "bench", time: t0)
            }
            let pg = PostgresTelemetry(store: oneStore)
            let tripsBefore = oneStore.roundTrips
            perBatch = []
            pgSeconds.append(
                try Stopwatch.time {
                    for (i, b) in batches.enumerated() { perBatch.append(try Stopwatch.time { try pg.commit(b, source: "b\(i)", at: t0) }) }
                })
            pgBatchSeconds.append(perBatch)
            batchTrips = Double(oneStore.roundTrips - tripsBefore) / Double(batches.count)
            oneTrip = pg.oneRoundTrip
            guard try pg.allTimeTotals() == (try into.allTimeTotals()) else { throw BenchError("PostgreSQL and SQLite counters differ") }
        }
        guard let tables else { throw BenchError("no ingest round ran") }
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }

        let four = try server.database("ingest4")
        _ = try PostgresConfigStore.create(conninfo: four) { try SQLiteConfigStore.genesis(seed: "bench", actor: "bench", time: t0) }
        let writers = try (0..<4).map { _ in PostgresTelemetry(store: try PostgresConfigStore(conninfo: four)) }
        nonisolated(unsafe) let shared = batches
        nonisolated(unsafe) var failure: Error?
        let lock = NSLock()
        let parallelSeconds = Stopwatch.time {
            DispatchQueue.concurrentPerform(iterations: 4) { w in
                do {
                    for i in stride(from: w, to: shared.count, by: 4) { try writers[w].commit(shared[i], source: "b\(i)", at: t0) }
                } catch {
                    lock.withLock { failure = error }
                }
            }
        }
        if let failure { throw failure }
        let check = PostgresTelemetry(store: try PostgresConfigStore(conninfo: four))
        guard try check.allTimeTotals() == (try tables.allTimeTotals()) else { throw BenchError("the four writers' counters differ") }

        let fourTrips = writers.reduce((landed: 0, refused: 0)) { ($0.landed + $1.oneRoundTrip.landed, $0.refused + $1.oneRoundTrip.refused) }
        print(
            "  \(batches.count) batches of 20,000 events over 2,000 installations; fsync on; \(formatFigure(batchTrips)) round trips per batch; "
                + "landed in one round trip: \(oneTrip.landed) of \(batches.count), \(oneTrip.refused) refused by the guard "
                + "(4 connections: \(fourTrips.landed) and \(fourTrips.refused)); "
                + "1 connection: median of \(ingestRounds) rounds (SQLite \(spread(sqliteSeconds)), PostgreSQL \(spread(pgSeconds)))")
        report(
            "ingest into PostgreSQL, 1 connection", value: events / median(pgSeconds), unit: "events/s",
            against: ("SQLite store", events / median(sqliteSeconds)), target: (0.8, true))
        // The same rounds by batch: the first two (an empty store; the first read, statements prepared on first use)
        // and the ten after them, each the median over the rounds of that batch's seconds.
        func byBatch(_ rounds: [[Double]]) -> [Double] { batches.indices.map { i in median(rounds.map { $0[i] }) } }
        let (sqliteBy, pgBy) = (byBatch(sqliteBatchSeconds), byBatch(pgBatchSeconds))
        let (sqliteLater, pgLater) = (sqliteBy.dropFirst(2).reduce(0, +), pgBy.dropFirst(2).reduce(0, +))
        let later = Double(batches.count - 2)
        print(
            "  by batch (median of the rounds): batches 1 and 2 "
                + String(format: "SQLite %.2f and %.2f ms, PostgreSQL %.2f and %.2f ms", sqliteBy[0] * 1e3, sqliteBy[1] * 1e3, pgBy[0] * 1e3, pgBy[1] * 1e3)
                + String(format: "; batches 3 to %d: SQLite %.2f ms per batch, PostgreSQL %.2f ms", batches.count,
                    sqliteLater / later * 1e3, pgLater / later * 1e3))
        let laterEvents = Double(batches.dropFirst(2).reduce(0) { $0 + $1.eventCount })
        report(
            "ingest into PostgreSQL, 1 connection, batches 3 to \(batches.count)", value: laterEvents / pgLater, unit: "events/s",
            against: ("SQLite store, same batches", laterEvents / sqliteLater))
        report(
            "ingest into PostgreSQL, 4 connections at once", value: events / parallelSeconds, unit: "events/s",
            against: ("SQLite store", events / median(sqliteSeconds)))
    }
}
