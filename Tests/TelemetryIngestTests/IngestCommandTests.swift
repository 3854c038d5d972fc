import Foundation
import Rollout
import SQLiteStore
import TestSupport
import Testing
import Timekeeping

@testable import Telemetry
@testable import TelemetryIngest

/// `rollout ingest` as a person runs it: the real binary on a real store file.
@Suite("rollout ingest")
struct IngestCommandTests {
    /// A new store, made by `rollout init` (the only command that creates one).
    func store() throws -> String {
        let path = try TestSupport.temporaryDirectory("ingest").appendingPathComponent("store.db").path
        let created = try TestSupport.run(try TestSupport.rolloutBinary(), ["init", "--store", path])
        guard created.status == 0 else { throw TestSupport.Failure("init failed: \(created.stderr)") }
        return path
    }

    func totals(_ path: String) throws -> (CounterTotals, Int, Int) {
        let tables = try TelemetryTables(database: SQLiteDatabase(path: path))
        return (try tables.allTimeTotals(), try tables.batches().count, try tables.installationCount())
    }

    @Test("bad lines are skipped and reported by number; the command exits 1 with a summary")
    func skipsBadLines() throws {
        let db = try store()
        let input = """
            {"t":1780000000000000,"i":"a","k":"session","c":"enabled"}
            {"t":1780000000000000,"i":"a","k":"explode","c":"enabled"}
            {"t":1780000001000000,"i":"b","k":"session","c":"control"}
            {"t":1780000001000000,"i":"b","k":"session","c":"control"

            """
        let r = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", "--store", db, "-"], stdin: input)
        #expect(r.status == 1)
        #expect(r.stdout.contains("ingested 2 events from 2 installations"))
        #expect(r.stdout.contains("2 bad lines skipped:"))
        #expect(r.stdout.contains("line 2: unknown kind \"explode\""))
        #expect(r.stdout.contains("line 4: unterminated object"))
        let (t, batches, installations) = try totals(db)
        #expect(t.sum(.session) == 2)
        #expect(batches == 1)
        #expect(installations == 2)
    }

    @Test("--strict fails the whole batch on a bad line and lands nothing")
    func strict() throws {
        let db = try store()
        let input = """
            {"t":1780000000000000,"i":"a","k":"session","c":"enabled"}
            {"t":1780000000000000,"i":"a","k":"session","c":"beta"}
            """
        let r = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["ingest", "--strict", "--store", db], stdin: input)
        #expect(r.status == 1)
        #expect(r.stderr.contains("line 2: cohort \"beta\" is not enabled, control or none; --strict"))
        let (t, batches, _) = try totals(db)
        #expect(t.counts.isEmpty)
        #expect(batches == 0)
    }

    @Test("GA4 and Crashlytics files through the command give the right counts per cohort")
    func exports() throws {
        let db = try store()
        let dir = URL(fileURLWithPath: db).deletingLastPathComponent()
        let ga4 = dir.appendingPathComponent("ga4.ndjson")
        try (GA4Rows.file.joined(separator: "\n") + "\n").write(to: ga4, atomically: true, encoding: .utf8)
        let r = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["ingest", "--format", "ga4", "--json", "--store", db, ga4.path])
        #expect(r.status == 0, "\(r.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as! [String: Any]
        #expect(summary["events"] as? Int == 15)
        #expect(summary["ignored"] as? Int == 2)
        let byCohort = summary["byCohort"] as! [String: [String: Int]]
        #expect(byCohort["enabled"]?["session"] == 3)
        #expect(byCohort["control"]?["session"] == 2)
        #expect(byCohort["enabled"]?["attestationFailure"] == 3)

        let crashes = dir.appendingPathComponent("crashes.ndjson")
        try CrashlyticsRows.file.joined(separator: "\n").write(to: crashes, atomically: true, encoding: .utf8)
        let c = try TestSupport.run(
            try TestSupport.rolloutBinary(), ["ingest", "--format", "crashlytics", "--store", db, crashes.path])
        #expect(c.status == 0, "\(c.stderr)")
        let (t, batches, _) = try totals(db)
        #expect(batches == 2)
        #expect(t.sum(.crash, cohort: .enabled, fatal: true) == 3)  // 1 from GA4's app_exception, 2 from Crashlytics
        #expect(t.sum(.crash, cohort: .control, fatal: true) == 1)
        #expect(t.sum(.usersCrashed, cohort: .enabled) == 2)  // u2 (GA4) and i1 (Crashlytics)
    }

    @Test("--batch-events lands an endless pipe in several whole batches; rollout telemetry reads them back")
    func batches() throws {
        let db = try store()
        var lines: [String] = []
        for i in 0..<5 {
            lines.append(
                #"{"t":\#(1_780_000_000_000_000 + Int64(i) * 1_000_000),"i":"a\#(i)","k":"session","c":"\#(i % 2 == 0 ? "enabled" : "control")"}"#
            )
        }
        // A slow pipe: two lines, a pause, two lines, a pause, one line.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        p.arguments = ["ingest", "--batch-events", "2", "--store", db, "-"]
        let input = Pipe()
        let output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        for group in [lines[0..<2], lines[2..<4], lines[4..<5]] {
            input.fileHandleForWriting.write(Data((group.joined(separator: "\n") + "\n").utf8))
            usleep(300_000)
        }
        try input.fileHandleForWriting.close()
        p.waitUntilExit()
        let out = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(p.terminationStatus == 0)
        #expect(out.contains("ingested 5 events from 5 installations (stdin, 5 lines, 3 batches)"))
        let (t, batches, _) = try totals(db)
        #expect(t.sum(.session) == 5)
        #expect(batches == 3)
        let shown = try TestSupport.run(
            try TestSupport.rolloutBinary(),
            ["telemetry", "--store", db, "--since", "2026-05-28T20:00:00Z", "--percent", "10", "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let json = try JSONSerialization.jsonObject(with: Data(shown.stdout.utf8)) as! [String: Any]
        let cohorts = json["cohorts"] as! [String: [String: Any]]
        #expect(cohorts["enabled"]?["sessions"] as? Int == 3)
        #expect(cohorts["control"]?["sessions"] as? Int == 2)
        let verdict = json["verdict"] as! [String: Any]
        #expect(verdict["level"] as? String == "HOLD")  // the events are months old: stale
        #expect((verdict["reason"] as? String)?.hasPrefix("telemetry is stale") == true)
        #expect(json["armed"] as? Bool == true)
    }

    /// 300,000 native events from 100,000 installations, so that writing the batch takes a while.
    static func bigFile(_ url: URL) throws -> Int {
        var text = ""
        text.reserveCapacity(30_000_000)
        let kinds = [#""k":"session""#, #""k":"success","p":"appAttest""#, #""k":"crash","fatal":true"#]
        for i in 0..<300_000 {
            let id = i % 100_000
            text +=
                #"{"t":\#(1_780_000_000_000_000 + Int64(i) * 10_000),"i":"fid-\#(id)",\#(kinds[i / 100_000]),"c":"\#(id % 2 == 0 ? "enabled" : "control")","os":"17.4"}"#
            text += "\n"
        }
        try text.write(to: url, atomically: true, encoding: .utf8)
        return 300_000
    }

    @Test("a killed ingest (SIGKILL) leaves no partial batch, and the store stays sound")
    func killed() throws {
        let db = try store()
        let file = URL(fileURLWithPath: db).deletingLastPathComponent().appendingPathComponent("big.ndjson")
        let events = try Self.bigFile(file)
        // "writing a batch" is printed just before the transaction starts. Kill later and later after it: every
        // kill must leave all or nothing, and at least one must land inside the write (killed, nothing landed,
        // 50 ms or more into the write).
        var midWrite = 0
        for delay in [0, 50, 100, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3200] {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
            p.arguments = ["ingest", "--verbose", "--store", db, file.path]
            let err = Pipe()
            p.standardError = err
            p.standardOutput = Pipe()
            try p.run()
            var seen = ""
            while !seen.contains("writing a batch") {
                let chunk = err.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                seen += String(decoding: chunk, as: UTF8.self)
            }
            #expect(seen.contains("writing a batch of \(events) events"))
            usleep(useconds_t(delay * 1000))
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            let (t, batches, installations) = try totals(db)
            #expect(batches == 0 || batches == 1)
            if batches == 0 {
                #expect(t.counts.isEmpty)
                #expect(installations == 0)
                if p.terminationReason == .uncaughtSignal, delay >= 50 {
                    midWrite += 1
                    break
                }
            } else {
                #expect(t.sum(.session) + t.sum(.attestationSuccess) + t.sum(.crash) == Int64(events))
                #expect(installations == 100_000)
                break
            }
        }
        #expect(midWrite == 1, "no kill landed while the batch was being written")
        let check = try SQLiteDatabase(path: db).query("PRAGMA integrity_check")
        #expect(check.first?.first?.string == "ok")
        // The store takes the same file afterwards, once.
        let (before, batchesBefore, _) = try totals(db)
        let r = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", "--store", db, file.path])
        #expect(r.status == 0, "\(r.stderr)")
        let (after, batchesAfter, installations) = try totals(db)
        #expect(batchesAfter == batchesBefore + 1)
        #expect(after.sum(.session) - before.sum(.session) == 100_000)
        #expect(installations == 100_000)
    }
}
