import Telemetry
import Timekeeping

/// Lands the fleet's events in a store through the ingest path of real data: a `TelemetryBatch` committed with
/// the store's `TelemetryCounters.commit` (the core's port: any store), one transaction per simulated minute.
///
/// A batch is committed when simulated time enters a new minute, and on `flush` (the runner flushes every
/// second of wall time, so a console watching a slow simulation sees the minute in progress). Give the sink a
/// store of its own (a connection the console does not use) so that reads never wait for commits.
public final class StoreTelemetrySink: FleetTelemetrySink {
    /// The batch log's source name.
    public let source: String
    private let tables: any TelemetryCounters
    private let batch = TelemetryBatch()
    private var minute: Int64?
    public private(set) var committedBatches = 0
    public private(set) var committedEvents = 0
    /// Called after each landed batch with the simulated time (the commands run auto-kill here).
    public var afterCommit: ((Instant) throws -> Void)?

    public init(counters: any TelemetryCounters, source: String = "simulator") {
        self.source = source
        tables = counters
    }

    /// The sink on `store`'s telemetry counters.
    public convenience init(store: any MonitoredStore, source: String = "simulator") throws {
        self.init(counters: try store.telemetryCounters(), source: source)
    }

    public func record(_ event: TelemetryEvent) throws {
        try enter(event.time)
        batch.record(event)
    }

    public func reached(_ now: Instant) throws { try enter(now) }

    public func flush(at now: Instant) throws {
        guard !batch.isEmpty else { return }
        let events = batch.eventCount
        try tables.commit(batch, source: source, at: now)
        committedBatches += 1
        committedEvents += events
        batch.removeAll()
        try afterCommit?(now)
    }

    private func enter(_ time: Instant) throws {
        let m = BucketLevel.minute.bucket(time.microseconds)
        if let minute, m > minute { try flush(at: time) }
        minute = max(minute ?? m, m)
    }
}
