import RemoteConfig
import Rollout
import Testing
import Timekeeping

@testable import Telemetry

/// The guardrail inside the lead's write path, on the in-memory config store.
@Suite("Guardrail in the write path")
struct TelemetryGuardrailTests {
    final class Fixture {
        let clock = ManualClock()
        let store: InMemoryConfigStore
        init() throws {
            store = InMemoryConfigStore(initial: try RolloutPlan.initialTemplate(seed: "s"), time: clock.now())
        }

        func path(_ input: GuardrailInput) -> WritePath {
            WritePath(store: store, clock: clock, policies: [TelemetryGuardrail { _ in input }], newSeed: { "unused" })
        }

        func request(_ op: RolloutOperation, reason: String = "test", override: Bool = false) -> WritePath.Request {
            var r = WritePath.Request(intent: .rollout(op), actor: "ana@example.com", reason: reason, origin: "TEST")
            r.overrideGuardrail = override
            return r
        }

        func percentage() throws -> MicroPercent { try RolloutPlan.locate(in: store.current().template)!.percentage }
    }

    static let hold = GuardrailInput(
        armed: true,
        verdict: Verdict(findings: [Finding(.hold, .data, "telemetry is stale: newest event 30 min old (limit 10 min)")]
        ), fleet: nil)
    static let halt = GuardrailInput(
        armed: true, verdict: Verdict(findings: [Finding(.halt, .crashes, "exposed users crash more than control")]),
        fleet: nil)

    @Test("an armed HOLD refuses an increase in the write path, with the reason; nothing is published")
    func refusesIncrease() throws {
        let f = try Fixture()
        _ = try f.path(GuardrailInput(armed: false, verdict: Self.hold.verdict, fleet: nil)).execute(
            f.request(.set(MicroPercent(percent: 5))))
        #expect(try f.percentage() == MicroPercent(percent: 5))
        #expect(throws: WritePath.Failure.self) {
            try f.path(Self.hold).execute(f.request(.set(MicroPercent(percent: 10))))
        }
        do {
            _ = try f.path(Self.hold).execute(f.request(.set(MicroPercent(percent: 10))))
        } catch let WritePath.Failure.refused(refusal) {
            #expect(refusal.policy == "guardrail")
            #expect(refusal.reason == "guardrail HOLD: telemetry is stale: newest event 30 min old (limit 10 min)")
        }
        #expect(try f.percentage() == MicroPercent(percent: 5))
    }

    @Test("--override-guardrail with a reason publishes; the preview says it was overridden")
    func override() throws {
        let f = try Fixture()
        _ = try f.path(GuardrailInput(armed: false, verdict: Self.hold.verdict, fleet: nil)).execute(
            f.request(.set(MicroPercent(percent: 5))))
        let request = f.request(
            .set(MicroPercent(percent: 10)), reason: "data pipeline down, crash dashboards fine", override: true)
        let preview = try f.path(Self.hold).preview(request)
        #expect(preview.reports[0].decision == .allow)
        #expect(preview.reports[0].lines.contains("overridden by --override-guardrail (audited)"))
        _ = try f.path(Self.hold).execute(request)
        #expect(try f.percentage() == MicroPercent(percent: 10))
    }

    @Test("a kill and a decrease pass at HALT")
    func killAndDecrease() throws {
        let f = try Fixture()
        _ = try f.path(GuardrailInput(armed: false, verdict: Self.hold.verdict, fleet: nil)).execute(
            f.request(.set(MicroPercent(percent: 10))))
        _ = try f.path(Self.halt).execute(f.request(.set(MicroPercent(percent: 5))))
        #expect(try f.percentage() == MicroPercent(percent: 5))
        _ = try f.path(Self.halt).execute(f.request(.kill))
        #expect(try RolloutPlan.locate(in: f.store.current().template)!.state == .killed)
    }

    @Test("over the attestation budget: refused with the largest step that fits as the suggestion")
    func budget() throws {
        let f = try Fixture()
        let ok = Verdict(findings: [Finding(.ok, .crashes, "no crash signal")])
        let fleet = FleetActivity(
            activeByCohort: [.none: 10_000_000], attestCapable: 10_000_000, sessionsLastDay: 30_000_000)
        let input = GuardrailInput(armed: true, verdict: ok, fleet: fleet)
        _ = try f.path(input).execute(f.request(.set(MicroPercent(percent: 1))))
        let preview = try f.path(input).preview(f.request(.set(MicroPercent(percent: 20))))
        guard case .refuse(let refusal) = preview.reports[0].decision else {
            Issue.record("expected a refusal in the preview")
            return
        }
        #expect(refusal.suggestion == "the largest step within the attestation budget is to 15.4%")
        #expect(
            preview.reports[0].lines.contains {
                $0.hasPrefix("attestation budget exceeded: about 1,900,000 new attestations, peak 131.9/s")
            })
        let allowed = try f.path(input).preview(f.request(.set(MicroPercent(percent: 15))))
        #expect(allowed.reports[0].decision == .allow)
        #expect(
            allowed.reports[0].lines.contains { $0.hasPrefix("attestation load fits: about 1,400,000 new attestations") })
    }
}
