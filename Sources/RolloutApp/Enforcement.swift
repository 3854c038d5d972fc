import CommandLineKit
import Console
import FirebaseRemoteConfig
import WebClient
import Monitoring
import Platform
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// App Check enforcement of a Firebase project, the ramp's last stage: read each service's mode, and change one
/// through the rules (`EnforcementGate`: ENFORCED only at 100% with an OK verdict held for
/// `enforcement.ok-for-minutes`), step-up (policy key `appcheck`) and the audit log.
///
/// A change is recorded as requested (and judged by step-up) in the store before anything is sent to Firebase,
/// then sent once with the service's etag, and its outcome recorded after: a lost answer is settled by reading
/// the service again. No change to enforcement is ever unaudited.
public struct EnforcementPath {
    public let session: RolloutSession
    public let client: AppCheckServicesClient

    public init(session: RolloutSession, client: AppCheckServicesClient) {
        self.session = session
        self.client = client
    }

    /// Every service App Check can enforce on, as Firebase has it now.
    public func services() throws -> [AppCheckService] { try client.known() }

    public enum Outcome: Sendable, Equatable {
        /// Already in that mode: nothing sent, nothing recorded.
        case unchanged(AppCheckService)
        /// What would be done (`--dry-run`), after every check.
        case wouldChange(AppCheckService, to: EnforcementMode, rollout: EnforcementGate.Rollout)
        case changed(before: AppCheckService, after: AppCheckService)
    }

    /// The gate refused ENFORCED: the CLI's exit 4, nothing sent or recorded.
    public struct Refusal: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// What the gate sees: the flag's exposure now, since when it has been everyone with an OK verdict (checked
    /// hour by hour over the required time, and now), and the share of recent requests enforcement would reject
    /// (`RejectionEstimate`: outdated clients and failed attestations, in the newest window).
    public func rollout(now: Instant, okFor: Instant.Duration) throws -> EnforcementGate.Rollout {
        let status = try session.monitor().status()
        let exposure = Double(status.exposed.value) / Double(MicroPercent.hundred.value)
        let recent = status.snapshot.windows.last?.totals ?? status.snapshot.totals
        let wouldReject = recent.rejectionEstimate.share
        let killed = status.plan?.state == .killed
        guard exposure >= 1, status.assessment.verdict.level == .ok else {
            return EnforcementGate.Rollout(exposure: exposure, okSince: nil, wouldReject: wouldReject, killed: killed)
        }
        // Everyone throughout: the version live when the window began and every version since were at 100%. The
        // flag reached 100% when the oldest version of the unbroken run of full versions was published (not when
        // the version before it was).
        let since = now - okFor
        var okSince = since
        var fullSince: Instant?
        for info in try session.templates.versions(limit: 300, before: nil) {
            let template = try session.templates.version(info.number).template
            let full = (try? RolloutPlan.locate(in: template))
                .map { $0.state == .rolling && $0.percentage >= MicroPercent.hundred } ?? false
            if !full { break }
            fullSince = info.updateTime
            if info.updateTime <= since { break }
        }
        okSince = max(okSince, fullSince ?? now)
        // The verdict at every hour of the window (telemetry as it stood then).
        var t = now - .hours(1)
        while t >= okSince {
            let then = try session.monitor(telemetryClock: ManualClock(t)).status()
            if then.assessment.verdict.level != .ok {
                okSince = t + .hours(1)
                break
            }
            t = t - .hours(1)
        }
        return EnforcementGate.Rollout(exposure: exposure, okSince: okSince, wouldReject: wouldReject, killed: killed)
    }

    /// Sets `service` to `mode` for `reason` (step-up `code` when the policy asks), or says what it would do.
    public func set(
        _ service: String, _ mode: EnforcementMode, reason: String, code: String?, dryRun: Bool,
        approving: TwoPersonSettingsRequest? = nil
    ) throws -> Outcome {
        if session.readOnly {
            throw SessionRefusal(.readOnly, "refused: this session is read-only (--read-only); nothing was sent")
        }
        let before = try client.get(service)
        if before.enforcementMode == mode { return .unchanged(before) }
        let now = session.clock.now()
        let settings = try session.settingsWritePath().read { try $0.guardrailSettings() }
        let rollout = try self.rollout(now: now, okFor: settings.enforceAfter)
        if case .refused(let why) = EnforcementGate(okFor: settings.enforceAfter).assess(
            from: before.enforcementMode, to: mode, rollout: rollout, now: now)
        {
            let estimate = rollout.wouldReject.map {
                "; about \(($0 * 1000).rounded() / 10)% of recent requests would be rejected once enforced"
            }
            throw Refusal(
                description: "refused: \(service) stays \(before.enforcementMode.rawValue): \(why)\(estimate ?? "")")
        }
        if dryRun { return .wouldChange(before, to: mode, rollout: rollout) }
        _ = try session.settingsWritePath().execute(
            .appCheck(.enforcementRequest(service: service, from: before.enforcementMode, to: mode, reason: reason)),
            actor: session.operatorID, code: code, approving: approving)
        return .changed(before: before, after: try send(before, mode, reason: reason))
    }

    /// Sends the change once, settles a lost answer by reading the service again, and records the outcome.
    private func send(_ before: AppCheckService, _ mode: EnforcementMode, reason: String) throws -> AppCheckService {
        let after: AppCheckService
        let settled: String?
        switch client.change(before, to: mode) {
        case .applied(let now, let why):
            after = now
            settled = why
        case .failed(let error):
            try record(before, mode, "not applied: \(error)")
            throw error
        }
        try record(
            before, mode,
            "applied (\(reason)); Firebase etag \(after.etag ?? "none")\(after.updateTime.map { ", updated \($0)" } ?? ""); "
                + "takes effect within 15 minutes\(settled.map { " (\($0))" } ?? "")")
        return after
    }

    private func record(_ before: AppCheckService, _ mode: EnforcementMode, _ detail: String) throws {
        let entry = AuditEntry(
            time: session.clock.now(), actor: session.operatorID, action: "appcheck enforcement \(before.id)",
            from: before.enforcementMode.rawValue, to: mode.rawValue, result: .recorded, detail: detail)
        try session.settings.transaction { try $0.appendAudit(entry) }
    }
}

/// The rule that a change never takes the App Attest provider from users while a service rejects requests without
/// it: a kill, a lower percentage or a rollback that lowers exposure first sets every ENFORCED service UNENFORCED
/// (recorded as requested and as applied in the audit log), whichever face asked (CLI, console, auto-kill, plan).
/// Never held by step-up or the gate: it serves a decrease, which always passes. When a service cannot be lowered
/// the change is refused with the command to run; when enforcement cannot be read, the change goes ahead and the
/// audit log says so (a kill must not wait on the App Check API: its reads get one attempt within `readTimeout`,
/// not the retries every other call has).
public struct EnforcementPolicy: WritePolicy {
    public let name = "App Check enforcement"
    /// It acts on exactly the changes the other policies let through unreviewed: reductions.
    public var reviewsReductions: Bool { true }
    let client: AppCheckServicesClient
    /// `client` for reads: one attempt, within `readTimeout` (or the client's own timeout when shorter).
    let reads: AppCheckServicesClient
    let clock: any Clock

    /// How long a kill waits on the App Check API to read enforcement (listing the services, or settling a
    /// change whose answer was lost or wrong) before it goes ahead without.
    public static let readTimeout = Instant.Duration.seconds(Int64(5))

    public init(client: AppCheckServicesClient, clock: any Clock, readTimeout: Instant.Duration = Self.readTimeout) {
        self.client = client
        self.clock = clock
        var budget = client.policy
        budget.attempts = 1
        budget.timeout = min(budget.timeout, readTimeout)
        self.reads = client.budgeted(budget)
    }

    /// Whether the change lowers the flag's effective exposure.
    static func takesProviderAway(_ p: Proposal) -> Bool {
        func exposure(_ plan: RolloutPlan?) -> Int64 {
            guard let plan, plan.state == .rolling else { return 0 }
            return plan.percentage.value
        }
        return exposure(p.after) < exposure(p.before)
    }

    public func preview(_ p: Proposal) throws -> PolicyReport {
        guard Self.takesProviderAway(p) else { return PolicyReport(policy: name, lines: [], decision: .allow) }
        do {
            let enforced = try reads.list().filter { $0.enforcementMode == .enforced }.map(\.id)
            return PolicyReport(
                policy: name,
                lines: enforced.isEmpty
                    ? [] : ["first sets \(enforced.joined(separator: ", ")) UNENFORCED (App Check enforcement)"],
                decision: .allow)
        } catch {
            return PolicyReport(policy: name, lines: ["could not read App Check enforcement: \(error)"], decision: .allow)
        }
    }

    public func review(_ p: Proposal, context: PolicyContext) throws -> PolicyDecision {
        guard Self.takesProviderAway(p) else { return .allow }
        func record(_ service: String, _ from: String, _ to: String, _ detail: String) throws {
            try context.audit(
                AuditEntry(
                    time: clock.now(), actor: p.actor, action: "appcheck enforcement \(service)", from: from, to: to,
                    result: .recorded, detail: detail))
        }
        // One call: only explicitly configured services are listed, and an unconfigured one is OFF.
        let services: [AppCheckService]
        do {
            services = try reads.list()
        } catch {
            try record(
                "(unread)", "", "",
                "could not be read before a \(p.kind.rawValue) (\(error)); if a service is ENFORCED, the users it takes "
                    + "the App Attest provider from are rejected: check with 'rollout enforcement show'")
            return .allow
        }
        for s in services where s.enforcementMode == .enforced {
            try record(s.id, "ENFORCED", "UNENFORCED", "requested before a \(p.kind.rawValue) (\(p.reason)); sent to Firebase next")
            switch client.change(s, to: .unenforced, reading: reads) {
            case .applied(let after, settled: nil):
                try record(s.id, "ENFORCED", "UNENFORCED", "applied; Firebase etag \(after.etag ?? "none")")
            case .applied(let now, settled: let why?):
                try record(s.id, "ENFORCED", now.enforcementMode.rawValue, "applied (\(why))")
            case .failed(let error):
                try record(s.id, "ENFORCED", "UNENFORCED", "not applied: \(error)")
                return .refuse(
                    PolicyRefusal(
                        policy: name,
                        reason: "App Check still enforces \(s.id) and setting it UNENFORCED failed (\(error)); the "
                            + "\(p.kind.rawValue) would lock out the users it takes App Attest from",
                        suggestion: "run 'rollout enforcement set \(s.id) unenforced --reason \"before \(p.kind.rawValue)\"', "
                            + "then try again"))
            }
        }
        return .allow
    }
}

extension AppCheckServicesClient {
    /// What became of one change of a service's mode.
    enum ModeChange {
        /// Firebase has it; `settled`: nil when its answer said so, else why the service was read again (the answer
        /// was lost, or said otherwise) and the reading showed the change.
        case applied(AppCheckService, settled: String?)
        case failed(any Error)
    }

    /// Sends `before`'s change to `mode` once (with its etag). A 200 is taken at its word only when it has `mode`
    /// under a new etag; a lost answer, or one that says otherwise (Firebase answered but did not apply it), is
    /// settled by reading the service (with `reading`, else this client): applied when it now has `mode` under a
    /// new etag, or, for a lowering, any mode below the one it had (another operator lowered it meanwhile: the
    /// users are no more at risk); otherwise failed. The one rule of the enforcement path and the kill's
    /// enforcement policy.
    func change(_ before: AppCheckService, to mode: EnforcementMode, reading: AppCheckServicesClient? = nil)
        -> ModeChange
    {
        var answered: AppCheckService?
        do {
            let answer = try setMode(before.id, mode, etag: before.etag)
            guard answer.enforcementMode == mode, before.etag == nil || answer.etag != before.etag else {
                answered = answer
                throw FirebaseError.protocolViolation(
                    "App Check answered the change of \(before.id) to \(mode.rawValue) with \(answer.enforcementMode.rawValue) "
                        + "under \(answer.etag == before.etag ? "the same" : "another") etag: not applied")
            }
            return .applied(answer, settled: nil)
        } catch {
            if let now = try? (reading ?? self).get(before.id),
                now.enforcementMode == mode && now.etag != before.etag
                    || mode < before.enforcementMode && now.enforcementMode < before.enforcementMode
            {
                return .applied(
                    now,
                    settled: answered.map { "its answer said \($0.enforcementMode.rawValue); reading it again showed the change" }
                        ?? "the answer was lost")
            }
            return .failed(error)
        }
    }
}

/// The console's picture with each App Check service's enforcement added (a Firebase project's session): the
/// services are read at most once a `refresh` (a call to Google's API, not every quarter second), and a failed
/// read keeps the last known modes.
final class EnforcementConsoleSource: RolloutConsoleSource, @unchecked Sendable {
    let inner: any RolloutConsoleSource
    let client: AppCheckServicesClient
    let clock: any Clock
    let refresh: Instant.Duration
    private let lock = Lock()
    private var known: [AppCheckService] = []
    private var readAt: Instant?

    init(inner: any RolloutConsoleSource, client: AppCheckServicesClient, clock: any Clock, refresh: Instant.Duration = .seconds(Int64(30))) {
        self.inner = inner
        self.client = client
        self.clock = clock
        self.refresh = refresh
    }

    func status() throws -> RolloutMonitor.Status { try inner.status() }

    func snapshot() throws -> ConsoleModel {
        var model = try inner.snapshot()
        let now = clock.now()
        let services = lock.withLock { () -> [AppCheckService] in
            if readAt.map({ now - $0 >= refresh }) ?? true {
                readAt = now
                if let read = try? client.list() { known = read }
            }
            return known
        }
        model.enforcement = Self.info(services, now: now)
        return model
    }

    /// What the panel shows: each service's mode, and the end of Firebase's 15 minutes after its last change
    /// while they last.
    static func info(_ services: [AppCheckService], now: Instant) -> [EnforcementInfo] {
        services.map { s in
            let changed = s.updateTime.flatMap { ISO8601.parse($0) }
            let by = changed.map { $0 + .minutes(15) }.flatMap { $0 > now ? $0 : nil }
            return EnforcementInfo(service: s.id, mode: s.enforcementMode, appliesBy: by)
        }
    }
}
