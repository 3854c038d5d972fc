import RemoteConfig
import Rollout
import TelemetrySources
import Timekeeping

/// The store of `rollout demo --source recorded`: a new store at `path` with the rollout at 10% and one GA4
/// realtime source ("recorded", pulled every 5 s) whose answers the console's session serves from a recording
/// (`RolloutSession.consoleSource(recordedAnswers:)`). Both changes go through the write paths, audited.
public enum RecordedDemo {
    public static func open(path: String, operatorID: String, clock: any Clock = SystemClock()) throws -> RolloutSession
    {
        // The store and its 10% are made as of half an hour ago (a temporary demo store): the recording's last 30
        // minutes are then the rollout's, and count from the first picture.
        let before = ManualClock(clock.now() - .minutes(31))
        _ = try Wiring.createStore(path: path, seed: "rollout-demo-recorded", operatorID: operatorID, clock: before)
        _ = try Wiring.session(path: path, operatorID: operatorID, clock: before).rolloutSession().writePath().execute(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 10))), actor: operatorID,
                reason: "demo: a rollout at 10% watched through recorded GA4 realtime answers", origin: "ROLLOUT_DEMO"))
        let session = try Wiring.session(path: path, operatorID: operatorID, clock: clock).rolloutSession()
        let source = try SourceConfiguration(
            name: "recorded", kind: .analyticsRealtime, project: "recorded-demo", analytics: "", property: "123456",
            credentials: .accessTokenCommand("true"), origin: clock.now() - .minutes(30), every: .seconds(Int64(5)))
        _ = try session.settingsWritePath().execute(.source(.add(source)), actor: operatorID, code: nil)
        return session
    }
}
