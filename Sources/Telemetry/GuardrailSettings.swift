import Timekeeping

/// How the guardrails behave for a store; kept in the store and changed with `rollout policy set`.
public struct GuardrailSettings: Hashable, Sendable {
    /// Arm the guardrails before any telemetry arrives (they arm by themselves once it does).
    public var armedByHand = false
    /// Publish a kill through the write path when the verdict is HALT (off by default).
    public var autoKill = false
    /// Apple's guidance (FACTS.md §4), adjustable.
    public var budget = AttestationBudget()
    /// Telemetry older than this is stale: HOLD. "Stale" means exactly this everywhere: the newest event is
    /// older than this, in telemetry time (simulated time while a live simulation writes the store).
    public var staleAfter: Instant.Duration = .minutes(10)
    /// OK needs the smallest detectable relative crash increase at the current sample to be at most this.
    public var detectableEffect = 0.5
    /// HOLD when more than this share of the exposed group's App Attest attempts fail (monitored window).
    public var failureCeiling = 0.2
    /// HALT when more than this share of the exposed group's App Attest attempts is rejected (throttling aside),
    /// sustained over 15 minutes: enforcing App Check would lock those users out.
    public var rejectionHaltCeiling = 0.5
    /// Fixed failure baselines per error class (replacing the frozen first window).
    public var failureBaseline: [ErrorClassBucket: Double] = [:]
    /// App Check may be ENFORCED only after the verdict has been OK at 100% for this long (default one day).
    public var enforceAfter: Instant.Duration = .hours(24)

    /// How long the console and every report consider data fresh, in words (for help texts).
    public static let staleDefinition =
        "stale: the newest event is older than telemetry.stale-after-minutes (default 10) of telemetry time, which is "
        + "the wall clock, or a live simulation's simulated time on a drill store; stale data is HOLD, never OK"

    /// The context the assessment reads these settings through.
    public func context(
        exposedMicroPercent: Int64, newestTemplateVersion: Int64?, timeSource: TelemetryTimeSource
    ) -> RolloutContext {
        var context = RolloutContext(
            currentMicroPercent: exposedMicroPercent, newestTemplateVersion: newestTemplateVersion,
            guardrailsEnabled: armedByHand, staleAfter: staleAfter, detectableEffect: detectableEffect,
            failureCeiling: failureCeiling, budget: budget, timeSource: timeSource)
        context.rejectionHaltCeiling = rejectionHaltCeiling
        return context
    }

    /// The watch configuration these settings give for a rollout that started at `since`.
    public func watchConfiguration(since: Instant) -> WatchConfiguration {
        WatchConfiguration(since: since, failures: FailureMonitorConfiguration(configuredBaseline: failureBaseline))
    }

    public init() {}

    /// The settings as `key value` pairs, as `rollout policy show` prints them.
    public var settings: [(key: String, value: String)] {
        [
            ("guardrails.armed", armedByHand ? "on" : "off"),
            ("guardrails.auto-kill", autoKill ? "on" : "off"),
            ("budget.per-second", GuardrailSettings.number(budget.perSecond)),
            ("budget.per-day", GuardrailSettings.number(budget.perDay)),
            ("budget.peak-to-average", GuardrailSettings.number(budget.peakToAverage)),
            ("telemetry.stale-after-minutes", String(staleAfter.microseconds / 60_000_000)),
            ("crash.detectable-effect-percent", GuardrailSettings.number(detectableEffect * 100)),
            ("failures.ceiling-percent", GuardrailSettings.number(failureCeiling * 100)),
            ("failures.halt-ceiling-percent", GuardrailSettings.number(rejectionHaltCeiling * 100)),
            ("enforcement.ok-for-minutes", String(enforceAfter.microseconds / 60_000_000)),
        ]
            + ErrorClassBucket.allCases.map {
                ("failures.baseline-percent.\($0)", failureBaseline[$0].map { GuardrailSettings.number($0 * 100) } ?? "frozen")
            }
    }

    public static var keys: [String] { GuardrailSettings().settings.map(\.key) }

    /// What a setting's value means, for `policy show`'s table. `guardrails.armed` is the by-hand switch: off does
    /// not mean unarmed (`status` says armed as soon as the rollout's telemetry arrives).
    public static func meaning(of key: String, value: String) -> String {
        switch key {
        case "guardrails.armed":
            value == "on" ? "armed now, by hand" : "armed as soon as this rollout's telemetry arrives (on: arm now)"
        case "guardrails.auto-kill": value == "on" ? "a HALT verdict kills the rollout" : "a HALT verdict waits for a person"
        case "telemetry.stale-after-minutes": "older telemetry holds increases (HOLD)"
        case "crash.detectable-effect-percent": "the crash-rate increase the test is sized to detect"
        case "failures.ceiling-percent": "failed App Attest attempts of exposed users above this share: HOLD"
        case "failures.halt-ceiling-percent":
            "rejected App Attest attempts of exposed users (throttling aside) above this share for 15 min: HALT"
        case "enforcement.ok-for-minutes": "App Check ENFORCED only after an OK verdict at 100% this long"
        default: key.hasPrefix("failures.baseline-percent.") ? "the failure rate expected before the rollout (frozen: learned)" : ""
        }
    }

    /// Applies one setting; the error says what is accepted.
    public mutating func set(_ key: String, _ value: String) throws(GuardrailSettingError) {
        func flag() throws(GuardrailSettingError) -> Bool {
            switch value.lowercased() {
            case "on", "true", "yes": return true
            case "off", "false", "no": return false
            default: throw GuardrailSettingError("\(key) takes on or off, not '\(value)'")
            }
        }
        func positive() throws(GuardrailSettingError) -> Double {
            guard let v = Double(value), v.isFinite, v > 0 else { throw GuardrailSettingError("\(key) takes a positive number, not '\(value)'") }
            return v
        }
        switch key {
        case "guardrails.armed": armedByHand = try flag()
        case "guardrails.auto-kill": autoKill = try flag()
        case "budget.per-second": budget.perSecond = try positive()
        case "budget.per-day": budget.perDay = try positive()
        case "budget.peak-to-average":
            let v = try positive()
            guard v >= 1 else { throw GuardrailSettingError("\(key) is at least 1, not '\(value)'") }
            budget.peakToAverage = v
        case "telemetry.stale-after-minutes":
            guard let m = Int64(value), m >= 1, m <= 24 * 60 else {
                throw GuardrailSettingError("\(key) takes whole minutes from 1 to 1440, not '\(value)'")
            }
            staleAfter = .minutes(m)
        case "crash.detectable-effect-percent":
            let v = try positive()
            guard v <= 1000 else { throw GuardrailSettingError("\(key) takes a percentage from 0 to 1000, not '\(value)'") }
            detectableEffect = v / 100
        case "failures.ceiling-percent":
            let v = try positive()
            guard v < 100 else { throw GuardrailSettingError("\(key) takes a percentage below 100, not '\(value)'") }
            failureCeiling = v / 100
        case "failures.halt-ceiling-percent":
            let v = try positive()
            guard v <= 100 else { throw GuardrailSettingError("\(key) takes a percentage up to 100, not '\(value)'") }
            rejectionHaltCeiling = v / 100
        case "enforcement.ok-for-minutes":
            guard let m = Int64(value), m >= 0, m <= 30 * 24 * 60 else {
                throw GuardrailSettingError("\(key) takes whole minutes from 0 to 43200, not '\(value)'")
            }
            enforceAfter = .minutes(m)
        case let k where k.hasPrefix("failures.baseline-percent."):
            guard let c = ErrorClassBucket.allCases.first(where: { "failures.baseline-percent.\($0)" == k }) else {
                throw GuardrailSettingError("unknown setting '\(key)'")
            }
            if value == "frozen" {
                failureBaseline[c] = nil
            } else {
                let v = try positive()
                guard v < 100 else { throw GuardrailSettingError("\(key) takes a percentage below 100 or 'frozen', not '\(value)'") }
                failureBaseline[c] = v / 100
            }
        default: throw GuardrailSettingError("unknown setting '\(key)'")
        }
    }

    static func number(_ v: Double) -> String { v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v) }
}

public struct GuardrailSettingError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}
