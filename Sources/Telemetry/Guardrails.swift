import Glibc
import Platform

/// Apple's guidance on App Attest load (FACTS §4), configurable because the numbers are soft.
public struct AttestationBudget: Hashable, Sendable {
    /// New attestations (onboarded devices) per day.
    public var perDay: Double
    /// Attestation calls per second.
    public var perSecond: Double
    /// How far the busiest hour's launch rate exceeds the day's average (diurnal peak).
    public var peakToAverage: Double

    public init(perDay: Double = 10_000_000, perSecond: Double = 100, peakToAverage: Double = 2) {
        self.perDay = perDay
        self.perSecond = perSecond
        self.peakToAverage = peakToAverage
    }
}

/// The attestations an increase is predicted to cause.
public struct AttestationLoad: Hashable, Sendable {
    /// Active installations that can attest and whose percentile enters the exposed band.
    public var newlyEligible: Double
    /// Each attests once, at its next launch: within a day for installations active daily.
    public var perDay: Double
    /// At the start, when every newly eligible device is still waiting for its first launch, at the busiest
    /// hour: newly eligible × launches per device per second × peak-to-average.
    public var peakPerSecond: Double

    public func fits(_ budget: AttestationBudget) -> Bool {
        perDay <= budget.perDay && peakPerSecond <= budget.perSecond
    }
}

/// Predictions of attestation load from fleet activity (pure arithmetic).
///
/// Percentiles are uniform, so raising the exposed band from `from` to `to` micro-percent makes a share
/// (to − from)/10⁸ of the active, attest-capable installations newly eligible. Only `attestKey` contacts
/// Apple, once per installation; devices that had been exposed before a decrease already hold a key, so the
/// prediction errs high.
public enum AttestationForecast {
    public static func load(
        fromMicroPercent from: Int64, toMicroPercent to: Int64, fleet: FleetActivity, budget: AttestationBudget
    ) -> AttestationLoad {
        let newly = Double(fleet.attestCapable) * Double(max(0, to - from)) / 100_000_000
        let launches = max(1, fleet.launchesPerInstallationPerDay ?? 1)
        return AttestationLoad(
            newlyEligible: newly, perDay: newly, peakPerSecond: newly * launches / 86_400 * budget.peakToAverage)
    }

    /// The largest target ≤ `to` whose load fits the budget, rounded down to 0.01% (nil: no increase fits).
    public static func largestFittingTarget(
        fromMicroPercent from: Int64, toMicroPercent to: Int64, fleet: FleetActivity, budget: AttestationBudget
    ) -> Int64? {
        guard to > from else { return nil }
        if load(fromMicroPercent: from, toMicroPercent: to, fleet: fleet, budget: budget).fits(budget) { return to }
        guard fleet.attestCapable > 0 else { return to }
        let launches = max(1, fleet.launchesPerInstallationPerDay ?? 1)
        let maxNewly = min(budget.perDay, budget.perSecond * 86_400 / (launches * budget.peakToAverage))
        // A hair of slack before rounding down so that an exact fit (14.4 points) is not lost to binary
        // fractions; the loop then makes sure the result really fits.
        let step = Int64((maxNewly / Double(fleet.attestCapable) * 100_000_000 * (1 + 1e-9)).rounded(.down))
        var target = min(to, (from + step) / 10_000 * 10_000)
        while target > from,
            !load(fromMicroPercent: from, toMicroPercent: target, fleet: fleet, budget: budget).fits(budget)
        {
            target -= 10_000
        }
        return target > from ? target : nil
    }
}

/// The kind of percentage change the write path asks about.
public enum PercentageChange: Sendable, Hashable {
    case increase
    case decrease
    case kill
}

/// What the guardrail policy needs to know, gathered by the write path.
public struct GuardrailInput: Sendable {
    public var armed: Bool
    public var verdict: Verdict
    /// Fleet activity for the attestation forecast (nil: unknown, the forecast is skipped with a note).
    public var fleet: FleetActivity?
    public var budget: AttestationBudget

    public init(armed: Bool, verdict: Verdict, fleet: FleetActivity?, budget: AttestationBudget = AttestationBudget()) {
        self.armed = armed
        self.verdict = verdict
        self.fleet = fleet
        self.budget = budget
    }

    /// The input an assessed snapshot gives.
    public init(_ assessment: Assessment, snapshot: TelemetrySnapshot, budget: AttestationBudget = AttestationBudget())
    {
        self.init(
            armed: assessment.armed, verdict: assessment.verdict,
            fleet: snapshot.activity.active > 0 ? snapshot.activity : nil, budget: budget)
    }
}

/// Why a change was refused, and what would pass.
public struct GuardrailRefusal: Hashable, Sendable, CustomStringConvertible {
    public enum Cause: Hashable, Sendable {
        case verdict(VerdictLevel)
        case attestationBudget
    }
    public var cause: Cause
    public var reason: String
    /// The largest target that fits, in micro-percent (only for the attestation budget; nil if none fits).
    public var suggestedTargetMicroPercent: Int64?
    /// The load the refused change would cause.
    public var load: AttestationLoad?
    public var description: String { reason }
}

/// The guardrail's answer.
public enum GuardrailDecision: Hashable, Sendable {
    /// Go ahead; `notes` say what was checked or could not be (for the confirm dialog and the audit log).
    case allow(notes: [String])
    /// Refused (exit 4); the operator may override with a reason, which the write path audits.
    case refuse(GuardrailRefusal)

    public var isAllowed: Bool { if case .allow = self { true } else { false } }
}

/// The guardrail policy the write path consults before publishing a percentage change (pure).
public enum GuardrailPolicy {
    /// Decides on a change from `currentMicroPercent` to `targetMicroPercent`.
    ///
    /// Kills and decreases are never blocked. An increase is refused while armed guardrails say HOLD or HALT,
    /// and when its predicted attestation load exceeds the budget (with the largest step that fits).
    public static func evaluate(
        currentMicroPercent: Int64, targetMicroPercent: Int64, kind: PercentageChange, input: GuardrailInput
    ) -> GuardrailDecision {
        guard kind == .increase, targetMicroPercent > currentMicroPercent else {
            return .allow(notes: ["\(kind == .kill ? "a kill" : "a decrease") is never blocked by guardrails"])
        }
        var notes: [String] = []
        if input.armed {
            if input.verdict.level >= .hold {
                return .refuse(
                    GuardrailRefusal(
                        cause: .verdict(input.verdict.level),
                        reason: "guardrail \(input.verdict.level): \(input.verdict.reason)"))
            }
            notes.append("guardrails armed: verdict \(input.verdict.level)")
        } else {
            notes.append("guardrails not armed: no telemetry for this rollout yet")
        }
        guard let fleet = input.fleet, fleet.attestCapable > 0 else {
            notes.append("attestation load unknown: no active installations seen in the last 24 hours")
            return .allow(notes: notes)
        }
        let load = AttestationForecast.load(
            fromMicroPercent: currentMicroPercent, toMicroPercent: targetMicroPercent, fleet: fleet,
            budget: input.budget)
        let figures =
            "about \(groupedCount(Int64(load.newlyEligible.rounded()))) new attestations, peak \(cFormat("%.1f", load.peakPerSecond))/s "
            + "(guidance \(groupedCount(Int64(input.budget.perDay))) a day, \(Int(input.budget.perSecond))/s)"
        if load.fits(input.budget) {
            notes.append("attestation load fits: \(figures)")
            return .allow(notes: notes)
        }
        let suggestion = AttestationForecast.largestFittingTarget(
            fromMicroPercent: currentMicroPercent, toMicroPercent: targetMicroPercent, fleet: fleet,
            budget: input.budget)
        var reason = "attestation budget exceeded: \(figures)"
        if let suggestion {
            reason += "; the largest step that fits is to \(formatMicroPercent(suggestion))"
        } else {
            reason += "; no increase fits now"
        }
        return .refuse(
            GuardrailRefusal(
                cause: .attestationBudget, reason: reason, suggestedTargetMicroPercent: suggestion, load: load))
    }
}

/// `12.5%`, `0.01%`: micro-percent as a short percentage.
public func formatMicroPercent(_ micro: Int64) -> String {
    var s = cFormat("%.6f", Double(micro) / 1_000_000)
    while s.hasSuffix("0") { s.removeLast() }
    if s.hasSuffix(".") { s.removeLast() }
    return s + "%"
}
