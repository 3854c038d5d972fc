import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// Everything the main screen shows, as one value: the adapters fill it, the renderer draws it.
///
/// The data source builds a fresh `ConsoleModel` about four times a second from the store and telemetry. It is a
/// plain value with no behaviour, so the renderer can be tested against fixtures and the console never reaches
/// into the store. Optional fields are shown as "–" (not known yet) rather than as zero.
public struct ConsoleModel: Hashable, Sendable {
    public var header: HeaderInfo
    public var condition: ConditionInfo
    public var attestation: AttestationInfo
    public var crash: CrashInfo
    /// The latest published changes, newest first.
    public var changes: [ChangeRecord]
    /// Notable events (guardrail alarms, propagation milestones, throttling), newest first.
    public var events: [NotableEvent]
    /// The store's ramp plan, nil when none was started (see `PlanPanel`).
    public var plan: PlanInfo?
    /// App Check enforcement of each configured service (a Firebase project's; empty elsewhere).
    public var enforcement: [EnforcementInfo] = []
    /// The charts' history (`c`): up to 24 hours of per-minute counts per arm from the store; nil when the source
    /// has none.
    public var history: ChartHistory? = nil

    public init(
        header: HeaderInfo, condition: ConditionInfo, attestation: AttestationInfo, crash: CrashInfo,
        changes: [ChangeRecord] = [], events: [NotableEvent] = [], plan: PlanInfo? = nil
    ) {
        self.header = header
        self.condition = condition
        self.attestation = attestation
        self.crash = crash
        self.changes = changes
        self.events = events
        self.plan = plan
    }
}

/// The header bar: where the data comes from and how fresh it is.
public struct HeaderInfo: Hashable, Sendable {
    /// The store as a person recognises it, e.g. `sqlite ~/.rollout/store.db`.
    public var store: String
    /// The Firebase project id.
    public var project: String
    /// The template version the screen reflects (Firebase `versionNumber`), or nil before the first publish.
    public var templateVersion: String?
    /// The template's ETag (compare-and-swap token).
    public var etag: String?
    /// The operator this console acts as.
    public var operatorID: String
    /// When the data on screen was read; the console shows its age against its own ticks.
    public var dataAsOf: Instant?
    /// Set by the data source when it knows the data is behind (e.g. telemetry ingestion stalled).
    public var staleReason: String?
    /// The console was opened read-only; the write path refuses changes.
    public var readOnly: Bool
    /// Why it is read-only, when the data source knows (`--read-only`, a store file this user cannot write): the
    /// words of the console's refusal.
    public var readOnlyCause: ReadOnlyCause? = nil
    /// Policy demands a second factor (TOTP) for risky changes.
    public var stepUpEnabled: Bool
    /// The stale limit the assessment judged by (on a live simulation, stretched to its pace), when the data
    /// source knows it; the console's own limit otherwise.
    public var staleAfter: Instant.Duration? = nil
    /// Set by the data source when the store it opened is gone (removed, replaced, truncated): the picture is the
    /// last one seen while it was there, and the console stays read-only with this as its banner.
    public var storeLost: String? = nil

    public init(
        store: String, project: String, templateVersion: String? = nil, etag: String? = nil, operatorID: String,
        dataAsOf: Instant? = nil, staleReason: String? = nil, readOnly: Bool = false, stepUpEnabled: Bool = false
    ) {
        self.store = store
        self.project = project
        self.templateVersion = templateVersion
        self.etag = etag
        self.operatorID = operatorID
        self.dataAsOf = dataAsOf
        self.staleReason = staleReason
        self.readOnly = readOnly
        self.stepUpEnabled = stepUpEnabled
    }
}

/// A band of micro-percentiles `(lower, upper]`, or `[lower, upper]` when `includesLower` (the exposed band starts
/// at 0 inclusive).
public struct PercentileBand: Hashable, Sendable {
    public var lower: MicroPercent
    public var upper: MicroPercent
    public var includesLower: Bool

    public init(lower: MicroPercent, upper: MicroPercent, includesLower: Bool) {
        self.lower = lower
        self.upper = upper
        self.includesLower = includesLower
    }

    /// `[0, 12.5]` or `(50, 62.5]`, in percent.
    public var text: String {
        (includesLower ? "[" : "(") + PercentText.formatNumber(lower) + ", " + PercentText.formatNumber(upper) + "]"
    }
}

/// The `AppAttestEnabled` condition as written in the template, and how far it has reached.
public struct ConditionInfo: Hashable, Sendable {
    /// The parameter the rollout drives.
    public var parameter: String
    /// The condition's name in the template.
    public var conditionName: String
    /// The condition expression exactly as written, e.g. `percent('rollout-2026') <= 12.5`.
    public var expression: String
    /// The percentage the template asks for.
    public var desiredMicroPercent: MicroPercent
    /// Share (0...1) of active devices that currently have the flag on, or nil when unknown.
    public var observedExposure: Double?
    /// Share (0...1) of active devices that fetched the newest template version, or nil when unknown.
    public var propagation: Double?
    /// Active devices in the observation window, or nil when unknown.
    public var activeDevices: Int?
    public var seed: String
    public var exposedBand: PercentileBand
    /// The control band, or nil at 100% (no control group left).
    public var controlBand: PercentileBand?
    /// Where the rollout stands, as the template says (the core's state).
    public var state: RolloutState
    /// The guardrail holds a rolling rollout where it is (verdict HOLD or HALT, guardrails armed): shown as HELD.
    public var held: Bool

    public init(
        parameter: String = "AppAttestEnabled", conditionName: String, expression: String, desiredMicroPercent: MicroPercent,
        observedExposure: Double? = nil, propagation: Double? = nil, activeDevices: Int? = nil, seed: String,
        exposedBand: PercentileBand, controlBand: PercentileBand?, state: RolloutState, held: Bool = false
    ) {
        self.parameter = parameter
        self.conditionName = conditionName
        self.expression = expression
        self.desiredMicroPercent = desiredMicroPercent
        self.observedExposure = observedExposure
        self.propagation = propagation
        self.activeDevices = activeDevices
        self.seed = seed
        self.exposedBand = exposedBand
        self.controlBand = controlBand
        self.state = state
        self.held = held && state == .rolling
    }
}

/// Rates over the last 1, 5 and 15 minutes, per minute (as `uptime` shows load).
public struct WindowRates: Hashable, Sendable {
    public var oneMinute: Double
    public var fiveMinutes: Double
    public var fifteenMinutes: Double

    public init(oneMinute: Double, fiveMinutes: Double, fifteenMinutes: Double) {
        self.oneMinute = oneMinute
        self.fiveMinutes = fiveMinutes
        self.fifteenMinutes = fifteenMinutes
    }

    public static let zero = WindowRates(oneMinute: 0, fiveMinutes: 0, fifteenMinutes: 0)
}

/// Attestation outcomes in one minute, for the chart.
public struct MinuteCounts: Hashable, Sendable {
    public var success: Int
    public var failure: Int
    /// Fatal crashes and sessions in the minute, exposed and control together (the crash-rate row of the chart).
    public var crashes: Int
    public var sessions: Int

    public init(success: Int, failure: Int, crashes: Int = 0, sessions: Int = 0) {
        self.success = success
        self.failure = failure
        self.crashes = crashes
        self.sessions = sessions
    }

    /// Fatal crashes per 1,000 sessions, or 0 without sessions.
    public var crashesPerThousandSessions: Int { sessions > 0 ? Int((Double(crashes) * 1000 / Double(sessions)).rounded(.up)) : 0 }

    public var attempts: Int { success + failure }
}

/// Failures of one error class (e.g. `serverUnavailable`).
public struct FailureClass: Hashable, Sendable {
    public var name: String
    public var count: Int
    /// The class's change detector (CUSUM) is alarmed.
    public var alarmed: Bool

    public init(name: String, count: Int, alarmed: Bool = false) {
        self.name = name
        self.count = count
        self.alarmed = alarmed
    }
}

/// `AppAttestSuccess` / `AppAttestFailure`: totals, rates, the recent series and failures by class.
public struct AttestationInfo: Hashable, Sendable {
    public var successTotal: Int
    public var failureTotal: Int
    /// Successes per minute over 1/5/15 minutes.
    public var successRate: WindowRates
    /// Failures per minute over 1/5/15 minutes.
    public var failureRate: WindowRates
    /// Per-minute counts, oldest first, ending with the current minute.
    public var perMinute: [MinuteCounts]
    /// Failures by error class, largest first.
    public var failureClasses: [FailureClass]
    /// Apple's guidance for attestation calls, per minute (about 100 per second), or nil when not configured.
    public var budgetPerMinute: Double?
    /// When the newest minute of `perMinute` began (telemetry time), to mark published changes on the chart.
    public var seriesEnd: Instant?
    /// Minutes each entry of `perMinute` stands for (1; more when the main chart is zoomed out past its width, each
    /// entry then a mean per minute over that many minutes, and `seriesEnd` the start of the newest entry).
    public var minutesPerPoint = 1

    public init(
        successTotal: Int, failureTotal: Int, successRate: WindowRates, failureRate: WindowRates,
        perMinute: [MinuteCounts] = [], failureClasses: [FailureClass] = [], budgetPerMinute: Double? = nil
    ) {
        self.successTotal = successTotal
        self.failureTotal = failureTotal
        self.successRate = successRate
        self.failureRate = failureRate
        self.perMinute = perMinute
        self.failureClasses = failureClasses
        self.budgetPerMinute = budgetPerMinute
    }

    /// Successes over attempts, or nil before the first attempt.
    public var successRatio: Double? {
        let attempts = successTotal + failureTotal
        return attempts == 0 ? nil : Double(successTotal) / Double(attempts)
    }
}

/// Crash-free figures of one cohort.
public struct CohortCrashStats: Hashable, Sendable {
    public var users: Int
    /// Share (0...1) of users without a crash.
    public var crashFreeUsers: Double?
    public var sessions: Int
    /// Share (0...1) of sessions without a crash.
    public var crashFreeSessions: Double?

    public init(users: Int, crashFreeUsers: Double?, sessions: Int, crashFreeSessions: Double?) {
        self.users = users
        self.crashFreeUsers = crashFreeUsers
        self.sessions = sessions
        self.crashFreeSessions = crashFreeSessions
    }
}

/// Crash-free users over a recent window, as Crashlytics defines them: of the users active in the window, the share
/// without a fatal crash in it (per arm, by each user's latest cohort). Unlike the cumulative figure (users with a
/// fatal crash since the rollout started over users who entered), it stays level in a healthy fleet.
public struct WindowedCrashFree: Hashable, Sendable {
    /// The window, as the screen labels it (`24 h`).
    public var window: String
    public var exposed: Double?
    public var exposedUsers: Int
    public var control: Double?
    public var controlUsers: Int
    /// Why there is no figure (`not available from BigQuery`), when the data comes from a source that cannot give
    /// distinct users per window.
    public var unavailable: String?

    public init(
        window: String, exposed: Double?, exposedUsers: Int, control: Double?, controlUsers: Int, unavailable: String? = nil
    ) {
        self.window = window
        self.exposed = exposed
        self.exposedUsers = exposedUsers
        self.control = control
        self.controlUsers = controlUsers
        self.unavailable = unavailable
    }
}

/// An estimate with its anytime-valid confidence interval, in percentage points.
public struct IntervalEstimate: Hashable, Sendable {
    public var estimate: Double
    public var lower: Double
    public var upper: Double
    /// The confidence level, e.g. 0.95.
    public var confidence: Double

    public init(estimate: Double, lower: Double, upper: Double, confidence: Double = 0.95) {
        self.estimate = estimate
        self.lower = lower
        self.upper = upper
        self.confidence = confidence
    }
}

/// Exposed versus control crash figures and the verdict drawn from them.
public struct CrashInfo: Hashable, Sendable {
    public var exposed: CohortCrashStats
    public var control: CohortCrashStats
    /// Crash-free users, exposed minus control, in percentage points (negative: exposed is worse).
    public var difference: IntervalEstimate?
    /// The smallest difference in crash-free users (percentage points) detectable at the current exposure.
    public var minimumDetectableEffect: Double?
    /// The one assessment's level (the core's type: the same everywhere it is shown).
    public var verdict: VerdictLevel
    /// Why, most important first.
    public var reasons: [String]
    /// Every finding of the assessment, with its evidence, for the verdict pane.
    public var findings: [Finding]
    /// Guardrails are armed: the write path refuses increases on HOLD/HALT.
    public var guardrailsArmed: Bool
    /// Auto-kill on HALT is on (a writable console, `watch` or ingest publishes the kill at its next refresh).
    public var autoKill: Bool
    /// Crash-free users over a recent window (nil: not given, e.g. a fixture; the panel then shows only the
    /// cumulative row).
    public var windowed: WindowedCrashFree? = nil

    public init(
        exposed: CohortCrashStats, control: CohortCrashStats, difference: IntervalEstimate?,
        minimumDetectableEffect: Double?, verdict: VerdictLevel, reasons: [String], findings: [Finding] = [],
        guardrailsArmed: Bool, autoKill: Bool = false
    ) {
        self.findings = findings
        self.autoKill = autoKill
        self.exposed = exposed
        self.control = control
        self.difference = difference
        self.minimumDetectableEffect = minimumDetectableEffect
        self.verdict = verdict
        self.reasons = reasons
        self.guardrailsArmed = guardrailsArmed
    }
}

/// The rollout's setting before or after a change: a percentage, possibly killed.
public struct RolloutPosition: Hashable, Sendable {
    public var microPercent: MicroPercent
    public var killed: Bool

    public init(microPercent: MicroPercent, killed: Bool = false) {
        self.microPercent = microPercent
        self.killed = killed
    }

    /// The position of the core's rollout (0% when the template has none).
    public init(_ plan: RolloutPlan?) {
        self.init(microPercent: plan?.percentage ?? .zero, killed: plan?.state == .killed)
    }

    /// `12.5%`, or `killed (12.5%)`.
    public var text: String {
        killed ? "killed (" + PercentText.format(microPercent) + ")" : PercentText.format(microPercent)
    }

    /// Share of users with the flag on.
    public var effectiveMicroPercent: MicroPercent { killed ? .zero : microPercent }
}

/// One published change: who, when, from → to, why.
public struct ChangeRecord: Hashable, Sendable {
    public var version: String
    public var at: Instant
    public var actor: String
    /// What kind of write it was (the core's proposal kind), or nil for a change made outside rollout (the
    /// Firebase console, another tool).
    public var kind: Proposal.Kind?
    public var from: RolloutPosition
    public var to: RolloutPosition
    public var reason: String
    /// When it was published on the telemetry's time (a simulation's, on its store), where the charts mark it;
    /// nil: the same as `at` (wall time, which the log shows).
    public var telemetryAt: Instant? = nil
    /// Who approved it with a second factor and how (empty: no step-up approval on record).
    public var approvals: [ChangeApproval] = []

    /// `approved by bob (security key), proposed by ana`, or empty.
    public var approvalText: String { ChangeApproval.text(approvals, actor: actor) }

    public init(
        version: String, at: Instant, actor: String, kind: Proposal.Kind?, from: RolloutPosition, to: RolloutPosition,
        reason: String
    ) {
        self.version = version
        self.at = at
        self.actor = actor
        self.kind = kind
        self.from = from
        self.to = to
        self.reason = reason
    }

    /// The kind as the history shows it: `set`, `nudge`, `kill`, ..., or `external`.
    public var kindText: String { kind?.rawValue ?? "external" }
}

/// A notable event shown in the log beside changes.
public struct NotableEvent: Hashable, Sendable {
    public enum Severity: String, Hashable, Sendable {
        case info
        case warning
        case critical
    }

    public var at: Instant
    public var severity: Severity
    public var text: String
    /// A verdict change: the line carries the level's symbol and word, like the verdict everywhere else.
    public var level: VerdictLevel?

    public init(at: Instant, severity: Severity, text: String, level: VerdictLevel? = nil) {
        self.at = at
        self.severity = severity
        self.text = text
        self.level = level
    }
}

/// One service's App Check enforcement as the condition panel shows it: the mode Firebase has, and until when a
/// recent change may still be taking effect (Firebase applies a change within 15 minutes).
public struct EnforcementInfo: Hashable, Sendable {
    /// The service id, such as `firestore.googleapis.com`.
    public var service: String
    public var mode: EnforcementMode
    /// The end of the 15 minutes after the service's last change, while they last (nil: settled).
    public var appliesBy: Instant?

    public init(service: String, mode: EnforcementMode, appliesBy: Instant? = nil) {
        self.service = service
        self.mode = mode
        self.appliesBy = appliesBy
    }

    /// The service's short name: `firestore` for `firestore.googleapis.com`.
    public var shortName: String { service.split(separator: ".").first.map(String.init) ?? service }
}
