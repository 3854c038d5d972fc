import CFido2
import Glibc

extension SecurityKeyDevice {
    /// A key relayed over a Unix socket (`$ROLLOUT_SECURITY_KEY=unix:PATH`): libfido2 does all of CTAPHID and
    /// CTAP2 as for a USB key, and only the HID reports travel over the socket, one `SOCK_SEQPACKET` datagram per
    /// report (out: the report id 0 and 64 bytes; in: 64 bytes). Whatever serves the socket is a key like any
    /// other: what it returns is verified by the write path, never trusted.
    public static func socket(_ path: String) -> SecurityKeyDevice {
        SecurityKeyDevice(name: "unix:" + path) { dev in
            var io = fido_dev_io_t(open: socketOpen, close: socketClose, read: socketRead, write: socketWrite)
            let rc = fido_dev_set_io_functions(dev, &io)
            guard rc == FIDO_OK else { return rc }
            return fido_dev_open(dev, path)
        }
    }
}

private func socketOpen(_ path: UnsafePointer<CChar>?) -> UnsafeMutableRawPointer? {
    guard let path else { return nil }
    let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(String(cString: path).utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
        close(fd)
        return nil
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (i, b) in bytes.enumerated() { raw[i] = b }
    }
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard connected == 0 else {
        close(fd)
        return nil
    }
    let handle = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    handle.initialize(to: fd)
    return UnsafeMutableRawPointer(handle)
}

private func socketClose(_ handle: UnsafeMutableRawPointer?) {
    guard let handle else { return }
    let fd = handle.assumingMemoryBound(to: Int32.self)
    close(fd.pointee)
    fd.deallocate()
}

private func socketRead(_ handle: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ n: Int, _ ms: Int32) -> Int32 {
    guard let handle, let buf else { return -1 }
    let fd = handle.assumingMemoryBound(to: Int32.self).pointee
    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    guard poll(&p, 1, ms < 0 ? -1 : ms) == 1 else { return -1 }
    let got = recv(fd, buf, n, 0)
    return got > 0 ? Int32(got) : -1
}

private func socketWrite(_ handle: UnsafeMutableRawPointer?, _ buf: UnsafePointer<UInt8>?, _ n: Int) -> Int32 {
    guard let handle, let buf else { return -1 }
    let fd = handle.assumingMemoryBound(to: Int32.self).pointee
    let sent = send(fd, buf, n, Int32(MSG_NOSIGNAL))
    return sent == n ? Int32(sent) : -1
}
