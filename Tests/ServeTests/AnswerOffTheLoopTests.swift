import ExchangeServer
import Foundation
import Platform
import Testing
import TestSupport

/// Requests whose answer waits (`HTTPHandler.answerWaits`) are answered off libmicrohttpd's event loops, so a
/// worker thread waiting on one never holds the other connections it owns.
@Suite struct AnswerOffTheLoopTests {
    /// `/wait` waits (off the loop) until the gate opens; `/quick` answers at once on the loop.
    final class GateHandler: HTTPHandler, @unchecked Sendable {
        let gate = Condition()
        private var isOpen = false
        private var inside = 0
        private var ended = 0
        private var drainEnds = 0
        /// Whether the end of a stop's drain opens the gate, as a store abandoning its lock waits ends the calls.
        let opensWhenTheDrainEnds: Bool
        init(opensWhenTheDrainEnds: Bool = false) { self.opensWhenTheDrainEnds = opensWhenTheDrainEnds }
        var waiting: Int { gate.withLock { inside } }
        var finished: Int { gate.withLock { ended } }
        var drainEndings: Int { gate.withLock { drainEnds } }
        func drainEnded() {
            gate.withLock { drainEnds += 1 }
            if opensWhenTheDrainEnds { open() }
        }
        func open() {
            gate.withLock {
                isOpen = true
                gate.broadcast()
            }
        }
        func bodyLimit(method: String, path: String) -> Int { 1024 }
        func refusal(head: HTTPRequest) -> HTTPResponse? { nil }
        func answerWaits(method: String, path: String) -> Bool { path == "/wait" }
        func bodyTooLarge(limit: Int) -> HTTPResponse { .json(413, Array("{}".utf8)) }
        func respond(to request: HTTPRequest) -> HTTPResponse {
            if request.path == "/wait" {
                gate.withLock {
                    inside += 1
                    while !isOpen { _ = gate.wait(seconds: 1) }
                    ended += 1
                }
                return .json(200, Array("{\"answer\":\"waited\"}".utf8))
            }
            return .json(200, Array("{\"answer\":\"quick\"}".utf8))
        }
    }

    static func server(
        _ handler: GateHandler, drainSeconds: Double = 10, log: (@Sendable (AccessLogEntry) -> Void)? = nil
    ) throws -> HTTPServer {
        var limits = HTTPServerLimits()
        limits.threads = 1  // one event loop: every connection is on it
        limits.drainSeconds = drainSeconds
        return try HTTPServer(host: "127.0.0.1", port: 0, handler: handler, limits: limits, log: log)
    }

    final class Log: @unchecked Sendable {
        private let lock = Lock()
        private var all: [AccessLogEntry] = []
        func add(_ e: AccessLogEntry) { lock.withLock { all.append(e) } }
        var entries: [AccessLogEntry] { lock.withLock { all } }
    }

    /// Sends `path` on a connection of its own, on a thread of its own; the answer lands in `answers`.
    static func ask(_ path: String, port: UInt16, into answers: Answers) {
        detachThread {
            let result = Result { try LoopbackHTTPClient(host: "127.0.0.1", port: port).request("GET", path) }
            answers.add(result)
        }
    }

    final class Answers: @unchecked Sendable {
        private let lock = Lock()
        private var all: [Result<LoopbackHTTPClient.Response, any Error>] = []
        func add(_ r: Result<LoopbackHTTPClient.Response, any Error>) { lock.withLock { all.append(r) } }
        var list: [Result<LoopbackHTTPClient.Response, any Error>] { lock.withLock { all } }
    }

    /// Found by attacking the server (SIGTERM while the store held its write lock): the stop waited for every
    /// answer still being made, round after round of the store's busy timeout (19.5 s for a 10 s drain), and once
    /// stopped libmicrohttpd while an answer's thread was still inside its resume (a double free). Now an answer
    /// still being made when the drain ends is answered 503 and its connection resumed under the answer's lock; its
    /// thread, when its call ends, resumes nothing.
    @Test func aShutdownPastTheDrainAnswers503AndLeavesTheLateAnswerUnsent() throws {
        let handler = GateHandler()
        let server = try Self.server(handler, drainSeconds: 0.3)
        let waited = Answers()
        Self.ask("/wait", port: server.port, into: waited)
        #expect(TestSupport.eventually { handler.waiting == 1 })
        #expect(server.shutdown() == 1, "the request still waiting at the end of the drain")
        #expect(TestSupport.eventually { waited.list.count == 1 })
        let r = try #require(try waited.list.first?.get())
        #expect(r.status == 503 && r.headers["connection"]?.lowercased() == "close", "\(r.status) \(r.headers)")
        // The late answer is made after libmicrohttpd stopped: its thread resumes nothing.
        handler.open()
        #expect(TestSupport.eventually { handler.finished == 1 })
    }

    /// Found by attacking the server (SIGTERM while the store held its write lock, last stop): past the drain the
    /// stop still waited for the calls of the answers it had answered 503, each waiting out the store's busy
    /// timeout (answers at 10 s, exit at 19.5 s). Now the handler is told that the drain ended
    /// (`HTTPHandler.drainEnded`; `serve` abandons the stores' lock waits then), once, and the late call ends
    /// before the stop returns.
    @Test func theEndOfTheDrainEndsTheCallsStillWaiting() throws {
        let handler = GateHandler(opensWhenTheDrainEnds: true)
        let server = try Self.server(handler, drainSeconds: 0.3)
        let waited = Answers()
        Self.ask("/wait", port: server.port, into: waited)
        #expect(TestSupport.eventually { handler.waiting == 1 })
        #expect(handler.drainEndings == 0)
        #expect(server.shutdown() == 1)
        #expect(handler.drainEndings == 1)
        #expect(TestSupport.eventually { handler.finished == 1 }, "the late call still waits")
        #expect(TestSupport.eventually { waited.list.count == 1 })
        let r = try #require(try waited.list.first?.get())
        #expect(r.status == 503)
    }

    /// A stop with nothing left to answer at the end of its drain tells the handler nothing: its stores keep
    /// waiting as usual (a server stopped in-process, its store used on).
    @Test func aStopWithNothingLeftLeavesTheWaitsAlone() throws {
        let handler = GateHandler(opensWhenTheDrainEnds: true)
        let server = try Self.server(handler, drainSeconds: 0.3)
        let quick = try LoopbackHTTPClient(host: "127.0.0.1", port: server.port).request("GET", "/quick")
        #expect(quick.status == 200)
        #expect(server.shutdown() == 0)
        #expect(handler.drainEndings == 0)
    }

    /// Found by attacking the server: a client that closed its connection right after sending a consume had its
    /// request logged without a status (`"answeredBy":"none"`) although the consume committed and its answer was
    /// made; the answer's status is logged, as when a sent answer goes unread.
    @Test func anAnswerMadeForAClientThatLeftIsLoggedWithItsStatus() throws {
        let handler = GateHandler()
        let log = Log()
        let server = try Self.server(handler, log: { log.add($0) })
        defer { server.shutdown() }
        do {
            let gone = try SlowClientTests.RawSocket(port: server.port)
            #expect(gone.send("GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
            #expect(TestSupport.eventually { handler.waiting == 1 })
        }  // closed
        handler.open()
        #expect(TestSupport.eventually { log.entries.contains { $0.path == "/wait" } })
        let entry = try #require(log.entries.first { $0.path == "/wait" })
        #expect(entry.status == 200 && entry.answeredBy == .server, "\(entry)")
    }

    final class Stopped: @unchecked Sendable {
        private let lock = Lock()
        private var value: Int?
        var left: Int? {
            get { lock.withLock { value } }
            set { lock.withLock { value = newValue } }
        }
    }

    /// Reproduction: on one worker, a request waiting in its handler (a group commit's sync) held every other
    /// connection of that worker; with 8 clients two workers owned all 8 connections and the group commits held
    /// about two writes each. Now all 8 waiting requests are in the handler at once, and a quick request on the
    /// same loop is answered while they wait.
    @Test func waitingRequestsHoldNoOtherConnection() throws {
        let handler = GateHandler()
        let server = try Self.server(handler)
        defer { server.shutdown() }
        let waited = Answers()
        for _ in 0..<8 { Self.ask("/wait", port: server.port, into: waited) }
        #expect(TestSupport.eventually { handler.waiting == 8 }, "waiting in the handler: \(handler.waiting) of 8")
        let quick = try LoopbackHTTPClient(host: "127.0.0.1", port: server.port).request("GET", "/quick")
        #expect(quick.status == 200 && String(decoding: quick.body, as: UTF8.self).contains("quick"))
        #expect(waited.list.isEmpty, "a waiting request was answered before its gate opened")
        handler.open()
        #expect(TestSupport.eventually { waited.list.count == 8 })
        for answer in waited.list {
            let r = try answer.get()
            #expect(r.status == 200 && String(decoding: r.body, as: UTF8.self).contains("waited"))
        }
    }

    /// A shutdown while an answer is being made off the loop waits for it (libmicrohttpd must not stop with a
    /// suspended connection), and the answer still reaches its client, closing the connection.
    @Test func aShutdownWaitsForTheAnswersOffTheLoop() throws {
        let handler = GateHandler()
        let server = try Self.server(handler)
        let waited = Answers()
        Self.ask("/wait", port: server.port, into: waited)
        #expect(TestSupport.eventually { handler.waiting == 1 })
        let stopped = Stopped()
        detachThread { stopped.left = server.shutdown() }
        // Draining: the listener is closed, so a new connection is refused.
        #expect(
            TestSupport.eventually {
                (try? LoopbackHTTPClient(host: "127.0.0.1", port: server.port).request("GET", "/quick")) == nil
            })
        #expect(server.requestsInFlight == 1)
        #expect(stopped.left == nil, "the shutdown ended while an answer was still being made")
        handler.open()
        #expect(TestSupport.eventually { stopped.left != nil && waited.list.count == 1 })
        let r = try #require(try waited.list.first?.get())
        #expect(r.status == 200 && r.headers["connection"]?.lowercased() == "close", "\(r.headers)")
        #expect(stopped.left == 0, "requests left unfinished by the shutdown")
    }
}
