import Rollout

/// What App Check enforcement would reject, estimated from the counters of a recent window: requests that would
/// arrive without a valid token once a service is ENFORCED.
///
/// Two sources, each a share of the window's traffic:
/// - **outdated clients**: sessions that report no cohort (`Cohort.none`: builds without the rollout's
///   instrumentation, which have no App Check provider either), as a share of all sessions;
/// - **failed attestations**: among the other clients, attestation attempts that failed (every provider: a
///   DeviceCheck or debug token is as valid to App Check as an App Attest one).
/// The estimate is `outdated + (1 − outdated) · failed`. Unattested clients of the instrumented builds show up as
/// failures (their provider errors are counted as attestation failures).
public struct RejectionEstimate: Hashable, Sendable {
    /// Sessions without a cohort / all sessions; nil without sessions.
    public var outdated: Double?
    /// Failed attempts / all attempts, all providers; nil without attempts.
    public var failed: Double?

    public init(outdated: Double?, failed: Double?) {
        self.outdated = outdated
        self.failed = failed
    }

    /// The share of requests enforcement would reject; nil when the window has neither sessions nor attempts.
    public var share: Double? {
        guard outdated != nil || failed != nil else { return nil }
        let o = outdated ?? 0
        return o + (1 - o) * (failed ?? 0)
    }
}

extension CounterTotals {
    /// The rejection estimate of these counters (`RejectionEstimate`).
    public var rejectionEstimate: RejectionEstimate {
        let sessions = sum(.session)
        let outdated = sessions > 0 ? Double(sum(.session, cohort: .none)) / Double(sessions) : nil
        return RejectionEstimate(outdated: outdated, failed: successRatio().map { 1 - $0 })
    }
}
