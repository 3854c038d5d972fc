import Crypto
import Glibc
import Platform
import JSON
import Telemetry
import TelemetryIngest
import Timekeeping

/// `POST /v1/events`: a backend pushes telemetry events, which land through the same ingest as `rollout ingest`
/// (`TelemetryIngest` reading the lines, the store's `TelemetryCounters.commit` landing them as one batch).
///
/// - Authentication: `Authorization: Bearer <token>`, the server's `BearerToken`.
/// - Body: NDJSON (one event per line), or a JSON array of event objects; `?format=native|ga4|crashlytics`
///   (default native, the format `rollout ingest` reads by default).
/// - All or nothing: a request with any unreadable line lands nothing and answers 400 with the first problems,
///   so a client can fix and resend without double counting. Otherwise the whole body is one batch, committed
///   (durably) before the answer `{"accepted", "ignored", "batch"}`.
public final class EventsIntake: @unchecked Sendable {
    private let bearer: BearerToken
    /// Lands one batch (committed before it returns).
    private let land: (TelemetryBatch, String, Instant) throws -> BatchReceipt?
    private let clock: any Clock
    private let afterCommit: @Sendable () -> Void
    private let rolloutStart: @Sendable () -> Instant?

    /// `afterCommit` runs after each landed batch (the CLI wires the same auto-kill check as `rollout ingest`);
    /// `rolloutStart` gives the rollout's start for the window of acceptable event times (`EventTimeWindow`).
    ///
    /// The batches land in `store`'s telemetry counters (`MonitoredStore.telemetryCounters`: an SQLite file's under
    /// its lock, a PostgreSQL team store's in its own transactions).
    public convenience init(
        store: any MonitoredStore, bearerToken: String, clock: any Clock,
        rolloutStart: @escaping @Sendable () -> Instant? = { nil }, afterCommit: @escaping @Sendable () -> Void = {}
    ) throws {
        self.init(
            counters: try store.telemetryCounters(), bearerToken: bearerToken, clock: clock, rolloutStart: rolloutStart,
            afterCommit: afterCommit)
    }

    /// The same intake landing its batches in any store's telemetry counters (the core's port; a PostgreSQL team
    /// store's `PostgresTelemetry`).
    public convenience init(
        counters: any TelemetryCounters, bearerToken: String, clock: any Clock,
        rolloutStart: @escaping @Sendable () -> Instant? = { nil }, afterCommit: @escaping @Sendable () -> Void = {}
    ) {
        self.init(
            bearerToken: bearerToken, clock: clock, rolloutStart: rolloutStart, afterCommit: afterCommit,
            land: { batch, source, at in try counters.commit(batch, source: source, at: at) })
    }

    private init(
        bearerToken: String, clock: any Clock, rolloutStart: @escaping @Sendable () -> Instant?,
        afterCommit: @escaping @Sendable () -> Void, land: @escaping (TelemetryBatch, String, Instant) throws -> BatchReceipt?
    ) {
        self.rolloutStart = rolloutStart
        bearer = BearerToken(bearerToken)
        self.land = land
        self.clock = clock
        self.afterCommit = afterCommit
    }

    /// The 401 for a request without the bearer token, nil for one with it: the one check of the token, which the
    /// server asks on the head alone (so an unauthenticated body is never read) and `respond` asks again.
    public func refusal(head request: HTTPRequest) -> HTTPResponse? { bearer.refusal(head: request) }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        if let refused = refusal(head: request) { return refused }
        let formatName = request.query["format"] ?? "native"
        guard let format = TelemetryFormat(rawValue: formatName) else {
            return googleError(
                400, "INVALID_ARGUMENT", "unknown format '\(formatName)': expected native, ga4 or crashlytics")
        }
        // Strict, as the array's parser is: a line that names a member twice is unreadable whichever shape the
        // body has (`rollout ingest` keeps reading such lines with a warning a person sees; a client here never would).
        let ingest = TelemetryIngest(
            format: format, window: EventTimeWindow(now: clock.now(), rolloutStart: rolloutStart()), duplicateKeys: .reject,
            maximumReportedProblems: 10)
        let first = request.body.first { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 }
        if first == UInt8(ascii: "[") {
            // A JSON array: each element becomes one line of the same reader.
            let value: JSONValue
            do { value = try JSONParser().parse(request.body) } catch {
                return googleError(400, "INVALID_ARGUMENT", "Invalid JSON payload received: \(error)")
            }
            guard let items = value.arrayValue else {
                return googleError(400, "INVALID_ARGUMENT", "the body is neither NDJSON nor a JSON array")
            }
            var lines: [UInt8] = []
            let writer = JSONWriter()
            for item in items {
                lines += writer.bytes(item)
                lines.append(0x0A)
            }
            lines.withUnsafeBytes { ingest.feed($0) }
        } else {
            request.body.withUnsafeBytes { ingest.feed($0) }
        }
        ingest.finish()
        if ingest.problemCount > 0 {
            let shown = ingest.problems.map(\.description).joined(separator: "; ")
            return googleError(
                400, "INVALID_ARGUMENT",
                "\(ingest.problemCount) unreadable line(s), nothing was ingested: \(shown)")
        }
        let receipt: BatchReceipt?
        do {
            receipt = try land(ingest.batch, "http:\(request.remoteAddress)", clock.now())
        } catch {
            return storeUnavailable("the batch was not ingested: \(error)")
        }
        if receipt != nil { afterCommit() }
        var body = JSONObject([
            ("accepted", .number(JSONNumber(ingest.recorded))), ("ignored", .number(JSONNumber(ingest.ignored))),
        ])
        if let receipt {
            body["batch"] = .number(JSONNumber(receipt.id))
            body["installations"] = .number(JSONNumber(receipt.installations))
        }
        return .json(200, JSONWriter().bytes(.object(body)))
    }
}
