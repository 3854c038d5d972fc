#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Platform

/// Progress of long work (`ingest` of a big file, `simulate`, `plan run`) as one line on standard error, redrawn
/// in place: what is done of how much, the rate, and the time left.
///
/// Only for a person watching: it draws only when standard error is a terminal and `--quiet` was not given, so
/// pipes, logs and scripts see nothing of it. Work done within `showAfter` (a quarter second) never draws, so
/// a quick command does not flash a line. Redraws are throttled to `interval` (10 a second by default) however
/// often `update` is called; `note` prints a whole line above the progress line; `finish` erases it. The clock is
/// injected (seconds, monotonic) and the line's text is a pure function (`line`), so both are tested without a
/// terminal.
public final class ProgressReporter {
    /// What is counted.
    public enum Unit: Sendable {
        /// Things: `12,345 events`.
        case count(String)
        /// Bytes of input: `12.3 MB`.
        case bytes
        /// Seconds of simulated time: `2h 10m`; the rate is then a speed (`600x`).
        case simulatedSeconds
    }

    public let label: String
    public let unit: Unit
    public var total: Int64?
    /// False: every call does nothing (not a terminal, or `--quiet`).
    public let isEnabled: Bool
    private let interval: Double
    private let showAfter: Double
    private let clock: () -> Double
    private let write: (String) -> Void
    private let width: Int
    private let started: Double
    private var lastDraw: Double?
    private var done: Int64 = 0
    private var shown = false

    public init(
        label: String, unit: Unit, total: Int64? = nil, enabled: Bool, width: Int = 80, interval: Double = 0.1,
        showAfter: Double = 0.25,
        clock: @escaping () -> Double = ProgressReporter.monotonicSeconds,
        write: @escaping (String) -> Void = ProgressReporter.writeStandardError
    ) {
        self.label = label
        self.unit = unit
        self.total = total
        self.isEnabled = enabled
        self.width = max(20, width)
        self.interval = interval
        self.showAfter = showAfter
        self.clock = clock
        self.write = write
        self.started = clock()
    }

    /// A reporter on standard error: drawing only when it is a terminal and the command was not told `--quiet`;
    /// as wide as the terminal.
    public static func standardError(label: String, unit: Unit, total: Int64? = nil, quiet: Bool) -> ProgressReporter {
        let terminal = isatty(2) == 1
        return ProgressReporter(
            label: label, unit: unit, total: total, enabled: terminal && !quiet, width: terminalWidth(2) ?? 80)
    }

    /// Records how much is done; redraws when `interval` has passed since the last redraw.
    public func update(done: Int64) {
        self.done = done
        guard isEnabled else { return }
        let now = clock()
        if now - started < showAfter { return }
        if let last = lastDraw, now - last < interval { return }
        lastDraw = now
        draw(now)
    }

    /// A line of its own above the progress line (the progress line is drawn again at the next update). Without a
    /// terminal the line is written as it is: the caller's log stays the same in pipes.
    public func note(_ text: String) {
        if isEnabled && shown {
            write("\r\u{1B}[K")
            shown = false
        }
        write(text + "\n")
        lastDraw = nil
    }

    /// Erases the progress line (the command then prints its summary on a clean line).
    public func finish() {
        guard isEnabled, shown else { return }
        write("\r\u{1B}[K")
        shown = false
    }

    private func draw(_ now: Double) {
        let text = Self.line(
            label: label, unit: unit, done: done, total: total, elapsed: now - started, width: width - 1)
        write("\r" + text + "\u{1B}[K")
        shown = true
    }

    /// The progress line: `label  done of total (share)  rate  ~time left`, cut to `width` columns.
    public static func line(label: String, unit: Unit, done: Int64, total: Int64?, elapsed: Double, width: Int)
        -> String
    {
        var parts = [label]
        let amount = quantity(done, unit)
        if let total, total > 0 {
            let share = min(100, Double(done) / Double(total) * 100)
            let of: String
            if case .count(let noun) = unit {
                of = "\(grouped(done)) of \(grouped(total)) \(noun)"
            } else {
                of = "\(amount) of \(quantity(total, unit))"
            }
            parts.append("\(of) (\(fixed(share, 0))%)")
        } else {
            parts.append(amount)
        }
        let rate = elapsed > 0.05 ? Double(done) / elapsed : 0
        if rate > 0 {
            switch unit {
            case .count(let noun): parts.append("\(grouped(Int64(rate.rounded()))) \(noun)/s")
            case .bytes: parts.append("\(bytes(Int64(rate.rounded())))/s")
            case .simulatedSeconds: parts.append("\(grouped(Int64(rate.rounded())))x")
            }
            if let total, total > done {
                parts.append("~" + duration(Double(total - done) / rate) + " left")
            }
        }
        let text = parts.joined(separator: "  ")
        return text.count <= width ? text : String(text.prefix(width))
    }

    static func quantity(_ n: Int64, _ unit: Unit) -> String {
        switch unit {
        case .count(let noun): "\(grouped(n)) \(noun)"
        case .bytes: bytes(n)
        case .simulatedSeconds: duration(Double(n))
        }
    }

    /// `1,234,567`.
    static func grouped(_ n: Int64) -> String {
        let digits = String(n.magnitude)
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }

    /// `812 B`, `12.3 kB`, `45.0 MB`, `1.2 GB` (powers of 1000, as `ls -h --si`).
    static func bytes(_ n: Int64) -> String {
        if n < 1000 { return "\(n) B" }
        var v = Double(n)
        for suffix in ["kB", "MB", "GB", "TB"] {
            v /= 1000
            if v < 1000 || suffix == "TB" { return fixed(v, 1) + " " + suffix }
        }
        return "\(n) B"
    }

    /// `45s`, `3m 05s`, `2h 10m`, `3d 4h`.
    static func duration(_ seconds: Double) -> String {
        let s = Int64(max(0, seconds).rounded())
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m " + two(s % 60) + "s" }
        if s < 86_400 { return "\(s / 3600)h " + two(s / 60 % 60) + "m" }
        return "\(s / 86_400)d \(s / 3600 % 24)h"
    }

    private static func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }

    private static func fixed(_ v: Double, _ decimals: Int) -> String {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let r = Int64((v * scale).rounded())
        guard decimals > 0 else { return "\(r)" }
        let whole = r / Int64(scale)
        let fraction = String(r % Int64(scale))
        return "\(whole)." + String(repeating: "0", count: decimals - fraction.count) + fraction
    }

    /// Seconds on the monotonic clock (for rates and throttling only; never shown as a time).
    public static func monotonicSeconds() -> Double { Deadline.now.seconds }

    public static func writeStandardError(_ text: String) { writeAll(2, text) }

    /// The width of the terminal on `fd`, if it is one.
    static func terminalWidth(_ fd: Int32) -> Int? {
        var size = winsize()
        let ok = withUnsafeMutablePointer(to: &size) { ioctl(fd, UInt(TIOCGWINSZ), $0) } == 0
        guard ok, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}

/// Writes all of `text` to `fd` (retrying short writes); gives up on an error, as progress is never worth failing for.
private func writeAll(_ fd: Int32, _ text: String) {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        offset += n
    }
}
