import COpenSSL
import Crypto
import Timekeeping

/// A stand-in for Apple's attestation CA, so simulated devices produce real attestation objects.
///
/// A generated root and intermediate (P-256) issue credential certificates shaped like Apple's: subject
/// `CN=<hex keyId>, OU=AAA Certification, O=..., ST=California`, critical basic constraints (not a CA) and key
/// usage, and the nonce extension 1.2.840.113635.100.8.2 as `SEQUENCE { [1] EXPLICIT OCTET STRING }`. The same
/// `AttestationVerifier` checks them; only apps configured to trust the demo root accept them.
///
/// The root and intermediate are valid from 2020 to 2100 so that a simulation may run at any virtual time.
/// Loading parses the keys once; issuing a certificate then costs one ECDSA signature.
public final class DemoCertificateAuthority: @unchecked Sendable {
    public static let rootCommonName = "rollout Demo App Attestation Root CA"
    public static let intermediateCommonName = "rollout Demo App Attestation CA 1"
    static let organization = "rollout demo"

    public let root: Certificate
    public let intermediate: Certificate
    /// Apple's root plus this demo root: the anchors of an app configured to trust the demo authority.
    public let trustAnchors: TrustAnchors
    let rootKey: P256PrivateKey
    let intermediateKey: P256PrivateKey
    private let nonceOID: OpaquePointer
    private let leafBasicConstraints: OpaquePointer
    private let leafKeyUsage: OpaquePointer

    /// The persisted form: certificates and private keys, all DER.
    public struct Material: Hashable, Sendable {
        public var rootCertificate: [UInt8]
        public var rootPrivateKey: [UInt8]
        public var intermediateCertificate: [UInt8]
        public var intermediatePrivateKey: [UInt8]
        public init(
            rootCertificate: [UInt8], rootPrivateKey: [UInt8], intermediateCertificate: [UInt8],
            intermediatePrivateKey: [UInt8]
        ) {
            self.rootCertificate = rootCertificate
            self.rootPrivateKey = rootPrivateKey
            self.intermediateCertificate = intermediateCertificate
            self.intermediatePrivateKey = intermediatePrivateKey
        }
    }

    /// Why stored material could not be loaded.
    public struct InvalidMaterial: Error, Hashable, Sendable, CustomStringConvertible {
        public var reason: String
        public var description: String { "demo certificate authority: \(reason)" }
    }

    /// Generates a new root and intermediate.
    public static func generate() throws(OpenSSLError) -> DemoCertificateAuthority {
        let from = ISO8601.parse("2020-01-01T00:00:00Z")!
        let until = ISO8601.parse("2100-01-01T00:00:00Z")!
        return try generate(root: from...until, intermediate: from...until)
    }

    /// A new root and intermediate valid over the given periods (tests of expired authorities).
    package static func generate(
        root rootValidity: ClosedRange<Instant>, intermediate intermediateValidity: ClosedRange<Instant>
    ) throws(OpenSSLError) -> DemoCertificateAuthority {
        let rootKey = try P256PrivateKey()
        let intermediateKey = try P256PrivateKey()
        let root = try build(
            subject: [("CN", rootCommonName), ("O", organization), ("ST", "California")], issuer: nil,
            publicKey: rootKey.pkey, signer: rootKey.pkey, notBefore: rootValidity.lowerBound,
            notAfter: rootValidity.upperBound,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE"), (NID_key_usage, "critical,keyCertSign,cRLSign"),
                (NID_subject_key_identifier, "hash"),
            ])
        let intermediate = try build(
            subject: [("CN", intermediateCommonName), ("O", organization), ("ST", "California")], issuer: root.x509,
            publicKey: intermediateKey.pkey, signer: rootKey.pkey, notBefore: intermediateValidity.lowerBound,
            notAfter: intermediateValidity.upperBound,
            extensions: [
                (NID_basic_constraints, "critical,CA:TRUE,pathlen:0"), (NID_authority_key_identifier, "keyid:always"),
                (NID_subject_key_identifier, "hash"), (NID_key_usage, "critical,keyCertSign,cRLSign"),
            ])
        return try DemoCertificateAuthority(
            root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey)
    }

    /// Loads persisted material; the intermediate must be signed by the root and each key must match.
    public convenience init(material m: Material) throws(InvalidMaterial) {
        guard let root = Certificate(der: m.rootCertificate),
            let intermediate = Certificate(der: m.intermediateCertificate)
        else {
            throw InvalidMaterial(reason: "a stored certificate is not DER X.509")
        }
        let rootKey: P256PrivateKey
        let intermediateKey: P256PrivateKey
        do {
            rootKey = try P256PrivateKey(der: m.rootPrivateKey)
            intermediateKey = try P256PrivateKey(der: m.intermediatePrivateKey)
        } catch {
            throw InvalidMaterial(reason: "a stored key does not load: \(error)")
        }
        guard X509_check_private_key(root.x509, rootKey.pkey) == 1,
            X509_check_private_key(intermediate.x509, intermediateKey.pkey) == 1
        else {
            ERR_clear_error()
            throw InvalidMaterial(reason: "a stored key does not match its certificate")
        }
        guard X509_verify(intermediate.x509, rootKey.pkey) == 1 else {
            ERR_clear_error()
            throw InvalidMaterial(reason: "the intermediate is not signed by the root")
        }
        do {
            try self.init(root: root, rootKey: rootKey, intermediate: intermediate, intermediateKey: intermediateKey)
        } catch {
            throw InvalidMaterial(reason: error.description)
        }
    }

    private init(root: Certificate, rootKey: P256PrivateKey, intermediate: Certificate, intermediateKey: P256PrivateKey)
        throws(OpenSSLError)
    {
        self.root = root
        self.rootKey = rootKey
        self.intermediate = intermediate
        self.intermediateKey = intermediateKey
        trustAnchors = .apple(and: root)
        guard let oid = OBJ_txt2obj(AppAttestNonceExtension.oid, 1),
            let bc = X509V3_EXT_conf_nid(nil, nil, NID_basic_constraints, "critical,CA:FALSE"),
            let ku = X509V3_EXT_conf_nid(
                nil, nil, NID_key_usage, "critical,digitalSignature,nonRepudiation,keyEncipherment,dataEncipherment")
        else { throw OpenSSLError.last("prepare credential certificate extensions") }
        nonceOID = oid
        leafBasicConstraints = bc
        leafKeyUsage = ku
    }

    deinit {
        ASN1_OBJECT_free(nonceOID)
        X509_EXTENSION_free(leafBasicConstraints)
        X509_EXTENSION_free(leafKeyUsage)
    }

    public var material: Material {
        Material(
            rootCertificate: root.der, rootPrivateKey: rootKey.derRepresentation,
            intermediateCertificate: intermediate.der, intermediatePrivateKey: intermediateKey.derRepresentation)
    }

    /// Issues a credential certificate for `key` carrying `nonce`, valid for `validity` from `time`
    /// (Apple's live about three days).
    public func credentialCertificate(
        for key: P256PrivateKey, nonce: [UInt8], at time: Instant, validity: Instant.Duration = .days(3)
    ) throws(OpenSSLError) -> Certificate {
        try issue(
            point: key.publicPoint, nonceExtensionValue: AppAttestNonceExtension.extensionValue(nonce: nonce),
            issuer: intermediate.x509, signer: intermediateKey.pkey, basicConstraints: leafBasicConstraints, at: time,
            validity: validity)
    }

    /// Who signs a forged credential certificate.
    package enum ForgedIssuer {
        case intermediate
        /// The root directly, with no intermediate between.
        case root
        /// Any certificate and its key (a credential certificate, to use a non-CA as an intermediate).
        case certificate(Certificate, P256PrivateKey)
    }

    /// A credential certificate that departs from Apple's shape, for the forgery catalogue: any nonce extension
    /// bytes, any issuer, a CA flag. A verifier must refuse each departure.
    package func forgedCredentialCertificate(
        for key: P256PrivateKey, nonceExtensionValue: [UInt8], at time: Instant, validity: Instant.Duration = .days(3),
        issuedBy issuer: ForgedIssuer = .intermediate, certificateAuthority: Bool = false
    ) throws(OpenSSLError) -> Certificate {
        let (issuerCertificate, signer): (OpaquePointer, OpaquePointer) =
            switch issuer {
            case .intermediate: (intermediate.x509, intermediateKey.pkey)
            case .root: (root.x509, rootKey.pkey)
            case .certificate(let c, let k): (c.x509, k.pkey)
            }
        guard
            let bc = X509V3_EXT_conf_nid(
                nil, nil, NID_basic_constraints, certificateAuthority ? "critical,CA:TRUE" : "critical,CA:FALSE")
        else { throw OpenSSLError.last("basic constraints") }
        defer { X509_EXTENSION_free(bc) }
        return try issue(
            point: key.publicPoint, nonceExtensionValue: nonceExtensionValue, issuer: issuerCertificate, signer: signer,
            basicConstraints: bc, at: time, validity: validity)
    }

    private func issue(
        point: [UInt8], nonceExtensionValue value: [UInt8], issuer: OpaquePointer, signer: OpaquePointer,
        basicConstraints: OpaquePointer, at time: Instant, validity: Instant.Duration
    ) throws(OpenSSLError) -> Certificate {
        let keyId = Hex.encode(SHA256.hash(point))
        guard let x = X509_new() else { throw OpenSSLError.last("X509_new") }
        var owned: OpaquePointer? = x
        defer { if let owned { X509_free(owned) } }
        guard X509_set_version(x, 2) == 1,
            ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), DemoCertificateAuthority.serial()) == 1,
            X509_set_issuer_name(x, X509_get_subject_name(issuer)) == 1,
            DemoCertificateAuthority.setName(
                x,
                [
                    ("CN", keyId), ("OU", "AAA Certification"), ("O", DemoCertificateAuthority.organization),
                    ("ST", "California"),
                ]),
            ASN1_TIME_set(X509_getm_notBefore(x), time_t(time.seconds)) != nil,
            ASN1_TIME_set(X509_getm_notAfter(x), time_t((time + validity).seconds)) != nil,
            DemoCertificateAuthority.setP256PublicKey(x, point),
            X509_add_ext(x, basicConstraints, -1) == 1,
            X509_add_ext(x, leafKeyUsage, -1) == 1
        else { throw OpenSSLError.last("build the credential certificate") }

        guard let octets = ASN1_OCTET_STRING_new() else { throw OpenSSLError.last("ASN1_OCTET_STRING_new") }
        defer { ASN1_OCTET_STRING_free(octets) }
        guard ASN1_OCTET_STRING_set(octets, value, Int32(value.count)) == 1,
            let ext = X509_EXTENSION_create_by_OBJ(nil, nonceOID, 0, octets)
        else { throw OpenSSLError.last("build the nonce extension") }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x, ext, -1) == 1, X509_sign(x, signer, EVP_sha256()) > 0 else {
            throw OpenSSLError.last("sign the credential certificate")
        }
        owned = nil
        return Certificate(taking: x)
    }

    /// Sets the subject key from the raw point: `X509_set_pubkey` would run OpenSSL 3.0's slow key encoder.
    private static func setP256PublicKey(_ x: OpaquePointer, _ point: [UInt8]) -> Bool {
        guard let pub = X509_get_X509_PUBKEY(x), let encoded = CRYPTO_malloc(point.count, #fileID, #line) else {
            return false
        }
        encoded.copyMemory(from: point, byteCount: point.count)
        let ok = X509_PUBKEY_set0_param(
            pub, OBJ_nid2obj(NID_X9_62_id_ecPublicKey), V_ASN1_OBJECT,
            UnsafeMutableRawPointer(mutating: UnsafeRawPointer(OBJ_nid2obj(NID_X9_62_prime256v1))),
            encoded.assumingMemoryBound(to: UInt8.self), Int32(point.count))
        if ok != 1 { CRYPTO_free(encoded, #fileID, #line) }
        return ok == 1
    }

    private static func serial() -> UInt64 {
        let b = SecureRandom.bytes(8)
        return b.reduce(0) { $0 << 8 | UInt64($1) } & 0x7fff_ffff_ffff_ffff | 1
    }

    /// Sets the subject of a new certificate (whose subject is empty) by adding the entries to it in place:
    /// `X509_set_subject_name` would copy a name built apart (an encode and a decode, 4% of a simulated device).
    private static func setName(_ x: OpaquePointer, _ entries: [(String, String)]) -> Bool {
        guard let name = X509_get_subject_name(x), X509_NAME_entry_count(name) == 0 else { return false }
        for (field, value) in entries {
            let bytes = Array(value.utf8)
            guard X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8, bytes, Int32(bytes.count), -1, 0) == 1 else {
                return false
            }
        }
        return true
    }

    /// Builds and signs a CA certificate (`issuer` nil: self-signed).
    private static func build(
        subject: [(String, String)], issuer: OpaquePointer?, publicKey: OpaquePointer, signer: OpaquePointer,
        notBefore: Instant, notAfter: Instant, extensions: [(Int32, String)]
    ) throws(OpenSSLError) -> Certificate {
        guard let x = X509_new() else { throw OpenSSLError.last("X509_new") }
        var owned: OpaquePointer? = x
        defer { if let owned { X509_free(owned) } }
        guard X509_set_version(x, 2) == 1, ASN1_INTEGER_set_uint64(X509_get_serialNumber(x), serial()) == 1,
            setName(x, subject),
            X509_set_issuer_name(x, X509_get_subject_name(issuer ?? x)) == 1,
            ASN1_TIME_set(X509_getm_notBefore(x), time_t(notBefore.seconds)) != nil,
            ASN1_TIME_set(X509_getm_notAfter(x), time_t(notAfter.seconds)) != nil,
            X509_set_pubkey(x, publicKey) == 1
        else { throw OpenSSLError.last("build a CA certificate") }
        var ctx = X509V3_CTX()
        X509V3_set_ctx(&ctx, issuer ?? x, x, nil, nil, 0)
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_conf_nid(nil, &ctx, nid, value) else {
                throw OpenSSLError.last("extension \(value)")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x, ext, -1) == 1 else { throw OpenSSLError.last("add extension \(value)") }
        }
        guard X509_sign(x, signer, EVP_sha256()) > 0 else { throw OpenSSLError.last("sign a CA certificate") }
        owned = nil
        return Certificate(taking: x)
    }
}
