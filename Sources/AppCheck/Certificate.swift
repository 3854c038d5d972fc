import COpenSSL
import Crypto
import Glibc
import Platform
import Timekeeping

/// An X.509 certificate parsed by libcrypto.
public final class Certificate: @unchecked Sendable {
    let x509: OpaquePointer
    /// The DER bytes it was parsed from.
    public let der: [UInt8]
    /// Whether `init(credentialDER:)` set the key from its point (tests: which way the certificate was parsed).
    package let keyLoadedFromPoint: Bool

    /// Parses DER; nil when libcrypto refuses it or bytes follow the certificate.
    public init?(der: [UInt8]) {
        guard let cert = Certificate.parse(der, keysIn: nil) else { return nil }
        x509 = cert
        self.der = der
        keyLoadedFromPoint = false
    }

    /// Parses a credential certificate (the leaf of an App Attest chain) as `init(der:)` does, faster when its key
    /// is an uncompressed P-256 point.
    ///
    /// OpenSSL 3.0 decodes a certificate's key as it parses it, through a decoder context it builds by walking
    /// every decoder and key manager its provider offers: about 150 µs here, 39% of a simulated device's key,
    /// attestation and verification. This parses with the key left undecoded (decoded in a library context that
    /// offers nothing), loads the key from its point as `P256PublicKey` does, and sets it as the certificate's key.
    /// libcrypto 3.0 keeps the signed part's bytes as received when a key is set, and checks the signature over
    /// them; the result is kept only when libcrypto encodes it back to exactly `der`, so a library that encoded a
    /// certificate afresh once its key is set could not have the signature checked over other bytes than those
    /// received. Otherwise, and for any other key, the certificate is parsed as `init(der:)` parses it.
    public init?(credentialDER der: [UInt8]) {
        if let cert = Certificate.parseWithKeyFromPoint(der) {
            x509 = cert
            keyLoadedFromPoint = true
        } else if let cert = Certificate.parse(der, keysIn: nil) {
            x509 = cert
            keyLoadedFromPoint = false
        } else {
            return nil
        }
        self.der = der
    }

    /// The certificate in `der`, its key decoded in the library context `context` (nil: the default one); nil when
    /// libcrypto refuses it or bytes follow it.
    private static func parse(_ der: [UInt8], keysIn context: OpaquePointer?) -> OpaquePointer? {
        var consumed = 0
        let cert: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            let c = ASN1_item_d2i_ex(nil, &p, buf.count, X509_it(), context, nil)
            if let p, let base = buf.baseAddress { consumed = p - base }
            return c
        }
        guard let cert, consumed == der.count else {
            if let cert { X509_free(cert) }
            ERR_clear_error()
            return nil
        }
        return cert
    }

    /// `der` parsed with its key loaded from its uncompressed P-256 point, when it has one and libcrypto encodes
    /// the result back to exactly `der`; nil otherwise.
    private static func parseWithKeyFromPoint(_ der: [UInt8]) -> OpaquePointer? {
        guard let context = keyless.pointer, let cert = parse(der, keysIn: context) else { return nil }
        var kept = false
        defer {
            if !kept { X509_free(cert) }
            ERR_clear_error()
        }
        // The key's SubjectPublicKeyInfo must be P-256's with an uncompressed point on the curve.
        guard let pub = X509_get_X509_PUBKEY(cert),
            let key = P256PublicKey(subjectPublicKeyInfo: OpenSSL.der { i2d_X509_PUBKEY(pub, $0) }),
            let pkey = key.newLegacyKey()
        else { return nil }
        defer { EVP_PKEY_free(pkey) }
        guard X509_set_pubkey(cert, pkey) == 1, OpenSSL.der({ i2d_X509(cert, $0) }) == der else { return nil }
        kept = true
        return cert
    }

    /// A library context with only OpenSSL's null provider loaded, so nothing can be fetched from it (a context
    /// with no provider loaded would load the default one on its first fetch). Nil if it cannot be made; then
    /// every certificate is parsed as `init(der:)` parses it.
    private static let keyless = KeylessContext()

    private final class KeylessContext: @unchecked Sendable {
        let pointer: OpaquePointer?
        init() {
            guard let context = OSSL_LIB_CTX_new() else {
                pointer = nil
                return
            }
            guard OSSL_PROVIDER_load(context, "null") != nil else {
                OSSL_LIB_CTX_free(context)
                ERR_clear_error()
                pointer = nil
                return
            }
            pointer = context
        }
    }

    /// Takes ownership of a certificate libcrypto built.
    init(taking cert: OpaquePointer) {
        x509 = cert
        der = OpenSSL.der { i2d_X509(cert, $0) }
        keyLoadedFromPoint = false
    }

    deinit { X509_free(x509) }

    /// The subject's common name (the hex keyId for an App Attest credential certificate).
    public var subjectCommonName: String? { Certificate.commonName(X509_get_subject_name(x509)) }
    /// The issuer's common name.
    public var issuerCommonName: String? { Certificate.commonName(X509_get_issuer_name(x509)) }

    public var notBefore: Instant? { Certificate.instant(X509_get0_notBefore(x509)) }
    public var notAfter: Instant? { Certificate.instant(X509_get0_notAfter(x509)) }

    /// The subjectPublicKey bit string's bytes exactly as the certificate carries them.
    public var subjectPublicKeyBytes: [UInt8] {
        guard let bits = X509_get0_pubkey_bitstr(x509) else { return [] }
        return Certificate.bytes(of: bits)
    }

    /// True when the subject key is an EC key on P-256.
    public var hasP256Key: Bool {
        guard let key = X509_get0_pubkey(x509), EVP_PKEY_is_a(key, "EC") == 1 else {
            ERR_clear_error()
            return false
        }
        var name = [CChar](repeating: 0, count: 64)
        var len = 0
        guard EVP_PKEY_get_group_name(key, &name, name.count, &len) == 1 else {
            ERR_clear_error()
            return false
        }
        let group = String(decoding: name.prefix(len).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// True when basic constraints say `CA:TRUE`.
    public var isCertificateAuthority: Bool { X509_get_extension_flags(x509) & UInt32(EXFLAG_CA) != 0 }
    /// True when the issuer name is the subject name (a root, or a self-issued CA certificate).
    public var isSelfIssued: Bool { X509_get_extension_flags(x509) & UInt32(EXFLAG_SI) != 0 }

    /// The key usage bits (`KU_*`); every bit is set when the certificate has no key usage extension.
    var keyUsage: UInt32 { X509_get_key_usage(x509) }

    /// The value (extnValue contents) of every extension with the dotted `oid`, in order.
    public func extensionValues(oid: String) -> [[UInt8]] {
        guard let obj = OBJ_txt2obj(oid, 1) else {
            ERR_clear_error()
            return []
        }
        defer { ASN1_OBJECT_free(obj) }
        var out: [[UInt8]] = []
        var index = X509_get_ext_by_OBJ(x509, obj, -1)
        while index >= 0 {
            if let ext = X509_get_ext(x509, index), let data = X509_EXTENSION_get_data(ext) {
                out.append(Certificate.bytes(of: data))
            }
            index = X509_get_ext_by_OBJ(x509, obj, index)
        }
        return out
    }

    static func bytes(of string: UnsafePointer<ASN1_STRING>) -> [UInt8] {
        let n = Int(ASN1_STRING_length(string))
        guard n > 0, let p = ASN1_STRING_get0_data(string) else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: n))
    }

    static func commonName(_ name: OpaquePointer?) -> String? {
        guard let name else { return nil }
        let index = X509_NAME_get_index_by_NID(name, NID_commonName, -1)
        guard index >= 0, let entry = X509_NAME_get_entry(name, index), let data = X509_NAME_ENTRY_get_data(entry)
        else { return nil }
        return String(decoding: bytes(of: data), as: UTF8.self)
    }

    static func instant(_ time: UnsafePointer<ASN1_TIME>?) -> Instant? {
        guard let time else { return nil }
        var t = tm()
        guard ASN1_TIME_to_tm(time, &t) == 1 else {
            ERR_clear_error()
            return nil
        }
        let days = ISO8601.daysFromCivil(Int64(t.tm_year) + 1900, Int64(t.tm_mon) + 1, Int64(t.tm_mday))
        return Instant(seconds: days * 86_400 + Int64(t.tm_hour) * 3600 + Int64(t.tm_min) * 60 + Int64(t.tm_sec))
    }
}

/// The certificates an attestation chain may end in.
///
/// Apple's App Attestation root is the default and is pinned in the source (its SHA-256 is checked when it is
/// loaded); the demo authority's root is trusted only by verifiers built with it.
public final class TrustAnchors: @unchecked Sendable {
    let store: OpaquePointer
    /// The anchors, for display.
    public let certificates: [Certificate]

    /// Whether chains through an anchored intermediate take the short path of `verify` (off only to measure the
    /// full path).
    let shortPath: Bool

    /// Anchors from DER certificates.
    public convenience init(_ roots: [Certificate]) { self.init(roots, shortPath: true) }

    package init(_ roots: [Certificate], shortPath: Bool) {
        store = X509_STORE_new()!
        for root in roots { X509_STORE_add_cert(store, root.x509) }
        certificates = roots
        self.shortPath = shortPath
    }

    deinit { X509_STORE_free(store) }

    private let cacheLock = Lock()
    private var parsedIntermediates: [[UInt8]: Certificate] = [:]
    /// Intermediates a full path validation has anchored, by DER: each with a store that trusts it alone.
    private var validatedIntermediates: [[UInt8]: ValidatedIntermediate] = [:]
    /// How many chains were verified through a validated intermediate (a test hook).
    package var shortPathVerifications: Int { cacheLock.withLock { shortPaths } }
    private var shortPaths = 0

    /// An intermediate certificate, parsed once per distinct DER and then reused.
    ///
    /// Every attestation of one CA carries the same intermediate, and OpenSSL 3.0 spends about 100 µs decoding a
    /// certificate's key; a parsed certificate is immutable, so sharing it is safe. At most 16 are kept.
    func intermediate(der: [UInt8]) -> Certificate? {
        if let hit = cacheLock.withLock({ parsedIntermediates[der] }) { return hit }
        guard let parsed = Certificate(der: der) else { return nil }
        cacheLock.withLock {
            if parsedIntermediates.count >= 16 { parsedIntermediates.removeAll() }
            parsedIntermediates[der] = parsed
        }
        return parsed
    }

    /// Apple's App Attestation Root CA only: what every production app uses.
    public static let apple: TrustAnchors = TrustAnchors([AppleAppAttestationRoot.certificate])

    /// Apple's root and one more (the demo authority's) for an app that is configured to trust it.
    public static func apple(and extra: Certificate) -> TrustAnchors {
        TrustAnchors([AppleAppAttestationRoot.certificate, extra])
    }

    /// Why a chain failed, in the verifier's terms.
    enum ChainFailure {
        case expired(depth: Int32)
        case notYetValid(depth: Int32)
        case badSignature(depth: Int32)
        case untrusted(String)
        /// The credential certificate chains to an anchor without an intermediate.
        case leafIssuedByRoot
        /// A certificate sent as an intermediate is a root (self-issued, or one of the anchors).
        case rootAsIntermediate(index: Int)
        /// `x5c` does not hold exactly the credential certificate and one intermediate.
        case chainLength(Int)
        /// A certificate breaks its basic constraints or key usage (depth 0 is the credential certificate).
        case constraint(depth: Int32, String)
        case other(String)
    }

    /// Verifies `leaf` up to one of the anchors through `intermediates` at `time`, with no X.509 purpose set.
    ///
    /// On top of libcrypto's path validation, the chain must have Apple's shape: exactly credential certificate →
    /// intermediate → anchor, the intermediate a CA that may sign certificates and not itself a root, the
    /// credential certificate not a CA and allowed to sign. Validity includes the notAfter second (RFC 5280
    /// §4.1.2.5: "from notBefore through notAfter, inclusive"); libcrypto alone treats that second as expired.
    ///
    /// Every attestation of one CA carries the same intermediate, and re-checking the anchor's signature on it is a
    /// third of the work. So once a full validation has anchored an intermediate (and the chain had Apple's shape),
    /// later chains through the same DER are first tried on a short path: a store trusting that intermediate alone
    /// (`X509_V_FLAG_PARTIAL_CHAIN`), which still checks the credential certificate's signature, both validity
    /// periods, the intermediate's constraints and Apple's shape, plus the anchor's own validity period at `time`.
    /// What it skips is fixed by the bytes: the anchor's signature on the intermediate. Only anchors without name
    /// or policy constraints (which would bind the credential certificate) take it. A chain the short path refuses
    /// is verified in full, so every failure reads exactly as it did without the short path.
    func verify(leaf: Certificate, intermediates: [Certificate], at time: Instant) -> ChainFailure? {
        if shortPath, intermediates.count == 1, let validated = cacheLock.withLock({ validatedIntermediates[intermediates[0].der] }),
            validated.anchor.isValid(at: time),
            shortPathAccepts(leaf: leaf, through: validated, at: time)
        {
            cacheLock.withLock { shortPaths += 1 }
            return nil
        }
        return fullVerification(leaf: leaf, intermediates: intermediates, at: time)
    }

    /// The chain checked up to an anchor, with Apple's shape; an anchored intermediate is remembered for `verify`.
    private func fullVerification(leaf: Certificate, intermediates: [Certificate], at time: Instant) -> ChainFailure? {
        guard let ctx = X509_STORE_CTX_new() else { return .other("X509_STORE_CTX_new failed") }
        defer { X509_STORE_CTX_free(ctx) }
        let stack = OPENSSL_sk_new_null()
        defer { OPENSSL_sk_free(stack) }
        for c in intermediates { OPENSSL_sk_push(stack, UnsafeRawPointer(c.x509)) }
        guard X509_STORE_CTX_init(ctx, store, leaf.x509, stack) == 1 else {
            return .other(OpenSSLError.last("X509_STORE_CTX_init").reason)
        }
        Self.prepare(ctx, at: time)
        if X509_verify_cert(ctx) == 1 {
            let chain = X509_STORE_CTX_get0_chain(ctx)
            let length = Int(OPENSSL_sk_num(chain))
            let failure = shapeFailure(leaf: leaf, intermediates: intermediates, chainLength: length)
            if shortPath, failure == nil, length == 3, let top = OPENSSL_sk_value(chain, 2),
                let anchor = certificates.first(where: { UnsafeRawPointer($0.x509) == top })
            {
                remember(intermediates[0], anchoredBy: anchor)
            }
            return failure
        }
        let code = X509_STORE_CTX_get_error(ctx)
        let depth = X509_STORE_CTX_get_error_depth(ctx)
        let reason = String(cString: X509_verify_cert_error_string(Int(code)))
        ERR_clear_error()
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED: return .expired(depth: depth)
        case X509_V_ERR_CERT_NOT_YET_VALID: return .notYetValid(depth: depth)
        case X509_V_ERR_CERT_SIGNATURE_FAILURE: return .badSignature(depth: depth)
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
            X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
            X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            return .untrusted(reason)
        case X509_V_ERR_INVALID_CA, X509_V_ERR_PATH_LENGTH_EXCEEDED, X509_V_ERR_KEYUSAGE_NO_CERTSIGN:
            return .constraint(depth: depth, reason)
        default: return .other("\(reason) (depth \(depth))")
        }
    }

    /// The time and the one override shared by both paths.
    private static func prepare(_ ctx: OpaquePointer, at time: Instant) {
        // An injectable instant: App Attest leaves live about three days, and tests fix the time.
        X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(ctx), time_t(time.seconds))
        X509_STORE_CTX_set_verify_cb(ctx) { ok, ctx in
            // The one case overridden: "expired" exactly at the notAfter second, which RFC 5280 counts as valid.
            guard ok == 0, let ctx, X509_STORE_CTX_get_error(ctx) == X509_V_ERR_CERT_HAS_EXPIRED,
                let cert = X509_STORE_CTX_get_current_cert(ctx), let param = X509_STORE_CTX_get0_param(ctx),
                ASN1_TIME_cmp_time_t(X509_get0_notAfter(cert), X509_VERIFY_PARAM_get_time(param)) == 0
            else { return ok }
            X509_STORE_CTX_set_error(ctx, X509_V_OK)
            return 1
        }
    }

    /// Remembers an intermediate a full validation anchored in `anchor`, unless the anchor constrains names or
    /// policies (the short path would not apply them to the credential certificate).
    private func remember(_ intermediate: Certificate, anchoredBy anchor: Certificate) {
        guard !anchor.constrainsDescendants, cacheLock.withLock({ validatedIntermediates[intermediate.der] == nil }),
            let only = X509_STORE_new()
        else { return }
        guard X509_STORE_add_cert(only, intermediate.x509) == 1,
            X509_STORE_set_flags(only, UInt(X509_V_FLAG_PARTIAL_CHAIN)) == 1
        else {
            X509_STORE_free(only)
            ERR_clear_error()
            return
        }
        let validated = ValidatedIntermediate(certificate: intermediate, anchor: anchor, store: only)
        cacheLock.withLock {
            if validatedIntermediates.count >= 16 { validatedIntermediates.removeAll() }
            validatedIntermediates[intermediate.der] = validated
        }
    }

    /// Whether `leaf` verifies up to the validated intermediate alone, with Apple's shape.
    private func shortPathAccepts(leaf: Certificate, through validated: ValidatedIntermediate, at time: Instant) -> Bool {
        guard let ctx = X509_STORE_CTX_new() else { return false }
        defer { X509_STORE_CTX_free(ctx) }
        guard X509_STORE_CTX_init(ctx, validated.store, leaf.x509, nil) == 1 else {
            ERR_clear_error()
            return false
        }
        Self.prepare(ctx, at: time)
        guard X509_verify_cert(ctx) == 1 else {
            ERR_clear_error()
            return false
        }
        let chain = X509_STORE_CTX_get0_chain(ctx)
        return OPENSSL_sk_num(chain) == 2
            && OPENSSL_sk_value(chain, 1) == UnsafeRawPointer(validated.certificate.x509)
            && shapeFailure(leaf: leaf, intermediates: [validated.certificate], chainLength: 3) == nil
    }

    /// The checks of Apple's chain shape once libcrypto has validated a path of `chainLength` certificates.
    private func shapeFailure(leaf: Certificate, intermediates: [Certificate], chainLength: Int) -> ChainFailure? {
        let anchors = Set(certificates.map(\.der))
        if let i = intermediates.firstIndex(where: { $0.isSelfIssued || anchors.contains($0.der) }) {
            return .rootAsIntermediate(index: i + 1)
        }
        if chainLength == 2 { return .leafIssuedByRoot }
        guard intermediates.count == 1, chainLength == 3 else { return .chainLength(intermediates.count + 1) }
        for (depth, c) in [leaf, intermediates[0]].enumerated() {
            if let reason = c.constraintFailure(depth: depth) { return .constraint(depth: Int32(depth), reason) }
        }
        return nil
    }
}

/// An intermediate a full path validation anchored, with a store that trusts it alone.
private final class ValidatedIntermediate: @unchecked Sendable {
    let certificate: Certificate
    let anchor: Certificate
    let store: OpaquePointer

    init(certificate: Certificate, anchor: Certificate, store: OpaquePointer) {
        self.certificate = certificate
        self.anchor = anchor
        self.store = store
    }

    deinit { X509_STORE_free(store) }
}

extension Certificate {
    /// Whether `time` is within notBefore through notAfter, both inclusive (RFC 5280 §4.1.2.5).
    func isValid(at time: Instant) -> Bool {
        guard let notBefore, let notAfter else { return false }
        return notBefore <= time && time <= notAfter
    }

    /// Whether the certificate carries an extension that constrains the certificates below it beyond its
    /// signature: name constraints, policy constraints, policy mappings or inhibitAnyPolicy.
    var constrainsDescendants: Bool {
        [NID_name_constraints, NID_policy_constraints, NID_policy_mappings, NID_inhibit_any_policy].contains {
            X509_get_ext_by_NID(x509, $0, -1) >= 0
        }
    }
    /// Why this certificate may not stand at `depth` of an App Attest chain (0: credential, 1: intermediate).
    func constraintFailure(depth: Int) -> String? {
        if depth == 0 {
            if isCertificateAuthority { return "the credential certificate is a CA (basic constraints CA:TRUE)" }
            if keyUsage & UInt32(KU_DIGITAL_SIGNATURE) == 0 {
                return "the credential certificate's key usage does not allow digitalSignature"
            }
        } else {
            if !isCertificateAuthority { return "the intermediate is not a CA (basic constraints)" }
            if keyUsage & UInt32(KU_KEY_CERT_SIGN) == 0 {
                return "the intermediate's key usage does not allow keyCertSign"
            }
        }
        return nil
    }
}
