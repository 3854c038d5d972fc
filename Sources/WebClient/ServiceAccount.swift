import COpenSSL
import Crypto
import Glibc
import JSON
import Timekeeping

/// A Google service-account key file: who signs (`client_email`), with which key, and where to exchange the
/// signed assertion for an access token (`token_uri`).
public struct ServiceAccountKey: Sendable {
    public var clientEmail: String
    public var privateKeyID: String
    public var privateKeyPEM: String
    public var tokenURI: String
    public var projectID: String?

    /// The largest key file read: a real one is about 2.3 KB (a 2048-bit RSA key in PEM and a few fields).
    public static let maximumFileBytes = 64 << 10

    /// Reads a key file, refusing one that group or others can read or write (it is a password), one that is not a
    /// regular file (a FIFO would block the read), and one larger than `maximumFileBytes` (at most one byte more
    /// is read).
    public static func load(path: String) throws(CredentialsError) -> ServiceAccountKey {
        func unreadable(_ why: String) -> CredentialsError {
            .unreadable("cannot read the service-account key file \(path): \(why)")
        }
        // Without blocking: opening a FIFO for reading would wait for a writer.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw unreadable(String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw unreadable(String(cString: strerror(errno))) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw unreadable("not a regular file") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw .loosePermissions(
                "the service-account key file \(path) is accessible to group or others (mode \(String(mode, radix: 8))); run: chmod 600 \(path)"
            )
        }
        let tooLarge = CredentialsError.invalid(
            "the service-account key file \(path) is larger than \(maximumFileBytes >> 10) KiB (a key file is a few KB); "
                + "refused")
        guard info.st_size <= maximumFileBytes else { throw tooLarge }
        // The size may change after fstat: the read stops one byte past the limit whatever the file holds by then.
        var data = [UInt8](repeating: 0, count: maximumFileBytes + 1)
        var count = 0
        while count < data.count {
            let n = data.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw unreadable(String(cString: strerror(errno)))
            }
            if n == 0 { break }
            count += n
        }
        guard count <= maximumFileBytes else { throw tooLarge }
        return try parse(String(decoding: data[..<count], as: UTF8.self), source: path)
    }

    /// Parses the JSON of a key file (`source` names it in errors).
    public static func parse(_ text: String, source: String) throws(CredentialsError) -> ServiceAccountKey {
        let json: JSONValue
        do { json = try JSONParser().parse(text) } catch { throw .invalid("\(source) is not JSON: \(error)") }
        func field(_ name: String) throws(CredentialsError) -> String {
            guard let v = json[name]?.stringValue, !v.isEmpty else {
                throw .invalid("\(source) has no '\(name)' (not a service-account key file?)")
            }
            return v
        }
        if let type = json["type"]?.stringValue, type != "service_account" {
            throw .invalid(
                "\(source) is a '\(type)' credential, not a service-account key (use --access-token-command for user credentials)"
            )
        }
        return ServiceAccountKey(
            clientEmail: try field("client_email"), privateKeyID: try field("private_key_id"),
            privateKeyPEM: try field("private_key"),
            tokenURI: json["token_uri"]?.stringValue ?? "https://oauth2.googleapis.com/token",
            projectID: json["project_id"]?.stringValue)
    }
}

/// Credentials that cannot be used, with what to do about it.
public enum CredentialsError: Error, Sendable, CustomStringConvertible, Equatable {
    case unreadable(String)
    case loosePermissions(String)
    case invalid(String)
    case signing(String)
    case exchange(String)
    case command(String)

    public var description: String {
        switch self {
        case .unreadable(let m), .loosePermissions(let m), .invalid(let m), .signing(let m), .exchange(let m),
            .command(let m):
            m
        }
    }
}

/// An RSA private key from PEM that signs RS256 (RSASSA-PKCS1-v1_5 with SHA-256) through libcrypto.
final class RS256Signer: @unchecked Sendable {
    private let pkey: OpaquePointer

    init(pem: String) throws(CredentialsError) {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBufferPointer { b in
            guard let bio = BIO_new_mem_buf(b.baseAddress, Int32(b.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else { throw .invalid("the service-account private_key is not a PEM private key") }
        guard EVP_PKEY_is_a(key, "RSA") == 1 else {
            EVP_PKEY_free(key)
            throw .invalid("the service-account private_key is not an RSA key")
        }
        pkey = key
    }

    deinit { EVP_PKEY_free(pkey) }

    func sign(_ message: [UInt8]) throws(CredentialsError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .signing("EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else {
            throw .signing("EVP_DigestSignInit failed")
        }
        var length = 0
        guard message.withUnsafeBufferPointer({ EVP_DigestSign(ctx, nil, &length, $0.baseAddress, $0.count) }) == 1
        else {
            throw .signing("EVP_DigestSign failed")
        }
        var out = [UInt8](repeating: 0, count: length)
        let ok = out.withUnsafeMutableBufferPointer { o in
            message.withUnsafeBufferPointer { EVP_DigestSign(ctx, o.baseAddress, &length, $0.baseAddress, $0.count) }
        }
        guard ok == 1 else { throw .signing("EVP_DigestSign failed") }
        return Array(out.prefix(length))
    }
}

/// The JWT bearer assertion of Google's service-account flow (RFC 7523).
public enum ServiceAccountAssertion {
    /// The scope rollout asks for.
    public static let remoteConfigScope = "https://www.googleapis.com/auth/firebase.remoteconfig"
    /// Assertions live this long (Google accepts at most one hour).
    public static let lifetime: Int64 = 3600

    /// `header.claims.signature`: header `{alg: RS256, typ: JWT, kid}`; claims `iss`, `scope`, `aud`, `iat`, `exp`.
    public static func make(key: ServiceAccountKey, scope: String = remoteConfigScope, now: Instant)
        throws(CredentialsError) -> String
    {
        let header: JSONValue = ["alg": "RS256", "typ": "JWT", "kid": .string(key.privateKeyID)]
        let iat = now.seconds
        let claims: JSONValue = [
            "iss": .string(key.clientEmail), "scope": .string(scope), "aud": .string(key.tokenURI),
            "iat": .number(JSONNumber(iat)), "exp": .number(JSONNumber(iat + lifetime)),
        ]
        let input =
            Base64.encodeURL(Array(header.compactText.utf8)) + "." + Base64.encodeURL(Array(claims.compactText.utf8))
        let signature = try RS256Signer(pem: key.privateKeyPEM).sign(Array(input.utf8))
        return input + "." + Base64.encodeURL(signature)
    }
}
