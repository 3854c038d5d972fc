import FirebaseFake
import Foundation
import GoogleDataSources
import Platform
import RolloutApp
import TelemetrySources
import TestSupport
import Testing
import Timekeeping
import WebClient

/// A pull that does not end gives way: a stop (the headless loop's signal) ends its waits and aborts a transfer in
/// flight within about a second, and its time limit gives it up, recorded as a failure.
@Suite("pull cancellation", .serialized)
struct PullCancellationTests {
    /// Answers 503 with `Retry-After: 100` forever.
    struct Unavailable: HTTPTransport {
        func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
            HTTPResponse(status: 503, headers: ["retry-after": "100"], body: Array("{}".utf8))
        }
    }

    /// Runs `body`, cancelling `cancellation` after `after` seconds; returns how long `body` took.
    static func timed(cancelling cancellation: Cancellation, after: Double, _ body: () -> Void) -> Double {
        let start = Date()
        Thread.detachNewThread {
            usleep(UInt32(after * 1e6))
            cancellation.cancel()
        }
        body()
        return Date().timeIntervalSince(start)
    }

    @Test func aStopEndsARetryAfterWait() throws {
        let call = SourceCaller(
            source: "bq", project: "p", tokens: RecordedAnswers.Token(), transport: Unavailable(), clock: SystemClock())
        let stop = Cancellation()
        call.cancellation = stop
        var failure: SourceError?
        let took = Self.timed(cancelling: stop, after: 0.3) {
            do { _ = try call.call("GET", "http://127.0.0.1:1/x", what: "query") } catch {
                failure = error as? SourceError
            }
        }
        #expect(failure?.kind == .cancelled, "\(String(describing: failure))")
        #expect(failure?.message.contains("abandoned: stopped") == true, "\(String(describing: failure))")
        // The server asked for 100 s; the stop came after 0.3 s.
        #expect(took < 5, "the wait went on \(took) s after the stop")
        #expect(call.waits == [.seconds(Int64(100))])
    }

    @Test func aStopAbortsATransferInFlight() throws {
        let silent = try SilentServer()
        let stop = Cancellation()
        var request = HTTPRequest(method: "GET", url: silent.origin + "/x", timeout: .seconds(Int64(60)))
        request.cancellation = stop
        var failure: TransportError?
        let took = Self.timed(cancelling: stop, after: 0.3) {
            do { _ = try CurlTransport().send(request) } catch { failure = error as? TransportError }
        }
        #expect(failure?.cancelled == true, "\(String(describing: failure))")
        // libcurl asks its progress callback at least once a second while the server is silent.
        #expect(took < 5, "the transfer went on \(took) s after the stop")
    }

    /// A pull of a source that never answers is given up at the session's time limit, recorded as failed; one
    /// stopped is abandoned and not recorded (the source is not at fault).
    @Test func aPullIsGivenUpAtItsTimeLimitAndAStoppedOneIsNotRecorded() throws {
        let silent = try SilentServer()
        let dir = try TestSupport.temporaryDirectory("pull-limit")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let clock = SystemClock()
        _ = try Wiring.createStore(path: path, seed: "rollout-pull-limit", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let bq = try SourceConfiguration(
            name: "bq", project: "p", analytics: "p.analytics_1", credentials: .accessTokenCommand("echo tok"),
            origin: clock.now() - .minutes(30))
        _ = try session.settingsWritePath().execute(.source(.add(bq)), actor: "alice@test", code: nil)
        var sources = session.sources(environment: ["ROLLOUT_BIGQUERY_URL": silent.origin])

        let stop = Cancellation()
        var stopped: [SourcePullReport] = []
        let took = Self.timed(cancelling: stop, after: 0.3) {
            stopped = (try? sources.pull(try sources.due(), stop: stop)) ?? []
        }
        #expect(took < 5, "the pull went on \(took) s after the stop")
        #expect(stopped.first?.error?.kind == .cancelled, "\(stopped.map { String(describing: $0.error) })")
        #expect(try sources.state("bq")?.lastAttempt == nil, "a stopped pull is not a failure of the source")

        sources.pullTimeLimit = .seconds(Int64(1))
        let start = Date()
        let limited = try sources.pullDue()
        #expect(Date().timeIntervalSince(start) < 6)
        #expect(
            limited.first?.error?.message.contains("gave up") == true, "\(limited.map { String(describing: $0.error) })"
        )
        #expect(try sources.state("bq")?.lastError?.contains("gave up") == true)
    }

    /// A store in `dir` with source `bq` (from 30 minutes ago) using `credentials`; its session.
    static func session(in dir: URL, credentials: SourceConfiguration.Credentials) throws -> RolloutSession {
        let path = dir.appendingPathComponent("s.db").path
        let clock = SystemClock()
        _ = try Wiring.createStore(path: path, seed: "rollout-pull-token", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let bq = try SourceConfiguration(
            name: "bq", project: "p", analytics: "p.analytics_1", credentials: credentials,
            origin: clock.now() - .minutes(30))
        _ = try session.settingsWritePath().execute(.source(.add(bq)), actor: "alice@test", code: nil)
        return session
    }

    /// The access-token command is part of the pull: a stop kills it (and the `sleep` it started) within about a
    /// second, and so does the pull's time bound, which gives the pull up, recorded as failed.
    @Test func aTokenCommandThatDoesNotEndIsKilledByAStopAndByThePullsTimeBound() throws {
        let dir = try TestSupport.temporaryDirectory("pull-token-command")
        defer { try? FileManager.default.removeItem(at: dir) }
        let pidFile = dir.appendingPathComponent("sleep.pid").path
        let silent = try SilentServer()
        let session = try Self.session(
            in: dir, credentials: .accessTokenCommand("sleep 30 & echo $! > \(pidFile); wait; echo tok"))
        var sources = session.sources(environment: ["ROLLOUT_BIGQUERY_URL": silent.origin])
        @Sendable func sleeper() -> Int32? {
            Int32(
                (try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
                    ?? "")
        }

        let stop = Cancellation()
        Thread.detachNewThread {
            // Stopped once the command runs (its sleep has started), or after 10 s regardless.
            _ = TestSupport.eventually(within: 10) { sleeper() != nil }
            stop.cancel()
        }
        var start = Date()
        let stopped = try sources.pull(try sources.due(), stop: stop)
        #expect(Date().timeIntervalSince(start) < 5, "the pull went on \(Date().timeIntervalSince(start)) s")
        #expect(stopped.first?.error?.kind == .cancelled, "\(stopped.map { String(describing: $0.error) })")
        #expect(stopped.first?.error?.message.contains("abandoned: stopped") == true)
        #expect(try sources.state("bq")?.lastAttempt == nil, "a stopped pull is not a failure of the source")
        let first = try #require(sleeper())
        #expect(TestSupport.eventually(within: 5) { !TestSupport.isRunning(first) }, "the command's sleep \(first) survived the stop")
        #expect(silent.connections == 0, "the query was sent without a token")

        try FileManager.default.removeItem(atPath: pidFile)
        sources.pullTimeLimit = .seconds(Int64(1))
        start = Date()
        let limited = try sources.pullDue()
        #expect(Date().timeIntervalSince(start) < 5, "the pull went on \(Date().timeIntervalSince(start)) s")
        #expect(
            limited.first?.error?.message.contains("gave up") == true, "\(limited.map { String(describing: $0.error) })"
        )
        #expect(try sources.state("bq")?.lastError?.contains("gave up") == true)
        let second = try #require(sleeper())
        #expect(
            TestSupport.eventually(within: 5) { !TestSupport.isRunning(second) },
            "the command's sleep \(second) survived the time bound")
    }

    /// With a service account, the token exchange is a request of the pull: a token endpoint that does not answer
    /// is abandoned at the pull's time bound (not after three attempts of 30 s each).
    @Test func aTokenEndpointThatDoesNotAnswerEndsWithThePullsTimeBound() throws {
        let fake = try FakeFirebase(tls: true)
        try fake.fault("delay_before", match: "token", count: 10, seconds: 100)
        let dir = try TestSupport.temporaryDirectory("pull-token-endpoint")
        defer { try? FileManager.default.removeItem(at: dir) }
        let session = try Self.session(in: dir, credentials: .serviceAccountFile(fake.keyFile))
        var sources = session.sources(environment: ["ROLLOUT_BIGQUERY_URL": fake.origin, "CURL_CA_BUNDLE": fake.caFile])
        sources.pullTimeLimit = .seconds(Int64(2))
        let start = Date()
        let limited = try sources.pullDue()
        let took = Date().timeIntervalSince(start)
        #expect(took < 5, "the pull went on \(took) s past its bound of 2 s")
        #expect(limited.first?.error?.kind == .cancelled, "\(limited.map { String(describing: $0.error) })")
        #expect(
            limited.first?.error?.message.contains("gave up") == true, "\(limited.map { String(describing: $0.error) })"
        )
        #expect(try sources.state("bq")?.lastError?.contains("gave up") == true)
    }

    /// The loop pulls its sources side by side: while source `hung`'s access-token command does not end, source
    /// `bq` lands its pull and the loop looks at what it landed (its auto-kill, its plan, `until`) at once, not once
    /// the hung pull gives up. When the loop ends, the hung pull is abandoned (its command killed), reported, and
    /// not recorded as a failure.
    @Test func aHungSourceHoldsUpNeitherTheOtherSourcesNorTheLoop() throws {
        let fake = try FakeFirebase(tls: true)
        let clock = SystemClock()
        let start = clock.now() - .minutes(25)
        try ExportFleet(seed: 41, installations: 200, minutes: 20, start: start).load(into: fake)
        let dir = try TestSupport.temporaryDirectory("pull-side-by-side")
        defer { try? FileManager.default.removeItem(at: dir) }
        let pidFile = dir.appendingPathComponent("sleep.pid").path
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-side-by-side", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        for c in [
            try SourceConfiguration(
                // Another property's export: two sources over the same events are refused.
                name: "hung", project: fake.project, analytics: "\(fake.project).analytics_654321",
                credentials: .accessTokenCommand("sleep 30 & echo $! > \(pidFile); wait; echo tok"),
                origin: start - .minutes(5)),
            try SourceConfiguration(
                name: "bq", project: fake.project, analytics: "\(fake.project).analytics_123456",
                credentials: .serviceAccountFile(fake.keyFile), origin: start - .minutes(5)),
        ] {
            _ = try session.settingsWritePath().execute(.source(.add(c)), actor: "alice@test", code: nil)
        }
        var sources = session.sources(environment: ["ROLLOUT_BIGQUERY_URL": fake.origin, "CURL_CA_BUNDLE": fake.caFile])
        sources.pullTimeLimit = .seconds(Int64(20))
        let loop = try session.headlessLoop()

        let began = Date()
        var reports: [(at: Double, report: SourcePullReport)] = []
        var looks: [Double] = []
        var judgedLanding: Double?
        _ = try loop.run(
            interval: 0.2, looks: nil, report: { _ in looks.append(Date().timeIntervalSince(began)) },
            until: { _ in
                // A look after `bq` landed, while `hung` is still pulling; or, bounded, 15 s.
                if judgedLanding == nil, reports.contains(where: { $0.report.source == "bq" }),
                    !reports.contains(where: { $0.report.source == "hung" })
                {
                    judgedLanding = Date().timeIntervalSince(began)
                }
                return judgedLanding != nil || Date().timeIntervalSince(began) > 15
            },
            sources: sources, pullAllFirst: true, pulled: { reports.append((Date().timeIntervalSince(began), $0)) })
        let took = Date().timeIntervalSince(began)

        let bq = try #require(reports.first { $0.report.source == "bq" })
        #expect(bq.report.error == nil && bq.report.addedEvents > 0, "\(String(describing: bq.report.error))")
        let judged = try #require(
            judgedLanding,
            "no look judged bq's pull while hung was pulling: \(reports.map { ($0.at, $0.report.source) })")
        #expect(judged < 10, "bq's pull was judged \(judged) s in")
        #expect(took < 12, "the loop ended \(took) s in")
        // Ending the loop abandoned the hung pull: reported as stopped, not a failure of the source, its command gone.
        let hung = try #require(reports.first { $0.report.source == "hung" })
        #expect(
            hung.report.error?.kind == .cancelled && hung.report.error?.message.contains("abandoned: stopped") == true,
            "\(String(describing: hung.report.error))")
        #expect(try sources.state("hung")?.lastAttempt == nil)
        let sleeper = try #require(
            Int32(
                (try? String(contentsOfFile: pidFile, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
                    ?? ""))
        #expect(
            TestSupport.eventually(within: 5) { !TestSupport.isRunning(sleeper) },
            "the hung command's sleep \(sleeper) survived the loop")
    }
}
