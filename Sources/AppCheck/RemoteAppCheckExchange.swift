import Crypto
import JSON
import Timekeeping

/// The three App Attest calls a client makes, in process (`AppCheckExchange`) or over HTTP
/// (`RemoteAppCheckExchange`); `SimulatedAppCheckClient` works with either.
public protocol AppAttestExchanging: AnyObject, Sendable {
    func generateChallenge(appId: String) throws(AppCheckExchangeError) -> AppAttestChallenge
    /// `exchangeAppAttestAttestation`: the artifact and the token.
    func attest(appId: String, attestation: [UInt8], keyId: [UInt8], challenge: [UInt8], limitedUse: Bool)
        throws(AppCheckExchangeError) -> (artifact: [UInt8], token: AppCheckToken)
    func exchangeAssertion(
        appId: String, artifact: [UInt8], assertion: [UInt8], challenge: [UInt8], limitedUse: Bool
    ) throws(AppCheckExchangeError) -> AppCheckToken
}

extension AppCheckExchange: AppAttestExchanging {
    public func attest(appId: String, attestation: [UInt8], keyId: [UInt8], challenge: [UInt8], limitedUse: Bool)
        throws(AppCheckExchangeError) -> (artifact: [UInt8], token: AppCheckToken)
    {
        let r = try exchangeAttestation(
            appId: appId, attestation: attestation, keyId: keyId, challenge: challenge, limitedUse: limitedUse)
        return (r.artifact, r.token)
    }
}

/// Sends one HTTP POST with a JSON body and returns the status and body; throws when nothing came back.
public protocol AppCheckHTTPTransport: Sendable {
    func post(path: String, body: [UInt8]) throws -> (status: Int, body: [UInt8])
}

/// An App Check exchange server reached over HTTP, speaking Firebase's REST shapes
/// (`/v1/projects/{project}/apps/{app}:METHOD`).
///
/// Refusals come back as `AppCheckExchangeError.refused` with the server's reason (its `ErrorInfo.reason`, the
/// same codes the in-process exchange uses as telemetry error classes); transport failures as `.unavailable`.
public final class RemoteAppCheckExchange: AppAttestExchanging, @unchecked Sendable {
    public let transport: any AppCheckHTTPTransport
    /// The project id or number put in the path.
    public let project: String

    public init(transport: any AppCheckHTTPTransport, project: String) {
        self.transport = transport
        self.project = project
    }

    public func generateChallenge(appId: String) throws(AppCheckExchangeError) -> AppAttestChallenge {
        let o = try call(appId, "generateAppAttestChallenge", [:])
        guard let text = o["challenge"]?.stringValue, let challenge = Base64.decode(text), !challenge.isEmpty,
            let ttl = o["ttl"]?.stringValue.flatMap(Self.duration)
        else { throw .unavailable("the server's challenge response is malformed") }
        return AppAttestChallenge(challenge: challenge, ttl: ttl)
    }

    public func attest(appId: String, attestation: [UInt8], keyId: [UInt8], challenge: [UInt8], limitedUse: Bool)
        throws(AppCheckExchangeError) -> (artifact: [UInt8], token: AppCheckToken)
    {
        let o = try call(
            appId, "exchangeAppAttestAttestation",
            [
                "attestationStatement": .string(Base64.encode(attestation)),
                "challenge": .string(Base64.encode(challenge)),
                "keyId": .string(Base64.encode(keyId)), "limitedUse": .bool(limitedUse),
            ])
        guard let text = o["artifact"]?.stringValue, let artifact = Base64.decode(text),
            let token = o["appCheckToken"]?.objectValue.flatMap(Self.token)
        else { throw .unavailable("the server's attestation response is malformed") }
        return (artifact, token)
    }

    public func exchangeAssertion(
        appId: String, artifact: [UInt8], assertion: [UInt8], challenge: [UInt8], limitedUse: Bool
    ) throws(AppCheckExchangeError) -> AppCheckToken {
        let o = try call(
            appId, "exchangeAppAttestAssertion",
            [
                "artifact": .string(Base64.encode(artifact)), "assertion": .string(Base64.encode(assertion)),
                "challenge": .string(Base64.encode(challenge)), "limitedUse": .bool(limitedUse),
            ])
        guard let token = Self.token(o) else { throw .unavailable("the server's assertion response is malformed") }
        return token
    }

    /// `exchangeDebugToken`.
    public func exchangeDebugToken(appId: String, debugToken: String, limitedUse: Bool = false)
        throws(AppCheckExchangeError) -> AppCheckToken
    {
        let o = try call(
            appId, "exchangeDebugToken", ["debugToken": .string(debugToken), "limitedUse": .bool(limitedUse)])
        guard let token = Self.token(o) else { throw .unavailable("the server's token response is malformed") }
        return token
    }

    private func call(_ appId: String, _ method: String, _ body: JSONValue) throws(AppCheckExchangeError) -> JSONObject
    {
        let response: (status: Int, body: [UInt8])
        do {
            response = try transport.post(
                path: "/v1/projects/\(project)/apps/\(appId):\(method)", body: JSONWriter().bytes(body))
        } catch {
            throw .unavailable("the exchange server did not answer: \(error)")
        }
        let json = (try? JSONParser().parse(response.body))?.objectValue
        guard response.status == 200 else {
            let error = json?["error"]?.objectValue
            let message = error?["message"]?.stringValue ?? "HTTP \(response.status)"
            let reason = error?["details"]?.arrayValue?.first?["reason"]?.stringValue ?? "http\(response.status)"
            throw .refused(status: response.status, reason: reason, message: message)
        }
        guard let json else { throw .unavailable("the exchange server answered 200 without a JSON object") }
        return json
    }

    /// A protobuf Duration in JSON (`"3600s"`, `"0.5s"`).
    public static func duration(_ text: String) -> Instant.Duration? {
        // Bounded before conversion: a hostile server's "1e300s" must be a refusal, not an overflow trap.
        guard text.hasSuffix("s"), let seconds = Double(text.dropLast()), seconds >= 0, seconds <= 10 * 365 * 86_400 else {
            return nil
        }
        return .seconds(seconds)
    }

    /// `{token, ttl}` with the token's claims read from its payload (not verified: the client only reads them).
    static func token(_ o: JSONObject) -> AppCheckToken? {
        guard let jwt = o["token"]?.stringValue, let ttl = o["ttl"]?.stringValue.flatMap(duration) else { return nil }
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64.decode(String(parts[1]), .jwt),
            let object = (try? JSONParser().parse(payload))?.objectValue,
            let claims = try? AppCheckTokenVerifier.claims(object)
        else { return nil }
        return AppCheckToken(token: jwt, ttl: ttl, claims: claims)
    }
}
