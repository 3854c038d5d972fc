import Telemetry
import Timekeeping

extension SourceEvents {
    /// The project of a Crashlytics body of events (the table's, or the one the API calls name).
    var crashlyticsProject: String? {
        switch self {
        case .crashlyticsExport(let t): t.split(separator: ".").first.map(String.init)
        case .crashlyticsApp(let project, _): project
        default: nil
        }
    }

    /// Whether counting both would count some events twice: the same events, or an export table and an API app
    /// of the same project (which app a table holds is not known from its name).
    public func overlaps(_ other: SourceEvents) -> Bool {
        switch (self, other) {
        case (.crashlyticsApp(_, let a), .crashlyticsApp(_, let b)): a == b
        case (.crashlyticsExport, .crashlyticsApp), (.crashlyticsApp, .crashlyticsExport):
            crashlyticsProject == other.crashlyticsProject
        default: self == other
        }
    }
}

/// Why a source may not be added: it would count events that are counted already. Nothing is stored.
public enum SourceOverlap: Error, Hashable, Sendable, CustomStringConvertible {
    /// The configured source `other` counts `theirs`, which are (or report the same events as) `ours`.
    case configured(source: String, other: String, ours: SourceEvents, theirs: SourceEvents)
    /// The ledger `ledger` (of a source removed, or redefined to read other events) landed `theirs` up to
    /// `through`, and the source would count `ours` from before then.
    case landed(source: String, ledger: String, ours: SourceEvents, theirs: SourceEvents, through: Instant)

    public var description: String {
        switch self {
        case .configured(let source, let other, let ours, let theirs):
            "source \(source) would count \(ours), which source \(other) already counts"
                + (ours == theirs ? "" : " (as \(theirs))")
                + ": nothing was stored (one source per body of events; 'rollout source remove \(other)' first, "
                + "and what \(other) landed stays counted once)"
        case .landed(let source, let ledger, let ours, let theirs, let through):
            "source \(source) would count \(ours) again from before \(through.iso8601): the ledger \(ledger) "
                + "landed \(theirs) up to then"
                + ": nothing was stored (add it with --since \(through.iso8601) or later)"
        }
    }
}

extension SourceConfiguration {
    /// Why adding this source (or redefining the source of its name to this) would count events twice, nil when
    /// it would not.
    ///
    /// Refused: events that another configured source reads (`SourceEvents.overlaps`), under any name and of any
    /// kind; and events that a ledger other than this source's own landed, when this source's first pull would
    /// start before the end of what that ledger landed (its own ledger's watermark less the overlap, or its
    /// origin). The realtime report starts where its 30 minutes do, whatever its origin; its events are a GA4
    /// property's, which only its own ledger records.
    public func overlap(configured: [SourceConfiguration], ledgers: [SourceLedgerRecord]) -> SourceOverlap? {
        let mine = ledger
        for other in configured where other.name != name {
            for theirs in other.ledger.events {
                if let ours = mine.events.first(where: { $0.overlaps(theirs) }) {
                    return .configured(source: name, other: other.name, ours: ours, theirs: theirs)
                }
            }
        }
        let watermark = ledgers.first { $0.key == mine.key }?.watermark
        let start = watermark.map { max(origin, $0 - overlap) } ?? origin
        let startMinute = BucketLevel.minute.bucket(start.microseconds)
        for record in ledgers.sorted(by: { $0.key < $1.key }) where record.key != mine.key {
            for (theirs, through) in record.reads.sorted(by: { $0.key < $1.key }) where startMinute < through {
                if let ours = mine.events.first(where: { $0.overlaps(theirs) }) {
                    return .landed(
                        source: name, ledger: record.key, ours: ours, theirs: theirs,
                        through: BucketLevel.minute.start(through))
                }
            }
        }
        return nil
    }
}
