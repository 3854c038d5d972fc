import Crypto
import Telemetry
import Timekeeping

/// Where the fleet's events go, in the order they happen.
///
/// The store's sink (`StoreTelemetrySink`) lands them through the same ingest path as real data; tests collect
/// them in memory. Sinks are called from the thread that advances the simulation, one call at a time.
public protocol FleetTelemetrySink: AnyObject {
    /// One event; events arrive in time order.
    func record(_ event: TelemetryEvent) throws
    /// Simulated time has reached `now`: no event before it will come any more.
    func reached(_ now: Instant) throws
    /// Lands whatever is buffered (at the end of a run, or when the wall clock says it is time).
    func flush(at now: Instant) throws
}

/// A sink that keeps nothing (for benchmarks of the model alone).
public final class DiscardingSink: FleetTelemetrySink {
    public init() {}
    public func record(_ event: TelemetryEvent) {}
    public func reached(_ now: Instant) {}
    public func flush(at now: Instant) {}
}

/// The SHA-256 of an event stream in a canonical encoding: two runs with the same digest produced the same
/// events in the same order.
///
/// Each event is one line of UTF-8: `time|installation|kind|cohort|provider|os|app`, the time in microseconds
/// since the epoch and the kind as `success`, `failure:CLASS`, `crash:fatal`, `crash:nonfatal`, `session` or
/// `fetch:VERSION`.
public struct EventDigest: Sendable {
    private var hasher = SHA256.Hasher()
    public private(set) var count = 0

    public init() {}

    public mutating func add(_ e: TelemetryEvent) {
        hasher.update(EventDigest.line(e))
        count += 1
    }

    /// The digest so far, in hex.
    public var hex: String {
        var copy = hasher
        return Hex.encode(copy.finish())
    }

    /// The canonical line of one event, newline included.
    public static func line(_ e: TelemetryEvent) -> String {
        "\(e.time.microseconds)|\(e.installationID)|\(kindText(e.kind))|\(e.cohort.rawValue)|\(e.provider)|\(e.osVersion)|\(e.appVersion)\n"
    }

    public static func kindText(_ kind: TelemetryEventKind) -> String {
        switch kind {
        case .attestationSuccess: "success"
        case .attestationFailure(let c): "failure:\(c)"
        case .crash(let fatal): fatal ? "crash:fatal" : "crash:nonfatal"
        case .sessionStart: "session"
        case .configFetch(let v): "fetch:\(v)"
        }
    }
}
