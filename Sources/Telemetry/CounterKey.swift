import Rollout
import Timekeeping

/// What a time-bucketed counter counts.
///
/// The first five are events as they arrive; the last two are user-level transitions, counted once per
/// installation and cohort when the batch that carries them lands (the basis of crash-free users).
public enum CounterKind: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case attestationSuccess = 1
    case attestationFailure = 2
    case crash = 3
    case session = 4
    case configFetch = 5
    /// An installation reported this cohort for the first time.
    case usersEntered = 6
    /// An installation had its first fatal crash while reporting this cohort.
    case usersCrashed = 7

    public var description: String {
        switch self {
        case .attestationSuccess: "attestationSuccess"
        case .attestationFailure: "attestationFailure"
        case .crash: "crash"
        case .session: "session"
        case .configFetch: "configFetch"
        case .usersEntered: "usersEntered"
        case .usersCrashed: "usersCrashed"
        }
    }
}

/// One counter's dimensions: kind × cohort × provider × detail, packed into 32 bits for storage.
///
/// `detail` is the error class of a failure (`FailureDetail`), 1 for a fatal crash and 0 for a non-fatal one,
/// and 0 otherwise. The provider is kept only for attestation outcomes (App Attest vs DeviceCheck matters
/// there); other kinds store `.unspecified` so that the number of counters stays small.
public struct CounterKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var kind: CounterKind
    public var cohort: Cohort
    public var provider: AttestationProvider
    public var detail: UInt16

    public init(_ kind: CounterKind, _ cohort: Cohort, provider: AttestationProvider = .unspecified, detail: UInt16 = 0)
    {
        self.kind = kind
        self.cohort = cohort
        let keepsProvider = kind == .attestationSuccess || kind == .attestationFailure
        self.provider = keepsProvider ? provider : .unspecified
        self.detail = detail
    }

    /// `kind << 24 | cohort << 20 | provider << 16 | detail`.
    public var packed: UInt32 {
        UInt32(kind.rawValue) << 24 | UInt32(cohort.code) << 20 | UInt32(provider.rawValue) << 16 | UInt32(detail)
    }

    public init?(packed: UInt32) {
        guard let kind = CounterKind(rawValue: UInt8(packed >> 24)),
            let cohort = Cohort(code: UInt8((packed >> 20) & 0xF)),
            let provider = AttestationProvider(rawValue: UInt8((packed >> 16) & 0xF))
        else { return nil }
        self.kind = kind
        self.cohort = cohort
        self.provider = provider
        self.detail = UInt16(packed & 0xFFFF)
    }

    public static func < (a: CounterKey, b: CounterKey) -> Bool { a.packed < b.packed }

    public var description: String {
        var s = "\(kind)/\(cohort)"
        if provider != .unspecified { s += "/\(provider)" }
        if kind == .attestationFailure { s += "/\(FailureDetail(code: detail))" }
        if kind == .crash { s += detail == 1 ? "/fatal" : "/nonfatal" }
        return s
    }
}

/// The detail code of a failure counter: Apple's `DCError.Code` (0 ... 4) or a rejection by the exchange server
/// with a reason from the store's reason catalog (`rejectedBase + reasonID`).
public struct FailureDetail: Hashable, Sendable, CustomStringConvertible {
    public static let rejectedBase: UInt16 = 0x100
    /// At most this many distinct rejection reasons are told apart; later ones share `rejected:other`.
    public static let maximumReasons: UInt16 = 0xFF00 - 1

    public var code: UInt16
    public init(code: UInt16) { self.code = code }

    /// The failure's class without the reason (all rejections together).
    public var errorClass: ErrorClassBucket {
        code >= Self.rejectedBase
            ? .rejected : ErrorClassBucket(rawValue: UInt8(truncatingIfNeeded: code)) ?? .unknownSystemFailure
    }

    /// The reason's catalog id of a rejection.
    public var reasonID: UInt16? { code >= Self.rejectedBase ? code - Self.rejectedBase : nil }

    public var description: String {
        if let id = reasonID { return "rejected#\(id)" }
        return errorClass.description
    }
}

/// An error class with every rejection reason folded into one: the granularity of the CUSUM monitors.
public enum ErrorClassBucket: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case unknownSystemFailure = 0
    case featureUnsupported = 1
    case invalidInput = 2
    case invalidKey = 3
    case serverUnavailable = 4
    case rejected = 5

    public init(_ errorClass: AttestationErrorClass) {
        self = errorClass.dcErrorCode.map { ErrorClassBucket(rawValue: UInt8($0))! } ?? .rejected
    }

    public var description: String {
        switch self {
        case .unknownSystemFailure: "unknownSystemFailure"
        case .featureUnsupported: "featureUnsupported"
        case .invalidInput: "invalidInput"
        case .invalidKey: "invalidKey"
        case .serverUnavailable: "serverUnavailable"
        case .rejected: "rejected"
        }
    }
}

/// The granularity of a row of counters. Every event is counted at all three levels; minute rows are kept for
/// recent hours and hour rows for recent weeks (`TelemetryRetention`), day rows for ever. A sum over a span can
/// therefore use the coarsest rows that fit, and memory grows with the time span, never with the events.
public enum BucketLevel: Int64, Sendable, CaseIterable {
    case minute = 0
    case hour = 1
    case day = 2

    public var microseconds: Int64 {
        switch self {
        case .minute: 60_000_000
        case .hour: 3_600_000_000
        case .day: 86_400_000_000
        }
    }

    /// The bucket index holding `micros` (floor division, so times before 1970 work too).
    public func bucket(_ micros: Int64) -> Int64 {
        let w = microseconds
        let q = micros / w
        return (micros % w < 0) ? q - 1 : q
    }

    /// The start of bucket `index`.
    public func start(_ index: Int64) -> Instant { Instant(microseconds: index * microseconds) }

    /// How many buckets of this level one bucket of `coarser` holds.
    public func count(in coarser: BucketLevel) -> Int64 { coarser.microseconds / microseconds }
}

/// How long each level of rows is kept, relative to the newest event in the store (not the wall clock, so
/// that replaying an old export keeps its detail).
public struct TelemetryRetention: Hashable, Sendable {
    public var minutes: Instant.Duration
    public var hours: Instant.Duration

    public init(minutes: Instant.Duration = .hours(48), hours: Instant.Duration = .days(90)) {
        self.minutes = minutes
        self.hours = hours
    }

    /// The oldest bucket of `level` that is kept when the newest event is at `newest` (nil: kept for ever).
    public func oldestKept(_ level: BucketLevel, newest: Int64) -> Int64? {
        switch level {
        case .minute: level.bucket(newest - minutes.microseconds)
        case .hour: level.bucket(newest - hours.microseconds)
        case .day: nil
        }
    }
}

/// The per-installation "last seen" and "last fetched" marks, counted per hour so that the number of distinct
/// active installations in any recent window is a sum of a few rows (see `PresenceRow`).
public enum PresenceKey: Hashable, Sendable, CustomStringConvertible {
    /// Installations whose last event fell in the hour, by latest cohort and whether the device can attest.
    case active(Cohort, eligible: Bool)
    /// Installations whose last config fetch fell in the hour, by the template version fetched.
    case fetched(templateVersion: Int64)
    /// Installations whose latest fatal crash fell in the hour, by latest cohort (as `active`): with `active`, the
    /// distinct crashed and active users of a window of whole hours ending now, so crash-free users over it.
    case crashed(Cohort)

    static let fetchedTag: Int64 = 1 << 48
    static let crashedTag: Int64 = 1 << 47

    public var packed: Int64 {
        switch self {
        case .active(let cohort, let eligible): Int64(cohort.code) << 1 | (eligible ? 1 : 0)
        case .fetched(let v): Self.fetchedTag | (v & (Self.fetchedTag - 1))
        case .crashed(let cohort): Self.crashedTag | Int64(cohort.code)
        }
    }

    public init?(packed: Int64) {
        if packed & Self.fetchedTag != 0 {
            self = .fetched(templateVersion: packed & (Self.fetchedTag - 1))
        } else if packed & Self.crashedTag != 0 {
            guard packed & ~Self.crashedTag <= 0xF, let cohort = Cohort(code: UInt8(truncatingIfNeeded: packed)) else { return nil }
            self = .crashed(cohort)
        } else {
            guard let cohort = Cohort(code: UInt8(truncatingIfNeeded: packed >> 1)) else { return nil }
            self = .active(cohort, eligible: packed & 1 == 1)
        }
    }

    public var description: String {
        switch self {
        case .active(let c, let e): "active/\(c)/\(e ? "eligible" : "ineligible")"
        case .fetched(let v): "fetched/v\(v)"
        case .crashed(let c): "crashed/\(c)"
        }
    }
}
