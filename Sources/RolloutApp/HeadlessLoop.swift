import FoundationEssentials
import Glibc
import Dispatch
import Platform
import Monitoring
import Rollout
import SQLiteStore
import Telemetry
import Timekeeping

/// The one headless loop of `rollout watch` and `rollout plan run`.
///
/// Every `interval` wall seconds: the one assessment (`RolloutMonitor.status()`), auto-kill (with
/// `guardrails.auto-kill` on and a writable store, a HALT while anyone is exposed publishes a kill through the
/// write path: a compare-and-swap, so of any number of loops and consoles exactly one kill is published), then,
/// when a plan runs, the plan's look on that same assessment (`RampPlanRunner.look(status:)`). Each look is handed
/// to `report`; the loop ends on SIGINT or SIGTERM, after `looks` looks, or when `until` says so.
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
    private var last: (VerdictLevel, Finding.Topic?)?

    /// A loop on `session`; with `plan`, it also runs the store's ramp plan (which needs a writable store).
    public convenience init(session: StoreSession, plan: Bool) throws {
        try self.init(session: session, planSession: session.planSession, plan: plan)
    }

    /// A loop on any store's plan session (the PostgreSQL team store's `plan run`).
    public convenience init(planSession: PlanSession, plan: Bool) throws {
        try self.init(session: nil, planSession: planSession, plan: plan)
    }

    init(session: StoreSession?, planSession: PlanSession, plan: Bool) throws {
        self.session = session
        monitor = try planSession.monitor()
        path = planSession.readOnly ? nil : try planSession.writePath()
        runner = plan ? try RampPlanRunner(session: planSession, monitor: monitor) : nil
    }

    /// A loop on any store's monitor and write path (nil: read-only, no auto-kill), without a plan: the
    /// PostgreSQL team store's `watch`.
    public init(monitor: RolloutMonitor, writePath: WritePath?) {
        session = nil
        self.monitor = monitor
        path = writePath
        runner = nil
    }

    /// One look: the assessment, auto-kill, the plan.
    public func look() throws -> Look {
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

    /// Looks every `interval` wall seconds until a signal, `looks` looks or `until`; returns the last look.
    /// `beforeLook` runs before each look (`rollout follow` pulls its telemetry sources there).
    @discardableResult
    public func run(
        interval: Double, looks: Int?, report: (Look) -> Void, until: (Look) -> Bool, beforeLook: () throws -> Void = {}
    ) throws -> Look? {
        let stop = StopFlag()
        let signals = StopSignals { stop.set(signal: $0) }
        defer { stoppedBy = stop.signal }
        defer { signals.cancel() }
        var done = 0
        var latest: Look?
        while !stop.isSet {
            try beforeLook()
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

    /// Set from a signal handler's queue, waited on by the loop.
    final class StopFlag: @unchecked Sendable {
        private let condition = Condition()
        /// The first stop signal; set: stopped.
        private var received: Int32?
        func set(signal: Int32) {
            condition.lock()
            if received == nil { received = signal }
            condition.broadcast()
            condition.unlock()
        }
        var isSet: Bool {
            condition.lock()
            defer { condition.unlock() }
            return received != nil
        }
        var signal: Int32? {
            condition.lock()
            defer { condition.unlock() }
            return received
        }
        func wait(seconds: Double) {
            condition.lock()
            if received == nil { _ = condition.wait(seconds: seconds) }
            condition.unlock()
        }
    }
}
