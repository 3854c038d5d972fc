import FirebaseRemoteConfig
import Monitoring
import Platform
import Telemetry
import Timekeeping
import WebClient

/// The monitor's `EnforcementReader` on a Firebase project's App Check API: one attempt within `timeout` (a status
/// never hangs on Google's API), at most once a `refresh` (a `watch`, `follow` or `plan run` loop and the console
/// look every few seconds), keeping the last known modes when a read fails so the assessment can say what it last
/// saw and that it cannot see now.
final class AppCheckEnforcementReader: EnforcementReader, @unchecked Sendable {
    /// How often the modes are read again; a failed read is retried no sooner either.
    static let refresh = Instant.Duration.minutes(1)
    /// How long one read may take.
    static let timeout = Instant.Duration.seconds(Int64(3))

    private let reads: AppCheckServicesClient
    private let refresh: Instant.Duration
    private let lock = Lock()
    private var last = EnforcementReading(modes: [:], readAt: nil, failure: "not read yet")
    private var attemptedAt: Instant?

    init(
        client: AppCheckServicesClient, refresh: Instant.Duration = AppCheckEnforcementReader.refresh,
        timeout: Instant.Duration = AppCheckEnforcementReader.timeout
    ) {
        var budget = client.policy
        budget.attempts = 1
        budget.timeout = min(budget.timeout, timeout)
        reads = client.budgeted(budget)
        self.refresh = refresh
    }

    func reading(at wall: Instant) -> EnforcementReading {
        lock.withLock {
            // A clock that went back reads again rather than trusting a read from its future.
            if let attemptedAt, attemptedAt <= wall, wall - attemptedAt < refresh { return last }
            attemptedAt = wall
            do {
                // One call: only configured services are listed, and an unconfigured one is OFF.
                let services = try reads.list()
                var modes: [String: String] = [:]
                for s in services { modes[s.id] = s.enforcementMode.rawValue }
                last = EnforcementReading(modes: modes, readAt: wall)
            } catch {
                last.failure = "\(error)"
            }
            return last
        }
    }
}

extension RolloutMonitor {
    /// This monitor reading `client`'s enforcement for its assessment (nil: no App Check project, unchanged).
    func readingEnforcement(of client: AppCheckServicesClient?) -> RolloutMonitor {
        if let client { enforcement = AppCheckEnforcementReader(client: client) }
        return self
    }
}
