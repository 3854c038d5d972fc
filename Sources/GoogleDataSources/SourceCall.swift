import Glibc
import JSON
import Platform
import TelemetrySources
import Timekeeping
import WebClient

/// A pull that failed: which source, what went wrong, and (for a bad answer) which field.
public struct SourceError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The service kept answering 429/5xx (or could not be reached) through every retry.
        case unavailable
        /// 401/403: the credentials are refused or lack the permission.
        case permission
        /// Any other error answer (a bad query, a missing table).
        case refused
        /// The answer broke the documented shape: malformed, oversized, out of order or duplicated.
        case badAnswer
        /// The source cannot be called as configured (its credentials are missing, an API origin is not https).
        case configuration
        /// The pull was abandoned where it was (the loop was stopped, or the pull ran past its time bound).
        case cancelled
    }
    public var kind: Kind
    public var source: String
    public var message: String

    public init(_ kind: Kind, source: String, _ message: String) {
        self.kind = kind
        self.source = source
        self.message = message
    }

    public var description: String { "source \(source): \(message)" }
}

/// One call to a Google data API as every source makes it: through WebClient's caller (bearer token, refreshed
/// once after a 401; the caller's own retries are off), with `SourceBackoff` on 429/5xx and lost connections,
/// honouring `Retry-After`.
public final class SourceCaller: @unchecked Sendable {
    public let source: String
    let caller: GoogleAPICaller
    let backoff: SourceBackoff
    let clock: any Clock
    /// Nil: waits are real time, cut short by `cancellation`.
    let sleep: (@Sendable (Instant.Duration) -> Void)?
    let random: @Sendable () -> Double
    /// Checked before each attempt, ends a wait early and aborts a transfer in flight: the pull then fails as
    /// `.cancelled`. Set by whoever runs the pull (the headless loop's stop, a pull's time bound).
    public var cancellation: Cancellation?
    /// The most one answer of a source may hold, once inflated, and the most all the answers of one BigQuery query
    /// may hold together (its polls and pages: `BigQueryClient.query`); past it the answer is refused as it arrives.
    /// The sources' transport is made with it as its own limit. A pull's answer is far smaller: 60 minutes of a fleet
    /// at a million events a minute are 2,520 rows, about 300 KB, and a query is at most 1,000,000 rows.
    public static let maximumAnswerBytes = 32 << 20
    /// Bytes received so far (what `source test` and the bench report).
    public private(set) var bytesReceived = 0
    /// How many answers asked to wait (429/5xx), and the waits asked for.
    public private(set) var waits: [Instant.Duration] = []

    public init(
        source: String, project: String, tokens: any AccessTokenProvider, transport: HTTPTransport, clock: any Clock,
        backoff: SourceBackoff = SourceBackoff(), timeout: Instant.Duration = .seconds(Int64(60)),
        sleep: (@Sendable (Instant.Duration) -> Void)? = nil,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0...1) }
    ) {
        self.source = source
        var policy = RetryPolicy(attempts: 1)
        policy.timeout = timeout
        caller = GoogleAPICaller(project: project, tokens: tokens, transport: transport, policy: policy)
        self.backoff = backoff
        self.clock = clock
        self.sleep = sleep
        self.random = random
    }

    /// Sends and returns the answer's JSON object; retries what the backoff allows.
    ///
    /// The answer may hold `maximumAnswerBytes`, less `earlier.bytes` when the call continues an answer whose
    /// earlier parts count against the same limit (a BigQuery query's polls and pages); past that it is refused as
    /// it arrives, a bad answer naming the limit.
    public func call(
        _ method: String, _ url: String, body: JSONValue? = nil, what: String,
        earlier: (bytes: Int, answers: Int)? = nil
    ) throws(SourceError) -> JSONValue {
        let limit = max(0, Self.maximumAnswerBytes - (earlier?.bytes ?? 0))
        // The limit the answer crossed, as the transport says it (a transport made with another limit shows).
        func tooLarge(_ how: TransportError.Oversize, at crossed: Int) -> SourceError {
            let rest = earlier.map {
                ", what is left of the \(Self.maximumAnswerBytes >> 20) MiB a query's answers may hold after its \($0.answers) earlier answer(s) (\($0.bytes) bytes)"
            }
            return SourceError(
                .badAnswer, source: source,
                "\(what): the answer is larger than \(TransportError.size(crossed)) \(how.rawValue)\(rest ?? ""); refused"
            )
        }
        var attempt = 0
        while true {
            attempt += 1
            try checkCancelled(what)
            let answer: HTTPResponse
            do {
                answer = try caller.send(
                    method, url, headers: body == nil ? [] : [("Content-Type", "application/json")],
                    body: body.map { Array($0.compactText.utf8) }, permission: what, retry: false,
                    cancellation: cancellation, answerLimit: limit
                ).response
            } catch let e as TransportError where e.cancelled {
                throw cancelledError(what)
            } catch let e as TransportError where e.oversized {
                // Asking again would fetch the same flood: a bad answer, named, nothing kept.
                throw tooLarge(e.oversize ?? .asReceived, at: e.limit ?? limit)
            } catch let e as TransportError where e.isTransient && attempt < backoff.attempts {
                wait(backoff.delay(retry: attempt, retryAfter: nil, now: clock.now(), random: random()))
                continue
            } catch FirebaseError.unreachable(_) where attempt < backoff.attempts {
                wait(backoff.delay(retry: attempt, retryAfter: nil, now: clock.now(), random: random()))
                continue
            } catch {
                try checkCancelled(what)
                throw SourceError(.unavailable, source: source, "\(what): \(error) (after \(attempt) attempts)")
            }
            bytesReceived += answer.body.count
            if SourceBackoff.isTransient(status: answer.status) {
                if attempt < backoff.attempts {
                    wait(backoff.delay(retry: attempt, retryAfter: answer.header("retry-after"), now: clock.now(), random: random()))
                    continue
                }
                throw SourceError(
                    .unavailable, source: source,
                    "\(what): HTTP \(answer.status) \(Self.message(answer)) after \(attempt) attempts")
            }
            // A transport that does not bound what it receives (recorded answers) is held to the same limit.
            guard answer.body.count <= limit else { throw tooLarge(.asReceived, at: limit) }
            switch answer.status {
            case 200: break
            case 401, 403:
                throw SourceError(.permission, source: source, "\(what): HTTP \(answer.status) \(Self.message(answer))")
            default:
                throw SourceError(.refused, source: source, "\(what): HTTP \(answer.status) \(Self.message(answer))")
            }
            let json: JSONValue
            do { json = try JSONParser().parse(answer.body) } catch {
                throw SourceError(.badAnswer, source: source, "\(what): the answer is not JSON: \(error)")
            }
            guard json.objectValue != nil else {
                throw SourceError(.badAnswer, source: source, "\(what): the answer is \(json.kindName), not an object")
            }
            return json
        }
    }

    private func wait(_ d: Instant.Duration) {
        waits.append(d)
        pause(d)
    }

    /// Waits `d` (at most 2 minutes) without counting it as a wait an answer asked for (a poll's pause between two
    /// asks): the injected sleeper, else real time cut short by `cancellation`.
    func pause(_ d: Instant.Duration) {
        if let sleep {
            sleep(d)
        } else if d.microseconds > 0 {
            let seconds = Double(min(d.microseconds, 120_000_000)) / 1e6
            if let cancellation { cancellation.wait(seconds: seconds) } else { usleep(UInt32(seconds * 1e6)) }
        }
    }

    private func checkCancelled(_ what: String) throws(SourceError) {
        if cancellation?.isCancelled == true { throw cancelledError(what) }
    }

    private func cancelledError(_ what: String) -> SourceError {
        let why = cancellation?.timedOut == true ? "gave up: the pull ran past its time bound" : "abandoned: stopped"
        return SourceError(.cancelled, source: source, "\(what): \(why)")
    }

    /// Google's error envelope's message, or the start of the body.
    static func message(_ r: HTTPResponse) -> String {
        let json = try? JSONParser().parse(r.body)
        let text = json?["error"]?["message"]?.stringValue ?? String(decoding: r.body.prefix(200), as: UTF8.self)
        let status = json?["error"]?["status"]?.stringValue
        return (status.map { "\($0): " } ?? "") + text
    }
}

extension JSONValue {
    var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}
