import Console
import RemoteConfig
import Rollout
import Testing

/// The console picks its dialog and message from the write path's typed refusal, never from the words: each case
/// below has words that would mislead a decision made on text (a guardrail reason starting "nothing to change", a
/// plan refusal starting "nothing to resume", a guardrail reason asking for "a fresh code").
@Suite("Typed refusals")
struct RefusalTests {
    private static let op = ChangeOperation.rollout(.nudge(MicroPercent(1_000_000)))

    /// A console with a publish in flight (no reason, no code needed) for request 1.
    private func publishing() -> ConsoleState {
        var s = Fixture.state(Fixture.model())
        _ = s.handle(.key(.character("+")))
        var p = Fixture.preview(for: ChangeRequest(id: 1, operation: Self.op))
        p.requiresReason = false
        p.requiresStepUp = false
        _ = s.handle(.previewReady(p))
        _ = s.handle(.key(.tab))
        _ = s.handle(.key(.enter))
        guard case .publishing = s.overlay else {
            Issue.record("no publish in flight: \(String(describing: s.overlay))")
            return s
        }
        return s
    }

    private static func guardrail(_ reason: String) -> WriteRefusal {
        .guardrail(PolicyRefusal(policy: "guardrail", reason: reason, kind: .guardrail))
    }

    @Test(
        "a refused publish closes the dialog with a message chosen by the refusal's case",
        arguments: [
            (guardrail("nothing to change while the verdict is HOLD"), "Refused by guardrail: nothing to change while the verdict is HOLD", true),
            (guardrail("a fresh code is needed"), "Refused by guardrail: a fresh code is needed", true),
            (
                .stepUpBlocked(PolicyRefusal(policy: "step-up", reason: "ana@ is locked out until 10:02", kind: .stepUpBlocked)),
                "Refused by step-up: ana@ is locked out until 10:02", true
            ),
            (
                .policy(PolicyRefusal(policy: "reason", reason: "an increase of exposure needs a reason", suggestion: "say why")),
                "Refused by reason: an increase of exposure needs a reason; say why", true
            ),
            (.readOnly(.requested), "Refused: this session is read-only (--read-only)", true),
            (.nothingToChange(summary: "refused: 12.5% → 12.5%"), "Not published: nothing to change: refused: 12.5% → 12.5%", false),
            (.plan(.notKilled(.rolling)), "Not published: nothing to resume: the rollout is rolling, not killed", true),
            (.unexpectedCurrent("cannot: at 13%"), "Not published: cannot: at 13%", true),
            (.invalidPercentage("the target 101% is outside 0 to 100"), "Not published: the target 101% is outside 0 to 100", true),
            (.invalid("refused by guardrail: no such version 9"), "Not published: refused by guardrail: no such version 9", true),
        ] as [(WriteRefusal, String, Bool)])
    func publishRefused(refusal: WriteRefusal, text: String, isError: Bool) {
        var s = publishing()
        #expect(s.handle(.writeRefused(requestID: 1, refusal)) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.text == text)
        #expect(s.notice?.kind == (isError ? .error : .info))
    }

    @Test("step-up needed or failed reopens the code prompt; blocked does not", arguments: [
        WriteRefusal.stepUpNeeded(PolicyRefusal(policy: "step-up", reason: "a fresh code is needed", needsStepUpCode: true)),
        .stepUpFailed(PolicyRefusal(policy: "step-up", reason: "nothing to change: wrong code", kind: .stepUpFailed)),
    ])
    func stepUpPrompt(refusal: WriteRefusal) {
        var s = publishing()
        #expect(s.handle(.writeRefused(requestID: 1, refusal)) == [])
        guard case .stepUp(_, _, let field, let error)? = s.overlay else {
            Issue.record("expected the code prompt, got \(String(describing: s.overlay))")
            return
        }
        #expect(field.text.isEmpty)
        #expect(error == refusal.description)
        #expect(s.notice == nil)
    }

    @Test("a conflict opens the conflict dialog on the core's report")
    func conflict() {
        var s = publishing()
        let report = Fixture.conflictReport()
        #expect(s.handle(.writeRefused(requestID: 1, .conflict(report), intervening: [Fixture.conflictRecord])) == [.refresh])
        guard case .conflict(let dialog, .cancel)? = s.overlay else {
            Issue.record("expected the conflict dialog, got \(String(describing: s.overlay))")
            return
        }
        #expect(dialog.report == report)
        #expect(dialog.expectedVersion == "42")
        #expect(dialog.current == RolloutPosition(microPercent: MicroPercent(15_000_000)))
    }

    @Test(
        "a refused preview says it cannot, as information only when there is nothing to change",
        arguments: [
            (WriteRefusal.nothingToChange(summary: "at 100%"), "Cannot nudge +1 point: nothing to change: at 100%", false),
            (guardrail("nothing to change at HOLD"), "Cannot nudge +1 point: refused by guardrail: nothing to change at HOLD", true),
            (.plan(.notKilled(.rolling)), "Cannot nudge +1 point: nothing to resume: the rollout is rolling, not killed", true),
        ] as [(WriteRefusal, String, Bool)])
    func previewRefused(refusal: WriteRefusal, text: String, isError: Bool) {
        var s = Fixture.state(Fixture.model())
        _ = s.handle(.key(.character("+")))
        #expect(s.overlay == .preparing(ChangeRequest(id: 1, operation: Self.op)))
        #expect(s.handle(.writeRefused(requestID: 1, refusal)) == [])
        #expect(s.overlay == nil)
        #expect(s.notice?.text == text)
        #expect(s.notice?.kind == (isError ? .error : .info))
    }
}

@Suite("Confirmed change")
struct ConfirmedChangeTests {
    @Test("the write request is the operation on the preview's base, compare-and-swapped on its ETag")
    func writeRequest() {
        var preview = Fixture.preview(for: ChangeRequest(id: 3, operation: .rollbackLast))
        preview.baseVersion = "42"
        let request = ConfirmedChange(preview: preview, reason: "bad build", stepUpCode: "123456")
            .writeRequest(actor: "ana@example.com", origin: "ROLLOUT_CONSOLE")
        #expect(request.intent == .rollback(toVersion: 41))
        #expect(request.basedOnETag == preview.baseETag)
        #expect(request.stepUpCode == "123456" && request.reason == "bad build" && request.actor == "ana@example.com")
        let nudge = ConfirmedChange(
            preview: Fixture.preview(for: ChangeRequest(id: 4, operation: .rollout(.nudge(MicroPercent(1_000_000))))),
            reason: "", stepUpCode: nil
        ).writeRequest(actor: "ana@example.com", origin: "ROLLOUT_CONSOLE")
        #expect(nudge.intent == .rollout(.nudge(MicroPercent(1_000_000))))
        #expect(nudge.stepUpCode == nil)
    }
}
