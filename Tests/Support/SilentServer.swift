import Foundation
import Glibc

/// A TCP listener on 127.0.0.1 that never answers: connections are accepted (and counted) and the requests sent
/// on them never read, so an HTTP client waits until its own timeout. A pull from it does not end.
public final class SilentServer: @unchecked Sendable {
    public let port: UInt16
    private let fd: Int32
    private let lock = NSLock()
    private var held: [Int32] = []

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSupport.Failure("socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw TestSupport.Failure("bind 127.0.0.1")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        self.fd = fd
        Thread.detachNewThread { [fd, weak self] in
            while true {
                let c = accept(fd, nil, nil)
                guard c >= 0, let self else { return }
                self.lock.withLock { self.held.append(c) }
            }
        }
    }

    /// Connections accepted so far.
    public var connections: Int { lock.withLock { held.count } }

    /// Waits (at most `seconds`) until a client has connected; whether one has.
    public func waitForConnection(seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while connections == 0, Date() < deadline { usleep(20_000) }
        return connections > 0
    }

    /// `http://127.0.0.1:PORT`.
    public var origin: String { "http://127.0.0.1:\(port)" }

    deinit {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        for c in held { close(c) }
    }
}
