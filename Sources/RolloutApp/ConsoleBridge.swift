import Console
import Glibc
import Platform
import RampPlans
import Monitoring
import RemoteConfig
import Rollout
import PhoneVerification
import SecurityKey
import StepUp
import SQLiteStore
import Telemetry
import Terminal
import Timekeeping

/// The console's view of a store: builds `ConsoleModel`s from the config store, the telemetry and the verdict.
///
/// Runs on the console's snapshot thread with a connection of its own; everything it reads goes through
/// `RolloutMonitor`, so the screen shows exactly what `rollout status` and the guardrail policy see. The monitor
/// runs on the wall clock and takes telemetry time from the store (a live simulation's heartbeat). With a
/// writable session for auto-kill, a running console is one of the processes that act on HALT: each refresh
/// that computes HALT while the rollout exposes anyone publishes a kill (compare-and-swap: one kill between
/// any number of consoles and watchers).
public final class StoreConsoleSource: ConsoleDataSource, @unchecked Sendable {
    private let monitor: RolloutMonitor
    /// Whether step-up is on (the header shows it), from the store's step-up port.
    private let stepUp: any StepUpStore
    /// The store's ramp plan (the plan panel).
    private let plans: any RampPlanStore
    private let operatorID: String
    /// Why the console cannot write (`--read-only`, a store file this user cannot write), nil when it can.
    private let readOnlyCause: ReadOnlyCause?
    private let storeLabel: String
    private let project: String
    private let autoKill: (any ConsoleWriteSession)?
    private let lock = Lock()
    private var positions = PositionCache()
    private var autoKillPath: WritePath?
    private var autoKillNote: NotableEvent?
    /// Why the store file is no longer the one opened (removed, replaced, truncated), nil while it is; a file
    /// store's source checks it on every refresh, the others have no file to lose.
    private let identityProblem: (() -> String?)?
    /// Latched: once the store is lost, the console stays read-only on the last picture, whatever the path holds
    /// later (a file moved back there is not known to be the one opened).
    private var lost: String?
    private var lastModel: ConsoleModel?
    private var charts = ChartHistoryReader()

    public init(
        path: String, clock: Clock, operatorID: String, readOnly: Bool, project: String, autoKill: (any ConsoleWriteSession)? = nil
    ) throws {
        let store = try RolloutStore(path: path, create: false, access: readOnly ? .readOnly : .readWrite)
        monitor = try RolloutMonitor(store: store, clock: clock)
        stepUp = SQLiteStepUpStore(store: store)
        plans = SQLiteRampPlans(store: store)
        self.operatorID = operatorID
        // The connection knows: `--read-only`, or a file this user cannot write (SQLite opened it read-only).
        readOnlyCause = store.readOnlyCause
        storeLabel = "sqlite " + ConsoleText.abbreviatingHome(path)
        self.project = project
        self.autoKill = store.isReadOnly ? nil : autoKill
        identityProblem = { [store] in store.identityProblem() }
    }

    /// The same on a monitor and ports built elsewhere (a Firebase store: `FirebaseWiring.consoleSource`; a
    /// PostgreSQL store: `PostgresConsoleSource`).
    public init(
        monitor: RolloutMonitor, stepUp: any StepUpStore, plans: any RampPlanStore, storeLabel: String,
        operatorID: String, readOnly: Bool, project: String, autoKill: (any ConsoleWriteSession)? = nil
    ) {
        self.monitor = monitor
        self.stepUp = stepUp
        self.plans = plans
        self.operatorID = operatorID
        readOnlyCause = readOnly ? .requested : nil
        self.storeLabel = storeLabel
        self.project = project
        self.autoKill = readOnly ? nil : autoKill
        identityProblem = nil
    }

    public func snapshot() throws -> ConsoleModel {
        try lock.withLock {
            if lost == nil, let problem = identityProblem?() { lost = problem }
            if let lost {
                // The connection still reads the file it opened, which nobody writes to any more: its picture
                // would look live. The last one seen while the store was there stays, marked, and nothing acts.
                guard var model = lastModel else {
                    throw StoreError.unavailable("the store was removed or replaced (\(lost)); open it again")
                }
                model.header.storeLost = "the store was removed or replaced (\(lost))"
                model.header.readOnly = true
                model.header.staleReason = model.header.storeLost
                return model
            }
            let model = try currentModel()
            lastModel = model
            return model
        }
    }

    private func currentModel() throws -> ConsoleModel {
        var status = try monitor.status()
        if let autoKill {
            if autoKillPath == nil { autoKillPath = try autoKill.writePath() }
            if case .published(let stored, let proposal, _)? = try monitor.autoKillIfHalted(status, using: autoKillPath!) {
                autoKillNote = NotableEvent(
                    at: status.wallNow, severity: .critical,
                    text: "auto-kill published version \(stored.info.number): \(proposal.summary)")
                status = try monitor.status()
            }
        }
        let stepUp = try stepUp.enforcement().enforced
        var changes = try positions.changes(monitor.config, newest: status.current, limit: 12)
        // The charts mark changes on telemetry time (a simulation's, on its store); the log keeps wall time.
        let timeline = try monitor.timeline()
        for i in changes.indices { changes[i].telemetryAt = timeline.telemetryTime(ofWall: changes[i].at) }
        var model = ConsoleModelBuilder.model(
            status: status, changes: changes, header: .init(store: storeLabel, project: project, operatorID: operatorID),
            readOnly: readOnlyCause, stepUp: stepUp)
        if let autoKillNote { model.events.insert(autoKillNote, at: 0) }
        // Ramp plans live in the store's `ramp_plan` table (a file store, Firebase's state store, PostgreSQL).
        model.plan = try ConsolePlan.info(plans: plans, status: status)
        model.history = try charts.history(monitor.telemetry, status: status)
        return model
    }

    /// The model at the current instant without acting (tests compare it with `status` and `telemetry`).
    public func status() throws -> RolloutMonitor.Status { try lock.withLock { try monitor.status() } }
}

/// The security key the console's step-up uses: where it is, its PIN from the environment, how long it waits.
public struct ConsoleSecurityKey: Sendable {
    /// The device (`$ROLLOUT_SECURITY_KEY`, else the first connected), looked up when a change is approved.
    public var device: @Sendable () throws -> SecurityKeyDevice
    /// How long the key waits for a touch (the dialog's countdown).
    public var timeoutSeconds: Int
    /// The key's PIN given beforehand (`$ROLLOUT_SECURITY_KEY_PIN`); without it the console asks when the key does.
    public var pin: String?

    public init(device: @escaping @Sendable () throws -> SecurityKeyDevice, timeoutSeconds: Int = 30, pin: String? = nil) {
        self.device = device
        self.timeoutSeconds = timeoutSeconds
        self.pin = pin
    }

    /// The key of this process's environment.
    public static let fromEnvironment = ConsoleSecurityKey(
        device: { try StepUpMethods.securityKeyDevice() }, pin: StepUpMethods.securityKeyPIN())
}

/// Runs the console's effects through the one write path, with a connection of its own.
public final class StoreConsoleExecutor: ConsoleEffectExecutor, @unchecked Sendable {
    private let session: any ConsoleWriteSession
    private let securityKey: ConsoleSecurityKey
    /// The phone verification provider, nil when none is configured (`$ROLLOUT_VONAGE_CREDENTIALS`).
    private let phone: (@Sendable () throws -> VonageVerifyClient)?
    /// The provider's verification of each publish request that started one.
    private var verifications: [Int: (verification: String, request: ConfirmedChange)] = [:]
    /// The step-up policy's phone port (started verifications and the answers asked ahead), made on first use.
    private var phoneCodes: VonagePhoneCodes?
    private let lock = Lock()
    /// The security-key approvals in flight by publish request id, which `interrupt` cancels (its own lock: it
    /// runs while `perform` holds `lock`).
    private let cancellations = Lock()
    private var pendingKeys: [Int: SecurityKeyCancellation] = [:]
    private var abandoned: Set<Int> = []
    private var positions = PositionCache()
    /// One write path (and its policies' readers) for the whole session, built on first use.
    private var cachedPath: WritePath?
    private var cachedMonitor: RolloutMonitor?

    public init(
        session: any ConsoleWriteSession, securityKey: ConsoleSecurityKey = .fromEnvironment,
        phone: (@Sendable () throws -> VonageVerifyClient)? = StoreConsoleExecutor.phoneFromEnvironment()
    ) {
        self.session = session
        self.securityKey = securityKey
        self.phone = phone
    }

    /// The Verify client of this process's environment, when `$ROLLOUT_VONAGE_CREDENTIALS` names one.
    public static func phoneFromEnvironment(
        _ environment: [String: String] = Environment.current
    ) -> (@Sendable () throws -> VonageVerifyClient)? {
        guard let path = environment["ROLLOUT_VONAGE_CREDENTIALS"], !path.isEmpty else { return nil }
        return { try StepUpMethods.phoneClient(environment: environment) }
    }

    /// `.cancelApproval`: the key's request is cancelled on the device, and whatever it returns is not published.
    public func interrupt(_ effect: ConsoleEffect) {
        guard case .cancelApproval(let id) = effect else { return }
        cancellations.withLock {
            abandoned.insert(id)
            pendingKeys[id]?.cancel()
        }
    }

    private func writePath() throws -> WritePath {
        if let cachedPath { return cachedPath }
        let path = try session.writePath()
        cachedPath = path
        return path
    }

    private func monitor() throws -> RolloutMonitor {
        if let cachedMonitor { return cachedMonitor }
        let m = try session.monitor()
        cachedMonitor = m
        return m
    }

    public static let origin = "ROLLOUT_CONSOLE"

    public func perform(_ effect: ConsoleEffect) -> [ConsoleEvent] {
        lock.withLock {
            switch effect {
            case .preview(let request): return [preview(request)]
            case .publish(let request): return publish(request)
            case .loadHistory:
                do {
                    return [.historyLoaded(try positions.changes(session.consoleConfig, newest: session.consoleConfig.current(), limit: 200))]
                } catch {
                    return [.loadFailed(message: ConsoleText.oneLine(error))]
                }
            case .loadAudit: return [loadAudit()]
            case .loadVersion(let number): return [loadVersion(number)]
            case .planControl(let pause, let code):
                // Ramp plans live in every store (a file store, Firebase's state store, PostgreSQL).
                return [ConsolePlan.control(pause: pause, code: code, session: session.planSession)]
            case .approveRequest(let id, let request): return approveRequest(request, id: id)
            case .phoneStart(let request): return phoneStart(request)
            case .phoneCall(let id): return phoneCall(id)
            case .phoneCancel(let id): return phoneCancel(id)
            case .refresh, .redraw, .bell, .quit, .simulation, .cancelApproval: return []
            }
        }
    }

    private func preview(_ request: ChangeRequest) -> ConsoleEvent {
        do {
            let current = try session.consoleConfig.current()
            let path = try writePath()
            let writeRequest = WritePath.Request(
                intent: request.operation.intent(base: current.info.number), actor: session.operatorID, origin: Self.origin)
            let preview = try path.preview(writeRequest)
            if preview.isNoChange {
                return .writeRefused(requestID: request.id, .nothingToChange(summary: preview.proposal.summary))
            }
            let status = try monitor().status()
            var shown = ConsoleModelBuilder.preview(
                request, preview, verdict: status.assessment.verdict.level, fleet: status.snapshot.activity,
                budget: status.settings.budget, readOnly: session.readOnly,
                propagation: status.assessment.exposure.propagation)
            try offerSecondFactors(&shown, preview.proposal, on: path)
            return .previewReady(shown)
        } catch let failure as WritePath.Failure {
            return .writeRefused(requestID: request.id, WriteRefusal(failure))
        } catch {
            return .previewFailed(requestID: request.id, message: ConsoleText.oneLine(error))
        }
    }

    /// The second factors the policy accepts for this change and the operator has enrolled: a one-time code,
    /// and the security key when one is enrolled in this store. (A phone is not offered in the console yet: the
    /// CLI's `--phone` approves with it.)
    private func offerSecondFactors(_ shown: inout ChangePreview, _ proposal: Proposal, on path: WritePath) throws {
        guard let policy = path.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first,
            try !policy.stepUpReasons(for: proposal).isEmpty
        else { return }
        var options: [StepUpOption] = []
        if try policy.accepts(.totp, for: proposal) { options.append(.code) }
        if try policy.accepts(.securityKey, for: proposal), try policy.securityKey(of: session.operatorID) != nil {
            options.append(.securityKey)
            // A locked one-time code does not lock the key: the key can still approve.
            shown.requiresStepUp = true
        }
        if phone != nil, try policy.accepts(.phone, for: proposal), try policy.phoneEnrolment(of: session.operatorID) != nil {
            options.append(.phone)
            shown.requiresStepUp = true
        }
        if !options.isEmpty { shown.stepUpOptions = options }
        shown.securityKeySeconds = securityKey.timeoutSeconds
    }

    /// A cancellation for request `id`'s key, which `interrupt` (Esc) can reach while the key waits; already
    /// cancelled when Esc came before the request did.
    private func registerCancellation(_ id: Int) -> SecurityKeyCancellation {
        let cancellation = SecurityKeyCancellation()
        let cancelled = cancellations.withLock { () -> Bool in
            pendingKeys[id] = cancellation
            return abandoned.contains(id)
        }
        if cancelled { cancellation.cancel() }
        return cancellation
    }

    /// Request `id`'s key is done with: its cancellation and any Esc that came for it are forgotten.
    private func forgetCancellation(_ id: Int) {
        cancellations.withLock {
            pendingKeys[id] = nil
            abandoned.remove(id)
        }
    }

    /// The publish of a confirmed change; with the security key, the key signs the change document first (the
    /// publish is abandoned, with no answer, when the operator cancelled meanwhile).
    private func publish(_ request: ConfirmedChange) -> [ConsoleEvent] {
        let id = request.preview.request.id
        do {
            var writeRequest = request.writeRequest(actor: session.operatorID, origin: Self.origin)
            if request.phone { return try phoneCheck(request, writeRequest) }
            if request.securityKey {
                let cancellation = registerCancellation(id)
                defer { forgetCancellation(id) }
                do {
                    writeRequest = try StepUpMethods.approveWithSecurityKey(
                        writeRequest, on: try writePath(), device: try securityKey.device(), pin: request.securityKeyPIN ?? securityKey.pin,
                        timeoutMilliseconds: securityKey.timeoutSeconds * 1000, cancellation: cancellation, notice: { _ in })
                } catch let error as SecurityKeyError {
                    if cancellation.isCancelled { return [] }
                    if error.needsPIN { return [.securityKeyNeedsPIN(requestID: id)] }
                    return [.publishFailed(requestID: id, message: error.description)]
                }
                // Whatever the key returned after Esc is not used: nothing is published.
                if cancellation.isCancelled { return [] }
            }
            return [try execute(writeRequest, id: id, request)]
        } catch let failure as WritePath.Failure {
            return [refused(failure, id: id, request)]
        } catch {
            return [.publishFailed(requestID: id, message: ConsoleText.oneLine(error))]
        }
    }

    /// `:approve REQUEST`: this operator's key approves another operator's two-person request and the write path
    /// publishes it (`rollout approve`); Esc (`interrupt`) cancels the key, and nothing is published after it.
    private func approveRequest(_ request: String, id: Int) -> [ConsoleEvent] {
        let cancellation = registerCancellation(id)
        defer { forgetCancellation(id) }
        do {
            let outcome = try session.approveTwoPersonRequest(
                request, device: securityKey.device, pin: securityKey.pin,
                timeoutMilliseconds: securityKey.timeoutSeconds * 1000, cancellation: cancellation)
            switch outcome {
            case .published(let stored, let proposal, _):
                return [
                    .published(
                        PublishReceipt(
                            requestID: id, version: String(stored.info.number), from: RolloutPosition(proposal.before),
                            to: RolloutPosition(proposal.after)))
                ]
            case .unchanged(_, let proposal):
                return [.writeRefused(requestID: id, .nothingToChange(summary: proposal.summary))]
            }
        } catch _ where cancellation.isCancelled {
            return []
        } catch let failure as WritePath.Failure {
            return [.writeRefused(requestID: id, WriteRefusal(failure))]
        } catch let error as SecurityKeyError where error.needsPIN {
            return [
                .publishFailed(
                    requestID: id,
                    message: "the security key asks for its PIN: set $ROLLOUT_SECURITY_KEY_PIN, or use 'rollout approve \(request)'")
            ]
        } catch {
            if let refusal = SessionRefusal(error), refusal.kind != .unsupported {
                return [.writeRefused(requestID: id, .readOnly(.requested))]
            }
            return [.publishFailed(requestID: id, message: ConsoleText.oneLine(error))]
        }
    }

    private func execute(
        _ writeRequest: WritePath.Request, id: Int, _ request: ConfirmedChange, on path: WritePath? = nil
    ) throws -> ConsoleEvent {
        switch try (path ?? writePath()).execute(writeRequest) {
        case .published(let stored, let proposal, _):
            return .published(
                PublishReceipt(
                    requestID: id, version: String(stored.info.number), from: RolloutPosition(proposal.before),
                    to: RolloutPosition(proposal.after)))
        case .unchanged(_, let proposal):
            return .writeRefused(requestID: id, .nothingToChange(summary: proposal.summary))
        }
    }

    private func refused(_ failure: WritePath.Failure, id: Int, _ request: ConfirmedChange) -> ConsoleEvent {
        let refusal = WriteRefusal(failure)
        guard case .conflict(let report) = refusal else { return .writeRefused(requestID: id, refusal) }
        // The conflict dialog lists what was published since the preview's base.
        let base = Int(request.preview.baseVersion) ?? 0
        let intervening = (try? positions.changes(session.consoleConfig, newest: report.current, limit: 20))?.filter {
            (Int($0.version) ?? 0) > base
        }
        return .writeRefused(requestID: id, refusal, intervening: intervening ?? [])
    }

    // MARK: Phone verification, one step per effect (the CLI's `StepUpMethods.publishWithPhone` in a loop)

    /// The write path with its step-up policy given the phone port, and that policy; nil when the path has none.
    private func phonePolicy(_ codes: VonagePhoneCodes) throws -> (StepUpWritePolicy, WritePath)? {
        let path = try writePath()
        guard let unwired = path.policies.lazy.compactMap({ $0 as? StepUpWritePolicy }).first else { return nil }
        let policy = unwired.checkingPhoneCodes(with: codes)
        return (policy, path.replacingStepUp(with: policy))
    }

    private func codes() throws -> VonagePhoneCodes? {
        if let phoneCodes { return phoneCodes }
        guard let phone else { return nil }
        let made = VonagePhoneCodes(client: try phone())
        phoneCodes = made
        return made
    }

    /// The write path's answer to `request` with `submission` (a code the policy checks through the phone port, or
    /// why none was checked): audited, counted towards the phone method's lockout.
    private func submitPhone(
        _ request: ConfirmedChange, verification: String, _ submission: PhoneApproval.Submission, on path: WritePath
    ) -> ConsoleEvent {
        var writeRequest = request.writeRequest(actor: session.operatorID, origin: Self.origin)
        writeRequest.phoneApproval = PhoneApproval(verification: verification, submission: submission)
        do {
            return try execute(writeRequest, id: request.preview.request.id, request, on: path)
        } catch let failure as WritePath.Failure {
            return refused(failure, id: request.preview.request.id, request)
        } catch {
            return .publishFailed(requestID: request.preview.request.id, message: ConsoleText.oneLine(error))
        }
    }

    private func phoneStart(_ request: ConfirmedChange) -> [ConsoleEvent] {
        let id = request.preview.request.id
        do {
            guard let codes = try codes(), let (policy, path) = try phonePolicy(codes) else {
                return [.publishFailed(requestID: id, message: "phone verification is not configured ($ROLLOUT_VONAGE_CREDENTIALS)")]
            }
            let proposal = try path.preview(request.writeRequest(actor: session.operatorID, origin: Self.origin)).proposal
            guard let enrolment = try policy.phoneEnrolment(of: session.operatorID) else {
                return [.publishFailed(requestID: id, message: "\(session.operatorID) has no phone in this store")]
            }
            // A method the policy does not accept, or a locked one: refused (and audited) before anything is sent.
            if try !policy.accepts(.phone, for: proposal) || enrolment.isLockedOut(at: path.clock.now()) {
                return [submitPhone(request, verification: "-", .notChecked("not started"), on: path)]
            }
            let verification: String
            do {
                verification = try codes.start(number: enrolment.number, binding: policy.phoneBinding(for: proposal))
            } catch {
                return [submitPhone(request, verification: "-", .notChecked("\(error)"), on: path)]
            }
            verifications[id] = (verification, request)
            return [
                .phoneStatus(
                    requestID: id,
                    status: "provider: a code by SMS to \(enrolment.masked), then a voice call (verification \(verification))")
            ]
        } catch let failure as WritePath.Failure {
            return [refused(failure, id: id, request)]
        } catch {
            return [.publishFailed(requestID: id, message: ConsoleText.oneLine(error))]
        }
    }

    /// The code typed: the provider is asked before the write path's transaction (the only place the code goes),
    /// and the step-up policy takes that answer for this change through its phone port.
    private func phoneCheck(_ request: ConfirmedChange, _ writeRequest: WritePath.Request) throws -> [ConsoleEvent] {
        let id = request.preview.request.id
        guard let codes = try codes(), let verification = verifications[id]?.verification, let code = request.phoneCode,
            let (policy, path) = try phonePolicy(codes), let enrolment = try policy.phoneEnrolment(of: session.operatorID)
        else {
            return [.publishFailed(requestID: id, message: "no phone verification was started for this change")]
        }
        let proposal = try path.preview(writeRequest).proposal
        codes.checkAhead(
            verification: verification, code: code, number: enrolment.number, binding: policy.phoneBinding(for: proposal))
        let answer = submitPhone(request, verification: verification, .code(code), on: path)
        guard codes.lastOutcome(verification) != .wrong else { return [answer] }
        // The provider's verification is over: a refused change cannot take another code.
        verifications[id] = nil
        if case .writeRefused = answer { return [answer, .phoneEnded(requestID: id)] }
        return [answer]
    }

    private func phoneCall(_ id: Int) -> [ConsoleEvent] {
        guard let phone, let verification = verifications[id]?.verification else { return [] }
        do {
            try phone().nextChannel(verification)
            return [.phoneStatus(requestID: id, status: "provider: calling your phone now to read the same code (voice)")]
        } catch {
            return [.phoneStatus(requestID: id, status: "provider: \(error)")]
        }
    }

    /// Esc: the provider's verification is cancelled (DELETE), and the change goes to the write path without a code,
    /// as the CLI's empty line does (`PhoneApproval.Submission.cancelled`): refused and audited (a verification was
    /// sent to the operator's phone; the audit log says it was given up), no attempt counted. The dialog is already
    /// closed, so the refusal's answer adds nothing on screen.
    private func phoneCancel(_ id: Int) -> [ConsoleEvent] {
        guard let phone, let started = verifications.removeValue(forKey: id) else { return [] }
        try? phone().cancel(started.verification)
        guard let codes = try? codes(), let (_, path) = try? phonePolicy(codes) else { return [] }
        return [submitPhone(started.request, verification: started.verification, .cancelled, on: path)]
    }

    /// One version for the drill-down: its record (who, when, from → to, why) and the core's diff against the
    /// version before it.
    private func loadVersion(_ number: Int) -> ConsoleEvent {
        do {
            let current = try session.consoleConfig.current()
            let stored = number == current.info.number ? current : try session.consoleConfig.version(number)
            let previous = number > 1 ? try session.consoleConfig.version(number - 1) : nil
            let diff = previous.map { TemplateDiff.lines(from: $0.template, to: stored.template) } ?? ["+ the first version"]
            let record = try positions.changes(session.consoleConfig, newest: current, limit: 1, through: number).first
                ?? ChangeRecord(
                    version: String(number), at: stored.info.updateTime, actor: stored.info.updateUser, kind: nil,
                    from: RolloutPosition(microPercent: .zero),
                    to: try positions.position(session.consoleConfig, number, newest: current) ?? RolloutPosition(microPercent: .zero),
                    reason: stored.info.description)
            return .versionLoaded(
                VersionDetail(
                    record: record, origin: stored.info.updateOrigin, updateType: stored.info.updateType.rawValue, diff: diff,
                    isCurrent: number == current.info.number))
        } catch {
            return .loadFailed(message: ConsoleText.oneLine(error))
        }
    }

    private func loadAudit() -> ConsoleEvent {
        do {
            let records = try session.consoleConfig.auditRecords(limit: 500, before: nil)
            let approvals = ApprovalTrail.byVersion(records)
            let integrity: AuditLog.Integrity
            do {
                try session.verifyConfigIntegrity()
                integrity = .verified
            } catch let problem as ConfigIntegrityProblem {
                // The record comes from the problem's field; a problem that names no record says its subject.
                integrity = .broken(
                    atSequence: problem.sequence.map { Int($0) },
                    reason: problem.sequence == nil ? problem.description : problem.problem)
            }
            return .auditLoaded(
                AuditLog(
                    entries: records.map {
                        Console.AuditEntry(
                            sequence: Int($0.sequence), at: $0.entry.time, actor: $0.entry.actor, action: $0.entry.action,
                            outcome: $0.entry.result.rawValue,
                            detail: [$0.entry.from.isEmpty ? "" : "\($0.entry.from) → \($0.entry.to)", $0.entry.reason, ConsoleText.visibleDetail($0.entry.detail)]
                                .filter { !$0.isEmpty }.joined(separator: "; "),
                            succeeded: $0.entry.result == .published || $0.entry.result == .stepUpAccepted || $0.entry.result == .recorded,
                            version: $0.entry.version,
                            approvals: $0.entry.result == .published
                                ? $0.entry.version.flatMap { approvals[$0] } ?? [] : ApprovalTrail.approval($0.entry).map { [$0] } ?? [])
                    }, integrity: integrity))
        } catch {
            return .loadFailed(message: ConsoleText.oneLine(error))
        }
    }
}

/// Versions → change records (who, when, from → to, why), with each version's rollout read once.
struct PositionCache {
    private var plans: [Int: RolloutPlan?] = [:]
    /// Versions that rollout's write path published: each has a `published` audit record naming it.
    private var written: Set<Int> = []
    /// Who approved each version rollout published under step-up (`ApprovalTrail`).
    private var approvals: [Int: [ChangeApproval]] = [:]

    mutating func plan(_ store: any ConfigStore, _ number: Int, newest: StoredTemplate) throws -> RolloutPlan? {
        if let p = plans[number] { return p }
        let template = number == newest.info.number ? newest.template : try store.version(number).template
        let p = (try? RolloutPlan.locate(in: template)).flatMap { $0 }
        plans[number] = p
        return p
    }

    mutating func position(_ store: any ConfigStore, _ number: Int, newest: StoredTemplate) throws -> RolloutPosition? {
        try plan(store, number, newest: newest).map { ConsoleModelBuilder.position($0) }
    }

    /// The change records of up to `limit` versions, newest first, from `through` (default: the newest) down.
    mutating func changes(_ store: any ConfigStore, newest: StoredTemplate, limit: Int, through: Int? = nil) throws -> [ChangeRecord] {
        let infos = try store.versions(limit: limit, before: (through ?? newest.info.number) + 1)
        if infos.contains(where: { !written.contains($0.number) }) {
            // The audit log's published records say which versions rollout wrote; the others were made elsewhere.
            let records = try store.auditRecords(limit: max(200, limit * 4), before: nil)
            for r in records where r.entry.result == .published {
                if let v = r.entry.version { written.insert(v) }
            }
            approvals.merge(ApprovalTrail.byVersion(records)) { _, new in new }
        }
        var out: [ChangeRecord] = []
        for info in infos where info.number > 1 {
            guard let after = try plan(store, info.number, newest: newest) else { continue }
            let before = try plan(store, info.number - 1, newest: newest)
            out.append(
                ChangeRecord(
                    version: String(info.number), at: info.updateTime, actor: info.updateUser,
                    kind: written.contains(info.number) ? ConsoleModelBuilder.kind(info, before: before, after: after) : nil,
                    from: ConsoleModelBuilder.position(before), to: ConsoleModelBuilder.position(after), reason: info.description))
            out[out.count - 1].approvals = approvals[info.number] ?? []
        }
        return out
    }
}

/// Core values → the console's view model.
enum ConsoleModelBuilder {
    static func position(_ plan: RolloutPlan?) -> RolloutPosition { RolloutPosition(plan) }

    /// What kind of write rollout made to publish a version, from structured data only: the version's update type
    /// and the rollout before and after it. A change of percentage is a `set`: the version does not record whether
    /// it was typed as a nudge.
    static func kind(_ info: VersionInfo, before: RolloutPlan?, after: RolloutPlan?) -> Proposal.Kind {
        if info.updateType == .rollback { return .rollback }
        switch (before?.state == .killed, after?.state == .killed) {
        case (false, true): return .kill
        case (true, false): return .resume
        default: break
        }
        if before?.percentage != after?.percentage { return .set }
        if before?.seed != after?.seed { return .reseed }
        return .importTemplate
    }

    static func band(_ b: CohortBand) -> PercentileBand {
        PercentileBand(lower: b.lower, upper: b.upper, includesLower: b.includesZero)
    }

    static func model(
        status: RolloutMonitor.Status, changes: [ChangeRecord], header: HeaderInfo, readOnly: ReadOnlyCause?,
        stepUp: Bool
    ) -> ConsoleModel {
        let s = status.snapshot
        let a = status.assessment
        var h = header
        h.templateVersion = String(status.current.info.number)
        h.etag = status.current.etag
        h.dataAsOf = s.newestEvent
        h.readOnly = readOnly != nil
        h.readOnlyCause = readOnly
        h.stepUpEnabled = stepUp
        h.staleAfter = a.context.staleAfter
        if let stale = a.verdict.findings.first(where: { $0.topic == .data && $0.level >= .hold }), s.newestEvent != nil {
            h.staleReason = stale.text
        }

        let plan = status.plan
        let condition = ConditionInfo(
            parameter: plan?.names.parameter ?? RolloutNames.standard.parameter,
            conditionName: plan?.names.exposedCondition ?? RolloutNames.standard.exposedCondition,
            expression: plan?.conditionText ?? "(no rollout condition in the template)",
            desiredMicroPercent: plan?.percentage ?? .zero, observedExposure: a.exposure.observedExposure,
            propagation: a.exposure.propagation, activeDevices: s.activity.active > 0 ? Int(s.activity.active) : nil,
            seed: plan?.seed ?? "", exposedBand: band(plan?.exposedBand ?? RolloutPlan.exposedBand(.zero)),
            controlBand: plan.flatMap { $0.controlBand.isEmpty ? nil : band($0.controlBand) }, state: plan?.state ?? .notStarted,
            held: a.verdict.level >= .hold && a.armed)

        func rates(_ kind: CounterKind) -> WindowRates {
            let w = s.windows
            func at(_ m: Int) -> Double { w.first { $0.minutes == m }?.perMinute(kind) ?? 0 }
            return WindowRates(oneMinute: at(1), fiveMinutes: at(5), fifteenMinutes: at(15))
        }
        let alarmed = Set(s.failureMonitors.filter(\.alarmed).map(\.errorClass))
        // Most failures first; equal counts by name, so that the order does not follow a dictionary's (it moved
        // between two reads of the same store).
        let classes = s.totals.failuresByClass().sorted {
            $0.value != $1.value ? $0.value > $1.value : $0.key.description < $1.key.description
        }.map {
            FailureClass(name: $0.key.description, count: Int($0.value), alarmed: alarmed.contains($0.key))
        }
        let minutes = (s.series + [s.currentMinute]).map {
            Console.MinuteCounts(
                success: Int($0.totals.sum(.attestationSuccess)), failure: Int($0.totals.sum(.attestationFailure)),
                crashes: Int($0.totals.sum(.crash)), sessions: Int($0.totals.sum(.session)))
        }
        var attestation = AttestationInfo(
            successTotal: Int(s.totals.sum(.attestationSuccess)), failureTotal: Int(s.totals.sum(.attestationFailure)),
            successRate: rates(.attestationSuccess), failureRate: rates(.attestationFailure), perMinute: minutes,
            failureClasses: classes, budgetPerMinute: status.settings.budget.perSecond * 60)
        attestation.seriesEnd = s.currentMinute.start

        let t = s.crash.totals
        func stats(users: Int64, crashedUsers: Double?, sessions: Int64, crashRate: Double?) -> CohortCrashStats {
            CohortCrashStats(
                users: Int(users), crashFreeUsers: crashedUsers.map { 1 - $0 }, sessions: Int(sessions),
                crashFreeSessions: crashRate.map { 1 - $0 })
        }
        var difference: IntervalEstimate?
        if let e = s.crash.userDifference.estimate, let i = s.crash.userDifference.interval {
            // Crashed-user share, exposed − control → crash-free users, exposed − control, in points.
            difference = IntervalEstimate(
                estimate: -e * 100, lower: -i.upperBound * 100, upper: -i.lowerBound * 100, confidence: 1 - s.crash.configuration.alpha)
        }
        let mde = s.crash.smallestDetectableIncrease.flatMap { r in t.controlCrashedUserRate.map { $0 * r * 100 } }
        var crash = CrashInfo(
            exposed: stats(users: t.exposedUsers, crashedUsers: t.exposedCrashedUserRate, sessions: t.exposedSessions, crashRate: t.exposedCrashRate),
            control: stats(users: t.controlUsers, crashedUsers: t.controlCrashedUserRate, sessions: t.controlSessions, crashRate: t.controlCrashRate),
            difference: difference, minimumDetectableEffect: mde, verdict: a.verdict.level,
            reasons: [a.verdict.reason] + a.verdict.findings.map(\.text).filter { $0 != a.verdict.reason },
            findings: a.verdict.findings, guardrailsArmed: a.armed, autoKill: status.settings.autoKill)
        crash.windowed = windowed(s.activity)

        // Verdict changes are logged by the console itself, stamped once when they arrive.
        return ConsoleModel(header: h, condition: condition, attestation: attestation, crash: crash, changes: changes)
    }

    /// Crash-free users over the presence window (the current hour and the 23 before it), per arm.
    static func windowed(_ activity: FleetActivity) -> WindowedCrashFree {
        WindowedCrashFree(
            window: "\(FleetActivity.windowHours) h", exposed: activity.crashFreeUsers(.enabled),
            exposedUsers: Int(activity.activeByCohort[.enabled] ?? 0), control: activity.crashFreeUsers(.control),
            controlUsers: Int(activity.activeByCohort[.control] ?? 0))
    }

    /// The confirm dialog's content from the write path's preview.
    static func preview(
        _ request: ChangeRequest, _ p: WritePath.Preview, verdict level: VerdictLevel, fleet: FleetActivity,
        budget: AttestationBudget, readOnly: Bool, propagation: Double? = nil
    ) -> ChangePreview {
        let proposal = p.proposal
        let from = position(proposal.before)
        let to = position(proposal.after)
        let delta = (to.effectiveMicroPercent - from.effectiveMicroPercent).value
        let eligible = Int((Double(fleet.attestCapable) * Double(delta) / 100_000_000).rounded())
        var guardrail = GuardrailAssessment(verdict: .ok, reasons: [])
        var stepUp = false
        var notes = [proposal.summary] + proposal.diff.prefix(6)
        var load: Console.AttestationLoad?
        for report in p.reports {
            if report.source == PolicyIdentity(TelemetryGuardrail.self) {
                var refusal: PolicyRefusal?
                if case .refuse(let r) = report.decision { refusal = r }
                guardrail = GuardrailAssessment(verdict: level, reasons: report.lines, refusal: refusal)
            } else if case .refuse(let r) = report.decision {
                if r.needsStepUpCode { stepUp = true } else { notes.append(r.description) }
                notes += report.lines
            }
        }
        if delta > 0, fleet.active > 0 {
            let l = AttestationForecast.load(
                fromMicroPercent: from.effectiveMicroPercent.value, toMicroPercent: to.effectiveMicroPercent.value, fleet: fleet,
                budget: budget)
            load = Console.AttestationLoad(
                peakPerSecond: l.peakPerSecond, budgetPerSecond: budget.perSecond, perDay: Int(l.perDay), dailyBudget: Int(budget.perDay))
        }
        if readOnly { notes.insert("read-only session: publishing will be refused", at: 0) }
        var preview = ChangePreview(
            request: request, from: from, to: to, baseVersion: String(p.base.info.number), baseETag: p.base.etag,
            eligibleDeviceChange: eligible, load: load, guardrail: guardrail,
            // The write path's rule, not the console's own: it is off with `increase-reason off`, and an increase is
            // judged by what the template does (an import that serves the flag more widely is one).
            requiresReason: p.missingReason != nil, requiresStepUp: stepUp, notes: notes)
        preview.propagation = propagation
        return preview
    }
}

/// Small text helpers for what the console shows.
enum ConsoleText {
    static func oneLine(_ error: Error) -> String {
        "\(error)".replacing("\n", with: " ")
    }

    static func abbreviatingHome(_ path: String) -> String {
        let home = CurrentUser.home
        return home.count > 1 && path.hasPrefix(home + "/") ? "~" + path.dropFirst(home.count) : path
    }

    /// Audit details without the store's internal digests.
    static func visibleDetail(_ detail: String) -> String {
        detail.split(separator: ";").map { $0.trimmingSpaces() }.filter { !$0.hasPrefix("version sha256:") }
            .joined(separator: "; ")
    }
}
