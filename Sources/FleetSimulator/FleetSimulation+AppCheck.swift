import AppCheck
import Glibc
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

// The attestation path: App Check tokens through Apple's service model and the exchange, and their failures.
extension FleetSimulation {
    /// The custom provider's `getToken` for an eligible device with the flag on.
    func requestToken(_ i: Int, at t: Int64) throws {
        guard devices[i].has(.flagOn), eligible(devices[i]) else { return }
        if devices[i].tokenExpiry - Self.refreshMargin > t { return }
        if devices[i].backoffUntil > t {
            requestTokenLater(i, at: devices[i].backoffUntil)
            return
        }
        stats.tokenRequests += 1
        let key = Int32(i)
        if let client = clients[key], client.hasAttested {
            if devices[i].has(.keyInvalid) {
                // The OS update invalidated the key: the SDK drops it and attests a new one next time.
                devices[i].clear(.keyInvalid)
                clients[key] = nil
                try fail(i, .invalidKey, at: t)
                return
            }
            if let failure = draw(parameters.assertionFailures, i) {
                if failure == .invalidKey { clients[key] = nil }
                try fail(i, failure, at: t)
                return
            }
            try exchangeToken(i, client, at: t)
            return
        }
        guard apple.serve(at: t, capacity: parameters.appleCapacity) else {
            stats.throttled += 1
            try fail(i, .serverUnavailable, at: t)
            return
        }
        if let failure = draw(parameters.attestationFailures, i) {
            if failure == .invalidKey { clients[key] = nil }
            try fail(i, failure, at: t)
            return
        }
        let client: SimulatedAppCheckClient
        if let existing = clients[key] {
            client = existing
        } else {
            let identity = appIdentities[Int(devices[i].app)]
            let started = options.cryptoStopwatch?()
            let attestKey = try SimulatedAppAttestKey(authority: authority, app: identity, environment: attestEnvironment)
            if let started, let stop = options.cryptoStopwatch { stats.cryptoNanoseconds += stop() - started }
            client = SimulatedAppCheckClient(key: attestKey, appId: firebaseAppID)
            clients[key] = client
            stats.keysGenerated += 1
        }
        try exchangeToken(i, client, at: t)
    }

    /// One real exchange: an attestation the first time, an assertion afterwards.
    func exchangeToken(_ i: Int, _ client: SimulatedAppCheckClient, at t: Int64) throws {
        let attesting = !client.hasAttested
        let started = options.cryptoStopwatch?()
        let result: Result<AppCheckToken, AppCheckClientError>
        do {
            result = .success(try client.token(from: exchange, at: certificateTime(Instant(microseconds: t))))
        } catch {
            result = .failure(error)
        }
        if let started, let stop = options.cryptoStopwatch { stats.cryptoNanoseconds += stop() - started }
        switch result {
        case .success(let token):
            if attesting { stats.attestations += 1 } else { stats.assertions += 1 }
            shareLock.withLock { newestToken = token.token }
            devices[i].tokenExpiry = t + token.ttl.microseconds
            devices[i].backoffLevel = 0
            try emit(.attestationSuccess, i, at: t)
            requestTokenLater(i, at: devices[i].tokenExpiry - Self.refreshMargin)
        case .failure(let error):
            // The SDK keeps its key after a rejection and attests it again next time.
            if case .device = error { throw error }
            try fail(i, .rejected(reason: error.code), at: t)
        }
    }

    /// A background failure of one class, drawn with the given rates (DCError code order), or nil.
    func draw(_ rates: [Double], _ i: Int) -> AttestationErrorClass? {
        let total = rates.reduce(0, +)
        guard total > 0 else { return nil }
        var u = devices[i].rng.unit()
        guard u < total else { return nil }
        for (code, rate) in rates.enumerated() {
            if u < rate { return AttestationErrorClass(dcErrorCode: Int64(code)) }
            u -= rate
        }
        return nil
    }

    /// Logs `AppAttestFailure` and retries: after `serverUnavailable` with the SDK's doubling back-off, after
    /// anything else at the app's next backend call.
    func fail(_ i: Int, _ failure: AttestationErrorClass, at t: Int64) throws {
        stats.failures[failure.description, default: 0] += 1
        try emit(.attestationFailure(failure), i, at: t)
        if failure == .serverUnavailable {
            let p = parameters
            let doubled = Double(p.backoffInitial.microseconds) * pow(2, Double(devices[i].backoffLevel))
            let wait = min(doubled, Double(p.backoffMaximum.microseconds)) * devices[i].rng.uniform(0.75, 1.25)
            devices[i].backoffLevel = min(devices[i].backoffLevel + 1, 30)
            devices[i].backoffUntil = t + Int64(wait)
            requestTokenLater(i, at: devices[i].backoffUntil)
        } else {
            let delay = max(1_000_000, Int64(devices[i].rng.exponential(mean: 60_000_000)))
            requestTokenLater(i, at: t + delay)
        }
    }
}
