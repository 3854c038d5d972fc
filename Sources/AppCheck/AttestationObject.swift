/// An App Attest attestation object: `{fmt: "apple-appattest", attStmt: {x5c, receipt}, authData}` in CBOR.
public struct AttestationObject: Hashable, Sendable {
    public static let appleFormat = "apple-appattest"
    /// The most certificates accepted in `x5c`.
    public static let maxCertificates = 8

    public var format: String
    /// DER certificates, the credential certificate first, then the intermediate(s).
    public var certificates: [[UInt8]]
    /// Apple's receipt (a CMS message chained to a different Apple root; stored, not verified here).
    public var receipt: [UInt8]
    public var authenticatorData: [UInt8]

    public init(format: String = appleFormat, certificates: [[UInt8]], receipt: [UInt8], authenticatorData: [UInt8]) {
        self.format = format
        self.certificates = certificates
        self.receipt = receipt
        self.authenticatorData = authenticatorData
    }

    /// Why an attestation object could not be decoded.
    public struct DecodingError: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// Decodes the CBOR; unknown map keys are ignored, duplicate keys and every CBOR excess are refused.
    public init(cbor bytes: [UInt8]) throws(DecodingError) {
        let root: CBOR
        do { root = try CBORDecoder().decode(bytes) } catch { throw DecodingError(error.description) }
        guard case .map = root else { throw DecodingError("attestation object is not a CBOR map") }
        guard let fmt = root["fmt"]?.textString else { throw DecodingError("missing text field fmt") }
        guard let statement = root["attStmt"], case .map = statement else {
            throw DecodingError("missing map field attStmt")
        }
        guard let authData = root["authData"]?.byteString else { throw DecodingError("missing byte field authData") }
        guard let x5c = statement["x5c"]?.arrayItems, !x5c.isEmpty else {
            throw DecodingError("attStmt.x5c is missing or empty")
        }
        // Apple sends two; a long list would only make the verifier parse certificates for nothing.
        guard x5c.count <= Self.maxCertificates else {
            throw DecodingError("attStmt.x5c holds \(x5c.count) certificates, more than \(Self.maxCertificates)")
        }
        var certificates: [[UInt8]] = []
        for item in x5c {
            guard let der = item.byteString else { throw DecodingError("attStmt.x5c holds a non-byte item") }
            certificates.append(der)
        }
        let receipt: [UInt8]
        switch statement["receipt"] {
        case nil: receipt = []
        case .bytes(let r)?: receipt = r
        default: throw DecodingError("attStmt.receipt is not a byte string")
        }
        self.init(format: fmt, certificates: certificates, receipt: receipt, authenticatorData: authData)
    }

    /// The CBOR encoding, keys in Apple's order.
    public func encoded() -> [UInt8] {
        CBOR.map([
            .init(.text("fmt"), .text(format)),
            .init(
                .text("attStmt"),
                .map([
                    .init(.text("x5c"), .array(certificates.map { .bytes($0) })),
                    .init(.text("receipt"), .bytes(receipt)),
                ])),
            .init(.text("authData"), .bytes(authenticatorData)),
        ]).encoded()
    }
}

/// An App Attest assertion: `{signature: DER ECDSA, authenticatorData}` in CBOR.
public struct AssertionObject: Hashable, Sendable {
    public var signature: [UInt8]
    public var authenticatorData: [UInt8]

    public init(signature: [UInt8], authenticatorData: [UInt8]) {
        self.signature = signature
        self.authenticatorData = authenticatorData
    }

    /// Decodes the CBOR; both fields must be byte strings.
    public init(cbor bytes: [UInt8]) throws(AttestationObject.DecodingError) {
        let root: CBOR
        do { root = try CBORDecoder().decode(bytes) } catch { throw .init(error.description) }
        guard case .map = root else { throw .init("assertion is not a CBOR map") }
        guard let signature = root["signature"]?.byteString else { throw .init("missing byte field signature") }
        guard let authData = root["authenticatorData"]?.byteString else {
            throw .init("missing byte field authenticatorData")
        }
        self.init(signature: signature, authenticatorData: authData)
    }

    public func encoded() -> [UInt8] {
        CBOR.map([
            .init(.text("signature"), .bytes(signature)), .init(.text("authenticatorData"), .bytes(authenticatorData)),
        ])
        .encoded()
    }
}
