import Platform

#if canImport(Glibc)
    import Glibc
#endif

/// The deadlines of every open connection, enforced by one thread that shuts the late ones down.
///
/// libmicrohttpd's own timeout (`MHD_OPTION_CONNECTION_TIMEOUT`) measures idleness: every byte received resets
/// it, so a client that sends one header byte every few seconds holds its connection (and one of the
/// `connectionLimit` slots) for ever; 300 such clients took every slot and `/healthz` stopped answering. The
/// handler cannot help either, because libmicrohttpd calls it only once the headers are complete. So the server
/// tells this watch what each connection is waiting for, from libmicrohttpd's callbacks:
///
/// - `MHD_OPTION_NOTIFY_CONNECTION` (accepted): the connection waits for a request **head** (request line and
///   headers), from now.
/// - `MHD_OPTION_URI_LOG_CALLBACK` (the request line is complete): it still waits for the head, now only for its
///   headers (noted for the pressure rule below; the head deadline still counts from the accept).
/// - the access handler's first call (the head is complete): it waits for the **body**, from now.
/// - the handler's answer: it is **answering**; no deadline here (the idle timeout covers a peer that stops
///   reading, and answers are small).
/// - `MHD_OPTION_NOTIFY_COMPLETED` (answer sent, keep-alive): it waits for the next head, from now.
/// - `MHD_CONNECTION_NOTIFY_CLOSED`: it is forgotten (before libmicrohttpd closes the socket, under the lock the
///   watch holds while it shuts sockets down, so a socket number is never reused under the watch).
///
/// Every `tick` the thread shuts down (`shutdown(SHUT_RDWR)`, which libmicrohttpd's event loop then sees as the
/// peer's end and closes the connection on its own thread) every connection whose head took longer than
/// `head` seconds, or whose body took longer than `body` seconds, however steadily bytes trickled in. An idle
/// keep-alive connection counts as waiting for a head, so it is closed after `head` seconds too.
///
/// Under pressure (at least `pressureConnections` open, three quarters of the connection limit) the deadlines of
/// the waiting connections shrink: headers not complete `headersUnderPressure` seconds after their request line,
/// heads not complete `underPressure` seconds after the accept or the last answer (idle keep-alive connections
/// among them), and bodies older than `underPressure` seconds arriving slower than `minimumBodyRate` bytes per
/// second are shut down at once. A body's rate is its recent one: the bytes since a mark the watch moves every
/// `underPressure` seconds, over the time since that mark (between one and two of those periods), so a client
/// that sends most of its body at once and then stalls is slow within two periods, where its average since the
/// head would have stayed over the floor until the body deadline. An honest client writes its request line and headers together and its body right after,
/// so it never waits that long; a slow-loris client always does. This is what keeps honest clients served when
/// attackers share their address (every loopback client is 127.0.0.1), where a per-address cap cannot tell them
/// apart: the slots held by trickling connections come free within those seconds, and the connections queued in
/// the kernel's listen backlog (honest ones among them) are accepted in order. An honest connection therefore
/// waits at most about `headersUnderPressure` seconds for a slot against the classic slow loris (request line,
/// then a header line now and then), and about `underPressure` against one that trickles its request line.
///
/// `late(_:at:deadlines:)`, the rule itself, is a pure function with package access for ServeTests.
package final class ConnectionWatch: @unchecked Sendable {
    /// What a connection is waiting for.
    package enum Phase: Sendable { case head, body, answering }

    /// The deadlines, in seconds (see the type's discussion).
    package struct Deadlines: Sendable {
        package var head: Double
        package var body: Double
        package var underPressure: Double
        package var headersUnderPressure: Double
        package var pressureConnections: Int
        package var minimumBodyRate: Double

        package init(
            head: Double, body: Double, underPressure: Double, headersUnderPressure: Double, pressureConnections: Int,
            minimumBodyRate: Double
        ) {
            self.head = head
            self.body = body
            self.underPressure = underPressure
            self.headersUnderPressure = headersUnderPressure
            self.pressureConnections = pressureConnections
            self.minimumBodyRate = minimumBodyRate
        }
    }

    /// One open connection: its socket and what it has waited for since when (monotonic microseconds).
    final class Connection {
        let fd: Int32
        fileprivate(set) var phase = Phase.head
        fileprivate(set) var since: UInt64
        fileprivate(set) var bodyBytes = 0
        /// The body's rate is measured from `rateMark` (when, and `bodyBytes` then); `nextMark` replaces it once
        /// it is `underPressure` seconds old.
        fileprivate(set) var rateMark: RateMark
        fileprivate var nextMark: RateMark
        /// When the request line of the head it waits for was complete.
        fileprivate(set) var requestLineAt: UInt64?
        fileprivate var shutDown = false
        init(fd: Int32, since: UInt64) {
            self.fd = fd
            self.since = since
            rateMark = RateMark(at: since, bytes: 0)
            nextMark = rateMark
        }
    }

    /// A point a body's rate is measured from: a time (monotonic microseconds) and the body bytes received by then.
    package struct RateMark: Sendable, Equatable {
        package var at: UInt64
        package var bytes: Int
        package init(at: UInt64, bytes: Int) {
            self.at = at
            self.bytes = bytes
        }
    }

    let deadlines: Deadlines
    private let condition = Condition()
    private var open: [ObjectIdentifier: Connection] = [:]
    private var stopped = false

    /// Starts the thread that enforces `deadlines`, every `tick` seconds.
    init(deadlines: Deadlines, tick: Double = 0.1) {
        self.deadlines = deadlines
        detachThread { [self] in run(tick: tick) }
    }

    /// A connection was accepted: it waits for its first head.
    func opened(fd: Int32) -> Connection {
        let c = Connection(fd: fd, since: Self.now())
        condition.withLock { open[ObjectIdentifier(c)] = c }
        return c
    }

    /// libmicrohttpd is about to close the connection's socket.
    func closed(_ c: Connection) {
        _ = condition.withLock { open.removeValue(forKey: ObjectIdentifier(c)) }
    }

    /// The connection waits for something else from now on.
    func enter(_ phase: Phase, _ c: Connection) {
        let now = Self.now()
        condition.withLock {
            c.phase = phase
            c.since = now
            c.bodyBytes = 0
            c.rateMark = RateMark(at: now, bytes: 0)
            c.nextMark = c.rateMark
            c.requestLineAt = nil
        }
    }

    /// The request line of the head the connection waits for is complete.
    func requestLine(_ c: Connection) {
        let now = Self.now()
        condition.withLock { c.requestLineAt = now }
    }

    /// Body bytes arrived on the connection.
    func received(_ bytes: Int, _ c: Connection) {
        condition.withLock { c.bodyBytes += bytes }
    }

    /// Ends the thread (the connections are left to libmicrohttpd).
    func stop() {
        condition.withLock {
            stopped = true
            condition.signal()
        }
    }

    /// Which of `connections` (phase, since, body bytes, request line, the mark a body's rate is measured from)
    /// are past their deadline at `now`: their indices.
    package static func late(
        _ connections: [(phase: Phase, since: UInt64, bodyBytes: Int, requestLineAt: UInt64?, rateMark: RateMark)],
        at now: UInt64, deadlines d: Deadlines
    ) -> [Int] {
        var late: [Int] = []
        var waiting: [Int] = []
        for (i, c) in connections.enumerated() {
            let age = Double(now &- c.since) / 1e6
            switch c.phase {
            case .head:
                if age > d.head {
                    late.append(i)
                } else if age > d.underPressure
                    || c.requestLineAt.map({ Double(now &- $0) / 1e6 > d.headersUnderPressure }) == true
                {
                    waiting.append(i)
                }
            case .body:
                if age > d.body {
                    late.append(i)
                } else if age > d.underPressure {
                    let span = max(1e-3, Double(now &- c.rateMark.at) / 1e6)
                    if Double(c.bodyBytes - c.rateMark.bytes) / span < d.minimumBodyRate { waiting.append(i) }
                }
            case .answering: break
            }
        }
        return connections.count >= d.pressureConnections ? late + waiting : late
    }

    /// The monotonic clock in microseconds: the watch's times and the access log's durations.
    static func now() -> UInt64 { UInt64(Deadline.now.nanoseconds / 1000) }

    private func run(tick: Double) {
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            _ = condition.wait(seconds: tick)
            if stopped { return }
            let all = Array(open.values)
            let now = Self.now()
            let period = UInt64(deadlines.underPressure * 1e6)
            for c in all where c.phase == .body && now &- c.nextMark.at >= period {
                c.rateMark = c.nextMark
                c.nextMark = RateMark(at: now, bytes: c.bodyBytes)
            }
            for i in Self.late(
                all.map { ($0.phase, $0.since, $0.bodyBytes, $0.requestLineAt, $0.rateMark) }, at: now,
                deadlines: deadlines)
            {
                let c = all[i]
                if c.shutDown { continue }
                c.shutDown = true
                shutdown(c.fd, Int32(SHUT_RDWR))
            }
        }
    }
}
