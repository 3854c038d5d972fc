import Rollout
import Timekeeping

extension Cohort {
    /// The cohort's number in stored counters and installation rows (none 0, enabled 1, control 2).
    public var code: UInt8 {
        switch self {
        case .none: 0
        case .enabled: 1
        case .control: 2
        }
    }

    /// The cohort with stored number `code`.
    public init?(code: UInt8) {
        switch code {
        case 0: self = .none
        case 1: self = .enabled
        case 2: self = .control
        default: return nil
        }
    }

    /// Parses the companion parameter's value as apps write it: `enabled`, `control`, `none` in any case, also
    /// `exposed` for `enabled` and the empty string for `none`.
    public init?(name: some StringProtocol) {
        switch name.lowercased() {
        case "enabled", "exposed": self = .enabled
        case "control": self = .control
        case "none", "": self = .none
        default: return nil
        }
    }
}

/// The App Check provider the app used for an event.
public enum AttestationProvider: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    /// Not reported (GA4 rows without the parameter, crashes, sessions).
    case unspecified = 0
    case appAttest = 1
    case deviceCheck = 2
    case debug = 3

    /// Parses `appAttest`, `deviceCheck`, `debug` (case-insensitive; `app_attest` and `device_check` too).
    public init?(name: some StringProtocol) {
        switch name.lowercased().replacing("_", with: "") {
        case "appattest": self = .appAttest
        case "devicecheck": self = .deviceCheck
        case "debug": self = .debug
        case "": self = .unspecified
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .unspecified: "unspecified"
        case .appAttest: "appAttest"
        case .deviceCheck: "deviceCheck"
        case .debug: "debug"
        }
    }
}

/// Why an attestation failed: one of Apple's `DCError` codes, or a rejection by our exchange server.
///
/// The raw codes of Apple's classes are `DCError.Code` values (FACTS §4), so rows that carry the integer code
/// map directly.
public enum AttestationErrorClass: Hashable, Sendable, CustomStringConvertible {
    case unknownSystemFailure
    case featureUnsupported
    case invalidInput
    case invalidKey
    /// Apple's service is busy: this is how throttling shows.
    case serverUnavailable
    /// The exchange server refused the attestation or assertion; `reason` says why (e.g. `nonceMismatch`).
    case rejected(reason: String)

    /// The five classes Apple reports, in `DCError.Code` order.
    public static let appleClasses: [AttestationErrorClass] = [
        .unknownSystemFailure, .featureUnsupported, .invalidInput, .invalidKey, .serverUnavailable,
    ]

    /// The class for a `DCError.Code` value (0 ... 4).
    public init?(dcErrorCode code: Int64) {
        guard code >= 0, code < 5 else { return nil }
        self = Self.appleClasses[Int(code)]
    }

    /// Parses a class name (`serverUnavailable`, ...); `rejected:REASON` or `rejected` for the exchange server.
    public init?(name: some StringProtocol) {
        let s = String(name)
        if s.hasPrefix("rejected") {
            let rest = s.dropFirst("rejected".count)
            if rest.isEmpty { self = .rejected(reason: ""); return }
            guard rest.first == ":" else { return nil }
            self = .rejected(reason: String(rest.dropFirst()))
            return
        }
        switch s.lowercased() {
        case "unknownsystemfailure": self = .unknownSystemFailure
        case "featureunsupported": self = .featureUnsupported
        case "invalidinput": self = .invalidInput
        case "invalidkey": self = .invalidKey
        case "serverunavailable": self = .serverUnavailable
        default: return nil
        }
    }

    /// The `DCError.Code` value, or nil for a rejection by the exchange server.
    public var dcErrorCode: Int? {
        switch self {
        case .unknownSystemFailure: 0
        case .featureUnsupported: 1
        case .invalidInput: 2
        case .invalidKey: 3
        case .serverUnavailable: 4
        case .rejected: nil
        }
    }

    /// The class's name (`ErrorClassBucket`'s), with the reason of a rejection: `rejected:nonceMismatch`.
    public var description: String {
        if case .rejected(let reason) = self, !reason.isEmpty { return "rejected:\(reason)" }
        return ErrorClassBucket(self).description
    }
}

/// What happened.
public enum TelemetryEventKind: Hashable, Sendable {
    /// `AppAttestSuccess`: an attestation or assertion was accepted.
    case attestationSuccess
    /// `AppAttestFailure` with its class.
    case attestationFailure(AttestationErrorClass)
    /// A crash; only fatal crashes count against crash-free users and sessions.
    case crash(fatal: Bool)
    /// A session started: the denominator of crash rates.
    case sessionStart
    /// The app fetched and activated the Remote Config template of this version (for propagation).
    case configFetch(templateVersion: Int64)
}

/// One event from an installation of the app.
public struct TelemetryEvent: Hashable, Sendable {
    public var time: Instant
    public var installationID: String
    public var kind: TelemetryEventKind
    public var cohort: Cohort
    public var provider: AttestationProvider
    /// As reported, e.g. `17.4.1` (GA4 writes `iOS 17.4.1`); only the major version is stored.
    public var osVersion: String
    public var appVersion: String

    public init(
        time: Instant, installationID: String, kind: TelemetryEventKind, cohort: Cohort,
        provider: AttestationProvider = .unspecified, osVersion: String = "", appVersion: String = ""
    ) {
        self.time = time
        self.installationID = installationID
        self.kind = kind
        self.cohort = cohort
        self.provider = provider
        self.osVersion = osVersion
        self.appVersion = appVersion
    }
}

/// The major version in an OS version string (`17.4.1`, `iOS 17.4`), or 0 when there is none.
public func osMajorVersion(_ text: some StringProtocol) -> UInt8 { majorVersion(text.utf8) }

/// The first run of digits in `bytes` as a number (at most 255), or 0.
@inline(__always)
@inlinable package func majorVersion<Bytes: Sequence>(_ bytes: Bytes) -> UInt8 where Bytes.Element == UInt8 {
    var value = 0
    var seen = false
    for c in bytes {
        if c >= 48, c <= 57 {
            seen = true
            value = min(value * 10 + Int(c - 48), 255)
        } else if seen {
            break
        }
    }
    return UInt8(value)
}
