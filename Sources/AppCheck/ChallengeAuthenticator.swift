import Crypto
import Timekeeping

/// Challenges that prove themselves, so that issuing one writes nothing.
///
/// A challenge is `expiry (8, microseconds, big-endian) ‖ nonce (16 random bytes) ‖ tag (32)`, 56 bytes, the tag
/// being HMAC-SHA256 over the first 24 bytes and the app id under a challenge key (a later format would change the
/// key's label, so that no challenge of one format verifies as the other). Redemption checks the tag
/// and the expiry here, then records the challenge as used in the same durable write that saves the key or
/// advances the counter (`AppCheckState.redeemChallenge`), so one-time use stays exact while issuance costs one
/// HMAC.
///
/// The challenge keys are derived from the token signing keys (HMAC-SHA256 keyed by the private key's DER over a
/// fixed label): they are as secret, sealed and shared as those keys (every `serve` process on a store has them),
/// and they rotate with them. The newest key issues; every published key verifies, and a rotation keeps the old
/// keys published for at least the longest token lifetime (30 minutes or more), longer than a challenge lives.
public struct ChallengeAuthenticator: Sendable {
    static let nonceLength = 16
    static let bodyLength = 8 + nonceLength
    /// The length of every challenge issued.
    public static let length = bodyLength + 32

    /// The keys that verify, the issuing key last.
    private let keys: [[UInt8]]

    /// The authenticator for `signingKeys` in signing order (the signing key last).
    public init(signingKeys: [AppCheckSigningKey]) {
        keys = signingKeys.map { Self.key(derivedFrom: $0.privateKeyDER) }
    }

    static func key(derivedFrom privateKeyDER: [UInt8]) -> [UInt8] {
        HMAC.authenticate(.sha256, key: privateKeyDER, message: Array("rollout App Check challenge key v1".utf8))
    }

    /// A fresh challenge for `appId` that expires at `expiresAt`; `nonce` is 16 random bytes.
    public func issue(appId: String, expiresAt: Instant, nonce: [UInt8]) -> [UInt8] {
        precondition(nonce.count == Self.nonceLength, "a challenge nonce is 16 bytes")
        var body: [UInt8] = []
        withUnsafeBytes(of: expiresAt.microseconds.bigEndian) { body += $0 }
        body += nonce
        return body + Self.tag(body, appId: appId, key: keys.last!)
    }

    /// The expiry of `challenge` when one of the keys issued it for `appId`; nil for anything else (forged,
    /// altered, truncated, for another app, or from a key no longer published).
    public func expiry(of challenge: [UInt8], appId: String) -> Instant? {
        guard challenge.count == Self.length else { return nil }
        let body = Array(challenge.prefix(Self.bodyLength))
        let tag = Array(challenge.suffix(32))
        guard keys.contains(where: { constantTimeEquals(Self.tag(body, appId: appId, key: $0), tag) }) else {
            return nil
        }
        let micros = challenge[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Instant(microseconds: Int64(bitPattern: micros))
    }

    private static func tag(_ body: [UInt8], appId: String, key: [UInt8]) -> [UInt8] {
        HMAC.authenticate(.sha256, key: key, message: body + Array(appId.utf8))
    }
}
