import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// A write the operator asked for, before the core has looked at it.
public enum ChangeOperation: Hashable, Sendable {
    /// One of the core's operations on the rollout: nudge (`+`/`-`, `→`/`←`), set (`=`), kill (`K`), resume (`r`).
    case rollout(RolloutOperation)
    /// Roll back the last change (`u`): the version before the one the dialog was prepared on.
    case rollbackLast
    /// Roll back to a given version (`u` pressed again walks further back).
    case rollback(toVersion: Int)

    /// A short description: `nudge +1 pt`, `set 12.5%`, `kill`.
    public var text: String {
        switch self {
        case .rollout(.nudge(let by)): "nudge " + PercentText.formatPoints(by)
        case .rollout(.set(let m, _)): "set " + PercentText.format(m)
        case .rollout(.kill): "kill switch"
        case .rollout(.resume): "resume"
        case .rollout(let op): op.description
        case .rollbackLast: "roll back the last change"
        case .rollback(let v): "roll back to v\(v)"
        }
    }

    /// The core's intent for this operation on version `base` (`u` rolls back to the version before it).
    public func intent(base: Int) -> WritePath.Intent {
        switch self {
        case .rollout(let op): .rollout(op)
        case .rollbackLast: .rollback(toVersion: base - 1)
        case .rollback(let version): .rollback(toVersion: version)
        }
    }

    /// Where this operation would take a rollout now at `position`, when that can be told without the store.
    public func target(from position: RolloutPosition) -> RolloutPosition? {
        switch self {
        case .rollout(.nudge(let by)):
            return RolloutPosition(microPercent: min(PercentText.whole, max(.zero, position.microPercent + by)))
        case .rollout(.set(let m, _)): return RolloutPosition(microPercent: m)
        case .rollout(.kill): return RolloutPosition(microPercent: position.microPercent, killed: true)
        case .rollout(.resume): return RolloutPosition(microPercent: position.microPercent, killed: false)
        case .rollout(.reseed), .rollbackLast, .rollback: return nil
        }
    }
}

/// An operation with an identity, so that answers to a request the operator has since cancelled are ignored.
public struct ChangeRequest: Hashable, Sendable {
    public var id: Int
    public var operation: ChangeOperation

    public init(id: Int, operation: ChangeOperation) {
        self.id = id
        self.operation = operation
    }
}

/// The expected attestation load a change causes, against Apple's guidance.
public struct AttestationLoad: Hashable, Sendable {
    /// Expected peak of attestation calls per second while the newly eligible devices enrol.
    public var peakPerSecond: Double
    /// Apple's guidance (about 100 per second per app).
    public var budgetPerSecond: Double
    /// Expected enrolments over the next day, or nil when not estimated.
    public var perDay: Int?
    /// Apple's daily guidance (about 10 million), or nil.
    public var dailyBudget: Int?

    public init(peakPerSecond: Double, budgetPerSecond: Double, perDay: Int? = nil, dailyBudget: Int? = nil) {
        self.peakPerSecond = peakPerSecond
        self.budgetPerSecond = budgetPerSecond
        self.perDay = perDay
        self.dailyBudget = dailyBudget
    }

    /// Peak over budget (1.0 = exactly at the guidance).
    public var share: Double { budgetPerSecond > 0 ? peakPerSecond / budgetPerSecond : .infinity }
    public var exceedsBudget: Bool { share > 1 || (perDay ?? 0) > (dailyBudget ?? .max) }
}

/// The guardrail verdict on a proposed change.
public struct GuardrailAssessment: Hashable, Sendable {
    public var verdict: VerdictLevel
    /// The guardrail's report, one fact a line.
    public var reasons: [String]
    /// The guardrail's refusal as its preview gives it (the write path would refuse the same); nil when it allows.
    public var refusal: PolicyRefusal?
    /// The guardrail will refuse this change (the dialog then asks for no reason).
    public var refuses: Bool { refusal != nil }

    public init(verdict: VerdictLevel, reasons: [String], refusal: PolicyRefusal? = nil) {
        self.verdict = verdict
        self.reasons = reasons
        self.refusal = refusal
    }
}

/// What a change will write and cause, as computed by the core's write path for the confirm dialog.
///
/// The preview is computed against the template the store holds now; `baseVersion`/`baseETag` pin it, so the
/// publish that follows is a compare-and-swap on exactly what the operator confirmed.
public struct ChangePreview: Hashable, Sendable {
    public var request: ChangeRequest
    public var from: RolloutPosition
    public var to: RolloutPosition
    public var baseVersion: String
    public var baseETag: String
    /// Devices that gain the flag (positive) or lose it (negative) with this change.
    public var eligibleDeviceChange: Int
    public var load: AttestationLoad?
    public var guardrail: GuardrailAssessment
    /// The operator must give a reason (increases do).
    public var requiresReason: Bool
    /// Policy demands a step-up code before publishing.
    public var requiresStepUp: Bool
    /// The second factors the policy accepts for this change and the operator has enrolled, in the order offered
    /// (the executor fills it; a one-time code by default).
    public var stepUpOptions: [StepUpOption] = [.code]
    /// How long the security key waits for a touch (the countdown of "touch your security key").
    public var securityKeySeconds: Int = 30
    /// Anything else the operator should read before confirming.
    public var notes: [String]
    /// Share (0...1) of active devices that have fetched the base version (the monitor's propagation figure, the
    /// one the plan gates use), or nil when unknown; the dialog warns before stacking an increase on a change
    /// that has reached less than half of them.
    public var propagation: Double?
    /// The base version of the dialog this preview replaced, when the store moved while the dialog was open (the
    /// reducer sets it; the dialog says so).
    public var supersedes: String?
    /// The verdict the dialog this preview replaced was judged on, when the verdict changed while the dialog was
    /// open and the store did not move (the reducer sets it; the dialog says so).
    public var rejudgedFrom: VerdictLevel?
    /// The changes published while the dialog was open (who changed what), oldest first; the reducer sets it.
    public var movedBy: [ChangeRecord] = []

    public init(
        request: ChangeRequest, from: RolloutPosition, to: RolloutPosition, baseVersion: String, baseETag: String,
        eligibleDeviceChange: Int, load: AttestationLoad?, guardrail: GuardrailAssessment, requiresReason: Bool? = nil,
        requiresStepUp: Bool, notes: [String] = []
    ) {
        self.request = request
        self.from = from
        self.to = to
        self.baseVersion = baseVersion
        self.baseETag = baseETag
        self.eligibleDeviceChange = eligibleDeviceChange
        self.load = load
        self.guardrail = guardrail
        self.requiresReason = requiresReason ?? (to.effectiveMicroPercent > from.effectiveMicroPercent)
        self.requiresStepUp = requiresStepUp
        self.notes = notes
        self.propagation = nil
        self.supersedes = nil
        self.rejudgedFrom = nil
    }

    public var isIncrease: Bool { to.effectiveMicroPercent > from.effectiveMicroPercent }

    /// An increase stacked on a change that less than half of the active devices have fetched yet.
    public var stacksOnUnpropagatedChange: Bool { isIncrease && (propagation.map { $0 < 0.5 } ?? false) }
}

/// A second factor the console can offer for a change that needs a step-up.
public enum StepUpOption: String, Hashable, Sendable, CaseIterable {
    /// A one-time code from the operator's authenticator app (TOTP).
    case code
    /// The operator's security key signs the exact change (FIDO2, through libfido2).
    case securityKey = "security key"
    /// A code sent to the operator's phone (SMS, then a voice call).
    case phone

    /// The words of the method chooser.
    public var label: String {
        switch self {
        case .code: "one-time code (authenticator app)"
        case .securityKey: "security key (touch it)"
        case .phone: "phone (a code by SMS or a call)"
        }
    }
}

/// The change the operator confirmed in the dialog: the preview, and the reason and step-up code typed.
public struct ConfirmedChange: Hashable, Sendable {
    public var preview: ChangePreview
    /// Why (required for increases; may be empty otherwise).
    public var reason: String
    /// The step-up code the operator typed, when policy asked for one.
    public var stepUpCode: String?
    /// Approve with the operator's security key instead of a code (the executor runs the key).
    public var securityKey: Bool = false
    /// The security key's PIN, when the key asked for one (never shown, never logged).
    public var securityKeyPIN: String? = nil
    /// Approve with a code sent to the operator's phone (the executor runs the provider's verification).
    public var phone: Bool = false
    /// The phone code typed, to be checked by the provider (never shown, never logged).
    public var phoneCode: String? = nil

    public init(preview: ChangePreview, reason: String, stepUpCode: String?) {
        self.preview = preview
        self.reason = reason
        self.stepUpCode = stepUpCode
    }

    /// The change approved by a code sent to the operator's phone (`code`: the one typed, once it is).
    public static func withPhone(_ preview: ChangePreview, reason: String, code: String? = nil) -> ConfirmedChange {
        var c = ConfirmedChange(preview: preview, reason: reason, stepUpCode: nil)
        c.phone = true
        c.phoneCode = code
        return c
    }

    /// The change approved by the operator's security key (with `pin` when the key asked for one).
    public static func withSecurityKey(_ preview: ChangePreview, reason: String, pin: String? = nil) -> ConfirmedChange {
        var c = ConfirmedChange(preview: preview, reason: reason, stepUpCode: nil)
        c.securityKey = true
        c.securityKeyPIN = pin
        return c
    }

    /// The write path's request: the operation on the version the preview showed, compare-and-swapped on its ETag.
    public func writeRequest(actor: String, origin: String) -> WritePath.Request {
        let base = Int(preview.baseVersion) ?? 0
        var request = WritePath.Request(
            intent: preview.request.operation.intent(base: base), actor: actor, reason: reason, origin: origin)
        request.basedOnETag = preview.baseETag
        request.stepUpCode = stepUpCode
        return request
    }
}

/// A successful publish.
public struct PublishReceipt: Hashable, Sendable {
    public var requestID: Int
    public var version: String
    public var from: RolloutPosition
    public var to: RolloutPosition

    public init(requestID: Int, version: String, from: RolloutPosition, to: RolloutPosition) {
        self.requestID = requestID
        self.version = version
        self.from = from
        self.to = to
    }
}

/// The conflict dialog: the write path's report of who published first, with the change the operator prepared.
public struct ConflictDialog: Hashable, Sendable {
    public var request: ChangeRequest
    /// The version the preview was based on.
    public var expectedVersion: String
    /// The core's report: the winning version and the template it left.
    public var report: WritePath.ConflictReport
    /// The changes published since, newest first.
    public var intervening: [ChangeRecord]

    public init(request: ChangeRequest, expectedVersion: String, report: WritePath.ConflictReport, intervening: [ChangeRecord]) {
        self.request = request
        self.expectedVersion = expectedVersion
        self.report = report
        self.intervening = intervening
    }

    /// Where the rollout stands now: the rollout of the winner's template.
    public var current: RolloutPosition { RolloutPosition((try? RolloutPlan.locate(in: report.current.template)) ?? nil) }
}

/// One entry of the tamper-evident audit log.
public struct AuditEntry: Hashable, Sendable {
    public var sequence: Int
    public var at: Instant
    public var actor: String
    /// What was attempted, e.g. `publish`, `step-up`, `kill`.
    public var action: String
    /// How it ended, e.g. `ok`, `refused`, `conflict`, `wrong code`.
    public var outcome: String
    public var detail: String
    /// The outcome was a success.
    public var succeeded: Bool
    /// The template version the entry published or concerns, when it names one (Enter opens it).
    public var version: Int?
    /// For a step-up record that approved a change: who approved it and how; for a published record: the
    /// approvals it was published with.
    public var approvals: [ChangeApproval] = []

    public init(
        sequence: Int, at: Instant, actor: String, action: String, outcome: String, detail: String, succeeded: Bool,
        version: Int? = nil, approvals: [ChangeApproval] = []
    ) {
        self.version = version
        self.approvals = approvals
        self.sequence = sequence
        self.at = at
        self.actor = actor
        self.action = action
        self.outcome = outcome
        self.detail = detail
        self.succeeded = succeeded
    }
}

/// The audit log as loaded for the audit view, with the result of checking its hash chain.
public struct AuditLog: Hashable, Sendable {
    public enum Integrity: Hashable, Sendable {
        case verified
        /// The chain does not verify: at the audit record `atSequence` when the problem is one record's (nil when
        /// it is the store's, e.g. a missing version), and why.
        case broken(atSequence: Int?, reason: String)
        case unchecked
    }

    /// Newest first.
    public var entries: [AuditEntry]
    public var integrity: Integrity

    public init(entries: [AuditEntry], integrity: Integrity) {
        self.entries = entries
        self.integrity = integrity
    }
}

/// One published version as the drill-down shows it: who, when, why, and everything it changed.
public struct VersionDetail: Hashable, Sendable {
    public var record: ChangeRecord
    /// Where the publish came from (`ROLLOUT_CONSOLE`, `ROLLOUT_CLI`, `CONSOLE` for the Firebase console, ...).
    public var origin: String
    /// Firebase's update type (`INCREMENTAL_UPDATE`, `FORCED_UPDATE`, `ROLLBACK`).
    public var updateType: String
    /// The core's template diff against the version before it, one change per line.
    public var diff: [String]
    /// This is the version the store serves now (rolling back to it changes nothing).
    public var isCurrent: Bool

    public init(record: ChangeRecord, origin: String, updateType: String, diff: [String], isCurrent: Bool) {
        self.record = record
        self.origin = origin
        self.updateType = updateType
        self.diff = diff
        self.isCurrent = isCurrent
    }

    public var number: Int { Int(record.version) ?? 0 }
}

/// Who approved a change protected by step-up, and with which method (read from the audit records the write path
/// keeps: the step-up record of each approval).
public struct ChangeApproval: Hashable, Sendable {
    public enum Method: String, Hashable, Sendable {
        case code = "one-time code"
        case securityKey = "security key"
        case phone
        /// A ramp plan's protected step approved ahead of time (`plan start --code`).
        case preApproved = "plan pre-approval"
    }

    public var approver: String
    public var method: Method
    /// The operator who proposed the change (a two-person request's requester), when not the approver.
    public var proposer: String?

    public init(approver: String, method: Method, proposer: String? = nil) {
        self.approver = approver
        self.method = method
        self.proposer = proposer
    }

    /// `approved by bob (security key), proposed by ana` for every approval of a change; empty when none.
    public static func text(_ approvals: [ChangeApproval], actor: String) -> String {
        guard !approvals.isEmpty else { return "" }
        let who = approvals.map { "\($0.approver) (\($0.method.rawValue))" }.joined(separator: " and ")
        let proposers = Set(approvals.compactMap(\.proposer) + [actor]).subtracting(approvals.map(\.approver))
        return "approved by " + who + (proposers.isEmpty ? "" : ", proposed by " + proposers.sorted().joined(separator: ", "))
    }
}
