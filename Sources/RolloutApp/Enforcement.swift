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
/// the service again. When that read fails too (or the sender is stopped mid-change), the outcome is unknown and
/// the request stays open in the audit log (`OpenEnforcementRequest`) until the next command that touches the
/// service settles it. No change to enforcement is ever unaudited, nor audited as what it was not.
public struct EnforcementPath {
    public let session: RolloutSession
    public let client: AppCheckServicesClient

    public init(session: RolloutSession, client: AppCheckServicesClient) {
        self.session = session
        self.client = client
    }

    /// Every service App Check can enforce on, as Firebase has it now; a change another command left unknown is
    /// settled from this reading first (`settled` gets each line recorded).
    public func services(settled: (String) -> Void = { _ in }) throws -> [AppCheckService] {
        let services = try client.known()
        let settling = try settleOpenRequests(services.map(\.id)) { id in
            try services.first { $0.id == id } ?? client.get(id)
        }
        settling.settled.forEach(settled)
        return services
    }

    public enum Outcome: Sendable, Equatable {
        /// Already in that mode: nothing sent; `settled`: what was recorded of a request of this service another
        /// command left open (its answer lost), else nothing was recorded.
        case unchanged(AppCheckService, settled: [String])
        /// What would be done (`--dry-run`), after every check.
        case wouldChange(AppCheckService, to: EnforcementMode, rollout: EnforcementGate.Rollout)
        case changed(before: AppCheckService, after: AppCheckService)
    }

    /// The gate refused ENFORCED: the CLI's exit 4, nothing sent or recorded.
    public struct Refusal: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The change was sent, its answer was lost and the service could not be read to settle it: whether Firebase
    /// applied it is unknown. The audit log has it as requested and "answer lost, not yet known"; the next command
    /// that touches the service settles it.
    public struct Unsettled: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Whether trying again later may succeed: an unknown outcome (the next try settles it first), HTTP 429 or
    /// 5xx, or no answer. A plan's enforce step waits on these and ends on any other error.
    public static func isTransient(_ error: any Error) -> Bool {
        switch error {
        case is Unsettled: return true
        case let e as TransportError: return e.isTransient && !e.cancelled
        case FirebaseError.unreachable(_): return true
        case FirebaseError.api(let status, _, _): return status == 429 || status >= 500
        default: return false
        }
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
        // A change of this service another command left open (its answer lost) is settled first, from this
        // reading: finding the service in the mode it asked for closes it as applied, never silently.
        let settling = dryRun ? (settled: [], open: []) : try settleOpenRequests([service], reading: { _ in before })
        if before.enforcementMode == mode { return .unchanged(before, settled: settling.settled) }
        // One that may still be applied (its sender running, or stopped less than the in-flight horizon ago) is
        // not sent over: its outcome first, so that each change is audited once, as what it was.
        if let pending = settling.open.first {
            throw Unsettled(
                description: "a change of \(service) to \(pending.to.rawValue) (audit record #\(pending.sequence)) may still "
                    + "be applied by Firebase: its sender is running or stopped less than "
                    + "\(FirebaseConfigStore.inFlightHorizon.microseconds / 60_000_000) minutes ago; nothing was sent; "
                    + "try again once it shows or that time has passed")
        }
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
        case .unknown(let error, let read):
            try record(before, mode, OpenEnforcementRequest.answerLost(error, read: read))
            throw Unsettled(
                description: "the change of \(before.id) to \(mode.rawValue) was sent, but its answer was lost "
                    + "(\(error)) and reading the service failed (\(read)): whether Firebase applied it is not yet "
                    + "known; the audit log says so, and the next 'rollout enforcement show' or 'set' of it settles it")
        }
        try record(
            before, mode,
            "applied (\(reason)); Firebase etag \(after.etag ?? "none")\(after.updateTime.map { ", updated \($0)" } ?? ""); "
                + "takes effect within 15 minutes\(settled.map { " (\($0))" } ?? "")")
        return after
    }

    /// Settles the open requests of `services` (`OpenEnforcementRequest`) whose senders are gone, by the service as
    /// `reading` reads it: each is recorded once as applied or not applied, in a transaction that checks it is
    /// still open. One whose service cannot be read stays open. Returns what was recorded, one line per request,
    /// and the requests that stay open.
    func settleOpenRequests(_ services: [String], reading: (String) throws -> AppCheckService) throws -> (
        settled: [String], open: [OpenEnforcementRequest]
    ) {
        guard !session.readOnly else { return ([], []) }
        let now = session.clock.now()
        let open = try session.settings.reading { tables in
            try OpenEnforcementRequest.find(Set(services)) { try tables.auditRecords(limit: $0, before: $1) }
        }
        var lines: [String] = []
        var pending: [OpenEnforcementRequest] = []
        for request in open {
            guard !request.isLive(now: now), let service = try? reading(request.service),
                let entry = request.settlement(reading: service, at: session.clock.now(), by: session.operatorID)
            else {
                pending.append(request)
                continue
            }
            let recorded = try session.settings.transaction { tables -> Bool in
                let still = try OpenEnforcementRequest.find([request.service]) {
                    try tables.auditRecords(limit: $0, before: $1)
                }
                guard still.first?.sequence == request.sequence else { return false }
                try tables.appendAudit(entry)
                return true
            }
            if recorded {
                lines.append("\(request.service) \(request.from.rawValue) → \(request.to.rawValue): \(entry.detail)")
            }
        }
        return (lines, pending)
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
        // Changes another command left unknown (its answer lost) are settled first, from the same reading.
        let now = clock.now()
        let ids = Set(AppCheckServicesClient.knownServices + services.map(\.id))
        for request in try OpenEnforcementRequest.find(ids, in: context.auditRecords) where !request.isLive(now: now) {
            let reading =
                services.first { $0.id == request.service }
                ?? AppCheckService(name: request.service, enforcementMode: .off)
            if let entry = request.settlement(reading: reading, at: clock.now(), by: p.actor) {
                try context.audit(entry)
            }
        }
        for s in services where s.enforcementMode == .enforced {
            try record(
                s.id, "ENFORCED", "UNENFORCED",
                "requested before a \(p.kind.rawValue) (\(p.reason)); \(OpenEnforcementRequest.sentNext)")
            let outcome = client.change(s, to: .unenforced, reading: reads)
            switch outcome {
            case .applied(let after, settled: nil):
                try record(s.id, "ENFORCED", "UNENFORCED", "applied; Firebase etag \(after.etag ?? "none")")
            case .applied(let now, settled: let why?):
                try record(s.id, "ENFORCED", now.enforcementMode.rawValue, "applied (\(why))")
            case .failed(let error), .unknown(let error, _):
                if case .unknown(_, let read) = outcome {
                    try record(s.id, "ENFORCED", "UNENFORCED", OpenEnforcementRequest.answerLost(error, read: read))
                } else {
                    try record(s.id, "ENFORCED", "UNENFORCED", "not applied: \(error)")
                }
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
        /// Not applied: Firebase said so, nothing was sent, or reading the service showed no change.
        case failed(any Error)
        /// Sent, without an answer that says what became of it (lost, or an error that may come after applying
        /// it), and reading the service failed too (`read`): nobody knows yet.
        case unknown(any Error, read: any Error)
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
            let now: AppCheckService
            do {
                now = try (reading ?? self).get(before.id)
            } catch let read {
                return answered == nil && Self.mayHaveApplied(error) ? .unknown(error, read: read) : .failed(error)
            }
            if now.enforcementMode == mode && now.etag != before.etag
                || mode < before.enforcementMode && now.enforcementMode < before.enforcementMode
            {
                let why: String
                if let answered {
                    why = "its answer said \(answered.enforcementMode.rawValue); reading it again showed the change"
                } else if case FirebaseError.api(_, _, _) = error {
                    why = "it was answered with an error (\(error)); reading it again showed the change"
                } else {
                    why = "the answer was lost"
                }
                return .applied(now, settled: why)
            }
            return .failed(error)
        }
    }

    /// Whether Firebase may have applied a change that failed with `error`: no answer, or an answer (429, 5xx,
    /// garbled) that does not say it was not. A 4xx, or a request never sent, says it was not.
    static func mayHaveApplied(_ error: any Error) -> Bool {
        switch error {
        case let e as TransportError: return e.mayHaveArrived
        case FirebaseError.api(let status, _, _): return status == 429 || status >= 500 || status == 408
        case FirebaseError.protocolViolation(_): return true
        default: return false
        }
    }
}

/// An App Check enforcement change the audit log has as requested and not yet as applied or not applied: its
/// sender was stopped (SIGKILL, a crash) between its request and its answer, or recorded that the answer was lost
/// and reading the service failed ("answer lost, not yet known").
///
/// It lives in the audit log, as Remote Config publishes live in their intents: the request is committed before
/// anything is sent, on every backend (store file, PostgreSQL team store, Firebase's state store) through the
/// ports they all have, so no table of its own is needed. The next command that touches the service (`enforcement
/// show` and `set`, a plan's enforce step, a kill or any lowering) settles it by reading the service and records
/// "applied (settled later …)" or "not applied (settled later …)" once, in a transaction that checks it is still
/// open. A request whose sender may still answer it (a live process on this host, or one elsewhere younger than
/// `FirebaseConfigStore.inFlightHorizon`) is left to its sender.
struct OpenEnforcementRequest: Sendable, Equatable {
    var service: String
    var from: EnforcementMode
    var to: EnforcementMode
    /// The newest record of it: the request, or its sender's "answer lost".
    var sequence: Int64
    var time: Instant
    /// The process that sends it, when the request names it.
    var pid: Int32?
    var host: String?
    /// Its sender gave up on the answer: only the next command settles it.
    var answerLost: Bool

    /// How many of the newest audit records are searched for a service's last enforcement record.
    static let searchLimit = 10_000
    static let answerLostPrefix = "answer lost, not yet known"

    /// How a request names its sender (this process), so that others leave it alone while it lives.
    static var sentNext: String {
        let me = FirebaseConfigStore.thisProcess
        return "sent to Firebase next by process \(me.pid) on \(me.host)"
    }

    /// The sender's record of an answer lost (`error`) and a failed read (`read`): the request stays open.
    static func answerLost(_ error: any Error, read: any Error) -> String {
        "\(answerLostPrefix): \(error); reading the service failed (\(read)); the next command that touches its "
            + "enforcement settles it"
    }

    /// What `record` says of its service's enforcement: its service, and the open request when it opens or keeps one
    /// open (nil when it closes one); nil for any other record.
    static func read(_ record: Rollout.AuditRecord) -> (service: String, open: OpenEnforcementRequest?)? {
        let e = record.entry
        let prefix = "appcheck enforcement "
        guard e.action.hasPrefix(prefix) else { return nil }
        let words = e.action.dropFirst(prefix.count).split(separator: " ").map(String.init)
        guard let service = words.first, service != "(unread)" else { return nil }
        if e.detail.hasPrefix("applied") || e.detail.hasPrefix("not applied") { return (service, nil) }
        let from: EnforcementMode?
        let to: EnforcementMode?
        let text: String
        // `enforcement set`'s request: "appcheck enforcement S FROM → TO", "requested (…); sent … by process …".
        if e.to.hasPrefix("requested"), words.count == 4, words[2] == "→" {
            (from, to, text) = (EnforcementMode(rawValue: words[1]), EnforcementMode(rawValue: words[3]), e.to)
        } else if e.detail.hasPrefix("requested") || e.detail.hasPrefix(answerLostPrefix) {
            // A kill's request, or a sender's "answer lost".
            (from, to, text) = (EnforcementMode(rawValue: e.from), EnforcementMode(rawValue: e.to), e.detail)
        } else {
            return nil
        }
        guard let from, let to else { return nil }
        var pid: Int32?
        var host: String?
        // "… by process PID on HOST, …" (`sentNext`).
        let said = text.split(separator: " ").map(String.init)
        if let i = said.indices.first(where: { $0 + 4 < said.count && said[$0] == "by" && said[$0 + 1] == "process" }),
            said[i + 3] == "on"
        {
            pid = Int32(said[i + 2])
            host = String(said[i + 4].prefix { $0 != "," && $0 != ";" })
        }
        return (
            service,
            OpenEnforcementRequest(
                service: service, from: from, to: to, sequence: record.sequence, time: e.time, pid: pid, host: host,
                answerLost: e.detail.hasPrefix(answerLostPrefix))
        )
    }

    /// The open requests among `services`: for each, its newest enforcement record when that opens a request or
    /// keeps it open, searched newest first in the newest `searchLimit` records.
    static func find(
        _ services: Set<String>, in auditRecords: (_ limit: Int, _ before: Int64?) throws -> [Rollout.AuditRecord]
    ) throws -> [OpenEnforcementRequest] {
        var decided: Set<String> = []
        var open: [OpenEnforcementRequest] = []
        var before: Int64?
        var searched = 0
        let page = 500
        while searched < searchLimit, !services.isSubset(of: decided) {
            let records = try auditRecords(page, before)
            for record in records {
                guard let found = read(record), services.contains(found.service), !decided.contains(found.service)
                else { continue }
                decided.insert(found.service)
                if let request = found.open { open.append(request) }
            }
            searched += records.count
            guard records.count == page, let last = records.last else { break }
            before = last.sequence
        }
        return open
    }

    /// Whether its sender may still record the answer itself: it did not give up, it is younger than the in-flight
    /// horizon, and it runs (this host: a live pid; elsewhere: assumed).
    func isLive(now: Instant) -> Bool {
        if answerLost || now - time >= FirebaseConfigStore.inFlightHorizon { return false }
        guard let pid, let host else { return true }
        return FirebaseConfigStore.runs(pid: pid, host: host) ?? true
    }

    /// The record that settles it by the service as `now` reads it at `time`: applied when it has the requested mode
    /// (or, for a lowering, any mode below the one it had), else not applied; nil while a change its stopped sender
    /// had sent may still be applied by Firebase (younger than the in-flight horizon): it stays open until then.
    func settlement(reading now: AppCheckService, at time: Instant, by actor: String) -> Rollout.AuditEntry? {
        let applied = now.enforcementMode == to || to < from && now.enforcementMode < from
        if !applied, !answerLost, time - self.time < FirebaseConfigStore.inFlightHorizon { return nil }
        let why = answerLost ? "its answer was lost" : "its sender stopped before recording the answer"
        let seen =
            "settled later: record #\(sequence) (\(why)); reading the service shows \(now.enforcementMode.rawValue)"
            + (now.etag.map { ", etag \($0)" } ?? "") + (now.updateTime.map { ", updated \($0)" } ?? "")
        return Rollout.AuditEntry(
            time: time, actor: actor, action: "appcheck enforcement \(service)", from: from.rawValue,
            to: applied ? now.enforcementMode.rawValue : to.rawValue, result: .recorded,
            detail: applied ? "applied (\(seen)); takes effect within 15 minutes" : "not applied (\(seen))")
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
