import Crypto
import Glibc
import Platform
import Timekeeping

/// Why a simulated client could not get a token.
public enum AppCheckClientError: CodedError, Hashable, Sendable {
    /// The exchange refused (its code is the telemetry error class, e.g. `nonceMismatch`).
    case exchange(AppCheckExchangeError)
    /// The simulated device's own cryptography failed.
    case device(OpenSSLError)

    public var code: String {
        switch self {
        case .exchange(let e): e.code
        case .device: "deviceFailure"
        }
    }

    public var description: String {
        switch self {
        case .exchange(let e): e.description
        case .device(let e): "simulated device: \(e)"
        }
    }
}

/// The client half of Firebase's App Attest provider on a simulated device, talking to an exchange in process
/// (`AppCheckExchange`) or over HTTP (`RemoteAppCheckExchange`).
///
/// The first token attests the key (challenge → `attestKey(SHA-256(challenge))` → exchange → artifact); later
/// tokens use assertions (challenge → `generateAssertion(SHA-256(artifact ‖ challenge))` → exchange). Only
/// the attestation is the call that reaches Apple's service in the real flow; the fleet simulator models
/// Apple's capacity around `token(from:at:)` when `hasAttested` is false.
public final class SimulatedAppCheckClient: @unchecked Sendable {
    public let key: SimulatedAppAttestKey
    public let appId: String
    private let lock = Lock()
    private var storedArtifact: [UInt8]?

    public init(key: SimulatedAppAttestKey, appId: String) {
        self.key = key
        self.appId = appId
    }

    /// The artifact of the last successful attestation.
    public var artifact: [UInt8]? { lock.withLock { storedArtifact } }
    public var hasAttested: Bool { artifact != nil }

    /// A token: attests on first use, asserts afterwards. `time` is the device's clock (the credential
    /// certificate starts there).
    public func token(from exchange: any AppAttestExchanging, at time: Instant, limitedUse: Bool = false)
        throws(AppCheckClientError) -> AppCheckToken
    {
        if let artifact { return try assert(with: exchange, artifact: artifact, limitedUse: limitedUse) }
        return try attest(with: exchange, at: time, limitedUse: limitedUse)
    }

    /// Attests the key (again, if it was attested before) and keeps the new artifact.
    public func attest(with exchange: any AppAttestExchanging, at time: Instant, limitedUse: Bool = false)
        throws(AppCheckClientError) -> AppCheckToken
    {
        let challenge = try exchanged { () throws(AppCheckExchangeError) in
            try exchange.generateChallenge(appId: appId).challenge
        }
        let attestation: [UInt8]
        do { attestation = try key.attestation(clientDataHash: SHA256.hash(challenge), at: time) } catch {
            throw .device(error)
        }
        let result = try exchanged { () throws(AppCheckExchangeError) in
            try exchange.attest(
                appId: appId, attestation: attestation, keyId: key.keyId, challenge: challenge, limitedUse: limitedUse)
        }
        lock.withLock { storedArtifact = result.artifact }
        return result.token
    }

    private func assert(with exchange: any AppAttestExchanging, artifact: [UInt8], limitedUse: Bool)
        throws(AppCheckClientError) -> AppCheckToken
    {
        let challenge = try exchanged { () throws(AppCheckExchangeError) in
            try exchange.generateChallenge(appId: appId).challenge
        }
        let assertion: [UInt8]
        do { assertion = try key.assertion(clientDataHash: SHA256.hash(artifact + challenge)) } catch {
            throw .device(error)
        }
        return try exchanged { () throws(AppCheckExchangeError) in
            try exchange.exchangeAssertion(
                appId: appId, artifact: artifact, assertion: assertion, challenge: challenge, limitedUse: limitedUse)
        }
    }

    private func exchanged<T>(_ body: () throws(AppCheckExchangeError) -> T) throws(AppCheckClientError) -> T {
        do { return try body() } catch { throw .exchange(error) }
    }
}
