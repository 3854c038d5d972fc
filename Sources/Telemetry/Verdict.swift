import Glibc
import Platform
import Rollout
import Timekeeping

/// How healthy the rollout looks, from least to most severe.
public enum VerdictLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Nothing wrong is seen.
    case ok = 0
    /// Something deserves a look; increases are still allowed.
    case watch = 1
    /// Do not increase: data is missing, stale or untrustworthy, or Apple is throttling.
    case hold = 2
    /// Stop: exposed users crash more than control (auto-kill acts on this when enabled).
    case halt = 3

    public static func < (a: VerdictLevel, b: VerdictLevel) -> Bool { a.rawValue < b.rawValue }

    public var description: String {
        switch self {
        case .ok: "OK"
        case .watch: "WATCH"
        case .hold: "HOLD"
        case .halt: "HALT"
        }
    }
}

/// One observation behind a verdict, in words.
public struct Finding: Hashable, Sendable, CustomStringConvertible {
    public enum Topic: String, Hashable, Sendable { case data, crashes, failures, exposure }
    public var level: VerdictLevel
    public var topic: Topic
    public var text: String
    /// The test, statistic, threshold and samples behind it (the console's verdict pane), when a test decided it.
    public var evidence: FindingEvidence?
    public init(_ level: VerdictLevel, _ topic: Topic, _ text: String, evidence: FindingEvidence? = nil) {
        self.level = level
        self.topic = topic
        self.text = text
        self.evidence = evidence
    }
    public var description: String { "\(level) \(topic.rawValue): \(text)" }
}

/// OK / WATCH / HOLD / HALT with the reason in words, and every finding behind it.
public struct Verdict: Hashable, Sendable, CustomStringConvertible {
    public var level: VerdictLevel
    /// The most severe finding's text (the first such finding in data, crashes, failures, exposure order; "not
    /// enough data yet" comes last).
    public var reason: String
    public var findings: [Finding]

    public init(findings: [Finding]) {
        precondition(!findings.isEmpty, "a verdict always has a reason")
        self.findings = findings
        let top = findings.max { $0.level < $1.level }!.level
        level = top
        reason = findings.first { $0.level == top }!.text
    }

    public var description: String { "\(level): \(reason)" }
}

/// Where the assessment's "now" comes from.
///
/// People and security always run on the wall clock; telemetry time is the wall clock too, except on a drill
/// store while a simulation writing into it is alive (its heartbeat is fresh): then its simulated time.
public enum TelemetryTimeSource: Hashable, Sendable {
    case wall
    /// A live simulation: now is its simulated time.
    case liveSimulation
    /// The simulation ended (at this wall time): now is frozen at its last simulated instant.
    case finishedSimulation(endedAt: Instant)
    /// The simulation stopped sending heartbeats (last one at this wall time): frozen at its last instant.
    case lostSimulation(lastHeartbeat: Instant)
}

/// What the telemetry cannot know about the rollout: its configuration now.
public struct RolloutContext: Hashable, Sendable {
    /// The exposed band's upper bound in micro-percent (N% = N × 1,000,000).
    public var currentMicroPercent: Int64
    /// The newest published template version, for propagation (nil: the newest version seen in fetches).
    public var newestTemplateVersion: Int64?
    /// Guardrails armed by hand even before telemetry arrives.
    public var guardrailsEnabled: Bool
    /// Data older than this is stale.
    public var staleAfter: Instant.Duration
    /// The p-value below which the exposed/control balance is a sample ratio mismatch.
    public var sampleRatioThreshold: Double
    /// OK needs the smallest detectable relative increase in crashed users to be at most this (0.5: +50%).
    public var detectableEffect: Double
    /// The failure ratio of the exposed group's App Attest attempts in the monitored window above which the
    /// verdict is HOLD whatever the baseline says.
    public var failureCeiling: Double
    /// The share of the exposed group's App Attest attempts rejected (throttling aside) above which, sustained over
    /// the last 15 minutes, the verdict is HALT: enforcing App Check would lock those users out.
    public var rejectionHaltCeiling = 0.5
    /// Apple's guidance; an observed attestation rate at `attestationRateShare` of its per-second figure is HOLD.
    public var budget: AttestationBudget
    public var attestationRateShare: Double
    public var timeSource: TelemetryTimeSource
    /// Whether a rollout is running (or killed) since a start; false at 0% before any start or after a rollback
    /// to a version that exposed nobody, where "no telemetry since the start" means nothing.
    public var started = true
    /// The store's telemetry sources that are silent or failing (`MonitoredStore.sourceSilences`): each one is a
    /// HOLD, never OK, the first reason among the data's.
    public var sourceSilences: [String] = []
    /// The share of installations that get the flag `"true"` whatever the rollout's condition says (its default
    /// value, another condition's value: what an edit in the Firebase Console can make), in words; nil when only
    /// the rollout serves it. Such a rollout controls nothing: a kill leaves them on, and the control group is
    /// exposed too, so the comparison means nothing: HOLD.
    public var servedOutsideRollout: String?
    /// App Check enforcement of the Firebase project the template lives in, as read for this assessment; nil when
    /// the store has no App Check project (a store file, PostgreSQL). A service ENFORCED while the flag does not
    /// give App Attest to everyone rejects the users without it: HALT.
    public var enforcement: EnforcementReading?

    public init(
        currentMicroPercent: Int64, newestTemplateVersion: Int64? = nil, guardrailsEnabled: Bool = false,
        staleAfter: Instant.Duration = .minutes(10), sampleRatioThreshold: Double = 0.001,
        detectableEffect: Double = 0.5, failureCeiling: Double = 0.2, budget: AttestationBudget = AttestationBudget(),
        attestationRateShare: Double = 0.8, timeSource: TelemetryTimeSource = .wall
    ) {
        self.currentMicroPercent = currentMicroPercent
        self.newestTemplateVersion = newestTemplateVersion
        self.guardrailsEnabled = guardrailsEnabled
        self.staleAfter = staleAfter
        self.sampleRatioThreshold = sampleRatioThreshold
        self.detectableEffect = detectableEffect
        self.failureCeiling = failureCeiling
        self.budget = budget
        self.attestationRateShare = attestationRateShare
        self.timeSource = timeSource
    }

    /// Everybody is exposed (100%): there is no control group.
    public var isFull: Bool { currentMicroPercent >= 100_000_000 }

    /// The share of exposed among exposed + control that the bands imply: 1:1 up to 50%, then N : 100 − N.
    public var expectedExposedShare: Double? {
        let n = Double(currentMicroPercent) / 1_000_000
        guard n > 0, n < 100 else { return nil }
        return n <= 50 ? 0.5 : n / 100
    }
}

/// Exposure as observed: who is in which group and who runs the newest configuration.
public struct ExposureCheck: Hashable, Sendable {
    /// Active installations reporting `enabled`, as a share of all active ones (compare with N%).
    public var observedExposure: Double?
    public var desiredExposure: Double
    /// The template version propagation is measured against.
    public var newestTemplateVersion: Int64?
    /// Active installations whose latest fetch is the newest version, as a share of all active ones.
    public var propagation: Double?
    /// Exposed vs control active installations against the expected split (nil when not applicable).
    public var sampleRatio: SampleRatioTest?
}

/// The verdict, whether guardrails are armed, and the exposure figures.
public struct Assessment: Sendable {
    public var verdict: Verdict
    /// Guardrails act once telemetry exists for the rollout, or when enabled explicitly.
    public var armed: Bool
    public var exposure: ExposureCheck
    /// What the verdict was judged against.
    public var context: RolloutContext
}

extension TelemetrySnapshot {
    /// Turns the snapshot into a verdict with reasons (pure): the one place a verdict is decided.
    ///
    /// Data problems come first: no telemetry, telemetry older than `staleAfter` ("stale"), or a simulation
    /// that ended or stopped answering is HOLD, never OK. Crash harm declared by the SPRT is HALT; a crash
    /// difference whose always-valid interval excludes zero is WATCH; too small a sample to detect the
    /// configured effect is HOLD ("not enough data yet"). Failures: a CUSUM alarm of any error class against
    /// its frozen baseline, a failure ratio above the ceiling, or an observed attestation rate near Apple's
    /// guidance is HOLD. A sample ratio mismatch is HOLD, unless the split is explained by a configuration
    /// still propagating.
    public func assess(_ context: RolloutContext) -> Assessment {
        var findings: [Finding] = []
        var notEnoughData: Finding?
        let armed = context.guardrailsEnabled || hasTelemetry
        let rolling = context.currentMicroPercent > 0

        // Data. Sources that do not answer come first (one finding naming them all): their data is missing,
        // whatever the counters say.
        if !context.sourceSilences.isEmpty {
            let silent = context.sourceSilences.joined(separator: "; ")
            findings.append(
                Finding(
                    .hold, .data, silent,
                    evidence: FindingEvidence(
                        test: "data: every telemetry source answering", statistic: silent,
                        threshold: "a successful pull within the source's --silent-after",
                        wouldChange: "the source answering again ('rollout source test' shows its answer)")))
        }
        switch context.timeSource {
        case .wall, .liveSimulation: break
        case .finishedSimulation(let ended):
            findings.append(
                Finding(
                    .hold, .data,
                    "the simulation writing this store ended at \(ended.iso8601); figures are frozen at its last simulated instant \(now.iso8601)"
                ))
        case .lostSimulation(let last):
            findings.append(
                Finding(
                    .hold, .data,
                    "the simulation writing this store stopped answering (last heartbeat \(last.iso8601)); figures are frozen at \(now.iso8601)"
                ))
        }
        if newestEvent == nil {
            findings.append(
                Finding(
                    .hold, .data, "no telemetry received yet; guardrails cannot judge the rollout",
                    evidence: FindingEvidence(
                        test: "data: telemetry received", statistic: "no events", threshold: "at least one event",
                        wouldChange: "telemetry arriving: rollout ingest, serve's /v1/events, or a simulation")))
        } else if !hasTelemetry && context.started {
            findings.append(Finding(.hold, .data, "no telemetry since the rollout started at \(since.iso8601)"))
        } else if let age = dataAge, age > context.staleAfter {
            findings.append(
                Finding(
                    .hold, .data,
                    "telemetry is stale: newest event \(Words.duration(age)) old (limit \(Words.duration(context.staleAfter)))",
                    evidence: FindingEvidence(
                        test: "data freshness", statistic: "newest event \(Words.duration(age)) old",
                        threshold: "stale after \(Words.duration(context.staleAfter))",
                        wouldChange: "fresh telemetry arriving (ingest, the simulator or serve)")))
        }

        // Crashes.
        let c = crash.totals
        let sprt = crash.sprt
        let rates =
            "fatal crashes per 1,000 sessions: exposed \(Words.perMille(c.exposedCrashRate)) vs control \(Words.perMille(c.controlCrashRate)) "
            + "(\(groupedCount(c.exposedCrashes)) of \(groupedCount(c.exposedSessions)) vs \(groupedCount(c.controlCrashes)) of \(groupedCount(c.controlSessions)) sessions)"
        if sprt.harmDeclared {
            findings.append(
                Finding(
                    .halt, .crashes,
                    "exposed users crash more than control: SPRT Λ = \(Words.fixed(sprt.logLikelihoodRatio)) reached \(Words.fixed(sprt.harmBound)) "
                        + "(testing \(Words.fixed(sprt.harmRatio))× crash rate) at \(sprt.harmDeclaredAt!.iso8601); \(rates)",
                    evidence: sprtEvidence(context)))
        } else if let baseline = crash.baseline, baseline.harmDeclared {
            findings.append(
                Finding(
                    .halt, .crashes,
                    "exposed users crash more than the control group did before it left: baseline SPRT Λ = "
                        + "\(Words.fixed(baseline.logLikelihoodRatio)) reached \(Words.fixed(baseline.harmBound)) (testing "
                        + "\(Words.fixed(baseline.harmRatio))× the control's rate) at \(baseline.harmDeclaredAt!.iso8601); "
                        + baselineRates(baseline),
                    evidence: baselineEvidence(baseline)))
        } else if rolling && hasTelemetry && c.exposedSessions > 0 && c.controlSessions == 0 && context.isFull {
            // Stand down, said why: at 100% there is no control group, and none was seen before.
            findings.append(
                Finding(
                    .hold, .crashes,
                    "no crash comparison: at 100% there is no control group, and no control sessions were seen before "
                        + "it; exposed crash rates cannot be compared with anything",
                    evidence: FindingEvidence(
                        test: "crash comparison: exposed against control sessions",
                        samples: "\(groupedCount(c.exposedSessions)) exposed vs 0 control sessions",
                        wouldChange: "a control group: lower the percentage below 100% for a while")))
        } else if rolling && hasTelemetry && (c.exposedSessions == 0 || c.controlSessions == 0) {
            let missing =
                c.exposedSessions == 0 && c.controlSessions == 0
                ? "exposed or control" : c.exposedSessions == 0 ? "exposed" : "control"
            findings.append(
                Finding(
                    .hold, .crashes, "no crash comparison yet: no sessions from the \(missing) group",
                    evidence: FindingEvidence(
                        test: "crash comparison: exposed against control sessions",
                        samples: "\(groupedCount(c.exposedSessions)) exposed vs \(groupedCount(c.controlSessions)) control sessions",
                        wouldChange: "sessions from both groups (the app's session events carry its cohort)")))
        } else if let harm = significantHarm() {
            findings.append(Finding(.watch, .crashes, harm.text, evidence: intervalEvidence(harm.name, harm.test)))
        } else if c.exposedSessions > 0 && c.controlSessions > 0 {
            let power = evidence(context)
            if rolling, !power.enough {
                // Last among the findings: a more specific HOLD (throttling, stale data) names the verdict first.
                notEnoughData = Finding(
                    .hold, .crashes, "not enough data yet: " + power.text, evidence: powerEvidence(context))
            } else {
                var text =
                    sprt.noHarmShown
                    ? "no harm of \(Words.fixed(sprt.harmRatio))× or more (SPRT Λ = \(Words.fixed(sprt.logLikelihoodRatio)) ≤ \(Words.fixed(sprt.noHarmBound))); "
                    : "no crash signal (SPRT Λ = \(Words.fixed(sprt.logLikelihoodRatio)) of \(Words.fixed(sprt.harmBound))); "
                text += crashFreeText()
                if let mde = crash.smallestDetectableIncrease {
                    text += "; smallest detectable increase +\(Words.percent(mde, digits: 0)) (\(power.usersText))"
                }
                if let baseline = crash.baseline, let gone = crash.controlGoneSince, context.isFull {
                    // The control group is gone (100%: no band left for it, and no sessions from it since): the
                    // comparison goes on against its rate before it left. Not after a kill (the exposed group is what
                    // is gone then), nor once control sessions are back (the comparison above is live again).
                    text =
                        "control group gone since \(gone.iso8601): no crash signal against its rate before "
                        + "(baseline SPRT Λ = \(Words.fixed(baseline.logLikelihoodRatio)) of \(Words.fixed(baseline.harmBound))); "
                        + baselineRates(baseline) + "; before it left: " + text
                    findings.append(Finding(.ok, .crashes, text, evidence: baselineEvidence(baseline)))
                } else {
                    findings.append(Finding(.ok, .crashes, text, evidence: sprtEvidence(context)))
                }
            }
        }

        // Rejected attestations (every class but throttling, which passes) above the HALT ceiling, sustained: the
        // lower 95% bound over the last 15 minutes and the ratio over the last 5 both above it.
        let rejection = rejectionWindows
        if rejection.long.attempts >= 100, rejection.short.attempts >= 20,
            Self.lowerBound(failures: rejection.long.failures, attempts: rejection.long.attempts) > context.rejectionHaltCeiling,
            Double(rejection.short.failures) / Double(rejection.short.attempts) > context.rejectionHaltCeiling
        {
            let ratio = Double(rejection.long.failures) / Double(rejection.long.attempts)
            let low = Self.lowerBound(failures: rejection.long.failures, attempts: rejection.long.attempts)
            findings.append(
                Finding(
                    .halt, .failures,
                    "attestations rejected for \(Words.percent(ratio)) of exposed App Attest attempts (\(groupedCount(rejection.long.failures)) "
                        + "of \(groupedCount(rejection.long.attempts)) in the last \(rejection.long.minutes) min, at least \(Words.percent(low)) at 95%), "
                        + "above the HALT ceiling \(Words.percent(context.rejectionHaltCeiling, digits: 0)): enforcing App Check would lock these users out",
                    evidence: FindingEvidence(
                        test: "rejected App Attest attempts of exposed users (throttling aside) against the HALT ceiling",
                        statistic: "\(Words.percent(ratio)) over \(rejection.long.minutes) min (95% lower bound \(Words.percent(low))); "
                            + "\(Words.percent(Double(rejection.short.failures) / Double(rejection.short.attempts))) over the last \(rejection.short.minutes) min",
                        threshold: "HALT when both are above \(Words.percent(context.rejectionHaltCeiling, digits: 0)) (failures.halt-ceiling-percent)",
                        samples: "\(groupedCount(rejection.long.failures)) rejected of \(groupedCount(rejection.long.attempts)) attempts",
                        wouldChange: "attestations accepted again (a fixed build, the right team ID), or a lower percentage")))
        }

        // Failures, each class against its own frozen baseline.
        for m in failureMonitors where m.alarmed {
            let what =
                "\(m.errorClass) failures at \(Words.percent(m.observedRate ?? 0)) of exposed App Attest attempts "
                + "(\(groupedCount(m.failures)) of \(groupedCount(m.attempts)) in the last \(Words.duration(failureWindow))) vs baseline "
                + "\(Words.percent(m.baseline ?? 0)) (\(m.baselineSource.words); CUSUM \(Words.fixed(m.cusum!.statistic)) ≥ \(Words.fixed(m.cusum!.threshold)))"
            if m.errorClass == .serverUnavailable {
                // Throttling passes: pause (HOLD) and say at what pace to go on once it has.
                let seen = observedAttestationsPerSecond.perSecond
                let pace = seen > 0 ? min(seen / 2, context.budget.perSecond) : context.budget.perSecond
                let wait =
                    "; wait until it falls back to the baseline, then keep new attestations under \(Words.fixed(pace, digits: 1))/s"
                    + (seen > 0 ? " (half the \(Words.fixed(seen, digits: 1))/s Apple throttled at)" : " (Apple's guidance)")
                findings.append(
                    Finding(.hold, .failures, "Apple is throttling attestations: \(what)" + wait, evidence: cusumEvidence(m)))
            } else {
                findings.append(Finding(.hold, .failures, what, evidence: cusumEvidence(m)))
            }
        }
        let window = ceilingWindow
        if window.attempts >= 50, Double(window.failures) / Double(window.attempts) > context.failureCeiling {
            findings.append(
                Finding(
                    .hold, .failures,
                    "failure ratio \(Words.percent(Double(window.failures) / Double(window.attempts))) of exposed App Attest attempts "
                        + "(\(groupedCount(window.failures)) of \(groupedCount(window.attempts)) in the last \(window.minutes) min) is above the ceiling "
                        + "\(Words.percent(context.failureCeiling, digits: 0))",
                    evidence: FindingEvidence(
                        test: "failure ceiling on exposed App Attest attempts",
                        statistic: "failure ratio \(Words.percent(Double(window.failures) / Double(window.attempts)))",
                        threshold: "above \(Words.percent(context.failureCeiling, digits: 0)) is HOLD",
                        samples: "\(groupedCount(window.failures)) failures of \(groupedCount(window.attempts)) attempts in the last \(window.minutes) min",
                        wouldChange: "the ratio over the last \(window.minutes) min falling to the ceiling or below")))
        }
        let rate = observedAttestationsPerSecond
        if rate.perSecond >= context.attestationRateShare * context.budget.perSecond {
            findings.append(
                Finding(
                    .hold, .failures,
                    "attestation rate near Apple's guidance: \(Words.fixed(rate.perSecond, digits: 1))/s observed "
                        + "(\(groupedCount(rate.count)) new exposed installations in the last \(rate.minutes) min, each attests once) vs "
                        + "\(Words.fixed(context.budget.perSecond, digits: 0))/s",
                    evidence: FindingEvidence(
                        test: "observed attestation rate against Apple's guidance",
                        statistic: "\(Words.fixed(rate.perSecond, digits: 1))/s",
                        threshold: "HOLD at \(Words.percent(context.attestationRateShare, digits: 0)) of \(Words.fixed(context.budget.perSecond, digits: 0))/s",
                        samples: "\(groupedCount(rate.count)) new exposed installations in the last \(rate.minutes) min",
                        wouldChange: "fewer new exposed installations per second (smaller steps, or waiting)")))
        }
        if rolling, hasTelemetry, failureMonitors.allSatisfy({ $0.baseline == nil }) {
            findings.append(
                Finding(
                    .ok, .failures,
                    "failure monitors wait for a baseline (the rollout's first settled window of exposed attempts, control or pre-rollout attempts, or configured rates)"
                ))
        }

        // Exposure.
        if let outside = context.servedOutsideRollout {
            findings.append(
                Finding(
                    .hold, .exposure,
                    "the rollout does not control the flag: a kill would leave it \"true\" for \(outside) of installations "
                        + "(its default value or another condition's value), and the control group is exposed too",
                    evidence: FindingEvidence(
                        test: "exposure: only the rollout's condition serves \"true\"",
                        statistic: "\"true\" past a kill for \(outside) of installations", threshold: "none",
                        wouldChange: "those values set to \"false\" in the template (rollout config export, then import)")))
        }
        if let finding = enforcementFinding(context) { findings.append(finding) }
        let exposure = exposureCheck(context)
        if let srm = exposure.sampleRatio, srm.pValue < context.sampleRatioThreshold {
            let split =
                "\(groupedCount(srm.observed[0])) enabled vs \(groupedCount(srm.observed[1])) control active installations, expected "
                + "\(Words.percent(srm.expectedShares[0], digits: 0)) : \(Words.percent(srm.expectedShares[1], digits: 0)) "
                + "(χ² = \(Words.fixed(srm.chiSquare)), p = \(Words.scientific(srm.pValue)))"
            let propagating = (exposure.propagation ?? 1) < 0.95 && context.currentMicroPercent > 50_000_000
            if propagating {
                findings.append(
                    Finding(
                        .ok, .exposure,
                        "cohort split off while the change propagates (\(Words.percent(exposure.propagation!)) on the newest version): \(split)"
                    ))
            } else {
                findings.append(
                    Finding(
                        .hold, .exposure,
                        "sample ratio mismatch: \(split); assignment or event logging is broken, so the comparison cannot be trusted",
                        evidence: FindingEvidence(
                            test: "χ² sample ratio test on active installations",
                            statistic: "χ² = \(Words.fixed(srm.chiSquare)), p = \(Words.scientific(srm.pValue))",
                            threshold: "mismatch at p < \(Words.scientific(context.sampleRatioThreshold))",
                            samples: "\(groupedCount(srm.observed[0])) enabled vs \(groupedCount(srm.observed[1])) control",
                            wouldChange: "a split matching the bands (fix assignment or event logging)")))
            }
        }

        if let notEnoughData { findings.append(notEnoughData) }
        if findings.isEmpty {
            findings.append(
                Finding(
                    .ok, .data, rolling ? "telemetry flowing; nothing unusual" : "rollout at 0%: nothing to compare yet"
                ))
        }
        return Assessment(verdict: Verdict(findings: findings), armed: armed, exposure: exposure, context: context)
    }

    /// App Check enforcement against the flag's exposure: a service ENFORCED while the flag does not give App Attest
    /// to everyone (killed, lowered, not started: in the Firebase Console, or by a kill that could not read
    /// enforcement) rejects every user without it now: HALT, naming the services and the command that lowers them.
    /// Enforcement that cannot be read is HOLD when the last read had a service ENFORCED; when it was never read,
    /// or the last read had nothing ENFORCED, it is no finding (`status` shows it as unknown): a credential
    /// without App Check's read permission would otherwise hold every verdict at WATCH for the whole ramp. At 100% there is nothing to find: enforcement is the ramp's last stage.
    func enforcementFinding(_ context: RolloutContext) -> Finding? {
        guard let e = context.enforcement, !context.isFull else { return nil }
        let micro = context.currentMicroPercent
        let percent =
            micro % 1_000_000 == 0 ? "\(micro / 1_000_000)%" : Words.fixed(Double(micro) / 1_000_000, digits: 2) + "%"
        let exposed =
            micro > 0
            ? "gives App Attest to \(percent) of installations only"
            : "gives App Attest to nobody (killed, or not started)"
        let enforced = e.enforced
        let lower =
            enforced.map { "'rollout enforcement set \($0) unenforced --reason TEXT'" }.joined(separator: ", then ")
        if e.isKnown {
            guard !enforced.isEmpty else { return nil }
            let services = enforced.joined(separator: ", ")
            return Finding(
                .halt, .exposure,
                "App Check enforces \(services) while the flag \(exposed): users without App Attest are rejected now; "
                    + "run \(lower), or bring the flag back to 100%",
                evidence: FindingEvidence(
                    test: "exposure: App Check enforced only while everyone gets App Attest",
                    statistic: "ENFORCED: \(services)", threshold: "any service ENFORCED below 100% is HALT",
                    wouldChange:
                        "those services UNENFORCED (rollout enforcement set SERVICE unenforced), or the flag at 100%"))
        }
        let why = e.failure ?? "not read"
        if !enforced.isEmpty, let readAt = e.readAt {
            let services = enforced.joined(separator: ", ")
            return Finding(
                .hold, .exposure,
                "App Check enforcement could not be read (\(why)); at \(readAt.iso8601) it enforced \(services), "
                    + "and the flag \(exposed): if it still does, users without App Attest are rejected; check with "
                    + "'rollout enforcement show', then run \(lower)",
                evidence: FindingEvidence(
                    test: "exposure: App Check enforced only while everyone gets App Attest",
                    statistic: "unknown now; ENFORCED at \(readAt.iso8601): \(services)",
                    threshold: "enforcement last read ENFORCED below 100% and unreadable is HOLD",
                    wouldChange: "a read showing no service ENFORCED, or the flag at 100%"))
        }
        return nil
    }

    /// Whether the sample is big enough to see the configured effect, in words with the numbers.
    public func evidence(_ context: RolloutContext) -> SampleEvidence {
        let t = crash.totals
        let perArm = min(t.exposedUsers, t.controlUsers)
        let mde = crash.smallestDetectableIncrease
        var e = SampleEvidence(
            exposedUsers: t.exposedUsers, controlUsers: t.controlUsers, detectable: mde, target: context.detectableEffect)
        let cfg = crash.configuration
        if let p0 = t.controlCrashedUserRate, p0 > 0 {
            let needed = DetectableEffect.usersPerArm(
                baseline: p0, relativeIncrease: context.detectableEffect, alpha: cfg.alpha, power: 1 - cfg.beta)
            e.usersNeededPerArm = needed.isFinite ? Int64(needed.rounded(.up)) : nil
        }
        // Users entering the smaller arm per hour, over the last hour of minutes.
        let lastHour = series.reduce(into: (Int64(0), Int64(0))) {
            $0.0 += $1.totals.sum(.usersEntered, cohort: .enabled)
            $0.1 += $1.totals.sum(.usersEntered, cohort: .control)
        }
        e.usersPerHourSmallerArm = t.exposedUsers <= t.controlUsers ? lastHour.0 : lastHour.1
        _ = perArm
        return e
    }

    /// Exposed App Attest attempts and failures (all classes) over the last complete 15 minutes (the ceiling's
    /// window: short enough to follow a new build, long enough not to trip on a handful of attempts).
    var ceilingWindow: (attempts: Int64, failures: Int64, minutes: Int) {
        guard let w = windows.first(where: { $0.minutes == 15 }) ?? windows.last else { return (0, 0, 15) }
        var attempts: Int64 = 0
        var failures: Int64 = 0
        for (k, v) in w.totals.counts where RolloutWatch.exposedAttestation(k) {
            if k.kind == .attestationSuccess { attempts += v }
            if k.kind == .attestationFailure {
                attempts += v
                failures += v
            }
        }
        return (attempts, failures, w.minutes)
    }

    /// Exposed App Attest attempts and those rejected (every failure class but throttling's serverUnavailable) over
    /// the last complete 15 and 5 minutes.
    var rejectionWindows: (long: (attempts: Int64, failures: Int64, minutes: Int), short: (attempts: Int64, failures: Int64, minutes: Int)) {
        func count(_ minutes: Int) -> (attempts: Int64, failures: Int64, minutes: Int) {
            guard let w = windows.first(where: { $0.minutes == minutes }) else { return (0, 0, minutes) }
            var attempts: Int64 = 0
            var failures: Int64 = 0
            for (k, v) in w.totals.counts where RolloutWatch.exposedAttestation(k) {
                if k.kind == .attestationSuccess { attempts += v }
                if k.kind == .attestationFailure {
                    attempts += v
                    if FailureDetail(code: k.detail).errorClass != .serverUnavailable { failures += v }
                }
            }
            return (attempts, failures, minutes)
        }
        return (count(15), count(5))
    }

    /// The one-sided 95% Wilson lower bound of a ratio.
    static func lowerBound(failures x: Int64, attempts n: Int64) -> Double {
        guard n > 0 else { return 0 }
        let z = 1.645
        let nn = Double(n)
        let p = Double(x) / nn
        let centre = p + z * z / (2 * nn)
        let spread = z * (p * (1 - p) / nn + z * z / (4 * nn * nn)).squareRoot()
        return max(0, (centre - spread) / (1 + z * z / nn))
    }

    /// New exposed installations per second over the last complete 5 minutes (each attests with Apple once).
    public var observedAttestationsPerSecond: (perSecond: Double, count: Int64, minutes: Int) {
        let w = windows.first { $0.minutes == 5 } ?? windows.last
        guard let w else { return (0, 0, 5) }
        let n = w.totals.sum(.usersEntered, cohort: .enabled)
        return (Double(n) / Double(w.minutes * 60), n, w.minutes)
    }

    private func significantHarm() -> (text: String, name: String, test: MixtureSPRT)? {
        for (name, test) in [("sessions", crash.sessionDifference), ("users", crash.userDifference)] {
            guard let interval = test.interval, interval.lowerBound > 0, test.pValue < crash.configuration.alpha else {
                continue
            }
            let text =
                "exposed crash rate per \(name == "sessions" ? "session" : "user") is higher (always-valid p = \(Words.scientific(test.pValue))): "
                + "difference +\(Words.points(test.estimate ?? 0)) [\(Words.points(interval.lowerBound)), \(Words.points(interval.upperBound))]; "
                + crashFreeText()
            return (text, name == "sessions" ? "session" : "user", test)
        }
        return nil
    }

    /// The exposed rate while the control was gone (every such look since the baseline froze) against the
    /// control's before, in fatal crashes per 1,000 sessions.
    func baselineRates(_ b: BaselineCrashTest) -> String {
        "fatal crashes per 1,000 sessions: exposed \(Words.perMille(b.exposedRate)) while it was gone (\(groupedCount(b.exposedCrashes)) of "
            + "\(groupedCount(b.exposedSessions)) sessions) vs control \(Words.perMille(b.baselineRate)) before, at most "
            + "\(Words.perMille(b.baselineUpperRate)) (\(groupedCount(b.baselineCrashes)) of \(groupedCount(b.baselineSessions)) sessions)"
    }

    private func crashFreeText() -> String {
        let c = crash.totals
        var parts: [String] = []
        if let e = c.exposedCrashRate, let k = c.controlCrashRate {
            var s =
                "crash-free sessions \(Words.percent(1 - e, digits: 3)) exposed vs \(Words.percent(1 - k, digits: 3)) control"
            if let i = crash.sessionDifference.interval {
                s += " (difference of crash rates \(Words.points(i.lowerBound)) to \(Words.points(i.upperBound)))"
            }
            parts.append(s)
        }
        if let e = c.exposedCrashedUserRate, let k = c.controlCrashedUserRate {
            parts.append("crash-free users \(Words.percent(1 - e, digits: 3)) vs \(Words.percent(1 - k, digits: 3))")
        }
        return parts.joined(separator: "; ")
    }

    /// Observed exposure, propagation and the sample ratio test over active installations.
    public func exposureCheck(_ context: RolloutContext) -> ExposureCheck {
        let active = activity.active
        let enabled = activity.activeByCohort[.enabled] ?? 0
        let control = activity.activeByCohort[.control] ?? 0
        let newest = context.newestTemplateVersion ?? fetchedVersions.keys.max()
        var check = ExposureCheck(
            observedExposure: active > 0 ? Double(enabled) / Double(active) : nil,
            desiredExposure: Double(context.currentMicroPercent) / 100_000_000,
            newestTemplateVersion: newest)
        if let newest, active > 0 { check.propagation = min(1, Double(fetchedVersions[newest] ?? 0) / Double(active)) }
        if let share = context.expectedExposedShare, enabled + control > 0 {
            check.sampleRatio = SampleRatioTest(observed: [enabled, control], expectedShares: [share, 1 - share])
        }
        return check
    }
}

/// Number formats for reasons in words.
enum Words {
    static func fixed(_ v: Double, digits: Int = 2) -> String { cFormat("%.\(digits)f", v) }
    /// A share as a percentage; shares under 0.1% keep two significant digits instead of rounding to 0.0%.
    static func percent(_ v: Double, digits: Int = 1) -> String {
        if v > 0, v < 0.001 { return cFormat("%.2g%%", v * 100) }
        return cFormat("%.\(digits)f%%", v * 100)
    }
    static func perMille(_ v: Double?) -> String { v.map { cFormat("%.2f", $0 * 1000) } ?? "n/a" }
    /// A difference of rates in percentage points.
    static func points(_ v: Double) -> String { cFormat("%+.3f pp", v * 100) }
    static func scientific(_ v: Double) -> String { v >= 0.001 ? cFormat("%.3f", v) : cFormat("%.1e", v) }
    static func duration(_ d: Instant.Duration) -> String {
        let s = d.microseconds / 1_000_000
        if s < 120 { return "\(s) s" }
        if s < 7200 { return "\(s / 60) min" }
        if s < 172_800 { return "\(s / 3600) h" }
        return "\(s / 86_400) days"
    }
}

/// Whether a sample can show the configured crash effect: users per arm, the smallest detectable increase, and
/// what more is needed.
public struct SampleEvidence: Hashable, Sendable {
    public var exposedUsers: Int64
    public var controlUsers: Int64
    /// The smallest relative increase in crashed users detectable now (nil before control has a crash).
    public var detectable: Double?
    public var target: Double
    /// Users per arm the target needs at control's crash rate (nil before control has a crash).
    public var usersNeededPerArm: Int64?
    /// Users who entered the smaller arm in the last hour.
    public var usersPerHourSmallerArm: Int64 = 0

    public var enough: Bool { detectable.map { $0 <= target } ?? false }

    public var usersText: String { "\(groupedCount(exposedUsers)) exposed vs \(groupedCount(controlUsers)) control users" }

    public var text: String {
        var s = "\(usersText)"
        if let d = detectable {
            s += "; smallest detectable crash-rate increase +\(Words.percent(d, digits: 0)) (needed: +\(Words.percent(target, digits: 0)) or less)"
        } else {
            s += "; no control user has crashed yet, so no increase is detectable (needed: +\(Words.percent(target, digits: 0)))"
        }
        if let need = usersNeededPerArm {
            let more = max(0, need - min(exposedUsers, controlUsers))
            s += "; about \(groupedCount(more)) more users per arm needed (\(groupedCount(need)) per arm)"
            if more > 0 {
                if usersPerHourSmallerArm > 0 {
                    let hours = Double(more) / Double(usersPerHourSmallerArm)
                    s += ", about \(Words.duration(.seconds(hours * 3600))) at the last hour's \(groupedCount(usersPerHourSmallerArm)) users/h"
                } else {
                    s += "; no new users entered the smaller arm in the last hour"
                }
            }
        }
        return s
    }
}

extension FailureMonitor.BaselineSource {
    var words: String {
        switch self {
        case .none: "no baseline"
        case .configured: "configured"
        case .observed(let n): "control and pre-rollout, \(groupedCount(n)) attempts"
        case .firstWindow(let n, let through): "frozen: the rollout's first settled window, \(groupedCount(n)) attempts to \(through.iso8601)"
        }
    }
}
