import Platform
import Timekeeping

extension UInt8 {
    fileprivate var isASCIILetter: Bool { (0x41...0x5A).contains(self) || (0x61...0x7A).contains(self) }
}

/// The URLs a web client may call.
public enum WebURL {
    /// `https://` anywhere; `http://` only to 127.0.0.0/8, ::1 or localhost (no credentials in clear text on a network).
    public static func checkScheme(_ url: String, what: String) throws(FirebaseError) {
        guard let (scheme, host) = authority(of: url), !host.isEmpty else {
            throw .badURL("\(what) '\(url)' is not a URL")
        }
        switch scheme {
        case "https": return
        case "http":
            let h = host.lowercased().trimmingScalars { $0 == "[" || $0 == "]" }
            if h == "localhost" || h == "::1" || h.hasPrefix("127.") && h.split(separator: ".").count == 4 { return }
            throw .badURL("\(what) '\(url)' uses plain http to a non-loopback host; only https is allowed there")
        default:
            throw .badURL("\(what) '\(url)' must be https:// (or http:// to a loopback host)")
        }
    }

    /// The scheme (lower-cased) and host of an absolute URL `scheme://[userinfo@]host[:port][/...]` (RFC 3986;
    /// an IPv6 host keeps its brackets), or nil when `url` is not one: no scheme, no `//`, a port that is not
    /// digits, or a character a URL cannot hold in its scheme or authority.
    static func authority(of url: String) -> (scheme: String, host: String)? {
        let bytes = Array(url.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0,
            bytes[0].isASCIILetter,
            bytes[..<colon].allSatisfy({ $0.isASCIILetter || (0x30...0x39).contains($0) || "+-.".utf8.contains($0) }),
            bytes[(colon + 1)...].starts(with: "//".utf8)
        else { return nil }
        let start = colon + 3
        let end = bytes[start...].firstIndex { "/?#".utf8.contains($0) } ?? bytes.count
        // The path, query and fragment are not read; the scheme and authority hold no space, control or character
        // a URL cannot (`"<>\\^`{|}`).
        let forbidden = Set("\"<>\\^`{|}".utf8)
        guard !bytes[..<end].contains(where: { $0 <= 0x20 || $0 == 0x7F || forbidden.contains($0) }) else { return nil }
        var authority = bytes[start..<end]
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) { authority = authority[(at + 1)...] }
        var host = authority
        var port = authority[authority.endIndex...]
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            host = authority[...close]
            port = authority[(close + 1)...]
        } else if let c = authority.firstIndex(of: UInt8(ascii: ":")) {
            host = authority[..<c]
            port = authority[c...]
        }
        if !port.isEmpty {
            guard port.first == UInt8(ascii: ":"), port.dropFirst().allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        }
        return (String(decoding: bytes[..<colon], as: UTF8.self).lowercased(), String(decoding: host, as: UTF8.self))
    }
}

/// What went wrong talking to Firebase, with Firebase's own message where it sent one.
public enum FirebaseError: Error, Sendable, CustomStringConvertible, Equatable {
    case badURL(String)
    /// 401/403: the credentials lack `permission` (or are not accepted at all).
    case permission(status: Int, permission: String, message: String)
    /// A `[VALIDATION_ERROR]` (or other 400) answer to a publish: nothing was published.
    case rejected(status: Int, canonical: String, message: String)
    /// Any other error answer.
    case api(status: Int, canonical: String, message: String)
    /// The answer broke the documented protocol (no ETag, unreadable JSON).
    case protocolViolation(String)
    /// No answer (after the retries).
    case unreachable(String)
    /// A publish whose answer was lost could not be settled: it may or may not have been applied.
    case unsettled(String)

    public var description: String {
        switch self {
        case .badURL(let m), .protocolViolation(let m), .unreachable(let m): m
        case .unsettled(let m): m
        case .permission(let status, let permission, let message):
            status == 401
                ? "Firebase rejected the credentials (HTTP 401: \(message)); check --credentials / GOOGLE_APPLICATION_CREDENTIALS or --access-token-command"
                : "Firebase refused: the credentials lack the permission \(permission) (HTTP 403: \(message))"
        case .rejected(_, _, let message): "Firebase rejected the template, nothing was published: \(message)"
        case .api(let status, let canonical, let message):
            "Firebase answered HTTP \(status)\(canonical.isEmpty ? "" : " " + canonical): \(message)"
        }
    }
}

/// How often and how long to retry 429/500/503 answers: exponential back-off with full jitter.
public struct RetryPolicy: Sendable {
    public var attempts: Int
    public var base: Instant.Duration
    public var cap: Instant.Duration
    /// Each call's timeout (connect, send, answer).
    public var timeout: Instant.Duration

    public init(
        attempts: Int = 5, base: Instant.Duration = .milliseconds(500), cap: Instant.Duration = .seconds(Int64(16)),
        timeout: Instant.Duration = .seconds(Int64(30))
    ) {
        self.attempts = attempts
        self.base = base
        self.cap = cap
        self.timeout = timeout
    }

    /// The wait before retry number `retry` (1-based): uniformly in [d/2, d] with d = min(cap, base · 2^(retry−1)).
    public func delay(retry: Int, random: Double) -> Instant.Duration {
        let d = min(cap.microseconds, base.microseconds << min(20, retry - 1))
        return Instant.Duration(microseconds: d / 2 + Int64(Double(d / 2) * random))
    }

    public static func isRetryable(status: Int) -> Bool { status == 429 || status == 500 || status == 503 }
}

/// A conflict answer to a publish: HTTP 412, status `FAILED_PRECONDITION`/`ABORTED`, or `[VERSION_MISMATCH]`.
public struct VersionMismatch: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
