/// Apple's attestation service as the fleet meets it: a capacity in attestations per second.
///
/// A token bucket that refills at the capacity and holds `burstSeconds` worth, so that a load below the capacity
/// passes however its requests happen to bunch, while a sustained load above it does not: a request that finds
/// the bucket empty is answered `serverUnavailable`, which is how throttling shows (FACTS §4). Only `attestKey` reaches
/// Apple; assertions never do. Deterministic: the bucket depends only on the simulated times of the requests.
struct AppleAttestationService {
    private var tokens: Double
    private var last: Int64

    static let burstSeconds = 10.0

    init(capacity: Double, at micros: Int64) {
        tokens = max(1, capacity * Self.burstSeconds)
        last = micros
    }

    /// Whether Apple serves an attestation at `micros` with the current `capacity` (per second).
    mutating func serve(at micros: Int64, capacity: Double) -> Bool {
        let burst = max(1, capacity * Self.burstSeconds)
        tokens = min(burst, tokens + Double(max(0, micros - last)) / 1_000_000 * capacity)
        last = max(last, micros)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
