import CFido2
import Crypto
import Platform
import StepUp
import Timekeeping

/// A FIDO2 call that failed, with libfido2's own words for the error (`FIDO_ERR_PIN_INVALID`, ...).
public struct SecurityKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public var operation: String
    /// libfido2's error code (`FIDO_ERR_*`), 0 when the failure is rollout's own check.
    public var code: Int32
    public var detail: String

    init(_ operation: String, code: Int32) {
        self.operation = operation
        self.code = code
        detail = String(cString: fido_strerr(code))
    }

    init(_ operation: String, detail: String) {
        self.operation = operation
        code = 0
        self.detail = detail
    }

    public var description: String { "security key: \(operation) failed: \(detail)" }

    /// The key needs its PIN to verify the user (none was given, or the one given was wrong): asking for it and
    /// trying again may succeed.
    public var needsPIN: Bool {
        code == FIDO_ERR_PIN_REQUIRED || code == FIDO_ERR_PIN_INVALID || code == FIDO_ERR_UNSUPPORTED_OPTION
    }
}

/// A security key request another thread may abandon (Esc in the console): `cancel` sends CTAPHID_CANCEL to the
/// key while the request waits for a touch (`fido_dev_cancel`), and a request not yet started never starts. The
/// caller still checks `isCancelled` before using anything the key returned.
public final class SecurityKeyCancellation: @unchecked Sendable {
    private let lock = Lock()
    private var device: OpaquePointer?
    private var cancelled = false

    public init() {}

    public var isCancelled: Bool { lock.withLock { cancelled } }

    public func cancel() {
        lock.withLock {
            cancelled = true
            if let device { _ = fido_dev_cancel(device) }
        }
    }

    fileprivate func begin(_ dev: OpaquePointer) throws(SecurityKeyError) {
        let started: Bool = lock.withLock {
            if cancelled { return false }
            device = dev
            return true
        }
        guard started else { throw SecurityKeyError("get an assertion", detail: "cancelled") }
    }

    fileprivate func end() { lock.withLock { device = nil } }
}

/// How to reach a security key: a device path (`/dev/hidraw3`, as `fido2-token -L` lists it), the first key
/// connected, or a transport of the caller's own installed on the `fido_dev_t` (the software authenticator of the
/// tests plugs in there with `fido_dev_set_io_functions` and `fido_dev_set_transport_functions`), so the same
/// libfido2 code path runs in every case.
public struct SecurityKeyDevice: Sendable {
    /// Opens `dev` (a `fido_dev_t *`); returns libfido2's status.
    let open: @Sendable (OpaquePointer) -> Int32
    public let name: String

    public init(name: String, open: @escaping @Sendable (OpaquePointer) -> Int32) {
        self.name = name
        self.open = open
    }

    public static func path(_ path: String) -> SecurityKeyDevice {
        SecurityKeyDevice(name: path) { fido_dev_open($0, path) }
    }

    /// The first FIDO device libfido2 finds; throws when there is none.
    public static func firstConnected() throws(SecurityKeyError) -> SecurityKeyDevice {
        try SecurityKeyClient.initialise()
        guard let list = fido_dev_info_new(16) else { throw SecurityKeyError("list devices", detail: "out of memory") }
        var list_: OpaquePointer? = list
        defer { fido_dev_info_free(&list_, 16) }
        var found = 0
        let rc = fido_dev_info_manifest(list, 16, &found)
        guard rc == FIDO_OK else { throw SecurityKeyError("list devices", code: rc) }
        guard found > 0, let info = fido_dev_info_ptr(list, 0), let path = fido_dev_info_path(info) else {
            throw SecurityKeyError("find a security key", detail: "no FIDO2 security key is connected")
        }
        return .path(String(cString: path))
    }
}

/// The relying party's side of a security key, through libfido2: enrolment (`fido_dev_make_cred`) and the
/// assertion over a change document (`fido_dev_get_assert`). User verification is always asked for: a PIN when
/// one is given (libfido2 then obtains a PIN/UV token), otherwise the key's own verification (a biometric).
///
/// The assertion is not trusted here: the write path verifies it with `SecurityKeyVerifier`, without the device.
public enum SecurityKeyClient {
    private static let once = InitOnce()

    private final class InitOnce: @unchecked Sendable {
        let lock = Lock()
        var done = false
    }

    /// Opens libfido2 (loaded on first use, see Sources/CFido2/include/shim.h) and initialises it once.
    static func initialise() throws(SecurityKeyError) {
        if let reason = rollout_fido2_unavailable() {
            throw SecurityKeyError("load libfido2", detail: String(cString: reason))
        }
        once.lock.withLock {
            if !once.done {
                fido_init(0)
                once.done = true
            }
        }
    }

    /// A new credential for `operatorID` on `relyingParty`, verified as libfido2 can (the attestation signature,
    /// self or with its certificate) and checked for UP and UV before it is returned.
    public static func enrol(
        _ operatorID: OperatorID, relyingParty: String, algorithm: SecurityKeyCredential.Algorithm = .es256,
        device: SecurityKeyDevice, pin: String?, at now: Instant
    ) throws(SecurityKeyError) -> SecurityKeyCredential {
        try initialise()
        let dev = try open(device)
        defer { close(dev) }
        guard let cred = fido_cred_new() else { throw SecurityKeyError("make a credential", detail: "out of memory") }
        var cred_: OpaquePointer? = cred
        defer { fido_cred_free(&cred_) }
        let challenge = SecureRandom.bytes(32)
        let userID = SHA256.hash(operatorID.rawValue)
        try check("make a credential", fido_cred_set_type(cred, Int32(algorithm.rawValue)))
        try check("make a credential", fido_cred_set_clientdata_hash(cred, challenge, challenge.count))
        try check("make a credential", fido_cred_set_rp(cred, relyingParty, "rollout"))
        try check(
            "make a credential",
            fido_cred_set_user(cred, userID, userID.count, operatorID.rawValue, operatorID.rawValue, nil))
        if pin == nil { try check("make a credential", fido_cred_set_uv(cred, FIDO_OPT_TRUE)) }
        try check("make a credential", fido_dev_make_cred(dev, cred, pin))
        let verified = fido_cred_x5c_len(cred) > 0 ? fido_cred_verify(cred) : fido_cred_verify_self(cred)
        try check("verify the new credential's attestation", verified)
        let flags = fido_cred_flags(cred)
        guard flags & AuthenticatorDataHeader.userPresent != 0, flags & AuthenticatorDataHeader.userVerified != 0 else {
            throw SecurityKeyError("make a credential", detail: "the key did not verify the user (UP and UV are required)")
        }
        let id = bytes(fido_cred_id_ptr(cred), fido_cred_id_len(cred))
        var key = bytes(fido_cred_pubkey_ptr(cred), fido_cred_pubkey_len(cred))
        switch algorithm {
        case .es256:
            guard key.count == 64 else { throw SecurityKeyError("make a credential", detail: "not a P-256 key") }
            key = [0x04] + key
        case .eddsa:
            guard key.count == 32 else { throw SecurityKeyError("make a credential", detail: "not an Ed25519 key") }
        }
        guard !id.isEmpty else { throw SecurityKeyError("make a credential", detail: "the key returned no credential id") }
        return SecurityKeyCredential(
            operatorID: operatorID, credentialID: id, algorithm: algorithm, publicKey: key, relyingParty: relyingParty,
            signCount: fido_cred_sigcount(cred), enrolledAt: now)
    }

    /// The key's assertion over `document` with `credential`: user presence and verification asked for.
    ///
    /// `timeoutMilliseconds`: how long the key may wait for the touch (libfido2's `fido_dev_set_timeout`; nil:
    /// libfido2's default, no limit). `cancellation`: lets another thread abandon the request.
    public static func approve(
        _ document: ChangeDocument, with credential: SecurityKeyCredential, device: SecurityKeyDevice, pin: String?,
        timeoutMilliseconds: Int? = nil, cancellation: SecurityKeyCancellation? = nil
    ) throws(SecurityKeyError) -> SecurityKeyAssertion {
        try initialise()
        let dev = try open(device)
        defer { close(dev) }
        if let timeoutMilliseconds { try check("set the key's timeout", fido_dev_set_timeout(dev, Int32(timeoutMilliseconds))) }
        // Registered after `close`, so it runs before it: no cancel reaches a closed device.
        try cancellation?.begin(dev)
        defer { cancellation?.end() }
        guard let assert = fido_assert_new() else { throw SecurityKeyError("get an assertion", detail: "out of memory") }
        var assert_: OpaquePointer? = assert
        defer { fido_assert_free(&assert_) }
        let hash = document.clientDataHash
        try check("get an assertion", fido_assert_set_rp(assert, credential.relyingParty))
        try check("get an assertion", fido_assert_set_clientdata_hash(assert, hash, hash.count))
        try check(
            "get an assertion", fido_assert_allow_cred(assert, credential.credentialID, credential.credentialID.count))
        try check("get an assertion", fido_assert_set_up(assert, FIDO_OPT_TRUE))
        if pin == nil { try check("get an assertion", fido_assert_set_uv(assert, FIDO_OPT_TRUE)) }
        try check("get an assertion", fido_dev_get_assert(dev, assert, pin))
        guard fido_assert_count(assert) == 1 else {
            throw SecurityKeyError("get an assertion", detail: "the key returned \(fido_assert_count(assert)) assertions")
        }
        // libfido2 hands the authenticator data CBOR-wrapped (a byte string), as the key sent it.
        let wrapped = bytes(fido_assert_authdata_ptr(assert, 0), fido_assert_authdata_len(assert, 0))
        guard let authData = unwrapByteString(wrapped) else {
            throw SecurityKeyError("get an assertion", detail: "the authenticator data is not a CBOR byte string")
        }
        var id = bytes(fido_assert_id_ptr(assert, 0), fido_assert_id_len(assert, 0))
        // With one credential allowed a key may omit its id (CTAP 2.1 §6.2.2); it can only be that one.
        if id.isEmpty { id = credential.credentialID }
        return SecurityKeyAssertion(
            credentialID: id, authenticatorData: authData,
            signature: bytes(fido_assert_sig_ptr(assert, 0), fido_assert_sig_len(assert, 0)))
    }

    /// The content of a definite-length CBOR byte string that spans `bytes` exactly; nil otherwise.
    static func unwrapByteString(_ bytes: [UInt8]) -> [UInt8]? {
        guard let first = bytes.first, first >> 5 == 2 else { return nil }
        var length = Int(first & 0x1f)
        var start = 1
        switch length {
        case 0..<24: break
        case 24, 25:
            let n = length == 24 ? 1 : 2
            guard bytes.count >= 1 + n else { return nil }
            length = bytes[1...n].reduce(0) { $0 << 8 | Int($1) }
            start = 1 + n
        default: return nil
        }
        guard bytes.count == start + length else { return nil }
        return Array(bytes[start...])
    }

    private static func open(_ device: SecurityKeyDevice) throws(SecurityKeyError) -> OpaquePointer {
        guard let dev = fido_dev_new() else { throw SecurityKeyError("open \(device.name)", detail: "out of memory") }
        let rc = device.open(dev)
        guard rc == FIDO_OK else {
            var d: OpaquePointer? = dev
            fido_dev_free(&d)
            throw SecurityKeyError("open \(device.name)", code: rc)
        }
        return dev
    }

    private static func close(_ dev: OpaquePointer) {
        _ = fido_dev_close(dev)
        var d: OpaquePointer? = dev
        fido_dev_free(&d)
    }

    private static func check(_ operation: String, _ rc: Int32) throws(SecurityKeyError) {
        guard rc == FIDO_OK else { throw SecurityKeyError(operation, code: rc) }
    }

    private static func bytes(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> [UInt8] {
        guard let pointer, count > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: pointer, count: count))
    }
}
