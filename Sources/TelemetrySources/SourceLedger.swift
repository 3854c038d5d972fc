import Telemetry
import Timekeeping

/// A body of events a source counts, named by the events, not by the way to them.
///
/// A GA4 property's events reach rollout through its BigQuery export (dataset `analytics_<property>`, in whichever
/// project it is linked to) or its realtime report: both are `analyticsProperty`. Crashlytics' crashes reach it
/// through the export table of an app (named by the app's bundle) or through the Crashlytics API for an app (named
/// by its app id).
public enum SourceEvents: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// A GA4 property's events (its number).
    case analyticsProperty(String)
    /// A GA4 export dataset whose name does not say its property (`project.dataset`).
    case analyticsExport(String)
    /// The crashes in a Crashlytics export table (`project.dataset.table`).
    case crashlyticsExport(String)
    /// The crashes of a Firebase app through the Crashlytics API, in the project the calls name.
    case crashlyticsApp(project: String, app: String)

    /// The stored form, `kind:value` (`ga4-property:123456`, `crashlytics-app:PROJECT/APP`).
    public var text: String {
        switch self {
        case .analyticsProperty(let p): "ga4-property:" + p
        case .analyticsExport(let d): "ga4-export:" + d
        case .crashlyticsExport(let t): "crashlytics-export:" + t
        case .crashlyticsApp(let project, let app): "crashlytics-app:" + project + "/" + app
        }
    }

    /// Reads `text` back (nil for anything else).
    public init?(text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let value = String(text[text.index(after: colon)...])
        guard !value.isEmpty else { return nil }
        switch text[..<colon] {
        case "ga4-property": self = .analyticsProperty(value)
        case "ga4-export": self = .analyticsExport(value)
        case "crashlytics-export": self = .crashlyticsExport(value)
        case "crashlytics-app":
            let parts = value.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return nil }
            self = .crashlyticsApp(project: String(parts[0]), app: String(parts[1]))
        default: return nil
        }
    }

    /// What a person reads: "the events of GA4 property 123456".
    public var description: String {
        switch self {
        case .analyticsProperty(let p): "the events of GA4 property \(p)"
        case .analyticsExport(let d): "the GA4 export \(d)"
        case .crashlyticsExport(let t): "the crashes in the Crashlytics export \(t)"
        case .crashlyticsApp(_, let app): "the crashes of Crashlytics app \(app)"
        }
    }

    public static func < (a: SourceEvents, b: SourceEvents) -> Bool { a.text < b.text }
}

/// Where what a source has landed is recorded: its watermark and, per minute and key, what it contributed
/// (`PullLedger`). The record is kept under the events the source is built on, not under its name, and outlives
/// the source: what it landed stays counted, so the record of it stays too. A source added again, under any name
/// and of any kind that reads the same events (a BigQuery export and the realtime report of one GA4 property),
/// continues that record where it stopped instead of counting the events again.
public struct SourceLedger: Hashable, Sendable, CustomStringConvertible {
    /// Every body of events the source counts; the first is the one the record is kept under.
    public var events: [SourceEvents]

    /// A ledger of `events` (at least one; the first names it).
    public init(events: [SourceEvents]) {
        precondition(!events.isEmpty, "a source ledger reads some events")
        self.events = events
    }

    /// The key the record is kept under: the first events' stored form, except that an app's crashes are the
    /// app's whatever project the calls name (`crashlytics-app:APP`).
    public var key: String {
        switch events[0] {
        case .crashlyticsApp(_, let app): "crashlytics-app:" + app
        default: events[0].text
        }
    }

    public var description: String { key }

    /// A BigQuery source over the GA4 export `analytics` (`project.dataset`) and, if any, the Crashlytics export
    /// table `crashlytics` (`project.dataset.table`).
    public static func bigQuery(analytics: String, crashlytics: String?) -> SourceLedger {
        let dataset = analytics.split(separator: ".", maxSplits: 1).last.map(String.init) ?? analytics
        let prefix = "analytics_"
        let digits = dataset.hasPrefix(prefix) ? String(dataset.dropFirst(prefix.count)) : ""
        // The property's number as the realtime report names it: leading zeros say nothing (`analytics_0001` would
        // be property 1's export), so a dataset spelled with them is not taken for another body of events.
        let property = String(digits.drop { $0 == "0" })
        let ga4: SourceEvents =
            !property.isEmpty && digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 })
            ? .analyticsProperty(property) : .analyticsExport(analytics)
        return SourceLedger(events: [ga4] + (crashlytics.map { [.crashlyticsExport($0)] } ?? []))
    }

    /// The realtime report of GA4 property `property` (its number, or `properties/NUMBER`).
    public static func analyticsRealtime(property: String) -> SourceLedger {
        let prefix = "properties/"
        return SourceLedger(events: [.analyticsProperty(property.hasPrefix(prefix) ? String(property.dropFirst(prefix.count)) : property)])
    }

    /// The Crashlytics API's events of app `app`, called as `projects/{project}/apps/{app}`.
    public static func crashlyticsAPI(project: String, app: String) -> SourceLedger {
        SourceLedger(events: [.crashlyticsApp(project: project, app: app)])
    }
}

extension SourceConfiguration {
    /// Where what this source lands is recorded (`SourceLedger`): the events it reads.
    public var ledger: SourceLedger {
        switch kind {
        case .bigQuery: .bigQuery(analytics: analytics, crashlytics: crashlytics)
        case .analyticsRealtime: .analyticsRealtime(property: property ?? "")
        case .crashlyticsAPI: .crashlyticsAPI(project: project, app: app ?? "")
        }
    }
}

/// A ledger as stored, for deciding whether a source may be added: its key, its watermark, and each body of events
/// it has landed counts from with the end of the last minute it landed (a minute index, exclusive).
public struct SourceLedgerRecord: Hashable, Sendable {
    public var key: String
    public var watermark: Instant?
    public var reads: [SourceEvents: Int64]

    public init(key: String, watermark: Instant?, reads: [SourceEvents: Int64]) {
        self.key = key
        self.watermark = watermark
        self.reads = reads
    }

    /// The stored form of `reads`: `events=minute` pairs, sorted, separated by spaces.
    public static func readsText(_ reads: [SourceEvents: Int64]) -> String {
        reads.sorted { $0.key < $1.key }.map { "\($0.key.text)=\($0.value)" }.joined(separator: " ")
    }

    /// Reads the stored form back; a pair it cannot read is left out.
    public static func reads(_ text: String?) -> [SourceEvents: Int64] {
        var out: [SourceEvents: Int64] = [:]
        for pair in (text ?? "").split(separator: " ") {
            guard let eq = pair.lastIndex(of: "="), let events = SourceEvents(text: String(pair[..<eq])),
                let minute = Int64(pair[pair.index(after: eq)...])
            else { continue }
            out[events] = max(out[events] ?? minute, minute)
        }
        return out
    }

    /// `reads` with the events of `ledger` landed through `throughMinute` (each keeps the later end).
    public static func reads(_ reads: [SourceEvents: Int64], adding ledger: SourceLedger, through throughMinute: Int64)
        -> [SourceEvents: Int64]
    {
        var out = reads
        for e in ledger.events { out[e] = max(out[e] ?? throughMinute, throughMinute) }
        return out
    }
}

/// Moving the rows of sources kept under their names (SQLite schema 10, PostgreSQL schema 12) to their ledgers'
/// keys: the SQLite store's migration 11 and the PostgreSQL store's step 13 apply these rules.
///
/// A name never contains `:` and a ledger's key always does, so rows already moved are never taken for a name's.
/// Two configured sources over the same events each landed what they pulled: their ledgers are merged by adding
/// the counts (what was landed), the earlier watermark kept, so that the next pull of a minute takes back what was
/// counted twice in it; minutes before that pull's window keep what was landed.
public enum SourceMigration {
    /// Each configured source's name and ledger.
    public static func ledgers(_ configurations: [SourceConfiguration]) -> [(name: String, ledger: SourceLedger)] {
        configurations.map { ($0.name, $0.ledger) }
    }

    /// The earlier of two watermarks in microseconds (the one there is when one is nil).
    public static func earlier(_ a: Int64?, _ b: Int64?) -> Int64? {
        switch (a, b) {
        case (let a?, let b?): min(a, b)
        default: a ?? b
        }
    }

    /// `reads` with the events of a source whose pulls reached `watermark` (microseconds): its last pull landed
    /// through the end of the watermark's minute.
    public static func reads(_ reads: [SourceEvents: Int64], ledger: SourceLedger, watermark: Int64?) -> [SourceEvents: Int64] {
        guard let watermark else { return reads }
        return SourceLedgerRecord.reads(reads, adding: ledger, through: BucketLevel.minute.bucket(watermark) + 1)
    }
}
