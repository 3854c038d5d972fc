import RemoteConfig
import Rollout
import Testing
import Timekeeping

/// A report says which policy wrote it by type, so that a caller (the console's confirm dialog) tells the guardrail's
/// report without comparing names.
struct PolicyIdentityTests {
    /// Two policies that call themselves by the same name: only their types tell them apart.
    struct Refuses: WritePolicy {
        let name = "same-name"
        func preview(_ p: Proposal) throws -> PolicyReport {
            PolicyReport(policy: name, lines: [], decision: try review(p, context: PolicyContext(audit: { _ in })))
        }
        func review(_ p: Proposal, context: PolicyContext) throws -> PolicyDecision {
            .refuse(PolicyRefusal(policy: name, reason: "no"))
        }
    }

    struct Allows: WritePolicy {
        let name = "same-name"
        func preview(_ p: Proposal) throws -> PolicyReport { PolicyReport(policy: name, lines: [], decision: .allow) }
        func review(_ p: Proposal, context: PolicyContext) throws -> PolicyDecision { .allow }
    }

    @Test func previewStampsEachReportWithThePolicyTypeThatWroteIt() throws {
        let clock = ManualClock()
        let store = InMemoryConfigStore(initial: try RolloutPlan.initialTemplate(seed: "s"), time: clock.now())
        let path = WritePath(store: store, clock: clock, policies: [Allows(), Refuses()], newSeed: { "unused" })
        let preview = try path.preview(
            WritePath.Request(
                intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@example.com", reason: "r", origin: "TEST"
            ))

        #expect(preview.reports.map(\.policy) == ["same-name", "same-name"])
        #expect(preview.reports.map(\.source) == [PolicyIdentity(Allows.self), PolicyIdentity(Refuses.self)])
        #expect(PolicyIdentity(Allows.self) != PolicyIdentity(Refuses.self))
        let refusing = preview.reports.first { $0.source == PolicyIdentity(Refuses.self) }
        #expect(refusing?.decision == .refuse(PolicyRefusal(policy: "same-name", reason: "no")))
        // A report built outside the write path names no source.
        #expect(try Allows().preview(preview.proposal).source == nil)
    }
}
