import COpenSSL
import Crypto
import JSON
import Timekeeping

/// An RSA key that signs App Check tokens (RS256), identified by its `kid`.
///
/// Safe to share between threads: each signature uses its own libcrypto context, or `RSA_sign` on the key's RSA
/// structure (which serialises its blinding itself).
public final class AppCheckSigningKey: @unchecked Sendable {
    public let kid: String
    public let createdAt: Instant
    let pkey: OpaquePointer
    /// The key's RSA structure, taken once, for `RSA_sign`: the call `openssl speed rsa2048` times, so a token
    /// costs what the bench's ceiling says. `EVP_DigestSignInit` fetches the signature and digest implementations
    /// from the provider for every token (2.7 µs of a 250 µs signature here, with a lock shared by all threads).
    /// The signature is the same PKCS#1 v1.5 one (deterministic). Nil if libcrypto cannot give it (the EVP path
    /// then signs). Stays in process memory, like `pkey`.
    private let rsa: OpaquePointer?

    /// Generates a 2048-bit key (Firebase's App Check keys are RSA-2048).
    public static func generate(createdAt: Instant) throws(OpenSSLError) -> AppCheckSigningKey {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil) else { throw OpenSSLError.last("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, 2048) == 1,
            EVP_PKEY_keygen(ctx, &key) == 1, let key
        else { throw OpenSSLError.last("RSA key generation") }
        return AppCheckSigningKey(pkey: key, createdAt: createdAt)
    }

    /// Loads a stored key (`privateKeyDER` as written by `privateKeyDER`).
    public convenience init(privateKeyDER der: [UInt8], createdAt: Instant) throws(OpenSSLError) {
        let key = try OpenSSL.privateKey(der: der)
        guard EVP_PKEY_is_a(key, "RSA") == 1 else {
            EVP_PKEY_free(key)
            throw OpenSSLError(operation: "load signing key", reason: "not an RSA key")
        }
        self.init(pkey: key, createdAt: createdAt)
    }

    /// The JWT header this key signs under, `{"alg":"RS256","kid":…,"typ":"JWT"}`, as its base64url segment: the
    /// same for every token the key signs, so written once.
    let headerSegment: String

    private init(pkey: OpaquePointer, createdAt: Instant) {
        self.pkey = pkey
        self.createdAt = createdAt
        // The kid is derived from the public key, so the same key always has the same id.
        kid = Base64.encodeURL(SHA256.hash(OpenSSL.publicKeyDER(pkey)).prefix(12))
        headerSegment = Base64.encodeURL(JSONWriter().bytes(AppCheckSigningKey.header(kid: kid)))
        rsa = EVP_PKEY_get1_RSA(pkey)
        if rsa == nil { ERR_clear_error() }
    }

    /// The standard header of a token signed by the key `kid`.
    static func header(kid: String) -> JSONValue { ["alg": "RS256", "kid": .string(kid), "typ": "JWT"] }

    deinit {
        if let rsa { RSA_free(rsa) }
        EVP_PKEY_free(pkey)
    }

    public var privateKeyDER: [UInt8] { OpenSSL.privateKeyDER(pkey) }

    /// The public key as a JWK: `{kty: RSA, use: sig, alg: RS256, kid, n, e}` (n and e base64url, unpadded).
    public var jwk: [String: String] {
        [
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": Base64.encodeURL(parameter("n")),
            "e": Base64.encodeURL(parameter("e")),
        ]
    }

    private func parameter(_ name: String) -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(pkey, name, &bn) == 1, let bn else { return [] }
        defer { BN_free(bn) }
        var out = [UInt8](repeating: 0, count: (Int(BN_num_bits(bn)) + 7) / 8)
        BN_bn2bin(bn, &out)
        return out
    }

    /// RS256: RSASSA-PKCS1-v1_5 with SHA-256 over `message`.
    func sign(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        guard let rsa else { return try OpenSSL.digestSign(pkey, message: message) }
        let digest = SHA256.hash(message)
        var out = [UInt8](repeating: 0, count: Int(RSA_size(rsa)))
        var length: UInt32 = 0
        guard RSA_sign(NID_sha256, digest, UInt32(digest.count), &out, &length, rsa) == 1 else {
            throw OpenSSLError.last("RSA_sign")
        }
        return Array(out.prefix(Int(length)))
    }

    /// The same signature through `EVP_DigestSign` (tests: both paths agree).
    func signThroughEVP(_ message: [UInt8]) throws(OpenSSLError) -> [UInt8] {
        try OpenSSL.digestSign(pkey, message: message)
    }
    func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        OpenSSL.digestVerify(pkey, signature: signature, message: message)
    }
}

/// The claims of an App Check token, as Firebase writes them.
public struct AppCheckTokenClaims: Hashable, Sendable {
    /// `https://firebaseappcheck.googleapis.com/<projectNumber>`.
    public var issuer: String
    /// `["projects/<number>", "projects/<id>"]`.
    public var audience: [String]
    /// The Firebase app id.
    public var subject: String
    public var issuedAt: Int64
    public var expiresAt: Int64
    /// Present on limited-use tokens only.
    public var tokenId: String?

    public init(
        issuer: String, audience: [String], subject: String, issuedAt: Int64, expiresAt: Int64, tokenId: String?
    ) {
        self.issuer = issuer
        self.audience = audience
        self.subject = subject
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.tokenId = tokenId
    }

    public static let issuerPrefix = "https://firebaseappcheck.googleapis.com/"

    /// The claims Firebase issues for `appId` in a project.
    public static func firebase(
        project: AppCheckProject, appId: String, issuedAt: Instant, ttl: Instant.Duration, tokenId: String?
    ) -> AppCheckTokenClaims {
        AppCheckTokenClaims(
            issuer: issuerPrefix + project.number, audience: ["projects/\(project.number)", "projects/\(project.id)"],
            subject: appId, issuedAt: issuedAt.seconds, expiresAt: (issuedAt + ttl).seconds, tokenId: tokenId)
    }

    /// The payload, members in Firebase's order.
    var json: JSONValue {
        var o = JSONObject([
            ("sub", .string(subject)), ("aud", .array(audience.map { .string($0) })), ("iss", .string(issuer)),
            ("exp", .number(JSONNumber(expiresAt))), ("iat", .number(JSONNumber(issuedAt))),
        ])
        if let tokenId { o["jti"] = .string(tokenId) }
        return .object(o)
    }
}

/// A Firebase project as App Check tokens name it.
public struct AppCheckProject: Hashable, Sendable {
    /// The project number (digits), used in `iss`.
    public var number: String
    /// The project id, e.g. `rollout-demo`.
    public var id: String
    public init(number: String, id: String) {
        self.number = number
        self.id = id
    }
}

/// Issues App Check tokens: RS256 JWTs with the header `{alg, kid, typ}` and Firebase's claims.
public struct AppCheckTokenIssuer: Sendable {
    public let key: AppCheckSigningKey
    public init(key: AppCheckSigningKey) { self.key = key }

    /// The signed compact JWT for `claims`.
    public func token(_ claims: AppCheckTokenClaims) throws(OpenSSLError) -> String {
        try token(payload: JSONWriter().bytes(claims.json))
    }

    /// A JWT over any payload bytes (and header, by default this key's), signed the same way: for tests and the
    /// fuzz target, which need validly signed claims that Firebase never writes.
    package func token(payload: [UInt8], header: [UInt8]? = nil) throws(OpenSSLError) -> String {
        let input = (header.map { Base64.encodeURL($0) } ?? key.headerSegment) + "." + Base64.encodeURL(payload)
        return input + "." + Base64.encodeURL(try key.sign(Array(input.utf8)))
    }
}

/// Why an App Check token was rejected.
public enum AppCheckTokenError: CodedError, Hashable, Sendable {
    case malformedToken(String)
    case unsupportedHeader(String)
    /// A claim is missing, of the wrong type or out of range; names the claim.
    case invalidClaim(claim: String, reason: String)
    case unknownSigningKey(String)
    /// The key was rotated out of the JWKS at this instant (it stays stored until purged).
    case retiredSigningKey(String, at: Instant)
    case signatureInvalid
    case wrongIssuer(String)
    case wrongAudience([String])
    case unknownApp(String)
    case expired(expiresAt: Int64, at: Instant)
    case issuedInFuture(issuedAt: Int64, at: Instant)
    case alreadyConsumed
    /// The replay record could not be read or written.
    case stateUnavailable(String)

    public var code: String {
        switch self {
        case .malformedToken: "malformedToken"
        case .unsupportedHeader: "unsupportedHeader"
        case .invalidClaim: "invalidClaim"
        case .unknownSigningKey: "unknownSigningKey"
        case .retiredSigningKey: "retiredSigningKey"
        case .signatureInvalid: "signatureInvalid"
        case .wrongIssuer: "wrongIssuer"
        case .wrongAudience: "wrongAudience"
        case .unknownApp: "unknownApp"
        case .expired: "expired"
        case .issuedInFuture: "issuedInFuture"
        case .alreadyConsumed: "alreadyConsumed"
        case .stateUnavailable: "stateUnavailable"
        }
    }

    public var description: String {
        switch self {
        case .malformedToken(let r): "malformed token: \(r)"
        case .unsupportedHeader(let r): "unsupported token header: \(r)"
        case .invalidClaim(let c, let r): "claim \(c): \(r)"
        case .unknownSigningKey(let k): "no signing key with kid '\(k)' in this store"
        case .retiredSigningKey(let k, let at):
            "the signing key with kid '\(k)' was retired at \(at.iso8601) (rotated out of the JWKS); tokens it signed are no longer accepted"
        case .signatureInvalid: "the RS256 signature does not verify"
        case .wrongIssuer(let i): "issuer '\(i)' is not this project's App Check issuer"
        case .wrongAudience(let a): "audience \(a) does not name this project"
        case .unknownApp(let s): "subject '\(s)' is not an app registered for App Check in this store"
        case .expired(let e, let at): "expired at \(Instant(seconds: e).iso8601) (now \(at.iso8601))"
        case .issuedInFuture(let i, let at): "issued at \(Instant(seconds: i).iso8601), after now (\(at.iso8601))"
        case .alreadyConsumed: "this token was already consumed (replay)"
        case .stateUnavailable(let r): "the replay record is unavailable: \(r)"
        }
    }
}

public typealias AppCheckTokenReport = VerificationReport<AppCheckTokenClaims, AppCheckTokenError>

/// Verifies App Check tokens against a project's signing keys: header, signature, issuer, audience, subject,
/// expiry. Replay protection for limited-use tokens needs the store and lives in `AppCheckExchange`.
public struct AppCheckTokenVerifier: Sendable {
    public let project: AppCheckProject
    public let keys: [AppCheckSigningKey]
    /// When a rotation takes a key out of the JWKS (by kid). From then on it verifies nothing, as for any verifier
    /// that fetches the JWKS (firebase-admin), even while the store still holds it until the purge.
    public let retirements: [String: Instant]
    /// Registered app ids; the subject must be one of them.
    public let appIds: Set<String>
    /// Allowed clock skew for `iat`.
    public var leeway: Instant.Duration = .seconds(Int64(60))

    public init(
        project: AppCheckProject, keys: [AppCheckSigningKey], appIds: Set<String>, retirements: [String: Instant] = [:]
    ) {
        self.project = project
        self.keys = keys
        self.appIds = appIds
        self.retirements = retirements
    }

    /// The longest token accepted, in bytes (Firebase's are about 900); anything longer is refused unparsed.
    public static let maximumTokenLength = 16 * 1024

    /// The latest time claim accepted: 9999-12-31T23:59:59Z, so every claim converts to an `Instant` exactly.
    public static let latestTime: Int64 = 253_402_300_799

    /// Runs every check and records each outcome.
    ///
    /// The order protects the claims: the three segments are decoded strictly (base64url without padding, JSON
    /// objects), the header must name RS256 and a kid, and the signature must verify before any claim is read.
    /// An unsigned or forged token is therefore refused without its claims being looked at; the claim checks
    /// are reported as not run.
    public func evaluate(_ token: String, at now: Instant) -> AppCheckTokenReport { run(token, at: now).report }

    private func run(_ token: String, at now: Instant) -> (report: AppCheckTokenReport, signature: [UInt8]) {
        var log = CheckLog<AppCheckTokenError>(detailed: true)
        let names = [
            ("header", "header"), ("signature", "signature"), ("claims", "claims"), ("issuer", "issuer"),
            ("audience", "audience"), ("subject", "subject"), ("expiry", "expiry"),
        ]
        func stop(_ e: AppCheckTokenError, at check: String, skipping why: String) -> AppCheckTokenReport {
            log.fail(check, check, e)
            let after = check == "format" ? names : Array(names.drop { $0.0 != check }.dropFirst())
            for (n, t) in after { log.skip(n, t, why) }
            return AppCheckTokenReport(checks: log.checks, result: .failure(e))
        }
        guard token.utf8.count <= Self.maximumTokenLength else {
            let e = AppCheckTokenError.malformedToken(
                "the token is \(token.utf8.count) bytes, more than \(Self.maximumTokenLength)")
            return (stop(e, at: "format", skipping: "not run: the token could not be decoded"), [])
        }
        // Split as bytes: a `String` split walks grapheme clusters, a tenth of a consume's CPU. (A token is ASCII;
        // a byte the split and a `Character` split would see differently is not base64url, so it fails either way.)
        let bytes = Array(token.utf8)
        let dots = bytes.indices.filter { bytes[$0] == UInt8(ascii: ".") }
        guard dots.count == 2, let headerBytes = Base64.decode(bytes: bytes[..<dots[0]], .jwt),
            let payloadBytes = Base64.decode(bytes: bytes[(dots[0] + 1)..<dots[1]], .jwt),
            let signature = Base64.decode(bytes: bytes[(dots[1] + 1)...], .jwt),
            let header = (try? JSONParser().parse(headerBytes))?.objectValue,
            let payload = (try? JSONParser().parse(payloadBytes))?.objectValue
        else {
            let e = AppCheckTokenError.malformedToken("not three base64url parts holding JSON objects")
            return (stop(e, at: "format", skipping: "not run: the token could not be decoded"), [])
        }
        log.pass("format", "format", "three base64url segments, header and payload JSON objects")

        let alg = header["alg"]?.stringValue
        let typ = header["typ"]?.stringValue
        let kid = header["kid"]?.stringValue
        let headerError: AppCheckTokenError? =
            alg != "RS256"
            ? .unsupportedHeader("alg is \(alg ?? "missing"), not RS256")
            : typ != "JWT"
                ? .unsupportedHeader("typ is \(typ ?? "missing"), not JWT")
                : kid == nil ? .unsupportedHeader("no kid") : nil
        if let headerError {
            return (stop(headerError, at: "header", skipping: "not run: the header is not Firebase's"), signature)
        }
        log.pass("header", "header", "RS256, kid \(kid ?? "")")

        let input = Array(bytes[..<dots[1]])
        guard let kid, let key = keys.first(where: { $0.kid == kid }) else {
            let e = AppCheckTokenError.unknownSigningKey(kid ?? "")
            return (stop(e, at: "signature", skipping: "not run: the signature is not verified"), signature)
        }
        if let retired = retirements[kid], retired <= now {
            let e = AppCheckTokenError.retiredSigningKey(kid, at: retired)
            return (stop(e, at: "signature", skipping: "not run: the signature is not verified"), signature)
        }
        guard key.isValidSignature(signature, for: input) else {
            return (
                stop(.signatureInvalid, at: "signature", skipping: "not run: the signature is not verified"), signature
            )
        }
        log.pass("signature", "signature", "RS256 with key \(kid)")

        let claims: AppCheckTokenClaims
        do {
            claims = try AppCheckTokenVerifier.claims(payload)
        } catch {
            return (stop(error, at: "claims", skipping: "not run: the claims could not be read"), signature)
        }
        log.pass("claims", "claims", claims.tokenId.map { "limited-use token, jti \($0)" } ?? "token (not limited-use)")

        let issuer = AppCheckTokenClaims.issuerPrefix + project.number
        log.check("issuer", "issuer", claims.issuer == issuer ? nil : .wrongIssuer(claims.issuer), passed: issuer)
        let audienceOK =
            claims.audience.contains("projects/\(project.number)") || claims.audience.contains("projects/\(project.id)")
        log.check(
            "audience", "audience", audienceOK ? nil : .wrongAudience(claims.audience),
            passed: claims.audience.joined(separator: ", "))
        log.check(
            "subject", "subject", appIds.contains(claims.subject) ? nil : .unknownApp(claims.subject),
            passed: claims.subject)
        // Both times are within 1970 ... 9999 (checked in `claims`), so these instants are exact.
        let expiresAt = Instant(seconds: claims.expiresAt)
        let expiryError: AppCheckTokenError? =
            now >= expiresAt
            ? .expired(expiresAt: claims.expiresAt, at: now)
            : Instant(seconds: claims.issuedAt) - leeway > now
                ? .issuedInFuture(issuedAt: claims.issuedAt, at: now) : nil
        log.check("expiry", "expiry", expiryError, passed: "valid until \(expiresAt.iso8601)")
        if let failure = log.firstFailure {
            return (AppCheckTokenReport(checks: log.checks, result: .failure(failure)), signature)
        }
        return (AppCheckTokenReport(checks: log.checks, result: .success(claims)), signature)
    }

    /// Verifies and then consumes the token in `state`: the `replay` check fails from the second time on.
    ///
    /// A limited-use token is consumed by its `jti`; a token without one by the SHA-256 of its signature bytes
    /// (decoded canonically, so no re-spelling of the text gives a new key), so any token can be checked for
    /// replay (Firebase's `verifyAppCheckToken` accepts any token too).
    public func evaluate(_ token: String, at now: Instant, consumingIn state: any AppCheckState) -> AppCheckTokenReport
    {
        var (report, signature) = run(token, at: now)
        guard case .success(let claims) = report.result else {
            report.checks.append(
                CheckRecord(
                    name: "replay", title: "replay", outcome: .skipped, detail: "not run: the token is not valid"))
            return report
        }
        let id = Self.replayKey(claims: claims, signature: signature)
        let failure: AppCheckTokenError?
        do {
            failure =
                try state.consumeToken(id: id, expiresAt: Instant(seconds: claims.expiresAt)) ? nil : .alreadyConsumed
        } catch {
            failure = .stateUnavailable("\(error)")
        }
        if let failure {
            report.checks.append(
                CheckRecord(
                    name: "replay", title: "replay", outcome: .failed, detail: failure.description,
                    errorCode: failure.code))
            report.result = .failure(failure)
        } else {
            report.checks.append(
                CheckRecord(name: "replay", title: "replay", outcome: .passed, detail: "first use; now consumed"))
        }
        return report
    }

    /// The id a token is consumed under: its `jti`, else `sig-sha256:` and the SHA-256 of its signature bytes.
    static func replayKey(claims: AppCheckTokenClaims, signature: [UInt8]) -> String {
        claims.tokenId ?? "sig-sha256:" + SHA256.hex(signature)
    }

    /// The verifier for the project, apps and signing keys kept in `state`.
    public init(state: any AppCheckState) throws {
        guard let configuration = try state.configuration() else {
            throw AppCheckSetupError("no App Check configuration (project and apps) in this store")
        }
        let stored = try state.signingKeys()
        guard !stored.isEmpty else {
            throw AppCheckSetupError("no App Check signing keys in this store: no token was ever issued from it")
        }
        let keys = try stored.map { try AppCheckSigningKey(privateKeyDER: $0.privateKeyDER, createdAt: $0.createdAt) }
        var retirements: [String: Instant] = [:]
        for (key, record) in zip(keys, stored) { if let at = record.retiresAt { retirements[key.kid] = at } }
        self.init(
            project: configuration.project, keys: keys, appIds: Set(configuration.apps.map(\.appId)),
            retirements: retirements)
    }

    /// Reads Firebase's claims; every missing, mistyped or out-of-range claim is an error naming it.
    static func claims(_ p: JSONObject) throws(AppCheckTokenError) -> AppCheckTokenClaims {
        func string(_ name: String) throws(AppCheckTokenError) -> String {
            guard let v = p[name] else { throw .invalidClaim(claim: name, reason: "missing") }
            guard let s = v.stringValue else {
                throw .invalidClaim(claim: name, reason: "is \(v.kindName), not a string")
            }
            return s
        }
        /// A NumericDate: a whole number of seconds from 1970 to 9999 (Firebase writes integers).
        func time(_ name: String) throws(AppCheckTokenError) -> Int64 {
            guard let v = p[name] else { throw .invalidClaim(claim: name, reason: "missing") }
            guard let n = v.numberValue else {
                throw .invalidClaim(claim: name, reason: "is \(v.kindName), not a number")
            }
            let text = n.description
            let shown = text.count > 40 ? String(text.prefix(40)) + "…" : text
            guard let seconds = n.int64 else {
                let whole = text.allSatisfy { $0.isASCII && ($0.isNumber || $0 == "-") }
                throw .invalidClaim(
                    claim: name,
                    reason: whole
                        ? "\(shown) is outside 0 ... \(Self.latestTime) (1970 to 9999)"
                        : "\(shown) is not a whole number of seconds")
            }
            guard (0...Self.latestTime).contains(seconds) else {
                throw .invalidClaim(claim: name, reason: "\(shown) is outside 0 ... \(Self.latestTime) (1970 to 9999)")
            }
            return seconds
        }
        let audience: [String]
        switch p["aud"] {
        case .string(let a)?: audience = [a]
        case .array(let items)?:
            let strings = items.compactMap(\.stringValue)
            guard strings.count == items.count, !strings.isEmpty else {
                throw .invalidClaim(claim: "aud", reason: "is not a non-empty array of strings")
            }
            audience = strings
        case let other?: throw .invalidClaim(claim: "aud", reason: "is \(other.kindName), not a string or an array")
        case nil: throw .invalidClaim(claim: "aud", reason: "missing")
        }
        let sub = try string("sub")
        let iss = try string("iss")
        let iat = try time("iat")
        let exp = try time("exp")
        guard exp > iat else { throw .invalidClaim(claim: "exp", reason: "\(exp) is not after iat \(iat)") }
        let jti: String?
        if p["jti"] == nil {
            jti = nil
        } else {
            jti = try string("jti")
            guard jti?.isEmpty == false else { throw .invalidClaim(claim: "jti", reason: "is empty") }
        }
        return AppCheckTokenClaims(
            issuer: iss, audience: audience, subject: sub, issuedAt: iat, expiresAt: exp, tokenId: jti)
    }
}

extension AppCheckSigningKey {
    /// A JWKS document (`{"keys": [...]}`) for `keys`, sorted by kid, as Firebase serves at `/v1/jwks`.
    public static func jwksDocument(_ keys: [AppCheckSigningKey]) -> [UInt8] {
        let entries = keys.sorted { $0.kid < $1.kid }.map { key -> JSONValue in
            let jwk = key.jwk
            return .object(JSONObject(["kty", "use", "alg", "kid", "n", "e"].map { ($0, JSONValue.string(jwk[$0]!)) }))
        }
        return JSONWriter().bytes(["keys": .array(entries)])
    }
}
