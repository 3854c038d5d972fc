import Crypto
import Timekeeping

/// An operator's security key as enrolled: a FIDO2 credential (its id and COSE public key) for one relying party,
/// and the signature counter of the last accepted assertion.
public struct SecurityKeyCredential: Sendable, Equatable {
    /// The COSE algorithms rollout accepts (RFC 9053): ES256 is what every FIDO2 key offers.
    public enum Algorithm: Int, Sendable, CaseIterable {
        case es256 = -7
        case eddsa = -8

        public var name: String { self == .es256 ? "ES256" : "EdDSA" }
    }

    public var operatorID: OperatorID
    public var credentialID: [UInt8]
    public var algorithm: Algorithm
    /// ES256: the uncompressed point `04 ‖ X ‖ Y` (65 bytes); EdDSA: the Ed25519 key (32 bytes).
    public var publicKey: [UInt8]
    /// The relying-party id the credential was made for (`rollout:` + the store, or what `--rp` said).
    public var relyingParty: String
    /// The counter of the last accepted assertion (or of the enrolment); the next must be greater.
    public var signCount: UInt32
    public var enrolledAt: Instant

    public init(
        operatorID: OperatorID, credentialID: [UInt8], algorithm: Algorithm, publicKey: [UInt8], relyingParty: String,
        signCount: UInt32, enrolledAt: Instant
    ) {
        self.operatorID = operatorID
        self.credentialID = credentialID
        self.algorithm = algorithm
        self.publicKey = publicKey
        self.relyingParty = relyingParty
        self.signCount = signCount
        self.enrolledAt = enrolledAt
    }
}

/// What a security key returned for one change document: the credential it used, the authenticator data and the
/// signature over `authenticatorData ‖ SHA-256(document)`. Kept whole in the audit record.
public struct SecurityKeyAssertion: Sendable, Equatable {
    public var credentialID: [UInt8]
    /// The raw authenticator data (not CBOR-wrapped): rpIdHash (32) ‖ flags (1) ‖ signCount (4, big-endian) ‖ ...
    public var authenticatorData: [UInt8]
    public var signature: [UInt8]

    public init(credentialID: [UInt8], authenticatorData: [UInt8], signature: [UInt8]) {
        self.credentialID = credentialID
        self.authenticatorData = authenticatorData
        self.signature = signature
    }
}

/// The fixed part of authenticator data (WebAuthn §6.1).
public struct AuthenticatorDataHeader: Sendable, Equatable {
    public static let userPresent: UInt8 = 0x01
    public static let userVerified: UInt8 = 0x04

    public var relyingPartyHash: [UInt8]
    public var flags: UInt8
    public var signCount: UInt32

    /// Parses the first 37 bytes; nil when there are fewer.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count >= 37 else { return nil }
        relyingPartyHash = Array(bytes[0..<32])
        flags = bytes[32]
        signCount = bytes[33..<37].reduce(0) { $0 << 8 | UInt32($1) }
    }
}

/// What became of one security-key assertion; `result` is the stable spelling in the audit log.
public enum SecurityKeyOutcome: Sendable, Equatable {
    case accepted(signCount: UInt32)
    /// The assertion was made by another credential than the operator's.
    case otherCredential
    /// The authenticator data is too short to hold its fixed fields.
    case malformed
    /// The authenticator data names another relying party.
    case wrongRelyingParty
    /// The user-presence flag (UP) is not set: nobody touched the key.
    case userNotPresent
    /// The user-verification flag (UV) is not set: no PIN or biometric was checked.
    case userNotVerified
    /// The signature does not verify over this document (another change, another base, or a forgery).
    case badSignature
    /// The counter did not increase: a replayed assertion or a cloned key.
    case counterNotIncreased(stored: UInt32, presented: UInt32)
    /// The change document expired before the assertion was checked.
    case expired(at: Instant)
    /// The change document's expiry is further ahead than any document rollout makes (`longestLifetime`).
    case expiresTooLate(at: Instant)

    public var result: String {
        switch self {
        case .accepted: "accepted"
        case .otherCredential: "other-credential"
        case .malformed: "malformed"
        case .wrongRelyingParty: "wrong-rp"
        case .userNotPresent: "user-not-present"
        case .userNotVerified: "user-not-verified"
        case .badSignature: "bad-signature"
        case .counterNotIncreased: "counter-not-increased"
        case .expired: "expired"
        case .expiresTooLate: "expires-too-late"
        }
    }

    public var isAccepted: Bool { if case .accepted = self { true } else { false } }

    /// One sentence for the operator; never a key or a signature.
    public var description: String {
        switch self {
        case .accepted(let n): "the security key's assertion is valid (counter \(n))"
        case .otherCredential: "the assertion was made with a credential that is not this operator's security key"
        case .malformed: "the security key's authenticator data is malformed"
        case .wrongRelyingParty: "the assertion is for another relying party"
        case .userNotPresent: "the security key did not report user presence (the key was not touched)"
        case .userNotVerified: "the security key did not report user verification (no PIN or biometric check)"
        case .badSignature: "the signature does not cover this change (another change, another base version, or a forgery)"
        case .counterNotIncreased(let stored, let presented):
            "the security key's counter did not increase (\(presented) after \(stored)): a replayed assertion or a cloned key"
        case .expired(let at): "the change document expired at \(at.iso8601)"
        case .expiresTooLate(let at):
            "the change document expires at \(at.iso8601), further ahead than any rollout makes (16 minutes): not signed for rollout"
        }
    }
}

/// Verifies a security key's assertion over a change document, without the device: libcrypto (through Crypto)
/// checks the signature; the rest is the WebAuthn relying party's checks that apply here (§7.2): the credential,
/// the relying-party id hash, UP and UV, the expiry of the document, and a counter that increases.
///
/// Pure: the credential comes in, the outcome and the credential to store (with its new counter) come out. The
/// caller stores the credential atomically with reading it, so that of two uses of one assertion one fails.
public enum SecurityKeyVerifier {
    /// Checks in the order that tells the operator the most: whose credential, then the document's expiry, then
    /// what the authenticator data says, then the signature, and last the counter (only a valid signature may
    /// move it).
    public static func verify(
        _ assertion: SecurityKeyAssertion, over document: ChangeDocument, credential: SecurityKeyCredential,
        at now: Instant
    ) -> (outcome: SecurityKeyOutcome, credential: SecurityKeyCredential) {
        guard constantTimeEquals(assertion.credentialID, credential.credentialID) else { return (.otherCredential, credential) }
        guard document.isValid(at: now) else {
            return (now < document.expiresAt ? .expiresTooLate(at: document.expiresAt) : .expired(at: document.expiresAt), credential)
        }
        let outcome = check(assertion, over: document.clientDataHash, credential: credential)
        guard case .accepted(let count) = outcome else { return (outcome, credential) }
        var updated = credential
        updated.signCount = count
        return (outcome, updated)
    }

    /// The checks that need no clock: relying party, flags, signature, counter. Also what `audit verify-approval`
    /// runs on a stored approval (with the counter the credential had before it).
    public static func check(
        _ assertion: SecurityKeyAssertion, over clientDataHash: [UInt8], credential: SecurityKeyCredential
    ) -> SecurityKeyOutcome {
        guard let header = AuthenticatorDataHeader(assertion.authenticatorData) else { return .malformed }
        guard constantTimeEquals(header.relyingPartyHash, SHA256.hash(credential.relyingParty)) else {
            return .wrongRelyingParty
        }
        guard header.flags & AuthenticatorDataHeader.userPresent != 0 else { return .userNotPresent }
        guard header.flags & AuthenticatorDataHeader.userVerified != 0 else { return .userNotVerified }
        let message = assertion.authenticatorData + clientDataHash
        let valid: Bool
        switch credential.algorithm {
        case .es256:
            valid = SignatureVerifier.es256(publicKey: credential.publicKey, signature: assertion.signature, message: message)
        case .eddsa:
            valid = SignatureVerifier.ed25519(publicKey: credential.publicKey, signature: assertion.signature, message: message)
        }
        guard valid else { return .badSignature }
        // A key that keeps no counter reports 0 each time (WebAuthn §6.1.1: the check applies only when either count
        // is nonzero); what it signs is bound to one base version, operator, nonce and expiry all the same.
        guard header.signCount > credential.signCount || (header.signCount == 0 && credential.signCount == 0) else {
            return .counterNotIncreased(stored: credential.signCount, presented: header.signCount)
        }
        return .accepted(signCount: header.signCount)
    }
}
