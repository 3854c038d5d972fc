import Timekeeping

/// How the guardrails behave for a store; kept in the store and changed with `rollout policy set`.
public struct GuardrailSettings: Hashable, Sendable {
    /// Arm the guardrails before any telemetry arrives (they arm by themselves once it does).
    public var armedByHand = false
    /// Publish a kill through the write path when the verdict is HALT (off by default).
    public var autoKill = false
    /// Apple's guidance (FACTS.md §4), adjustable.
    public var budget = AttestationBudget()
    /// Telemetry older than this is stale: HOLD.
    public var staleAfter: Instant.Duration = .minutes(10)

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
        ]
    }

    public static var keys: [String] { GuardrailSettings().settings.map(\.key) }

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
        default: throw GuardrailSettingError("unknown setting '\(key)'")
        }
    }

    static func number(_ v: Double) -> String { v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v) }
}

public struct GuardrailSettingError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}
