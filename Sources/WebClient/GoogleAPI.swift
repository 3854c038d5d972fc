import Glibc
import JSON
import Platform
import Timekeeping

/// One Google REST API call as every client here makes it: a bearer token (refreshed once after a 401), the
/// quota project header, and the retries the call allows (`RetryPolicy`). The Remote Config and App Check
/// clients share it.
public final class GoogleAPICaller: @unchecked Sendable {
    public let project: String
    public let policy: RetryPolicy
    private let tokens: AccessTokenProvider
    private let transport: HTTPTransport
    private let sleep: @Sendable (Instant.Duration) -> Void
    private let random: @Sendable () -> Double

    public init(
        project: String, tokens: AccessTokenProvider, transport: HTTPTransport, policy: RetryPolicy = RetryPolicy(),
        sleep: @escaping @Sendable (Instant.Duration) -> Void = { d in
            if d.microseconds > 0 { usleep(UInt32(min(d.microseconds, 60_000_000))) }
        },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.project = project
        self.tokens = tokens
        self.transport = transport
        self.policy = policy
        self.sleep = sleep
        self.random = random
    }

    /// The same caller (credentials, transport) under another retry policy and timeout: a call that must not wait
    /// long gets its own budget.
    public func with(policy: RetryPolicy) -> GoogleAPICaller {
        GoogleAPICaller(project: project, tokens: tokens, transport: transport, policy: policy, sleep: sleep, random: random)
    }


    /// The answer of one call after authentication and the retries the call allows.
    package struct Answer {
        package var response: HTTPResponse
        package var permission: String
        package var error: (code: Int, message: String, status: String)? {
            guard response.status >= 400 else { return nil }
            let json = try? JSONParser().parse(response.body)
            let e = json?["error"]
            let message = e?["message"]?.stringValue ?? String(decoding: response.body.prefix(300), as: UTF8.self)
            return (
                Int(e?["code"]?.numberValue?.int64 ?? Int64(response.status)), message, e?["status"]?.stringValue ?? ""
            )
        }

        package var versionMismatch: VersionMismatch? {
            guard let e = error else { return nil }
            if response.status == 412 || e.status == "FAILED_PRECONDITION" || e.status == "ABORTED"
                || e.message.hasPrefix("[VERSION_MISMATCH]")
            {
                return VersionMismatch(message: e.message)
            }
            return nil
        }

        package func expectOK(rejecting: Bool = false) throws {
            guard let e = error else {
                guard response.status == 200 else {
                    throw FirebaseError.protocolViolation("Firebase answered HTTP \(response.status) without a body")
                }
                return
            }
            switch response.status {
            case 401, 403:
                throw FirebaseError.permission(status: response.status, permission: permission, message: e.message)
            case 400 where rejecting: throw FirebaseError.rejected(status: 400, canonical: e.status, message: e.message)
            default: throw FirebaseError.api(status: response.status, canonical: e.status, message: e.message)
            }
        }

        package func json() throws -> JSONValue {
            do { return try JSONParser().parse(response.body) } catch {
                throw FirebaseError.protocolViolation("Firebase's answer is not JSON: \(error)")
            }
        }

        package func etag() throws -> String {
            guard let e = response.header("etag"), !e.isEmpty else {
                throw FirebaseError.protocolViolation(
                    "Firebase's answer carries no ETag header; refusing to continue without one")
            }
            return e
        }
    }

    /// Sends with a bearer token (refreshed once after a 401); with `retry`, retries 429/500/503 answers and
    /// lost connections with back-off. Without `retry`, transport failures are thrown as `TransportError` so that
    /// the caller can settle them. `cancellation` reaches every request of the call, the token's included;
    /// `answerLimit` bounds the answer (not the token's).
    package func send(
        _ method: String, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, permission: String,
        retry: Bool, cancellation: Cancellation? = nil, answerLimit: Int? = nil
    ) throws -> Answer {
        var refreshed = false
        var attempt = 0
        while true {
            attempt += 1
            let token = try tokens.token(refresh: false, cancellation: cancellation)
            var all = headers
            all.append(("Authorization", "Bearer \(token)"))
            all.append(("Accept", "application/json"))
            all.append(("X-Goog-User-Project", project))
            var request = HTTPRequest(method: method, url: url, headers: all, body: body, timeout: policy.timeout)
            request.cancellation = cancellation
            request.answerLimit = answerLimit
            let response: HTTPResponse
            do {
                response = try transport.send(request)
            } catch {
                if error.cancelled { throw error }
                if retry || !error.mayHaveArrived, error.isTransient, attempt < policy.attempts {
                    sleep(policy.delay(retry: attempt, random: random()))
                    continue
                }
                if retry || !error.mayHaveArrived {
                    throw FirebaseError.unreachable("cannot reach Firebase: \(error) (after \(attempt) attempts)")
                }
                throw error
            }
            if response.status == 401, !refreshed {
                refreshed = true
                _ = try tokens.token(refresh: true, cancellation: cancellation)
                attempt -= 1
                continue
            }
            if RetryPolicy.isRetryable(status: response.status), retry || response.status == 429,
                attempt < policy.attempts
            {
                sleep(policy.delay(retry: attempt, random: random()))
                continue
            }
            return Answer(response: response, permission: permission)
        }
    }
}
