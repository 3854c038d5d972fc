import Crypto
import Glibc
import Platform
import Timekeeping

/// A fresh challenge for one attestation or assertion.
public struct AppAttestChallenge: Hashable, Sendable {
    /// Random bytes with their expiry, authenticated (`ChallengeAuthenticator`); usable once.
    public var challenge: [UInt8]
    public var ttl: Instant.Duration
}

/// An issued App Check token and its lifetime.
public struct AppCheckToken: Hashable, Sendable {
    /// The compact RS256 JWT.
    public var token: String
    public var ttl: Instant.Duration
    public var claims: AppCheckTokenClaims
}

/// The result of a successful attestation exchange.
public struct AttestationExchangeResult: Hashable, Sendable {
    /// Opaque bytes the client keeps and sends with each later assertion.
    public var artifact: [UInt8]
    public var token: AppCheckToken
    public var key: AttestedKey
}

/// Why the exchange refused a request; `code` is specific enough to be a telemetry error class.
public enum AppCheckExchangeError: CodedError, Hashable, Sendable {
    case unknownProject(String)
    case unknownApp(String)
    case unknownMethod(String)
    /// The request is malformed: bad JSON, a missing or unknown field, bad base64.
    case invalidArgument(String)
    case unknownChallenge
    case challengeExpired
    /// The challenge was presented before: a replay.
    case challengeAlreadyUsed
    case attestationRejected(AttestationError)
    case assertionRejected(AssertionError)
    /// No key was attested with this artifact for this app.
    case unknownArtifact
    /// The debug token is not registered for this app.
    case unknownDebugToken
    /// Too many requests from one client in a short time.
    case rateLimited(String)
    /// A remote exchange refused, with its HTTP status and reason code (`RemoteAppCheckExchange`).
    case refused(status: Int, reason: String, message: String)
    case tokenRejected(AppCheckTokenError)
    /// The state or libcrypto failed; retrying may help.
    case unavailable(String)

    public var code: String {
        switch self {
        case .unknownProject: "unknownProject"
        case .unknownApp: "unknownApp"
        case .unknownMethod: "unknownMethod"
        case .invalidArgument: "invalidArgument"
        case .unknownChallenge: "unknownChallenge"
        case .challengeExpired: "challengeExpired"
        case .challengeAlreadyUsed: "challengeAlreadyUsed"
        case .attestationRejected(let e): e.code
        case .assertionRejected(let e): e.code
        case .unknownArtifact: "unknownArtifact"
        case .unknownDebugToken: "unknownDebugToken"
        case .rateLimited: "rateLimited"
        case .refused(_, let reason, _): reason
        case .tokenRejected(let e): e.code
        case .unavailable: "unavailable"
        }
    }

    public var description: String {
        switch self {
        case .unknownProject(let p): "project '\(p)' is not this exchange's project"
        case .unknownApp(let a): "app '\(a)' is not registered for App Attest"
        case .unknownMethod(let m): "unknown method '\(m)'"
        case .invalidArgument(let r): r
        case .unknownChallenge: "the challenge was not issued by this exchange for this app"
        case .challengeExpired: "the challenge expired (challenges live 5 minutes)"
        case .challengeAlreadyUsed: "the challenge was already used (challenges are one-time)"
        case .attestationRejected(let e): "attestation rejected: \(e)"
        case .assertionRejected(let e): "assertion rejected: \(e)"
        case .unknownArtifact: "no attested key has this artifact; attest again"
        case .unknownDebugToken: "the debug token is not registered for this app"
        case .rateLimited(let r): r
        case .refused(let status, _, let message): "the exchange server refused (HTTP \(status)): \(message)"
        case .tokenRejected(let e): "token rejected: \(e)"
        case .unavailable(let r): "App Check state unavailable: \(r)"
        }
    }

    /// The HTTP status Firebase would answer with.
    public var httpStatus: Int {
        switch self {
        case .invalidArgument: 400
        case .unknownProject, .unknownApp, .unknownMethod: 404
        case .rateLimited: 429
        case .refused(let status, _, _): status
        case .unavailable: 503
        default: 403
        }
    }

    /// The google.rpc status name.
    public var rpcStatus: String {
        switch httpStatus {
        case 400: "INVALID_ARGUMENT"
        case 404: "NOT_FOUND"
        case 429: "RESOURCE_EXHAUSTED"
        case 503: "UNAVAILABLE"
        default: "PERMISSION_DENIED"
        }
    }
}

/// Why an exchange could not be set up from its configuration and state.
public struct AppCheckSetupError: Error, Hashable, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

/// The App Check exchange for App Attest, with Firebase's semantics.
///
/// - `generateChallenge`: a challenge that authenticates itself (random bytes and its expiry under an HMAC,
///   `ChallengeAuthenticator`), one-time, valid 5 minutes; issuing it writes nothing.
/// - `exchangeAttestation`: checks the challenge's tag and expiry, verifies the attestation with clientDataHash =
///   SHA-256(challenge), then records the challenge as used and stores the key with counter 0 and a fresh artifact
///   in one durable write, and issues a token.
/// - `exchangeAssertion`: checks the challenge, finds the key by artifact, verifies the assertion with
///   clientDataHash = SHA-256(artifact ‖ challenge), then records the challenge as used and advances the counter
///   in one durable write (atomically), and issues a token.
/// - Tokens are RS256 JWTs with Firebase's claims; limited-use tokens carry a `jti`, live 5 minutes and can be
///   consumed once (`evaluateToken(_:consume:)`).
///
/// A challenge is used up by any attempt, successful or not, so a failed exchange cannot be retried with it.
/// `handle(method:projectId:appId:body:)` serves the same operations as JSON requests and responses.
public final class AppCheckExchange: Sendable {
    public static let challengeTTL: Instant.Duration = .minutes(5)
    public static let limitedUseTTL: Instant.Duration = .minutes(5)
    /// Used challenges and consumed tokens are remembered this long after they expire.
    static let challengeMemory: Instant.Duration = .hours(1)

    public let configuration: AppCheckConfiguration
    public let state: any AppCheckState
    public let tokenVerifier: AppCheckTokenVerifier
    let clock: any Clock
    let random: @Sendable (Int) -> [UInt8]
    private let apps: [String: Registered]
    private let issuer: AppCheckTokenIssuer
    private let challenges: ChallengeAuthenticator
    private let housekeeping = Housekeeping()

    private struct Registered: Sendable {
        var app: AppAttestApp
        var attestation: AttestationVerifier
        var assertion: AssertionVerifier
    }

    /// Sets up the exchange; creates the first signing key if the state has none, and loads the demo
    /// authority's root if an app trusts it (it must then exist in the state).
    public init(
        configuration: AppCheckConfiguration, state: any AppCheckState, clock: any Clock,
        random: @escaping @Sendable (Int) -> [UInt8] = { SecureRandom.bytes($0) }
    ) throws {
        self.configuration = configuration
        self.state = state
        self.clock = clock
        self.random = random
        var demoTrust: TrustAnchors?
        if configuration.apps.contains(where: \.trustsDemoRoot) {
            guard let material = try state.demoAuthority() else {
                throw AppCheckSetupError(
                    "an app trusts the demo root, but the store holds no demo certificate authority")
            }
            guard let root = Certificate(der: material.rootCertificate) else {
                throw AppCheckSetupError("the stored demo root certificate is not DER X.509")
            }
            demoTrust = .apple(and: root)
        }
        var apps: [String: Registered] = [:]
        for app in configuration.apps {
            guard AppAttestApp.tokenTTLRange.contains(app.tokenTTL) else {
                throw AppCheckSetupError("app \(app.appId): token TTL \(app.tokenTTL) is outside 30 minutes ... 7 days")
            }
            let trust = app.trustsDemoRoot ? demoTrust! : .apple
            apps[app.appId] = Registered(
                app: app, attestation: AttestationVerifier(trust: trust),
                assertion: AssertionVerifier(app: app.identity))
        }
        self.apps = apps
        let keys = try AppCheckExchange.loadOrCreateSigningKeys(state: state, now: clock.now())
        // The signing key comes last (see `loadOrCreateSigningKeys`).
        issuer = AppCheckTokenIssuer(key: keys.last!)
        challenges = ChallengeAuthenticator(signingKeys: keys)
        tokenVerifier = AppCheckTokenVerifier(project: configuration.project, keys: keys, appIds: Set(apps.keys))
    }

    /// The signing keys in `state` still published at `now` (a rotation's retired keys drop out at their
    /// retirement), creating one when there are none; the key that signs comes last (see `signingOrder`).
    public static func loadOrCreateSigningKeys(state: any AppCheckState, now: Instant) throws -> [AppCheckSigningKey] {
        var stored = signingOrder(try state.signingKeys(), at: now)
        if stored.isEmpty {
            let key = try AppCheckSigningKey.generate(createdAt: now)
            try state.addSigningKey(StoredSigningKey(kid: key.kid, privateKeyDER: key.privateKeyDER, createdAt: now))
            stored = signingOrder(try state.signingKeys(), at: now)
        }
        return try stored.map { try AppCheckSigningKey(privateKeyDER: $0.privateKeyDER, createdAt: $0.createdAt) }
    }

    /// The keys published at `time`, the signing one last: keys not retired after keys being retired, then by
    /// creation (a rotation may happen within the same clock tick as the key it replaces was made).
    public static func signingOrder<Key: SigningKeyDates>(_ keys: [Key], at time: Instant) -> [Key] {
        keys.filter { $0.isPublished(at: time) }.sorted {
            ($0.retiresAt == nil ? 1 : 0, $0.createdAt.microseconds, $0.kid)
                < ($1.retiresAt == nil ? 1 : 0, $1.createdAt.microseconds, $1.kid)
        }
    }

    /// Rotation: a new signing key signs from now on; the keys it replaces stay in the JWKS (and keep
    /// verifying the tokens they signed) until `now + overlap`. Returns the new key.
    @discardableResult
    public static func rotateSigningKeys(state: any AppCheckState, now: Instant, overlap: Instant.Duration) throws
        -> StoredSigningKey
    {
        let key = try AppCheckSigningKey.generate(createdAt: now)
        let stored = StoredSigningKey(kid: key.kid, privateKeyDER: key.privateKeyDER, createdAt: now)
        try state.rotateSigningKeys(to: stored, retiringOthersAt: now + overlap)
        return stored
    }

    /// The JWKS document with every signing key's public half.
    public func jwks() -> [UInt8] { AppCheckSigningKey.jwksDocument(tokenVerifier.keys) }

    /// `generateAppAttestChallenge`.
    public func generateChallenge(appId: String) throws(AppCheckExchangeError) -> AppAttestChallenge {
        _ = try registered(appId)
        let challenge = challenges.issue(
            appId: appId, expiresAt: clock.now() + Self.challengeTTL, nonce: random(ChallengeAuthenticator.nonceLength))
        return AppAttestChallenge(challenge: challenge, ttl: Self.challengeTTL)
    }

    /// The expiry of `challenge` when this exchange's keys issued it for `appId` and it has not expired at the
    /// clock's instant; whether it was used is the state's to say.
    public func authenticChallengeExpiry(_ challenge: [UInt8], appId: String) throws(AppCheckExchangeError) -> Instant {
        try authenticate(challenge, appId: appId, at: clock.now())
    }

    private func authenticate(_ challenge: [UInt8], appId: String, at now: Instant) throws(AppCheckExchangeError)
        -> Instant
    {
        guard let expiresAt = challenges.expiry(of: challenge, appId: appId) else { throw .unknownChallenge }
        guard now < expiresAt else { throw .challengeExpired }
        return expiresAt
    }

    /// `exchangeAppAttestAttestation`.
    ///
    /// A forged or expired challenge is refused first, writing nothing. The challenge is recorded as used in the
    /// same durable write that saves the key (one commit per exchange), after the verification; a failed
    /// verification still uses the challenge up (a write of its own). A replayed challenge is reported before a
    /// failed verification, as when it was redeemed first.
    public func exchangeAttestation(
        appId: String, attestation: [UInt8], keyId: [UInt8], challenge: [UInt8], limitedUse: Bool = false
    ) throws(AppCheckExchangeError) -> AttestationExchangeResult {
        let app = try registered(appId)
        let now = clock.now()
        let expiresAt = try authenticate(challenge, appId: appId, at: now)
        try purgeIfDue(at: now)
        let key: AttestedKey
        do {
            key = try app.attestation.verify(
                attestation: attestation, keyId: keyId, clientDataHash: SHA256.hash(challenge), app: app.app.identity,
                environment: app.app.environment, at: now)
        } catch {
            try redeem(challenge, appId: appId, expiresAt: expiresAt)
            throw .attestationRejected(error)
        }
        let artifact = random(32)
        let record = AttestedKeyRecord(
            appId: appId, keyId: key.keyId, publicKey: key.publicKey, counter: 0, artifactDigest: SHA256.hash(artifact),
            receipt: key.receipt, environment: key.environment, attestedAt: now)
        try check(try storage { try state.redeemChallenge(challenge, appId: appId, expiresAt: expiresAt, thenSave: record) })
        return AttestationExchangeResult(
            artifact: artifact, token: try issueToken(app.app, at: now, limitedUse: limitedUse), key: key)
    }

    /// `exchangeAppAttestAssertion`.
    ///
    /// A forged or expired challenge is refused first, writing nothing. The challenge is recorded as used in the
    /// same durable write that advances the counter (one commit per exchange), after the verification; an unknown
    /// artifact or a failed verification still uses the challenge up (a write of its own), and a replayed
    /// challenge is reported first, as when it was redeemed first.
    public func exchangeAssertion(
        appId: String, artifact: [UInt8], assertion: [UInt8], challenge: [UInt8], limitedUse: Bool = false
    ) throws(AppCheckExchangeError) -> AppCheckToken {
        let app = try registered(appId)
        let now = clock.now()
        let expiresAt = try authenticate(challenge, appId: appId, at: now)
        try purgeIfDue(at: now)
        guard let record = try storage({ try state.attestedKey(appId: appId, artifactDigest: SHA256.hash(artifact)) })
        else {
            try redeem(challenge, appId: appId, expiresAt: expiresAt)
            throw .unknownArtifact
        }
        var hasher = SHA256.Hasher()
        hasher.update(artifact)
        hasher.update(challenge)
        let counter: UInt32
        do {
            counter = try app.assertion.verify(
                assertion: assertion, clientDataHash: hasher.finish(), publicKey: record.publicKey,
                previousCounter: record.counter)
        } catch {
            try redeem(challenge, appId: appId, expiresAt: expiresAt)
            throw .assertionRejected(error)
        }
        // Signed before the write and released only after it: the request's work is done when it joins its group
        // commit, so a group forms from requests that have finished their work (`CommitAnticipation`), and its
        // callers answer as soon as it syncs. A token whose write fails (a replay racing its original past the
        // counter check above, a store error) is dropped unseen.
        let token = try issueToken(app.app, at: now, limitedUse: limitedUse)
        // Atomic in the state: of two concurrent requests with the same counter, only one wins.
        let (redemption, advanced) = try storage {
            try state.redeemChallenge(
                challenge, appId: appId, expiresAt: expiresAt, thenAdvance: record.keyId, to: counter)
        }
        try check(redemption)
        guard advanced else {
            throw .assertionRejected(.counterNotIncreasing(previous: record.counter, received: counter))
        }
        return token
    }

    /// `exchangeDebugToken`: a debug token registered for the app (`rollout appcheck debug-token add`) gets an
    /// App Check token; any other is refused as a failed verification (403), like Firebase does.
    public func exchangeDebugToken(appId: String, debugToken: String, limitedUse: Bool = false)
        throws(AppCheckExchangeError) -> AppCheckToken
    {
        let app = try registered(appId)
        let now = clock.now()
        guard try storage({ try state.hasDebugToken(appId: appId, digest: SHA256.hash(Array(debugToken.utf8))) }) else {
            throw .unknownDebugToken
        }
        return try issueToken(app.app, at: now, limitedUse: limitedUse)
    }

    /// Verifies a token at the clock's instant; with `consume`, also records it as used (see
    /// `AppCheckTokenVerifier.evaluate(_:at:consumingIn:)`).
    public func evaluateToken(_ token: String, consume: Bool) -> AppCheckTokenReport {
        consume
            ? tokenVerifier.evaluate(token, at: clock.now(), consumingIn: state)
            : tokenVerifier.evaluate(token, at: clock.now())
    }

    private func registered(_ appId: String) throws(AppCheckExchangeError) -> Registered {
        guard let app = apps[appId] else { throw .unknownApp(appId) }
        return app
    }

    private func redeem(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws(AppCheckExchangeError) {
        try check(try storage { try state.redeemChallenge(challenge, appId: appId, expiresAt: expiresAt) })
    }

    /// Forgets expired used challenges and consumed tokens, at most once a minute, on the path that records them.
    private func purgeIfDue(at now: Instant) throws(AppCheckExchangeError) {
        if housekeeping.due(at: now) {
            try storage { try state.purgeExpired(before: now - Self.challengeMemory) }
        }
    }

    private func check(_ redemption: ChallengeRedemption) throws(AppCheckExchangeError) {
        switch redemption {
        case .redeemed: return
        case .expired: throw .challengeExpired
        case .alreadyUsed: throw .challengeAlreadyUsed
        case .unknown: throw .unknownChallenge
        }
    }

    private func issueToken(_ app: AppAttestApp, at now: Instant, limitedUse: Bool) throws(AppCheckExchangeError)
        -> AppCheckToken
    {
        let ttl = limitedUse ? Self.limitedUseTTL : app.tokenTTL
        let claims = AppCheckTokenClaims.firebase(
            project: configuration.project, appId: app.appId, issuedAt: now, ttl: ttl,
            tokenId: limitedUse ? Base64.encodeURL(random(16)) : nil)
        do {
            return AppCheckToken(token: try issuer.token(claims), ttl: ttl, claims: claims)
        } catch {
            throw .unavailable(error.description)
        }
    }

    private func storage<T>(_ body: () throws -> T) throws(AppCheckExchangeError) -> T {
        do { return try body() } catch { throw .unavailable("\(error)") }
    }

    /// Purges expired state at most once a minute of clock time.
    private final class Housekeeping: @unchecked Sendable {
        private let lock = Lock()
        private var last: Instant?
        func due(at now: Instant) -> Bool {
            lock.withLock {
                if let last, now - last < .minutes(1) { return false }
                last = now
                return true
            }
        }
    }
}

extension DemoCertificateAuthority {
    /// The demo authority kept in `state`, generated and stored on first use.
    public static func loadOrCreate(in state: any AppCheckState) throws -> DemoCertificateAuthority {
        if let material = try state.demoAuthority() { return try DemoCertificateAuthority(material: material) }
        let fresh = try DemoCertificateAuthority.generate()
        // Another process may have stored one first; everyone then uses the stored one.
        let stored = try state.saveDemoAuthority(fresh.material)
        return stored == fresh.material ? fresh : try DemoCertificateAuthority(material: stored)
    }
}
