import Foundation
@testable import RolloutApp
import TelemetrySources
import Testing
import TestSupport
import Timekeeping

/// The console pulls the session's telemetry sources on their schedule, as `watch` and `follow` do, and shows each
/// source's state: a failing or silent source is the header's stale reason, each pull a notable event.
struct ConsoleSourcePullsTests {

    @Test func theConsolePullsTheSourcesOnTheirIntervalAndShowsTheirState() throws {
        let dir = try TestSupport.temporaryDirectory("console-sources")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let clock = ManualClock()
        _ = try Wiring.createStore(path: path, seed: "rollout-console-sources", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let bq = try SourceConfiguration(
            name: "bq", project: "demo-rollout", analytics: "demo-rollout.analytics_1", origin: clock.now() - .minutes(30),
            every: .seconds(Int64(60)))
        _ = try session.settingsWritePath().execute(.source(.add(bq)), actor: "alice@test", code: nil)
        // No GOOGLE_APPLICATION_CREDENTIALS: every pull of `bq` fails before it calls anything.
        let sources = session.sources(environment: [:])
        let console = try session.consoleSource(environment: [:])

        _ = try console.snapshot()
        // The pull runs beside the pictures; the next picture shows it.
        #expect(try TestSupport.eventually { try sources.state("bq") != nil && console.snapshot().events.first != nil })
        let first = try console.snapshot()
        let pulled = try #require(try sources.state("bq"))
        #expect(pulled.lastAttempt == clock.now() && pulled.lastSuccess == nil)
        #expect(pulled.lastError?.contains("GOOGLE_APPLICATION_CREDENTIALS") == true, "\(String(describing: pulled.lastError))")
        #expect(first.header.staleReason?.contains("source bq has not answered yet") == true, "\(String(describing: first.header.staleReason))")
        #expect(first.events.first?.text.hasPrefix("source bq failed: ") == true, "\(first.events)")
        // An aggregating source sends no per-installation events: no distinct users per window, and the crash
        // panel says so rather than showing a crash-free share of nobody.
        #expect(first.crash.windowed?.unavailable == "not available from BigQuery", "\(String(describing: first.crash.windowed))")

        // Within the source's interval nothing is pulled again; after it, the next picture pulls.
        let before = clock.now()
        clock.advance(by: .seconds(Int64(30)))
        _ = try console.snapshot()
        #expect(try sources.state("bq")?.lastAttempt == before)
        clock.advance(by: .seconds(Int64(31)))
        _ = try console.snapshot()
        #expect(try TestSupport.eventually { try sources.state("bq")?.lastAttempt == clock.now() })

        // The first console's round may still run (a round asked for while one ran reads the clock when it starts):
        // it ends before the clock moves on, or it would pull at the moved clock.
        let pulls = try #require(console as? SourcePullingConsoleSource)
        #expect(TestSupport.eventually { !pulls.isPulling }, "the first console's pulls never ended")
        // A read-only console pulls nothing, and still says the source is silent.
        let reader = try Wiring.session(path: path, operatorID: "alice@test", readOnly: true, clock: clock).rolloutSession()
        clock.advance(by: .minutes(5))
        let readerConsole = try reader.consoleSource(environment: [:])
        _ = try readerConsole.snapshot()
        #expect(try TestSupport.eventually { try readerConsole.snapshot().header.staleReason != nil })
        let seen = try readerConsole.snapshot()
        #expect(try sources.state("bq")?.lastAttempt == clock.now() - .minutes(5))
        #expect(seen.header.staleReason?.contains("source bq has not answered yet") == true)
        #expect(seen.crash.windowed?.unavailable == "not available from BigQuery")
    }

    /// A source that never answers does not hold up the console's pictures (their refresh, their auto-kill): the
    /// pull waits on its own thread.
    @Test func aPullThatHangsDoesNotHoldUpThePicture() throws {
        let silent = try SilentServer()
        let dir = try TestSupport.temporaryDirectory("console-stuck-source")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        let clock = SystemClock()
        _ = try Wiring.createStore(path: path, seed: "rollout-console-stuck", operatorID: "alice@test", clock: clock)
        let session = try Wiring.session(path: path, operatorID: "alice@test", clock: clock).rolloutSession()
        let bq = try SourceConfiguration(
            name: "bq", project: "p", analytics: "p.analytics_1", credentials: .accessTokenCommand("echo tok"),
            origin: clock.now() - .minutes(30))
        _ = try session.settingsWritePath().execute(.source(.add(bq)), actor: "alice@test", code: nil)
        let console = try session.consoleSource(environment: ["ROLLOUT_BIGQUERY_URL": silent.origin])

        let start = Date()
        _ = try console.snapshot()
        #expect(silent.waitForConnection(seconds: 20), "the console never pulled")
        // The pull is in flight (its server never answers): pictures still come at once.
        for _ in 0..<3 { _ = try console.snapshot() }
        #expect(Date().timeIntervalSince(start) < 10, "the pictures waited \(Date().timeIntervalSince(start)) s for the pull")
    }
}
