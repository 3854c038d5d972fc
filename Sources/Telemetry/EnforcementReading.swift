import Timekeeping

/// App Check enforcement of the project the flag's template lives in, as the assessment judges it: each service's
/// mode as last read, and whether the latest read failed. Read by the app layer (a short timeout, a cache); the
/// assessment only judges it.
public struct EnforcementReading: Hashable, Sendable {
    /// Each configured service's mode (`OFF`, `UNENFORCED`, `ENFORCED`) as last read, by service id; a service not
    /// listed is OFF. Empty when never read.
    public var modes: [String: String]
    /// The wall-clock instant `modes` were read at; nil: never read.
    public var readAt: Instant?
    /// Why the latest read failed (then `modes` are the last known, if any); nil: `modes` are the latest read.
    public var failure: String?

    public init(modes: [String: String], readAt: Instant?, failure: String? = nil) {
        self.modes = modes
        self.readAt = readAt
        self.failure = failure
    }

    /// The services App Check enforces (as last read), sorted.
    public var enforced: [String] { modes.filter { $0.value == "ENFORCED" }.map(\.key).sorted() }

    /// Whether the latest read succeeded.
    public var isKnown: Bool { failure == nil && readAt != nil }

    /// The state in words, for `status`: "ENFORCED: a, b; UNENFORCED: c; every other service OFF (read at T)", or
    /// "unknown: could not be read (why)" with the last known state when there is one.
    public var summary: String {
        func modesText() -> String {
            let byMode = Dictionary(grouping: modes.filter { $0.value != "OFF" }, by: \.value)
            let parts = ["ENFORCED", "UNENFORCED"].compactMap { mode in
                byMode[mode].map { "\(mode): \($0.map(\.key).sorted().joined(separator: ", "))" }
            }
            return parts.isEmpty ? "every service OFF" : parts.joined(separator: "; ") + "; every other service OFF"
        }
        if let failure {
            let last = readAt.map { "; last read at \($0.iso8601): \(modesText())" } ?? "; never read"
            return "unknown: could not be read (\(failure))\(last)"
        }
        guard let readAt else { return "unknown: not read" }
        return "\(modesText()) (read at \(readAt.iso8601))"
    }
}
