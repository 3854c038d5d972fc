import CCurl
import Glibc
import Platform
import Timekeeping

/// One HTTP request as the Remote Config client sends it.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    /// The whole exchange (connect, send, wait, receive) must finish within this time.
    public var timeout: Instant.Duration
    /// Once cancelled, the exchange is abandoned where it is (a `TransportError` with `cancelled`).
    public var cancellation: Cancellation?
    /// The most this answer may hold, when less than the transport's own limit (what is left of a limit on
    /// several answers together); refused as it arrives past it.
    public var answerLimit: Int?

    public init(
        method: String, url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Instant.Duration
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// An answer: status, headers (names lower-cased), body (already decompressed).
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// Why no answer arrived. `mayHaveArrived` tells whether the server may have received (and acted on) the request:
/// a publish whose answer was lost must be checked before it is sent again.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    /// `untrusted`: the TLS check of the server failed (certificate, host name, CA bundle): nothing was sent, and
    /// sending again cannot help.
    /// `invalidRequest`: the request itself cannot be sent as asked (a header value with CR, LF or NUL): nothing was
    /// sent, and sending again cannot help.
    public enum Kind: Sendable { case timedOut, connectionLost, cannotConnect, untrusted, invalidRequest, other }
    public var kind: Kind
    public var message: String
    /// How an answer larger than the limit was seen: its length as declared, its bytes as received, or its body
    /// once inflated.
    public enum Oversize: String, Sendable {
        case asDeclared = "as declared", asReceived = "as received", onceInflated = "once inflated"
    }
    /// The answer was larger than the limit (refused, its body not kept): a bad answer, not a lost one.
    public var oversize: Oversize?
    public var oversized: Bool { oversize != nil }
    /// The limit an oversized answer crossed, in bytes.
    public var limit: Int?

    /// A limit in words: whole MiB as `16 MiB`, else in bytes.
    public static func size(_ bytes: Int) -> String {
        bytes > 0 && bytes % (1 << 20) == 0 ? "\(bytes >> 20) MiB" : "\(bytes) bytes"
    }
    /// The request's `cancellation` ended the exchange (a stop, a deadline): nothing to retry.
    public var cancelled = false
    public var mayHaveArrived: Bool { kind == .timedOut || kind == .connectionLost || kind == .other }
    /// Whether trying again may succeed.
    public var isTransient: Bool { kind != .untrusted && kind != .invalidRequest }

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    /// `request` abandoned before or between its attempts: its cancellation was cancelled.
    public static func abandoned(_ request: HTTPRequest) -> TransportError {
        var e = TransportError(.other, "\(request.method) \(request.url): abandoned (cancelled)")
        e.cancelled = true
        return e
    }
}

/// Sends HTTP requests; the real one is `CurlTransport`.
public protocol HTTPTransport: Sendable {
    func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse
}

/// HTTP(S) through libcurl's easy interface: one handle per request, no redirects, only `http` and `https`, gzip
/// answers decoded (`Accept-Encoding: gzip` is sent).
///
/// TLS is always verified, peer and host name (libcurl's defaults, set explicitly so no build or environment
/// turns them off), against the system's CA store or `caFile`. Proxies come from libcurl's own variables
/// (`HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`). An answer larger than `bodyLimit` bytes (or the request's smaller
/// `answerLimit`), as received or once inflated, is refused as it arrives: neither a giant body nor a gzip bomb
/// grows the process past the limit.
public struct CurlTransport: HTTPTransport {
    private static let loaded: Int32 = rollout_curl_load()

    /// The largest answer the Firebase clients accept (16 MiB): a Remote Config template is at most 8 MiB of JSON
    /// here (and 1 MB at Firebase), and a page of `listVersions` or a token answer is far smaller. The telemetry
    /// sources make theirs with `SourceCaller.maximumAnswerBytes`.
    public static let defaultBodyLimit = 16 << 20

    /// A PEM bundle of the certificate authorities to trust instead of the system's (tests, private proxies).
    public var caFile: String?
    public var bodyLimit: Int

    public init(caFile: String? = nil, bodyLimit: Int = CurlTransport.defaultBodyLimit) {
        self.caFile = caFile
        self.bodyLimit = bodyLimit
    }

    /// The CA bundle named by the variables curl's own tools read: `CURL_CA_BUNDLE`, else `SSL_CERT_FILE`; nil
    /// (the system's store) when neither is set.
    public static func caFile(environment: [String: String]) -> String? {
        for name in ["CURL_CA_BUNDLE", "SSL_CERT_FILE"] {
            if let value = environment[name], !value.isEmpty { return value }
        }
        return nil
    }

    /// Collects the body and headers libcurl delivers.
    private final class Sink {
        enum Oversize { case received, inflated }
        let limit: Int
        var body: [UInt8] = []
        var headers: [String: String] = [:]
        var upload: [UInt8] = []
        var uploaded = 0
        var oversize: Oversize?
        var cancellation: Cancellation?
        var cancelled = false
        init(limit: Int) { self.limit = limit }
    }

    public func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
        guard Self.loaded == 0 else {
            throw TransportError(
                .cannotConnect,
                "libcurl (libcurl.so.4) could not be loaded or initialised (code \(Self.loaded)); install libcurl4-openssl-dev"
            )
        }
        // A CR or LF in a header would end its line and start headers of someone else's choosing (a token read
        // from a server); NUL would cut it. The value is not repeated: it may be a secret.
        for (name, value) in request.headers where (name + value).utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
            throw TransportError(.invalidRequest, "\(request.method) \(request.url): the \(name) header holds CR, LF or NUL; not sent")
        }
        guard let handle = rollout_curl_easy_init() else {
            throw TransportError(.cannotConnect, "libcurl could not create a handle")
        }
        defer { rollout_curl_cleanup(handle) }
        let limit = min(bodyLimit, request.answerLimit ?? .max)
        let sink = Sink(limit: limit)
        sink.cancellation = request.cancellation
        let context = Unmanaged.passUnretained(sink).toOpaque()
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for (name, value) in request.headers { list = rollout_curl_slist_append(list, "\(name): \(value)") }
        // No `Expect: 100-continue` round trip on PUT/POST bodies.
        list = rollout_curl_slist_append(list, "Expect:")
        defer { rollout_curl_slist_free_all(list) }
        // libcurl's own words for a failure (which certificate check failed, and why).
        let errorText = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorText.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        defer { errorText.deallocate() }

        var ok = true
        func check(_ code: CURLcode) { if code != CURLE_OK { ok = false } }
        check(rollout_curl_set_string(handle, CURLOPT_URL, request.url))
        check(rollout_curl_set_string(handle, CURLOPT_PROTOCOLS_STR, "http,https"))
        check(rollout_curl_set_long(handle, CURLOPT_FOLLOWLOCATION, 0))
        check(rollout_curl_set_long(handle, CURLOPT_NOSIGNAL, 1))
        check(rollout_curl_set_long(handle, CURLOPT_TIMEOUT_MS, max(1, Int(request.timeout.microseconds / 1000))))
        check(
            rollout_curl_set_long(
                handle, CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(min(request.timeout.microseconds, 10_000_000) / 1000))))
        check(rollout_curl_set_string(handle, CURLOPT_ACCEPT_ENCODING, "gzip"))
        check(rollout_curl_set_long(handle, CURLOPT_SSL_VERIFYPEER, 1))
        check(rollout_curl_set_long(handle, CURLOPT_SSL_VERIFYHOST, 2))
        if let caFile { check(rollout_curl_set_string(handle, CURLOPT_CAINFO, caFile)) }
        check(rollout_curl_set_pointer(handle, CURLOPT_ERRORBUFFER, errorText))
        // A declared length over the limit is refused before the body; the rest is counted as it arrives.
        check(rollout_curl_set_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limit)))
        check(rollout_curl_set_long(handle, CURLOPT_NOPROGRESS, 0))
        check(
            rollout_curl_set_progress(handle) { context, _, received, _, _ in
                let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
                // libcurl calls this at least once a second, also while the server says nothing.
                if sink.cancellation?.isCancelled == true {
                    sink.cancelled = true
                    return 1
                }
                guard received > curl_off_t(sink.limit) else { return 0 }
                sink.oversize = .received
                return 1
            })
        check(rollout_curl_set_pointer(handle, CURLOPT_XFERINFODATA, context))
        check(rollout_curl_set_slist(handle, CURLOPT_HTTPHEADER, list))
        check(rollout_curl_set_string(handle, CURLOPT_CUSTOMREQUEST, request.method))
        if request.method == "GET" { check(rollout_curl_set_long(handle, CURLOPT_HTTPGET, 1)) }
        if let body = request.body {
            sink.upload = body
            check(rollout_curl_set_long(handle, CURLOPT_UPLOAD, 0))
            check(rollout_curl_set_long(handle, CURLOPT_POST, 1))
            check(rollout_curl_set_long(handle, CURLOPT_POSTFIELDSIZE, body.count))
            check(
                rollout_curl_set_callback(handle, CURLOPT_READFUNCTION) { buffer, size, count, context in
                    let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
                    let n = min(size * count, sink.upload.count - sink.uploaded)
                    if n > 0, let buffer {
                        sink.upload.withUnsafeBufferPointer { src in
                            UnsafeMutableRawPointer(buffer).copyMemory(
                                from: src.baseAddress! + sink.uploaded, byteCount: n)
                        }
                        sink.uploaded += n
                    }
                    return n
                })
            check(rollout_curl_set_pointer(handle, CURLOPT_READDATA, context))
            // CUSTOMREQUEST keeps the method (PUT) while POST mode sends the body.
        }
        check(
            rollout_curl_set_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, context in
                let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
                let n = size * count
                if sink.body.count + n > sink.limit {
                    // The body is handed over decoded: "once inflated" only when the answer was compressed.
                    let encoding = sink.headers["content-encoding"]?.lowercased() ?? "identity"
                    sink.oversize = encoding == "identity" ? .received : .inflated
                    return 0  // libcurl stops the transfer (CURLE_WRITE_ERROR)
                }
                if n > 0, let data {
                    data.withMemoryRebound(to: UInt8.self, capacity: n) {
                        sink.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: n))
                    }
                }
                return n
            })
        check(rollout_curl_set_pointer(handle, CURLOPT_WRITEDATA, context))
        check(
            rollout_curl_set_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, context in
                let sink = Unmanaged<Sink>.fromOpaque(context!).takeUnretainedValue()
                let n = size * count
                guard n > 0, let data else { return n }
                let line = data.withMemoryRebound(to: UInt8.self, capacity: n) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: n), as: UTF8.self)
                }.trimmingWhitespace()
                if line.hasPrefix("HTTP/") {
                    sink.headers = [:]  // a new status line (after an interim answer) starts a new header block
                } else if let colon = line.firstIndex(of: ":") {
                    let name = line[..<colon].lowercased()
                    let value = line[line.index(after: colon)...].trimmingSpaces()
                    sink.headers[name] = value
                }
                return n
            })
        check(rollout_curl_set_pointer(handle, CURLOPT_HEADERDATA, context))
        guard ok else { throw TransportError(.other, "libcurl refused an option for \(request.method) \(request.url)") }

        if request.cancellation?.isCancelled == true { sink.cancelled = true }
        let code = sink.cancelled ? CURLE_ABORTED_BY_CALLBACK : rollout_curl_perform(handle)
        guard code == CURLE_OK else {
            if sink.cancelled { throw TransportError.abandoned(request) }
            if code == CURLE_FILESIZE_EXCEEDED || sink.oversize != nil {
                let how: TransportError.Oversize =
                    sink.oversize == .inflated ? .onceInflated : sink.oversize == .received ? .asReceived : .asDeclared
                // An answer arrived: the server acted on the request (a publish may have landed).
                var e = TransportError(
                    .other,
                    "\(request.method) \(request.url): the answer is larger than \(TransportError.size(limit)) \(how.rawValue); refused"
                )
                e.oversize = how
                e.limit = limit
                throw e
            }
            let detail = String(cString: errorText)
            let text = detail.isEmpty ? String(cString: rollout_curl_strerror(code)) : detail
            let kind: TransportError.Kind
            switch code {
            case CURLE_OPERATION_TIMEDOUT:
                // A connect timeout never reached the server; a timeout after sending may have.
                var sent: Int = 0
                _ = rollout_curl_get_request_size(handle, &sent)
                kind = sent > 0 ? .timedOut : .cannotConnect
            case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM:
                kind = .untrusted
            case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY,
                CURLE_SSL_CONNECT_ERROR, CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
                kind = .cannotConnect
            case CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_PARTIAL_FILE:
                kind = .connectionLost
            default:
                kind = .other
            }
            let what = kind == .timedOut ? "no answer within \(request.timeout.seconds)s" : text
            throw TransportError(kind, "\(request.method) \(request.url): \(what)")
        }
        var status: Int = 0
        _ = rollout_curl_get_response_code(handle, &status)
        return HTTPResponse(status: status, headers: sink.headers, body: sink.body)
    }
}
