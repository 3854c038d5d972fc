import Crypto
import Glibc
import JSON
import Platform
import Timekeeping
import WebClient

/// The API key and secret of a Vonage account, read from a file only its owner may read (mode 0600 or stricter):
/// JSON `{"api_key": "...", "api_secret": "..."}`. Never printed.
public struct VonageCredentials: Sendable, CustomStringConvertible {
    let key: String
    let secret: String

    public init(key: String, secret: String) {
        self.key = key
        self.secret = secret
    }

    /// Reads `path`; refuses a file that group or others may read or write.
    public static func load(_ path: String) throws(PhoneVerificationError) -> VonageCredentials {
        var info = stat()
        guard stat(path, &info) == 0 else { throw .credentials("\(path) cannot be read") }
        guard info.st_mode & 0o077 == 0 else {
            throw .credentials("\(path) may be read by others (mode \(String(info.st_mode & 0o777, radix: 8))): chmod 600 it")
        }
        guard let data = try? Files.read(path), let value = try? JSONParser().parse(data), let key = value["api_key"]?.stringValue,
            let secret = value["api_secret"]?.stringValue, !key.isEmpty, !secret.isEmpty
        else { throw .credentials("\(path) is not {\"api_key\": ..., \"api_secret\": ...}") }
        return VonageCredentials(key: key, secret: secret)
    }

    var authorization: String { "Basic " + Base64.encode(Array("\(key):\(secret)".utf8)) }

    public var description: String { "Vonage credentials (redacted)" }
}

/// Why the provider refused, from its `application/problem+json` answer (`title` and `detail`, never a code).
public enum PhoneVerificationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// 409: a verification to this number is in progress (or, for `nextChannel`, no channel is left).
    case concurrent(String)
    /// 429: over the provider's rate limit.
    case rateLimited(String)
    /// 422: the parameters named are invalid.
    case invalidParameters([String])
    /// 401 or 402: the account's credentials or balance.
    case account(String)
    /// 404: no such verification, or it is over.
    case notFound(String)
    case credentials(String)
    /// Any other answer, or none.
    case provider(status: Int, String)

    public var description: String {
        switch self {
        case .concurrent(let d): "phone verification: a verification to this number is in progress (\(d))"
        case .rateLimited(let d): "phone verification: rate limit reached, try again later (\(d))"
        case .invalidParameters(let names): "phone verification: invalid parameters: \(names.joined(separator: ", "))"
        case .account(let d): "phone verification: the provider refused the account (\(d))"
        case .notFound(let d): "phone verification: no such verification, or it is over (\(d))"
        case .credentials(let d): "phone verification: credentials: \(d)"
        case .provider(let status, let d): "phone verification: the provider answered \(status) (\(d))"
        }
    }
}

/// What a code came to.
public enum PhoneCodeOutcome: Sendable, Equatable {
    /// 200 `completed`.
    case verified
    /// 400: a wrong code; another may be tried.
    case wrong
    /// 410: too many wrong codes; the provider ended the verification.
    case tooManyAttempts
}

/// The channels of a workflow, in order (the provider moves to the next when a channel times out).
public enum PhoneChannel: String, Sendable { case sms, voice }

/// Vonage Verify v2 (`/v2/verify`) over WebClient's transport: start a workflow (SMS, then a voice call), check a
/// code, move to the next channel, cancel. Behind the same use as any other phone provider would be.
///
/// The code is sent only in the body of the check request; this client logs nothing and no error carries it.
public struct VonageVerifyClient: Sendable {
    public static let productionBase = "https://api.nexmo.com"
    let base: String
    let credentials: VonageCredentials
    let transport: any HTTPTransport
    let timeout = Instant.Duration(microseconds: 15_000_000)

    public init(credentials: VonageCredentials, base: String = productionBase, transport: any HTTPTransport = CurlTransport()) {
        self.base = base
        self.credentials = credentials
        self.transport = transport
    }

    /// Starts a verification of `number` (E.164 digits without `+`) on `channels`; returns the request id.
    public func start(
        number: String, brand: String = "rollout", channels: [PhoneChannel] = [.sms, .voice], codeLength: Int = 6,
        channelTimeout: Int = 60
    ) throws(PhoneVerificationError) -> String {
        let body: JSONValue = .object(
            JSONObject([
                ("brand", .string(brand)),
                ("workflow", .array(channels.map { .object(JSONObject([("channel", .string($0.rawValue)), ("to", .string(number))])) })),
                ("code_length", .number(JSONNumber(Int64(codeLength)))),
                ("channel_timeout", .number(JSONNumber(Int64(channelTimeout)))),
            ]))
        let answer = try send("POST", "/v2/verify", body)
        guard answer.status == 202, let id = (try? JSONParser().parse(answer.body))?["request_id"]?.stringValue else {
            throw failure(answer)
        }
        try Self.requireRequestID(id)
        return id
    }

    /// Checks `code` for verification `id`. Only an answer about this very verification completes it: a 200 naming
    /// another request (a lying or confused provider, or a proxy answering from a cache) is not a check passed.
    public func check(_ id: String, code: String) throws(PhoneVerificationError) -> PhoneCodeOutcome {
        try Self.requireRequestID(id)
        let answer = try send("POST", "/v2/verify/\(id)", .object(JSONObject([("code", .string(code))])))
        switch answer.status {
        case 200:
            let object = try? JSONParser().parse(answer.body)
            guard object?["status"]?.stringValue == "completed" else { throw failure(answer) }
            guard object?["request_id"]?.stringValue == id else {
                throw .provider(status: 200, "the provider answered about another verification than \(id); not verified")
            }
            return .verified
        case 400: return .wrong
        case 410: return .tooManyAttempts
        default: throw failure(answer)
        }
    }

    /// Verify v2 names a verification by a UUID; the id goes into the next requests' paths, so anything else the
    /// provider sends (a `/`, a `?`, `..`) is refused rather than sent on.
    static func requireRequestID(_ id: String) throws(PhoneVerificationError) {
        let groups = id.split(separator: "-", omittingEmptySubsequences: false)
        let valid = groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
        guard valid else {
            throw .provider(status: 0, "the provider's request id \(String(reflecting: String(id.prefix(80)))) is not a UUID")
        }
    }

    /// Moves verification `id` to its next channel now (a voice call after the SMS).
    public func nextChannel(_ id: String) throws(PhoneVerificationError) {
        try Self.requireRequestID(id)
        let answer = try send("POST", "/v2/verify/\(id)/next_workflow", .object(JSONObject()))
        guard answer.status == 200 else { throw failure(answer) }
    }

    /// Cancels verification `id`.
    public func cancel(_ id: String) throws(PhoneVerificationError) {
        try Self.requireRequestID(id)
        let answer = try send("DELETE", "/v2/verify/\(id)", nil)
        guard answer.status == 204 else { throw failure(answer) }
    }

    private func send(_ method: String, _ path: String, _ body: JSONValue?) throws(PhoneVerificationError) -> HTTPResponse {
        var headers = [("Authorization", credentials.authorization), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let request = HTTPRequest(
            method: method, url: base + path, headers: headers, body: body.map { Array($0.compactText.utf8) },
            timeout: timeout)
        do {
            return try transport.send(request)
        } catch {
            throw .provider(status: 0, "no answer: \(error)")
        }
    }

    /// The typed error of a problem+json answer.
    private func failure(_ answer: HTTPResponse) -> PhoneVerificationError {
        let problem = try? JSONParser().parse(answer.body)
        let detail = [problem?["title"]?.stringValue, problem?["detail"]?.stringValue].compactMap { $0 }.joined(separator: ": ")
        switch answer.status {
        case 409: return .concurrent(detail)
        case 429: return .rateLimited(detail)
        case 422:
            let names = problem?["invalid_parameters"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
            return .invalidParameters(names)
        case 401, 402: return .account(detail)
        case 404: return .notFound(detail)
        default: return .provider(status: answer.status, detail)
        }
    }
}
