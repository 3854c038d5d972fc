import AppCheck
import Crypto
import Foundation
import Timekeeping

/// Shared demo material for tests: one authority (generating P-256 keys is cheap, but once is enough).
enum Demo {
    static let authority: DemoCertificateAuthority = try! DemoCertificateAuthority.generate()
    static let app = AppIdentity(teamId: "DEMOTEAM42", bundleId: "dev.rollout.demo")
    static let time = ISO8601.parse("2026-06-01T12:00:00Z")!
    static let verifier = AttestationVerifier(trust: authority.trustAnchors)

    /// An attestation built by hand: any authData, any nonce in the certificate, signed by the demo authority.
    static func attestation(
        key: P256PrivateKey, authData: [UInt8], clientDataHash: [UInt8], nonce: [UInt8]? = nil,
        at time: Instant = time
    ) throws -> [UInt8] {
        var hasher = SHA256.Hasher()
        hasher.update(authData)
        hasher.update(clientDataHash)
        let leaf = try authority.credentialCertificate(for: key, nonce: nonce ?? hasher.finish(), at: time)
        return AttestationObject(
            certificates: [leaf.der, authority.intermediate.der], receipt: [1, 2, 3], authenticatorData: authData
        ).encoded()
    }

    /// An attestation whose chain departs from Apple's: the credential certificate's nonce extension bytes are
    /// `nonceExtension(nonce)`, it is issued by `issuer`, and `x5c` is `chain(leaf)` (the leaf and the demo
    /// intermediate by default).
    static func forgedAttestation(
        key: P256PrivateKey, authData: [UInt8], clientDataHash: [UInt8], at time: Instant = time,
        validity: Instant.Duration = .days(3),
        nonceExtension: ([UInt8]) -> [UInt8] = AppAttestNonceExtension.extensionValue(nonce:),
        issuedBy issuer: DemoCertificateAuthority.ForgedIssuer = .intermediate, certificateAuthority: Bool = false,
        chain: (Certificate) -> [[UInt8]] = { [$0.der, authority.intermediate.der] }
    ) throws -> [UInt8] {
        var hasher = SHA256.Hasher()
        hasher.update(authData)
        hasher.update(clientDataHash)
        let leaf = try authority.forgedCredentialCertificate(
            for: key, nonceExtensionValue: nonceExtension(hasher.finish()), at: time, validity: validity,
            issuedBy: issuer, certificateAuthority: certificateAuthority)
        return AttestationObject(certificates: chain(leaf), receipt: [1, 2, 3], authenticatorData: authData).encoded()
    }

    /// Well-formed authData for `key`, with each field overridable (`coseKey`: the point written as the COSE key).
    static func authData(
        key: P256PrivateKey, app: AppIdentity = app, flags: UInt8 = 0x40, signCount: UInt32 = 0,
        environment: AppAttestEnvironment = .production, credentialId: [UInt8]? = nil, coseKey: [UInt8]? = nil,
        trailing: [UInt8] = []
    ) -> [UInt8] {
        AuthenticatorData.encode(
            rpIdHash: app.rpIdHash, flags: flags, signCount: signCount,
            attestedCredential: (
                environment.aaguid, credentialId ?? SHA256.hash(key.publicPoint),
                AuthenticatorData.coseKey(uncompressedPoint: coseKey ?? key.publicPoint)
            ))
            + trailing
    }
}

extension Array where Element == UInt8 {
    /// A copy with one bit flipped.
    func flipping(bit: Int, at index: Int) -> [UInt8] {
        var c = self
        c[index] ^= UInt8(1 << bit)
        return c
    }

    /// The first index of `needle`.
    func firstRange(of needle: [UInt8]) -> Range<Int>? {
        guard needle.count <= count else { return nil }
        for i in 0...(count - needle.count) where self[i..<(i + needle.count)].elementsEqual(needle) {
            return i..<(i + needle.count)
        }
        return nil
    }
}
