import Crypto
import Rollout
import Timekeeping

/// Port: where a store keeps its operators' security keys (one credential per enrolled operator).
///
/// Rules: the credential is stored sealed like a TOTP secret; `authorizeSecurityKey` reads the actor's credential,
/// verifies with `SecurityKeyVerifier`, stores the new counter when accepted and hands the audit record to `audit`,
/// all in one transaction, so that of two uses of one assertion exactly one passes.
public protocol SecurityKeyStore: AnyObject, Sendable {
    /// The security key of `id`, nil when it has none.
    func securityKey(_ id: OperatorID) throws -> SecurityKeyCredential?
    /// Stores (or replaces) `credential` and its audit record in one transaction.
    func saveSecurityKey(_ credential: SecurityKeyCredential, audit: () throws -> Void) throws
    /// Verifies `assertion` over `document` for `actor` atomically (see the protocol's rules); nil when `actor`
    /// has no security key.
    func authorizeSecurityKey(
        _ assertion: SecurityKeyAssertion, over document: ChangeDocument, by actor: OperatorID, at clock: any Clock,
        audit: (SecurityKeyOutcome, SecurityKeyCredential) throws -> Void
    ) throws -> SecurityKeyOutcome?
}

extension SecurityKeyCredential {
    /// The credential's fixed fields as bytes, for sealing: a format byte, the algorithm, then the relying party,
    /// the credential id and the public key, each with a 2-byte length.
    public var sealedForm: [UInt8] {
        var out: [UInt8] = [1, UInt8(bitPattern: Int8(algorithm.rawValue))]
        for field in [Array(relyingParty.utf8), credentialID, publicKey] {
            out += [UInt8(field.count >> 8), UInt8(field.count & 0xff)] + field
        }
        return out
    }

    /// The credential from `sealedForm` and the columns stored beside it; nil for bytes of another form.
    public init?(sealedForm bytes: [UInt8], operatorID: OperatorID, signCount: UInt32, enrolledAt: Instant) {
        guard bytes.count >= 2, bytes[0] == 1, let algorithm = Algorithm(rawValue: Int(Int8(bitPattern: bytes[1]))) else {
            return nil
        }
        var fields: [[UInt8]] = []
        var i = 2
        while fields.count < 3 {
            guard i + 2 <= bytes.count else { return nil }
            let n = Int(bytes[i]) << 8 | Int(bytes[i + 1])
            guard i + 2 + n <= bytes.count else { return nil }
            fields.append(Array(bytes[(i + 2)..<(i + 2 + n)]))
            i += 2 + n
        }
        guard i == bytes.count, let rp = String(validating: fields[0], as: UTF8.self) else { return nil }
        self.init(
            operatorID: operatorID, credentialID: fields[1], algorithm: algorithm, publicKey: fields[2],
            relyingParty: rp, signCount: signCount, enrolledAt: enrolledAt)
    }
}

extension SecondFactorEvidence {
    /// The assertion the evidence carries.
    public var assertion: SecurityKeyAssertion {
        SecurityKeyAssertion(credentialID: credentialID, authenticatorData: authenticatorData, signature: signature)
    }

    /// The evidence of `assertion` over `document`.
    public init(_ document: ChangeDocument, _ assertion: SecurityKeyAssertion) {
        self.init(
            document: document.canonicalBytes, credentialID: assertion.credentialID,
            authenticatorData: assertion.authenticatorData, signature: assertion.signature)
    }

    /// The audit record's detail: the outcome, then everything needed to verify the approval again later without
    /// the store (the credential's public key, algorithm and relying party; the document, authenticator data and
    /// signature), in hex. The record is in the audit hash chain, so none of it can be changed unnoticed.
    public func auditDetail(outcome: SecurityKeyOutcome, reasons: [StepUpReason], credential: SecurityKeyCredential)
        -> String
    {
        var facts = ["result \(outcome.result)", "method security-key"]
        if !reasons.isEmpty { facts.append("needed for \(reasons.map(\.code).joined(separator: ", "))") }
        facts += [
            "algorithm \(credential.algorithm.rawValue)", "relying-party \(Hex.encode(Array(credential.relyingParty.utf8)))",
            "public-key \(Hex.encode(credential.publicKey))", "document \(Hex.encode(document))",
            "credential \(Hex.encode(credentialID))", "authenticator-data \(Hex.encode(authenticatorData))",
            "signature \(Hex.encode(signature))",
        ]
        return facts.joined(separator: "; ")
    }
}

/// A security-key approval read back from an audit record and verified again: who approved exactly which change.
public struct RecordedApproval: Sendable, Equatable {
    public var operatorID: String
    public var document: ChangeDocument
    /// The checks that need no store: signature over the document, relying party, UP and UV.
    public var outcome: SecurityKeyOutcome
    /// The approval as the write path received it (to complete a two-person request).
    public var evidence: SecondFactorEvidence
    /// The two-person request this approval opened or completed (`ChangeDocument.requestID`), if any.
    public var request: String?
    /// The approval is a second operator's (`rollout approve`): the document names the requester, not them.
    public var isCoApproval: Bool

    /// The approval in an audit record's detail (written by `SecondFactorEvidence.auditDetail`) by `actor`; nil
    /// when the detail holds none. A document that names another operator than the record's actor is `malformed`.
    public init?(actor: String, auditDetail detail: String) {
        var fields: [String: [UInt8]] = [:]
        var algorithm: Int?
        var request: String?
        var coApproval = false
        for part in detail.split(separator: "; ") {
            let words = part.split(separator: " ", maxSplits: 1).map(String.init)
            guard words.count == 2 else { continue }
            if words[0] == "algorithm", algorithm == nil { algorithm = Int(words[1]) }
            if words[0] == "two-person-request", request == nil { request = words[1] }
            if words[0] == "co-approval" { coApproval = true }
            if ["relying-party", "public-key", "document", "credential", "authenticator-data", "signature"].contains(words[0]),
                fields[words[0]] == nil, let bytes = Hex.decode(words[1])
            {
                fields[words[0]] = bytes
            }
        }
        guard let rp = fields["relying-party"].flatMap({ String(validating: $0, as: UTF8.self) }),
            let key = fields["public-key"], let d = fields["document"], let c = fields["credential"],
            let a = fields["authenticator-data"], let s = fields["signature"],
            let alg = algorithm.flatMap(SecurityKeyCredential.Algorithm.init(rawValue:)),
            let id = try? OperatorID(actor), let document = ChangeDocument(canonical: d)
        else { return nil }
        operatorID = actor
        self.document = document
        self.request = request
        isCoApproval = coApproval
        evidence = SecondFactorEvidence(document: d, credentialID: c, authenticatorData: a, signature: s)
        guard coApproval || document.operatorID == actor else {
            outcome = .malformed
            return
        }
        let credential = SecurityKeyCredential(
            operatorID: id, credentialID: c, algorithm: alg, publicKey: key, relyingParty: rp, signCount: 0,
            enrolledAt: Instant(microseconds: 0))
        let assertion = SecurityKeyAssertion(credentialID: c, authenticatorData: a, signature: s)
        outcome = SecurityKeyVerifier.check(assertion, over: document.clientDataHash, credential: credential)
    }
}

