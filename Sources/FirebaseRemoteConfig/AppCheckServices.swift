import JSON
import Platform
import Rollout
import WebClient

/// Where the App Check API is: Google's, or `FIREBASE_APPCHECK_URL` (as firebase-tools reads it) for tests and
/// mirrors; plain `http://` only for loopback hosts.
public struct AppCheckEndpoint: Sendable, Equatable {
    public static let google = "https://firebaseappcheck.googleapis.com"
    public var origin: String

    public init(origin: String) throws(FirebaseError) {
        var o = origin
        while o.hasSuffix("/") { o.removeLast() }
        if o.hasSuffix("/v1") { o.removeLast(3) }
        try RemoteConfigEndpoint.checkScheme(o, what: "the App Check URL")
        self.origin = o
    }

    public static func from(environment env: [String: String]) throws(FirebaseError) -> AppCheckEndpoint {
        if let v = env["FIREBASE_APPCHECK_URL"], !v.isEmpty {
            do { return try AppCheckEndpoint(origin: v) } catch { throw .badURL("FIREBASE_APPCHECK_URL: \(error)") }
        }
        return try AppCheckEndpoint(origin: google)
    }
}

/// App Check enforcement over the REST API `projects.services` (get, list, patch): the last stage of a ramp.
/// Reads are retried like Remote Config's; a patch is sent once and carries the service's `etag`, so a change
/// made meanwhile by someone else is refused by Firebase rather than overwritten.
public final class AppCheckServicesClient: @unchecked Sendable {
    /// The services App Check can enforce on (the ones the codelab names, and Authentication).
    public static let knownServices = [
        "firestore.googleapis.com", "firebasedatabase.googleapis.com", "firebasestorage.googleapis.com",
        "identitytoolkit.googleapis.com",
    ]
    /// The scope an App Check call needs (the API also accepts cloud-platform).
    public static let scope = "https://www.googleapis.com/auth/firebase"

    public let endpoint: AppCheckEndpoint
    public let project: String
    private let caller: GoogleAPICaller

    public init(endpoint: AppCheckEndpoint, project: String, caller: GoogleAPICaller) {
        self.endpoint = endpoint
        self.project = project
        self.caller = caller
    }

    var parent: String { endpoint.origin + "/v1/projects/" + percentEncoded(project, keeping: "-._~") }

    /// The retry policy and timeout of this client's calls.
    public var policy: RetryPolicy { caller.policy }

    /// The same client under `policy`: for reads that must not wait long (a kill's look at enforcement).
    public func budgeted(_ policy: RetryPolicy) -> AppCheckServicesClient {
        AppCheckServicesClient(endpoint: endpoint, project: project, caller: caller.with(policy: policy))
    }

    /// `GET v1/projects/{p}/services/{id}`.
    public func get(_ id: String) throws -> AppCheckService {
        let r = try caller.send(
            "GET", parent + "/services/" + (try Self.checked(id)), permission: "firebaseappcheck.services.get",
            retry: true)
        try r.expectOK()
        return try Self.service(try r.json())
    }

    /// `GET v1/projects/{p}/services`, every page: only services configured explicitly are listed.
    public func list() throws -> [AppCheckService] {
        var out: [AppCheckService] = []
        var token: String?
        var walk = PageWalk("App Check services list", maxPages: 100)
        repeat {
            var url = parent + "/services?pageSize=100"
            if let token { url += "&pageToken=" + ServiceAccountTokenProvider.formEscape(token) }
            let r = try caller.send("GET", url, permission: "firebaseappcheck.services.get", retry: true)
            try r.expectOK()
            let json = try r.json()
            for s in json["services"]?.arrayValue ?? [] {
                let service = try Self.service(s)
                if !out.contains(where: { $0.name == service.name }) { out.append(service) }
            }
            token = try walk.next(after: json["nextPageToken"]?.stringValue)
        } while token != nil
        return out
    }

    /// Every known service's configuration (`get` of each: an unconfigured one reads as OFF).
    public func known() throws -> [AppCheckService] { try Self.knownServices.map { try get($0) } }

    /// `PATCH v1/projects/{p}/services/{id}?updateMask=enforcementMode` with the service's `etag` (when given):
    /// sent once; a lost answer is settled by the caller with `get`.
    public func setMode(_ id: String, _ mode: EnforcementMode, etag: String?) throws -> AppCheckService {
        var body = JSONObject()
        body["name"] = .string("projects/\(project)/services/\(try Self.checked(id))")
        body["enforcementMode"] = .string(mode.rawValue)
        if let etag { body["etag"] = .string(etag) }
        let r = try caller.send(
            "PATCH", parent + "/services/" + id + "?updateMask=enforcementMode",
            headers: [("Content-Type", "application/json; charset=utf-8")],
            body: Array(JSONValue.object(body).compactText.utf8), permission: "firebaseappcheck.services.update",
            retry: false)
        if r.response.status == 409 || r.response.status == 412 || r.error?.status == "ABORTED" {
            throw FirebaseError.api(
                status: r.response.status, canonical: r.error?.status ?? "",
                message: "the App Check configuration of \(id) changed meanwhile (etag mismatch): read it again")
        }
        try r.expectOK()
        return try Self.service(try r.json())
    }

    /// A service id as the API names them (`firestore.googleapis.com`): lower-case DNS labels only.
    static func checked(_ id: String) throws -> String {
        let ok =
            !id.isEmpty && id.count <= 253 && id.contains(".")
            && id.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "." || $0 == "-" }
        guard ok else { throw FirebaseError.badURL("'\(id)' is not an App Check service id (such as firestore.googleapis.com)") }
        return id
    }

    static func service(_ json: JSONValue) throws -> AppCheckService {
        guard let name = json["name"]?.stringValue, name.hasPrefix("projects/"), name.contains("/services/") else {
            throw FirebaseError.protocolViolation("an App Check service without its name")
        }
        let modeText = json["enforcementMode"]?.stringValue ?? "OFF"
        guard let mode = EnforcementMode(rawValue: modeText) else {
            throw FirebaseError.protocolViolation("App Check service \(name) has enforcementMode '\(modeText)'")
        }
        return AppCheckService(
            name: name, enforcementMode: mode, replayProtection: json["replayProtection"]?.stringValue,
            etag: json["etag"]?.stringValue, updateTime: json["updateTime"]?.stringValue)
    }
}
