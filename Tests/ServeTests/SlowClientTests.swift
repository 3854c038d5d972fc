import ExchangeServer
import Foundation
import JSON
import Testing
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `rollout serve` against slow and malformed clients ("Every door", items 7 and 10), through the built binary
/// and raw loopback sockets. One test at a time: several check wall-clock bounds (a connection closed within
/// seconds of its deadline), which a sibling test's 300 trickling connections on the same cores would stretch.
@Suite(.serialized) struct SlowClientTests {
    static let app = "1:424243:ios:slow"

    /// A store with one app, and `rollout serve ARGUMENTS` on it.
    final class Server {
        let directory: URL
        let serve: ServeProcess
        var port: UInt16 { serve.port }

        init(_ arguments: [String] = []) throws {
            let rollout = try TestSupport.rolloutBinary()
            directory = try TestSupport.temporaryDirectory("rollout-serve-slow")
            let store = directory.appendingPathComponent("store.db").path
            try ServeProcess.prepareStore(
                rollout, store: store, app: SlowClientTests.app, projectNumber: "424243", projectId: "serve-slow",
                team: "ABCDE12345", bundle: "com.example.slow")
            serve = try ServeProcess.start(rollout, ["--store", store, "--no-events"] + arguments)
        }

        deinit {
            // SIGTERM, then SIGKILL after a grace: a SIGTERM alone can be blocked in a child spawned from a worker.
            TestSupport.stop(serve.process)
            try? FileManager.default.removeItem(at: directory)
        }

        /// A fresh connection's `GET /healthz`: its status (nil if it failed) and how long it took.
        func healthz(timeout: Int) -> (status: Int?, seconds: Double) {
            let start = Date()
            guard let client = try? LoopbackHTTPClient(host: "127.0.0.1", port: port) else { return (nil, 0) }
            client.timeoutSeconds = timeout
            guard let r = try? client.request("GET", "/healthz") else { return (nil, Date().timeIntervalSince(start)) }
            return (r.status, Date().timeIntervalSince(start))
        }
    }

    /// A raw TCP connection to 127.0.0.1:`port`, from the loopback address `source` (127.0.0.1 unless given).
    final class RawSocket {
        let fd: Int32

        init(port: UInt16, from source: String? = nil) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            func address(_ text: String, _ port: UInt16) -> sockaddr_in {
                var a = sockaddr_in()
                a.sin_family = sa_family_t(AF_INET)
                a.sin_port = port.bigEndian
                inet_pton(AF_INET, text, &a.sin_addr)
                return a
            }
            func call(_ a: sockaddr_in, _ f: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
                withUnsafePointer(to: a) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        f(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
            if let source, call(address(source, 0), { bind($0, $1, $2) }) != 0 {
                throw TestSupport.Failure("bind \(source): \(String(cString: strerror(errno)))")
            }
            guard call(address("127.0.0.1", port), { connect($0, $1, $2) }) == 0 else {
                throw TestSupport.Failure("connect: \(String(cString: strerror(errno)))")
            }
        }
        deinit { close(fd) }

        /// False when the peer is gone (EPIPE, reset).
        @discardableResult
        func send(_ text: String) -> Bool { send(Array(text.utf8)) }

        @discardableResult
        func send(_ bytes: [UInt8]) -> Bool {
            bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
        }

        /// The status of the answer to `GET /healthz` on this connection, kept open (nil: none within `seconds`).
        func healthz(within seconds: Double) -> Int? {
            send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = Date().addingTimeInterval(seconds)
            while deadline.timeIntervalSinceNow > 0 {
                if let r = SlowClientTests.response(received),
                    r.json != nil || r.headers["content-length"] == "0"
                {
                    return r.status
                }
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, Int32(deadline.timeIntervalSinceNow * 1000) + 1) > 0 else { continue }
                let n = recv(fd, &chunk, chunk.count, 0)
                guard n > 0 else { return nil }
                received += chunk[0..<n]
            }
            return nil
        }

        /// Everything the peer sends until it closes, or nil if it has not closed within `seconds`.
        func untilClosed(within seconds: Double) -> [UInt8]? {
            var received: [UInt8] = []
            let deadline = Date().addingTimeInterval(seconds)
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                let left = deadline.timeIntervalSinceNow
                if left <= 0 { return nil }
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, Int32(left * 1000) + 1) > 0 else { continue }
                let n = recv(fd, &chunk, chunk.count, 0)
                if n == 0 || (n < 0 && errno == ECONNRESET) { return received }
                if n > 0 { received += chunk[0..<n] }
            }
        }

        /// Sends `line` every `interval` seconds until the peer closes; how long that took, or nil if it had not
        /// closed within `seconds`.
        func trickle(_ line: String, every interval: Double, within seconds: Double) -> Double? {
            let start = Date()
            while Date().timeIntervalSince(start) < seconds {
                if untilClosed(within: interval) != nil || !send(line) { return Date().timeIntervalSince(start) }
            }
            return nil
        }
    }

    /// The first response in `bytes`: status, lower-case headers, body parsed as JSON.
    static func response(_ bytes: [UInt8]?) -> (status: Int, headers: [String: String], json: JSONValue?)? {
        guard let bytes,
            let end = (0..<max(0, bytes.count - 3)).first(where: { bytes[$0..<$0 + 4].elementsEqual([13, 10, 13, 10]) })
        else { return nil }
        var lines = String(decoding: bytes[0..<end], as: UTF8.self).components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        let length = headers["content-length"].flatMap(Int.init) ?? 0
        let body = Array(bytes[(end + 4)...].prefix(length))
        return (status, headers, try? JSONParser().parse(body))
    }

    /// Google's error shape with `code` and `status`, as JSON with its content type.
    static func expectGoogleError(
        _ r: (status: Int, headers: [String: String], json: JSONValue?)?, _ code: Int, _ status: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(r?.status == code, "\(String(describing: r))", sourceLocation: sourceLocation)
        #expect(r?.headers["content-type"] == "application/json; charset=UTF-8", sourceLocation: sourceLocation)
        #expect(r?.json?["error"]?["code"]?.numberValue?.int64 == Int64(code), sourceLocation: sourceLocation)
        #expect(r?.json?["error"]?["status"]?.stringValue == status, sourceLocation: sourceLocation)
        #expect(r?.json?["error"]?["message"]?.stringValue?.isEmpty == false, sourceLocation: sourceLocation)
    }

    /// The slow-loris client: opens COUNT connections that each send a request line and then one header line
    /// every INTERVAL seconds, never the blank line that ends the head. A connection the server closes is opened
    /// again at once, so COUNT stay open. Prints `open COUNT` once they are, `tick N` after each round of header
    /// lines (N: how many the server has closed so far), and `closed N` when its standard input ends.
    static let slowLoris = #"""
        import select, socket, sys, time
        port, count, interval = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
        def opened():
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setblocking(False)
            s.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            return s
        socks = [opened() for _ in range(count)]
        print("open", len(socks), flush=True)
        closed = 0
        due = time.monotonic() + interval
        while True:
            ready = select.select([sys.stdin] + socks, [], [], max(0, due - time.monotonic()))[0]
            if sys.stdin in ready:
                break
            for s in ready:
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                socks.remove(s)
                s.close()
                closed += 1
                socks.append(opened())
            if time.monotonic() >= due:
                due += interval
                for s in list(socks):
                    try:
                        s.send(b"X-Trickle: a\r\n")
                    except OSError:
                        socks.remove(s)
                        s.close()
                        closed += 1
                        socks.append(opened())
                print("tick", closed, flush=True)
        print("closed", closed, flush=True)
        """#

    /// Reproduction (item 7): 300 connections each sending a header line every few seconds held all 256
    /// connection slots of `rollout serve` with its default limits; the 15 s idle timeout never fired because
    /// every trickled byte reset it, and `/healthz` on a new connection did not answer for 40 s. Now heads that
    /// are not complete within 2 s are shut down once 3/4 of the slots are open, so honest requests on new
    /// connections keep being answered while 300 trickling connections stay open (the attacker reopens each one
    /// the server closes).
    @Test func honestRequestsAreServedWhile300ConnectionsTrickleTheirHeads() throws {
        let server = try Server()
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        python.arguments = ["-c", Self.slowLoris, "\(server.port)", "300", "1"]
        let input = Pipe()
        let output = Pipe()
        // Our ends close-on-exec: a process another test spawns meanwhile (the shared PostgreSQL server lives
        // until the test process exits) must not inherit the write end of the client's output, or its end would
        // never be seen (a CI run hung here).
        for handle in [input.fileHandleForReading, input.fileHandleForWriting, output.fileHandleForReading,
            output.fileHandleForWriting]
        {
            TestSupport.keepPrivate(handle)
        }
        python.standardInput = input
        python.standardOutput = output
        try python.run()
        defer { TestSupport.stop(python) }
        let fd = output.fileHandleForReading.fileDescriptor
        /// What the client printed until `done` holds or `seconds` pass (it prints a line at start and at the end).
        func read(within seconds: Double, until done: (String) -> Bool) -> String {
            var text = ""
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = Date().addingTimeInterval(seconds)
            while !done(text), deadline.timeIntervalSinceNow > 0 {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, Int32(deadline.timeIntervalSinceNow * 1000) + 1) > 0 else { continue }
                let n = Glibc.read(fd, &chunk, chunk.count)
                if n <= 0 { break }
                text += String(decoding: chunk[0..<n], as: UTF8.self)
            }
            return text
        }
        let text = read(within: 60) { $0.contains("\n") }
        try #require(text.hasPrefix("open 300"), "slow client: \(text)")

        var answers: [(status: Int?, seconds: Double)] = []
        for _ in 0..<4 { answers.append(server.healthz(timeout: 10)) }
        #expect(answers.allSatisfy { $0.status == 200 }, "\(answers)")
        #expect(answers.allSatisfy { $0.seconds < 8 }, "\(answers)")

        // The server closes trickling connections (their reopened ones keep 300 open): wait, within a bound, for
        // the client's count to pass zero. The answers above can come before the first head's 2 s are up.
        func closedSoFar(_ text: Substring) -> Int {
            text.split(separator: "\n").last { $0.hasPrefix("tick ") }.flatMap { Int($0.dropFirst(5)) } ?? 0
        }
        var rest = ""
        let deadline = Date().addingTimeInterval(60)
        while closedSoFar(Substring(rest)) == 0, deadline.timeIntervalSinceNow > 0 {
            rest += read(within: deadline.timeIntervalSinceNow) { $0.hasSuffix("\n") }
        }
        try input.fileHandleForWriting.close()
        #expect(closedSoFar(Substring(rest)) > 0, "slow client: \(rest.suffix(200))")
    }

    /// Reproduction (item 7): a client that sends one header line every 0.2 s kept its connection open for as
    /// long as it liked, and one that sent a complete head with `Content-Length: 1000` and then one body byte
    /// every 0.2 s likewise: the idle timeout counts from the last byte. With `--header-timeout 1 --body-timeout 1`
    /// each is closed about a second in, and the server goes on serving.
    @Test func aTricklingHeadOrBodyIsClosedAtItsDeadline() throws {
        let server = try Server(["--header-timeout", "1", "--body-timeout", "1"])
        let head = try RawSocket(port: server.port)
        head.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        let headClosed = head.trickle("X-Trickle: a\r\n", every: 0.2, within: 8)
        #expect(headClosed.map { $0 < 5 } == true, "head closed after \(String(describing: headClosed)) s")

        let body = try RawSocket(port: server.port)
        body.send("POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
        let bodyClosed = body.trickle("a", every: 0.2, within: 8)
        #expect(bodyClosed.map { $0 < 5 } == true, "body closed after \(String(describing: bodyClosed)) s")

        #expect(server.healthz(timeout: 10).status == 200)
    }

    /// Reproduction: under pressure a body was judged by its average rate since its head, so a client that sent
    /// its head and 64 KB of a 65 KB body at once, then nothing, stayed over the 1 KiB/s floor for some 60 s and
    /// held its slot until the body deadline while honest clients waited in the listen queue. The rate is now the
    /// recent one: with every slot held by such bodies, an honest request on a new connection is served within
    /// seconds, long before the 60 s body deadline here (the idle timeout is longer still, so only the slow-body
    /// rule can free a slot).
    @Test func bodiesThatSendMostAtOnceThenStallGiveTheirSlotsBackUnderPressure() throws {
        let server = try Server(["--max-connections", "16", "--timeout", "300", "--body-timeout", "60"])
        let path = "/v1/projects/serve-slow/apps/\(Self.app):exchangeDebugToken"
        let head = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: 65000\r\n\r\n"
        let held = try (0..<16).map { _ in try RawSocket(port: server.port) }
        for c in held { #expect(c.send(head + String(repeating: " ", count: 64_000))) }
        let honest = server.healthz(timeout: 30)
        #expect(honest.status == 200, "\(honest)")
        #expect(honest.seconds < 25, "\(honest)")
    }

    /// Reproduction (item 7): one address could take every connection slot. With
    /// `--max-connections-per-address 4`, four keep-alive connections from 127.0.0.1 are served, a fifth from
    /// 127.0.0.1 is closed at once, and a connection from 127.0.0.2 is served.
    @Test func connectionsOverThePerAddressCapAreClosedAtOnce() throws {
        let server = try Server(["--max-connections-per-address", "4"])
        let held = try (0..<4).map { _ in try RawSocket(port: server.port) }
        // Answered, so accepted and counted, before the fifth connects.
        #expect(held.map { $0.healthz(within: 10) } == [200, 200, 200, 200])
        let fifth = try RawSocket(port: server.port)
        #expect(fifth.untilClosed(within: 5) == [])
        let other = try RawSocket(port: server.port, from: "127.0.0.2")
        #expect(other.healthz(within: 10) == 200)
    }

    /// Reproductions (item 10): `POST /v1/projects/P%2Fapps/APP:generateAppAttestChallenge` routed as
    /// `/v1/projects/P/apps/APP:...` (libmicrohttpd decodes the path before the handler sees it) and answered 200;
    /// two `Content-Length` headers (2 and 40) were accepted (libmicrohttpd reads the first); a 40 KB header got
    /// libmicrohttpd's HTML 431 and a 9 KB URL was served. Each now gets Google's error shape and a closed
    /// connection; the same path with a real `/` is still served.
    @Test func encodedSlashesConflictingLengthsAndLargeHeadsAreRefusedInGooglesShape() throws {
        let server = try Server()
        func exchange(_ request: String) throws -> (status: Int, headers: [String: String], json: JSONValue?)? {
            let c = try RawSocket(port: server.port)
            c.send(request)
            return Self.response(c.untilClosed(within: 10))
        }
        let method = "\(Self.app):generateAppAttestChallenge"
        func post(_ path: String, _ extra: String = "Content-Length: 2\r\n") -> String {
            "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\(extra)\r\n{}"
        }
        #expect(try exchange(post("/v1/projects/serve-slow/apps/\(method)"))?.status == 200)
        for encoded in ["%2F", "%2f"] {
            Self.expectGoogleError(
                try exchange(post("/v1/projects/serve-slow\(encoded)apps/\(method)")), 404, "NOT_FOUND")
        }
        let conflicting = try exchange(
            post("/v1/projects/serve-slow/apps/\(method)", "Content-Length: 2\r\nContent-Length: 40\r\n"))
        Self.expectGoogleError(conflicting, 400, "INVALID_ARGUMENT")
        #expect(conflicting?.headers["connection"]?.lowercased() == "close")
        let big = String(repeating: "a", count: 40_000)
        Self.expectGoogleError(
            try exchange("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: \(big)\r\n\r\n"), 431, "INVALID_ARGUMENT")
        let long = String(repeating: "a", count: 9_000)
        Self.expectGoogleError(
            try exchange("GET /healthz?x=\(long) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 414, "INVALID_ARGUMENT")
    }

    /// Reproduction (item 10): `GET /%C2%9B2J%E2%80%AE%7Fx` wrote U+009B (a CSI introducer on some terminals),
    /// U+202E (right-to-left override) and DEL raw into the JSON access log. They are now `\u009b`, `\u202e` and
    /// `\u007f`, and the line still parses back to the decoded path.
    @Test func theAccessLogEscapesControlsAndBidiOverrides() throws {
        let dir = try TestSupport.temporaryDirectory("rollout-serve-log")
        defer { try? FileManager.default.removeItem(at: dir) }
        let log = dir.appendingPathComponent("access.log").path
        let server = try Server(["--access-log", log])
        let c = try RawSocket(port: server.port)
        c.send("GET /%C2%9B2J%E2%80%AE%7Fx HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(Self.response(c.untilClosed(within: 10))?.status == 404)
        // The line is written after the answer is sent: wait for it (bounded).
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(10)
        while !bytes.contains(0x0A), Date() < deadline {
            bytes = (try? Array(Data(contentsOf: URL(fileURLWithPath: log)))) ?? []
            if !bytes.contains(0x0A) { _ = poll(nil, 0, 10) }
        }
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(!bytes.contains(0x7F) && !text.unicodeScalars.contains { $0.value >= 0x80 && $0.value < 0xA0 })
        #expect(!text.unicodeScalars.contains("\u{202E}"))
        #expect(text.contains(#"\u009b2J\u202e\u007fx"#), "\(text)")
        let line = try JSONParser().parse(String(text.split(separator: "\n")[0]))
        #expect(line["path"]?.stringValue == "/\u{9B}2J\u{202E}\u{7F}x")
    }
}
