import Foundation
import Rollout
import StepUp
import Telemetry
import Timekeeping

/// Conformance checks of the settings ports that decide later writes: `GuardrailSettingsStore` and
/// `StepUpPolicyStore`, with the store's `ConfigStore` for the audit record written in the same transaction.
public enum SettingsConformance {
    public struct Fixture {
        public var guardrails: any GuardrailSettingsStore
        public var policy: any StepUpPolicyStore
        /// The same store's config store (its `atomically` and audit log).
        public var config: any ConfigStore
        /// Opens the same store read-only.
        public var openReadOnly: () throws -> (guardrails: any GuardrailSettingsStore, policy: any StepUpPolicyStore)

        public init(
            guardrails: any GuardrailSettingsStore, policy: any StepUpPolicyStore, config: any ConfigStore,
            openReadOnly:
                @escaping () throws -> (
                    guardrails: any GuardrailSettingsStore, policy: any StepUpPolicyStore
                )
        ) {
            self.guardrails = guardrails
            self.policy = policy
            self.config = config
            self.openReadOnly = openReadOnly
        }
    }

    /// Makes a fresh store (version 1 written, no setting ever saved).
    public typealias Factory = () throws -> Fixture

    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a new store reads the default guardrail settings and step-up policy", defaults),
        ("every guardrail key round-trips a valid value", guardrailRoundTrip),
        ("an unknown key or an invalid value is refused and nothing is stored", invalidRefused),
        ("the step-up policy round-trips", policyRoundTrip),
        ("a setting and its audit record land together in atomically, or neither does", audited),
        ("a read-only store refuses both writes and nothing changes", readOnlyRefuses),
    ]

    public static func all(_ factory: Factory) throws {
        for check in checks { try ConformanceFailure.naming(check.name) { try check.run(factory) } }
    }

    static let expect = ConfigStoreConformance.expect
    static let t0 = Instant(seconds: 1_780_000_000)

    /// A valid value for `key` different from its default.
    static func otherValue(_ key: String) -> String {
        let current = GuardrailSettings().settings.first { $0.key == key }!.value
        switch current {
        case "on": return "off"
        case "off": return "on"
        case "frozen": return "2.5"
        default: return key.hasPrefix("telemetry.") ? "25" : (key.hasSuffix("-percent") ? "12.5" : "7")
        }
    }

    static func defaults(_ factory: Factory) throws {
        let f = try factory()
        try expect(
            try f.guardrails.guardrailSettings() == GuardrailSettings(), "the guardrail settings are not the defaults")
        try expect(try f.policy.stepUpPolicy() == .standard, "the step-up policy is not the standard one")
    }

    static func guardrailRoundTrip(_ factory: Factory) throws {
        let f = try factory()
        var expected = GuardrailSettings()
        for key in GuardrailSettings.keys {
            let value = otherValue(key)
            do { try expected.set(key, value) } catch {
                throw ConformanceFailure("the check's own value \(value) for \(key) is invalid: \(error)")
            }
            try f.guardrails.saveGuardrailSetting(key, value)
            let back = try f.guardrails.guardrailSettings()
            try expect(back == expected, "after \(key) \(value) the settings read \(back.settings)")
        }
        try expect(expected != GuardrailSettings(), "the check changed nothing")
    }

    static func invalidRefused(_ factory: Factory) throws {
        let f = try factory()
        try f.guardrails.saveGuardrailSetting("guardrails.auto-kill", "on")
        let before = try f.guardrails.guardrailSettings()
        for (key, value) in [
            ("guardrails.nonsense", "on"), ("guardrails.auto-kill", "maybe"), ("budget.per-second", "-1"),
        ] {
            var refused = false
            do { try f.guardrails.saveGuardrailSetting(key, value) } catch { refused = true }
            try expect(refused, "\(key) \(value) was accepted")
            try expect(
                try f.guardrails.guardrailSettings() == before, "the refused \(key) \(value) changed the settings")
        }
    }

    static func policyRoundTrip(_ factory: Factory) throws {
        let f = try factory()
        let changed = try StepUpPolicy.standard.setting("rollback", "off").setting("lockout-attempts", "5")
            .setting("increase-over", "25%")
        try f.policy.saveStepUpPolicy(changed)
        try expect(try f.policy.stepUpPolicy() == changed, "the saved policy does not read back")
        try f.policy.saveStepUpPolicy(.standard)
        try expect(try f.policy.stepUpPolicy() == .standard, "the standard policy does not read back after a change")
    }

    struct Abort: Error {}

    static func audited(_ factory: Factory) throws {
        let f = try factory()
        let before = try f.config.auditRecords(limit: 1000, before: nil).count
        func entry(_ to: String) -> AuditEntry {
            AuditEntry(
                time: t0, actor: "ana@test", action: "policy set guardrails.auto-kill", from: "off", to: to,
                result: .recorded)
        }
        try f.config.atomically {
            try f.guardrails.saveGuardrailSetting("guardrails.auto-kill", "on")
            _ = try f.config.appendAudit(entry("on"))
        }
        try expect(try f.guardrails.guardrailSettings().autoKill, "the setting did not land")
        try expect(
            try f.config.auditRecords(limit: 1000, before: nil).count == before + 1, "the audit record did not land")
        do {
            try f.config.atomically {
                try f.guardrails.saveGuardrailSetting("guardrails.auto-kill", "off")
                try f.policy.saveStepUpPolicy(try StepUpPolicy.standard.setting("rollback", "off"))
                _ = try f.config.appendAudit(entry("off"))
                throw Abort()
            }
        } catch is Abort {}
        try expect(try f.guardrails.guardrailSettings().autoKill, "an aborted transaction changed the setting")
        try expect(try f.policy.stepUpPolicy() == .standard, "an aborted transaction changed the policy")
        try expect(
            try f.config.auditRecords(limit: 1000, before: nil).count == before + 1,
            "an aborted transaction left its audit record")
    }

    static func readOnlyRefuses(_ factory: Factory) throws {
        let f = try factory()
        try f.guardrails.saveGuardrailSetting("guardrails.armed", "on")
        let ro = try f.openReadOnly()
        let settings = try ro.guardrails.guardrailSettings()
        try expect(settings.armedByHand, "the read-only store does not read the saved setting")
        var refused = false
        do { try ro.guardrails.saveGuardrailSetting("guardrails.armed", "off") } catch { refused = true }
        try expect(refused, "a read-only store saved a guardrail setting")
        refused = false
        do { try ro.policy.saveStepUpPolicy(try StepUpPolicy.standard.setting("rollback", "off")) } catch {
            refused = true
        }
        try expect(refused, "a read-only store saved the step-up policy")
        try expect(try f.guardrails.guardrailSettings() == settings, "the refused write changed the settings")
        try expect(try f.policy.stepUpPolicy() == .standard, "the refused write changed the policy")
    }
}
