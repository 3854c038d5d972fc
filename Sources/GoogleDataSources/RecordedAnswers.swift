import JSON
import Platform
import Timekeeping
import WebClient

/// Answers of the GA4 Data API's realtime report recorded earlier (`DIR/ga4-realtime-1.json`, `-2`, … each the body
/// of one `runRealtimeReport` answer), replayed in turn, one per request: `rollout demo --source recorded` feeds the
/// console through the real source path (the caller, the report's reading, the ledger, the store's telemetry commit)
/// without a network. A report states minutes relative to its request (`minutesAgo`), so a recording replays at any
/// time. Any other request is answered 404, as an API that does not exist here.
public final class RecordedAnswers: HTTPTransport, @unchecked Sendable {
    public let answers: [[UInt8]]
    private let lock = Lock()
    private var served = 0

    /// At most this many answers, each at most `SourceCaller.maximumAnswerBytes`.
    public static let maximumAnswers = 1_000

    /// Reads `DIR/ga4-realtime-N.json` from N = 1 until one is missing; each must be a JSON object.
    public init(directory: String) throws(SourceError) {
        var answers: [[UInt8]] = []
        while answers.count < Self.maximumAnswers {
            let path = directory + "/ga4-realtime-\(answers.count + 1).json"
            guard let bytes = try? Files.read(path, limit: SourceCaller.maximumAnswerBytes + 1) else { break }
            guard bytes.count <= SourceCaller.maximumAnswerBytes, (try? JSONParser().parse(bytes))?.objectValue != nil
            else {
                throw SourceError(.badAnswer, source: "recorded", "\(path) is not a recorded answer (a JSON object)")
            }
            answers.append(bytes)
        }
        guard !answers.isEmpty else {
            throw SourceError(
                .configuration, source: "recorded", "\(directory) holds no recorded answer (ga4-realtime-1.json)")
        }
        self.answers = answers
    }

    public func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
        guard request.method == "POST", request.url.hasSuffix(":runRealtimeReport") else {
            let body = #"{"error": {"code": 404, "message": "not recorded", "status": "NOT_FOUND"}}"#
            return HTTPResponse(status: 404, headers: ["content-type": "application/json"], body: Array(body.utf8))
        }
        let body = lock.withLock { () -> [UInt8] in
            defer { served += 1 }
            return answers[served % answers.count]
        }
        return HTTPResponse(status: 200, headers: ["content-type": "application/json"], body: body)
    }

    /// The recorded answers need no credentials: every request carries this token.
    public struct Token: AccessTokenProvider {
        public init() {}
        public func token(refresh: Bool, cancellation: Cancellation?) throws -> String { "recorded" }
    }
}
