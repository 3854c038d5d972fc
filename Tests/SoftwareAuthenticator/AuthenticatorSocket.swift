import CFido2
import Glibc
import Platform

/// A software authenticator served on a Unix socket, so that the built `rollout` binary reaches it through
/// libfido2 (`ROLLOUT_SECURITY_KEY=unix:PATH`, `SecurityKeyDevice.socket`): this side speaks CTAPHID framing over
/// one `SOCK_SEQPACKET` datagram per HID report (in: report id and 64 bytes; out: 64 bytes) and hands whole
/// messages to the authenticator, as the transport hooks do in process.
public final class AuthenticatorSocket: @unchecked Sendable {
    public let path: String
    public let authenticator: SoftwareAuthenticator
    private let listener: Int32
    private let lock = Lock()
    private var hook: (@Sendable () -> Void)?
    private var thread: pthread_t?

    /// Runs `body` once, on the next getAssertion, before the key answers (while the user "touches" it).
    public func beforeNextAssertion(_ body: @escaping @Sendable () -> Void) { lock.withLock { hook = body } }

    public init(path: String, authenticator: SoftwareAuthenticator = SoftwareAuthenticator()) throws {
        self.path = path
        self.authenticator = authenticator
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SocketError("socket") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { throw SocketError("path too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        unlink(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 4) == 0 else {
            close(fd)
            throw SocketError("bind \(path)")
        }
        listener = fd
        let box = Unmanaged.passRetained(self).toOpaque()
        var t = pthread_t()
        guard pthread_create(&t, nil, { raw in
            let me = Unmanaged<AuthenticatorSocket>.fromOpaque(raw!).takeRetainedValue()
            me.serve()
            return nil
        }, box) == 0 else {
            Unmanaged<AuthenticatorSocket>.fromOpaque(box).release()
            close(fd)
            throw SocketError("thread")
        }
        thread = t
    }

    /// Stops serving (the thread ends when the listener closes) and removes the socket file.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        if let thread { pthread_join(thread, nil) }
        thread = nil
        unlink(path)
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            handle(connection)
            close(connection)
        }
    }

    /// One client: messages until it closes.
    private func handle(_ fd: Int32) {
        while let (cid, command, data) = receiveMessage(fd) {
            if command == UInt8(CTAP_CMD_CBOR), data.first == 0x02, let run = lock.withLock({ () -> (@Sendable () -> Void)? in
                defer { hook = nil }
                return hook
            }) {
                run()
            }
            if authenticator.receive(command: command, data), let answer = authenticator.answer(command: command) {
                sendMessage(fd, cid: cid, command: command, answer)
            } else {
                sendMessage(fd, cid: cid, command: 0x3F, [0x01])  // CTAPHID_ERROR, invalid command
            }
        }
    }

    private func receiveReport(_ fd: Int32) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 65)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 65, 0) }
        guard n == 65 || n == 64 else { return nil }
        return n == 65 ? Array(buffer[1..<65]) : Array(buffer[0..<64])
    }

    private func receiveMessage(_ fd: Int32) -> (cid: [UInt8], command: UInt8, data: [UInt8])? {
        guard let first = receiveReport(fd), first[4] & 0x80 != 0 else { return nil }
        let cid = Array(first[0..<4])
        let length = Int(first[5]) << 8 | Int(first[6])
        var data = Array(first[7..<min(64, 7 + length)])
        while data.count < length {
            guard let next = receiveReport(fd), Array(next[0..<4]) == cid else { return nil }
            data += next[5..<min(64, 5 + length - data.count)]
        }
        return (cid, first[4] & 0x7F, data)
    }

    private func sendMessage(_ fd: Int32, cid: [UInt8], command: UInt8, _ data: [UInt8]) {
        var reports: [[UInt8]] = [cid + [command | 0x80, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data.prefix(57)]
        var rest = data.dropFirst(57)
        var sequence: UInt8 = 0
        while !rest.isEmpty {
            reports.append(cid + [sequence] + rest.prefix(59))
            rest = rest.dropFirst(59)
            sequence += 1
        }
        for var report in reports {
            report += [UInt8](repeating: 0, count: 64 - report.count)
            _ = report.withUnsafeBytes { send(fd, $0.baseAddress, 64, Int32(MSG_NOSIGNAL)) }
        }
    }
}

public struct SocketError: Error, CustomStringConvertible {
    public var description: String
    init(_ what: String) { description = "authenticator socket: \(what) failed (errno \(errno))" }
}
