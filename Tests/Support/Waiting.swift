import Foundation

extension TestSupport {
    /// Waits at most `seconds` for `condition`, looking every 20 ms; whether it held (a bound, never a fixed sleep).
    public static func eventually(within seconds: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(20_000)
        }
        return try condition()
    }

    /// Whether process `pid` still runs (not gone, not a zombie waiting for its parent).
    public static func isRunning(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        return stat[stat.index(close, offsetBy: 2)] != "Z"
    }
}
