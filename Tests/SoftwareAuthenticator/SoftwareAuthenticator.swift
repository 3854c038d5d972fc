import AppCheck
import CFido2
import Crypto
import Platform

/// A software FIDO2 authenticator behind libfido2's own transport hooks, so that the real libfido2 code path
/// (CTAPHID INIT, the CTAP2 CBOR commands, its parsing and checks) runs in tests without hardware.
///
/// Written from the CTAP 2.1 specification (§8.1 CTAPHID: INIT answers the 8-byte nonce with a channel id,
/// versions and capabilities; §6 authenticator API: `authenticatorGetInfo` 0x04, `authenticatorMakeCredential`
/// 0x01, `authenticatorGetAssertion` 0x02; §6.5 status codes) and WebAuthn §6.1 (authenticator data), §8.2
/// (packed self attestation). It is strict: unknown commands and parameters of the wrong type are refused with
/// the spec's status codes, a credential is found only for its own relying party, and user verification is the
/// key's own (a built-in verification, like a fingerprint reader; `getInfo` says `uv: true`, so libfido2 sends
/// the `uv` option rather than a PIN token). Keys are P-256 in libcrypto.
///
/// `faults` make it misbehave the way a broken or cloned key would, to show the relying party's checks refuse.
public final class SoftwareAuthenticator: @unchecked Sendable {
    /// Ways to misbehave.
    public struct Faults: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Sign without setting UV (a key that skips verification).
        public static let noUserVerification = Faults(rawValue: 1)
        /// Sign without setting UP (nobody touched it).
        public static let noUserPresence = Faults(rawValue: 2)
        /// Do not advance the counter (a clone of a key, or a replay).
        public static let frozenCounter = Faults(rawValue: 4)
        /// Sign authenticator data for another relying party than the one asked (a key answering for another site).
        public static let otherRelyingParty = Faults(rawValue: 8)
        /// Sign with another of its credentials for the relying party than the one asked for (a key shared by two
        /// operators answering with the other one's credential).
        public static let otherCredential = Faults(rawValue: 16)
    }

    struct Credential {
        var id: [UInt8]
        var relyingParty: String
        var key: P256PrivateKey
    }

    public static let aaguid: [UInt8] = Array(SHA256.hash("rollout software authenticator").prefix(16))

    private let lock = Lock()
    private var credentials: [Credential] = []
    private var counter: UInt32 = 0
    private var pending: (command: UInt8, bytes: [UInt8])?
    public var faults: Faults = []
    /// Commands received, for tests that check what libfido2 sent (`0x04`, `0x01`, `0x02`).
    public private(set) var commands: [UInt8] = []
    /// The path libfido2 opens this authenticator by.
    public let path: String

    public init() {
        path = Registry.shared.add(nil)
        Registry.shared.set(path, self)
    }

    /// The signature counter the next signature will carry minus one.
    public var signCount: UInt32 { lock.withLock { counter } }

    /// Sets the counter (a test that replays an older state of the key).
    public func setSignCount(_ n: UInt32) { lock.withLock { counter = n } }

    /// Opens `dev` (a `fido_dev_t *`) on this authenticator through libfido2's transport hooks.
    public func open(_ dev: OpaquePointer) -> Int32 {
        var io = fido_dev_io_t(open: ioOpen, close: ioClose, read: ioRead, write: ioWrite)
        var transport = fido_dev_transport_t(rx: transportRX, tx: transportTX)
        var rc = fido_dev_set_io_functions(dev, &io)
        guard rc == FIDO_OK else { return rc }
        rc = fido_dev_set_transport_functions(dev, &transport)
        guard rc == FIDO_OK else { return rc }
        return fido_dev_open(dev, path)
    }

    // MARK: CTAPHID

    /// One message from libfido2 (`tx`): INIT or CBOR; anything else is refused.
    func receive(command: UInt8, _ bytes: [UInt8]) -> Bool {
        lock.withLock {
            switch command {
            case UInt8(CTAP_CMD_INIT):
                // §11.2.9.1.3: the 8-byte nonce, a channel id, CTAPHID protocol 2, device version, capabilities
                // (CBOR, no U2F MSG).
                guard bytes.count == 8 else { return false }
                pending = (command, bytes + [0x00, 0x00, 0x00, 0x07, 2, 1, 0, 0, UInt8(FIDO_CAP_CBOR | FIDO_CAP_NMSG)])
                return true
            case UInt8(CTAP_CMD_CBOR):
                guard let first = bytes.first else { return false }
                commands.append(first)
                pending = (command, cbor(first, Array(bytes.dropFirst())))
                return true
            default:
                return false
            }
        }
    }

    /// The answer to the last message (`rx`), when libfido2 asks for the command it sent.
    func answer(command: UInt8) -> [UInt8]? {
        lock.withLock {
            guard let p = pending, p.command == command else { return nil }
            pending = nil
            return p.bytes
        }
    }

    // MARK: CTAP2

    enum Status: UInt8 {
        case ok = 0x00
        case invalidCommand = 0x01
        case invalidParameter = 0x02
        case cborUnexpectedType = 0x11
        case invalidCBOR = 0x12
        case missingParameter = 0x14
        case unsupportedAlgorithm = 0x26
        case unsupportedOption = 0x2B
        case invalidOption = 0x2C
        case noCredentials = 0x2E
        case pinAuthInvalid = 0x33
    }

    private func cbor(_ command: UInt8, _ body: [UInt8]) -> [UInt8] {
        let request: CBOR?
        if body.isEmpty {
            request = nil
        } else {
            guard let decoded = try? CBORDecoder(limits: .init(maxBytes: 7609, maxDepth: 8, maxItems: 256)).decode(body),
                decoded.mapEntries != nil
            else { return [Status.invalidCBOR.rawValue] }
            request = decoded
        }
        let result: Result<CBOR, StatusError>
        switch command {
        case 0x04: result = body.isEmpty ? .success(info) : .failure(StatusError(.invalidParameter))
        case 0x01: result = request.map(makeCredential) ?? .failure(StatusError(.missingParameter))
        case 0x02: result = request.map(getAssertion) ?? .failure(StatusError(.missingParameter))
        default: result = .failure(StatusError(.invalidCommand))
        }
        switch result {
        case .success(let answer): return [Status.ok.rawValue] + answer.encoded()
        case .failure(let e): return [e.status.rawValue]
        }
    }

    struct StatusError: Error {
        var status: Status
        init(_ status: Status) { self.status = status }
    }

    /// authenticatorGetInfo (§6.4).
    private var info: CBOR {
        .map([
            .init(.int(1), .array([.text("FIDO_2_0"), .text("FIDO_2_1")])),
            .init(.int(3), .bytes(Self.aaguid)),
            .init(.int(4), .map([
                .init(.text("rk"), .bool(false)), .init(.text("up"), .bool(true)), .init(.text("uv"), .bool(true)),
                .init(.text("plat"), .bool(false)),
            ])),
            .init(.int(5), .int(1200)),
            .init(.int(10), .array([.map([.init(.text("alg"), .int(-7)), .init(.text("type"), .text("public-key"))])])),
        ])
    }

    /// authenticatorMakeCredential (§6.1): packed self attestation with a new P-256 key.
    private func makeCredential(_ request: CBOR) -> Result<CBOR, StatusError> {
        do {
            let hash = try bytes(request[1], length: 32)
            guard let rp = request[2], rp.mapEntries != nil, let rpID = rp["id"]?.textString else {
                throw StatusError(request[2] == nil ? .missingParameter : .cborUnexpectedType)
            }
            guard let user = request[3], user.mapEntries != nil, let userID = user["id"]?.byteString, userID.count <= 64
            else { throw StatusError(request[3] == nil ? .missingParameter : .cborUnexpectedType) }
            guard let params = request[4]?.arrayItems else { throw StatusError(.missingParameter) }
            guard params.contains(where: { $0["alg"]?.integer == -7 && $0["type"]?.textString == "public-key" }) else {
                throw StatusError(.unsupportedAlgorithm)
            }
            guard request[8] == nil else { throw StatusError(.pinAuthInvalid) }  // no PIN on this key
            let uv = try options(request[7], allowed: ["rk", "uv", "up"])
            if uv["rk"] == true { throw StatusError(.unsupportedOption) }
            if uv["up"] == false { throw StatusError(.invalidOption) }
            guard let key = try? P256PrivateKey() else { throw StatusError(.invalidCommand) }
            let id = SecureRandom.bytes(32)
            credentials.append(Credential(id: id, relyingParty: rpID, key: key))
            counter += 1
            let point = key.publicPoint
            let cose = CBOR.map([
                .init(.int(1), .int(2)), .init(.int(3), .int(-7)), .init(.int(-1), .int(1)),
                .init(.int(-2), .bytes(Array(point[1..<33]))), .init(.int(-3), .bytes(Array(point[33..<65]))),
            ]).encoded()
            var flags: UInt8 = 0x01 | 0x40
            if uv["uv"] == true { flags |= 0x04 }
            let authData = SHA256.hash(rpID) + [flags] + bigEndian(counter) + Self.aaguid + [0, UInt8(id.count)] + id + cose
            guard let sig = try? key.signature(for: authData + hash) else { throw StatusError(.invalidCommand) }
            return .success(
                .map([
                    .init(.int(1), .text("packed")), .init(.int(2), .bytes(authData)),
                    .init(.int(3), .map([.init(.text("alg"), .int(-7)), .init(.text("sig"), .bytes(sig))])),
                ]))
        } catch let e as StatusError {
            return .failure(e)
        } catch {
            return .failure(StatusError(.invalidCommand))
        }
    }

    /// authenticatorGetAssertion (§6.2): one of this key's credentials for the relying party in the allow list.
    private func getAssertion(_ request: CBOR) -> Result<CBOR, StatusError> {
        do {
            guard let rpID = request[1]?.textString else {
                throw StatusError(request[1] == nil ? .missingParameter : .cborUnexpectedType)
            }
            let hash = try bytes(request[2], length: 32)
            guard request[6] == nil else { throw StatusError(.pinAuthInvalid) }
            let opts = try options(request[5], allowed: ["up", "uv"])
            let allowed = request[3]?.arrayItems?.compactMap { $0["id"]?.byteString } ?? []
            let other = faults.contains(.otherCredential)
            guard let credential = credentials.first(where: { c in c.relyingParty == rpID && allowed.contains(c.id) != other })
            else { throw StatusError(.noCredentials) }
            if !faults.contains(.frozenCounter) { counter += 1 }
            var flags: UInt8 = 0
            if opts["up"] != false, !faults.contains(.noUserPresence) { flags |= 0x01 }
            if opts["uv"] == true, !faults.contains(.noUserVerification) { flags |= 0x04 }
            let signedFor = faults.contains(.otherRelyingParty) ? rpID + ".elsewhere" : rpID
            let authData = SHA256.hash(signedFor) + [flags] + bigEndian(counter)
            guard let sig = try? credential.key.signature(for: authData + hash) else { throw StatusError(.invalidCommand) }
            return .success(
                .map([
                    .init(.int(1), .map([.init(.text("id"), .bytes(credential.id)), .init(.text("type"), .text("public-key"))])),
                    .init(.int(2), .bytes(authData)), .init(.int(3), .bytes(sig)),
                ]))
        } catch let e as StatusError {
            return .failure(e)
        } catch {
            return .failure(StatusError(.invalidCommand))
        }
    }

    private func bytes(_ item: CBOR?, length: Int) throws -> [UInt8] {
        guard let item else { throw StatusError(.missingParameter) }
        guard let b = item.byteString else { throw StatusError(.cborUnexpectedType) }
        guard b.count == length else { throw StatusError(.invalidParameter) }
        return b
    }

    private func options(_ item: CBOR?, allowed: Set<String>) throws -> [String: Bool] {
        guard let item else { return [:] }
        guard let entries = item.mapEntries else { throw StatusError(.cborUnexpectedType) }
        var out: [String: Bool] = [:]
        for e in entries {
            guard let k = e.key.textString, case .bool(let v) = e.value else { throw StatusError(.cborUnexpectedType) }
            guard allowed.contains(k) else { throw StatusError(.unsupportedOption) }
            out[k] = v
        }
        return out
    }

    private func bigEndian(_ n: UInt32) -> [UInt8] { [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] }
}

/// The authenticators libfido2 can open, by path: its `open` hook gets only the path.
final class Registry: @unchecked Sendable {
    static let shared = Registry()
    private let lock = Lock()
    private var next = 0
    private var byPath: [String: SoftwareAuthenticator] = [:]
    private var handles: [String: UnsafeMutableRawPointer] = [:]

    func add(_ a: SoftwareAuthenticator?) -> String {
        lock.withLock {
            next += 1
            return "rollout-software-key-\(next)"
        }
    }

    func set(_ path: String, _ a: SoftwareAuthenticator) { lock.withLock { byPath[path] = a } }

    func authenticator(_ path: String) -> SoftwareAuthenticator? { lock.withLock { byPath[path] } }
}

// libfido2's hooks. The io handle is the retained authenticator; read and write are never called once transport
// functions are set, and fail if they are.
private func ioOpen(_ path: UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? {
    guard let path, let a = Registry.shared.authenticator(String(cString: path)) else { return nil }
    return Unmanaged.passRetained(a).toOpaque()
}

private func ioClose(_ handle: UnsafeMutableRawPointer?) {
    guard let handle else { return }
    Unmanaged<SoftwareAuthenticator>.fromOpaque(handle).release()
}

private func ioRead(_ handle: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ n: Int, _ ms: Int32) -> Int32 { -1 }
private func ioWrite(_ handle: UnsafeMutableRawPointer?, _ buf: UnsafePointer<UInt8>?, _ n: Int) -> Int32 { -1 }

private func authenticator(_ dev: OpaquePointer?) -> SoftwareAuthenticator? {
    guard let dev, let handle = fido_dev_io_handle(dev) else { return nil }
    return Unmanaged<SoftwareAuthenticator>.fromOpaque(handle).takeUnretainedValue()
}

private func transportTX(_ dev: OpaquePointer?, _ command: UInt8, _ buf: UnsafePointer<UInt8>?, _ n: Int) -> Int32 {
    guard let a = authenticator(dev) else { return -1 }
    let bytes = buf.map { Array(UnsafeBufferPointer(start: $0, count: n)) } ?? []
    return a.receive(command: command, bytes) ? 0 : -1
}

private func transportRX(
    _ dev: OpaquePointer?, _ command: UInt8, _ buf: UnsafeMutablePointer<UInt8>?, _ n: Int, _ ms: Int32
) -> Int32 {
    guard let a = authenticator(dev), let buf, let answer = a.answer(command: command), answer.count <= n else { return -1 }
    answer.withUnsafeBufferPointer { buf.update(from: $0.baseAddress!, count: answer.count) }
    return Int32(answer.count)
}
