import Crypto
import Platform

/// The server's bearer token, which a backend presents (`Authorization: Bearer TOKEN`) on the routes that are
/// not for devices: `POST /v1/events` and `POST /v1beta/projects/{p}:verifyAppCheckToken`.
///
/// Checked on the request's head, before any body byte is kept, by comparing SHA-256 digests in constant time.
public struct BearerToken: Sendable {
    private let digest: [UInt8]

    public init(_ token: String) { digest = SHA256.hash(Array(token.utf8)) }

    /// A fresh token: 32 random bytes, base64url.
    public static func fresh() -> String { Base64.encodeURL(SecureRandom.bytes(32)) }

    /// Whether `request` carries the token.
    public func admits(_ request: HTTPRequest) -> Bool {
        guard let header = request.header("authorization") else { return false }
        // The scheme (after any spaces) and, past the one space that ends it, the token: found over the bytes (a
        // `String` split walks grapheme clusters, and this runs twice for every backend request).
        let u = header.utf8
        let space = UInt8(ascii: " ")
        guard let start = u.firstIndex(where: { $0 != space }), let gap = u[start...].firstIndex(of: space) else {
            return false
        }
        let rest = u.index(after: gap)
        // The scheme in any case: ASCII letters only differ by 0x20, and no other byte folds onto "bearer"'s.
        guard rest != u.endIndex, u[start..<gap].elementsEqual("bearer".utf8, by: { $0 | 0x20 == $1 }) else {
            return false
        }
        let presented = SHA256.hash(Array(header[rest...].trimmingSpaces().utf8))
        var diff: UInt8 = 0
        for i in 0..<presented.count { diff |= presented[i] ^ digest[i] }
        return diff == 0
    }

    /// The 401 for a request without the token, nil for one with it.
    public func refusal(head request: HTTPRequest) -> HTTPResponse? {
        guard !admits(request) else { return nil }
        return googleError(
            401, "UNAUTHENTICATED", "Request is missing a valid bearer token (Authorization: Bearer TOKEN).",
            headers: [("WWW-Authenticate", "Bearer")])
    }
}
