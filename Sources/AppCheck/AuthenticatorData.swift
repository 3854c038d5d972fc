import Crypto

/// The App Attest environment an app is built for, which decides the aaguid Apple writes.
public enum AppAttestEnvironment: String, Hashable, Sendable, CaseIterable {
    case development
    case production

    /// `appattestdevelop` for development; `appattest` followed by seven zero bytes for production.
    public var aaguid: [UInt8] {
        switch self {
        case .development: Array("appattestdevelop".utf8)
        case .production: Array("appattest".utf8) + [UInt8](repeating: 0, count: 7)
        }
    }

    /// The environment whose aaguid this is, if any.
    public init?(aaguid: [UInt8]) {
        guard let e = AppAttestEnvironment.allCases.first(where: { $0.aaguid == aaguid }) else { return nil }
        self = e
    }
}

/// An app as App Attest names it: the team identifier and the bundle identifier.
public struct AppIdentity: Hashable, Sendable, CustomStringConvertible {
    public var teamId: String
    public var bundleId: String
    public init(teamId: String, bundleId: String) {
        self.teamId = teamId
        self.bundleId = bundleId
    }

    /// `TEAMID.bundle.id`, the App ID whose SHA-256 is the rpIdHash.
    public var appId: String { "\(teamId).\(bundleId)" }
    public var rpIdHash: [UInt8] { SHA256.hash(appId) }
    public var description: String { appId }
}

/// WebAuthn authenticator data as App Attest writes it.
///
/// `rpIdHash(32) · flags(1) · signCount(4, big-endian)`, then in an attestation the attested credential data:
/// `aaguid(16) · credentialIdLength(2) · credentialId · COSE key`, then optional extension bytes. The flags are
/// not trusted for the layout: real devices append extension bytes with the extension flag clear, and the
/// nonce covers every byte anyway.
public struct AuthenticatorData: Hashable, Sendable {
    public var bytes: [UInt8]
    public var rpIdHash: [UInt8]
    public var flags: UInt8
    public var signCount: UInt32

    /// Parses the 37-byte fixed part (an assertion's authenticator data may carry more, which is ignored).
    public init(_ bytes: [UInt8]) throws(ParseError) {
        guard bytes.count >= 37 else { throw ParseError("authenticator data is \(bytes.count) bytes, shorter than 37") }
        self.bytes = bytes
        rpIdHash = Array(bytes[0..<32])
        flags = bytes[32]
        signCount = UInt32(bytes[33]) << 24 | UInt32(bytes[34]) << 16 | UInt32(bytes[35]) << 8 | UInt32(bytes[36])
    }

    /// Why authenticator data could not be read.
    public struct ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// The attested credential data that follows the fixed part in an attestation.
    public struct AttestedCredential: Hashable, Sendable {
        public var aaguid: [UInt8]
        public var credentialId: [UInt8]
        /// The credential public key as a COSE map.
        public var publicKey: CBOR
        /// Bytes after the COSE key (extensions); accepted unparsed.
        public var extensionBytes: Int

        /// The COSE key as a 65-byte uncompressed P-256 point, when it is one: kty EC2 (2), crv P-256 (1), x and
        /// y of 32 bytes, and alg ES256 (-7) if an alg is given (RFC 9053 §7.1.1); nil for any other key.
        public var uncompressedPoint: [UInt8]? {
            guard publicKey[1]?.integer == 2, publicKey[-1]?.integer == 1, let x = publicKey[-2]?.byteString,
                let y = publicKey[-3]?.byteString, x.count == 32, y.count == 32
            else { return nil }
            if let alg = publicKey[3], alg.integer != -7 { return nil }
            return [0x04] + x + y
        }
    }

    /// Reads the attested credential data; the COSE key must be a well-formed CBOR map.
    public func attestedCredential() throws(ParseError) -> AttestedCredential {
        guard bytes.count >= 55 else { throw ParseError("authenticator data has no attested credential data") }
        let aaguid = Array(bytes[37..<53])
        let idLength = Int(bytes[53]) << 8 | Int(bytes[54])
        guard bytes.count >= 55 + idLength else {
            throw ParseError("credentialId length \(idLength) runs past the authenticator data")
        }
        let credentialId = Array(bytes[55..<(55 + idLength)])
        let key: CBOR
        let end: Int
        do {
            (key, end) = try CBORDecoder().decodePrefix(bytes[(55 + idLength)...])
        } catch {
            throw ParseError("credential public key: \(error)")
        }
        guard case .map = key else { throw ParseError("credential public key is not a COSE map") }
        return AttestedCredential(
            aaguid: aaguid, credentialId: credentialId, publicKey: key, extensionBytes: bytes.count - end)
    }

    /// Builds authenticator data (for the simulated device side).
    public static func encode(
        rpIdHash: [UInt8], flags: UInt8, signCount: UInt32,
        attestedCredential: (aaguid: [UInt8], credentialId: [UInt8], coseKey: CBOR)? = nil
    ) -> [UInt8] {
        var out = rpIdHash
        out.append(flags)
        out += [
            UInt8(signCount >> 24), UInt8(signCount >> 16 & 0xff), UInt8(signCount >> 8 & 0xff),
            UInt8(signCount & 0xff),
        ]
        if let c = attestedCredential {
            out += c.aaguid
            out += [UInt8(c.credentialId.count >> 8), UInt8(c.credentialId.count & 0xff)]
            out += c.credentialId
            c.coseKey.encode(into: &out)
        }
        return out
    }

    /// The COSE_Key map of a P-256 ES256 public key (kty EC2, alg -7, crv P-256, x, y).
    public static func coseKey(uncompressedPoint p: [UInt8]) -> CBOR {
        .map([
            .init(.int(1), .int(2)), .init(.int(3), .int(-7)), .init(.int(-1), .int(1)),
            .init(.int(-2), .bytes(Array(p[1..<33]))), .init(.int(-3), .bytes(Array(p[33..<65]))),
        ])
    }
}
