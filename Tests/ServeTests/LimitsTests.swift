import ExchangeServer
import Foundation
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The connection limit and the idle timeout, seen from raw loopback sockets.
@Suite struct LimitsTests {
    /// A TCP connection to the server that sends nothing; `closedByPeer` waits (up to `seconds`) for EOF.
    final class RawConnection {
        let fd: Int32
        init(port: UInt16) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = port.bigEndian
            inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr)
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard rc == 0 else { throw TestSupport.Failure("connect failed") }
        }
        deinit { close(fd) }

        /// Sends `request` (a request line; nil: send nothing more) and returns the first bytes of the answer,
        /// or nil if none came within `seconds`.
        func answer(to request: String?, within seconds: Int) -> String? {
            if let request {
                let bytes = Array("\(request) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
                _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }
            var tv = timeval(tv_sec: seconds, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buffer, buffer.count, 0)
            return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
        }

        func closedByPeer(within seconds: Int) -> Bool {
            var tv = timeval(tv_sec: seconds, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var byte: UInt8 = 0
            let n = recv(fd, &byte, 1, 0)
            return n == 0 || (n < 0 && errno == ECONNRESET)
        }
    }

    @Test func connectionsOverTheLimitWaitUntilOneCloses() throws {
        var limits = HTTPServerLimits()
        limits.connectionLimit = 2
        limits.threads = 1
        let f = try ServerFixture(limits: limits)
        var a: RawConnection? = try RawConnection(port: f.server.port)
        let b = try RawConnection(port: f.server.port)
        #expect(a!.answer(to: "GET /healthz", within: 10)?.hasPrefix("HTTP/1.1 200") == true)
        #expect(b.answer(to: "GET /healthz", within: 10)?.hasPrefix("HTTP/1.1 200") == true)
        // A third connection is not served while two are open (libmicrohttpd stops accepting at the limit) ...
        let c = try RawConnection(port: f.server.port)
        #expect(c.answer(to: "GET /healthz", within: 1) == nil)
        // ... and is served as soon as one closes.
        a = nil
        #expect(c.answer(to: nil, within: 10)?.hasPrefix("HTTP/1.1 200") == true)
    }

    @Test func anIdleConnectionIsClosedAfterTheTimeout() throws {
        var limits = HTTPServerLimits()
        limits.connectionTimeoutSeconds = 1
        let f = try ServerFixture(limits: limits)
        let idle = try RawConnection(port: f.server.port)
        #expect(idle.closedByPeer(within: 15))
        // The server goes on serving.
        #expect(try f.client.request("GET", "/healthz").status == 200)
    }
}
