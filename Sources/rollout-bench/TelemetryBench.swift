import Foundation
import Monitoring
import RemoteConfig
import Rollout
import SQLiteStore
import Telemetry
import TelemetryIngest
import Timekeeping

/// Telemetry hot paths: ingest throughput against reading and splitting the same file, ingest memory at two
/// input sizes, and the console's dashboard query over a store holding 100 million events.
enum TelemetryBench {
    static let suites: [BenchSuite] = [
        BenchSuite(
            name: "telemetry-ingest",
            title: "rollout ingest: native NDJSON and GA4 rows vs reading + splitting the file", run: ingest),
        BenchSuite(
            name: "telemetry-memory", title: "rollout ingest peak memory at N and 2N events (same installations)",
            run: memory),
        BenchSuite(
            name: "telemetry-dashboard", title: "dashboard query with 100 million events in the store", run: dashboard),
    ]

    static let start: Int64 = 1_780_000_000_000_000

    // MARK: files

    /// Writes `events` native lines from `installations` installations spread evenly over `span` seconds.
    static func writeNative(_ path: String, events: Int, installations: Int, span: Int64) throws {
        let out = try FileSink(path)
        let kinds = [
            #""k":"session""#, #""k":"success","p":"appAttest""#, #""k":"success","p":"appAttest""#,
            #""k":"failure","e":"serverUnavailable","p":"appAttest""#, #""k":"fetch","v":42"#,
            #""k":"crash","fatal":true"#,
        ]
        let cohorts = [#""c":"enabled""#, #""c":"control""#, #""c":"none""#, #""c":"none""#]
        for i in 0..<events {
            let t = start + Int64(i) * span * 1_000_000 / Int64(events)
            let id = (i &* 7919) % installations
            let kind = kinds[i % 97 == 0 ? 5 : i % 5]
            out.append(
                #"{"t":\#(t),"i":"fid-\#(id)-7Yc2x9Q",\#(kind),\#(cohorts[id % 4]),"os":"17.4.1","app":"3.2.1"}"#)
            out.append("\n")
        }
        try out.close()
    }

    /// Writes `rows` GA4 export rows (about 1.2 kB each, as real rows are).
    static func writeGA4(_ path: String, rows: Int, installations: Int) throws {
        let out = try FileSink(path)
        let names = ["session_start", "AppAttestSuccess", "AppAttestSuccess", "AppAttestFailure", "screen_view"]
        for i in 0..<rows {
            let t = start + Int64(i) * 10_000
            let id = (i &* 7919) % installations
            let cohort = ["enabled", "control", "none", "none"][id % 4]
            var params =
                #"{"key":"ga_session_id","value":{"string_value":null,"int_value":"1780000000","float_value":null,"double_value":null}},{"key":"AppAttestCohort","value":{"string_value":"\#(cohort)","int_value":null,"float_value":null,"double_value":null}}"#
            if i % 5 == 3 {
                params +=
                    #",{"key":"error_code","value":{"string_value":null,"int_value":"4","float_value":null,"double_value":null}}"#
            }
            out.append(
                #"{"event_date":"20260528","event_timestamp":"\#(t)","event_name":"\#(names[i % 5])","event_params":[\#(params)],"event_previous_timestamp":null,"event_value_in_usd":null,"event_bundle_sequence_id":"7","event_server_timestamp_offset":"1234","user_id":null,"user_pseudo_id":"\#(id)0A1B2C3D4E5F60718293A4B5C6D7E8F","privacy_info":{"analytics_storage":"Yes","ads_storage":"No","uses_transient_token":"No"},"user_properties":[{"key":"first_open_time","value":{"string_value":null,"int_value":"1779000000000","set_timestamp_micros":"1779000000000000"}}],"user_first_touch_timestamp":"1779000000000000","user_ltv":null,"device":{"category":"mobile","mobile_brand_name":"Apple","mobile_model_name":"iPhone 15","operating_system":"iOS","operating_system_version":"iOS 17.4.1","language":"en-us","is_limited_ad_tracking":"No","time_zone_offset_seconds":"7200"},"geo":{"city":"Berlin","country":"Germany","continent":"Europe","region":"Berlin","sub_continent":"Western Europe","metro":"(not set)"},"app_info":{"id":"com.example.app","version":"3.2.1","firebase_app_id":"1:1234:ios:abcd","install_source":"com.apple.AppStore"},"traffic_source":{"name":"(direct)","medium":"(none)","source":"(direct)"},"stream_id":"4242","platform":"IOS","items":[],"is_active_user":true}"#
            )
            out.append("\n")
        }
        try out.close()
    }

    /// Reads the file in 1 MiB chunks and finds every newline: the floor any line reader pays.
    static func readAndSplit(_ path: String) throws -> Int {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw BenchError("cannot read \(path)") }
        defer { close(fd) }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { chunk.deallocate() }
        var lines = 0
        while true {
            let n = read(fd, chunk.baseAddress, chunk.count)
            if n <= 0 { break }
            var p = chunk.baseAddress!
            var left = n
            while left > 0, let nl = memchr(p, 0x0A, left) {
                lines += 1
                left -= nl - p + 1
                p = nl + 1
            }
        }
        return lines
    }

    /// Ingests a file into a fresh store as `rollout ingest` does; returns (events, parse seconds, commit seconds).
    static func ingestFile(_ path: String, format: TelemetryFormat, store: String) throws -> (Int, Double, Double) {
        let tables = try TelemetryTables(database: SQLiteDatabase(path: store))
        let ingest = TelemetryIngest(format: format, window: EventTimeWindow(now: SystemClock().now(), rolloutStart: nil))
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw BenchError("cannot read \(path)") }
        defer { close(fd) }
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { chunk.deallocate() }
        let parse = Stopwatch.time {
            while true {
                let n = read(fd, chunk.baseAddress, chunk.count)
                if n <= 0 { break }
                ingest.feed(UnsafeRawBufferPointer(rebasing: chunk[0..<n]))
            }
            ingest.finish()
        }
        guard ingest.problemCount == 0 else {
            throw BenchError("bad lines in the bench file: \(ingest.problems.prefix(3))")
        }
        let commit = try Stopwatch.time {
            try tables.commit(ingest.batch, source: "bench", at: Instant(microseconds: start))
        }
        return (ingest.batch.eventCount, parse, commit)
    }

    // MARK: suites

    static func ingest() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let native = dir + "/native.ndjson"
        try writeNative(native, events: 3_000_000, installations: 300_000, span: 3 * 3600)
        let ga4 = dir + "/ga4.ndjson"
        try writeGA4(ga4, rows: 300_000, installations: 100_000)

        for (label, path, format) in [("native", native, TelemetryFormat.native), ("GA4", ga4, .ga4)] {
            _ = try readAndSplit(path)  // warm the page cache for both runs alike
            var lines = 0
            let floor = try Stopwatch.time { lines = try readAndSplit(path) }
            let (events, parse, commit) = try ingestFile(path, format: format, store: dir + "/\(label).db")
            let bytes = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
            print(
                "  \(label): \(lines) lines, \(bytes / 1_000_000) MB, \(events) events counted; parse \(String(format: "%.2f", parse)) s, commit \(String(format: "%.2f", commit)) s"
            )
            report(
                "\(label) ingest (parse + one-transaction commit)", value: Double(events) / (parse + commit),
                unit: "lines/s",
                against: ("read + split the same file", Double(lines) / floor))
            if format == .native {
                report(
                    "native ingest throughput", value: Double(events) / (parse + commit), unit: "events/s",
                    limit: 1_000_000, higherIsBetter: true)
            }
        }
    }

    static func memory() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
            "rollout"
        ).path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw BenchError("rollout binary missing beside the bench: \(binary)")
        }
        var peaks: [Int: Int] = [:]
        for events in [1_500_000, 3_000_000] {
            let path = dir + "/\(events).ndjson"
            try writeNative(path, events: events, installations: 300_000, span: 3 * 3600)
            // `ingest` creates no store: `init` first, as a user does.
            _ = try runCapture(binary, ["init", "--store", dir + "/\(events).db", "--seed", "bench"])
            peaks[events] = try peakRSSOfChild(binary, ["ingest", "--store", dir + "/\(events).db", path])
            try? FileManager.default.removeItem(atPath: path)
        }
        print("  300,000 installations over 3 hours; the 2N file has twice the events of the N file")
        report(
            "peak RSS ingesting 3.0M events", value: Double(peaks[3_000_000]!) / 1_048_576, unit: "MiB",
            against: ("ingesting 1.5M events", Double(peaks[1_500_000]!) / 1_048_576), target: (1.1, false))
    }

    static func dashboard() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // A real store: the rollout at 10% since the first day, and the dashboard read through `RolloutMonitor`,
        // the one assessment the console, `status` and the guardrail use.
        let store = try RolloutStore(path: dir + "/dashboard.db")
        let tables = try store.withDatabase { try TelemetryTables(database: $0) }
        // Seven days of a rollout at about 9,900 events a minute, landed through the counters API in one batch
        // per day: the dashboard reads only counter and presence rows, so this is the store that ingesting 100 M
        // events leaves (without the per-installation rows, which the query never reads).
        let day0 = BucketLevel.day.bucket(start)
        var total = 0
        let fill = try Stopwatch.time {
            for d in 0..<7 {
                let batch = TelemetryBatch()
                for m in 0..<1440 {
                    let at = BucketLevel.minute.start((day0 + Int64(d)) * 1440 + Int64(m))
                    for (key, n) in minuteTraffic(m) { batch.addCounts(key, at: at, count: n) }
                }
                total += batch.eventCount
                try tables.commit(batch, source: "bulk day \(d)", at: at(d + 1))
            }
            // Real installations for the last day's presence (who is active, on which template version).
            let batch = TelemetryBatch()
            for i in 0..<200_000 {
                let t = at(7) - .seconds(Int64(i % 86_000))
                let cohort: Cohort = [.enabled, .control, .none, .none][i % 4]
                batch.record(
                    TelemetryEvent(
                        time: t, installationID: "fid-\(i)", kind: .configFetch(templateVersion: i % 10 == 0 ? 41 : 42),
                        cohort: cohort, provider: .appAttest, osVersion: "17.4"))
            }
            total += batch.eventCount
            try tables.commit(batch, source: "installations", at: at(7))
        }
        let rows = try tables.database.query("SELECT count(*) FROM telemetry_counters")[0][0].int!
        print("  \(total) events in the store (\(rows) counter rows), filled in \(String(format: "%.1f", fill)) s")

        let configStore = try store.configStore()
        _ = try configStore.initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: "bench", actor: "bench", time: at(0) - .hours(1))
        }
        _ = try WritePath(store: configStore, clock: ManualClock(at(0)), newSeed: { "bench" }).execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 10))), actor: "bench", reason: "bench", origin: "BENCH"))
        var now = at(7) + .seconds(Int64(30))
        let clock = ManualClock(now)

        // The first query of a process folds the whole rollout once; compare with merely reading those rows.
        let rowsRead = try Stopwatch.time {
            _ = try tables.database.query("SELECT level, bucket, key, count FROM telemetry_counters WHERE bucket >= 0")
        }
        let cold = try Stopwatch.time { _ = try RolloutMonitor(store: store, clock: clock).status() }
        report(
            "first query (folds 7 days once)", value: cold * 1000, unit: "ms",
            against: ("SELECT of every counter row", rowsRead * 1000))

        // A console refreshing once a second for ten minutes; a new minute of events lands every 60 refreshes
        // (its commit is not timed).
        let monitor = try RolloutMonitor(store: store, clock: clock)
        _ = try monitor.status()  // this monitor's own first (folding) query, reported above
        var times: [Double] = []
        var cpu: [Double] = []
        var verdict = Verdict(findings: [Finding(.ok, .data, "not run")])
        for i in 0..<600 {
            if i % 60 == 0 {
                let batch = TelemetryBatch()
                for (key, n) in minuteTraffic(i / 60) { batch.addCounts(key, at: now - .seconds(Int64(20)), count: n) }
                try tables.commit(batch, source: "live", at: now)
            }
            let cpuStart = threadCPUSeconds()
            clock.set(now)
            times.append(try Stopwatch.time { verdict = try monitor.status().assessment.verdict })
            cpu.append(threadCPUSeconds() - cpuStart)
            now = now + .seconds(Int64(1))
        }
        times.sort()
        cpu.sort()
        var load = [0.0, 0, 0]
        getloadavg(&load, 3)
        print("  verdict after the run: \(verdict)")
        print(
            "  (load average \(String(format: "%.1f", load[0])) on \(ProcessInfo.processInfo.activeProcessorCount) cores: wall-clock outliers are time spent descheduled; CPU time excludes it)"
        )
        report(
            "dashboard query + verdict, median of 600 refreshes", value: times[300] * 1000, unit: "ms", limit: 2,
            higherIsBetter: false)
        report(
            "dashboard query + verdict, 99th percentile", value: times[594] * 1000, unit: "ms", limit: 2,
            higherIsBetter: false)
        report(
            "dashboard query + verdict, slowest (wall clock)", value: times[599] * 1000, unit: "ms", limit: 2,
            higherIsBetter: false)
        report(
            "dashboard query + verdict, slowest (thread CPU time)", value: cpu[599] * 1000, unit: "ms", limit: 2,
            higherIsBetter: false)
    }

    /// CPU time of the calling thread.
    static func threadCPUSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func at(_ day: Int) -> Instant { BucketLevel.day.start(BucketLevel.day.bucket(start) + Int64(day)) }

    /// About 9,900 events in one minute of a 10% rollout, varied a little from minute to minute.
    static func minuteTraffic(_ m: Int) -> [(CounterKey, Int64)] {
        let v = Int64(m % 7)
        return [
            (CounterKey(.session, .enabled), 900 + v), (CounterKey(.session, .control), 900 - v),
            (CounterKey(.session, .none), 5_200),
            (CounterKey(.attestationSuccess, .enabled, provider: .appAttest), 1_800 + v),
            (CounterKey(.attestationFailure, .enabled, provider: .appAttest, detail: 4), 40 + v % 3),
            (CounterKey(.attestationFailure, .enabled, provider: .appAttest, detail: 3), 10),
            (CounterKey(.attestationFailure, .enabled, provider: .appAttest, detail: 0), 5),
            (CounterKey(.attestationSuccess, .control, provider: .deviceCheck), 800),
            (CounterKey(.attestationFailure, .control, provider: .deviceCheck, detail: 4), 30 + v % 3),
            (CounterKey(.attestationFailure, .control, provider: .deviceCheck, detail: 3), 10),
            (CounterKey(.attestationFailure, .control, provider: .deviceCheck, detail: 0), 3),
            (CounterKey(.crash, .enabled, detail: 1), 2 + (v == 3 ? 1 : 0)),
            (CounterKey(.crash, .control, detail: 1), 2 + (v == 5 ? 1 : 0)),
            (CounterKey(.crash, .none, detail: 1), 10), (CounterKey(.crash, .none, detail: 0), 5),
            (CounterKey(.configFetch, .enabled), 60), (CounterKey(.configFetch, .control), 60),
            (CounterKey(.configFetch, .none), 80),
            (CounterKey(.usersEntered, .enabled), 20), (CounterKey(.usersEntered, .control), 20),
            (CounterKey(.usersCrashed, .enabled), v == 2 ? 1 : 0),
            (CounterKey(.usersCrashed, .control), v == 4 ? 1 : 0),
        ]
    }

    static func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "rollout-bench-telemetry-\(getpid())"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Runs `path arguments` to completion and returns its peak resident set size in bytes, as GNU time measures
    /// it (`/usr/bin/time -f %M`, Debian package `time`).
    ///
    /// Not this process's own `wait4`: Linux starts a child's `ru_maxrss` from the high-water mark of the address
    /// space it was spawned from, so every child of a bench process that has grown (the simulator suite leaves it
    /// over 300 MiB) would report at least that. GNU time is a small process of its own; its child's figure is the
    /// child's.
    static func peakRSSOfChild(_ path: String, _ arguments: [String]) throws -> Int {
        let timeTool = "/usr/bin/time"
        guard access(timeTool, X_OK) == 0 else {
            throw BenchError("\(timeTool) is missing (Debian package time; scripts/deps.sh bench)")
        }
        let report = FileManager.default.temporaryDirectory.appendingPathComponent("rollout-bench-rss-\(getpid())").path
        defer { unlink(report) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] =
            ([timeTool, "-f", "%M", "-o", report, path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, timeTool, &actions, nil, argv, environ)
        guard rc == 0 else { throw BenchError("cannot start \(path): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        guard waitpid(pid, &status, 0) == pid else { throw BenchError("waitpid failed") }
        guard status == 0 else {
            throw BenchError("\(path) \(arguments.joined(separator: " ")) exited with status \(status)")
        }
        guard let text = try? String(contentsOfFile: report, encoding: .utf8),
            let kilobytes = text.split(separator: "\n").last.flatMap({ Int($0.trimmingCharacters(in: .whitespaces)) })
        else { throw BenchError("GNU time left no peak RSS for \(path)") }
        return kilobytes * 1024
    }
}

/// Buffered writes of text to a file.
final class FileSink {
    private let fd: Int32
    private var buffer: [UInt8] = []

    init(_ path: String) throws {
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw BenchError("cannot write \(path)") }
        buffer.reserveCapacity(1 << 20)
    }

    func append(_ s: String) {
        buffer.append(contentsOf: s.utf8)
        if buffer.count >= 1 << 20 { flush() }
    }

    private func flush() {
        buffer.withUnsafeBytes { b in
            var off = 0
            while off < b.count {
                let n = write(fd, b.baseAddress! + off, b.count - off)
                if n <= 0 { break }
                off += n
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }

    func close() throws {
        flush()
        _ = Glibc.close(fd)
    }
}
