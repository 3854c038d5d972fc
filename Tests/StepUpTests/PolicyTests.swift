import StepUp
import Testing

@Suite("Which changes need a fresh code")
struct PolicyTests {
    let policy = StepUpPolicy.standard
    static let pct: Int64 = 1_000_000

    private func reasons(
        _ kind: StepUpChange.Kind, _ from: Int64, _ to: Int64, force: Bool = false, override: Bool = false
    ) -> [StepUpReason] {
        requiresStepUp(
            StepUpChange(kind, from: from * Self.pct, to: to * Self.pct, force: force, guardrailOverride: override),
            policy: policy)
    }

    @Test func anIncreaseOfMoreThanTenPoints() {
        #expect(reasons(.set, 10, 25) == [.largeIncrease(points: 15 * Self.pct, limit: 10 * Self.pct)])
        #expect(reasons(.nudge, 10, 20) == [])  // exactly 10 points is not more than 10
        #expect(
            requiresStepUp(StepUpChange(.nudge, from: 10 * Self.pct, to: 20 * Self.pct + 1), policy: policy)
                == [.largeIncrease(points: 10 * Self.pct + 1, limit: 10 * Self.pct)])
        #expect(reasons(.resume, 0, 30) == [.largeIncrease(points: 30 * Self.pct, limit: 10 * Self.pct)])
        #expect(reasons(.resume, 0, 5) == [])
    }

    @Test func aChangeThatCrossesFiftyPercent() {
        #expect(reasons(.nudge, 45, 55) == [.crosses(threshold: 50 * Self.pct)])
        #expect(reasons(.nudge, 50, 51) == [.crosses(threshold: 50 * Self.pct)])
        // Reaching 50 exactly keeps the control band (50, 100] whole: not a crossing.
        #expect(reasons(.nudge, 40, 50) == [])
        #expect(reasons(.nudge, 51, 60) == [])
    }

    @Test func aChangeThatReachesOneHundredPercent() {
        #expect(reasons(.nudge, 95, 100) == [.reachesFull])
        #expect(
            reasons(.set, 40, 100) == [
                .largeIncrease(points: 60 * Self.pct, limit: 10 * Self.pct), .crosses(threshold: 50 * Self.pct),
                .reachesFull,
            ])
        #expect(reasons(.set, 100, 100) == [])
    }

    @Test func rollbackForceGuardrailOverrideAndPolicyChange() {
        #expect(reasons(.rollback, 30, 20) == [.rollback])
        #expect(reasons(.rollback, 20, 30) == [.rollback])
        #expect(reasons(.set, 10, 5, force: true) == [.force])
        #expect(reasons(.nudge, 10, 12, override: true) == [.guardrailOverride])
        #expect(
            requiresStepUp(StepUpChange(.policyChange, detail: "increase-over 20"), policy: policy) == [.policyChange])
        #expect(requiresStepUp(StepUpChange(.operatorEnroll, detail: "bob"), policy: policy) == [.operatorEnrolment])
        #expect(requiresStepUp(StepUpChange(.operatorRemove, detail: "bob"), policy: policy) == [.operatorRemoval])
    }

    @Test func killAndDecreasesNeverNeedOne() {
        #expect(reasons(.kill, 100, 0) == [])
        #expect(reasons(.kill, 30, 0, force: true, override: true) == [])
        #expect(reasons(.set, 100, 0) == [])
        #expect(reasons(.nudge, 60, 40) == [])
        #expect(reasons(.set, 55, 45) == [])
    }

    @Test func rulesCanBeTurnedOffOneByOne() throws {
        func off(_ key: String) throws -> StepUpPolicy { try StepUpPolicy.standard.setting(key, "off") }
        let big = StepUpChange(.set, from: 40 * Self.pct, to: 100 * Self.pct, force: true, guardrailOverride: true)
        #expect(
            requiresStepUp(big, policy: try off("increase-over")) == [
                .crosses(threshold: 50 * Self.pct), .reachesFull, .force, .guardrailOverride,
            ])
        #expect(requiresStepUp(big, policy: try off("cross")).contains(.crosses(threshold: 50 * Self.pct)) == false)
        #expect(requiresStepUp(big, policy: try off("reach-100")).contains(.reachesFull) == false)
        #expect(requiresStepUp(big, policy: try off("force")).contains(.force) == false)
        #expect(requiresStepUp(big, policy: try off("guardrail-override")).contains(.guardrailOverride) == false)
        #expect(requiresStepUp(StepUpChange(.rollback), policy: try off("rollback")) == [])
        #expect(requiresStepUp(StepUpChange(.importTemplate), policy: .standard) == [.importTemplate])
        #expect(requiresStepUp(StepUpChange(.importTemplate), policy: try off("import")) == [])
        #expect(requiresStepUp(StepUpChange(.reseed), policy: .standard) == [])
        #expect(requiresStepUp(StepUpChange(.policyChange), policy: try off("policy-change")) == [])
        #expect(requiresStepUp(StepUpChange(.operatorEnroll), policy: try off("operator-enroll")) == [])
        // Removing an operator is always protected.
        #expect(requiresStepUp(StepUpChange(.operatorRemove), policy: try off("policy-change")) == [.operatorRemoval])
    }

    @Test func settingsHaveTextualKeysThatRoundTrip() throws {
        let p = try StepUpPolicy.standard.setting("increase-over", "5.5").setting("cross", "25, 75,25")
            .setting("lockout-attempts", "5").setting("lockout-minutes", "60").setting("rollback", "off")
        #expect(p.largeIncrease == 5_500_000)
        #expect(p.crossings == [25 * Self.pct, 75 * Self.pct])
        #expect(p.lockoutAttempts == 5)
        #expect(p.lockoutDuration == .minutes(60))
        #expect(p.rollback == false)
        let stored = Dictionary(uniqueKeysWithValues: p.settings.map { ($0.key, $0.value) })
        #expect(try StepUpPolicy(settings: stored) == p)
        #expect(stored["increase-over"] == "5.5")
        #expect(stored["cross"] == "25,75")
        #expect(p.settings.map(\.key) == StepUpPolicy.keys)
        #expect(try StepUpPolicy(settings: [:]) == .standard)
    }

    @Test func badSettingsSayWhatWouldWork() {
        func message(_ key: String, _ value: String) -> String {
            do {
                _ = try StepUpPolicy.standard.setting(key, value)
                return "accepted"
            } catch { return error.description }
        }
        #expect(message("increase", "5").contains("the keys are: increase-over, cross"))
        #expect(message("rollback", "maybe") == "rollback takes on or off, not 'maybe'")
        #expect(message("increase-over", "120").contains("from 0 to 99.999999 or off"))
        #expect(message("increase-over", "1.0000001").contains("or off"))
        #expect(message("cross", "0").contains("between 0 and 100"))
        #expect(message("lockout-attempts", "0").contains("from 1 to 100"))
        #expect(message("lockout-minutes", "x").contains("from 1 to 1440"))
    }

    @Test func summariesAndReasonCodesForTheAuditLog() {
        #expect(
            StepUpChange(.set, from: 10 * Self.pct, to: 12_500_000, force: true).summary == "set 10% -> 12.5% --force")
        #expect(StepUpChange(.policyChange, detail: "increase-over 20").summary == "policy-change increase-over 20")
        #expect(StepUpReason.crosses(threshold: 50 * Self.pct).code == "crosses-50")
        #expect(
            StepUpReason.largeIncrease(points: 15 * Self.pct, limit: 10 * Self.pct).description
                == "an increase of 15 points, more than 10")
    }
}
