/// The numbers behind one finding, for the console's verdict pane ("why"): which test, its statistic against its
/// threshold, the samples it saw, the effect it can detect, and what would change the verdict.
///
/// Filled in by `TelemetrySnapshot.assess` where each finding is decided, so the pane shows the very figures the
/// verdict was drawn from; text in the core's number formats.
public struct FindingEvidence: Hashable, Sendable {
    /// The test or rule, e.g. `SPRT on fatal crashes (harm 1.5×)`.
    public var test: String
    /// The statistic as observed, e.g. `Λ = 1.20`.
    public var statistic: String?
    /// The bound it is judged against, e.g. `harm at Λ ≥ 2.89, no harm at Λ ≤ -2.25`.
    public var threshold: String?
    /// The sample sizes, e.g. `412 exposed vs 398 control sessions`.
    public var samples: String?
    /// The smallest effect detectable at this sample, e.g. `+64% crashed users (needed +50%)`.
    public var detectableEffect: String?
    /// What would move the verdict, e.g. `about 1,200 more users per arm`.
    public var wouldChange: String

    public init(
        test: String, statistic: String? = nil, threshold: String? = nil, samples: String? = nil,
        detectableEffect: String? = nil, wouldChange: String
    ) {
        self.test = test
        self.statistic = statistic
        self.threshold = threshold
        self.samples = samples
        self.detectableEffect = detectableEffect
        self.wouldChange = wouldChange
    }
}

extension Finding {
    /// This finding with its evidence attached.
    func with(_ evidence: FindingEvidence) -> Finding {
        var f = self
        f.evidence = evidence
        return f
    }
}

extension TelemetrySnapshot {
    func sprtEvidence(_ context: RolloutContext) -> FindingEvidence {
        let s = crash.sprt
        let c = crash.totals
        let power = evidence(context)
        let change: String
        if s.harmDeclared {
            change = "harm once declared stays declared: lower the percentage or kill; a new rollout starts a new test"
        } else if s.noHarmShown {
            change = "HALT if Λ climbs back to \(Words.fixed(s.harmBound)) (exposed crashes outpacing control)"
        } else {
            change = "HALT at Λ ≥ \(Words.fixed(s.harmBound)); \"no harm\" at Λ ≤ \(Words.fixed(s.noHarmBound))"
        }
        return FindingEvidence(
            test:
                "SPRT on fatal crashes (harm \(Words.fixed(s.harmRatio))×, α \(Words.fixed(s.alpha)), β \(Words.fixed(s.beta)))",
            statistic:
                "Λ = \(Words.fixed(s.logLikelihoodRatio)) (\(groupedCount(s.exposedCrashes)) exposed vs \(groupedCount(s.controlCrashes)) control crashes)",
            threshold: "harm at Λ ≥ \(Words.fixed(s.harmBound)), no harm at Λ ≤ \(Words.fixed(s.noHarmBound))",
            samples:
                "\(groupedCount(c.exposedSessions)) exposed vs \(groupedCount(c.controlSessions)) control sessions; \(groupedCount(power.exposedUsers)) exposed vs \(groupedCount(power.controlUsers)) control users",
            detectableEffect: detectableText(power), wouldChange: change)
    }

    func baselineEvidence(_ b: BaselineCrashTest) -> FindingEvidence {
        FindingEvidence(
            test:
                "SPRT on fatal crashes per exposed session against the control's rate before it left (harm "
                + "\(Words.fixed(b.harmRatio))×, α \(Words.fixed(b.alpha)) with the baseline's bound)",
            statistic:
                "Λ = \(Words.fixed(b.logLikelihoodRatio)) (\(groupedCount(b.exposedCrashes)) crashes in \(groupedCount(b.exposedSessions)) exposed sessions without control sessions since \(b.frozenAt.iso8601))",
            threshold:
                "harm at Λ ≥ \(Words.fixed(b.harmBound)) against the control's rate at most \(Words.perMille(b.baselineUpperRate)) per 1,000 (its \(Words.percent(1 - b.alpha / 2, digits: 1)) upper bound)",
            samples:
                "control before it left: \(groupedCount(b.baselineCrashes)) crashes in \(groupedCount(b.baselineSessions)) sessions",
            wouldChange:
                b.harmDeclared
                ? "harm once declared stays declared: lower the percentage or kill"
                : "HALT at Λ ≥ \(Words.fixed(b.harmBound)) (exposed crashes outpacing the control's old rate)")
    }

    func powerEvidence(_ context: RolloutContext) -> FindingEvidence {
        let power = evidence(context)
        var change = "OK once the smallest detectable increase is at most +\(Words.percent(power.target, digits: 0))"
        if let need = power.usersNeededPerArm {
            let more = max(0, need - min(power.exposedUsers, power.controlUsers))
            change += ": about \(groupedCount(more)) more users per arm (\(groupedCount(need)) per arm)"
        } else {
            change += ": needs a first crashed control user to size it"
        }
        return FindingEvidence(
            test: "power: smallest detectable crash-rate increase at this sample",
            statistic: power.detectable.map { "+\(Words.percent($0, digits: 0)) detectable" }
                ?? "nothing detectable yet",
            threshold: "+\(Words.percent(power.target, digits: 0)) or less",
            samples: "\(groupedCount(power.exposedUsers)) exposed vs \(groupedCount(power.controlUsers)) control users",
            detectableEffect: detectableText(power), wouldChange: change)
    }

    func intervalEvidence(_ name: String, _ test: MixtureSPRT) -> FindingEvidence {
        let c = crash.totals
        return FindingEvidence(
            test: "always-valid mixture SPRT on crashes per \(name)",
            statistic: "p = \(Words.scientific(test.pValue)); difference \(Words.points(test.estimate ?? 0))"
                + (test.interval.map { " [\(Words.points($0.lowerBound)), \(Words.points($0.upperBound))]" } ?? ""),
            threshold: "p < \(Words.fixed(crash.configuration.alpha)) with the interval above 0",
            samples:
                "\(groupedCount(c.exposedSessions)) exposed vs \(groupedCount(c.controlSessions)) control sessions; \(groupedCount(c.exposedUsers)) vs \(groupedCount(c.controlUsers)) users",
            wouldChange: "back to OK when the interval includes 0 again; HALT when the SPRT declares harm")
    }

    func cusumEvidence(_ m: FailureMonitor) -> FindingEvidence {
        FindingEvidence(
            test: "Bernoulli CUSUM on \(m.errorClass) failures (baseline: \(m.baselineSource.words))",
            statistic: m.cusum.map { "S = \(Words.fixed($0.statistic))" },
            threshold: m.cusum.map {
                "alarm at S ≥ \(Words.fixed($0.threshold)) (shift to \(Words.percent($0.shifted)))"
            },
            samples:
                "\(groupedCount(m.failures)) failures of \(groupedCount(m.attempts)) exposed attempts in the last \(Words.duration(failureWindow))",
            wouldChange:
                "clears when the failure rate falls back to the baseline \(Words.percent(m.baseline ?? 0)) and S decays below the threshold"
        )
    }
}

/// A count with thousands separators, as the console and the CLI print counts: `4,914`.
///
/// The one count formatter: the verdict's reasons, the console (`Format.count`) and the CLI all print through it,
/// so a figure reads the same wherever it is shown.
public func groupedCount(_ n: Int64) -> String {
    let digits = String(n.magnitude)
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
        out.append(c)
    }
    return n < 0 ? "-" + out : out
}

extension TelemetrySnapshot {
    fileprivate func detectableText(_ power: SampleEvidence) -> String {
        power.detectable.map {
            "+\(Words.percent($0, digits: 0)) crashed users (needed +\(Words.percent(power.target, digits: 0)) or less)"
        }
            ?? "none yet: no control user has crashed (needed +\(Words.percent(power.target, digits: 0)))"
    }
}

extension VerdictLevel {
    /// The level's symbol, the same on the console and in the CLI: ✓ OK, ◆ WATCH, ‖ HOLD, ✗ HALT.
    public var symbol: String {
        switch self {
        case .ok: "✓"
        case .watch: "◆"
        case .hold: "‖"
        case .halt: "✗"
        }
    }

    /// `✓ OK`, `✗ HALT`: symbol and word, so a level never depends on colour.
    public var labelText: String { symbol + " " + description }
}
