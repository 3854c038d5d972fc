import Timekeeping

/// App Check enforcement of one Firebase service, as the API names the modes: `OFF` (no metrics),
/// `UNENFORCED` (metrics, every request served) and `ENFORCED` (requests without a valid App Check token
/// rejected).
public enum EnforcementMode: String, CaseIterable, Sendable, Comparable {
    case off = "OFF"
    case unenforced = "UNENFORCED"
    case enforced = "ENFORCED"

    public static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
    private var rank: Int { self == .off ? 0 : self == .unenforced ? 1 : 2 }

    /// `off`, `unenforced`, `enforced` (any case), or the API's names.
    public init?(argument: String) { self.init(rawValue: argument.uppercased()) }
}

/// One Firebase service's App Check configuration (`projects.services` of the App Check API).
public struct AppCheckService: Sendable, Equatable {
    /// `projects/{project}/services/{service id}`.
    public var name: String
    public var enforcementMode: EnforcementMode
    /// `OFF`, `UNENFORCED` or `ENFORCED` when Firebase sends it (Firestore's replay protection), else nil.
    public var replayProtection: String?
    public var etag: String?
    public var updateTime: String?

    public init(
        name: String, enforcementMode: EnforcementMode, replayProtection: String? = nil, etag: String? = nil,
        updateTime: String? = nil
    ) {
        self.name = name
        self.enforcementMode = enforcementMode
        self.replayProtection = replayProtection
        self.etag = etag
        self.updateTime = updateTime
    }

    /// The service id (`firestore.googleapis.com`).
    public var id: String { name.split(separator: "/").last.map(String.init) ?? name }
}

/// When App Check may be enforced: the end of the ramp, never during it.
///
/// The codelab's warning: an enforced service rejects every app instance without a valid token, and an app
/// instance whose `AppAttestEnabled` is false has no App Attest provider. So `ENFORCED` needs the rollout at 100%
/// (everyone has the provider) with an OK verdict held for `okFor`, and a kill of the flag while a service is
/// enforced would lock out every user the kill just switched off.
public struct EnforcementGate: Sendable, Equatable {
    /// How long the verdict must have been OK at 100% before `ENFORCED` (default one day).
    public var okFor: Instant.Duration

    public init(okFor: Instant.Duration = .hours(24)) { self.okFor = okFor }

    /// What the rollout looks like to the gate.
    public struct Rollout: Sendable, Equatable {
        /// The flag's effective exposure (1.0 = everyone), after any kill.
        public var exposure: Double
        /// Since when the verdict has been OK without a break at full exposure; nil when it is not OK now.
        public var okSince: Instant?
        /// The share of recent requests that would be rejected once enforced (no token: unattested, failed or
        /// outdated clients), when telemetry can tell.
        public var wouldReject: Double?
        /// The flag is killed (its exposure is nobody's because of the kill, not of a percentage).
        public var killed: Bool

        public init(exposure: Double, okSince: Instant?, wouldReject: Double?, killed: Bool = false) {
            self.exposure = exposure
            self.okSince = okSince
            self.wouldReject = wouldReject
            self.killed = killed
        }
    }

    public enum Decision: Sendable, Equatable {
        case allowed
        case refused(String)
    }

    /// Whether a service may go from `current` to `target` now. Lowering enforcement is always allowed.
    public func assess(from current: EnforcementMode, to target: EnforcementMode, rollout: Rollout, now: Instant)
        -> Decision
    {
        guard target == .enforced, current != .enforced else { return .allowed }
        if rollout.killed {
            return .refused(
                "the rollout is killed (App Attest is off for everyone): enforcing now would reject every user; "
                    + "resume it and ramp to 100% first")
        }
        guard rollout.exposure >= 1 else {
            return .refused(
                "the rollout is at \(Self.percent(rollout.exposure)), not 100%: enforcing now would reject every user without App Attest")
        }
        guard let since = rollout.okSince else {
            return .refused("the verdict is not OK: enforce only after the rollout has been healthy at 100%")
        }
        let held = now - since
        guard held >= okFor else {
            return .refused(
                "the verdict has been OK at 100% for \(Self.span(held)), less than the \(Self.span(okFor)) required (policy enforcement.ok-for-minutes)")
        }
        return .allowed
    }

    /// The services a kill of the flag must first take out of `ENFORCED`.
    public static func blockingKill(_ services: [(id: String, mode: EnforcementMode)]) -> [String] {
        services.filter { $0.mode == .enforced }.map(\.id)
    }

    static func percent(_ share: Double) -> String {
        let p = (share * 1000).rounded() / 10
        return p == p.rounded() ? "\(Int(p))%" : "\(p)%"
    }

    static func span(_ d: Instant.Duration) -> String {
        let minutes = max(0, d.microseconds / 60_000_000)
        if minutes >= 60 * 24, minutes % (60 * 24) == 0 { return "\(minutes / (60 * 24)) d" }
        if minutes >= 60 { return "\(minutes / 60) h \(minutes % 60) min" }
        return "\(minutes) min"
    }
}
