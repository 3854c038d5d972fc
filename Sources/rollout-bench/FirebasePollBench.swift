import FirebaseRemoteConfig
import Foundation
import JSON
import Platform
import SQLiteStore
import Timekeeping
import WebClient

/// The console's poll of a Firebase store, per poll of an unchanged template: CPU and bytes received, against
/// fetching the whole template (what every poll cost before it asked for the newest version's number first).
/// The template is a large one: 1,500 parameters with a conditional value each (its size is printed).
enum FirebasePollBench {
    static let suites = [
        BenchSuite(
            name: "firebase-poll",
            title: "console poll of a Firebase store (unchanged 1,500-parameter template): CPU and bytes per poll vs a full read",
            run: run)
    ]

    /// Counts the bytes of the answers' bodies (decoded) passing through.
    final class Counting: HTTPTransport, @unchecked Sendable {
        let inner: any HTTPTransport
        private let lock = Lock()
        private var received = 0
        init(_ inner: any HTTPTransport) { self.inner = inner }
        func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
            let r = try inner.send(request)
            lock.withLock { received += r.body.count }
            return r
        }
        var bytes: Int { lock.withLock { received } }
    }

    static func template() -> JSONValue {
        var parameters = JSONObject()
        for i in 0..<1_500 {
            parameters["feature_flag_\(i)"] = [
                "defaultValue": ["value": .string(i % 3 == 0 ? "true" : "variant-\(i)-" + String(repeating: "x", count: 40))],
                "conditionalValues": ["beta_testers": ["value": "false"]],
                "description": .string("Flag \(i): gates one screen of the app for the listed cohort"),
                "valueType": i % 3 == 0 ? "BOOLEAN" : "STRING",
            ]
        }
        return [
            "conditions": [["name": "beta_testers", "expression": "app.userProperty['beta'] == 'true'"]],
            "parameters": .object(parameters),
        ]
    }

    static func run() throws {
        let dir = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("rollout-poll-bench-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let templatePath = dir.appendingPathComponent("template.json").path
        try Data(template().compactText.utf8).write(to: URL(fileURLWithPath: templatePath))
        let fake = try BenchGoogleFake(project: "poll", in: dir, extra: ["--template", templatePath])
        defer { fake.close() }
        let transport = Counting(CurlTransport())
        let clock = ManualClock(SystemClock().now())
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.parse(fake.serviceAccount.compactText, source: "bench key"), transport: transport,
            clock: SystemClock())
        let client = RemoteConfigClient(
            endpoint: try RemoteConfigEndpoint(origin: fake.origin), project: "poll", tokens: tokens, transport: transport)
        let state = try FirebaseState.open(path: dir.appendingPathComponent("state.db").path, project: "poll", create: true)
        let store = FirebaseConfigStore(client: client, state: try state.configStore(), clock: clock)
        store.pollInterval = .seconds(Int64(2))
        let first = try store.current()  // the token and the first read

        let polls = 40
        func measure(_ poll: () throws -> Void) throws -> (cpu: Double, bytes: Double) {
            try poll()  // warm
            let bytes0 = transport.bytes
            let cpu0 = Stopwatch.threadCPUSeconds()
            for _ in 0..<polls { try poll() }
            return ((Stopwatch.threadCPUSeconds() - cpu0) * 1000 / Double(polls), Double(transport.bytes - bytes0) / Double(polls))
        }
        let full = try measure { _ = try store.fresh() }
        let poll = try measure {
            clock.advance(by: .seconds(Int64(3)))
            let s = try store.current()
            guard s.info.number == first.info.number else { throw BenchError("the template moved during the bench") }
        }
        print(
            "  \(polls) polls each; template of \(first.template.json.compactText.utf8.count) bytes; bodies received, "
                + "CPU of this process (the client: request, TLS-free loopback, parse)")
        print("  full read per poll: \(formatFigure(full.bytes)) bytes, \(formatFigure(full.cpu)) ms CPU")
        print("  version check per poll: \(formatFigure(poll.bytes)) bytes, \(formatFigure(poll.cpu)) ms CPU")
        report(
            "bytes per poll, unchanged template", value: poll.bytes, unit: "bytes",
            against: ("a full read of the template", full.bytes), target: (0.05, false))
        report(
            "CPU per poll, unchanged template", value: poll.cpu, unit: "ms", against: ("a full read of the template", full.cpu),
            target: (0.25, false))
    }
}
