import Glibc
import Platform
import JSON
import Timekeeping
import WebClient

/// Where the Remote Config API is: Google's, or an override (`ROLLOUT_FIREBASE_URL`, then firebase-tools'
/// `FIREBASE_REMOTE_CONFIG_URL`) for tests and mirrors. Plain `http://` only for loopback hosts.
public struct RemoteConfigEndpoint: Sendable, Equatable {
    public static let google = "https://firebaseremoteconfig.googleapis.com"
    /// The origin (scheme, host, port), without a trailing slash; paths start with `/v1/`.
    public var origin: String

    public init(origin: String) throws(FirebaseError) {
        var o = origin
        while o.hasSuffix("/") { o.removeLast() }
        if o.hasSuffix("/v1") { o.removeLast(3) }
        try Self.checkScheme(o, what: "the Remote Config URL")
        self.origin = o
    }

    /// The override from the environment, else Google's endpoint.
    public static func from(environment env: [String: String]) throws(FirebaseError) -> RemoteConfigEndpoint {
        for name in ["ROLLOUT_FIREBASE_URL", "FIREBASE_REMOTE_CONFIG_URL"] {
            if let v = env[name], !v.isEmpty {
                do { return try RemoteConfigEndpoint(origin: v) } catch { throw .badURL("\(name): \(error)") }
            }
        }
        return try RemoteConfigEndpoint(origin: google)
    }

    /// `https://` anywhere; `http://` only to loopback hosts (`WebURL.checkScheme`).
    public static func checkScheme(_ url: String, what: String) throws(FirebaseError) {
        try WebURL.checkScheme(url, what: what)
    }
}



/// A template as read: the JSON Firebase sent and its `ETag` header.
public struct FetchedTemplate: Sendable {
    public var json: JSONValue
    public var etag: String
}


/// The Remote Config REST API (v1) over `HTTPTransport`, for one project.
///
/// Reads and validations are retried on 429/500/503 and on lost connections (they change nothing); publishes
/// are sent once per call: the store decides, by re-reading, whether a lost one landed. There is no `:rollback`
/// call: it takes no precondition, so the store publishes an old version's template with `If-Match` instead.
public final class RemoteConfigClient: @unchecked Sendable {
    public let endpoint: RemoteConfigEndpoint
    public let project: String
    public let policy: RetryPolicy
    private let caller: GoogleAPICaller
    private let sleep: @Sendable (Instant.Duration) -> Void
    private let random: @Sendable () -> Double

    public init(
        endpoint: RemoteConfigEndpoint, project: String, tokens: AccessTokenProvider, transport: HTTPTransport,
        policy: RetryPolicy = RetryPolicy(),
        sleep: @escaping @Sendable (Instant.Duration) -> Void = { d in
            if d.microseconds > 0 { usleep(UInt32(min(d.microseconds, 60_000_000))) }
        },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.endpoint = endpoint
        self.project = project
        self.caller = GoogleAPICaller(
            project: project, tokens: tokens, transport: transport, policy: policy, sleep: sleep, random: random)
        self.policy = policy
        self.sleep = sleep
        self.random = random
    }

    var base: String {
        endpoint.origin + "/v1/projects/"
            + percentEncoded(project, keeping: "-._~!$&'()*+,;=:@/") + "/remoteConfig"
    }

    // MARK: Operations

    /// `GET projects/{p}/remoteConfig[?versionNumber=N]`; an answer without an ETag is an error.
    public func get(version: Int? = nil) throws -> FetchedTemplate {
        let url = base + (version.map { "?versionNumber=\($0)" } ?? "")
        let r = try send("GET", url, permission: "cloudconfig.configs.get", retry: true)
        try r.expectOK()
        return FetchedTemplate(json: try r.json(), etag: try r.etag())
    }

    /// `PUT projects/{p}/remoteConfig` with `If-Match` (`*` only when the caller forces). Throws `VersionMismatch`
    /// on a conflict and `FirebaseError.rejected` on a validation error. With `validateOnly` nothing is published
    /// (and the call is retried like a read).
    public func put(_ body: JSONValue, ifMatch: String, validateOnly: Bool) throws -> FetchedTemplate {
        let url = base + (validateOnly ? "?validateOnly=true" : "")
        let r = try send(
            "PUT", url, headers: [("If-Match", ifMatch), ("Content-Type", "application/json; charset=utf-8")],
            body: Array(body.compactText.utf8),
            permission: "cloudconfig.configs.update", retry: validateOnly)
        if let m = r.versionMismatch { throw m }
        try r.expectOK(rejecting: true)
        return FetchedTemplate(json: try r.json(), etag: try r.etag())
    }

    /// One page of `remoteConfig:listVersions`, newest first.
    public func listVersions(pageSize: Int, pageToken: String?, endVersionNumber: Int?) throws -> (
        versions: [JSONValue], nextPageToken: String?
    ) {
        var query = ["pageSize=\(max(1, min(300, pageSize)))"]
        if let t = pageToken { query.append("pageToken=" + ServiceAccountTokenProvider.formEscape(t)) }
        if let e = endVersionNumber { query.append("endVersionNumber=\(e)") }
        let r = try send(
            "GET", base + ":listVersions?" + query.joined(separator: "&"), permission: "cloudconfig.configs.get",
            retry: true)
        try r.expectOK()
        let json = try r.json()
        let versions = json["versions"]?.arrayValue ?? []
        let next = json["nextPageToken"]?.stringValue
        return (versions, next?.isEmpty == false ? next : nil)
    }

    /// Waits the back-off before retry number `retry`.
    func policySleep(retry: Int) { sleep(policy.delay(retry: retry, random: random())) }

    // MARK: Sending

    func send(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, permission: String,
        retry: Bool
    ) throws -> GoogleAPICaller.Answer {
        try caller.send(method, url, headers: headers, body: body, permission: permission, retry: retry)
    }
}

extension JSONValue {
    /// Compact JSON with object members sorted by key: equal for documents that differ only in member order.
    var canonicalText: String {
        switch self {
        case .object(let o):
            return "{"
                + o.members.sorted { $0.key < $1.key }.map { JSONWriter.quoted($0.key) + ":" + $0.value.canonicalText }
                .joined(separator: ",") + "}"
        case .array(let a): return "[" + a.map(\.canonicalText).joined(separator: ",") + "]"
        default: return compactText
        }
    }
}
