import Telemetry
import Timekeeping

/// Where a source's pulls are kept: its watermark and the ledger of what each (minute, cohort, kind, provider,
/// detail) contributed, so that a pull commits only the difference (`PullLedger`), under the ledger's key
/// (`SourceLedger`: the events the source reads, not its name; the record outlives the source).
///
/// Rules every implementation keeps:
/// - `commitPull` reads the ledger of the pull's `ledger` for the pull's minutes, lands the batch of changes
///   through the store's telemetry commit (the one `rollout ingest` uses), writes the ledger, the watermark and the
///   events the ledger has read up to the pull's end, all in one transaction: whole or not at all. Committing the
///   same pull twice adds nothing the second time, whichever source (name) the pull is of.
/// - `recordFailure` notes an unsuccessful pull without touching counters, ledger or watermark.
/// - Removing a source's configuration leaves its ledger as it is.
/// - A read-only store refuses both.
public protocol SourceStateStore: AnyObject {
    /// The state of the ledger `ledger` (a `SourceLedger.key`), nil before its first pull.
    func sourceState(_ ledger: String) throws -> SourceState?
    /// Lands a pull; returns the changes it committed (empty: the pull added nothing).
    @discardableResult
    func commitPull(_ pull: SourcePull, at committedAt: Instant) throws -> [AggregateKey: Int64]
    /// Notes a failed pull in the state of the ledger `ledger` (a `SourceLedger.key`).
    func recordFailure(ledger: String, message: String, at: Instant) throws
    /// Every ledger with what it has read (`SourceConfiguration.overlap` judges a source to add by them).
    func sourceLedgers() throws -> [SourceLedgerRecord]
}

/// What one pull of a source brought: the counts for every key of its minutes.
public struct SourcePull: Sendable {
    /// The source's name (the batch it lands is `source:NAME`).
    public var source: String
    /// The events it read, which name the ledger it lands in.
    public var ledger: SourceLedger
    public var plan: PullPlan
    public var counts: [AggregateKey: Int64]
    /// What the pull cost: rows and bytes received, the source's own figures (BigQuery's bytes processed, GA4's
    /// tokens left), shown by `source test` and `follow`.
    public var rows: Int
    public var bytes: Int
    public var note: String

    public init(
        source: String, ledger: SourceLedger, plan: PullPlan, counts: [AggregateKey: Int64], rows: Int, bytes: Int,
        note: String = ""
    ) {
        self.source = source
        self.ledger = ledger
        self.plan = plan
        self.counts = counts
        self.rows = rows
        self.bytes = bytes
        self.note = note
    }
}

/// A source's stored state.
public struct SourceState: Hashable, Sendable {
    public var watermark: Instant?
    public var lastSuccess: Instant?
    public var lastAttempt: Instant?
    /// The last failure's message, cleared by a successful pull.
    public var lastError: String?
    /// The end of the newest minute the source has landed data for (its ledger), nil before any: how fresh what
    /// the source gives is (the GA4 realtime report's minutes, Crashlytics' processing delay, BigQuery's export lag).
    public var newestData: Instant?

    public init(watermark: Instant?, lastSuccess: Instant?, lastAttempt: Instant?, lastError: String?, newestData: Instant? = nil) {
        self.watermark = watermark
        self.lastSuccess = lastSuccess
        self.lastAttempt = lastAttempt
        self.lastError = lastError
        self.newestData = newestData
    }

    /// The state of a source never pulled.
    public static let never = SourceState(watermark: nil, lastSuccess: nil, lastAttempt: nil, lastError: nil)

    /// How old the newest data is at `now`, nil before any.
    public func dataAge(now: Instant) -> Instant.Duration? {
        newestData.map { Instant.Duration(microseconds: max(0, (now - $0).microseconds)) }
    }

    /// The end of the newest minute among `minutes` (ledger minute indexes), nil when none.
    public static func newestData(minute: Int64?) -> Instant? {
        minute.map { BucketLevel.minute.start($0 + 1) }
    }

    /// The silences of `configurations` with the states of their ledgers (`state` of a `SourceLedger.key`; nil:
    /// never pulled) at `now`: the one rule every store's `MonitoredStore.sourceSilences` applies.
    public static func silences(
        _ configurations: [SourceConfiguration], now: Instant, state: (String) throws -> SourceState?
    ) rethrows -> [String] {
        try configurations.compactMap { c in
            (try state(c.ledger.key) ?? .never).silence(source: c.name, now: now, silentAfter: c.silentAfter)
        }
    }

    /// "source X silent since …" when the source has not answered for `silentAfter` (or never has), else nil:
    /// a silent or failing source is a reason to HOLD, never OK.
    public func silence(source: String, now: Instant, silentAfter: Instant.Duration) -> String? {
        guard let ok = lastSuccess else {
            return "source \(source) has not answered yet" + (lastError.map { ": \($0)" } ?? "")
        }
        guard now - ok > silentAfter else { return nil }
        return "source \(source) silent since \(ok.iso8601)" + (lastError.map { ": \($0)" } ?? "")
    }
}
