import Console
import Glibc
import Monitoring
import PostgresStore
import RampPlans
import RemoteConfig
import Rollout
import StepUp
import SQLiteStore
import Telemetry
import Timekeeping

/// A ramp plan as stored: the plan, its state, and the row (with the revision its compare-and-swap needs).
public struct StoredRampPlan: Sendable {
    public var plan: RampPlan
    public var state: RampState
    public var row: RampPlanTable.Row
    /// The pre-approval of its protected steps while it is in force (the plan running, unchanged), else nil.
    public var approval: StepUpPreApproval?
    /// The plan's id (`PlanStepOrigin.plan` of its advances).
    public var id: String { RampPlanTable.planID(row) }
}

/// Why a plan command did nothing.
public struct RampPlanFailure: Error, Sendable, CustomStringConvertible {
    /// What a caller decides on (the CLI's exit code); never the words.
    public enum Kind: Sendable {
        /// The plan or the store is not in a state that allows it.
        case failure
        /// A usage problem (a plan file that does not parse).
        case usage
        /// Refused, as the write path would refuse it (a step-up code).
        case refused(WriteRefusal)
    }

    public var description: String
    public var kind: Kind
    public var isUsage: Bool { if case .usage = kind { true } else { false } }

    public init(_ description: String, kind: Kind = .failure) {
        self.description = description
        self.kind = kind
    }
}

/// What the plan commands, the runner and the console's plan keys work with, whichever store holds the plan: the
/// plan port, the step-up port, the config store (audit records), who acts, the clock, and the session's monitor
/// and write path. Built by `StoreSession.planSession` (a store file, or Firebase's state store) and
/// `TeamSession.planSession` (PostgreSQL); every write of a plan runs in `plans.atomically`, the store's one write
/// transaction that the write path's publish, the step-up attempt and their audit records join.
public struct PlanSession {
    public let plans: any RampPlanStore
    public let stepUp: any StepUpStore
    public let config: any ConfigStore
    public let operatorID: String
    public let clock: any Clock
    /// Why this session refuses every write (`--read-only`, or a store that refuses writes), nil when it writes.
    public let readOnlyCause: ReadOnlyCause?
    public var readOnly: Bool { readOnlyCause != nil }
    /// The config store's publishes join `plans.atomically` (a store file, PostgreSQL), so a runner's look
    /// publishes and records its step in one transaction. False behind Firebase: its publish commits an intent in
    /// the state store before the request goes out, which must not wait for an outer transaction's commit.
    public let publishJoinsPlanTransaction: Bool
    private let makeMonitor: () throws -> RolloutMonitor
    private let makeWritePath: () throws -> WritePath
    /// App Check enforcement for the plan's `step enforce` lines (set by `RolloutSession.planSession`); refuses
    /// (`SessionRefusal.unsupported`) on a store that is not a Firebase project.
    public var enforcement: () throws -> EnforcementPath = {
        throw SessionRefusal(
            .unsupported, "refused: App Check enforcement is a Firebase project's setting: run it with --store firebase:PROJECT")
    }

    public init(
        plans: any RampPlanStore, stepUp: any StepUpStore, config: any ConfigStore, operatorID: String,
        clock: any Clock,
        readOnly: ReadOnlyCause?, publishJoinsPlanTransaction: Bool, monitor: @escaping () throws -> RolloutMonitor,
        writePath: @escaping () throws -> WritePath
    ) {
        self.plans = plans
        self.stepUp = stepUp
        self.config = config
        self.operatorID = operatorID
        self.clock = clock
        readOnlyCause = readOnly ?? (plans.isReadOnly ? .requested : nil)
        self.publishJoinsPlanTransaction = publishJoinsPlanTransaction
        makeMonitor = monitor
        makeWritePath = writePath
    }

    public func monitor() throws -> RolloutMonitor { try makeMonitor() }
    public func writePath() throws -> WritePath { try makeWritePath() }
}

extension StoreSession {
    /// The plan session on this store file (or Firebase's state store).
    public var planSession: PlanSession {
        PlanSession(
            plans: SQLiteRampPlans(store: store), stepUp: SQLiteStepUpStore(store: store), config: config,
            operatorID: operatorID, clock: clock, readOnly: store.readOnlyCause ?? (readOnly ? .requested : nil),
            publishJoinsPlanTransaction: config is SQLiteConfigStore, monitor: monitor, writePath: writePath)
    }
}

extension TeamSession {
    /// The plan session on this PostgreSQL store (`PostgresRampPlans` on the config store's connection); behind
    /// Firebase the templates and their audit records are Firebase's (its audit records land on this connection).
    public var planSession: PlanSession {
        PlanSession(
            plans: PostgresRampPlans(store: config), stepUp: stepUp, config: templates, operatorID: operatorID,
            clock: clock, readOnly: readOnly ? .requested : nil, publishJoinsPlanTransaction: firebase == nil,
            monitor: monitor, writePath: writePath)
    }
}

/// The plan's changes of state (start, pause, resume, abort, and the runner's own), each applied by
/// compare-and-swap on the plan's revision with its audit record in one write transaction. Advances and kills
/// are rollout intents of the one `WritePath`, run by the runner in the transaction of the state they reach.
public struct RampPlanStates {
    public let session: PlanSession

    public init(session: PlanSession) { self.session = session }
    public init(session: StoreSession) { self.init(session: session.planSession) }

    /// The stored plan, nil when none was started.
    public func load() throws -> StoredRampPlan? { try Self.load(session.plans) }

    /// The plan stored in `plans`, with its pre-approval while in force.
    static func load(_ plans: any RampPlanStore) throws -> StoredRampPlan? {
        guard let row = try plans.loadPlan() else { return nil }
        return try decode(row, approval: try plans.activePreApproval())
    }

    static func decode(_ row: RampPlanTable.Row, approval: StepUpPreApproval? = nil) throws -> StoredRampPlan {
        let plan: RampPlan
        do { plan = try RampPlan.parse(row.source) } catch {
            throw RampPlanFailure("the stored plan '\(row.name)' does not read any more: \(error)")
        }
        guard let phase = RampState.Phase(rawValue: row.phase), (0...plan.stepCount).contains(row.reached) else {
            throw RampPlanFailure(
                "the stored state of plan '\(row.name)' is unreadable (\(row.phase), step \(row.reached))")
        }
        let state = RampState(
            phase: phase, reached: row.reached, reachedAt: row.reachedAt, okSince: row.okSince, reason: row.reason)
        return StoredRampPlan(plan: plan, state: state, row: row, approval: approval)
    }

    /// The longest a pre-approval may last.
    public static let longestApproval = Instant.Duration.hours(24 * 30)

    /// The steps of `plan` that the store's step-up policy protects now (each as the change the runner will
    /// publish: from the previous step, or from the rollout's exposure for the first), in the caller's transaction.
    static func protectedSteps(_ plan: RampPlan, exposed: MicroPercent, enforcement: StepUpEnforcement)
        -> [(StepUpPreApproval.Step, [StepUpReason])]
    {
        guard enforcement.enforced else { return [] }
        let policy = enforcement.policy
        var from = exposed
        var out: [(StepUpPreApproval.Step, [StepUpReason])] = []
        for (i, step) in plan.steps.enumerated() {
            let change = StepUpChange(.set, from: from.value, to: step.target.value)
            let reasons = requiresStepUp(change, policy: policy)
            if !reasons.isEmpty {
                out.append((StepUpPreApproval.Step(step: i + 1, from: from.value, to: step.target.value), reasons))
            }
            from = step.target
        }
        return out
    }

    /// Stores `source` as the store's plan (replacing a finished one), audited as `plan start`.
    ///
    /// With `code`, the steps the step-up policy protects are pre-approved: the code is checked once by the
    /// step-up rules (used up, counted towards the lockout when wrong, audited), and a pre-approval bound to this
    /// plan, `actor` and those steps, valid for `approvalFor`, is stored in the same transaction. A refused code
    /// stores no plan (its attempt is still recorded).
    public func start(
        source: String, actor: String, code: String? = nil, approvalFor: Instant.Duration = .hours(24)
    ) throws -> StoredRampPlan {
        if let cause = session.readOnlyCause { throw WritePath.Failure.readOnly(cause) }
        let plan: RampPlan
        do { plan = try RampPlan.parse(source) } catch {
            throw RampPlanFailure("invalid plan: \(error)", kind: .usage)
        }
        guard approvalFor.microseconds > 0, approvalFor <= Self.longestApproval else {
            throw RampPlanFailure(
                "a pre-approval lasts more than 0s and at most \(Self.longestApproval.compactText)", kind: .usage)
        }
        // A plan that ends with enforcement starts only where enforcement exists (a Firebase project).
        if !plan.enforcements.isEmpty { _ = try session.enforcement() }
        let now = session.clock.now()
        // The first step starts from what the rollout exposes (or would expose on resume), as its proposal will.
        let rollout = try RolloutPlan.locate(in: session.config.current().template)
        let exposed = rollout.map { $0.state == .notStarted ? MicroPercent.zero : $0.percentage } ?? .zero
        let plans = session.plans
        let result: Result<StoredRampPlan, RampPlanFailure> = try plans.atomically {
            // Its first step would publish over the kill; the kill is undone by a person ('rollout resume'), not a
            // plan. (Checked in the write's transaction: a viewer is refused as a writer first, and a kill published
            // meanwhile is seen.)
            let live = try RolloutPlan.locate(in: session.config.current().template)
            if live?.state == .killed {
                return .failure(RampPlanFailure("the rollout is killed; resume it first ('rollout resume'), then start the plan"))
            }
            // A ramp raises exposure: a first step below what the rollout exposes now would lower it at once,
            // unasked (a plan file meant for another rollout, or a rollout already past where the plan starts).
            let exposedNow = live.map { $0.state == .rolling ? $0.percentage : .zero } ?? .zero
            if let first = plan.steps.first, first.target < exposedNow {
                return .failure(
                    RampPlanFailure(
                        "plan '\(plan.name)' starts at \(first.target) (line \(first.line)) but the rollout exposes \(exposedNow) "
                            + "now: starting it would lower exposure at once; start from a step at or above \(exposedNow), or "
                            + "lower it first with 'rollout set'"))
            }
            if let old = try plans.loadPlan(), let phase = RampState.Phase(rawValue: old.phase),
                !phase.isFinal
            {
                return .failure(
                    RampPlanFailure(
                        "plan '\(old.name)' is \(phase.rawValue) (step \(old.reached)); abort it first ('rollout plan abort')"
                    ))
            }
            var approved: [StepUpPreApproval.Step] = []
            if let code {
                let enforcement = try session.stepUp.enforcement()
                let protected = Self.protectedSteps(plan, exposed: exposed, enforcement: enforcement)
                guard let first = protected.first, let last = protected.last else {
                    return .failure(
                        RampPlanFailure(
                            enforcement.enforced
                                ? "no step of plan '\(plan.name)' needs a code under the step-up policy; start it without --code"
                                : "step-up verification is off (no operator enrolled); start the plan without --code"
                        ))
                }
                guard let acting = try? OperatorID(actor) else {
                    let reason = "\(actor) cannot be enrolled, so it cannot pass step-up"
                    return .failure(
                        RampPlanFailure(
                            reason, kind: .refused(.stepUpBlocked(PolicyRefusal(policy: "step-up", reason: reason, kind: .stepUpBlocked)))))
                }
                approved = protected.map(\.0)
                // One check of the code for the span of every protected step: it needs a code whenever any
                // of them does (a larger increase, the same crossings), so the rules of step-up decide.
                let change = StepUpChange(
                    .set, from: first.0.from, to: last.0.to,
                    detail: "pre-approval of plan '\(plan.name)' steps "
                        + approved.map { "\($0.step)" }.joined(separator: ", "))
                let decision = try session.stepUp.authorize(change, by: acting, code: code, at: session.clock) {
                    _ = try session.config.appendAudit($0.auditEntry)
                }
                if let refusal = decision.refusal {
                    return .failure(
                        RampPlanFailure("refused: \(refusal)", kind: .refused(WriteRefusal(.refused(refusal.policyRefusal)))))
                }
            }
            let row = RampPlanTable.Row(
                name: plan.name, source: source, startedBy: actor, startedAt: now,
                phase: RampState.Phase.running.rawValue,
                reached: 0, reachedAt: nil, okSince: nil, reason: "", revision: 0)
            try plans.replacePlan(with: row)
            _ = try session.config.appendAudit(
                AuditEntry(
                    time: now, actor: actor, action: "plan start",
                    to: "plan '\(plan.name)': "
                        + plan.steps.map(\.target.description).joined(separator: " → "), result: .recorded,
                    detail: "\(plan.stepCount) steps"))
            guard let stored = try plans.loadPlan() else {
                throw StoreError.corrupt("the plan just stored does not read back")
            }
            if !approved.isEmpty {
                let approval = StepUpPreApproval(
                    plan: RampPlanTable.planID(stored), planName: plan.name, approvedBy: actor, steps: approved,
                    grantedAt: now, expiresAt: now + approvalFor)
                try plans.savePlanApproval(approval)
                _ = try session.config.appendAudit(
                    AuditEntry(
                        time: now, actor: actor, action: "plan pre-approve",
                        to: "plan '\(plan.name)' steps \(approval.stepsText)", result: .recorded,
                        detail:
                            "code of \(actor) checked; until \(approval.expiresAt.iso8601); plan \(approval.plan.prefix(16))"
                    ))
            }
            return .success(try Self.decode(stored, approval: try plans.activePreApproval()))
        }
        return try result.get()
    }

    /// Writes `state` if the plan is still at `revision` (true), with an audit record when `audit` is given.
    @discardableResult
    public func swap(
        _ stored: StoredRampPlan, to state: RampState, actor: String, audit: (action: String, reason: String)?
    ) throws
        -> Bool
    {
        if let cause = session.readOnlyCause { throw WritePath.Failure.readOnly(cause) }
        return try session.plans.atomically { try swapInTransaction(stored, to: state, actor: actor, audit: audit) }
    }

    /// `swap` inside the caller's `plans.atomically` (the runner's, with the publish of the step).
    func swapInTransaction(
        _ stored: StoredRampPlan, to state: RampState, actor: String, audit: (action: String, reason: String)?
    ) throws -> Bool {
        var row = stored.row
        row.phase = state.phase.rawValue
        row.reached = state.reached
        row.reachedAt = state.reachedAt
        row.okSince = state.okSince
        row.reason = state.reason
        let plans = session.plans
        guard try plans.compareAndSwapPlanState(row) else { return false }
        // A plan that ends (aborted, killed, done) takes its pre-approval with it.
        if state.phase.isFinal, try plans.revokePlanApproval() {
            _ = try session.config.appendAudit(
                AuditEntry(
                    time: session.clock.now(), actor: actor, action: "plan pre-approval revoked",
                    from: "plan '\(stored.plan.name)'", to: state.phase.rawValue, result: .recorded))
        }
        if let audit {
            _ = try session.config.appendAudit(
                AuditEntry(
                    time: session.clock.now(), actor: actor, action: audit.action,
                    from:
                        "plan '\(stored.plan.name)' \(stored.state.phase.rawValue) at step \(stored.state.reached)",
                    to: "\(state.phase.rawValue) at step \(state.reached)", reason: audit.reason,
                    result: .recorded))
        }
        return true
    }

    /// An operator's pause, resume or abort of the stored plan.
    public func operatorChange(to phase: RampState.Phase, actor: String, reason: String) throws -> StoredRampPlan {
        guard let stored = try load() else {
            throw RampPlanFailure("no plan was started in this store ('rollout plan start FILE')")
        }
        if stored.state.phase.isFinal {
            throw RampPlanFailure(
                "plan '\(stored.plan.name)' is \(stored.state.phase.rawValue): \(stored.state.reason)")
        }
        let allowed: Bool =
            switch phase {
            case .paused: stored.state.phase == .running
            case .running: stored.state.phase == .paused
            case .aborted: true
            default: false
            }
        guard allowed else {
            throw RampPlanFailure("plan '\(stored.plan.name)' is \(stored.state.phase.rawValue) already")
        }
        var state = phase == .running ? stored.plan.resumed(stored.state, now: session.clock.now()) : stored.state
        state.phase = phase
        state.reason = reason.isEmpty ? "\(phase.rawValue) by \(actor)" : reason
        let verb = ["paused": "plan pause", "running": "plan resume", "aborted": "plan abort"][phase.rawValue]!
        guard try swap(stored, to: state, actor: actor, audit: (verb, reason)) else {
            throw RampPlanFailure(
                "plan '\(stored.plan.name)' changed meanwhile (another runner or operator); look again")
        }
        return try load()!
    }
}

/// Runs a stored plan: each `look()` computes the one assessment, asks the plan's decision what to do, and does
/// it: advances and kills through the write path (compare-and-swap on the ETag the verdict was judged on), state
/// changes through `RampPlanStates` (compare-and-swap on the plan's revision). A look that acts runs in one write
/// transaction of the store (`plans.atomically`; behind Firebase, see `PlanSession.publishJoinsPlanTransaction`):
/// it checks first that the plan is still at the revision it judged, then publishes (the write path's transaction
/// joins it) and writes the state reached, so the step, its publish and their audit records commit together or
/// not at all. Any number of runners may look at once: of two
/// that decide the same advance, one wins and the other finds the plan or the version changed and does nothing;
/// a runner that restarts finds its step in the store.
public final class RampPlanRunner {
    public let session: PlanSession
    public let monitor: RolloutMonitor
    public let states: RampPlanStates
    let path: WritePath
    /// A refusal by a policy (the guardrail's budget) is retried only on a newer version or a minute later
    /// (telemetry time), so a waiting plan does not fill the audit log with refusals.
    private var refused: (etag: String, at: Instant)?

    public init(session: PlanSession, monitor: RolloutMonitor? = nil) throws {
        self.session = session
        self.monitor = try monitor ?? session.monitor()
        states = RampPlanStates(session: session)
        path = try session.writePath()
    }

    public convenience init(session: StoreSession, monitor: RolloutMonitor? = nil) throws {
        try self.init(session: session.planSession, monitor: monitor)
    }

    /// What one look saw and did.
    public struct Look: Sendable {
        public var status: RolloutMonitor.Status
        public var plan: StoredRampPlan
        public var decision: RampDecision
        /// What was done, in words (nil: nothing but waiting).
        public var done: String?
        /// The version published by this look (an advance or a kill).
        public var published: Int?
    }

    /// One look; nil when no plan was started. `status`: the assessment to judge (the headless loop's, computed
    /// once per look for auto-kill and the plan); by default a fresh one.
    public func look(code: String? = nil, status given: RolloutMonitor.Status? = nil) throws -> Look? {
        guard let stored = try states.load() else { return nil }
        let status = try given ?? monitor.status()
        let observation = RampObservation(
            assessment: status.assessment, snapshot: status.snapshot, rollout: status.plan)
        let decision = stored.plan.decide(stored.state, observation, now: status.now)
        if case .idle = decision.action { return Look(status: status, plan: stored, decision: decision) }
        // Refused by a policy on this version a moment ago: the step waits (its state is still written).
        let holdBack =
            refused.map { $0.etag == status.current.etag && status.now - $0.at < .minutes(1) && code == nil } ?? false
        let plans = session.plans
        let body = { () throws -> (Look, refused: (etag: String, at: Instant)??) in
            // The plan's compare-and-swap, first: a plan another runner or an operator changed since it was read is
            // judged again at the next look, and nothing is published for it.
            guard try plans.loadPlan()?.revision == stored.row.revision else {
                var look = Look(status: status, plan: stored, decision: decision)
                look.done = "another runner changed the plan first; looking again"
                return (look, nil)
            }
            // And the version the status was judged on, second: the plan and the status it is judged against must be
            // one snapshot. A status read before another runner's advance, with the plan read after it, would see
            // the plan at step N and the rollout still below it, and pause the plan as changed outside it; the
            // plan's revision alone cannot tell, since the advance and the plan's step were written together.
            // A change published after this check moves the plan's revision or the ETag the write path swaps on.
            guard try self.session.config.current().etag == status.current.etag else {
                var look = Look(status: status, plan: stored, decision: decision)
                look.done = "the store moved on since the status was read; looking again"
                return (look, nil)
            }
            return try self.act(stored, decision, status: status, code: code, holdBack: holdBack)
        }
        // Behind Firebase the check, the publish and the state are written one after the other, each
        // compare-and-swapped (the publish on the ETag, the state on the revision).
        let acted = try session.publishJoinsPlanTransaction ? plans.atomically(body) : body()
        if let update = acted.refused { refused = update }
        return acted.0
    }

    /// Does what `decision` says, inside the look's transaction; `refused`: the new value of the runner's
    /// refusal memory when it changes.
    private func act(
        _ stored: StoredRampPlan, _ given: RampDecision, status: RolloutMonitor.Status, code: String?, holdBack: Bool
    ) throws
        -> (Look, refused: (etag: String, at: Instant)??)
    {
        var decision = given
        var look = Look(status: status, plan: stored, decision: decision)
        var refusedUpdate: (etag: String, at: Instant)?? = nil
        let actor = session.operatorID
        var state = decision.state
        var audit: (String, String)?
        switch decision.action {
        case .idle:
            return (look, nil)
        case .wait:
            break
        case .advance(let step, let target, let reason):
            if holdBack { break }
            var request = WritePath.Request(
                intent: .rollout(.set(target)), actor: actor, reason: reason, origin: Self.origin)
            request.basedOnETag = status.current.etag
            request.stepUpCode = code
            request.planStep = PlanStepOrigin(plan: stored.id, step: step)
            do {
                switch try path.execute(request) {
                case .published(let stored, _, _):
                    look.published = stored.info.number
                    look.done = "published version \(stored.info.number): \(reason)"
                case .unchanged:
                    look.done = "step \(step) (\(target)) was already published"
                }
                state.reached = step
                state.reachedAt = status.now
                refusedUpdate = .some(nil)
            } catch let failure as WritePath.Failure {
                switch WriteRefusal(failure) {
                case .conflict:
                    look.done = "lost the race for step \(step): another change was published first; looking again"
                    look.decision = decision
                    return (look, refusedUpdate)
                case .stepUpNeeded(let refusal), .stepUpFailed(let refusal):
                    state.phase = .paused
                    state.reason =
                        "step \(step) (\(target)) \(Self.needsCode): \(refusal.reason); 'rollout plan resume --code CODE' publishes it"
                    audit = ("plan pause", state.reason)
                    look.done = "paused: " + state.reason
                case .guardrail(let refusal), .stepUpBlocked(let refusal), .policy(let refusal):
                    refusedUpdate = .some((status.current.etag, status.now))
                    decision.action = .wait("refused: \(refusal)", gates: [])
                    look.done = "waiting: \(refusal)"
                default:
                    throw failure
                }
            }
        case .enforce(let step, let service, let reason):
            if holdBack { break }
            do {
                switch try session.enforcement().set(service, .enforced, reason: reason, code: code, dryRun: false) {
                case .unchanged(_, let settled):
                    look.done =
                        "step \(step): \(service) was ENFORCED already"
                        + (settled.isEmpty ? "" : " (settled: " + settled.joined(separator: "; ") + ")")
                case .changed, .wouldChange:
                    look.done = "step \(step): \(service) ENFORCED (Firebase takes up to 15 minutes to apply it)"
                }
                // The last percentage step's hold and gates go on judging the next enforcement: reachedAt stays.
                state.reached = step
                refusedUpdate = .some(nil)
            } catch let refusal as EnforcementPath.Refusal {
                // Not yet (not at 100% with an OK verdict long enough): wait, and ask again a minute later.
                refusedUpdate = .some((status.current.etag, status.now))
                decision.action = .wait(refusal.description, gates: [])
                look.done = "waiting: \(refusal.description)"
            } catch let failure as SettingsWritePath.Failure {
                guard case .refused(_, let needsCode) = failure else { throw failure }
                state.phase = .paused
                state.reason =
                    "step \(step) (enforce \(service)) \(needsCode ? Self.needsCode : "was refused"): \(failure); "
                    + (needsCode ? "'rollout plan resume --code CODE' sets it" : "resume the plan when that is resolved")
                audit = ("plan pause", state.reason)
                look.done = "paused: " + state.reason
            } catch let refusal as SessionRefusal {
                state.phase = .paused
                state.reason = "step \(step) (enforce \(service)): \(refusal.description)"
                audit = ("plan pause", state.reason)
                look.done = "paused: " + state.reason
            } catch where EnforcementPath.isTransient(error) {
                // A 429 or 5xx, no answer, or an outcome not yet known (settled at the next try): like a refusal of
                // the gate, wait and ask again a minute later. Any other error ends the runner.
                refusedUpdate = .some((status.current.etag, status.now))
                let why = "App Check could not be asked (\(error)); trying again a minute later"
                decision.action = .wait(why, gates: [])
                look.done = "waiting: \(why)"
            }
        case .kill(let why):
            var request = WritePath.Request(
                intent: .rollout(.kill), actor: actor,
                reason: "plan '\(stored.plan.name)' step \(stored.state.reached)/\(stored.plan.stepCount): \(why)",
                origin: Self.origin)
            request.basedOnETag = status.current.etag
            do {
                if status.plan?.state == .killed {
                    // Killed already (auto-kill on the same HALT): the plan ends as killed, nothing to publish.
                } else if case .published(let v, _, _) = try path.execute(request) {
                    look.published = v.info.number
                }
            } catch let failure as WritePath.Failure {
                guard case .conflict = WriteRefusal(failure) else { throw failure }
                // Someone published first (auto-kill's kill, or an operator): the next look judges the new version.
                look.done = "lost the race to kill; looking again"
                return (look, refusedUpdate)
            }
            state.phase = .killed
            state.reason = why
            audit = ("plan killed", why)
            look.done = "killed: \(why)" + (look.published.map { " (version \($0))" } ?? "")
        case .pause(let why, _):
            state.phase = .paused
            state.reason = why
            audit = ("plan pause", why)
            look.done = "paused: \(why)"
        case .done(let why):
            state.phase = .done
            state.reason = why
            audit = ("plan done", why)
            look.done = "done: \(why)"
        }
        look.decision = RampDecision(action: decision.action, state: state)
        if state != stored.state {
            let written = try states.swapInTransaction(stored, to: state, actor: actor, audit: audit)
            if !written, look.published == nil { look.done = "another runner changed the plan first; looking again" }
        }
        return (look, refusedUpdate)
    }

    /// `updateOrigin` of the versions a plan publishes.
    public static let origin = "ROLLOUT_PLAN"
    /// The words of a pause that waits for a one-time code (the state's reason); the console's `x` asks for one.
    static let needsCode = "needs a one-time code"
}

/// The plan as the console shows it and the console's plan keys: the same stored plan and the same decision on
/// the snapshot's assessment as `plan status`; pause and resume through `RampPlanStates` (audited).
enum ConsolePlan {
    /// The plan panel's data, nil when no plan was ever started.
    static func info(plans: any RampPlanStore, status: RolloutMonitor.Status) throws -> PlanInfo? {
        guard let stored = try RampPlanStates.load(plans) else { return nil }
        let approval = stored.approval
        let decision = stored.plan.decide(
            stored.state,
            RampObservation(assessment: status.assessment, snapshot: status.snapshot, rollout: status.plan),
            now: status.now)
        var next: String
        var gates: [GateReading] = []
        switch decision.action {
        case .wait(let why, let g):
            next = "waiting: \(why)"
            gates = g
        case .advance(let step, let target, _): next = "next: step \(step) (\(target)) at the runner's next look"
        case .enforce(let step, let service, _): next = "next: step \(step) (enforce \(service)) at the runner's next look"
        case .pause(let why, _): next = "pausing: \(why)"
        case .kill(let why): next = "killing: \(why)"
        case .done(let why): next = "done: \(why)"
        case .idle(let phase): next = phase.rawValue
        }
        if gates.isEmpty, stored.state.reached > 0 {
            // Paused or not OK: still show what the step's gates read.
            let step = stored.plan.steps[min(stored.state.reached, stored.plan.steps.count) - 1]
            gates = stored.plan.readings(
                step, RampObservation(assessment: status.assessment, snapshot: status.snapshot, rollout: status.plan),
                okSince: decision.state.okSince.map { max($0, stored.state.reachedAt ?? $0) }, now: status.now)
        }
        // The next step published by hand (the console's X, 'rollout set'): the stored state records it only at a
        // runner's next look ("already published"), and until then the panel showed the step before it as current
        // and the published one as next. It shows the step the rollout is at, and says who records it.
        var reached = stored.state.reached
        if !stored.state.phase.isFinal, reached < stored.plan.steps.count, let live = status.plan, live.state == .rolling,
            live.percentage == stored.plan.steps[reached].target
        {
            reached += 1
            next = "step \(reached) (\(stored.plan.steps[reached - 1].target)) is published; the plan records it at its runner's next look"
        }
        return PlanInfo(
            name: stored.plan.name, phase: stored.state.phase, reached: reached,
            steps: stored.plan.steps.map(\.target), enforcements: stored.plan.enforcements, next: next, gates: gates,
            countdown: stored.plan.countdown(decision.state, now: status.now),
            preApproved: approval?.steps.map(\.step) ?? [], reason: stored.state.reason,
            waitsForCode: stored.state.phase == .paused && reached == stored.state.reached
                && stored.state.reason.contains(RampPlanRunner.needsCode))
    }

    /// The console's `x`: pause a running plan, resume a paused one; with a code (a plan paused for one), the
    /// waiting step is published by this operator with it, as 'plan resume --code' does.
    static func control(pause: Bool, code: String? = nil, session: PlanSession) -> ConsoleEvent {
        do {
            let stored = try RampPlanStates(session: session).operatorChange(
                to: pause ? .paused : .running, actor: session.operatorID,
                reason: pause ? "paused from the console" : "resumed from the console")
            var message =
                "Plan '\(stored.plan.name)' \(pause ? "paused" : "resumed") at step \(stored.state.reached)/\(stored.plan.stepCount)"
            if !pause, let code, let look = try RampPlanRunner(session: session).look(code: code) {
                if let done = look.done { message += "; " + done }
                if look.decision.state.phase == .paused { return .planControlled(message: message, refused: true) }
            }
            return .planControlled(message: message, refused: false)
        } catch {
            return .planControlled(message: "Plan not changed: \(ConsoleText.oneLine(error))", refused: true)
        }
    }
}
