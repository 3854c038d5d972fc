import Glibc
import Dispatch
import Platform
import Monitoring
import Rollout
import SQLiteStore
import Telemetry
import TelemetrySources
import Timekeeping

/// The one headless loop of `rollout watch` and `rollout plan run`.
///
/// Every `interval` wall seconds: the one assessment (`RolloutMonitor.status()`), auto-kill (with
/// `guardrails.auto-kill` on and a writable store, a HALT while anyone is exposed publishes a kill through the
/// write path: a compare-and-swap, so of any number of loops and consoles exactly one kill is published), then,
/// when a plan runs, the plan's look on that same assessment (`RampPlanRunner.look(status:)`). Each look is handed
/// to `report`; the loop ends on SIGINT or SIGTERM, after `looks` looks, or when `until` says so.
///
/// Before a look, the telemetry sources that are due are pulled (`run(sources:)`), so that the look judges what
/// they landed. A pull may wait on the network for minutes (timeouts, `Retry-After`), so it never stands between
/// the store's data and the loop's acts: when pulls are due, the loop first looks at the store as it is (auto-kill,
/// the plan, `until`; reported, not counted in `looks`), then pulls, each source on a thread of its own, and looks
/// again as each pull lands and every `interval` while others are still in flight: a source that hangs holds up
/// neither the other sources nor the loop. A stop signal abandons the pulls where they are (their waits end, a
/// transfer in flight is aborted, an access-token command is killed, nothing of them lands: a pull commits its batch
/// in one transaction or not at all) and ends the loop without a further look; a pull that runs past
/// `SessionSources.pullTimeLimit` is given up (recorded as failed, tried again at its next interval).
public final class HeadlessLoop {
    /// What one look saw and did.
    public struct Look: Sendable {
        /// The assessment the look judged (after its auto-kill, if it published one).
        public var status: RolloutMonitor.Status
        /// `auto-kill: <summary> (version N)` when this look published the kill.
        public var autoKill: String?
        /// The plan's look, when the loop runs a plan (nil when no plan runs, or none was started).
        public var plan: RampPlanRunner.Look?
        /// The verdict's level or the kind of its reason (the topic of its most severe finding: data, crashes,
        /// failures, exposure) differs from the previous look's (always true for the first). Numbers moving inside
        /// the same reason are not a change.
        public var verdictChanged: Bool
    }

    /// The SQLite (or Firebase) session of the loop; nil for a loop built from a monitor and write path.
    public let session: StoreSession?
    public let monitor: RolloutMonitor
    private let path: WritePath?
    private let runner: RampPlanRunner?
    /// Why the store file is no longer the one opened (`PATH: problem`), nil while it is (`RolloutSession`'s port).
    private let storeLost: () -> String?
    private var last: (VerdictLevel, Finding.Topic?)?

    /// A loop on `session`; with `plan`, it also runs the store's ramp plan (which needs a writable store).
    public convenience init(session: StoreSession, plan: Bool) throws {
        try self.init(session: session, planSession: session.planSession, plan: plan)
    }

    /// A loop on any store's plan session; `storeLost` says why the store file is no longer the one opened (a
    /// look then fails instead of judging a file nobody writes to any more).
    public convenience init(planSession: PlanSession, plan: Bool, storeLost: @escaping () -> String? = { nil }) throws {
        try self.init(session: nil, planSession: planSession, plan: plan, storeLost: storeLost)
    }

    init(
        session: StoreSession?, planSession: PlanSession, plan: Bool, storeLost: @escaping () -> String? = { nil }
    ) throws {
        self.session = session
        monitor = try planSession.monitor()
        path = planSession.readOnly ? nil : try planSession.writePath()
        runner = plan ? try RampPlanRunner(session: planSession, monitor: monitor) : nil
        self.storeLost = storeLost
    }

    /// A loop on any store's monitor and write path (nil: read-only, no auto-kill), without a plan: the
    /// PostgreSQL team store's `watch`.
    public init(monitor: RolloutMonitor, writePath: WritePath?) {
        session = nil
        self.monitor = monitor
        path = writePath
        runner = nil
        storeLost = { nil }
    }

    /// One look: the assessment, auto-kill, the plan; fails when the store file was removed or replaced.
    public func look() throws -> Look {
        // The connection still reads the file it opened, which nothing writes to any more: its verdict would look
        // live. (The console turns read-only on the last picture instead.)
        if let lost = storeLost() {
            throw StoreError.unavailable(
                "the store was removed or replaced while this process had it open (\(lost)): nothing more is judged "
                    + "or written; open it again ('rollout audit verify' checks the file now at that path)")
        }
        var status = try monitor.status()
        var killed: String?
        if let path, case .published(let stored, let proposal, _)? = try monitor.autoKillIfHalted(status, using: path) {
            killed = "auto-kill: \(proposal.summary) (version \(stored.info.number))"
            // The plan judges the store as it is now: killed.
            status = try monitor.status()
        }
        let plan = try runner?.look(status: status)
        let v = status.assessment.verdict
        let verdict = (v.level, v.findings.first { $0.level == v.level }?.topic)
        let changed = last.map { $0 != verdict } ?? true
        last = verdict
        return Look(status: status, autoKill: killed, plan: plan, verdictChanged: changed)
    }

    /// The signal (SIGINT, SIGTERM) that ended the last `run`, if one did.
    public private(set) var stoppedBy: Int32?

    /// Looks every `interval` wall seconds until a signal, `looks` looks or `until`; returns the last look (nil
    /// when stopped before the first).
    ///
    /// With `sources`, every source whose interval has passed is pulled (with `pullAllFirst`, every source before
    /// the first look: `rollout follow`), each pull's report handed to `pulled`; a look of the store as it is comes
    /// before the pulls. The pulls run side by side, each on a thread of its own, so that a source that hangs holds
    /// up neither the others nor the loop: while pulls are in flight, the loop looks as each one ends and at least
    /// every `interval` (those looks are reported, not counted in `looks`), and pulls again a source whose interval
    /// has passed; the look after the pulls, counted, comes once all have ended. Whatever ends the loop abandons the
    /// pulls still in flight and waits for them to end (each does within about a second; the wait gives up after 10 s).
    @discardableResult
    public func run(
        interval: Double, looks: Int?, report: (Look) -> Void, until: (Look) -> Bool, sources: SessionSources? = nil,
        pullAllFirst: Bool = false, pulled: (SourcePullReport) -> Void = { _ in }
    ) throws -> Look? {
        let stop = StopFlag()
        let signals = StopSignals { stop.set(signal: $0) }
        defer { stoppedBy = stop.signal }
        defer { signals.cancel() }
        let pulls = PullsInFlight(stop: stop.cancellation)
        defer { for case .success(let r?) in pulls.abandon() { pulled(r) } }
        var first = true
        var done = 0
        var latest: Look?
        while !stop.isSet {
            if let sources {
                let due = try sources.due(all: pullAllFirst && first).filter { !pulls.isPulling($0.name) }
                first = false
                if !due.isEmpty {
                    // The store's data is judged before any network wait: a HALT already there kills now, a plan
                    // step that is due is taken now.
                    let before = try look()
                    latest = before
                    report(before)
                    if until(before) { break }
                    for c in due { pulls.start(c, sources: sources) }
                }
                if pulls.any {
                    for result in pulls.wait(seconds: interval) {
                        if let r = try result.get() { pulled(r) }
                    }
                    // Stopped while pulling: no further look (the plan does not act after a stop).
                    if stop.isSet { break }
                    if pulls.any {
                        // Other pulls still run: what landed is judged now, the rest when they end.
                        let look = try look()
                        latest = look
                        report(look)
                        if until(look) { break }
                        continue
                    }
                }
            }
            let look = try look()
            latest = look
            report(look)
            done += 1
            if until(look) { break }
            if let looks, done >= looks { break }
            stop.wait(seconds: interval)
        }
        return latest
    }

    /// The pulls of a loop in flight, one thread each, at most one per source; each within its own cancellation
    /// (a child of the loop's stop), so that the loop can abandon them when it ends.
    final class PullsInFlight: @unchecked Sendable {
        private let condition = Condition()
        private let stop: Cancellation
        private var running: [String: Cancellation] = [:]
        private var ended: [Result<SourcePullReport?, any Error>] = []

        init(stop: Cancellation) { self.stop = stop }

        /// The sessions' sources cross to the pull's thread: their shared state is locked (`SessionMemory`), and the
        /// stores serialise their connections.
        private struct Sources: @unchecked Sendable { let sources: SessionSources }

        func start(_ c: SourceConfiguration, sources: SessionSources) {
            let cancellation = Cancellation(parent: stop)
            condition.withLock { running[c.name] = cancellation }
            let handed = Sources(sources: sources)
            detachThread { [self] in
                let result = Result { try handed.sources.pullLanding(c, stop: cancellation) }
                condition.withLock {
                    running[c.name] = nil
                    ended.append(result)
                    condition.broadcast()
                }
            }
        }

        func isPulling(_ name: String) -> Bool { condition.withLock { running[name] != nil } }

        var any: Bool { condition.withLock { !running.isEmpty || !ended.isEmpty } }

        /// The pulls that have ended, once one has, `seconds` have passed or the loop is stopped.
        func wait(seconds: Double) -> [Result<SourcePullReport?, any Error>] {
            let interval = Cancellation(seconds: seconds)
            return condition.withLock {
                // Neither a stop nor the interval signals this condition: they are looked at every tenth of a second.
                while ended.isEmpty, !running.isEmpty, !stop.isCancelled, !interval.isCancelled {
                    _ = condition.wait(seconds: 0.1)
                }
                defer { ended = [] }
                return ended
            }
        }

        /// Cancels every pull in flight and waits for them to end (each does within about a second; at most
        /// `patience` seconds are waited, so that the loop ends even if one did not); what every pull not yet taken
        /// gave.
        func abandon(patience: Double = 10) -> [Result<SourcePullReport?, any Error>] {
            let bound = Cancellation(seconds: patience)
            return condition.withLock {
                for c in running.values { c.cancel() }
                while !running.isEmpty, !bound.isCancelled { _ = condition.wait(seconds: 0.1) }
                defer { ended = [] }
                return ended
            }
        }
    }

    /// Set from a signal handler's queue, waited on by the loop; its `cancellation` reaches the pulls.
    final class StopFlag: @unchecked Sendable {
        private let lock = Lock()
        /// The first stop signal; set: stopped.
        private var received: Int32?
        let cancellation = Cancellation()
        func set(signal: Int32) {
            lock.withLock { if received == nil { received = signal } }
            cancellation.cancel()
        }
        var isSet: Bool { cancellation.isCancelled }
        var signal: Int32? { lock.withLock { received } }
        func wait(seconds: Double) { cancellation.wait(seconds: seconds) }
    }
}
