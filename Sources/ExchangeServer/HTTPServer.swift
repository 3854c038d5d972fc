import CMicroHTTPD
import Glibc
import JSON
import Platform
import Timekeeping

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP request as the server hands it to a handler: the whole body has arrived (within its limit).
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, percent-decoded by libmicrohttpd, without the query. A raw path with `%2F` or `%00` in it is
    /// refused (404) before a handler sees it, and a request target with a raw NUL byte (400, see
    /// `HTTPServer.checksWholeTarget`), so a decoded `/` always was a `/` on the wire, and the path is whole (a NUL
    /// would end it).
    public var path: String
    /// Query arguments (`?format=ga4`).
    public var query: [String: String]
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: [UInt8]
    public var remoteAddress: String

    public init(
        method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
        body: [UInt8] = [], remoteAddress: String = "127.0.0.1"
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// A complete response.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// What failed on the server's side (a store's error, which names paths and carries the system's words), for
    /// the access log only: never sent.
    public var problem: String?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = [], problem: String? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.problem = problem
    }

    /// A JSON response (`application/json; charset=UTF-8`, as Google's APIs answer).
    public static func json(_ status: Int, _ body: [UInt8], headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: [("Content-Type", "application/json; charset=UTF-8")] + headers, body: body)
    }
}

/// What serves requests; called concurrently from the server's worker threads.
public protocol HTTPHandler: Sendable {
    /// The largest body accepted for a request line (method and path), in bytes.
    func bodyLimit(method: String, path: String) -> Int
    /// The answer to a request refused on its head alone (`head.body` is empty), or nil to read its body.
    ///
    /// Asked before any body byte is kept or `100 Continue` sent, so that a client the handler would refuse
    /// anyway (no credentials) cannot make the server hold its body first.
    func refusal(head: HTTPRequest) -> HTTPResponse?
    func respond(to request: HTTPRequest) -> HTTPResponse
    /// Whether answering a request of this method and path may wait (for a group commit's sync, a store's round
    /// trip): such a request is answered on a thread of its own (`AnsweringThreads`), off the event loop that
    /// serves its connection and others.
    func answerWaits(method: String, path: String) -> Bool
    /// The response for a body over `bodyLimit` (the body is not read further).
    func bodyTooLarge(limit: Int) -> HTTPResponse
    /// A stop's drain has ended and the answers still being made were answered 503: whatever they wait on (a
    /// store's lock) should give up now, so that the stop does not wait for them to time out one by one.
    func drainEnded()
}

extension HTTPHandler {
    public func drainEnded() {}
}

/// The server's limits.
public struct HTTPServerLimits: Sendable {
    /// Worker threads, each with its own event loop over its share of the connections. A handler holds its
    /// thread while its request's writes wait for their group commit, so the threads bound how many requests
    /// share one sync: more than the cores.
    public var threads: Int = 16
    /// Connections open at once; libmicrohttpd stops accepting at the limit, so more wait in the listen queue.
    public var connectionLimit: Int = 256
    /// An idle connection (no bytes either way) is closed after this long.
    public var connectionTimeoutSeconds: Int = 15
    /// A request head (request line and headers) must be complete this long after its connection was accepted,
    /// or after the previous answer on a keep-alive connection, however steadily its bytes trickle in.
    public var headDeadlineSeconds: Double = 10
    /// A request body must be complete this long after its head.
    public var bodyDeadlineSeconds: Double = 30
    /// With three quarters of `connectionLimit` open, heads and slow bodies (under 1 KiB/s) get this long ...
    public var deadlineUnderPressureSeconds: Double = 2
    /// ... and headers this long after their request line (see `ConnectionWatch`).
    public var headersUnderPressureSeconds: Double = 0.5
    /// Connections at once from one client address (0: no cap); libmicrohttpd closes any more at once.
    public var connectionsPerAddress: Int = 0
    /// The largest request head answered: a longer one is refused with 431 (414 when the request line alone is
    /// over a quarter of it) in Google's error shape. libmicrohttpd's memory per connection is twice this, so
    /// only a head beyond that meets libmicrohttpd's own reply.
    public var connectionMemoryBytes: Int = 32 * 1024
    /// How long a SIGTERM waits for requests in flight before closing what is left.
    public var drainSeconds: Double = 10

    public init() {}
}

/// Why the server could not start.
public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// One access-log line per request: `{"time","method","path","status","durationMs","bytesIn","bytesOut","remote"}`,
/// `"problem"` when the server failed (`HTTPResponse.problem`), and `"answeredBy"` when the server's code did not
/// answer (`Answerer`).
public struct AccessLogEntry: Sendable {
    /// Who answered a request whose head reached the server's code.
    public enum Answerer: String, Sendable {
        /// The server's code: the line has no `answeredBy`.
        case server
        /// libmicrohttpd itself, after the head (a malformed chunked body, a connection out of memory): `status`
        /// is the one it queued.
        case libmicrohttpd
        /// Nobody: the connection ended first (the client went away, or a deadline shut it down); no `status`.
        case none
    }

    public var time: Instant
    public var method: String
    public var path: String
    /// The status sent; nil when nothing was (`answeredBy` is then `.none`).
    public var status: Int?
    public var durationMicroseconds: Int64
    public var bytesIn: Int
    public var bytesOut: Int
    public var remote: String
    public var problem: String?
    public var answeredBy: Answerer

    public init(
        time: Instant, method: String, path: String, status: Int?, durationMicroseconds: Int64, bytesIn: Int,
        bytesOut: Int, remote: String, problem: String? = nil, answeredBy: Answerer = .server
    ) {
        self.time = time
        self.method = method
        self.path = path
        self.status = status
        self.durationMicroseconds = durationMicroseconds
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.remote = remote
        self.problem = problem
        self.answeredBy = answeredBy
    }

    /// The entry as one JSON line (no newline).
    ///
    /// Strings go through the one JSON writer, which escapes controls (C0, DEL, C1) and bidirectional formatting
    /// characters: a path like `/%C2%9B2J` or `/%E2%80%AE` lands as `\u009b2J` / `\u202e`, never raw on the
    /// terminal that tails the log.
    public var line: String {
        func q(_ s: String) -> String { JSONWriter.quoted(s) }
        // Milliseconds with three decimals, from the whole microseconds (no printf for every line).
        let us = max(0, durationMicroseconds)
        let fraction = String(us % 1000)
        let ms = "\(us / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
        return "{\"time\":\(q(time.iso8601)),\"method\":\(q(method)),\"path\":\(q(path)),"
            + (status.map { "\"status\":\($0)," } ?? "")
            + "\"durationMs\":\(ms),\"bytesIn\":\(bytesIn),\"bytesOut\":\(bytesOut),\"remote\":\(q(remote))"
            + (problem.map { ",\"problem\":\(q($0))" } ?? "")
            + (answeredBy == .server ? "" : ",\"answeredBy\":\(q(answeredBy.rawValue))") + "}"
    }
}

/// An HTTP/1.1 server on libmicrohttpd.
///
/// Threading: libmicrohttpd's internal event loop (epoll) with a fixed pool of worker threads
/// (`MHD_OPTION_THREAD_POOL_SIZE`), not a thread per connection: the work per request is short (ECDSA and RSA,
/// then a wait for the group commit that makes its state durable), so a fixed pool (16 by default: enough
/// requests in flight to fill a group while one syncs) serves any number of keep-alive connections, and a
/// connection burst cannot create hundreds of threads on a small machine. The handler runs on the worker that
/// owns the connection.
///
/// Limits: a connection limit, a cap per client address, an idle timeout per connection, deadlines for a
/// request's head and body that trickling bytes do not extend (`ConnectionWatch`, with shorter ones under
/// pressure), a bound on the request head, and a body limit per route (a larger `Content-Length` is refused
/// before the body is read; a chunked body stops being kept at the limit). `shutdown()` stops accepting, lets
/// requests in flight finish (up to `drainSeconds`), then closes the rest.
///
/// Refusals on the head, before any body byte is kept or `100 Continue` sent, each in Google's error shape and
/// closing the connection: a raw NUL byte in the request target (400, `targetHoldsNUL`), a raw path with an
/// encoded slash or NUL (`%2F`, `%00`, 404: libmicrohttpd decodes the path, and a decoded `/` must not route as a
/// separator nor a NUL cut the path short), a head over
/// `connectionMemoryBytes` (431, or 414 for the request line), a header line with whitespace before its colon or
/// folded onto the next (400, `isFieldName`), conflicting `Content-Length` headers or one with
/// `Transfer-Encoding` (400: libmicrohttpd reads one, a proxy in front may read another, which smuggles a
/// request), a transfer coding other than `chunked` (501), `Transfer-Encoding` in an HTTP/1.0 request (400, RFC
/// 9112 §6.1), the handler's own `refusal(head:)`, and a
/// `Content-Length` over the route's limit (413). libmicrohttpd still answers a few requests itself, before any
/// callback can: a request line or header line it cannot parse (a request line of a method alone gets no answer
/// at all), a `Content-Length` that is not a number or overflows, a malformed chunked body, an HTTP major version
/// other than 1, and a head over twice `connectionMemoryBytes` (its bodies are HTML or empty).
public final class HTTPServer: @unchecked Sendable {
    public let handler: any HTTPHandler
    public let limits: HTTPServerLimits
    /// The bound port (useful with port 0).
    public private(set) var port: UInt16 = 0
    public let host: String
    private let clock: any Clock
    private let log: (@Sendable (AccessLogEntry) -> Void)?
    private var daemon: OpaquePointer?
    private let lock = Lock()
    private var inFlight = 0
    private var draining = false
    /// The answers being made off the event loop whose connection its worker has not taken back yet (the answer
    /// taken, or the connection closed), by identity: libmicrohttpd must not be stopped while one is suspended.
    private var offLoopAnswers: [ObjectIdentifier: OffLoopAnswer] = [:]
    /// Set by `stopNow` (under `lock`, with its look at `offLoopAnswers`): from then on no connection is suspended.
    private var stopping = false
    private let answering: AnsweringThreads
    let watch: ConnectionWatch
    /// Whether a raw NUL in the request target can be seen (see `targetHoldsNUL`): with libmicrohttpd 0.9.x.
    let checksWholeTarget: Bool

    /// Binds `host:port` (an IPv4 literal; port 0 picks a free one) and starts serving.
    public init(
        host: String, port: UInt16, handler: any HTTPHandler, limits: HTTPServerLimits = HTTPServerLimits(),
        clock: any Clock = SystemClock(), log: (@Sendable (AccessLogEntry) -> Void)? = nil
    ) throws {
        self.handler = handler
        self.limits = limits
        self.host = host
        self.clock = clock
        self.log = log
        answering = AnsweringThreads(limit: max(1, limits.connectionLimit))
        watch = ConnectionWatch(
            deadlines: ConnectionWatch.Deadlines(
                head: limits.headDeadlineSeconds, body: limits.bodyDeadlineSeconds,
                underPressure: limits.deadlineUnderPressureSeconds,
                headersUnderPressure: limits.headersUnderPressureSeconds,
                pressureConnections: max(1, limits.connectionLimit * 3 / 4), minimumBodyRate: 1024))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            watch.stop()
            answering.stop()
            throw HTTPServerError("--listen needs an IPv4 address and a port (e.g. 127.0.0.1:8080), not '\(host)'")
        }
        if let failure = HTTPServer.loadLibrary() {
            watch.stop()
            answering.stop()
            throw HTTPServerError("cannot load libmicrohttpd (Debian: libmicrohttpd12): \(failure)")
        }
        checksWholeTarget = String(cString: rollout_mhd_version()).hasPrefix("0.9.")
        let me = Unmanaged.passUnretained(self).toOpaque()
        let flags =
            UInt32(MHD_USE_INTERNAL_POLLING_THREAD.rawValue) | UInt32(MHD_USE_EPOLL.rawValue)
            | UInt32(MHD_ALLOW_SUSPEND_RESUME.rawValue) | UInt32(MHD_USE_ERROR_LOG.rawValue)
        let started = withUnsafePointer(to: &address) { addr in
            rollout_mhd_start(
                flags, addr, UInt32(max(1, limits.threads)), UInt32(max(1, limits.connectionLimit)),
                UInt32(max(0, limits.connectionsPerAddress)), UInt32(max(1, limits.connectionTimeoutSeconds)),
                2 * max(4096, limits.connectionMemoryBytes), accessHandler, completedHandler, uriHandler,
                connectionHandler, me)
        }
        guard let started else {
            watch.stop()
            answering.stop()
            throw HTTPServerError("cannot listen on \(host):\(port): \(String(cString: strerror(errno)))")
        }
        daemon = started
        self.port = rollout_mhd_port(started)
    }

    deinit { stopNow() }

    private static let loadLock = Lock()
    /// Opens libmicrohttpd once (see Sources/CMicroHTTPD/shim.h); nil on success, else the reason.
    static func loadLibrary() -> String? {
        loadLock.withLock { rollout_mhd_load().map { String(cString: $0) } }
    }

    /// Requests whose handling has begun and whose response has not been sent.
    public var requestsInFlight: Int { lock.withLock { inFlight } }

    /// Graceful stop: no new connections, requests in flight finish (responses carry `Connection: close`),
    /// then the daemon stops. Returns the number of requests that were still unfinished at the deadline.
    @discardableResult
    public func shutdown() -> Int {
        guard
            let d = lock.withLock({ () -> OpaquePointer? in
                draining = true
                return daemon
            })
        else { return 0 }
        // Quiescing hands back the listening socket; closing it makes new connections fail at once instead of
        // waiting in the kernel's backlog for an accept that never comes.
        let listener = rollout_mhd_quiesce(d)
        if listener >= 0 { close(listener) }
        let deadline = Deadline(secondsFromNow: limits.drainSeconds)
        while requestsInFlight > 0, !deadline.hasPassed { usleep(5_000) }
        let left = requestsInFlight
        // The last responses are in the kernel's buffers; stopping closes every connection, and a close that
        // races the peer's read can turn into a reset that discards them. Give the peers a moment to read.
        if left == 0 { usleep(200_000) }
        stopNow()
        return left
    }

    private func stopNow() {
        let d = lock.withLock { () -> OpaquePointer? in
            defer { daemon = nil }
            return daemon
        }
        if let d {
            // No connection may be suspended when libmicrohttpd stops, nor any resume be under way: each answer
            // still being made off the loop (its store call waiting, past the drain) is answered 503 now and its
            // connection resumed, under the answer's lock, so its thread, when its call ends, resumes nothing.
            // Jobs not started yet never start.
            answering.stop()
            let left = lock.withLock { () -> [OffLoopAnswer] in
                stopping = true
                return Array(offLoopAnswers.values)
            }
            for answer in left {
                answer.resume(with: googleError(503, "UNAVAILABLE", "The server is stopping; try again."))
            }
            // Their calls, and those queued behind them, stop waiting for a store's lock: they fail now instead of
            // each waiting out its busy timeout (a stop with the store locked took a second drain).
            if !left.isEmpty { handler.drainEnded() }
            // The workers take the answers back (and send them) before they stop.
            let deadline = Deadline(secondsFromNow: 2)
            while lock.withLock({ !offLoopAnswers.isEmpty }), !deadline.hasPassed { usleep(1_000) }
            rollout_mhd_stop(d)
            // The answers' threads still inside a store call end within its timeouts; waited for (a while), so that
            // none runs while the process exits.
            answering.waitUntilIdle(atMost: limits.drainSeconds)
        }
        watch.stop()
        answering.stop()
    }

    // MARK: Per-request state

    /// One request, from its request line (the URI log callback) to its completion.
    final class Exchange {
        /// The URI as received, before libmicrohttpd decodes it (up to a NUL, if it holds one).
        let rawURI: String
        /// Where the C string libmicrohttpd handed over as the raw URI ends (the address of its terminating NUL),
        /// 0 if it handed over none.
        var rawURIEnd: UInt = 0
        /// The request line's HTTP version.
        var version = ""
        /// The request target held a NUL byte on the wire (`HTTPServer.targetHoldsNUL`).
        var nulInTarget = false
        var method = ""
        var path = ""
        var begun = false
        var headers: [String: String] = [:]
        var query: [String: String] = [:]
        var headBytes = 0
        var conflictingLength = false
        /// A header name that was not a field name on the wire (`HTTPServer.isFieldName`).
        var malformedHeader = false
        var body: [UInt8] = []
        var limit = 0
        var tooLarge = false
        /// The answer given before the body was read (a refusal); the connection closes after it.
        var early: HTTPResponse?
        var status = 0
        var problem: String?
        var bytesOut = 0
        var bytesIn = 0
        var started: UInt64 = 0
        var remote = ""
        var connection: ConnectionWatch.Connection?
        /// The answer made off the event loop (`HTTPHandler.answerWaits`), once the connection was suspended.
        var offLoop: OffLoopAnswer?

        init(rawURI: String) { self.rawURI = rawURI }
    }

    /// An answer made on an answering thread, handed to the connection's worker when it resumes the connection.
    ///
    /// Resumed once, under the answer's lock: by its thread with the answer it made, or by a stopping server with a
    /// 503, whichever comes first; the other resumes nothing (the connection may be gone by then).
    final class OffLoopAnswer: @unchecked Sendable {
        private let lock = Lock()
        private var made: HTTPResponse?
        private var resumed = false
        private let connection: UInt
        init(connection: OpaquePointer) { self.connection = UInt(bitPattern: connection) }
        var response: HTTPResponse? { lock.withLock { made } }
        func resume(with response: HTTPResponse) {
            lock.withLock {
                guard !resumed else { return }
                resumed = true
                made = response
                rollout_mhd_resume(OpaquePointer(bitPattern: connection)!)
            }
        }
    }

    fileprivate func begin(
        connection: OpaquePointer, exchange e: Exchange, method: String, path: String, version: String,
        versionAddress: UInt
    ) {
        var buffer = [CChar](repeating: 0, count: 64)
        rollout_mhd_client_address(connection, &buffer, buffer.count)
        e.begun = true
        e.method = method
        e.path = path
        e.version = version
        e.nulInTarget = checksWholeTarget && Self.targetHoldsNUL(rawURIEnd: e.rawURIEnd, versionAddress: versionAddress)
        e.limit = handler.bodyLimit(method: method, path: path)
        e.remote = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        e.started = ConnectionWatch.now()
        e.headBytes = method.utf8.count + e.rawURI.utf8.count + version.utf8.count + 4
        let box = Unmanaged.passUnretained(e).toOpaque()
        rollout_mhd_values(connection, 1, headerIterator, box)
        rollout_mhd_values(connection, 0, queryIterator, box)
        if let c = e.connection { watch.enter(.body, c) }
        e.early = refusal(e)
        lock.withLock { inFlight += 1 }
    }

    /// Whether the request target held a NUL byte on the wire, from where libmicrohttpd 0.9.x keeps the request
    /// line: the C string it hands the URI log callback as the raw URI ends at the first NUL, so a raw NUL
    /// (`GET /healthz\0/../x`) would cut the path short, and neither that string nor the decoded path shows it.
    ///
    /// libmicrohttpd 0.9.x (`parse_initial_message_line`, the same from 0.9.60 to 0.9.77) parses the request line
    /// in place in its read buffer: it turns the last space before the version into the URI's terminator, passes
    /// the URI log callback a pointer to the URI's first byte, and the access handler a pointer to the version,
    /// the byte after that terminator (a request without a version of exactly eight bytes never reaches the
    /// handler). So the URI's string ends just before the version (`rawURIEnd + 1 == versionAddress`) exactly
    /// when the target holds no NUL; a NUL ends the string earlier. libmicrohttpd 1.x lays the line out otherwise
    /// (several spaces may separate target and version), so the server checks this only with 0.9.x
    /// (`checksWholeTarget`).
    static func targetHoldsNUL(rawURIEnd: UInt, versionAddress: UInt) -> Bool {
        rawURIEnd == 0 || rawURIEnd &+ 1 != versionAddress
    }

    /// Whether a raw path holds an escape whose decoded byte must never reach a handler: `%2F` or `%2f` (a decoded
    /// `/` would route as a separator) or `%00` (libmicrohttpd decodes it to a NUL, where the path it hands over
    /// ends, so `/healthz%00/../x` would be served as `/healthz`).
    ///
    /// A scan of the bytes: a lower-cased copy of the path searched as text cost every request about as much as
    /// the rest of the refusals.
    static func hasRefusedEscape<Bytes: Collection<UInt8>>(_ path: Bytes) -> Bool {
        var before: (UInt8, UInt8) = (0, 0)  // the two bytes before `byte`
        for byte in path {
            if before.0 == UInt8(ascii: "%") {
                switch (before.1, byte | 0x20) {
                case (UInt8(ascii: "2"), UInt8(ascii: "f")), (UInt8(ascii: "0"), UInt8(ascii: "0")): return true
                default: break
                }
            }
            before = (before.1, byte)
        }
        return false
    }

    /// Whether a header name, as libmicrohttpd hands it over (then lower-cased), was a well-formed field name on
    /// the wire: an RFC 9110 token that does not extend a framing header's name.
    ///
    /// libmicrohttpd 0.9.75 keeps whitespace before the colon in the name (`Content-Length : 5` arrives as
    /// `content-length `), keeps the leading whitespace of a first header line, and glues an obs-fold continuation
    /// line, its leading whitespace dropped, to the end of its header's name (`X-A: a` then ` b c` arrives as
    /// `x-ab c: a`; `Content-Length: 2` then ` 0` as `content-length0: 2`). A proxy in front may read such a
    /// header otherwise, so each is refused (RFC 9112 §5.1, §5.2) instead of served with a framing of our own.
    /// A fold whose continuation is a bare token on a header other than the framing ones reads as a header of
    /// another name, which decides nothing here.
    static func isFieldName(_ name: String) -> Bool {
        for framing in ["content-length", "transfer-encoding"] where name != framing && name.hasPrefix(framing) {
            return false
        }
        return !name.isEmpty
            && name.utf8.allSatisfy { c in
                (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                    || "!#$%&'*+-.^_`|~".utf8.contains(c)
            }
    }

    /// The answer to a request refused on its head alone, in Google's error shape; nil to go on.
    private func refusal(_ e: Exchange) -> HTTPResponse? {
        if e.nulInTarget {
            return googleError(400, "INVALID_ARGUMENT", "The request target holds a NUL byte.")
        }
        let rawBytes = e.rawURI.utf8.prefix { $0 != UInt8(ascii: "?") }
        if Self.hasRefusedEscape(rawBytes) {
            let rawPath = String(decoding: rawBytes, as: UTF8.self)
            return googleError(
                404, "NOT_FOUND",
                "The requested URL \(rawPath) was not found on this server (encoded '/' or NUL in the path).")
        }
        let memory = max(4096, limits.connectionMemoryBytes)
        if e.rawURI.utf8.count > memory / 4 {
            return googleError(414, "INVALID_ARGUMENT", "The request URL is longer than \(memory / 4) bytes.")
        }
        if e.headBytes > memory {
            return googleError(
                431, "INVALID_ARGUMENT", "The request line and headers are larger than \(memory) bytes.")
        }
        if e.malformedHeader {
            return googleError(
                400, "INVALID_ARGUMENT",
                "A header line is malformed: whitespace before its colon, or a folded (obs-fold) continuation line.")
        }
        if e.conflictingLength {
            return googleError(400, "INVALID_ARGUMENT", "The request has conflicting Content-Length headers.")
        }
        if let coding = e.headers["transfer-encoding"] {
            // libmicrohttpd decodes chunks in an HTTP/1.0 request too; a proxy in front may frame it by the close.
            if e.version == "HTTP/1.0" {
                return googleError(
                    400, "INVALID_ARGUMENT",
                    "An HTTP/1.0 request cannot have a Transfer-Encoding header (RFC 9112 §6.1: faulty framing).")
            }
            // libmicrohttpd frames by Transfer-Encoding and decodes only a lone `chunked`; any other coding it
            // would read as a body of unknown length until the connection closes (RFC 9112 §6.1).
            if e.headers["content-length"] != nil {
                return googleError(
                    400, "INVALID_ARGUMENT", "The request has both Content-Length and Transfer-Encoding headers.")
            }
            if coding.lowercased() != "chunked" {
                return googleError(
                    501, "UNIMPLEMENTED", "Transfer-Encoding '\(coding)' is not implemented (only chunked).")
            }
        }
        if let refused = handler.refusal(head: request(e)) { return refused }
        // libmicrohttpd has checked that the length is digits and fits 64 bits: every such length parses here.
        if let length = e.headers["content-length"].flatMap(UInt64.init), length > UInt64(e.limit) {
            e.tooLarge = true
            return handler.bodyTooLarge(limit: e.limit)
        }
        return nil
    }

    /// The request as the handler sees it, with the body kept so far.
    private func request(_ e: Exchange) -> HTTPRequest {
        HTTPRequest(
            method: e.method, path: e.path, query: e.query, headers: e.headers, body: e.body, remoteAddress: e.remote)
    }

    fileprivate func respond(connection: OpaquePointer, exchange e: Exchange) -> MHD_Result {
        // (A resumed connection entered it before it was suspended.)
        if e.offLoop == nil, let c = e.connection { watch.enter(.answering, c) }
        let response: HTTPResponse
        if let early = e.early {
            response = early
        } else if e.tooLarge {
            response = handler.bodyTooLarge(limit: e.limit)
        } else if let offLoop = e.offLoop {
            // Resumed: the answering thread has made the answer.
            guard let made = offLoop.response else { return .NO }
            settle(offLoop)
            response = made
        } else if handler.answerWaits(method: e.method, path: e.path) {
            // Suspended first, so that the answer's resume can never come before it; the worker goes on with its
            // other connections and calls back here once the answering thread resumes this one.
            let offLoop = OffLoopAnswer(connection: connection)
            let suspends = lock.withLock { () -> Bool in
                if !stopping { offLoopAnswers[ObjectIdentifier(offLoop)] = offLoop }
                return !stopping
            }
            // A request on a kept-alive connection after the stop began: nothing more is suspended.
            guard suspends else {
                return queue(googleError(503, "UNAVAILABLE", "The server is stopping; try again."), for: e, on: connection)
            }
            e.offLoop = offLoop
            rollout_mhd_suspend(connection)
            let request = request(e)
            let handler = handler
            answering.run { offLoop.resume(with: handler.respond(to: request)) }
            return .YES
        } else {
            response = handler.respond(to: request(e))
        }
        return queue(response, for: e, on: connection)
    }

    /// Queues `response` as the answer to `e` (closing the connection after it when draining or refused).
    private func queue(_ response: HTTPResponse, for e: Exchange, on connection: OpaquePointer) -> MHD_Result {
        e.status = response.status
        e.problem = response.problem
        e.bytesOut = response.body.count
        let closing = lock.withLock { draining } || e.tooLarge || e.early != nil
        let r = response.body.withUnsafeBytes { raw in
            rollout_mhd_response_copy(
                raw.count, raw.baseAddress)
        }
        guard let r else { return .NO }
        defer { rollout_mhd_destroy_response(r) }
        for (name, value) in response.headers { _ = rollout_mhd_add_header(r, name, value) }
        if closing { _ = rollout_mhd_add_header(r, "Connection", "close") }
        return rollout_mhd_queue(connection, UInt32(response.status), r)
    }

    /// A suspended connection is back in its worker's hands (its answer taken, or the connection closed).
    private func settle(_ offLoop: OffLoopAnswer) {
        _ = lock.withLock { offLoopAnswers.removeValue(forKey: ObjectIdentifier(offLoop)) }
    }

    /// The request is over; `queuedStatus` is the status of the response on the connection (0 if none), which
    /// is libmicrohttpd's own when the server's code gave none (it answers a malformed chunked body itself).
    fileprivate func complete(_ e: Exchange, queuedStatus: Int) {
        if let offLoop = e.offLoop {
            settle(offLoop)
            // Made, and the connection closed before its worker could send it (the client went away): the answer
            // is the server's all the same (its write committed), as when a sent answer is not read.
            if e.status == 0, let made = offLoop.response {
                e.status = made.status
                e.problem = made.problem
                e.bytesOut = made.body.count
            }
        }
        if let c = e.connection { watch.enter(.head, c) }
        guard e.begun else { return }  // libmicrohttpd answered the head itself
        lock.withLock { inFlight -= 1 }
        guard let log else { return }
        let answeredBy: AccessLogEntry.Answerer =
            e.status != 0 ? .server : queuedStatus != 0 ? .libmicrohttpd : .none
        log(
            AccessLogEntry(
                time: clock.now(), method: e.method, path: e.path,
                status: answeredBy == .server ? e.status : answeredBy == .libmicrohttpd ? queuedStatus : nil,
                durationMicroseconds: Int64(ConnectionWatch.now() - e.started), bytesIn: e.bytesIn,
                bytesOut: e.bytesOut, remote: e.remote, problem: e.problem, answeredBy: answeredBy))
    }
}

// MARK: C callbacks

private let headerIterator: MHD_KeyValueIterator = { cls, _, key, value in
    guard let cls, let key else { return .YES }
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(cls).takeUnretainedValue()
    let name = String(cString: key).lowercased()
    let v = value.map { String(cString: $0) } ?? ""
    e.headBytes += name.utf8.count + v.utf8.count + 4
    if !HTTPServer.isFieldName(name) { e.malformedHeader = true }
    if name == "content-length", let seen = e.headers[name], seen != v { e.conflictingLength = true }
    if name == "content-length", e.headers[name] != nil { return .YES }
    e.headers[name] = e.headers[name].map { $0 + ", " + v } ?? v
    return .YES
}

private let queryIterator: MHD_KeyValueIterator = { cls, _, key, value in
    guard let cls, let key else { return .YES }
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(cls).takeUnretainedValue()
    e.query[String(cString: key)] = value.map { String(cString: $0) } ?? ""
    return .YES
}

/// The request line has arrived: a new exchange holding the raw URI becomes the request's `con_cls`.
private let uriHandler: rollout_mhd_uri_callback = { cls, uri, connection in
    let e = HTTPServer.Exchange(rawURI: uri.map { String(cString: $0) } ?? "")
    if let uri { e.rawURIEnd = UInt(bitPattern: uri) + UInt(strlen(uri)) }
    if let cls, let connection, let c = rollout_mhd_socket_context(connection) {
        e.connection = Unmanaged<ConnectionWatch.Connection>.fromOpaque(c).takeUnretainedValue()
        Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue().watch.requestLine(e.connection!)
    }
    return Unmanaged.passRetained(e).toOpaque()
}

/// Connections opened and closed, for the deadline watch.
private let connectionHandler: MHD_NotifyConnectionCallback = { cls, connection, socketContext, code in
    guard let cls, let connection, let socketContext else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    if code.rawValue == 0 {  // MHD_CONNECTION_NOTIFY_STARTED
        let c = server.watch.opened(fd: rollout_mhd_connection_fd(connection))
        socketContext.pointee = Unmanaged.passRetained(c).toOpaque()
    } else if let box = socketContext.pointee {
        server.watch.closed(Unmanaged<ConnectionWatch.Connection>.fromOpaque(box).takeRetainedValue())
        socketContext.pointee = nil
    }
}

private let accessHandler: MHD_AccessHandlerCallback = {
    cls, connection, url, method, version, uploadData, uploadDataSize, conCls in
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls, let box = conCls.pointee
    else { return .NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(box).takeUnretainedValue()
    guard e.begun else {
        // First call: headers only.
        server.begin(
            connection: connection, exchange: e, method: String(cString: method), path: String(cString: url),
            version: version.map { String(cString: $0) } ?? "", versionAddress: UInt(bitPattern: version))
        return e.early == nil ? .YES : server.respond(connection: connection, exchange: e)
    }
    let count = uploadDataSize.pointee
    if count > 0 {
        e.bytesIn += count
        if let c = e.connection { server.watch.received(count, c) }
        // A refused request's body is never kept (its answer is queued and the connection closes after it).
        if !e.tooLarge, e.early == nil, let uploadData {
            if e.body.count + count > e.limit {
                e.tooLarge = true
                e.body = []
            } else {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                    e.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                }
            }
        }
        uploadDataSize.pointee = 0
        return .YES
    }
    if e.status != 0 { return .YES }  // already answered (a refusal on the head)
    return server.respond(connection: connection, exchange: e)
}

private let completedHandler: MHD_RequestCompletedCallback = { cls, connection, conCls, _ in
    guard let cls, let conCls, let box = conCls.pointee else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(box).takeRetainedValue()
    conCls.pointee = nil
    server.complete(e, queuedStatus: connection.map { Int(rollout_mhd_queued_status($0)) } ?? 0)
}
