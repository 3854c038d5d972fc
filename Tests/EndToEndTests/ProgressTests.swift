import CommandLineKit
import Foundation
import TestSupport
import Testing

/// Progress of long work on stderr: one line redrawn in place when stderr is a terminal (a pty here), at most
/// about ten times a second, and nothing at all in a pipe or with `--quiet`.
@Suite("progress on stderr", .serialized)
struct ProgressTests {
    @Test func theLineSaysDoneOfTotalTheRateAndTheTimeLeft() {
        #expect(
            ProgressReporter.line(
                label: "ingest", unit: .bytes, done: 2_100_000, total: 18_200_000, elapsed: 1, width: 100)
                == "ingest  2.1 MB of 18.2 MB (12%)  2.1 MB/s  ~8s left")
        #expect(
            ProgressReporter.line(
                label: "simulate", unit: .simulatedSeconds, done: 7200, total: 86_400, elapsed: 12, width: 100)
                == "simulate  2h 00m of 1d 0h (8%)  600x  ~2m 12s left")
        #expect(
            ProgressReporter.line(label: "plan", unit: .count("steps"), done: 2, total: 5, elapsed: 0, width: 100)
                == "plan  2 of 5 steps (40%)")
        // A pipe into ingest: no total, no time left.
        #expect(
            ProgressReporter.line(label: "ingest", unit: .bytes, done: 1_234_567, total: nil, elapsed: 2, width: 100)
                == "ingest  1.2 MB  617.3 kB/s")
        #expect(
            ProgressReporter.line(label: "ingest", unit: .bytes, done: 1, total: 2, elapsed: 1, width: 20).count == 20)
    }

    @Test func redrawsAtMostTenTimesASecondAndNeverWhenDisabled() {
        final class Clock: @unchecked Sendable { var t = 100.0 }
        let clock = Clock()
        var written: [String] = []
        let bar = ProgressReporter(
            label: "x", unit: .count("events"), total: 1000, enabled: true, clock: { clock.t },
            write: { written.append($0) })
        // 2 s of updates every 10 ms: the first quarter second draws nothing, then about ten redraws a second.
        for i in 0..<200 {
            clock.t += 0.01
            bar.update(done: Int64(i * 5))
        }
        let draws = written.filter { $0.hasPrefix("\r") && $0.count > 4 }
        #expect(draws.count >= 15 && draws.count <= 19, "\(draws.count)")
        #expect(draws.allSatisfy { $0.hasSuffix("\u{1B}[K") })
        bar.note("a line of its own")
        #expect(written.suffix(2) == ["\r\u{1B}[K", "a line of its own\n"])
        bar.update(done: 1000)
        bar.finish()
        #expect(written.last == "\r\u{1B}[K")

        written = []
        let off = ProgressReporter(
            label: "x", unit: .bytes, total: 10, enabled: false, clock: { clock.t }, write: { written.append($0) })
        for _ in 0..<50 {
            clock.t += 0.1
            off.update(done: 5)
        }
        off.finish()
        #expect(written.isEmpty)
        // Without a terminal a note is still written, as the plain line it always was.
        off.note("log line")
        #expect(written == ["log line\n"])
    }

    static func onTerminal(_ arguments: [String]) throws -> (status: Int32, terminal: String, stdout: String) {
        try TestSupport.runWithStderrOnTerminal(arguments)
    }

    @Test func ingestOfABigFileShowsProgressOnATerminalOnly() throws {
        let dir = try TestSupport.temporaryDirectory("progress-ingest")
        defer { try? FileManager.default.removeItem(at: dir) }
        let binary = try TestSupport.rolloutBinary()
        let store = dir.appendingPathComponent("r.db").path
        #expect(try TestSupport.run(binary, ["init", "--store", store, "--operator", "a@example.com"]).status == 0)
        // About 18 MB of native events, an hour old.
        let file = dir.appendingPathComponent("events.ndjson")
        let t0 = Int64(Date().timeIntervalSince1970 * 1_000_000) - 3_600_000_000
        var text = ""
        text.reserveCapacity(19_000_000)
        for i in 0..<200_000 {
            text +=
                #"{"t":\#(t0 + Int64(i) * 1000),"i":"e\#(i % 5000)","k":"session","c":"enabled","p":"appAttest","os":"17.4"}"#
            text += "\n"
        }
        try text.write(to: file, atomically: true, encoding: .utf8)
        let args = [binary, "ingest", file.path, "--store", store, "--operator", "a@example.com"]

        let shown = try Self.onTerminal(args)
        #expect(shown.status == 0)
        #expect(shown.stdout.hasPrefix("ingested 200000 events"), "\(shown.stdout)")
        let draws = shown.terminal.components(separatedBy: "\r").filter { $0.hasPrefix("ingest  ") }
        #expect(!draws.isEmpty, "\(shown.terminal.debugDescription)")
        #expect(draws.allSatisfy { $0.contains(" of 18.2 MB (") && $0.contains("MB/s") }, "\(draws)")
        #expect(draws.contains { $0.contains(" left") }, "\(draws)")
        // Erased at the end: the summary starts on a clean line.
        #expect(shown.terminal.hasSuffix("\r\u{1B}[K"), "\(shown.terminal.debugDescription)")

        let quiet = try Self.onTerminal(args + ["--quiet"])
        #expect(quiet.status == 0 && quiet.terminal.isEmpty, "\(quiet.terminal.debugDescription)")
        let piped = try TestSupport.run(binary, Array(args.dropFirst()))
        #expect(piped.status == 0 && piped.stderr.isEmpty, "\(piped.stderr.debugDescription)")
    }

    @Test func simulateShowsSimulatedTimeOnATerminalAndItsPlainLogInAPipe() throws {
        let dir = try TestSupport.temporaryDirectory("progress-simulate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let binary = try TestSupport.rolloutBinary()
        func args(_ name: String) -> [String] {
            [
                binary, "simulate", "--scenario", "steady", "--devices", "3000", "--speed", "max", "--duration", "2h",
                "--store", dir.appendingPathComponent(name).path,
            ]
        }
        let shown = try Self.onTerminal(args("a.db"))
        #expect(shown.status == 0)
        let draws = shown.terminal.components(separatedBy: "\r").filter { $0.hasPrefix("simulate  ") }
        #expect(!draws.isEmpty, "\(shown.terminal.debugDescription)")
        #expect(draws.allSatisfy { $0.contains(" of 2h 00m (") }, "\(draws)")
        #expect(shown.terminal.contains("simulating 3000 devices"))
        let piped = try TestSupport.run(binary, Array(args("b.db").dropFirst()))
        #expect(piped.status == 0 && piped.stderr.contains("simulating 3000 devices"))
        #expect(!piped.stderr.contains("\r") && !piped.stderr.contains("\u{1B}"), "\(piped.stderr.debugDescription)")
        let quiet = try Self.onTerminal(args("c.db") + ["--quiet"])
        #expect(quiet.status == 0 && quiet.terminal.isEmpty, "\(quiet.terminal.debugDescription)")
    }
}
