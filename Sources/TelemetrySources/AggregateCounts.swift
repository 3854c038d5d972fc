import Rollout
import Telemetry
import Timekeeping

/// One pulled counter: what a source says happened in one minute, for one cohort, kind, provider and detail.
///
/// This is what an aggregating source (BigQuery over the GA4 and Crashlytics exports) sends instead of events,
/// so what is pulled grows with minutes × cohorts × kinds, never with events or installations.
///
/// Which inputs of the statistics are additive (RolloutWatch, CrashComparison, the failure CUSUMs):
/// - **Additive**: sessions, fatal and non-fatal crashes, attestation successes and failures (by provider and
///   class) and config fetches per minute × cohort. A window's figure is the sum of its minutes', and the sum
///   over pulls of disjoint windows; the SPRT on crashes (per look: exposed and control crashes, the sessions'
///   exposed share), the mixture tests on crashes per session and the CUSUMs read only these.
/// - **Not additive**: distinct installations. Two minutes' active users do not add up to the two minutes'. The
///   crash-free-users comparison needs, per look, the installations that entered each cohort and those whose
///   first fatal crash in the cohort fell in the look (`usersEntered`, `usersCrashed`): the source computes them
///   itself over all the data since its origin, assigning each installation once, to the minute of its first
///   event (its first fatal crash) in the cohort. So assigned, they become additive over minutes, and a later
///   pull can move an installation to an earlier minute when late data arrives, which the ledger turns into a
///   −1 and a +1 (`PullLedger`).
/// - **Not pulled**: the activity panel's active installations by latest cohort, exposure, the sample ratio test
///   and propagation need each installation's latest event and fetch (presence): an aggregating source leaves
///   them to the sources that send events (ingest, `serve`, the simulator).
public struct AggregateKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The minute's index (`BucketLevel.minute`).
    public var minute: Int64
    public var cohort: Cohort
    public var kind: CounterKind
    public var provider: AttestationProvider
    /// `fatal` / `nonfatal` for crashes, the class (`serverUnavailable`, `rejected:REASON`) for failures, else
    /// empty.
    public var detail: String

    public init(minute: Int64, cohort: Cohort, kind: CounterKind, provider: AttestationProvider = .unspecified, detail: String = "") {
        self.minute = minute
        self.cohort = cohort
        self.kind = kind
        let keepsProvider = kind == .attestationSuccess || kind == .attestationFailure
        self.provider = keepsProvider ? provider : .unspecified
        self.detail = detail
    }

    /// What the key says besides the minute, as stored in a ledger: `kind/cohort/provider/detail`.
    public var dimensions: String { "\(kind)/\(cohort)/\(provider)/\(detail)" }

    /// Parses `dimensions` back (nil for anything else).
    public init?(minute: Int64, dimensions: String) {
        let parts = dimensions.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 4, let kind = CounterKind.allCases.first(where: { "\($0)" == parts[0] }),
            let cohort = Cohort(name: parts[1]), "\(cohort)" == parts[1],
            let provider = AttestationProvider.allCases.first(where: { "\($0)" == parts[2] })
        else { return nil }
        self.init(minute: minute, cohort: cohort, kind: kind, provider: provider, detail: String(parts[3]))
    }

    public static func < (a: AggregateKey, b: AggregateKey) -> Bool {
        (a.minute, a.dimensions) < (b.minute, b.dimensions)
    }

    public var description: String { "\(BucketLevel.minute.start(minute).iso8601) \(dimensions)" }
}

/// Why a pulled row cannot be counted: it names the field.
public struct AggregateError: Error, Hashable, Sendable, CustomStringConvertible {
    public var field: String
    public var reason: String
    public init(field: String, reason: String) {
        self.field = field
        self.reason = reason
    }
    public var description: String { "\(field): \(reason)" }
}

extension AggregateKey {
    /// A key from a pulled row's texts (as the BigQuery query returns them), refusing what `ingest` refuses.
    public static func parse(minute: Int64, cohort: String, kind: String, provider: String, detail: String)
        throws(AggregateError) -> AggregateKey
    {
        guard let c = Cohort(name: cohort) else {
            throw AggregateError(field: "cohort", reason: "'\(cohort.prefix(40))' is not enabled, control or none")
        }
        guard let k = CounterKind.allCases.first(where: { "\($0)" == kind }) else {
            throw AggregateError(field: "kind", reason: "'\(kind.prefix(40))' is not a counter kind")
        }
        guard let p = AttestationProvider(name: provider) else {
            throw AggregateError(field: "provider", reason: "'\(provider.prefix(40))' is not a provider")
        }
        switch k {
        case .crash:
            guard detail == "fatal" || detail == "nonfatal" else {
                throw AggregateError(field: "detail", reason: "a crash's detail is fatal or nonfatal, not '\(detail.prefix(40))'")
            }
        case .attestationFailure:
            guard let e = AttestationErrorClass(name: detail) else {
                throw AggregateError(field: "detail", reason: "'\(detail.prefix(60))' is not a failure class")
            }
            return AggregateKey(minute: minute, cohort: c, kind: k, provider: p, detail: e.description)
        default:
            guard detail.isEmpty else {
                throw AggregateError(field: "detail", reason: "\(kind) carries no detail, got '\(detail.prefix(40))'")
            }
        }
        return AggregateKey(minute: minute, cohort: c, kind: k, provider: p, detail: detail)
    }
}

/// What a pull changes: the difference between what the source says now about the minutes it covered and what
/// earlier pulls already contributed for them (the ledger), so that re-pulling a window, or the overlap kept
/// for late data, never counts anything twice.
public enum PullLedger {
    /// The largest count a source may report for one key (one minute, cohort, kind, provider and detail): 10^12,
    /// a billion events a second for the minute's sixty seconds many times over. Past it an answer is broken, and
    /// the sums a store keeps stay far from Int64's limit.
    public static let maximumCount: Int64 = 1_000_000_000_000

    /// Adds `n` (already checked to be within 0 ... `maximumCount`) to `counts[key]`; false, leaving `counts` as
    /// it was, when the key's sum would pass `maximumCount` (two spellings of one key, each large).
    public static func add(_ n: Int64, to counts: inout [AggregateKey: Int64], at key: AggregateKey) -> Bool {
        let (sum, overflow) = (counts[key] ?? 0).addingReportingOverflow(n)
        guard !overflow, sum <= maximumCount else { return false }
        counts[key] = sum
        return true
    }

    /// The changes to commit for a window: pulled − recorded for every key of either (zeros left out).
    ///
    /// `recorded` holds what the ledger has for the window's minutes; a key recorded but no longer pulled (an
    /// installation whose first event moved to an earlier minute) is taken back.
    public static func changes(pulled: [AggregateKey: Int64], recorded: [AggregateKey: Int64]) -> [AggregateKey: Int64] {
        var out: [AggregateKey: Int64] = [:]
        for (k, v) in pulled where v != recorded[k] ?? 0 { out[k] = v - (recorded[k] ?? 0) }
        for (k, v) in recorded where pulled[k] == nil && v != 0 { out[k] = -v }
        return out
    }

    /// The batch that lands `changes` through the same commit as `rollout ingest` (counters only: an
    /// aggregating source sends no installations).
    public static func batch(_ changes: [AggregateKey: Int64]) -> TelemetryBatch {
        let batch = TelemetryBatch()
        for (k, n) in changes.sorted(by: { $0.key < $1.key }) where n != 0 {
            batch.addCounts(counterKey(k, failureDetail: batch.failureDetail), at: BucketLevel.minute.start(k.minute), count: n)
        }
        return batch
    }

    /// The counter an aggregate key lands in: a crash's detail 1 when fatal, a failure's its class's code as
    /// `failureDetail` registers it.
    public static func counterKey(_ k: AggregateKey, failureDetail: (AttestationErrorClass) -> UInt16) -> CounterKey {
        var detail: UInt16 = 0
        switch k.kind {
        case .crash: detail = k.detail == "fatal" ? 1 : 0
        case .attestationFailure:
            if let e = AttestationErrorClass(name: k.detail) { detail = failureDetail(e) }
        default: break
        }
        return CounterKey(k.kind, k.cohort, provider: k.provider, detail: detail)
    }
}
