import ExchangeServer
import Foundation
import JSON
import Testing
import TestSupport

/// Requests the server refuses on their head alone, before any body byte is read, seen from raw loopback sockets:
/// each answer is in Google's error shape and closes the connection.
@Suite struct RequestHeadRefusalTests {
    typealias Answer = (status: Int, headers: [String: String], json: JSONValue?)

    /// Sends `head` (and nothing after it) on a fresh connection and returns everything the server sent until it
    /// closed (nil if it had not closed within 10 s).
    func raw(_ f: ServerFixture, _ head: String) throws -> [UInt8]? {
        let c = try SlowClientTests.RawSocket(port: f.server.port)
        c.send(head)
        return c.untilClosed(within: 10)
    }

    func answer(_ f: ServerFixture, _ head: String) throws -> Answer? { SlowClientTests.response(try raw(f, head)) }

    func expectRefused(
        _ r: Answer?, _ code: Int, _ status: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        SlowClientTests.expectGoogleError(r, code, status, sourceLocation: sourceLocation)
        #expect(r?.headers["connection"]?.lowercased() == "close", sourceLocation: sourceLocation)
    }

    static let events = "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    static let bearer = "Authorization: Bearer \(ServerFixture.eventsToken)\r\n"

    /// Reproduction: 30 connections each announcing `Content-Length: 8388608` to `/v1/events` without a token
    /// made the server keep ~450 MB of bodies, since the token was checked only once the body had arrived. A
    /// head without the token, or with a wrong one, is now answered 401 before any body is sent, and a client
    /// that asks first (`Expect: 100-continue`) is never told to go on.
    @Test func eventsWithoutTheTokenAre401OnTheHeadAlone() throws {
        let f = try ServerFixture()
        let length = "Content-Length: 60000\r\n"
        for credential in ["", "Authorization: Bearer wrong-token\r\n", "Authorization: Basic x\r\n"] {
            let r = try answer(f, Self.events + credential + length + "\r\n")
            expectRefused(r, 401, "UNAUTHENTICATED")
            #expect(r?.headers["www-authenticate"] == "Bearer")
        }
        let asked = try raw(f, Self.events + "Expect: 100-continue\r\n" + length + "\r\n")
        let text = String(decoding: asked ?? [], as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 401 "), "\(text)")
        #expect(!text.contains("100 Continue"), "\(text)")
        // With the token, the client is told to go on.
        let c = try SlowClientTests.RawSocket(port: f.server.port)
        c.send(Self.events + Self.bearer + "Expect: 100-continue\r\nContent-Length: 1\r\n\r\n")
        var p = pollfd(fd: c.fd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&p, 1, 10_000) == 1)
        var chunk = [UInt8](repeating: 0, count: 256)
        let n = recv(c.fd, &chunk, chunk.count, 0)
        #expect(String(decoding: chunk[0..<max(0, n)], as: UTF8.self).hasPrefix("HTTP/1.1 100 Continue"))
    }

    /// Reproduction: the events body limit (8 MiB by default) applied to every request on `/v1/events`, so a
    /// `PUT` or `GET` there, or a `POST` with the intake off (`--no-events`), had its body kept up to that limit,
    /// with no credentials, before its 404. Each is now answered 404 on its head, before any body byte is sent;
    /// only a `POST` with the token is told to go on with a body over the exchange's limit.
    @Test func onlyAnAuthenticatedEventsPostMayHaveTheEventsBodyLimit() throws {
        let f = try ServerFixture(eventsBodyLimit: 8 * 1024 * 1024)
        let length = "Content-Length: 1000000\r\n"
        for method in ["PUT", "GET", "DELETE", "PATCH"] {
            let head = "\(method) /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n" + Self.bearer + length + "\r\n"
            expectRefused(try answer(f, head), 404, "NOT_FOUND")
        }
        expectRefused(try answer(f, Self.events + length + "\r\n"), 401, "UNAUTHENTICATED")
        // With the token, a body over the exchange's limit is asked for (it is within the events limit).
        let c = try SlowClientTests.RawSocket(port: f.server.port)
        c.send(Self.events + Self.bearer + "Expect: 100-continue\r\n" + length + "\r\n")
        var p = pollfd(fd: c.fd, events: Int16(POLLIN), revents: 0)
        #expect(poll(&p, 1, 10_000) == 1)
        var chunk = [UInt8](repeating: 0, count: 256)
        let n = recv(c.fd, &chunk, chunk.count, 0)
        #expect(String(decoding: chunk[0..<max(0, n)], as: UTF8.self).hasPrefix("HTTP/1.1 100 Continue"))

        let off = try ServerFixture(eventsBodyLimit: 8 * 1024 * 1024, events: false)
        for credential in [Self.bearer, ""] {
            expectRefused(try answer(off, Self.events + credential + length + "\r\n"), 404, "NOT_FOUND")
        }
        // A chunked body elsewhere stops being kept at the exchange's limit.
        let chunked = try SlowClientTests.RawSocket(port: off.server.port)
        let piece = String(repeating: "x", count: 0x8000)
        chunked.send(
            "POST /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                + String(repeating: "8000\r\n\(piece)\r\n", count: 3) + "0\r\n\r\n")
        expectRefused(SlowClientTests.response(chunked.untilClosed(within: 10)), 413, "INVALID_ARGUMENT")
    }

    /// Reproduction: `POST /v1/events HTTP/1.0` with `Transfer-Encoding: chunked` was decoded and served (200); RFC
    /// 9112 §6.1 calls that faulty framing (a proxy in front may frame an HTTP/1.0 message by the close). It is 400.
    @Test func anHTTP10RequestWithTransferEncodingIs400() throws {
        let f = try ServerFixture()
        let line = "{\"t\":\(f.clock.now().microseconds),\"i\":\"fid-1\",\"k\":\"success\"}\n"
        let chunked = String(line.utf8.count, radix: 16) + "\r\n" + line + "\r\n0\r\n\r\n"
        let head = "POST /v1/events HTTP/1.0\r\nHost: 127.0.0.1\r\n" + Self.bearer + "Connection: close\r\n"
            + "Transfer-Encoding: chunked\r\n\r\n"
        expectRefused(try answer(f, head + chunked), 400, "INVALID_ARGUMENT")
        #expect(try f.counters.batches().isEmpty)
        // HTTP/1.1, the same request is served.
        let served = try answer(f, head.replacingOccurrences(of: "HTTP/1.0", with: "HTTP/1.1") + chunked)
        #expect(served?.status == 200, "\(String(describing: served))")
    }

    /// Reproduction: a request libmicrohttpd answered itself after its head (a chunk size `zz`: 400) was logged
    /// with status 0, as was one that no one answered (the client went away mid-body). The first is now logged
    /// with the status libmicrohttpd sent and `"answeredBy":"libmicrohttpd"`, the second with no status and
    /// `"answeredBy":"none"`; the server's own answers are logged as before.
    @Test func theAccessLogTellsWhoAnsweredARequest() throws {
        let f = try ServerFixture()
        let head = Self.events + Self.bearer
        let answered = try raw(f, head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
        #expect(String(decoding: answered ?? [], as: UTF8.self).hasPrefix("HTTP/1.1 400 "))
        let first = f.log.waitFor(1)
        try #require(first.count == 1)
        #expect(first[0].status == 400 && first[0].answeredBy == .libmicrohttpd, "\(first[0].line)")
        let line = try JSONParser().parse(first[0].line)
        #expect(line["status"]?.numberValue?.int64 == 400 && line["answeredBy"]?.stringValue == "libmicrohttpd")

        let gone = try SlowClientTests.RawSocket(port: f.server.port)
        gone.send(head + "Content-Length: 100\r\n\r\n0123456789")
        // The head reached the handler (its body is on the way) before the client goes.
        let deadline = Date().addingTimeInterval(10)
        while f.server.requestsInFlight == 0, Date() < deadline { usleep(5_000) }
        #expect(f.server.requestsInFlight == 1)
        shutdown(gone.fd, Int32(SHUT_RDWR))
        let second = f.log.waitFor(2)
        try #require(second.count == 2)
        #expect(second[1].status == nil && second[1].answeredBy == AccessLogEntry.Answerer.none, "\(second[1].line)")
        let unanswered = try JSONParser().parse(second[1].line)
        #expect(unanswered["status"] == nil && unanswered["answeredBy"]?.stringValue == "none")

        #expect(try f.client.request("GET", "/healthz").status == 200)
        let third = f.log.waitFor(3)
        #expect(third.count == 3 && third[2].status == 200 && third[2].answeredBy == .server)
        #expect(!third[2].line.contains("answeredBy"))
    }

    /// Reproduction: a request with both `Content-Length: 5` and `Transfer-Encoding: chunked` was served
    /// (libmicrohttpd reads the chunks; a proxy in front may read the length, which smuggles a request).
    @Test func contentLengthWithTransferEncodingIs400() throws {
        let f = try ServerFixture()
        let head = Self.events + Self.bearer + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        expectRefused(try answer(f, head + "0\r\n\r\n"), 400, "INVALID_ARGUMENT")
    }

    /// Reproduction: `Content-Length : 0` (whitespace before the colon) reached the handler as a header named
    /// `Content-Length ` and a request whose first header line began with a space as ` Host`; an obs-fold
    /// continuation line was glued to the end of its header's name by libmicrohttpd (`X-A: a` + ` b c` became
    /// `X-Ab c: a`, `Content-Length: 2` + ` 0` became `Content-Length0: 2`). Each was served; each is now 400.
    @Test(arguments: [
        "Content-Length : 0\r\n", "Content-Length\t: 0\r\n", "X-A: a\r\n b c\r\n", "X-A: a\r\n\tb\tc\r\n",
        "Content-Length: 2\r\n 0\r\n", "Transfer-Encoding: gzip,\r\n chunked\r\n",
    ])
    func whitespaceBeforeAColonOrAFoldedLineIs400(header: String) throws {
        let f = try ServerFixture()
        expectRefused(
            try answer(f, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\(header)Connection: close\r\n\r\n"), 400,
            "INVALID_ARGUMENT")
    }

    @Test func aHeaderLineStartingWithWhitespaceIs400() throws {
        let f = try ServerFixture()
        expectRefused(
            try answer(f, "GET /healthz HTTP/1.1\r\n Host: 127.0.0.1\r\nConnection: close\r\n\r\n"), 400,
            "INVALID_ARGUMENT")
    }

    /// Reproduction: `Transfer-Encoding: gzip` got no answer at all (libmicrohttpd reads a body of unknown length
    /// until the connection closes). A transfer coding other than `chunked` is now 501.
    @Test(arguments: ["gzip", "gzip, chunked", "chunked, chunked", "identity"])
    func aTransferCodingOtherThanChunkedIs501(coding: String) throws {
        let f = try ServerFixture()
        expectRefused(
            try answer(f, Self.events + Self.bearer + "Transfer-Encoding: \(coding)\r\n\r\n"), 501, "UNIMPLEMENTED")
    }

    /// Reproduction: `GET /healthz%00/../x` answered 200: libmicrohttpd decodes `%00` to a NUL, where the path
    /// handed over ends. It is refused like an encoded slash; the server goes on serving.
    @Test(arguments: ["/healthz%00/../x", "/healthz%00", "/v1/jwks%00.json"])
    func anEncodedNULInThePathIs404(path: String) throws {
        let f = try ServerFixture()
        expectRefused(
            try answer(f, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), 404, "NOT_FOUND")
        #expect(try f.client.request("GET", "/healthz").status == 200)
    }

    /// Reproduction: `GET /healthz\0/../nope` (a raw NUL byte in the request target) answered 200: libmicrohttpd
    /// hands the target over as a C string, which ends at the NUL. Such a target is now 400 on the head; the
    /// server goes on serving, and a query or a space in a target is not mistaken for a NUL.
    @Test(arguments: ["/healthz\0/../x", "/healthz\0", "/v1/jwks\0.json?a=b", "/healthz?x=\0y", "\0/healthz"])
    func aRawNULInTheRequestTargetIs400(target: String) throws {
        let f = try ServerFixture()
        expectRefused(
            try answer(f, "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), 400,
            "INVALID_ARGUMENT")
        #expect(try f.client.request("GET", "/healthz?x=1").status == 200)
        // Two spaces before the version: libmicrohttpd keeps the first in the target (a 404), no NUL there.
        let spaced = try answer(f, "GET /healthz  HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(spaced?.status == 404, "\(String(describing: spaced))")
    }

    /// Reproduction: a `Content-Length` from 2^63 to 2^64-1 did not fit an `Int`, so the length check let it
    /// through and the server waited for the body. It is 413 like any length over the limit.
    @Test(arguments: ["9223372036854775807", "9223372036854775808", "18446744073709551615"])
    func aContentLengthPastIntIs413(length: String) throws {
        let f = try ServerFixture()
        let head = "POST \(f.appPath("generateAppAttestChallenge")) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        expectRefused(try answer(f, head + "Content-Length: \(length)\r\n\r\n"), 413, "INVALID_ARGUMENT")
    }
}
