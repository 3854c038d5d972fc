import Rollout
import Testing
import Timekeeping

/// ENFORCED waits for the end of the ramp; lowering enforcement never waits; a kill names the enforced services.
struct EnforcementGateTests {
    let now = Instant(seconds: 1_780_000_000)
    let gate = EnforcementGate(okFor: .hours(24))

    func rollout(exposure: Double, okFor hours: Int64?) -> EnforcementGate.Rollout {
        EnforcementGate.Rollout(
            exposure: exposure, okSince: hours.map { now - .hours($0) }, wouldReject: nil)
    }

    @Test func enforcedNeedsEveryoneAndAnOKVerdictHeldLongEnough() {
        #expect(gate.assess(from: .unenforced, to: .enforced, rollout: rollout(exposure: 1, okFor: 24), now: now) == .allowed)
        #expect(gate.assess(from: .off, to: .enforced, rollout: rollout(exposure: 1, okFor: 30), now: now) == .allowed)

        guard case .refused(let partial) = gate.assess(from: .unenforced, to: .enforced, rollout: rollout(exposure: 0.995, okFor: 48), now: now)
        else { Issue.record("enforced at 99.5%"); return }
        #expect(partial.contains("99.5%, not 100%"), "\(partial)")

        guard case .refused(let notOK) = gate.assess(from: .unenforced, to: .enforced, rollout: rollout(exposure: 1, okFor: nil), now: now)
        else { Issue.record("enforced without an OK verdict"); return }
        #expect(notOK.contains("not OK"), "\(notOK)")

        guard case .refused(let early) = gate.assess(from: .unenforced, to: .enforced, rollout: rollout(exposure: 1, okFor: 5), now: now)
        else { Issue.record("enforced after 5 h of OK"); return }
        #expect(early.contains("5 h 0 min") && early.contains("1 d"), "\(early)")
    }

    /// A killed rollout is refused as killed, not as "at 0%" (a kill is not a percentage the operator chose).
    @Test func enforcedOnAKilledRolloutSaysKilled() {
        let killed = EnforcementGate.Rollout(exposure: 0, okSince: nil, wouldReject: nil, killed: true)
        guard case .refused(let why) = gate.assess(from: .unenforced, to: .enforced, rollout: killed, now: now)
        else { Issue.record("enforced while killed"); return }
        #expect(why.contains("is killed") && !why.contains("at 0%"), "\(why)")
    }

    @Test func loweringOrKeepingEnforcementIsNeverHeldBack() {
        let killed = rollout(exposure: 0, okFor: nil)
        for (from, to) in [(EnforcementMode.enforced, EnforcementMode.unenforced), (.enforced, .off), (.unenforced, .off),
                           (.off, .unenforced), (.enforced, .enforced)] {
            #expect(gate.assess(from: from, to: to, rollout: killed, now: now) == .allowed, "\(from) → \(to)")
        }
    }

    @Test func aKillIsBlockedByEveryEnforcedServiceAndOnlyThose() {
        let services: [(id: String, mode: EnforcementMode)] = [
            ("firestore.googleapis.com", .enforced), ("firebasedatabase.googleapis.com", .unenforced),
            ("firebasestorage.googleapis.com", .off), ("identitytoolkit.googleapis.com", .enforced),
        ]
        #expect(EnforcementGate.blockingKill(services) == ["firestore.googleapis.com", "identitytoolkit.googleapis.com"])
        #expect(EnforcementGate.blockingKill([]) == [])
    }

    @Test func modesParseAsOperatorsTypeThem() {
        #expect(EnforcementMode(argument: "enforced") == .enforced)
        #expect(EnforcementMode(argument: "UNENFORCED") == .unenforced)
        #expect(EnforcementMode(argument: "Off") == .off)
        #expect(EnforcementMode(argument: "on") == nil)
        #expect(EnforcementMode.off < .unenforced && EnforcementMode.unenforced < .enforced)
    }
}
