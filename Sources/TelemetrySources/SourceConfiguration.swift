import JSON
import Timekeeping

/// A telemetry source as configured in the store (`rollout source add`): where it reads, with which credentials,
/// from when, and how often.
///
/// Three kinds: BigQuery over the exports (`analytics`, `crashlytics`), the GA4 Data API's realtime report
/// (`property`), and the Crashlytics API's events (`app`).
public struct SourceConfiguration: Hashable, Sendable {
    public enum Kind: String, Sendable, Hashable {
        case bigQuery = "bigquery"
        case analyticsRealtime = "ga4-realtime"
        case crashlyticsAPI = "crashlytics-api"

        /// What the age of a source's newest data is, in its own terms: the realtime report's minutes, the
        /// delay before Crashlytics has processed a crash, the lag of the BigQuery export.
        public var dataAgeName: String {
            switch self {
            case .bigQuery: "export lag"
            case .analyticsRealtime: "realtime data age"
            case .crashlyticsAPI: "processing delay"
            }
        }

        /// "export lag 12 min" (minutes, seconds under two minutes), or "no data yet".
        public func dataAgeText(_ age: Instant.Duration?) -> String {
            guard let age else { return "no data yet" }
            let s = age.microseconds / 1_000_000
            return dataAgeName + " " + (s < 120 ? "\(s) s" : "\(s / 60) min")
        }
    }

    /// How the source gets its access tokens, as for the Firebase store.
    public enum Credentials: Hashable, Sendable {
        /// `GOOGLE_APPLICATION_CREDENTIALS` of whoever pulls.
        case applicationDefault
        case serviceAccountFile(String)
        case accessTokenCommand(String)
    }

    public var name: String
    public var kind: Kind
    /// The project that runs the queries (BigQuery), or whose quota the reports count against (realtime).
    public var project: String
    /// The GA4 property of a realtime source (its number).
    public var property: String?
    /// The Firebase app id of a Crashlytics API source (`1:…:ios:…`).
    public var app: String?
    /// `project.dataset` of the GA4 export.
    public var analytics: String
    /// `project.dataset.table` of the Crashlytics streaming export, if any.
    public var crashlytics: String?
    public var location: String?
    public var credentials: Credentials
    /// Where first events and first crashes are counted from (usually before the rollout started).
    public var origin: Instant
    /// How far back each pull goes again for late data.
    public var overlap: Instant.Duration
    /// How often `follow` (and the loops that pull on a schedule) pulls.
    public var every: Instant.Duration
    /// A source with no successful pull for this long makes the verdict HOLD.
    public var silentAfter: Instant.Duration

    public init(
        name: String, kind: Kind = .bigQuery, project: String, analytics: String, crashlytics: String? = nil,
        location: String? = nil, property: String? = nil, app: String? = nil, credentials: Credentials = .applicationDefault, origin: Instant,
        overlap: Instant.Duration = .minutes(10), every: Instant.Duration = .seconds(Int64(60)),
        silentAfter: Instant.Duration = .minutes(10)
    ) throws(SourceConfigurationError) {
        guard !name.isEmpty, name.utf8.count <= 40,
            name.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 95 })
        else {
            throw SourceConfigurationError("a source's name is 1 to 40 of a-z, 0-9, - and _, not '\(name.prefix(40))'")
        }
        guard !project.isEmpty, project.utf8.allSatisfy(Self.identifier) else {
            throw SourceConfigurationError("'\(project.prefix(60))' is not a Google Cloud project id")
        }
        if kind == .analyticsRealtime {
            guard let property, !property.isEmpty, property.utf8.count <= 20, property.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
                throw SourceConfigurationError("a GA4 realtime source needs --ga4-property, the property's number")
            }
            // One spelling per property, as its ledger and the overlap check name it (`properties/01` is property 1).
            guard property.first != "0" else {
                throw SourceConfigurationError("--ga4-property takes the property's number without leading zeros, not '\(property)'")
            }
        }
        if kind == .crashlyticsAPI {
            guard let app, !app.isEmpty, app.utf8.count <= 100, app.utf8.allSatisfy(Self.identifier) else {
                throw SourceConfigurationError("a Crashlytics API source needs --crashlytics-app, the Firebase app id")
            }
        }
        let datasets = kind == .bigQuery ? [("--analytics", analytics, 2), ("--crashlytics", crashlytics ?? "a.b.c", 3)] : []
        for (what, value, parts) in datasets {
            let p = value.split(separator: ".", omittingEmptySubsequences: false)
            guard p.count == parts, p.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy(Self.identifier) }) else {
                throw SourceConfigurationError(
                    "\(what) takes \(parts == 2 ? "PROJECT.DATASET" : "PROJECT.DATASET.TABLE"), not '\(value.prefix(80))'")
            }
        }
        guard overlap.microseconds >= 0, overlap <= .hours(48) else {
            throw SourceConfigurationError("the overlap is 0 to 48 hours")
        }
        guard every >= .seconds(Int64(5)), every <= .hours(24) else {
            throw SourceConfigurationError("a source pulls every 5 s to 24 h")
        }
        self.name = name
        self.kind = kind
        self.project = project
        self.analytics = analytics
        self.crashlytics = crashlytics
        self.location = location
        self.property = kind == .analyticsRealtime ? property : nil
        self.app = kind == .crashlyticsAPI ? app : nil
        self.credentials = credentials
        self.origin = origin
        self.overlap = overlap
        self.every = every
        self.silentAfter = silentAfter
    }

    static func identifier(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 95 || b == 45 || b == 58
    }

    /// The stored form (and `source list --json`).
    public var json: JSONValue {
        var members: [(String, JSONValue)] = [
            ("name", .string(name)), ("kind", .string(kind.rawValue)), ("project", .string(project)),
            ("analytics", .string(analytics)),
        ]
        if let crashlytics { members.append(("crashlytics", .string(crashlytics))) }
        if let location { members.append(("location", .string(location))) }
        if let property { members.append(("property", .string(property))) }
        if let app { members.append(("app", .string(app))) }
        switch credentials {
        case .applicationDefault: members.append(("credentials", "application-default"))
        case .serviceAccountFile(let f): members.append(("credentialsFile", .string(f)))
        case .accessTokenCommand(let c): members.append(("accessTokenCommand", .string(c)))
        }
        members += [
            ("origin", .string(origin.iso8601)), ("overlapSeconds", .number(JSONNumber(overlap.microseconds / 1_000_000))),
            ("everySeconds", .number(JSONNumber(every.microseconds / 1_000_000))),
            ("silentAfterSeconds", .number(JSONNumber(silentAfter.microseconds / 1_000_000))),
        ]
        return .object(JSONObject(members))
    }

    /// Reads the stored form back.
    public init(json: JSONValue) throws(SourceConfigurationError) {
        func text(_ k: String) throws(SourceConfigurationError) -> String {
            guard let s = json[k]?.stringValue else { throw SourceConfigurationError("the stored source lacks \(k)") }
            return s
        }
        func seconds(_ k: String) throws(SourceConfigurationError) -> Instant.Duration {
            guard let n = json[k]?.numberValue?.int64 else { throw SourceConfigurationError("the stored source lacks \(k)") }
            return .seconds(n)
        }
        guard let kind = Kind(rawValue: try text("kind")) else {
            throw SourceConfigurationError("the stored source's kind '\(json["kind"]?.stringValue ?? "")' is unknown")
        }
        guard let origin = ISO8601.parse(try text("origin")) else {
            throw SourceConfigurationError("the stored source's origin is not a time")
        }
        let credentials: Credentials =
            if let f = json["credentialsFile"]?.stringValue { .serviceAccountFile(f) }
            else if let c = json["accessTokenCommand"]?.stringValue { .accessTokenCommand(c) } else { .applicationDefault }
        try self.init(
            name: try text("name"), kind: kind, project: try text("project"), analytics: json["analytics"]?.stringValue ?? "",
            crashlytics: json["crashlytics"]?.stringValue, location: json["location"]?.stringValue,
            property: json["property"]?.stringValue, app: json["app"]?.stringValue, credentials: credentials,
            origin: origin, overlap: try seconds("overlapSeconds"), every: try seconds("everySeconds"),
            silentAfter: try seconds("silentAfterSeconds"))
    }
}

public struct SourceConfigurationError: Error, Hashable, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Where the configured sources are kept (the settings tables; written only through the settings write path).
public protocol SourceConfigurationStore {
    func sourceConfigurations() throws -> [SourceConfiguration]
    func saveSource(_ configuration: SourceConfiguration) throws
    /// Removes the source's configuration. Its ledger stays (`SourceLedger`): what it landed stays counted, and
    /// a source added again over the same events continues where it stopped.
    func removeSource(_ name: String) throws
}
