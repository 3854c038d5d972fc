import Crypto

/// Why an assertion was rejected.
public enum AssertionError: CodedError, Hashable, Sendable {
    /// The CBOR or its structure is wrong.
    case malformedAssertion(String)
    /// The stored public key is not a valid P-256 point.
    case invalidStoredKey
    /// The ECDSA signature over the nonce does not verify with the attested key.
    case signatureInvalid
    /// rpIdHash is not SHA-256 of `TEAMID.bundle.id`.
    case rpIdHashMismatch
    /// The counter did not increase (a replayed or cloned assertion).
    case counterNotIncreasing(previous: UInt32, received: UInt32)

    public var code: String {
        switch self {
        case .malformedAssertion: "malformedAssertion"
        case .invalidStoredKey: "invalidStoredKey"
        case .signatureInvalid: "signatureInvalid"
        case .rpIdHashMismatch: "rpIdHashMismatch"
        case .counterNotIncreasing: "counterNotIncreasing"
        }
    }

    public var description: String {
        switch self {
        case .malformedAssertion(let r): "malformed assertion: \(r)"
        case .invalidStoredKey: "the stored public key is not a valid P-256 point"
        case .signatureInvalid: "the assertion's signature does not verify with the attested key"
        case .rpIdHashMismatch: "rpIdHash is not the SHA-256 of the expected App ID"
        case .counterNotIncreasing(let p, let r): "counter \(r) is not greater than the stored counter \(p)"
        }
    }
}

public typealias AssertionReport = VerificationReport<UInt32, AssertionError>

/// Verifies App Attest assertions with the key stored at attestation and the last counter seen.
///
/// nonce = SHA-256(authenticatorData ‖ clientDataHash); the signature is ECDSA P-256 with SHA-256 over the
/// nonce as the message (libcrypto hashes it once more: `EVP_DigestVerify`, not a pre-hashed verify); the
/// rpIdHash names the app; the counter is strictly greater than the stored one. In the Firebase flow the
/// clientDataHash is SHA-256(artifact ‖ challenge).
public struct AssertionVerifier: Sendable {
    public let app: AppIdentity
    private let rpIdHash: [UInt8]

    public init(app: AppIdentity) {
        self.app = app
        rpIdHash = app.rpIdHash
    }

    /// Verifies and returns the new counter to store, or throws the first failed check.
    public func verify(
        assertion: [UInt8], clientDataHash: [UInt8], publicKey: P256PublicKey, previousCounter: UInt32
    ) throws(AssertionError) -> UInt32 {
        try run(
            assertion: assertion, clientDataHash: clientDataHash, publicKey: publicKey,
            previousCounter: previousCounter, detailed: false
        )
        .result.get()
    }

    /// As `verify`, from the stored 65-byte point.
    public func verify(
        assertion: [UInt8], clientDataHash: [UInt8], publicKey point: [UInt8], previousCounter: UInt32
    ) throws(AssertionError) -> UInt32 {
        guard let key = P256PublicKey(uncompressedPoint: point) else { throw .invalidStoredKey }
        return try verify(
            assertion: assertion, clientDataHash: clientDataHash, publicKey: key, previousCounter: previousCounter)
    }

    /// Runs every check and records each outcome; the result is the new counter or the first failure.
    public func evaluate(
        assertion: [UInt8], clientDataHash: [UInt8], publicKey: P256PublicKey, previousCounter: UInt32
    ) -> AssertionReport {
        run(
            assertion: assertion, clientDataHash: clientDataHash, publicKey: publicKey,
            previousCounter: previousCounter, detailed: true)
    }

    private func run(
        assertion: [UInt8], clientDataHash: [UInt8], publicKey: P256PublicKey, previousCounter: UInt32, detailed: Bool
    ) -> AssertionReport {
        var log = CheckLog<AssertionError>(detailed: detailed)
        let object: AssertionObject
        let authData: AuthenticatorData
        do {
            object = try AssertionObject(cbor: assertion)
            authData = try AuthenticatorData(object.authenticatorData)
        } catch let e as AttestationObject.DecodingError {
            return failedDecoding(&log, .malformedAssertion(e.reason))
        } catch let e as AuthenticatorData.ParseError {
            return failedDecoding(&log, .malformedAssertion("authenticatorData: \(e.reason)"))
        } catch {
            return failedDecoding(&log, .malformedAssertion("\(error)"))
        }
        log.pass(
            "format", "format",
            "signature \(object.signature.count) bytes, authenticatorData \(authData.bytes.count) bytes")

        var hasher = SHA256.Hasher()
        hasher.update(authData.bytes)
        hasher.update(clientDataHash)
        let nonce = hasher.finish()
        log.check(
            "signature", "signature",
            publicKey.isValidSignature(object.signature, for: nonce) ? nil : .signatureInvalid,
            passed: "ECDSA P-256/SHA-256 over nonce \(Hex.encode(nonce))")
        log.check(
            "rpIdHash", "rpIdHash", authData.rpIdHash == rpIdHash ? nil : .rpIdHashMismatch,
            passed: "SHA-256(\"\(app.appId)\")")
        let counter = authData.signCount
        log.check(
            "counter", "counter",
            counter > previousCounter ? nil : .counterNotIncreasing(previous: previousCounter, received: counter),
            passed: "\(counter) > \(previousCounter)")
        if let failure = log.firstFailure { return AssertionReport(checks: log.checks, result: .failure(failure)) }
        return AssertionReport(checks: log.checks, result: .success(counter))
    }

    private func failedDecoding(_ log: inout CheckLog<AssertionError>, _ error: AssertionError) -> AssertionReport {
        log.fail("format", "format", error)
        for (name, title) in [("signature", "signature"), ("rpIdHash", "rpIdHash"), ("counter", "counter")] {
            log.skip(name, title, "not run: the assertion could not be decoded")
        }
        return AssertionReport(checks: log.checks, result: .failure(error))
    }
}
