import Console
import RemoteConfig
import Rollout
import Telemetry
import Timekeeping

/// Fixed models for the renderer and reducer tests: a rollout at 12.5% with realistic figures.
enum Fixture {
    static let now = Instant(seconds: 1_780_000_000)

    static func at(_ secondsBefore: Int64) -> Instant {
        Instant(microseconds: now.microseconds - secondsBefore * 1_000_000)
    }

    static func model(
        state: RolloutState = .rolling, held: Bool = false, verdict: VerdictLevel = .ok,
        reasons: [String] = ["no difference detected"],
        dataAge: Instant.Duration = .milliseconds(400), staleReason: String? = nil
    ) -> ConsoleModel {
        let perMinute = (0..<30).map { i in
            MinuteCounts(
                success: 150 + (i * 37) % 80 + i * 2, failure: 2 + (i * 7) % 6 + (i == 27 ? 9 : 0),
                crashes: (i * 5) % 3 + (i >= 20 ? 1 : 0), sessions: 700 + (i * 13) % 90)
        }
        var model = ConsoleModel(
            header: HeaderInfo(
                store: "sqlite /home/ana/.local/share/rollout/store.db", project: "demo-ios-app", templateVersion: "42",
                etag: "etag-7f3a9c1e2b4d", operatorID: "ana@example.com", dataAsOf: now - dataAge,
                staleReason: staleReason, readOnly: false, stepUpEnabled: true),
            condition: ConditionInfo(
                conditionName: "app_attest_rollout", expression: "percent('rollout-2026') <= 12.5",
                desiredMicroPercent: MicroPercent(12_500_000), observedExposure: 0.119, propagation: 0.952, activeDevices: 48_210,
                seed: "rollout-2026",
                exposedBand: PercentileBand(lower: MicroPercent(0), upper: MicroPercent(12_500_000), includesLower: true),
                controlBand: PercentileBand(lower: MicroPercent(50_000_000), upper: MicroPercent(62_500_000), includesLower: false),
                state: state, held: held),
            attestation: AttestationInfo(
                successTotal: 12_345, failureTotal: 234,
                successRate: WindowRates(oneMinute: 212.4, fiveMinutes: 190.2, fifteenMinutes: 180.0),
                failureRate: WindowRates(oneMinute: 4.2, fiveMinutes: 3.9, fifteenMinutes: 3.0),
                perMinute: perMinute,
                failureClasses: [
                    FailureClass(name: "serverUnavailable", count: 201, alarmed: verdict >= .hold),
                    FailureClass(name: "invalidInput", count: 21),
                    FailureClass(name: "unknownSystemFailure", count: 12),
                ],
                budgetPerMinute: 6_000),
            crash: CrashInfo(
                exposed: CohortCrashStats(
                    users: 5_780, crashFreeUsers: 0.99812, sessions: 21_400,
                    crashFreeSessions: 0.99931),
                control: CohortCrashStats(
                    users: 5_812, crashFreeUsers: 0.99840, sessions: 21_650,
                    crashFreeSessions: 0.99950),
                difference: IntervalEstimate(estimate: -0.028, lower: -0.121, upper: 0.065),
                minimumDetectableEffect: 0.09, verdict: verdict, reasons: reasons, guardrailsArmed: true),
            changes: [
                ChangeRecord(
                    version: "42", at: at(600), actor: "ana@example.com", kind: .nudge,
                    from: RolloutPosition(microPercent: MicroPercent(10_000_000)), to: RolloutPosition(microPercent: MicroPercent(12_500_000)),
                    reason: "steady for an hour, crash-free flat"),
                ChangeRecord(
                    version: "41", at: at(4_200), actor: "bo@example.com", kind: .set,
                    from: RolloutPosition(microPercent: MicroPercent(5_000_000)), to: RolloutPosition(microPercent: MicroPercent(10_000_000)),
                    reason: "second step of the plan"),
                ChangeRecord(
                    version: "40", at: at(9_000), actor: "bo@example.com", kind: .set,
                    from: RolloutPosition(microPercent: MicroPercent(1_000_000)), to: RolloutPosition(microPercent: MicroPercent(5_000_000)),
                    reason: "first step"),
            ],
            events: [
                NotableEvent(at: at(300), severity: .info, text: "95% of active devices on v42"),
                NotableEvent(at: at(90), severity: .warning, text: "serverUnavailable above baseline for 2 min"),
            ])
        model.crash.findings = findings(verdict, reasons: reasons)
        // The newest minute of the series began 20 s ago: v42 (10 min ago) is marked on the chart; v41 and v40
        // are older than the 30 minutes shown.
        model.attestation.seriesEnd = at(20)
        if state == .killed {
            model.condition.observedExposure = 0
            model.changes.insert(
                ChangeRecord(
                    version: "43", at: at(20), actor: "ana@example.com", kind: .kill,
                    from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
                    to: RolloutPosition(microPercent: MicroPercent(12_500_000), killed: true), reason: "crash spike on iOS 17.4"),
                at: 0)
            model.header.templateVersion = "43"
            model.header.etag = "etag-0c1d2e3f4a5b"
        }
        if verdict == .halt {
            model.crash.difference = IntervalEstimate(estimate: -0.42, lower: -0.61, upper: -0.23)
            model.crash.exposed.crashFreeUsers = 0.99410
            model.events.insert(
                NotableEvent(at: at(5), severity: .critical, text: "HALT: crash rate of exposed users"), at: 0)
        }
        return model
    }

    /// The assessment's findings behind a verdict: the first reason at the verdict's level with the evidence of a
    /// test, then an OK failures finding without evidence (as the core gives for a rule rather than a test).
    static func findings(_ verdict: VerdictLevel, reasons: [String]) -> [Finding] {
        let evidence = FindingEvidence(
            test: "SPRT on fatal crashes (harm 1.50×, α 0.05, β 0.10)",
            statistic: verdict == .halt ? "Λ = 3.41 (61 exposed vs 22 control crashes)" : "Λ = -0.85 (24 exposed vs 22 control crashes)",
            threshold: "harm at Λ ≥ 2.89, no harm at Λ ≤ -2.25",
            samples: "21,400 exposed vs 21,650 control sessions; 5,780 exposed vs 5,812 control users",
            detectableEffect: "+38% crashed users (needed +50% or less)",
            wouldChange: verdict == .halt
                ? "harm once declared stays declared: lower the percentage or kill; a new rollout starts a new test"
                : "HALT at Λ ≥ 2.89; \"no harm\" at Λ ≤ -2.25")
        var out = [Finding(verdict, .crashes, reasons.first ?? "no reason", evidence: evidence)]
        out.append(Finding(.ok, .failures, "failure monitors wait for a baseline"))
        return out
    }

    static func state(_ model: ConsoleModel?, size: Size = Size(width: 80, height: 24), now: Instant = now)
        -> ConsoleState
    {
        var s = ConsoleState(
            configuration: .init(themeNames: Theme.builtInNames), screenSize: size)
        _ = s.handle(.tick(now))
        if let model { _ = s.handle(.snapshot(model)) }
        return s
    }

    static func preview(for request: ChangeRequest) -> ChangePreview {
        ChangePreview(
            request: request, from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
            to: RolloutPosition(microPercent: MicroPercent(13_500_000)), baseVersion: "42", baseETag: "etag-7f3a9c1e2b4d",
            eligibleDeviceChange: 482,
            load: AttestationLoad(peakPerSecond: 4.1, budgetPerSecond: 100, perDay: 482, dailyBudget: 10_000_000),
            guardrail: GuardrailAssessment(verdict: .ok, reasons: ["no difference detected at 12.5%"]),
            requiresStepUp: true)
    }

    /// The write path's report of a conflict: bo@ published version 43 at 15%, the rollout at `percent` now.
    static func conflictReport(at percent: MicroPercent = MicroPercent(15_000_000)) -> WritePath.ConflictReport {
        let change = try! RolloutPlan.apply(.set(percent), to: RolloutPlan.initialTemplate(seed: "s"), newSeed: "s")
        let info = VersionInfo(
            number: 43, etag: "etag-43", updateTime: at(3), updateUser: "bo@example.com", updateOrigin: "ROLLOUT_CLI",
            updateType: .incremental, description: "after the review")
        return WritePath.ConflictReport(
            winner: info, winnerChange: "set 12.5% → 15%", current: StoredTemplate(template: change.template, info: info))
    }

    static let conflictRecord = ChangeRecord(
        version: "43", at: at(3), actor: "bo@example.com", kind: .set, from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
        to: RolloutPosition(microPercent: MicroPercent(15_000_000)), reason: "after the review")
}
