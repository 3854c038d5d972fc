import Crypto
import Glibc
import Platform
import Timekeeping

/// A Firebase app registered for App Attest: its App ID, environment, trust and token lifetime.
public struct AppAttestApp: Hashable, Sendable {
    /// The Firebase app id, e.g. `1:123456789:ios:0123456789abcdef`.
    public var appId: String
    public var identity: AppIdentity
    public var environment: AppAttestEnvironment
    /// Whether credential certificates from the demo authority are accepted (never for a real app).
    public var trustsDemoRoot: Bool
    /// App Check token lifetime: 30 minutes to 7 days (Firebase's bounds), default 1 hour.
    public var tokenTTL: Instant.Duration

    public static let tokenTTLRange = Instant.Duration.minutes(30)...Instant.Duration.days(7)

    public init(
        appId: String, identity: AppIdentity, environment: AppAttestEnvironment, trustsDemoRoot: Bool = false,
        tokenTTL: Instant.Duration = .hours(1)
    ) {
        self.appId = appId
        self.identity = identity
        self.environment = environment
        self.trustsDemoRoot = trustsDemoRoot
        self.tokenTTL = tokenTTL
    }
}

/// The exchange's configuration: the project and its registered apps.
public struct AppCheckConfiguration: Hashable, Sendable {
    public var project: AppCheckProject
    public var apps: [AppAttestApp]
    public init(project: AppCheckProject, apps: [AppAttestApp]) {
        self.project = project
        self.apps = apps
    }
}

/// A key that passed attestation, as stored for its later assertions.
public struct AttestedKeyRecord: Hashable, Sendable {
    public var appId: String
    public var keyId: [UInt8]
    /// The 65-byte uncompressed P-256 point.
    public var publicKey: [UInt8]
    /// The last assertion counter accepted (0 right after attestation).
    public var counter: UInt32
    /// SHA-256 of the artifact handed to the client; the artifact itself is not kept.
    public var artifactDigest: [UInt8]
    public var receipt: [UInt8]
    public var environment: AppAttestEnvironment
    public var attestedAt: Instant

    public init(
        appId: String, keyId: [UInt8], publicKey: [UInt8], counter: UInt32, artifactDigest: [UInt8], receipt: [UInt8],
        environment: AppAttestEnvironment, attestedAt: Instant
    ) {
        self.appId = appId
        self.keyId = keyId
        self.publicKey = publicKey
        self.counter = counter
        self.artifactDigest = artifactDigest
        self.receipt = receipt
        self.environment = environment
        self.attestedAt = attestedAt
    }
}

/// A stored token-signing key.
public struct StoredSigningKey: Hashable, Sendable {
    public var kid: String
    public var privateKeyDER: [UInt8]
    public var createdAt: Instant
    /// When a rotation retires the key: it signs nothing after the rotation and leaves the JWKS at this
    /// instant (nil while it is current).
    public var retiresAt: Instant?
    public init(kid: String, privateKeyDER: [UInt8], createdAt: Instant, retiresAt: Instant? = nil) {
        self.kid = kid
        self.privateKeyDER = privateKeyDER
        self.createdAt = createdAt
        self.retiresAt = retiresAt
    }

    /// Whether the key is still published (and accepted) at `time`.
}

/// A signing key's id and dates: what decides which key signs and which the JWKS publishes.
public protocol SigningKeyDates {
    var kid: String { get }
    var createdAt: Instant { get }
    /// When a rotation retires the key (nil while it is current).
    var retiresAt: Instant? { get }
}

extension SigningKeyDates {
    public func isPublished(at time: Instant) -> Bool { retiresAt.map { time < $0 } ?? true }
}

extension StoredSigningKey: SigningKeyDates {}

/// A signing key as `appcheck keys list` shows it: no private key (what the PostgreSQL viewer role may read).
public struct SigningKeySummary: SigningKeyDates, Hashable, Sendable {
    public var kid: String
    public var createdAt: Instant
    public var retiresAt: Instant?
    public init(kid: String, createdAt: Instant, retiresAt: Instant?) {
        self.kid = kid
        self.createdAt = createdAt
        self.retiresAt = retiresAt
    }
}

/// A debug token as `appcheck debug-token list` shows it: no digest (what the viewer role may read).
public struct DebugTokenSummary: Hashable, Sendable {
    public var appId: String
    public var name: String
    public var createdAt: Instant
    public init(appId: String, name: String, createdAt: Instant) {
        self.appId = appId
        self.name = name
        self.createdAt = createdAt
    }
}

/// A registered debug token (the debug provider, for simulators and CI): only its SHA-256 is kept.
public struct DebugTokenRecord: Hashable, Sendable {
    public var appId: String
    public var digest: [UInt8]
    public var name: String
    public var createdAt: Instant
    public init(appId: String, digest: [UInt8], name: String, createdAt: Instant) {
        self.appId = appId
        self.digest = digest
        self.name = name
        self.createdAt = createdAt
    }
}

/// What happened when a challenge was presented.
public enum ChallengeRedemption: Hashable, Sendable {
    /// Issued for this app, unexpired, and now used up.
    case redeemed
    case expired
    /// Presented before: a replay.
    case alreadyUsed
    /// Never issued by this exchange (forged, altered, or for another app).
    case unknown
}

/// Where the exchange keeps its state: used challenges, attested keys and counters, consumed token ids, signing
/// keys, the demo authority and the configuration.
///
/// Issued challenges are not kept: they authenticate themselves (`ChallengeAuthenticator`); the state records
/// the ones redeemed, until they expire.
///
/// Every method that changes state is atomic and durable when it returns (the SQLite implementation commits a
/// transaction with synchronous=FULL), so that a challenge is never redeemed twice and a counter never moves
/// back, even across processes. Implementations never read the clock; callers pass the instants.
public protocol AppCheckState: AnyObject, Sendable {
    func configuration() throws -> AppCheckConfiguration?
    func saveConfiguration(_ configuration: AppCheckConfiguration) throws

    /// Records an authentic, unexpired challenge (checked by the caller) as used: `.redeemed` the first time,
    /// `.alreadyUsed` after; the record is kept until `expiresAt` has passed and it is purged.
    func redeemChallenge(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption

    /// Inserts or replaces the key (a re-attestation keeps the higher counter and takes the new artifact).
    func saveAttestedKey(_ key: AttestedKeyRecord) throws
    func attestedKey(appId: String, artifactDigest: [UInt8]) throws -> AttestedKeyRecord?
    /// Stores `counter` only if it is greater than the stored one; false otherwise (a replay or a race lost).
    func advanceCounter(appId: String, keyId: [UInt8], to counter: UInt32) throws -> Bool

    /// Records a token id as consumed; true the first time, false when it was consumed before.
    func consumeToken(id: String, expiresAt: Instant) throws -> Bool

    /// Every stored signing key, retired or not, oldest first.
    func signingKeys() throws -> [StoredSigningKey]
    /// The same without private keys, for listing (a store may read only the public columns).
    func signingKeySummaries() throws -> [SigningKeySummary]
    func addSigningKey(_ key: StoredSigningKey) throws
    /// Rotation in one transaction: adds `key` and sets `retiresAt` on every other key not retired yet.
    func rotateSigningKeys(to key: StoredSigningKey, retiringOthersAt retiresAt: Instant) throws

    func addDebugToken(_ token: DebugTokenRecord) throws
    func debugTokens() throws -> [DebugTokenRecord]
    /// The same without digests, for listing (a store may read only the public columns).
    func debugTokenSummaries() throws -> [DebugTokenSummary]
    /// Whether `digest` (SHA-256 of a debug token) is registered for `appId`.
    func hasDebugToken(appId: String, digest: [UInt8]) throws -> Bool
    /// Removes the debug tokens of `appId` named `name`; returns how many there were.
    func removeDebugToken(appId: String, name: String) throws -> Int

    func demoAuthority() throws -> DemoCertificateAuthority.Material?
    /// Stores the material unless one is already stored; returns whichever is stored afterwards.
    func saveDemoAuthority(_ material: DemoCertificateAuthority.Material) throws -> DemoCertificateAuthority.Material

    /// Forgets used challenges and consumed token ids that expired before `time`, and signing keys retired before it.
    func purgeExpired(before time: Instant) throws

    /// `redeemChallenge`, and when it redeemed, `advanceCounter` in the same durable write (one commit for an
    /// assertion exchange); the counter is not touched otherwise. Returns the redemption and whether the counter
    /// advanced.
    func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenAdvance keyId: [UInt8], to counter: UInt32
    ) throws -> (ChallengeRedemption, advanced: Bool)

    /// `redeemChallenge`, and when it redeemed, `saveAttestedKey` in the same durable write (one commit for an
    /// attestation exchange); nothing is saved otherwise.
    func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenSave key: AttestedKeyRecord
    ) throws -> ChallengeRedemption
}

extension AppCheckState {
    /// Two writes, one after the other: each durable; a crash between them leaves the challenge used and the
    /// counter where it was, which no answered request relied on.
    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenAdvance keyId: [UInt8], to counter: UInt32
    ) throws -> (ChallengeRedemption, advanced: Bool) {
        let r = try redeemChallenge(challenge, appId: appId, expiresAt: expiresAt)
        guard r == .redeemed else { return (r, false) }
        return (r, try advanceCounter(appId: appId, keyId: keyId, to: counter))
    }

    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenSave key: AttestedKeyRecord
    ) throws -> ChallengeRedemption {
        let r = try redeemChallenge(challenge, appId: appId, expiresAt: expiresAt)
        if r == .redeemed { try saveAttestedKey(key) }
        return r
    }
}

/// The state in memory, for tests and for a simulation that needs no persistence.
public final class InMemoryAppCheckState: AppCheckState, @unchecked Sendable {
    private let lock = Lock()
    private var config: AppCheckConfiguration?
    /// Used challenges and their expiry.
    private var usedChallenges: [[UInt8]: Instant] = [:]
    private var keys: [String: AttestedKeyRecord] = [:]
    private var byArtifact: [[UInt8]: String] = [:]
    private var consumed: [String: Instant] = [:]
    private var signing: [StoredSigningKey] = []
    private var debug: [DebugTokenRecord] = []
    private var demo: DemoCertificateAuthority.Material?

    public init() {}

    private static func slot(_ appId: String, _ keyId: [UInt8]) -> String { appId + "/" + Hex.encode(keyId) }

    public func configuration() -> AppCheckConfiguration? { lock.withLock { config } }
    public func saveConfiguration(_ configuration: AppCheckConfiguration) { lock.withLock { config = configuration } }

    public func redeemChallenge(_ challenge: [UInt8], appId: String, expiresAt: Instant) -> ChallengeRedemption {
        lock.withLock {
            if usedChallenges[challenge] != nil { return .alreadyUsed }
            usedChallenges[challenge] = expiresAt
            return .redeemed
        }
    }

    public func saveAttestedKey(_ key: AttestedKeyRecord) {
        lock.withLock {
            let slot = Self.slot(key.appId, key.keyId)
            var record = key
            if let old = keys[slot] {
                record.counter = max(old.counter, key.counter)
                byArtifact[old.artifactDigest] = nil
            }
            keys[slot] = record
            byArtifact[key.artifactDigest] = slot
        }
    }

    public func attestedKey(appId: String, artifactDigest: [UInt8]) -> AttestedKeyRecord? {
        lock.withLock {
            guard let slot = byArtifact[artifactDigest], let k = keys[slot], k.appId == appId else { return nil }
            return k
        }
    }

    public func advanceCounter(appId: String, keyId: [UInt8], to counter: UInt32) -> Bool {
        lock.withLock {
            let slot = Self.slot(appId, keyId)
            guard let k = keys[slot], counter > k.counter else { return false }
            keys[slot]!.counter = counter
            return true
        }
    }

    public func consumeToken(id: String, expiresAt: Instant) -> Bool {
        lock.withLock {
            guard consumed[id] == nil else { return false }
            consumed[id] = expiresAt
            return true
        }
    }

    public func signingKeys() -> [StoredSigningKey] { lock.withLock { signing } }
    public func addSigningKey(_ key: StoredSigningKey) {
        lock.withLock { if !signing.contains(where: { $0.kid == key.kid }) { signing.append(key) } }
    }
    public func rotateSigningKeys(to key: StoredSigningKey, retiringOthersAt retiresAt: Instant) {
        lock.withLock {
            for i in signing.indices where signing[i].retiresAt == nil && signing[i].kid != key.kid {
                signing[i].retiresAt = retiresAt
            }
            if !signing.contains(where: { $0.kid == key.kid }) { signing.append(key) }
        }
    }

    public func addDebugToken(_ token: DebugTokenRecord) {
        lock.withLock { if !debug.contains(where: { $0.digest == token.digest }) { debug.append(token) } }
    }
    public func debugTokens() -> [DebugTokenRecord] { lock.withLock { debug } }
    public func hasDebugToken(appId: String, digest: [UInt8]) -> Bool {
        lock.withLock { debug.contains { $0.appId == appId && $0.digest == digest } }
    }
    public func removeDebugToken(appId: String, name: String) -> Int {
        lock.withLock {
            let before = debug.count
            debug.removeAll { $0.appId == appId && $0.name == name }
            return before - debug.count
        }
    }

    public func demoAuthority() -> DemoCertificateAuthority.Material? { lock.withLock { demo } }
    public func saveDemoAuthority(_ material: DemoCertificateAuthority.Material) -> DemoCertificateAuthority.Material {
        lock.withLock {
            if let demo { return demo }
            demo = material
            return material
        }
    }

    public func purgeExpired(before time: Instant) {
        lock.withLock {
            usedChallenges = usedChallenges.filter { $0.value >= time }
            consumed = consumed.filter { $0.value >= time }
            signing = signing.filter { $0.retiresAt.map { $0 >= time } ?? true }
        }
    }
}

extension AppCheckState {
    /// By default, from the full records.
    public func signingKeySummaries() throws -> [SigningKeySummary] {
        try signingKeys().map { SigningKeySummary(kid: $0.kid, createdAt: $0.createdAt, retiresAt: $0.retiresAt) }
    }

    public func debugTokenSummaries() throws -> [DebugTokenSummary] {
        try debugTokens().map { DebugTokenSummary(appId: $0.appId, name: $0.name, createdAt: $0.createdAt) }
    }
}

/// One request's change to the exchange's per-request state, as a store that group-commits them (`GroupCommit` in
/// StoreSupport) queues it: the vocabulary the SQLite and PostgreSQL implementations share.
package enum AppCheckPerRequestWrite: Sendable {
    case redeemChallenge([UInt8], appId: String, expiresAt: Instant)
    case saveAttestedKey(AttestedKeyRecord)
    case advanceCounter(appId: String, keyId: [UInt8], counter: UInt32)
    case consumeToken(id: String, expiresAt: Instant)
    /// A redemption and, when it redeemed, a counter's advance (an assertion exchange's one write).
    case redeemThenAdvance([UInt8], appId: String, expiresAt: Instant, keyId: [UInt8], counter: UInt32)
    /// A redemption and, when it redeemed, a key saved (an attestation exchange's one write).
    case redeemThenSave([UInt8], appId: String, expiresAt: Instant, key: AttestedKeyRecord)
}

/// What one `AppCheckPerRequestWrite` decided.
package enum AppCheckPerRequestOutcome: Sendable {
    case done
    case redemption(ChallengeRedemption)
    case changed(Bool)
    case redeemedThen(ChallengeRedemption, Bool)
}

