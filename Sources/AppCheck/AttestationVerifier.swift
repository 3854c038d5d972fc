import Crypto
import Timekeeping

/// Why an attestation was rejected: one case per failed check of Apple's procedure.
public enum AttestationError: CodedError, Hashable, Sendable {
    /// The CBOR or its structure is wrong (truncated, oversized, too deep, missing fields, bad authData).
    case malformedAttestation(String)
    /// `fmt` is not `apple-appattest`.
    case unsupportedFormat(String)
    /// A certificate in `x5c` is not valid DER X.509.
    case malformedCertificate(index: Int)
    /// The chain does not lead to a trusted root (Apple's, or the demo root where the app trusts it).
    case untrustedChain(String)
    /// The chain leads to the rollout demo root, which this app is not configured to trust.
    case demoRootNotTrusted
    /// A certificate's signature does not verify (depth 0 is the credential certificate).
    case certificateSignatureInvalid(depth: Int)
    /// A certificate had expired at the verification time.
    case certificateExpired(depth: Int, notAfter: Instant?, at: Instant)
    /// A certificate was not yet valid at the verification time.
    case certificateNotYetValid(depth: Int, notBefore: Instant?, at: Instant)
    /// The credential certificate is issued by the root directly; Apple's chain always has an intermediate.
    case leafIssuedByRoot
    /// The certificate at `x5c[index]` is a root (self-issued, or a trust anchor) sent as an intermediate.
    case rootAsIntermediate(index: Int)
    /// `x5c` holds more certificates than the credential certificate and its intermediate.
    case unexpectedChainLength(Int)
    /// A certificate breaks its CA constraints: basic constraints, key usage or path length (depth 0 is the
    /// credential certificate).
    case caConstraintViolated(depth: Int, reason: String)
    /// Any other chain failure libcrypto reports.
    case invalidChain(String)
    /// The credential certificate's key is not a P-256 key with an uncompressed point.
    case unsupportedCredentialKey
    /// The COSE key in authData is not the credential certificate's public key.
    case credentialKeyMismatch
    /// The credential certificate lacks the nonce extension 1.2.840.113635.100.8.2.
    case missingNonceExtension
    /// The nonce extension is not `SEQUENCE { [1] EXPLICIT OCTET STRING }` or appears twice.
    case malformedNonceExtension(String)
    /// SHA-256(authData ‖ clientDataHash) differs from the nonce in the certificate.
    case nonceMismatch
    /// SHA-256 of the certificate's public point differs from the keyId.
    case keyIdMismatch
    /// rpIdHash is not SHA-256 of `TEAMID.bundle.id`.
    case rpIdHashMismatch
    /// signCount is not 0.
    case nonZeroSignCount(UInt32)
    /// The aaguid is not the one of the required environment.
    case aaguidMismatch(expected: AppAttestEnvironment, found: String)
    /// credentialId is not the keyId.
    case credentialIdMismatch

    public var code: String {
        switch self {
        case .malformedAttestation: "malformedAttestation"
        case .unsupportedFormat: "unsupportedFormat"
        case .malformedCertificate: "malformedCertificate"
        case .untrustedChain: "untrustedChain"
        case .demoRootNotTrusted: "demoRootNotTrusted"
        case .certificateSignatureInvalid: "certificateSignatureInvalid"
        case .certificateExpired: "certificateExpired"
        case .certificateNotYetValid: "certificateNotYetValid"
        case .leafIssuedByRoot: "leafIssuedByRoot"
        case .rootAsIntermediate: "rootAsIntermediate"
        case .unexpectedChainLength: "unexpectedChainLength"
        case .caConstraintViolated: "caConstraintViolated"
        case .invalidChain: "invalidChain"
        case .unsupportedCredentialKey: "unsupportedCredentialKey"
        case .credentialKeyMismatch: "credentialKeyMismatch"
        case .missingNonceExtension: "missingNonceExtension"
        case .malformedNonceExtension: "malformedNonceExtension"
        case .nonceMismatch: "nonceMismatch"
        case .keyIdMismatch: "keyIdMismatch"
        case .rpIdHashMismatch: "rpIdHashMismatch"
        case .nonZeroSignCount: "nonZeroSignCount"
        case .aaguidMismatch: "aaguidMismatch"
        case .credentialIdMismatch: "credentialIdMismatch"
        }
    }

    public var description: String {
        switch self {
        case .malformedAttestation(let r): "malformed attestation object: \(r)"
        case .unsupportedFormat(let f): "attestation format is '\(f)', not 'apple-appattest'"
        case .malformedCertificate(let i): "x5c[\(i)] is not a DER X.509 certificate"
        case .untrustedChain(let r): "the certificate chain does not lead to a trusted root: \(r)"
        case .demoRootNotTrusted:
            "the certificate chain leads to a rollout demo root, which this app does not trust (Apple's root only)"
        case .certificateSignatureInvalid(let d):
            "the signature of \(d == 0 ? "the credential certificate" : "the certificate at depth \(d)") does not verify"
        case .certificateExpired(let d, let na, let at):
            "the \(d == 0 ? "credential certificate" : "certificate at depth \(d)") expired at \(na.map(\.iso8601) ?? "?") (verification time \(at.iso8601))"
        case .certificateNotYetValid(let d, let nb, let at):
            "the \(d == 0 ? "credential certificate" : "certificate at depth \(d)") is valid only from \(nb.map(\.iso8601) ?? "?") (verification time \(at.iso8601))"
        case .leafIssuedByRoot:
            "the credential certificate is issued by the root itself; an App Attest chain is credential certificate → intermediate → root"
        case .rootAsIntermediate(let i): "x5c[\(i)] is a root certificate, sent where the intermediate CA belongs"
        case .unexpectedChainLength(let n):
            "x5c holds \(n) certificates; App Attest sends exactly the credential certificate and one intermediate"
        case .caConstraintViolated(let d, let r):
            "the \(d == 0 ? "credential certificate" : "certificate at depth \(d)") breaks its CA constraints: \(r)"
        case .invalidChain(let r): "certificate chain rejected: \(r)"
        case .unsupportedCredentialKey: "the credential certificate's key is not an uncompressed P-256 point"
        case .credentialKeyMismatch: "the credential public key in authData is not the credential certificate's key"
        case .missingNonceExtension: "the credential certificate has no nonce extension 1.2.840.113635.100.8.2"
        case .malformedNonceExtension(let r): "the nonce extension is malformed: \(r)"
        case .nonceMismatch: "SHA-256(authData ‖ clientDataHash) does not match the nonce in the credential certificate"
        case .keyIdMismatch: "the keyId is not the SHA-256 of the credential certificate's public key"
        case .rpIdHashMismatch: "rpIdHash is not the SHA-256 of the expected App ID"
        case .nonZeroSignCount(let n): "signCount is \(n); a new attestation has 0"
        case .aaguidMismatch(let e, let f): "aaguid is \(f), not the \(e.rawValue) aaguid"
        case .credentialIdMismatch: "credentialId is not the keyId"
        }
    }
}

/// A key that passed attestation: what the server stores to check the key's later assertions.
public struct AttestedKey: Hashable, Sendable {
    public var keyId: [UInt8]
    /// The 65-byte uncompressed P-256 point from the credential certificate.
    public var publicKey: [UInt8]
    public var environment: AppAttestEnvironment
    public var receipt: [UInt8]
    /// The credential certificate's expiry (about three days after the attestation).
    public var certificateNotAfter: Instant?
}

public typealias AttestationReport = VerificationReport<AttestedKey, AttestationError>

/// Verifies App Attest attestation objects with every check of Apple's procedure.
///
/// The checks, in order: the `x5c` chain leads to a trusted root at the given instant (no X.509 purpose is set:
/// real credential certificates carry an Apple-specific extended key usage), with Apple's shape: exactly
/// credential certificate → intermediate CA → root, CA constraints checked, valid through the notAfter second;
/// SHA-256(authData ‖ clientDataHash) equals the nonce in the credential certificate's extension (strict DER);
/// SHA-256 of its public point is the keyId; the rpIdHash is SHA-256 of the App ID; the signCount is 0; the
/// aaguid names the required environment; the credentialId is the keyId; the COSE key in authData is the
/// certificate's key. The core takes a clientDataHash, not a challenge: the Firebase flow hashes the
/// challenge first (the exchange does), while Apple's published sample passes raw bytes as the hash.
public struct AttestationVerifier: Sendable {
    public let trust: TrustAnchors

    /// A verifier trusting `trust` (Apple's root unless the app is configured for the demo authority).
    public init(trust: TrustAnchors = .apple) { self.trust = trust }

    /// Verifies and returns the attested key, or throws the first failed check.
    public func verify(
        attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8], app: AppIdentity,
        environment: AppAttestEnvironment, at time: Instant
    ) throws(AttestationError) -> AttestedKey {
        try run(
            attestation: attestation, keyId: keyId, clientDataHash: clientDataHash, app: app, environment: environment,
            at: time,
            detailed: false
        ).result.get()
    }

    /// Runs every check that can run and records each outcome; the result is the first failure, if any.
    public func evaluate(
        attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8], app: AppIdentity,
        environment: AppAttestEnvironment, at time: Instant
    ) -> AttestationReport {
        run(
            attestation: attestation, keyId: keyId, clientDataHash: clientDataHash, app: app, environment: environment,
            at: time, detailed: true)
    }

    private func run(
        attestation: [UInt8], keyId: [UInt8], clientDataHash: [UInt8], app: AppIdentity,
        environment: AppAttestEnvironment, at time: Instant, detailed: Bool
    ) -> AttestationReport {
        var log = CheckLog<AttestationError>(detailed: detailed)
        let decoded: Decoded
        switch decode(attestation) {
        case .success(let d): decoded = d
        case .failure(let e):
            log.fail("format", "format", e)
            for (name, title) in Self.checksAfterDecoding {
                log.skip(name, title, "not run: the attestation could not be decoded")
            }
            return AttestationReport(checks: log.checks, result: .failure(e))
        }
        log.pass(
            "format", "format",
            "apple-appattest, \(decoded.certificates.count) certificates, authData \(decoded.authData.bytes.count) bytes, receipt \(decoded.object.receipt.count) bytes"
        )

        // 1. The chain, anchored in the trusted roots, at the verification instant.
        let leaf = decoded.certificates[0]
        let chainError = chainFailure(decoded.certificates, at: time)
        log.check(
            "certificateChain", "certificate chain", chainError,
            passed:
                "\(decoded.certificates.compactMap(\.subjectCommonName).reversed().joined(separator: " → ")) anchored in \(trust.certificates.compactMap(\.subjectCommonName).joined(separator: " / ")); leaf valid until \(leaf.notAfter.map(\.iso8601) ?? "?")"
        )

        // 2–4. The nonce binds authData and the clientDataHash to the certificate.
        var hasher = SHA256.Hasher()
        hasher.update(decoded.authData.bytes)
        hasher.update(clientDataHash)
        let nonce = hasher.finish()
        let nonceError: AttestationError?
        let values = leaf.extensionValues(oid: AppAttestNonceExtension.oid)
        if values.isEmpty {
            nonceError = .missingNonceExtension
        } else if values.count > 1 {
            nonceError = .malformedNonceExtension("the extension appears \(values.count) times")
        } else {
            do {
                let inCertificate = try AppAttestNonceExtension.nonce(fromExtensionValue: values[0])
                nonceError = constantTimeEquals(inCertificate, nonce) ? nil : .nonceMismatch
            } catch {
                nonceError = .malformedNonceExtension(error.reason)
            }
        }
        log.check(
            "nonce", "nonce", nonceError,
            passed: "SHA-256(authData ‖ clientDataHash) = \(Hex.encode(nonce)) matches the certificate")

        // 5. The keyId is the SHA-256 of the credential's public point.
        let point = leaf.subjectPublicKeyBytes
        let keyError: AttestationError?
        if !leaf.hasP256Key || point.count != 65 || point[0] != 0x04 {
            keyError = .unsupportedCredentialKey
        } else {
            keyError = SHA256.hash(point) == keyId ? nil : .keyIdMismatch
        }
        log.check("keyId", "keyId", keyError, passed: "SHA-256(public key) = \(Hex.encode(keyId))")

        // 6. The rpIdHash names this app.
        log.check(
            "rpIdHash", "rpIdHash", decoded.authData.rpIdHash == app.rpIdHash ? nil : .rpIdHashMismatch,
            passed: "SHA-256(\"\(app.appId)\")")

        // 7. A fresh key has never signed.
        let count = decoded.authData.signCount
        log.check("signCount", "signCount", count == 0 ? nil : .nonZeroSignCount(count), passed: "0")

        // 8. The aaguid names the environment the app is built for.
        let aaguid = decoded.credential.aaguid
        log.check(
            "aaguid", "aaguid",
            aaguid == environment.aaguid
                ? nil : .aaguidMismatch(expected: environment, found: AttestationVerifier.describe(aaguid: aaguid)),
            passed: "\(environment.rawValue) (\(AttestationVerifier.describe(aaguid: aaguid)))")

        // 9. The credentialId is the keyId.
        log.check(
            "credentialId", "credentialId", decoded.credential.credentialId == keyId ? nil : .credentialIdMismatch,
            passed: "equals the keyId")

        // 10. The COSE key in authData is the certificate's key: the key the assertions will be checked with is
        // the one Apple certified, and the two copies of it cannot disagree.
        log.check(
            "credentialKey", "credential key",
            decoded.credential.uncompressedPoint == point ? nil : .credentialKeyMismatch,
            passed: "the COSE key in authData is the certificate's P-256 key")

        if let failure = log.firstFailure { return AttestationReport(checks: log.checks, result: .failure(failure)) }
        let key = AttestedKey(
            keyId: keyId, publicKey: point, environment: environment, receipt: decoded.object.receipt,
            certificateNotAfter: leaf.notAfter)
        return AttestationReport(checks: log.checks, result: .success(key))
    }

    /// The checks that need a decoded attestation, in Apple's order: (name, title).
    static let checksAfterDecoding = [
        ("certificateChain", "certificate chain"), ("nonce", "nonce"), ("keyId", "keyId"), ("rpIdHash", "rpIdHash"),
        ("signCount", "signCount"), ("aaguid", "aaguid"), ("credentialId", "credentialId"),
        ("credentialKey", "credential key"),
    ]

    /// Printable aaguid: the ASCII with zero bytes shown as `\0`, or hex when not printable.
    static func describe(aaguid: [UInt8]) -> String {
        if aaguid.allSatisfy({ $0 == 0 || (0x20..<0x7f).contains($0) }) {
            return "'" + aaguid.map { $0 == 0 ? "\\0" : String(UnicodeScalar($0)) }.joined() + "'"
        }
        return Hex.encode(aaguid)
    }

    private struct Decoded {
        var object: AttestationObject
        var certificates: [Certificate]
        var authData: AuthenticatorData
        var credential: AuthenticatorData.AttestedCredential
    }

    private func decode(_ bytes: [UInt8]) -> Result<Decoded, AttestationError> {
        let object: AttestationObject
        do { object = try AttestationObject(cbor: bytes) } catch {
            return .failure(.malformedAttestation(error.reason))
        }
        guard object.format == AttestationObject.appleFormat else { return .failure(.unsupportedFormat(object.format)) }
        var certificates: [Certificate] = []
        for (i, der) in object.certificates.enumerated() {
            guard let c = i == 0 ? Certificate(credentialDER: der) : trust.intermediate(der: der) else {
                return .failure(.malformedCertificate(index: i))
            }
            certificates.append(c)
        }
        do {
            let authData = try AuthenticatorData(object.authenticatorData)
            let credential = try authData.attestedCredential()
            return .success(
                Decoded(object: object, certificates: certificates, authData: authData, credential: credential))
        } catch {
            return .failure(.malformedAttestation("authData: \(error.reason)"))
        }
    }

    private func chainFailure(_ certificates: [Certificate], at time: Instant) -> AttestationError? {
        guard
            let failure = trust.verify(leaf: certificates[0], intermediates: Array(certificates.dropFirst()), at: time)
        else {
            return nil
        }
        func certificate(at depth: Int32) -> Certificate? {
            Int(depth) < certificates.count ? certificates[Int(depth)] : nil
        }
        switch failure {
        case .expired(let d):
            return .certificateExpired(depth: Int(d), notAfter: certificate(at: d)?.notAfter, at: time)
        case .notYetValid(let d):
            return .certificateNotYetValid(depth: Int(d), notBefore: certificate(at: d)?.notBefore, at: time)
        case .badSignature(let d): return .certificateSignatureInvalid(depth: Int(d))
        case .untrusted(let reason):
            // Name the likely cause: a simulated device's chain sent to an app that trusts Apple only.
            if certificates.last?.issuerCommonName == DemoCertificateAuthority.rootCommonName
                || certificates.last?.subjectCommonName == DemoCertificateAuthority.rootCommonName
            {
                return .demoRootNotTrusted
            }
            return .untrustedChain(reason)
        case .leafIssuedByRoot: return .leafIssuedByRoot
        case .rootAsIntermediate(let i): return .rootAsIntermediate(index: i)
        case .chainLength(let n): return .unexpectedChainLength(n)
        case .constraint(let d, let reason): return .caConstraintViolated(depth: Int(d), reason: reason)
        case .other(let reason): return .invalidChain(reason)
        }
    }
}
