import CMicroHTTPD
import FoundationEssentials
import Glibc
import Platform
import Timekeeping

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP request as the server hands it to a handler: the whole body has arrived (within its limit).
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, percent-decoded by libmicrohttpd, without the query.
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

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
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
    func respond(to request: HTTPRequest) -> HTTPResponse
    /// The response for a body over `bodyLimit` (the body is not read further).
    func bodyTooLarge(limit: Int) -> HTTPResponse
}

/// The server's limits.
public struct HTTPServerLimits: Sendable {
    /// Worker threads, each with its own event loop over its share of the connections.
    public var threads: Int = 4
    /// Connections open at once; libmicrohttpd stops accepting at the limit, so more wait in the listen queue.
    public var connectionLimit: Int = 256
    /// An idle connection (no bytes either way) is closed after this long.
    public var connectionTimeoutSeconds: Int = 15
    /// Memory per connection for the request line and headers (libmicrohttpd answers 431/414 beyond it).
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

/// One access-log line per request: `{"time","method","path","status","durationMs","bytesIn","bytesOut","remote"}`.
public struct AccessLogEntry: Sendable {
    public var time: Instant
    public var method: String
    public var path: String
    public var status: Int
    public var durationMicroseconds: Int64
    public var bytesIn: Int
    public var bytesOut: Int
    public var remote: String

    /// The entry as one JSON line (no newline).
    public var line: String {
        func q(_ s: String) -> String {
            var out = "\""
            for u in s.unicodeScalars {
                switch u {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case _ where u.value < 0x20: out += cFormat("\\u%04x", u.value)
                default: out.unicodeScalars.append(u)
                }
            }
            return out + "\""
        }
        let ms = cFormat("%.3f", Double(durationMicroseconds) / 1000)
        return "{\"time\":\(q(time.iso8601)),\"method\":\(q(method)),\"path\":\(q(path)),\"status\":\(status),"
            + "\"durationMs\":\(ms),\"bytesIn\":\(bytesIn),\"bytesOut\":\(bytesOut),\"remote\":\(q(remote))}"
    }
}

/// An HTTP/1.1 server on libmicrohttpd.
///
/// Threading: libmicrohttpd's internal event loop (epoll) with a fixed pool of worker threads
/// (`MHD_OPTION_THREAD_POOL_SIZE`), not a thread per connection: the work per request is short and CPU-bound
/// (ECDSA and RSA, SQLite commits), so a few threads bounded by the cores serve any number of keep-alive
/// connections, and a connection burst cannot create hundreds of threads on a small machine. The handler runs
/// on the worker that owns the connection.
///
/// Limits: a connection limit, an idle timeout per connection, a memory bound on request line and headers,
/// and a body limit per route (a larger `Content-Length` is refused before the body is read; a chunked body
/// stops being kept at the limit). `shutdown()` stops accepting, lets requests in flight finish (up to
/// `drainSeconds`), then closes the rest.
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
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            throw HTTPServerError("--listen needs an IPv4 address and a port (e.g. 127.0.0.1:8080), not '\(host)'")
        }
        if let failure = HTTPServer.loadLibrary() {
            throw HTTPServerError("cannot load libmicrohttpd (Debian: libmicrohttpd12): \(failure)")
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        let flags =
            UInt32(MHD_USE_INTERNAL_POLLING_THREAD.rawValue) | UInt32(MHD_USE_EPOLL.rawValue)
            | UInt32(MHD_USE_ITC.rawValue) | UInt32(MHD_USE_ERROR_LOG.rawValue)
        let started = withUnsafePointer(to: &address) { addr in
            rollout_mhd_start(
                flags, addr, UInt32(max(1, limits.threads)), UInt32(max(1, limits.connectionLimit)),
                UInt32(max(1, limits.connectionTimeoutSeconds)), max(4096, limits.connectionMemoryBytes),
                accessHandler, me, completedHandler, me)
        }
        guard let started else {
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
        let deadline = Date().addingTimeInterval(limits.drainSeconds)
        while requestsInFlight > 0, Date() < deadline { usleep(5_000) }
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
        if let d { rollout_mhd_stop(d) }
    }

    // MARK: Per-request state

    final class Exchange {
        let method: String
        let path: String
        var headers: [String: String] = [:]
        var query: [String: String] = [:]
        var body: [UInt8] = []
        var limit: Int
        var tooLarge = false
        var status = 0
        var bytesOut = 0
        var bytesIn = 0
        let started: UInt64
        let remote: String

        init(method: String, path: String, limit: Int, remote: String) {
            self.method = method
            self.path = path
            self.limit = limit
            self.remote = remote
            started = HTTPServer.monotonicMicroseconds()
        }
    }

    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec / 1000)
    }

    fileprivate func begin(connection: OpaquePointer, method: String, path: String) -> Exchange {
        var buffer = [CChar](repeating: 0, count: 64)
        rollout_mhd_client_address(connection, &buffer, buffer.count)
        let e = Exchange(
            method: method, path: path, limit: handler.bodyLimit(method: method, path: path),
            remote: buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        let box = Unmanaged.passUnretained(e).toOpaque()
        rollout_mhd_values(connection, 1, headerIterator, box)
        rollout_mhd_values(connection, 0, queryIterator, box)
        lock.withLock { inFlight += 1 }
        return e
    }

    fileprivate func respond(connection: OpaquePointer, exchange e: Exchange) -> MHD_Result {
        let response: HTTPResponse
        if e.tooLarge {
            response = handler.bodyTooLarge(limit: e.limit)
        } else {
            response = handler.respond(
                to: HTTPRequest(
                    method: e.method, path: e.path, query: e.query, headers: e.headers, body: e.body,
                    remoteAddress: e.remote))
        }
        e.status = response.status
        e.bytesOut = response.body.count
        let closing = lock.withLock { draining } || e.tooLarge
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

    fileprivate func complete(_ e: Exchange) {
        lock.withLock { inFlight -= 1 }
        guard let log else { return }
        log(
            AccessLogEntry(
                time: clock.now(), method: e.method, path: e.path, status: e.status,
                durationMicroseconds: Int64(HTTPServer.monotonicMicroseconds() - e.started), bytesIn: e.bytesIn,
                bytesOut: e.bytesOut, remote: e.remote))
    }
}

// MARK: C callbacks

private let headerIterator: MHD_KeyValueIterator = { cls, _, key, value in
    guard let cls, let key else { return .YES }
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(cls).takeUnretainedValue()
    let name = String(cString: key).lowercased()
    let v = value.map { String(cString: $0) } ?? ""
    e.headers[name] = e.headers[name].map { $0 + ", " + v } ?? v
    return .YES
}

private let queryIterator: MHD_KeyValueIterator = { cls, _, key, value in
    guard let cls, let key else { return .YES }
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(cls).takeUnretainedValue()
    e.query[String(cString: key)] = value.map { String(cString: $0) } ?? ""
    return .YES
}

private let accessHandler: MHD_AccessHandlerCallback = {
    cls, connection, url, method, _, uploadData, uploadDataSize, conCls in
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return .NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    guard let box = conCls.pointee else {
        // First call: headers only.
        let e = server.begin(connection: connection, method: String(cString: method), path: String(cString: url))
        conCls.pointee = Unmanaged.passRetained(e).toOpaque()
        if let length = e.headers["content-length"].flatMap(Int.init), length > e.limit {
            e.tooLarge = true
            return server.respond(connection: connection, exchange: e)
        }
        return .YES
    }
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(box).takeUnretainedValue()
    let count = uploadDataSize.pointee
    if count > 0 {
        e.bytesIn += count
        if !e.tooLarge, let uploadData {
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
    if e.status != 0 { return .YES }  // already answered (413 on Content-Length)
    return server.respond(connection: connection, exchange: e)
}

private let completedHandler: MHD_RequestCompletedCallback = { cls, _, conCls, _ in
    guard let cls, let conCls, let box = conCls.pointee else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    let e = Unmanaged<HTTPServer.Exchange>.fromOpaque(box).takeRetainedValue()
    conCls.pointee = nil
    server.complete(e)
}
