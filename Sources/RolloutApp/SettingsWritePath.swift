import AppCheck
import Crypto
import Rollout
import StepUp
import SQLiteStore
import Telemetry
import TelemetrySources
import Timekeeping

/// The write path of the settings that decide later writes: the step-up policy, the guardrail settings, the
/// removal of an operator and the App Check exchange's registrations (apps, debug tokens, signing keys).
///
/// Like `WritePath` for templates, each intent is validated, judged by the step-up policy in force (the same
/// `requiresStepUp` rules, the same replay-safe `OperatorTables.authorize`), applied and audited in one write
/// transaction of the store; the store's seal is renewed in that same transaction. A step-up attempt is recorded
/// (and counts towards the lockout) even when it refuses, and then nothing else is changed. The executable only
/// parses arguments and prints the outcome.
public struct SettingsWritePath {
    /// The store's settings tables and its one write transaction (SQLite or PostgreSQL).
    public let backend: any SettingsBackend
    public let clock: any Clock

    public init(session: StoreSession) {
        self.init(backend: SQLiteSettingsBackend(session: session), clock: session.clock)
    }

    public init(backend: any SettingsBackend, clock: any Clock) {
        self.backend = backend
        self.clock = clock
    }

    /// Reads the settings tables (what `operator list` and `policy show` print, whether a code will be asked).
    public func read<T>(_ body: (any SettingsTables) throws -> T) throws -> T { try backend.reading(body) }
    /// `read`, after the seal's check in the same snapshot (`SettingsBackend.sealedReading`).
    public func readSealed<T>(_ body: (any SettingsTables) throws -> T) throws -> T { try backend.sealedReading(body) }

    /// What an operator asks for.
    public enum Intent: Sendable, Equatable {
        /// A step-up policy key (`increase-over`, ...) or a guardrail setting (`guardrails.*`, `budget.*`,
        /// `telemetry.*`), as `rollout policy show` lists them.
        case setting(key: String, value: String)
        /// Remove an enrolled operator (always needs the acting operator's code) or a pending enrolment.
        case removeOperator(OperatorID)
        /// Start the enrolment of `id` with a fresh secret; while step-up is on, an enrolled `approver` vouches
        /// for it with their code (the intent's `code`), and under the two-person rule a second, different enrolled
        /// operator with theirs (`secondApprover`): one person alone could otherwise enrol a second identity and
        /// approve their own requests with it.
        case startEnrolment(OperatorID, approver: OperatorID?, secondApprover: SecondApproval? = nil)
        /// Confirm the pending enrolment of `id` with a code of its new authenticator (the intent's `code`).
        case confirmEnrolment(OperatorID)
        /// Register, change or remove what the App Check exchange trusts and signs with.
        case appCheck(AppCheckChange)
        /// Add (or replace) or remove a telemetry source: what the verdict reads, so audited and judged as a
        /// policy change.
        case source(SourceChange)
        /// Give the acting operator, already enrolled, a security key (or replace theirs): needs their code.
        case enrolSecurityKey(SecurityKeyCredential)
        /// Give the acting operator, already enrolled, a phone for codes by SMS or voice (or replace theirs):
        /// needs their code.
        case enrolPhone(PhoneEnrolment)
    }

    /// A second enrolled operator's approval of an enrolment: their id and current code.
    public struct SecondApproval: Sendable, Equatable {
        public var approver: OperatorID
        public var code: String
        public init(approver: OperatorID, code: String) {
            self.approver = approver
            self.code = code
        }
    }

    public enum SourceChange: Sendable, Equatable {
        case add(SourceConfiguration)
        case remove(name: String)
    }

    /// A change to the App Check exchange's registrations. Each one decides what `serve` accepts or mints (an app
    /// that trusts the demo authority accepts simulated devices; a debug token is a credential; a rotation picks
    /// the key every token is signed with), so each is audited and judged by step-up (policy key `appcheck`).
    public enum AppCheckChange: Sendable, Equatable {
        /// Register `app` (or replace the app of that id) in `project`; the demo authority is created when the app
        /// trusts it and none exists.
        case registerApp(AppAttestApp, project: AppCheckProject)
        case removeApp(appId: String)
        case addDebugToken(DebugTokenRecord)
        case removeDebugToken(appId: String, name: String)
        /// A new signing key; the others stay published for `overlap` (default: the longest token lifetime).
        case rotateKeys(overlap: Instant.Duration?)
        /// An App Check enforcement change about to be sent to Firebase (`EnforcementPath`): judged by step-up and
        /// recorded as requested before anything is sent, so no change to enforcement is ever unaudited.
        case enforcementRequest(service: String, from: EnforcementMode, to: EnforcementMode, reason: String)
    }

    public enum Outcome: Sendable, Equatable {
        case changed(from: String, to: String)
        /// Already so; nothing written.
        case unchanged(String)
        /// A pending (unconfirmed) enrolment was removed.
        case removedPending
        /// The enrolment is pending: show its secret (this once) and confirm it with a code.
        case enrolmentStarted(PendingEnrolment)
        case enrolled(approvedBy: OperatorID?)
        /// An App Check registration was applied, described for the audit log and the operator.
        case appCheckChanged(String)
        /// The code did not confirm the enrolment; it stays pending with `next` (its attempts counted).
        case confirmationRefused(next: PendingEnrolment, outcome: CodeOutcome)
    }

    /// Why nothing was changed.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// A key or value that does not exist (a usage error).
        case invalid(String)
        /// Not possible in the store's state (nobody to remove, already enrolled, no pending enrolment).
        case unavailable(String)
        /// Refused by step-up; `needsCode` when a (fresh) code would be accepted.
        case refused(String, needsCode: Bool)

        public var description: String {
            switch self {
            case .invalid(let m), .unavailable(let m): m
            case .refused(let m, _): "refused: \(m)"
            }
        }
    }

    /// Validates, judges, applies and audits `intent` by `actor` (with step-up `code`), in one transaction.
    public func execute(
        _ intent: Intent, actor: String, code: String?, approving: TwoPersonSettingsRequest? = nil
    ) throws -> Outcome {
        if let cause = backend.readOnlyCause { throw WritePath.Failure.readOnly(cause) }
        let clock = self.clock
        let result: Result<Outcome, Failure> = try backend.transaction { db in
            // The largest settings changes (App Check ENFORCED, a relaxation of a guardrail or of step-up) under
            // the two-person rule: what they change, from → to, and why they count.
            var twoPerson: (change: String, why: String)?
            let policy = try db.stepUpPolicy()
            let change: StepUpChange
            let apply: () throws -> Outcome
            switch intent {
            case .setting(let key, let value):
                let before: String
                let after: String
                let save: () throws -> Void
                if GuardrailSettings.keys.contains(key) {
                    let current = try db.guardrailSettings()
                    var updated = current
                    do { try updated.set(key, value) } catch { return .failure(.invalid("\(error)")) }
                    before = current.settings.first { $0.key == key }!.value
                    after = updated.settings.first { $0.key == key }!.value
                    if updated == current { return .success(.unchanged(after)) }
                    save = { try db.saveGuardrailSetting(key, after) }
                } else {
                    let updated: StepUpPolicy
                    do { updated = try policy.setting(key, value) } catch { return .failure(.invalid("\(error)")) }
                    // A method list never set reads `any`.
                    before = policy.settings.first { $0.key == key }?.value ?? "any"
                    after = updated.settings.first { $0.key == key }!.value
                    if updated == policy { return .success(.unchanged(after)) }
                    save = { try db.saveStepUpPolicy(updated) }
                }
                if let why = TwoPersonSettingsRequest.relaxation(key, from: before, to: after) {
                    twoPerson = ("policy set \(key): \(before) → \(after)", why)
                }
                if key == "two-person", after == "on", try db.isEnforced(), try db.operators().count < 2 {
                    return .failure(
                        .refused(
                            "the two-person rule needs two enrolled operators and only one is: enrol a second one first "
                                + "('rollout operator enroll --operator ID --approver \(actor) --approver-code CODE')",
                            needsCode: false))
                }
                change = StepUpChange(.policyChange, detail: "\(key) \(after)")
                apply = {
                    try save()
                    try db.appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: actor, action: "policy set \(key)", from: before, to: after,
                            result: .recorded))
                    return .changed(from: before, to: after)
                }
            case .appCheck(let registration):
                let state = try db.appCheckState()
                let prepared: (summary: String, apply: () throws -> String)
                switch Self.prepare(registration, state: state, now: clock.now()) {
                case .success(let p): prepared = p
                case .failure(let f): return .failure(f)
                }
                change = StepUpChange(.appCheckChange, detail: prepared.summary)
                if case .enforcementRequest(_, _, let to, _) = registration, to == .enforced {
                    twoPerson = (prepared.summary, "App Check enforcement ENFORCED rejects every request without a valid token")
                }
                apply = {
                    let done = try prepared.apply()
                    try db.appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: actor, action: "appcheck " + prepared.summary, to: done,
                            result: .recorded))
                    return .appCheckChanged(done)
                }
            case .source(let sourceChange):
                let existing = try db.sourceConfigurations()
                let summary: String
                let before: String
                switch sourceChange {
                case .add(let c):
                    let old = existing.first { $0.name == c.name }
                    if old == c { return .success(.unchanged(c.json.compactText)) }
                    // Counted once: no two sources over the same events, and none from before what a ledger
                    // other than its own landed of them.
                    if let overlap = c.overlap(configured: existing, ledgers: try db.sourceLedgers()) {
                        return .failure(.invalid(overlap.description))
                    }
                    summary = "source add \(c.name)"
                    before = old?.json.compactText ?? ""
                    apply = {
                        try db.saveSource(c)
                        try db.appendAudit(
                            AuditEntry(time: clock.now(), actor: actor, action: summary, from: before, to: c.json.compactText, result: .recorded))
                        return .changed(from: before, to: c.json.compactText)
                    }
                case .remove(let name):
                    guard let old = existing.first(where: { $0.name == name }) else {
                        return .failure(.unavailable("no source named \(name) ('rollout source list' shows them)"))
                    }
                    summary = "source remove \(name)"
                    before = old.json.compactText
                    apply = {
                        try db.removeSource(name)
                        try db.appendAudit(
                            AuditEntry(time: clock.now(), actor: actor, action: summary, from: before, result: .recorded))
                        return .changed(from: before, to: "")
                    }
                }
                change = StepUpChange(.policyChange, detail: summary)
            case .enrolSecurityKey(let credential):
                let id = credential.operatorID
                if let refusal = try Self.secondMethodRefusal(id, actor: actor, method: "security key", in: db) {
                    return .failure(refusal)
                }
                change = StepUpChange(.operatorEnroll, detail: "\(id) security key")
                apply = {
                    try db.saveSecurityKey(credential)
                    try db.appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: actor, action: "operator enroll security-key",
                            to: "\(credential.algorithm.name) credential \(Hex.encode(credential.credentialID.prefix(8)))… for \(credential.relyingParty)",
                            result: .recorded))
                    return .changed(from: "", to: "security key")
                }
            case .enrolPhone(let enrolment):
                let id = enrolment.operatorID
                guard PhoneNumber.normalized(enrolment.number) == enrolment.number else {
                    return .failure(.invalid("'\(enrolment.number)' is not an E.164 number (+ then 7 to 15 digits)"))
                }
                if let refusal = try Self.secondMethodRefusal(id, actor: actor, method: "phone", in: db) {
                    return .failure(refusal)
                }
                change = StepUpChange(.operatorEnroll, detail: "\(id) phone")
                apply = {
                    try db.savePhone(enrolment)
                    try db.appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: actor, action: "operator enroll phone", to: enrolment.masked,
                            result: .recorded))
                    return .changed(from: "", to: "phone \(enrolment.masked)")
                }
            case .startEnrolment(let id, let approver, let second):
                return try startEnrolment(id, approver: approver, code: code, second: second, policy: policy, in: db)
            case .confirmEnrolment(let id):
                return try confirmEnrolment(id, code: code, in: db)
            case .removeOperator(let target):
                guard try db.operatorRecord(target) != nil else {
                    guard try db.pendingEnrolment(target) != nil else {
                        return .failure(
                            .unavailable("\(target) is not enrolled ('rollout operator list' shows who is)"))
                    }
                    // An enrolment an approver's code let in is removed with a code too, as an operator is (before,
                    // anyone who could run the command removed it, with no code at all).
                    change = StepUpChange(.operatorRemove, detail: "\(target) (pending enrolment)")
                    apply = {
                        try db.removePending(target)
                        try db.appendAudit(
                            AuditEntry(
                                time: clock.now(), actor: actor, action: "operator remove",
                                from: "\(target) (pending enrolment)", result: .recorded))
                        return .removedPending
                    }
                    break
                }
                change = StepUpChange(.operatorRemove, detail: target.rawValue)
                if policy.twoPerson, try db.isEnforced() {
                    // Fewer operators is fewer people who must agree: held for a second one like any relaxation,
                    // and never below the two the rule needs (turn it off first, which also takes two).
                    guard try db.operators().count > 2 else {
                        return .failure(
                            .refused(
                                "the two-person rule is on and needs two enrolled operators: removing \(target) would "
                                    + "leave one; turn two-person off first ('rollout policy set two-person off', which "
                                    + "needs a second operator too)", needsCode: false))
                    }
                    twoPerson = ("operator remove \(target)", "removes an operator who can approve or refuse changes")
                }
                apply = {
                    try db.removeOperator(target)
                    try db.appendAudit(
                        AuditEntry(
                            time: clock.now(), actor: actor, action: "operator remove", from: target.rawValue,
                            result: .recorded))
                    return .changed(from: target.rawValue, to: "")
                }
            }
            var verified = false
            let codeAsked = try db.isEnforced() && !requiresStepUp(change, policy: policy).isEmpty
            // The two-person rule counts factors: with the policy asking no code for this kind of change
            // (`policy-change` or `appcheck` off), its requests and approvals are refused, never let through.
            let noCodeAsked = "the policy asks no one-time code for this change (policy-change or appcheck is off), so "
                + "the two-person rule cannot count factors; nothing was changed"
            if codeAsked {
                guard let acting = try? OperatorID(actor) else {
                    return .failure(
                        .refused("\(actor) cannot be enrolled, so it cannot pass step-up", needsCode: false))
                }
                // The attempt and its audit record are written in this transaction whatever the verdict.
                let decision = try db.authorize(change, by: acting, code: code, clock: clock) {
                    try db.appendAudit($0.auditEntry)
                }
                if let refusal = decision.refusal {
                    return .failure(.refused("\(refusal)", needsCode: refusal.outcome == .missing))
                }
                verified = decision.verdict == .accepted
            }
            func refuse(_ result: String, _ message: String, needsCode: Bool = false) throws -> Result<Outcome, Failure> {
                try db.appendAudit(
                    AuditEntry(
                        time: clock.now(), actor: actor, action: "two-person " + (twoPerson?.change ?? "settings change"),
                        result: .stepUpRefused, detail: "result \(result)" + (approving.map { "; two-person-request \($0.id)" } ?? "")))
                return .failure(.refused(message, needsCode: needsCode))
            }
            if let approving {
                // The request as this transaction reads it in the chain that ends at the sealed head: the one
                // given was read before the transaction, and a request is only what an intact chain holds.
                let recorded: TwoPersonSettingsRequest?
                do {
                    recorded = try TwoPersonSettingsRequest.find(approving.id) { try db.auditRecords(limit: 1000, before: $0) }
                } catch let broken as AuditChain.Break {
                    return try refuse(
                        "not-in-chain",
                        "request \(approving.id) cannot be trusted: the audit log breaks at \(broken); nothing was "
                            + "changed ('rollout audit verify' shows the damage)")
                }
                guard recorded == approving else {
                    return try refuse(
                        "not-in-chain", "request \(approving.id) is not what the audit log holds; nothing was changed")
                }
                if let approver = approving.approvedBy {
                    return try refuse(
                        "already-approved",
                        "request \(approving.id) was approved already (by \(approver)) and a request is used once: ask "
                            + "for the change again; nothing was changed")
                }
                guard let large = twoPerson, large.change == approving.change else {
                    return try refuse(
                        "other-change",
                        "request \(approving.id) is for '\(approving.change)', which is not what this change would do now "
                            + "('\(twoPerson?.change ?? "another change")'): the state moved since; nothing was changed")
                }
                guard approving.requester != actor else {
                    return try refuse(
                        "self-approval", "\(actor) asked for this change and cannot approve it too: another operator must")
                }
                guard clock.now() < approving.expiresAt else {
                    return try refuse("expired", "request \(approving.id) expired at \(approving.expiresAt.iso8601)")
                }
                guard verified else {
                    guard codeAsked else { return try refuse("no-factor", noCodeAsked) }
                    return try refuse(
                        "no-factor", "approving request \(approving.id) needs \(actor)'s own one-time code", needsCode: true)
                }
                let outcome = try apply()
                try db.appendAudit(
                    AuditEntry(
                        time: clock.now(), actor: actor, action: "two-person " + large.change, result: .stepUpAccepted,
                        detail: "result approved; two-person-request \(approving.id); requested-by \(approving.requester); "
                            + "approved-by \(actor)"))
                return .success(outcome)
            }
            if let large = twoPerson, policy.twoPerson, try db.isEnforced() {
                guard verified else {
                    guard codeAsked else { return try refuse("no-factor", noCodeAsked) }
                    return try refuse("no-factor", "\(large.change) needs \(actor)'s one-time code first", needsCode: true)
                }
                let request = TwoPersonSettingsRequest(
                    id: Hex.encode(SecureRandom.bytes(8)), requester: actor, change: large.change, intent: intent,
                    expiresAt: clock.now() + .minutes(15))
                try db.appendAudit(request.auditEntry(at: clock.now(), why: large.why))
                return .failure(
                    .refused(
                        "\(large.change) needs a second operator (two-person rule: \(large.why)); \(actor)'s approval is "
                            + "recorded as request \(request.id), valid until \(request.expiresAt.iso8601): another enrolled "
                            + "operator runs 'rollout approve \(request.id) --code CODE'", needsCode: false))
            }
            return .success(try apply())
        }
        return try result.get()
    }

    // MARK: App Check

    /// Validates `change` against the state and returns its summary and the write that applies it (returning what
    /// was done, in words); writes nothing itself.
    /// Why `actor` may not add a second step-up method (`method`: "security key", "phone") for `id`: only for
    /// themselves, and only once enrolled with a one-time code; nil when they may.
    static func secondMethodRefusal(_ id: OperatorID, actor: String, method: String, in db: any SettingsTables) throws
        -> Failure?
    {
        guard id.rawValue == actor else { return .invalid("an operator enrols a \(method) for themselves, not for \(id)") }
        guard try db.operatorRecord(id) != nil else {
            return .unavailable(
                "\(id) is not enrolled: enrol with 'rollout operator enroll' (a one-time code) first, then add the \(method)")
        }
        return nil
    }

    static func prepare(_ change: AppCheckChange, state: any AppCheckState, now: Instant) -> Result<
        (summary: String, apply: () throws -> String), Failure
    > {
        do {
            let existing = try state.configuration()
            switch change {
            case .registerApp(let app, let project):
                if let existing, existing.project != project {
                    return .failure(
                        .unavailable(
                            "the store serves project \(existing.project.id) (\(existing.project.number)); one project per store"))
                }
                var apps = existing?.apps ?? []
                let before = apps.first { $0.appId == app.appId }
                if before == app { return .failure(.unavailable("\(app.appId) is registered so already; nothing changed")) }
                if let i = apps.firstIndex(where: { $0.appId == app.appId }) { apps[i] = app } else { apps.append(app) }
                let words =
                    "\(app.appId) for \(app.identity.appId) (\(app.environment.rawValue), tokens \(Int(app.tokenTTL.seconds))s"
                    + (app.trustsDemoRoot ? ", trusts the demo authority)" : ")")
                return .success(
                    (
                        (before == nil ? "app add " : "app change ") + app.appId,
                        {
                            try state.saveConfiguration(AppCheckConfiguration(project: project, apps: apps))
                            if app.trustsDemoRoot { _ = try DemoCertificateAuthority.loadOrCreate(in: state) }
                            return words
                        }
                    ))
            case .removeApp(let appId):
                guard let existing, existing.apps.contains(where: { $0.appId == appId }) else {
                    return .failure(.unavailable("app \(appId) is not registered ('rollout appcheck app list')"))
                }
                let apps = existing.apps.filter { $0.appId != appId }
                // Its debug tokens go with it, in the same write: left behind, they would exchange again for an app
                // later registered under the same id (another team or bundle).
                var names: [String] = []
                for token in try state.debugTokens() where token.appId == appId && !names.contains(token.name) {
                    names.append(token.name)
                }
                return .success(
                    (
                        "app remove \(appId)",
                        {
                            try state.saveConfiguration(AppCheckConfiguration(project: existing.project, apps: apps))
                            var removed = 0
                            for name in names { removed += try state.removeDebugToken(appId: appId, name: name) }
                            guard removed > 0 else { return "removed \(appId)" }
                            return "removed \(appId) and its \(removed) debug token(s) ("
                                + names.map { "'\($0)'" }.joined(separator: ", ") + ")"
                        }
                    ))
            case .addDebugToken(let token):
                guard let existing, existing.apps.contains(where: { $0.appId == token.appId }) else {
                    return .failure(.unavailable("app \(token.appId) is not registered (rollout appcheck app add)"))
                }
                // The stores keep a token once (its digest is the key, a second insert does nothing): a token
                // registered already would be audited as added for this app while it stays the other's.
                if let same = try state.debugTokens().first(where: { $0.digest == token.digest }) {
                    return .failure(
                        .invalid(
                            "this debug token is registered already, as '\(same.name)' for \(same.appId); "
                                + "generate a new one (or remove that one first)"))
                }
                return .success(
                    (
                        "debug-token add \(token.appId) \(token.name)",
                        {
                            try state.addDebugToken(token)
                            // The token itself is never written anywhere but to the operator: its digest names it.
                            return "debug token '\(token.name)' for \(token.appId), sha256 \(Hex.encode(token.digest).prefix(16))…"
                        }
                    ))
            case .removeDebugToken(let appId, let name):
                guard try state.debugTokens().contains(where: { $0.appId == appId && $0.name == name }) else {
                    return .failure(.unavailable("no debug token named '\(name)' for \(appId)"))
                }
                return .success(
                    (
                        "debug-token remove \(appId) \(name)",
                        {
                            let n = try state.removeDebugToken(appId: appId, name: name)
                            return "removed \(n) debug token(s) named '\(name)' for \(appId)"
                        }
                    ))
            case .enforcementRequest(let service, let from, let to, let reason):
                return .success(
                    (
                        "enforcement \(service) \(from.rawValue) → \(to.rawValue)",
                        { "requested (\(reason)); \(OpenEnforcementRequest.sentNext), its answer recorded after" }
                    ))
            case .rotateKeys(let requested):
                let longest = existing?.apps.map(\.tokenTTL).max() ?? .hours(1)
                let overlap = requested ?? longest
                guard overlap >= longest else {
                    return .failure(
                        .invalid(
                            "--overlap \(Int(overlap.seconds))s is shorter than the longest token lifetime (\(Int(longest.seconds))s): "
                                + "tokens signed by the old key would stop verifying before they expire"))
                }
                return .success(
                    (
                        "keys rotate",
                        {
                            let key = try AppCheckExchange.rotateSigningKeys(state: state, now: now, overlap: overlap)
                            return "signing with \(key.kid); older keys published until \((now + overlap).iso8601)"
                        }
                    ))
            }
        } catch {
            return .failure(.unavailable("cannot read the App Check tables: \(error)"))
        }
    }

    // MARK: Enrolment

    private func startEnrolment(
        _ id: OperatorID, approver: OperatorID?, code: String?, second: SecondApproval?, policy: StepUpPolicy,
        in db: any SettingsTables
    ) throws -> Result<Outcome, Failure> {
        if try db.operatorRecord(id) != nil {
            return .failure(
                .unavailable(
                    "\(id) is already enrolled; to replace the authenticator, remove the enrolment first "
                        + "('rollout operator remove \(id) --code CODE')"))
        }
        // Approval: while step-up is enforced, an enrolled operator vouches for the newcomer.
        let change = StepUpChange(.operatorEnroll, detail: id.rawValue)
        var approvedBy: OperatorID?
        if try db.isEnforced(), !requiresStepUp(change, policy: policy).isEmpty {
            guard let approver else {
                return .failure(
                    .refused(
                        "step-up is on: enrolling \(id) needs an enrolled operator's approval "
                            + "(--approver ID --approver-code CODE); 'rollout operator list' shows who is enrolled",
                        needsCode: false))
            }
            let decision = try db.authorize(change, by: approver, code: code, clock: clock) {
                try db.appendAudit($0.auditEntry)
            }
            if let refusal = decision.refusal {
                return .failure(.refused("\(refusal)", needsCode: refusal.outcome == .missing))
            }
            approvedBy = approver
            if policy.twoPerson {
                guard let second else {
                    return .failure(
                        .refused(
                            "the two-person rule is on: enrolling \(id) needs a second enrolled operator's approval too "
                                + "(--approver \(approver) --approver-code CODE --approver ID --approver-code CODE)",
                            needsCode: false))
                }
                guard second.approver != approver else {
                    return .failure(
                        .refused("\(approver) approved this enrolment already: the second approval must be another operator's", needsCode: false))
                }
                let decision = try db.authorize(change, by: second.approver, code: second.code, clock: clock) {
                    try db.appendAudit($0.auditEntry)
                }
                if let refusal = decision.refusal {
                    return .failure(.refused("\(refusal)", needsCode: false))
                }
                try db.appendAudit(
                    AuditEntry(
                        time: clock.now(), actor: approver.rawValue, action: "two-person operator enroll \(id)",
                        result: .stepUpAccepted, detail: "approved-by \(approver); approved-by \(second.approver)"))
            }
        }
        let pending = Enrolment.start(id, approvedBy: approvedBy, at: clock.now())
        try db.savePending(pending)
        return .success(.enrolmentStarted(pending))
    }

    private func confirmEnrolment(_ id: OperatorID, code: String?, in db: any SettingsTables) throws -> Result<
        Outcome, Failure
    > {
        guard let pending = try db.pendingEnrolment(id) else {
            return .failure(
                .unavailable("\(id) has no pending enrolment: run 'rollout operator enroll --operator \(id)' first"))
        }
        let now = clock.now()
        func attempt(_ outcome: CodeOutcome, failed: Int) throws {
            let event = StepUpAuditEvent(
                operatorID: pending.id, at: now, action: "confirm a new authenticator", kind: .operatorEnroll,
                reasons: [], outcome: outcome, failedAttempts: failed, lockedUntil: nil)
            try db.appendAudit(event.auditEntry)
        }
        switch Enrolment.confirm(pending, code: code, at: now) {
        case .enrolled(let record):
            try db.saveOperator(record)
            try db.removePending(pending.id)
            try attempt(.accepted(step: record.lastAcceptedStep ?? 0), failed: 0)
            try db.appendAudit(
                AuditEntry(
                    time: now, actor: pending.id.rawValue, action: "operator enroll", to: pending.id.rawValue,
                    result: .recorded,
                    detail: pending.approvedBy.map { "approved by \($0)" } ?? "first operator: step-up verification on")
            )
            return .success(.enrolled(approvedBy: pending.approvedBy))
        case .retry(let next, let outcome):
            try db.savePending(next)
            try attempt(outcome, failed: next.failedAttempts)
            return .success(.confirmationRefused(next: next, outcome: outcome))
        case .discarded(let why, let outcome):
            try db.removePending(pending.id)
            if let outcome { try attempt(outcome, failed: pending.failedAttempts + 1) }
            return .failure(
                .refused(
                    "enrolment of \(pending.id) discarded (\(why.rawValue)): start over with 'rollout operator enroll --operator \(pending.id)'",
                    needsCode: false))
        }
    }
}

// MARK: The backends

/// The settings tables as one intent sees them, inside its store's write transaction: the step-up policy and
/// state, the guardrail settings and the audit log. The SQLite store and the PostgreSQL team store implement it.
public protocol SettingsTables {
    func stepUpPolicy() throws -> StepUpPolicy
    func saveStepUpPolicy(_ policy: StepUpPolicy) throws
    func guardrailSettings() throws -> GuardrailSettings
    /// Stores one validated setting.
    func saveGuardrailSetting(_ key: String, _ value: String) throws
    /// Whether step-up is enforced: at least one operator is enrolled.
    func isEnforced() throws -> Bool
    func operators() throws -> [OperatorRecord]
    func operatorRecord(_ id: OperatorID) throws -> OperatorRecord?
    func saveOperator(_ record: OperatorRecord) throws
    func removeOperator(_ id: OperatorID) throws
    func pendingEnrolments() throws -> [PendingEnrolment]
    func pendingEnrolment(_ id: OperatorID) throws -> PendingEnrolment?
    func savePending(_ enrolment: PendingEnrolment) throws
    func removePending(_ id: OperatorID) throws
    /// The enrolled operators and the pending enrolments without their secrets: what listing them needs, and all
    /// that a connection which may not read secrets (the PostgreSQL viewer role) can read.
    func operatorStandings() throws -> [OperatorStanding]
    func pendingStandings() throws -> [PendingStanding]
    /// The replay-safe step-up check (`StepUpGate`): the attempt and its audit record are written whatever the
    /// verdict.
    func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision
    func appendAudit(_ entry: AuditEntry) throws
    /// Audit records newest first, on this transaction's connection (`ConfigStore.auditRecords`).
    func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord]
    /// The App Check exchange's state on this transaction's connection: what it writes joins the transaction.
    func appCheckState() throws -> any AppCheckState
    /// The configured telemetry sources (a backend that keeps none refuses with `SessionRefusal`).
    func sourceConfigurations() throws -> [SourceConfiguration]
    func saveSource(_ configuration: SourceConfiguration) throws
    /// Removes the source's configuration; what it landed and the record of it (its ledger) stay.
    func removeSource(_ name: String) throws
    /// Every source ledger with what it has read, configured sources' and removed ones' alike.
    func sourceLedgers() throws -> [SourceLedgerRecord]
    /// Stores an operator's security key (sealed); a store that keeps none refuses.
    func saveSecurityKey(_ credential: SecurityKeyCredential) throws
    /// Stores an operator's phone (the number sealed); a store that keeps none refuses.
    func savePhone(_ enrolment: PhoneEnrolment) throws
}

extension SettingsTables {
    public func saveSecurityKey(_ credential: SecurityKeyCredential) throws {
        throw SessionRefusal(.unsupported, "this store keeps no security keys yet (an SQLite store file does)")
    }

    public func savePhone(_ enrolment: PhoneEnrolment) throws {
        throw SessionRefusal(.unsupported, "this store keeps no phones yet (an SQLite store file does)")
    }

    public func operatorStandings() throws -> [OperatorStanding] { try operators().map(OperatorStanding.init) }
    public func pendingStandings() throws -> [PendingStanding] { try pendingEnrolments().map(PendingStanding.init) }
}

/// Where a settings intent runs: one write transaction of the store (everything the intent writes, its audit
/// records included, commits together or not at all), and reads.
public protocol SettingsBackend {
    /// Why the backend refuses every write, nil when it writes.
    var readOnlyCause: ReadOnlyCause? { get }
    func transaction<T>(_ body: (any SettingsTables) throws -> T) throws -> T
    func reading<T>(_ body: (any SettingsTables) throws -> T) throws -> T
    /// A read whose first step checks the store's seal in the same snapshot: for sealed settings that something
    /// acts on outside the store (a source's access-token command run, its project called), which a row written
    /// past rollout must never steer. Throws when the seal does not match.
    func sealedReading<T>(_ body: (any SettingsTables) throws -> T) throws -> T
}

extension SettingsBackend {
    public var isReadOnly: Bool { readOnlyCause != nil }
}

/// The SQLite store's settings: `OperatorTables` and `GuardrailSettingsTable` in one `db.transaction`, which
/// renews the store's seal.
public struct SQLiteSettingsBackend: SettingsBackend {
    public let session: StoreSession

    public init(session: StoreSession) { self.session = session }

    public var readOnlyCause: ReadOnlyCause? { session.store.readOnlyCause }

    public func transaction<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        try session.store.withDatabase { db in
            try db.transaction { try body(SQLiteSettingsTables(db: db, config: session.config)) }
        }
    }

    public func reading<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        try session.store.withDatabase { db in try body(SQLiteSettingsTables(db: db, config: session.config)) }
    }

    public func sealedReading<T>(_ body: (any SettingsTables) throws -> T) throws -> T {
        try session.store.readingSealed { db in try body(SQLiteSettingsTables(db: db, config: session.config)) }
    }
}

struct SQLiteSettingsTables: SettingsTables {
    let db: SQLiteDatabase
    let config: any SessionConfigStore

    func stepUpPolicy() throws -> StepUpPolicy { try OperatorTables.policy(in: db) }
    func saveStepUpPolicy(_ policy: StepUpPolicy) throws { try OperatorTables.savePolicy(policy, in: db) }
    func guardrailSettings() throws -> GuardrailSettings { try GuardrailSettingsTable.load(from: db) }
    func saveGuardrailSetting(_ key: String, _ value: String) throws {
        try GuardrailSettingsTable.save(key, value, in: db)
    }
    func isEnforced() throws -> Bool { try OperatorTables.isEnforced(in: db) }
    func operators() throws -> [OperatorRecord] { try OperatorTables.operators(in: db) }
    func operatorRecord(_ id: OperatorID) throws -> OperatorRecord? { try OperatorTables.record(id, in: db) }
    func saveOperator(_ record: OperatorRecord) throws { try OperatorTables.save(record, in: db) }
    func removeOperator(_ id: OperatorID) throws {
        _ = try OperatorTables.remove(id, in: db)
        try SecurityKeyTables.remove(id, in: db)
        try PhoneTables.remove(id, in: db)
    }
    func pendingEnrolments() throws -> [PendingEnrolment] { try OperatorTables.pendingEnrolments(in: db) }
    func pendingEnrolment(_ id: OperatorID) throws -> PendingEnrolment? {
        try OperatorTables.pendingEnrolment(id, in: db)
    }
    func savePending(_ enrolment: PendingEnrolment) throws { try OperatorTables.savePending(enrolment, in: db) }
    func removePending(_ id: OperatorID) throws { try OperatorTables.removePending(id, in: db) }
    func authorize(
        _ change: StepUpChange, by actor: OperatorID, code: String?, clock: any Clock,
        audit: (StepUpAuditEvent) throws -> Void
    ) throws -> StepUpDecision {
        try OperatorTables.authorize(change, by: actor, code: code, in: db, clock: clock, audit: audit)
    }
    func appendAudit(_ entry: AuditEntry) throws { _ = try config.appendAudit(entry) }
    func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        try config.auditRecords(limit: limit, before: before)
    }
    func appCheckState() throws -> any AppCheckState { try AppCheckStateTables(database: db) }
    func sourceConfigurations() throws -> [SourceConfiguration] { try SourceConfigTable.load(from: db) }
    func saveSource(_ configuration: SourceConfiguration) throws { try SourceConfigTable.save(configuration, in: db) }
    func removeSource(_ name: String) throws { try SourceConfigTable.remove(name, in: db) }
    func sourceLedgers() throws -> [SourceLedgerRecord] { try SourceConfigTable.ledgers(in: db) }
    func saveSecurityKey(_ credential: SecurityKeyCredential) throws { try SecurityKeyTables.save(credential, in: db) }
    func savePhone(_ enrolment: PhoneEnrolment) throws { try PhoneTables.save(enrolment, in: db) }
}
