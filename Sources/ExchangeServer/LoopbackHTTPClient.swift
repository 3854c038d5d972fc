import AppCheck
import Glibc
import Platform

#if canImport(Glibc)
    import Glibc
#endif

/// Why a loopback request failed before a response arrived.
public struct HTTPClientError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A minimal HTTP/1.1 client for a server on this machine: one keep-alive connection, `Content-Length`
/// bodies only (what `HTTPServer` sends), requests one at a time (a lock serialises callers).
///
/// Only loopback addresses (`127.0.0.0/8`, `localhost`) are accepted, so it cannot be pointed elsewhere by
/// mistake. It is the transport of `RemoteAppCheckExchange` for simulated devices and the load test.
public final class LoopbackHTTPClient: AppCheckHTTPTransport, @unchecked Sendable {
    public let host: String
    public let port: UInt16
    public var timeoutSeconds: Int = 30
    private let lock = Lock()
    private var fd: Int32 = -1

    public struct Response: Sendable {
        public var status: Int
        /// Header names in lower case.
        public var headers: [String: String]
        public var body: [UInt8]
    }

    /// `http://127.0.0.1:PORT` (a path after the port is ignored).
    public convenience init(url: String) throws {
        guard url.hasPrefix("http://") else { throw HTTPClientError("\(url): only http:// URLs on loopback") }
        let rest = url.dropFirst("http://".count).split(separator: "/", maxSplits: 1).first.map(String.init) ?? ""
        guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]) else {
            throw HTTPClientError("\(url): give the port, e.g. http://127.0.0.1:8080")
        }
        try self.init(host: String(rest[..<colon]), port: port)
    }

    public init(host: String, port: UInt16) throws {
        let h = host == "localhost" ? "127.0.0.1" : host
        var a = in_addr()
        guard inet_pton(AF_INET, h, &a) == 1, UInt32(bigEndian: a.s_addr) >> 24 == 127 else {
            throw HTTPClientError("\(host) is not a loopback IPv4 address (127.0.0.0/8)")
        }
        self.host = h
        self.port = port
    }

    deinit { if fd >= 0 { close(fd) } }

    public func post(path: String, body: [UInt8]) throws -> (status: Int, body: [UInt8]) {
        let r = try request("POST", path, headers: [("Content-Type", "application/json")], body: body)
        return (r.status, r.body)
    }

    /// Sends one request and reads its response. A keep-alive connection the server closed meanwhile is
    /// reopened once (only when no byte of a response had arrived).
    public func request(_ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [])
        throws -> Response
    {
        try lock.withLock {
            var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nContent-Length: \(body.count)\r\n"
            for (k, v) in headers { head += "\(k): \(v)\r\n" }
            head += "\r\n"
            let bytes = Array(head.utf8) + body
            let reused = fd >= 0
            do {
                return try exchange(bytes)
            } catch let e as Stale where reused {
                _ = e
                disconnect()
                return try exchange(bytes)
            } catch is Stale {
                throw HTTPClientError("the server closed the connection without answering")
            }
        }
    }

    private struct Stale: Error {}

    private func disconnect() {
        if fd >= 0 { close(fd) }
        fd = -1
    }

    private func connectIfNeeded() throws {
        guard fd < 0 else { return }
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard s >= 0 else { throw HTTPClientError("socket: \(String(cString: strerror(errno)))") }
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var one: Int32 = 1
        setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &addr.sin_addr)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0 else {
            let reason = String(cString: strerror(errno))
            close(s)
            throw HTTPClientError("cannot connect to \(host):\(port): \(reason)")
        }
        fd = s
    }

    private func exchange(_ request: [UInt8]) throws -> Response {
        try connectIfNeeded()
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                if errno == EPIPE || errno == ECONNRESET { throw Stale() }
                let reason = String(cString: strerror(errno))
                disconnect()
                throw HTTPClientError("send: \(reason)")
            }
            sent += n
        }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        func fill() throws -> Bool {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { return try fill() }
            if n < 0 {
                let reason = errno == EAGAIN ? "timed out" : String(cString: strerror(errno))
                if buffer.isEmpty, errno == ECONNRESET { throw Stale() }
                disconnect()
                throw HTTPClientError("recv: \(reason)")
            }
            if n == 0 { return false }
            buffer += chunk[0..<n]
            return true
        }
        let separator: [UInt8] = [13, 10, 13, 10]
        var headerEnd: Int?
        while headerEnd == nil {
            guard try fill() else {
                if buffer.isEmpty { throw Stale() }
                disconnect()
                throw HTTPClientError("the connection closed inside the response headers")
            }
            if buffer.count >= 4 {
                headerEnd = (0...(buffer.count - 4)).first { buffer[$0..<($0 + 4)].elementsEqual(separator) }
            }
        }
        let headText = String(decoding: buffer[0..<headerEnd!], as: UTF8.self)
        var lines = headText.pieces(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else {
            disconnect()
            throw HTTPClientError("not an HTTP response: \(headText.prefix(80))")
        }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingSpaces()
        }
        let length = headers["content-length"].flatMap(Int.init) ?? 0
        let bodyStart = headerEnd! + 4
        while buffer.count - bodyStart < length {
            guard try fill() else {
                disconnect()
                throw HTTPClientError("the connection closed inside the response body")
            }
        }
        let body = Array(buffer[bodyStart..<(bodyStart + length)])
        if headers["connection"]?.lowercased() == "close" { disconnect() }
        return Response(status: status, headers: headers, body: body)
    }
}
