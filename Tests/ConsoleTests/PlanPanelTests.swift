import Console
import RampPlans
import RemoteConfig
import Testing
import Timekeeping

/// The plan panel: golden screens at 80×24 and 120×40 (colour and monochrome), and the plan keys in the reducer.
@Suite("Plan panel")
struct PlanPanelTests {
    static let steps = [5, 10, 25, 50, 100].map { MicroPercent(percent: Int64($0)) }

    /// A plan at step 2 (10%) waiting for its users gate, with 7 minutes of hold and 3 of ok-for left.
    static func plan(phase: RampState.Phase = .running) -> PlanInfo {
        PlanInfo(
            name: "ramp", phase: phase, reached: 2, steps: steps,
            next: "waiting: holding 10% until 2026-05-28T20:40:00.000Z (7m left)",
            gates: [
                GateReading(gate: "ok-for", required: "30m", value: "OK for 27m", met: false),
                GateReading(gate: "users", required: "≥ 1000", value: "640", met: false),
                GateReading(gate: "sessions", required: "≥ 2000", value: "5210", met: true),
                GateReading(gate: "propagation", required: "≥ 90%", value: "96.4%", met: true),
                GateReading(gate: "load", required: "≤ 80% of 100.0/s", value: "4.1/s (4.1%)", met: true),
            ],
            countdown: RampCountdown(hold: .minutes(7), okFor: .minutes(3)), preApproved: [3],
            reason: phase == .paused ? "paused from the console" : "")
    }

    static func state(_ plan: PlanInfo?, size: Size) -> ConsoleState {
        var model = Fixture.model()
        model.plan = plan
        return Fixture.state(model, size: size)
    }

    @Test("the plan panel at 80×24 and 120×40", arguments: [Size(width: 80, height: 24), Size(width: 120, height: 40)])
    func golden(_ size: Size) throws {
        let grid = ConsoleScreen.render(Self.state(Self.plan(), size: size), size: size)
        let base = "plan-\(size.width)x\(size.height)"
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .indexed256), title: "plan"),
            name: base + "-colour")
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: "plan"),
            name: base + "-mono")
    }

    @Test func thePanelShowsTheStepTheNextStepEachGateAndTheCountdown() {
        let size = Size(width: 120, height: 40)
        let text = ConsoleScreen.render(Self.state(Self.plan(), size: size), size: size).lines.joined(separator: "\n")
        #expect(text.contains("▶ running  step 2/5 10% → 3: 25% pre-approved"), "\(text)")
        #expect(text.contains("hold 7m00s left · ok-for 3m00s left"))
        #expect(text.contains("✗ users 640 (needs ≥ 1000)"))
        #expect(text.contains("✓ load 4.1/s (4.1%) (needs ≤ 80% of 100.0/s)"))
        #expect(text.contains("x pause  X skip to 25%"))
        // Without a plan the log has the whole row.
        let none = ConsoleScreen.render(Self.state(nil, size: size), size: size).lines.joined(separator: "\n")
        #expect(!none.contains("Plan"))
    }

    /// "`x` resumes a plan paused for a code without asking for it" (3 a.m. issue): the runner only paused again.
    @Test func xOnAPlanPausedForACodeAsksForTheCode() {
        var plan = Self.plan(phase: .paused)
        plan.reason = "step 3 (25%) needs a one-time code: step-up required; 'rollout plan resume --code CODE' publishes it"
        plan.waitsForCode = true
        var s = Self.state(plan, size: Size(width: 80, height: 24))
        #expect(s.handle(.key(.character("x"))) == [])
        guard case .planCode? = s.overlay else {
            Issue.record("no code prompt: \(String(describing: s.overlay))")
            return
        }
        let screen = ConsoleScreen.render(s, size: s.screenSize).lines.joined(separator: "\n")
        #expect(screen.contains("Resume the plan"), "\(screen)")
        for c in "123" { _ = s.handle(.key(.character(c))) }
        #expect(s.handle(.key(.enter)) == [])
        guard case .planCode(_, let error?)? = s.overlay else {
            Issue.record("a short code was taken: \(String(describing: s.overlay))")
            return
        }
        #expect(error.contains("6-digit"))
        for c in "456" { _ = s.handle(.key(.character(c))) }
        #expect(s.handle(.key(.enter)) == [.planControl(pause: false, code: "123456")])
        #expect(s.overlay == nil)
        // Esc leaves the plan paused and writes nothing.
        _ = s.handle(.key(.character("x")))
        #expect(s.handle(.key(.escape)) == [])
        #expect(s.overlay == nil)
    }

    @Test func xPausesARunningPlanAndResumesAPausedOne() {
        var s = Self.state(Self.plan(), size: Size(width: 80, height: 24))
        #expect(s.handle(.key(.character("x"))) == [.planControl(pause: true)])
        var paused = Self.state(Self.plan(phase: .paused), size: Size(width: 80, height: 24))
        #expect(paused.handle(.key(.character("x"))) == [.planControl(pause: false)])
        #expect(
            paused.handle(.planControlled(message: "Plan 'ramp' resumed at step 2/5", refused: false)) == [.refresh])
        #expect(paused.notice?.text == "Plan 'ramp' resumed at step 2/5")
        var none = Self.state(nil, size: Size(width: 80, height: 24))
        #expect(none.handle(.key(.character("x"))).isEmpty)
    }

    /// Skip is an ordinary change: the preview of a set to the next step, then the confirm dialog.
    @Test func bigXPreviewsASetToTheNextStep() {
        var s = Self.state(Self.plan(), size: Size(width: 80, height: 24))
        guard case .preview(let request)? = s.handle(.key(.character("X"))).first else {
            Issue.record("no preview")
            return
        }
        #expect(request.operation == .rollout(.set(MicroPercent(25_000_000))))
        var done = Self.state(
            PlanInfo(name: "ramp", phase: .done, reached: 5, steps: Self.steps, next: "done"),
            size: Size(width: 80, height: 24))
        #expect(done.handle(.key(.character("X"))).isEmpty)
    }
}
