import Crypto
import Glibc
import Platform
import Timekeeping

/// One App Attest key on a simulated device, with Apple's attestation service played by the demo authority.
///
/// Mirrors `DCAppAttestService`: `generateKey` is the initializer (a P-256 key whose keyId is the SHA-256 of its
/// public point), `attestKey` is `attestation(clientDataHash:at:)`, `generateAssertion` is
/// `assertion(clientDataHash:)`. Everything produced is real: the attestation object carries a certificate chain
/// to the demo root, and assertions are ECDSA signatures with a counter that increases by one each time.
/// Cost: one key generation at creation, one ECDSA signature per attestation (the certificate) and per assertion.
public final class SimulatedAppAttestKey: @unchecked Sendable {
    public let app: AppIdentity
    public let environment: AppAttestEnvironment
    /// SHA-256 of the public point; what the app sends as `keyId`.
    public let keyId: [UInt8]
    public let privateKey: P256PrivateKey
    private let authority: DemoCertificateAuthority
    private let lock = Lock()
    private var signCount: UInt32 = 0

    /// A stand-in for Apple's receipt, which chains to a different root and is not verified by the exchange.
    public static let demoReceipt = Array("rollout demo receipt".utf8)

    /// Generates a key for `app`.
    public convenience init(authority: DemoCertificateAuthority, app: AppIdentity, environment: AppAttestEnvironment)
        throws(OpenSSLError)
    {
        self.init(authority: authority, app: app, environment: environment, key: try P256PrivateKey())
    }

    /// Wraps an existing key (to restore a device), with the counter it had reached.
    public init(
        authority: DemoCertificateAuthority, app: AppIdentity, environment: AppAttestEnvironment, key: P256PrivateKey,
        counter: UInt32 = 0
    ) {
        self.authority = authority
        self.app = app
        self.environment = environment
        self.privateKey = key
        self.keyId = SHA256.hash(key.publicPoint)
        self.signCount = counter
    }

    /// The counter of the last assertion (0 before the first).
    public var counter: UInt32 { lock.withLock { signCount } }

    /// An attestation object for `clientDataHash`, with a credential certificate valid from `time` for 3 days.
    public func attestation(clientDataHash: [UInt8], at time: Instant) throws(OpenSSLError) -> [UInt8] {
        let authData = AuthenticatorData.encode(
            rpIdHash: app.rpIdHash, flags: 0x40, signCount: 0,
            attestedCredential: (
                environment.aaguid, keyId, AuthenticatorData.coseKey(uncompressedPoint: privateKey.publicPoint)
            ))
        var hasher = SHA256.Hasher()
        hasher.update(authData)
        hasher.update(clientDataHash)
        let leaf = try authority.credentialCertificate(for: privateKey, nonce: hasher.finish(), at: time)
        return AttestationObject(
            certificates: [leaf.der, authority.intermediate.der], receipt: SimulatedAppAttestKey.demoReceipt,
            authenticatorData: authData
        ).encoded()
    }

    /// An assertion for `clientDataHash`; the counter increases by one.
    public func assertion(clientDataHash: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        let count = lock.withLock { () -> UInt32 in
            signCount += 1
            return signCount
        }
        let authData = AuthenticatorData.encode(rpIdHash: app.rpIdHash, flags: 0x40, signCount: count)
        var hasher = SHA256.Hasher()
        hasher.update(authData)
        hasher.update(clientDataHash)
        let signature = try privateKey.signature(for: hasher.finish())
        return AssertionObject(signature: signature, authenticatorData: authData).encoded()
    }
}
