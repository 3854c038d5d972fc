import Foundation

/// One benchmark suite; each area of the product contributes its suites from its own file.
struct BenchSuite: Sendable {
    var name: String
    var title: String
    var run: @Sendable () throws -> Void
}

enum BenchSuites {
    static var all: [BenchSuite] {
        RemoteConfigBench.suites + StoreBench.suites + TelemetryBench.suites + AppCheckBench.suites
            + SimulatorBench.suites + ConsoleBench.suites + ConsoleLatencyBench.suites + WholeProcessBench.suites + ServeBench.suites + ServeEndpointsBench.suites
            + ServePostgresBench.suites
            + PostgresBench.suites + DataPathBench.suites + SourceBench.suites + SourceCalibrationBench.suites
            + FirstMinuteBench.suites + FirebasePollBench.suites
    }
}

/// Monotonic time for measurements.
enum Stopwatch {
    static func nanoseconds() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// CPU seconds the calling thread has run.
    static func threadCPUSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// Runs `body` once and returns the elapsed seconds.
    static func time(_ body: () throws -> Void) rethrows -> Double {
        let start = nanoseconds()
        try body()
        return Double(nanoseconds() - start) / 1e9
    }
}

/// A figure measured as the median of several samples, each repeating the work until it lasts long enough to be
/// stable on a loaded machine; figures are seconds per call.
struct Timing {
    var median: Double
    var fastest: Double
    var slowest: Double
    var samples: Int
    var repeats: Int

    var spread: String {
        String(
            format: "spread %.3g–%.3g ms over %d samples of %d run%@", fastest * 1000, slowest * 1000, samples, repeats,
            repeats == 1 ? "" : "s")
    }

    init(perCall: [Double], repeats: Int) {
        let sorted = perCall.sorted()
        median = sorted[sorted.count / 2]
        fastest = sorted.first!
        slowest = sorted.last!
        samples = sorted.count
        self.repeats = repeats
    }

    /// What a sample is timed with.
    enum Clock {
        /// Wall time: what a user waits (whole processes, I/O).
        case wall
        /// The calling thread's CPU time: in-process computation compared with `openssl speed`, which counts its
        /// own user CPU time, so that other processes on the machine slow neither side.
        case threadCPU

        func seconds(_ body: () throws -> Void) rethrows -> Double {
            switch self {
            case .wall: return try Stopwatch.time(body)
            case .threadCPU:
                let start = Stopwatch.threadCPUSeconds()
                try body()
                return Stopwatch.threadCPUSeconds() - start
            }
        }
    }

    /// The median of `samples` samples of `body`, each calling it back to back until the sample lasts `minimum`
    /// seconds on `clock` (calibrated on one call after a warm-up).
    static func measure(samples: Int = 5, minimum: Double = 1, clock: Clock = .wall, _ body: () throws -> Void)
        throws -> Timing
    {
        try withoutActuallyEscaping(body) { body in
            try interleaved(rounds: samples, minimum: minimum, clock: clock, [body])[0]
        }
    }

    /// Calls per second at the median.
    var rate: Double { 1 / median }

    /// Calls per second in the fastest sample: on a shared host, where other tenants only ever slow a sample down
    /// (by whole seconds at a time), the estimate of what the code itself costs.
    var bestRate: Double { 1 / fastest }

    /// `measure` for several bodies at once, in rounds: each round runs `before(i)` (a peer's run, or nothing) and
    /// then takes one sample of body `i`, for every body in turn, so that a machine whose speed drifts during the
    /// suite moves every figure and the peer run beside it alike instead of whichever happened to be measured in
    /// the slow minute.
    static func interleaved(
        rounds: Int = 5, minimum: Double = 1, clock: Clock = .wall, _ bodies: [() throws -> Void],
        before: (Int) throws -> Void = { _ in }
    ) throws -> [Timing] {
        var repeats: [Int] = []
        for body in bodies {
            try body()
            let first = try clock.seconds(body)
            repeats.append(max(1, Int((minimum / max(first, 1e-6)).rounded(.up))))
        }
        var perCall = [[Double]](repeating: [], count: bodies.count)
        for _ in 0..<rounds {
            for (i, body) in bodies.enumerated() {
                try before(i)
                let seconds = try clock.seconds { for _ in 0..<repeats[i] { try body() } }
                perCall[i].append(seconds / Double(repeats[i]))
            }
        }
        return bodies.indices.map { Timing(perCall: perCall[$0], repeats: repeats[$0]) }
    }
}

/// Prints a measured figure next to its reference and the ratio, and whether the target holds.
///
/// `higherIsBetter` decides the direction of the target check; the line always shows both numbers as measured.
func report(
    _ label: String, value: Double, unit: String, against reference: (label: String, value: Double)? = nil,
    target: (ratio: Double, higherIsBetter: Bool)? = nil
) {
    var line = "  \(label): \(formatFigure(value)) \(unit)"
    if let reference {
        let ratio = value / reference.value
        line += "  | \(reference.label): \(formatFigure(reference.value)) \(unit)  | ratio \(String(format: "%.2f", ratio))x"
        if let target {
            let ok = target.higherIsBetter ? ratio >= target.ratio : ratio <= target.ratio
            line += "  (target \(target.higherIsBetter ? ">=" : "<=") \(target.ratio)x: \(ok ? "met" : "NOT MET"))"
        }
    }
    print(line)
}
func report(_ label: String, value: Double, unit: String, limit: Double, higherIsBetter: Bool) {
    let ok = higherIsBetter ? value >= limit : value <= limit
    print("  \(label): \(formatFigure(value)) \(unit)  | limit \(higherIsBetter ? ">=" : "<=") \(formatFigure(limit)) \(unit)  (\(ok ? "met" : "NOT MET"))")
}

func formatFigure(_ v: Double) -> String {
    if v == 0 { return "0" }
    let a = abs(v)
    if a >= 1e6 { return String(format: "%.3g M", v / 1e6).replacingOccurrences(of: " M", with: "M") }
    if a >= 1000 { return String(format: "%.0f", v) }
    if a >= 10 { return String(format: "%.1f", v) }
    if a >= 0.01 { return String(format: "%.3f", v) }
    return String(format: "%.3g", v)
}

/// Peak resident set size of this process in bytes (ru_maxrss is in KiB on Linux).
func peakRSSBytes() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return usage.ru_maxrss * 1024
}

/// The virtualenv python the peers live in.
func peerPython() throws -> String {
    let path = ProcessInfo.processInfo.environment["ROLLOUT_PYTHON"] ?? ".venv/bin/python"
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw BenchError("peer python missing at \(path): run scripts/pyenv.sh (make bench does)")
    }
    return path
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
