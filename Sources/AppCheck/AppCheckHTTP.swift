import Crypto
import JSON
import Timekeeping

/// A JSON response of the exchange: an HTTP status and a body, ready to be served.
public struct AppCheckResponse: Hashable, Sendable {
    public var status: Int
    /// UTF-8 JSON.
    public var body: [UInt8]
    /// What failed on the server's side, for its log only (see `errorResponse`).
    public var problem: String? = nil

    /// What a client is told of a 503, as Google's front end words it. The reason (a store's error, which names
    /// paths and carries the system's words) is for the server's log only.
    public static let unavailableMessage = "The service is currently unavailable."

    public var bodyText: String { String(decoding: body, as: UTF8.self) }
    /// The body parsed as JSON.
    public var json: JSONValue? { try? JSONParser().parse(body) }
}

/// Where a request goes: `v1/projects/{project}/apps/{app}:{method}`, `v1/oauthClients/{app}:{method}`,
/// `v1beta/projects/{project}:{method}`, or `v1/jwks` (the paths of Google's discovery document).
public struct AppCheckRoute: Hashable, Sendable {
    /// The project number or id of the path; nil under `oauthClients/`, which names no project.
    public var projectId: String?
    public var appId: String?
    public var method: String

    public init(projectId: String?, appId: String?, method: String) {
        self.projectId = projectId
        self.appId = appId
        self.method = method
    }

    /// Parses a request path (a leading `/` and a `v1`/`v1beta` version are accepted); nil if it is none of
    /// the forms above. Under `oauthClients/{id}` the id is matched against the registered app ids (this
    /// exchange keeps no separate OAuth client ids).
    public static func parse(path: String) -> AppCheckRoute? {
        // Over the path's bytes, once: the server parses every request's path up to three times (its refusal on
        // the head, whether its answer waits, its answer), and splitting a String runs grapheme breaking over each
        // character and made a String per part (about 3 µs a parse, 5% of a consume's CPU; this is about 0.4 µs).
        var path = path
        return path.withUTF8 { bytes -> AppCheckRoute? in
            // The non-empty parts between slashes; a seventh means no route.
            var parts: [Range<Int>] = []
            parts.reserveCapacity(6)
            var i = 0
            while i < bytes.count {
                guard bytes[i] != UInt8(ascii: "/") else {
                    i += 1
                    continue
                }
                var end = i
                while end < bytes.count, bytes[end] != UInt8(ascii: "/") { end += 1 }
                guard parts.count < 6 else { return nil }
                parts.append(i..<end)
                i = end
            }
            func names(_ k: Int, _ word: StaticString) -> Bool {
                bytes[parts[k]].elementsEqual(UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount))
            }
            func text(_ range: Range<Int>) -> String {
                String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
            }
            guard !parts.isEmpty, names(0, "v1") || names(0, "v1beta") else { return nil }
            let n = parts.count - 1
            if n == 1, names(1, "jwks") { return AppCheckRoute(projectId: nil, appId: nil, method: "jwks") }
            let oauth = n == 2 && names(1, "oauthClients")
            guard oauth || ((n == 2 || n == 4) && names(1, "projects")) else { return nil }
            if n == 4 { guard names(3, "apps") else { return nil } }
            let last = parts[n]
            guard let colon = bytes[last].lastIndex(of: UInt8(ascii: ":")) else { return nil }
            let (name, method) = (last.lowerBound..<colon, (colon + 1)..<last.upperBound)
            guard !name.isEmpty, !method.isEmpty else { return nil }
            if oauth { return AppCheckRoute(projectId: nil, appId: text(name), method: text(method)) }
            return n == 4
                ? AppCheckRoute(projectId: text(parts[2]), appId: text(name), method: text(method))
                : AppCheckRoute(projectId: text(name), appId: nil, method: text(method))
        }
    }
}

extension AppCheckExchange {
    /// Serves a request given by its path (see `AppCheckRoute`) and JSON body.
    public func handle(path: String, body: [UInt8]) -> AppCheckResponse {
        guard let route = AppCheckRoute.parse(path: path) else {
            return Self.errorResponse(.unknownMethod(path))
        }
        if route.method == "jwks" { return AppCheckResponse(status: 200, body: jwks()) }
        return handle(method: route.method, projectId: route.projectId, appId: route.appId, body: body)
    }

    /// Serves one App Check method with Firebase's JSON shapes.
    ///
    /// App methods (`appId` given): `generateAppAttestChallenge`, `exchangeAppAttestAttestation`,
    /// `exchangeAppAttestAssertion`. Project method: `verifyAppCheckToken` (`{appCheckToken}` →
    /// `{alreadyConsumed: true}` on a replay, `{}` the first time). Field names are accepted in camelCase and
    /// snake_case; bytes in standard or URL-safe base64, padded or not; unknown fields are refused like
    /// Google's APIs do. `projectId` may be the project id or number.
    /// `projectId` nil (an `oauthClients/` path) skips the project check.
    public func handle(method: String, projectId: String?, appId: String?, body: [UInt8]) -> AppCheckResponse {
        do throws(AppCheckExchangeError) {
            let project = configuration.project
            if let projectId, projectId != project.id, projectId != project.number {
                throw .unknownProject(projectId)
            }
            let request = try RequestBody(body)
            switch (method, appId) {
            case ("generateAppAttestChallenge", let appId?):
                try request.allow([])
                let c = try generateChallenge(appId: appId)
                return Self.ok(["challenge": .string(Base64.encode(c.challenge)), "ttl": .string(Self.duration(c.ttl))])
            case ("exchangeAppAttestAttestation", let appId?):
                try request.allow([
                    ["attestationStatement", "attestation_statement"], ["challenge"], ["keyId", "key_id"],
                    ["limitedUse", "limited_use"],
                ])
                let result = try exchangeAttestation(
                    appId: appId, attestation: try request.bytes(["attestationStatement", "attestation_statement"]),
                    keyId: try request.bytes(["keyId", "key_id"]), challenge: try request.bytes(["challenge"]),
                    limitedUse: try request.bool(["limitedUse", "limited_use"]))
                return Self.ok([
                    "artifact": .string(Base64.encode(result.artifact)), "appCheckToken": Self.tokenJSON(result.token),
                ])
            case ("exchangeAppAttestAssertion", let appId?):
                try request.allow([["artifact"], ["assertion"], ["challenge"], ["limitedUse", "limited_use"]])
                let token = try exchangeAssertion(
                    appId: appId, artifact: try request.bytes(["artifact"]),
                    assertion: try request.bytes(["assertion"]),
                    challenge: try request.bytes(["challenge"]),
                    limitedUse: try request.bool(["limitedUse", "limited_use"]))
                return AppCheckResponse(status: 200, body: JSONWriter().bytes(Self.tokenJSON(token)))
            case ("exchangeDebugToken", let appId?):
                try request.allow([["debugToken", "debug_token"], ["limitedUse", "limited_use"]])
                let token = try exchangeDebugToken(
                    appId: appId, debugToken: try request.string(["debugToken", "debug_token"]),
                    limitedUse: try request.bool(["limitedUse", "limited_use"]))
                return AppCheckResponse(status: 200, body: JSONWriter().bytes(Self.tokenJSON(token)))
            case ("verifyAppCheckToken", nil):
                try request.allow([["appCheckToken", "app_check_token"]])
                let report = evaluateToken(try request.string(["appCheckToken", "app_check_token"]), consume: true)
                switch report.result {
                case .success: return Self.ok([:])
                case .failure(.alreadyConsumed): return Self.ok(["alreadyConsumed": true])
                case .failure(.stateUnavailable(let r)): throw .unavailable(r)
                case .failure(let e): throw .tokenRejected(e)
                }
            default:
                throw .unknownMethod(method)
            }
        } catch {
            return Self.errorResponse(error)
        }
    }

    static func ok(_ object: JSONValue) -> AppCheckResponse {
        AppCheckResponse(status: 200, body: JSONWriter().bytes(object))
    }

    /// A protobuf Duration in JSON: whole seconds with an `s`.
    static func duration(_ d: Instant.Duration) -> String { "\(d.microseconds / 1_000_000)s" }

    static func tokenJSON(_ t: AppCheckToken) -> JSONValue {
        ["token": .string(t.token), "ttl": .string(duration(t.ttl))]
    }

    /// Google's error shape, with the specific reason in an `ErrorInfo` detail; an `unavailable` error's
    /// description goes to `problem`, and its message is the generic `AppCheckResponse.unavailableMessage`.
    public static func errorResponse(_ e: AppCheckExchangeError) -> AppCheckResponse {
        var problem: String?
        if case .unavailable = e { problem = e.description }
        let detail: JSONValue = [
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": .string(e.code),
            "domain": "firebaseappcheck.googleapis.com",
        ]
        let error: JSONValue = [
            "code": .number(JSONNumber(e.httpStatus)),
            "message": .string(problem == nil ? e.description : AppCheckResponse.unavailableMessage),
            "status": .string(e.rpcStatus),
            "details": [detail],
        ]
        return AppCheckResponse(status: e.httpStatus, body: JSONWriter().bytes(["error": error]), problem: problem)
    }
}

/// A request's JSON object, read with both spellings of each field.
private struct RequestBody {
    let fields: JSONObject

    init(_ body: [UInt8]) throws(AppCheckExchangeError) {
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }) {
            fields = JSONObject()
            return
        }
        let value: JSONValue
        do { value = try JSONParser().parse(body) } catch {
            throw .invalidArgument("Invalid JSON payload received: \(error)")
        }
        guard let object = value.objectValue else {
            throw .invalidArgument("Invalid JSON payload received: the body is \(value.kindName), not an object")
        }
        fields = object
    }

    /// Refuses names outside `names` (each entry lists the spellings of one field) and double spellings.
    func allow(_ names: [[String]]) throws(AppCheckExchangeError) {
        let known = Set(names.flatMap { $0 })
        if let unknown = fields.keys.first(where: { !known.contains($0) }) {
            throw .invalidArgument("Invalid JSON payload received. Unknown name \"\(unknown)\"")
        }
        for spellings in names where spellings.filter({ fields[$0] != nil }).count > 1 {
            throw .invalidArgument("field \(spellings[0]) is given as both \(spellings.joined(separator: " and "))")
        }
    }

    /// The field under its first present spelling; null counts as absent, as in proto3 JSON.
    private func value(_ spellings: [String]) -> (name: String, value: JSONValue)? {
        for s in spellings {
            if let v = fields[s], !v.isNull { return (s, v) }
        }
        return nil
    }

    func bytes(_ spellings: [String]) throws(AppCheckExchangeError) -> [UInt8] {
        guard let (name, v) = value(spellings) else { throw .invalidArgument("missing field \(spellings[0])") }
        guard let text = v.stringValue, let bytes = Base64.decode(text), !bytes.isEmpty else {
            throw .invalidArgument("field \(name) is not non-empty base64")
        }
        return bytes
    }

    func string(_ spellings: [String]) throws(AppCheckExchangeError) -> String {
        guard let (name, v) = value(spellings) else { throw .invalidArgument("missing field \(spellings[0])") }
        guard let text = v.stringValue, !text.isEmpty else {
            throw .invalidArgument("field \(name) is not a non-empty string")
        }
        return text
    }

    func bool(_ spellings: [String]) throws(AppCheckExchangeError) -> Bool {
        guard let (name, v) = value(spellings) else { return false }
        guard let b = v.boolValue else { throw .invalidArgument("field \(name) is not a boolean") }
        return b
    }
}
