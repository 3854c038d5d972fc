import Glibc
import Platform
import JSON
import Timekeeping

/// Gives the bearer token for the next request.
public protocol AccessTokenProvider: Sendable {
    /// A valid token; `refresh` forces a new one (after a 401). Fetching one is part of the call that needs it:
    /// once `cancellation` is cancelled (a stop, the time bound of a pull), the fetch is abandoned where it is
    /// (its request aborted, its waits ended, its command killed) and throws.
    func token(refresh: Bool, cancellation: Cancellation?) throws -> String
}

extension AccessTokenProvider {
    /// A valid token, fetched without a cancellation (a command that must run to its end).
    public func token(refresh: Bool) throws -> String { try token(refresh: refresh, cancellation: nil) }
}

/// Exchanges a signed service-account assertion at the key file's `token_uri` (grant type
/// `urn:ietf:params:oauth:grant-type:jwt-bearer`) and keeps the access token until shortly before it expires.
public final class ServiceAccountTokenProvider: AccessTokenProvider, @unchecked Sendable {
    public let key: ServiceAccountKey
    private let transport: HTTPTransport
    private let clock: any Clock
    private let timeout: Instant.Duration
    /// A token is renewed this long before it expires.
    public static let refreshMargin = Instant.Duration.minutes(5)
    private let lock = Lock()
    private var cached: (token: String, expires: Instant)?
    /// How many exchanges have been made (what caching saves, for tests and `--verbose`).
    public private(set) var exchanges = 0

    /// Waits between attempts (tests record instead of sleeping); nil: real time, cut short by the cancellation.
    private let pause: (@Sendable (Instant.Duration) -> Void)?

    /// The OAuth scope the tokens are asked for.
    public let scope: String

    public init(
        key: ServiceAccountKey, transport: HTTPTransport, clock: any Clock,
        timeout: Instant.Duration = .seconds(Int64(30)), scope: String = ServiceAccountAssertion.remoteConfigScope,
        pause: (@Sendable (Instant.Duration) -> Void)? = nil
    )
        throws(FirebaseError)
    {
        self.pause = pause
        self.scope = scope
        try WebURL.checkScheme(key.tokenURI, what: "the key file's token_uri")
        self.key = key
        self.transport = transport
        self.clock = clock
        self.timeout = timeout
    }

    /// A token from the cache or a new exchange; every attempt of the exchange and every wait between two is
    /// within `cancellation`: once it is cancelled the request in flight is aborted and the `TransportError`
    /// (`cancelled`) thrown.
    public func token(refresh: Bool, cancellation: Cancellation?) throws -> String {
        try lock.withLock {
            let now = clock.now()
            if !refresh, let c = cached, now < c.expires - Self.refreshMargin { return c.token }
            let assertion = try ServiceAccountAssertion.make(key: key, scope: scope, now: now)
            let form =
                "grant_type=" + Self.formEscape("urn:ietf:params:oauth:grant-type:jwt-bearer") + "&assertion="
                + Self.formEscape(assertion)
            var request = HTTPRequest(
                method: "POST", url: key.tokenURI, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array(form.utf8), timeout: timeout)
            request.cancellation = cancellation
            func wait(_ d: Instant.Duration) throws {
                if let pause {
                    pause(d)
                } else if d.microseconds > 0 {
                    let seconds = Double(min(d.microseconds, 10_000_000)) / 1e6
                    if let cancellation { cancellation.wait(seconds: seconds) } else { usleep(UInt32(seconds * 1e6)) }
                }
                if cancellation?.isCancelled == true { throw TransportError.abandoned(request) }
            }
            // The exchange is idempotent: a lost answer, a 429 or a server error is tried again (three attempts,
            // half a second then a second apart, or the Retry-After Google names, up to 10 s).
            var response: HTTPResponse
            var attempt = 0
            while true {
                attempt += 1
                do throws(TransportError) {
                    response = try transport.send(request)
                } catch {
                    if error.cancelled { throw error }
                    guard error.isTransient, attempt < Self.attempts else {
                        throw CredentialsError.exchange(
                            "cannot reach the token endpoint \(key.tokenURI): \(error)"
                                + (attempt > 1 ? " (after \(attempt) attempts)" : ""))
                    }
                    try wait(Self.backoff(attempt, retryAfter: nil))
                    continue
                }
                exchanges += 1
                guard response.status == 429 || response.status >= 500, attempt < Self.attempts else { break }
                try wait(Self.backoff(attempt, retryAfter: response.header("retry-after")))
            }
            let json = try? JSONParser().parse(response.body)
            if response.status == 429 || response.status >= 500 {
                let detail = json?["error_description"]?.stringValue ?? ""
                throw CredentialsError.exchange(
                    "the token endpoint \(key.tokenURI) is unavailable: HTTP \(response.status)"
                        + (detail.isEmpty ? "" : " (\(detail))") + " after \(attempt) attempts; try again later")
            }
            guard response.status == 200 else {
                let code = json?["error"]?.stringValue ?? "HTTP \(response.status)"
                let detail = json?["error_description"]?.stringValue ?? ""
                throw CredentialsError.exchange(
                    "the token endpoint refused the service account \(key.clientEmail): \(code)\(detail.isEmpty ? "" : ": " + detail)"
                )
            }
            guard let token = json?["access_token"]?.stringValue, !token.isEmpty else {
                throw CredentialsError.exchange("the token endpoint's answer has no access_token")
            }
            // It goes into an Authorization header: a CR or LF in it would write headers of the server's choosing.
            guard BearerToken.isValid(token) else {
                throw CredentialsError.exchange(
                    "the token endpoint's access_token holds characters a bearer token cannot (RFC 6750 b64token)")
            }
            // Kept at most a day whatever the endpoint says (Google's last an hour); none kept when it says <= 0.
            let lifetime = json?["expires_in"]?.numberValue?.int64 ?? 3600
            cached = lifetime > 0 ? (token, now + .seconds(min(lifetime, Self.longestLifetime.microseconds / 1_000_000))) : nil
            return token
        }
    }

    static let attempts = 3
    /// The longest an access token is kept, whatever `expires_in` says.
    public static let longestLifetime = Instant.Duration.days(1)

    /// The wait before attempt `attempt + 1`: half a second, then a second; a `Retry-After` of whole seconds
    /// instead, up to 10 s.
    static func backoff(_ attempt: Int, retryAfter: String?) -> Instant.Duration {
        if let r = retryAfter.flatMap({ Int64($0.trimmingSpaces()) }), r >= 0 { return .seconds(min(r, 10)) }
        return .milliseconds(Int64(500) << Int64(attempt - 1))
    }

    /// `application/x-www-form-urlencoded` escaping of a value: every byte of its UTF-8 but the unreserved
    /// characters of RFC 3986 (ASCII letters, digits, `-._~`) as `%XX`.
    package static func formEscape(_ s: String) -> String { percentEncoded(s, keeping: "-._~") }
}

/// The one rule for a token rollout sends as `Authorization: Bearer`, wherever it comes from: RFC 6750's b64token,
/// `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`. No whitespace, CR, LF or NUL can pass.
public enum BearerToken {
    public static func isValid(_ token: String) -> Bool {
        let bytes = Array(token.utf8)
        let body = bytes.prefix { b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || "-._~+/".utf8.contains(b)
        }
        return !body.isEmpty && bytes.dropFirst(body.count).allSatisfy { $0 == UInt8(ascii: "=") }
    }
}

/// Runs a command (for example `gcloud auth print-access-token`) and uses its output as the token; the token is
/// kept for `reuse` and fetched again after a 401.
///
/// The command runs within the call's cancellation (killed with its process group once it is cancelled), and
/// its output is read up to `maximumOutputBytes`: a command that prints more is ended and refused.
public final class CommandTokenProvider: AccessTokenProvider, @unchecked Sendable {
    public let command: String
    private let clock: any Clock
    private let reuse: Instant.Duration
    private let lock = Lock()
    private var cached: (token: String, fetched: Instant)?
    /// The most output the command may print: an access token is at most a few KB (Google's are 2 KB or less).
    public static let maximumOutputBytes = 64 << 10

    public init(command: String, clock: any Clock, reuse: Instant.Duration = .minutes(10)) {
        self.command = command
        self.clock = clock
        self.reuse = reuse
    }

    public func token(refresh: Bool, cancellation: Cancellation?) throws -> String {
        try lock.withLock {
            let now = clock.now()
            if !refresh, let c = cached, now - c.fetched < reuse { return c.token }
            let run: (status: Int32, output: [UInt8])
            do throws(ChildProcessError) {
                run = try runShell(command, outputLimit: Self.maximumOutputBytes, cancellation: cancellation)
            } catch {
                if error.cancelled {
                    throw CredentialsError.command(
                        "the access-token command '\(command)' was ended: the call was abandoned")
                }
                if error.outputLimit != nil {
                    throw CredentialsError.command(
                        "the access-token command '\(command)' printed more than \(Self.maximumOutputBytes >> 10) KiB "
                            + "(an access token is a few KB); refused")
                }
                throw CredentialsError.command("cannot run the access-token command: \(error)")
            }
            let data = run.output
            guard run.status == 0 else {
                throw CredentialsError.command("the access-token command '\(command)' failed (exit \(run.status))")
            }
            let token = String(decoding: data, as: UTF8.self).trimmingWhitespace()
            guard BearerToken.isValid(token) else {
                throw CredentialsError.command(
                    "the access-token command '\(command)' printed no single token (RFC 6750 b64token characters)")
            }
            cached = (token, now)
            return token
        }
    }
}
