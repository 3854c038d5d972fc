import AppCheck
import Crypto
import Glibc
import Platform
import JSON
import Timekeeping

/// Google's error body, `{"error": {"code", "message", "status"}}`, for the routes outside the exchange.
public func googleError(_ code: Int, _ status: String, _ message: String, headers: [(String, String)] = [])
    -> HTTPResponse
{
    let error: JSONValue = ["code": .number(JSONNumber(code)), "message": .string(message), "status": .string(status)]
    return .json(code, JSONWriter().bytes(["error": error]), headers: headers)
}

/// The 503 for a store that failed: Google's error shape with the generic message the exchange answers too;
/// `problem` (the store's error) goes to the server's access log, never to the client.
public func storeUnavailable(_ problem: String) -> HTTPResponse {
    var response = googleError(503, "UNAVAILABLE", AppCheckResponse.unavailableMessage)
    response.problem = problem
    return response
}

/// The exchange the server currently uses, rebuilt when the store's signing keys or app registrations change
/// (a `rollout appcheck keys rotate` by another process, a retirement coming due, an app added).
///
/// At most one check per `checkInterval` of clock time: one small query of the signing keys and the
/// configuration. A failed rebuild keeps the previous exchange and is reported through `problem`.
public final class ExchangeHolder: @unchecked Sendable {
    public let state: any AppCheckState
    public let clock: any Clock
    /// Whether apps registered as trusting the demo authority may do so in this process.
    public let trustDemo: Bool
    public let checkInterval: Instant.Duration
    private let lock = Lock()
    private var current: AppCheckExchange
    private var fingerprint: [String]
    private var lastCheck: Instant
    private let problem: @Sendable (String) -> Void

    public init(
        state: any AppCheckState, clock: any Clock, trustDemo: Bool,
        checkInterval: Instant.Duration = .seconds(Int64(2)),
        problem: @escaping @Sendable (String) -> Void = { _ in }
    ) throws {
        self.state = state
        self.clock = clock
        self.trustDemo = trustDemo
        self.checkInterval = checkInterval
        self.problem = problem
        let now = clock.now()
        (current, fingerprint) = try Self.build(state: state, clock: clock, trustDemo: trustDemo, at: now)
        lastCheck = now
    }

    /// The registered configuration as this process applies it: without `trustDemo`, no app trusts the demo root.
    public static func effectiveConfiguration(_ stored: AppCheckConfiguration, trustDemo: Bool) -> AppCheckConfiguration
    {
        var c = stored
        if !trustDemo {
            c.apps = c.apps.map {
                var a = $0; a.trustsDemoRoot = false; return a
            }
        }
        return c
    }

    private static func build(state: any AppCheckState, clock: any Clock, trustDemo: Bool, at now: Instant) throws
        -> (AppCheckExchange, [String])
    {
        guard let stored = try state.configuration() else {
            throw AppCheckSetupError(
                "the store has no App Check project and apps: register one with 'rollout appcheck app add'")
        }
        let configuration = effectiveConfiguration(stored, trustDemo: trustDemo)
        let exchange = try AppCheckExchange(configuration: configuration, state: state, clock: clock)
        return (exchange, try fingerprintOf(state: state, configuration: configuration, at: now))
    }

    private static func fingerprintOf(state: any AppCheckState, configuration: AppCheckConfiguration, at now: Instant)
        throws -> [String]
    {
        try state.signingKeys().filter { $0.isPublished(at: now) }.map(\.kid) + ["\(configuration)"]
    }

    /// The exchange to serve this request with.
    public func exchange() -> AppCheckExchange {
        let now = clock.now()
        let due = lock.withLock { () -> Bool in
            guard now - lastCheck >= checkInterval else { return false }
            lastCheck = now
            return true
        }
        if due { refresh(at: now) }
        return lock.withLock { current }
    }

    /// Checks the store now and rebuilds the exchange if keys or apps changed.
    public func refresh(at now: Instant) {
        do {
            guard let stored = try state.configuration() else { return }
            let configuration = Self.effectiveConfiguration(stored, trustDemo: trustDemo)
            let seen = try Self.fingerprintOf(state: state, configuration: configuration, at: now)
            if lock.withLock({ seen == fingerprint }) { return }
            let (fresh, print) = try Self.build(state: state, clock: clock, trustDemo: trustDemo, at: now)
            lock.withLock {
                current = fresh
                fingerprint = print
            }
        } catch {
            problem("keeping the previous exchange: \(error)")
        }
    }
}

/// A token bucket per client address: `rate` requests per second, bursts up to `burst`; clock injected.
public final class RateLimiter: @unchecked Sendable {
    public let rate: Double
    public let burst: Double
    private let clock: any Clock
    private let lock = Lock()
    private var buckets: [String: (tokens: Double, at: Instant)] = [:]

    public init(rate: Double, burst: Double, clock: any Clock) {
        self.rate = rate
        self.burst = max(1, burst)
        self.clock = clock
    }

    /// Takes one token for `key`; false when the bucket is empty.
    public func allow(_ key: String) -> Bool {
        let now = clock.now()
        return lock.withLock {
            if buckets.count > 10_000 {
                // Full buckets carry no information; dropping them bounds the memory.
                buckets = buckets.filter { $0.value.tokens + (now - $0.value.at).seconds * rate < burst }
            }
            var b = buckets[key] ?? (burst, now)
            b.tokens = min(burst, b.tokens + max(0, (now - b.at).seconds) * rate)
            b.at = now
            guard b.tokens >= 1 else {
                buckets[key] = b
                return false
            }
            b.tokens -= 1
            buckets[key] = b
            return true
        }
    }
}

/// The routes of `rollout serve`:
///
/// - `POST /v1/projects/{project}/apps/{app}:{method}` and `POST /v1/oauthClients/{app}:{method}`: the App Check
///   exchange (`AppCheckExchange.handle`), methods `generateAppAttestChallenge`, `exchangeAppAttestAttestation`,
///   `exchangeAppAttestAssertion`, `exchangeDebugToken`.
/// - `POST /v1beta/projects/{p}:verifyAppCheckToken`: for a backend, with the server's `BearerToken` (it consumes
///   limited-use tokens; Firebase asks an authenticated backend for it too).
/// - `GET /v1/jwks`: the public signing keys.
/// - `POST /v1/events`: telemetry intake (`EventsIntake`), with the same bearer token.
/// - `GET /healthz`: `{"status": "serving"}` while the store answers, 503 otherwise.
///
/// Unknown paths and wrong HTTP methods answer 404 `NOT_FOUND`, as Google's front end does.
public final class ExchangeService: HTTPHandler, @unchecked Sendable {
    public let holder: ExchangeHolder
    public let intake: EventsIntake?
    public let limiter: RateLimiter?
    /// Guards `verifyAppCheckToken` (the intake holds the same token for `POST /v1/events`).
    public let bearer: BearerToken
    /// Body limits: App Check requests are small (an attestation is about 5 KB).
    public let exchangeBodyLimit: Int
    public let eventsBodyLimit: Int

    /// Ends the stores' waits for locks (`HTTPHandler.drainEnded`).
    private let abandonLockWaits: @Sendable () -> Void

    public init(
        holder: ExchangeHolder, intake: EventsIntake?, limiter: RateLimiter?, bearerToken: String,
        exchangeBodyLimit: Int = 64 * 1024, eventsBodyLimit: Int = 8 * 1024 * 1024,
        abandonLockWaits: @escaping @Sendable () -> Void = {}
    ) {
        self.holder = holder
        self.intake = intake
        self.limiter = limiter
        bearer = BearerToken(bearerToken)
        self.exchangeBodyLimit = exchangeBodyLimit
        self.eventsBodyLimit = eventsBodyLimit
        self.abandonLockWaits = abandonLockWaits
    }

    public func drainEnded() { abandonLockWaits() }

    /// The events limit for `POST /v1/events` with the intake on (whose token `refusal(head:)` has checked
    /// before the length is), the exchange's for every other request: a client without the token, another method
    /// on that path, or any request with `--no-events` cannot make the server keep more than the small limit.
    public func bodyLimit(method: String, path: String) -> Int {
        method == "POST" && path == "/v1/events" && intake != nil ? eventsBodyLimit : exchangeBodyLimit
    }

    public func bodyTooLarge(limit: Int) -> HTTPResponse {
        googleError(413, "INVALID_ARGUMENT", "Request payload size exceeds the limit: \(limit) bytes.")
    }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        switch (request.method, request.path) {
        case ("GET", "/healthz"), ("HEAD", "/healthz"):
            do {
                _ = try holder.state.signingKeys()
                return .json(200, JSONWriter().bytes(["status": "serving"]))
            } catch {
                return storeUnavailable("the store does not answer: \(error)")
            }
        case ("GET", "/v1/jwks"):
            return .json(200, holder.exchange().jwks(), headers: [("Cache-Control", "public, max-age=300")])
        case (_, "/v1/events"):
            guard let intake = intake(serving: request) else { return notFound(request) }
            return intake.respond(to: request)
        default:
            guard request.method == "POST", let route = AppCheckRoute.parse(path: request.path), route.method != "jwks"
            else { return notFound(request) }
            if route.method == Self.backendMethod, let refused = bearer.refusal(head: request) { return refused }
            if let limiter, !limiter.allow(request.remoteAddress) {
                let e = AppCheckExchangeError.rateLimited(
                    "Quota exceeded: more than \(Int(limiter.rate)) requests per second from \(request.remoteAddress).")
                let r = AppCheckExchange.errorResponse(e)
                return .json(r.status, r.body, headers: [("Retry-After", "1")])
            }
            // The methods whose answer waits for a durable write share their group commit with the requests
            // still verifying (`CommitAnticipation`).
            func handle() -> AppCheckResponse {
                holder.exchange().handle(
                    method: route.method, projectId: route.projectId, appId: route.appId, body: request.body)
            }
            let r = Self.writingMethods.contains(route.method) ? CommitAnticipation.expecting { handle() } : handle()
            var response = HTTPResponse.json(r.status, r.body)
            response.problem = r.problem
            return response
        }
    }

    /// Refused on the head, before any body byte is kept: `POST /v1/events` without the intake's bearer token
    /// (401, `EventsIntake.refusal`), every other request to `/v1/events` (another method, or the intake off:
    /// the 404 `respond` would give once the body had arrived), and `verifyAppCheckToken` without the bearer
    /// token (401). Every other request goes on to its body.
    public func refusal(head: HTTPRequest) -> HTTPResponse? {
        if head.path == "/v1/events" {
            guard let intake = intake(serving: head) else { return notFound(head) }
            return intake.refusal(head: head)
        }
        if head.method == "POST", AppCheckRoute.parse(path: head.path)?.method == Self.backendMethod {
            return bearer.refusal(head: head)
        }
        return nil
    }

    /// The exchange method for a backend, not a device: it needs the bearer token.
    static let backendMethod = "verifyAppCheckToken"

    /// The intake when `request` is `POST /v1/events` and the intake is on.
    private func intake(serving request: HTTPRequest) -> EventsIntake? {
        request.method == "POST" && request.path == "/v1/events" ? intake : nil
    }

    /// Answered off the event loop: the exchange methods that write before they answer (their answer waits for a
    /// group commit's sync), the events intake (a batch landing in the store) and the store's health probe. A
    /// challenge (an HMAC), the JWKS and the refusals never wait.
    public func answerWaits(method: String, path: String) -> Bool {
        switch (method, path) {
        case ("POST", "/v1/events"), ("GET", "/healthz"), ("HEAD", "/healthz"): return true
        case ("POST", _): return AppCheckRoute.parse(path: path).map { Self.writingMethods.contains($0.method) } ?? false
        default: return false
        }
    }

    /// The exchange methods that write before they answer: a redeemed challenge with a saved key or an advanced
    /// counter, a consumed token.
    static let writingMethods: Set<String> = [
        "exchangeAppAttestAttestation", "exchangeAppAttestAssertion", "verifyAppCheckToken",
    ]

    private func notFound(_ request: HTTPRequest) -> HTTPResponse {
        googleError(
            404, "NOT_FOUND", "The requested URL \(request.path) was not found on this server (\(request.method)).")
    }
}
