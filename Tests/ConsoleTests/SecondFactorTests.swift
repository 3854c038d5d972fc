import Console
import RemoteConfig
import Rollout
import Testing
import Timekeeping

@discardableResult
private func press(_ state: inout ConsoleState, _ keys: Key...) -> [ConsoleEffect] {
    var last: [ConsoleEffect] = []
    for key in keys { last = state.handle(.key(key)) }
    return last
}

private func type(_ state: inout ConsoleState, _ text: String) {
    for c in text { _ = state.handle(.key(.character(c))) }
}

/// Opens `+`'s confirm dialog with a preview offering `options`, confirms and gives the reason "why".
private func reachStepUp(_ s: inout ConsoleState, options: [StepUpOption], seconds: Int = 30) throws -> ChangePreview {
    let effects = press(&s, .character("+"))
    guard case .preview(let request)? = effects.first else {
        Issue.record("no preview effect: \(effects)")
        throw CancellationError()
    }
    var preview = Fixture.preview(for: request)
    preview.stepUpOptions = options
    preview.securityKeySeconds = seconds
    _ = s.handle(.previewReady(preview))
    press(&s, .tab, .enter)
    type(&s, "why")
    press(&s, .enter)
    return preview
}

/// The console's second factors by method: the chooser, "touch your security key" with its countdown and Esc,
/// the key's PIN, and the two-person request's answer; all pure reducer logic (the executor runs the key).
@Suite("Step-up by method in the console")
struct SecondFactorTests {
    @Test("a change the policy lets approve by code or key offers both; the key publishes in one effect")
    func chooserThenKey() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.code, .securityKey])
        guard case .stepUpMethod(_, "why", 0)? = s.overlay else {
            Issue.record("expected the method chooser, got \(String(describing: s.overlay))")
            return
        }
        let screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("one-time code") && screen.contains("security key"), "\(screen)")
        let effects = press(&s, .down, .enter)
        let request = ConfirmedChange.withSecurityKey(preview, reason: "why")
        #expect(effects == [.publish(request)])
        #expect(s.overlay == .securityKey(request, since: Fixture.now, seconds: 30))
        #expect(press(&s, .character("y")) == [], "only Esc acts while the key waits")
    }

    @Test("a digit picks the method; the code keeps its masked prompt")
    func digitPicksCode() throws {
        var s = Fixture.state(Fixture.model())
        _ = try reachStepUp(&s, options: [.code, .securityKey])
        #expect(press(&s, .character("1")) == [])
        guard case .stepUp(_, "why", let field, nil)? = s.overlay else {
            Issue.record("expected the code prompt, got \(String(describing: s.overlay))")
            return
        }
        #expect(field.masked)
    }

    @Test("a key-only change goes straight to the key; the countdown follows the wall clock")
    func countdown() throws {
        var s = Fixture.state(Fixture.model())
        _ = try reachStepUp(&s, options: [.securityKey], seconds: 30)
        guard case .securityKey? = s.overlay else {
            Issue.record("expected the key dialog, got \(String(describing: s.overlay))")
            return
        }
        var screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("Touch your security key"), "\(screen)")
        #expect(screen.contains("30 s left"), "\(screen)")
        _ = s.handle(.tick(Fixture.now + .seconds(Int64(12))))
        screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("18 s left"), "\(screen)")
        _ = s.handle(.tick(Fixture.now + .seconds(Int64(90))))
        screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("0 s left"), "\(screen)")
    }

    @Test("Esc on the key abandons it: the cancel effect, and its late answer changes nothing")
    func escapeCancels() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.securityKey])
        let effects = press(&s, .escape)
        #expect(effects == [.cancelApproval(requestID: preview.request.id)])
        #expect(s.overlay == nil)
        #expect(s.notice?.text.contains("nothing was written") == true)
        // The executor answers nothing for an abandoned request; even a late answer opens nothing.
        _ = s.handle(.securityKeyNeedsPIN(requestID: preview.request.id))
        #expect(s.overlay == nil)
    }

    @Test("the key asks for its PIN: a masked prompt, then the key again with the PIN")
    func pin() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.securityKey])
        _ = s.handle(.securityKeyNeedsPIN(requestID: preview.request.id))
        guard case .securityKeyPIN(_, "why", let field, nil)? = s.overlay else {
            Issue.record("expected the PIN prompt, got \(String(describing: s.overlay))")
            return
        }
        #expect(field.masked)
        type(&s, "4711")
        let screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(!screen.contains("4711"), "the PIN must not be shown")
        let effects = press(&s, .enter)
        let request = ConfirmedChange.withSecurityKey(preview, reason: "why", pin: "4711")
        #expect(effects == [.publish(request)])
        // A wrong PIN asks again, saying so.
        _ = s.handle(.securityKeyNeedsPIN(requestID: preview.request.id))
        guard case .securityKeyPIN(_, _, _, .some)? = s.overlay else {
            Issue.record("expected the PIN prompt with an error, got \(String(describing: s.overlay))")
            return
        }
    }

    @Test("a two-person request is said as one, by its typed id: awaiting a second operator, not a code prompt")
    func twoPersonRequest() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.securityKey])
        var recorded = PolicyRefusal(
            policy: "step-up", reason: "set 50% -> 100% needs a second operator (two-person rule); recorded as request 3f1c9a0b5e7d2c41",
            suggestion: "another enrolled operator runs 'rollout approve 3f1c9a0b5e7d2c41' with their security key",
            kind: .stepUpBlocked)
        recorded.twoPersonRequest = "3f1c9a0b5e7d2c41"
        #expect(s.handle(.writeRefused(requestID: preview.request.id, .stepUpBlocked(recorded))) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .warning)
        #expect(s.notice?.text.hasPrefix("Awaiting a second operator: ") == true)
        #expect(s.notice?.text.contains("rollout approve 3f1c9a0b5e7d2c41") == true)
        // The same words without the typed id are an ordinary refusal.
        var t = Fixture.state(Fixture.model())
        let other = try reachStepUp(&t, options: [.securityKey])
        recorded.twoPersonRequest = nil
        _ = t.handle(.writeRefused(requestID: other.request.id, .stepUpBlocked(recorded)))
        #expect(t.notice?.kind == .error)
    }

    @Test("`:approve ID` asks the executor to approve the request with the key; the answers are shown")
    func approveFromThePalette() throws {
        let id = "3f1c9a0b5e7d2c41"
        func approving(_ text: String = "approve " + id) -> (ConsoleState, Int) {
            var s = Fixture.state(Fixture.model())
            press(&s, .character(":"))
            type(&s, text)
            let effects = press(&s, .enter)
            guard case .approveRequest(let requestID, let request)? = effects.first, effects.count == 1 else {
                Issue.record("expected one approve effect, got \(effects)")
                return (s, -1)
            }
            #expect(request == id)
            #expect(s.overlay == .approvingRequest(requestID: requestID, request: id, since: Fixture.now, seconds: 30))
            return (s, requestID)
        }
        // A letter-first id and a fuzzy name are arguments all the same.
        #expect(PaletteCommand.matches("appr " + id).first?.command.action == .approve)
        #expect(PaletteCommand.matches("approve a3f1c9a0b5e7d2c4").first?.arguments == ["a3f1c9a0b5e7d2c4"])

        // "Touch your security key" with its countdown; only Esc acts while the key waits.
        var (s, requestID) = approving()
        var screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("Touch your security key to approve request \(id)"), "\(screen)")
        #expect(screen.contains("30 s left"), "\(screen)")
        _ = s.handle(.tick(Fixture.now + .seconds(Int64(12))))
        screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("18 s left"), "\(screen)")
        #expect(press(&s, .character("y")) == [])
        // Published: the dialog closes, the version and the request are said.
        let receipt = PublishReceipt(
            requestID: requestID, version: "43", from: RolloutPosition(microPercent: MicroPercent(50_000_000)),
            to: RolloutPosition(microPercent: MicroPercent(100_000_000)))
        #expect(s.handle(.published(receipt)) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .success)
        #expect(s.notice?.text.hasPrefix("Published v43: ") == true, "\(String(describing: s.notice))")
        #expect(s.notice?.text.contains("request \(id) approved") == true)

        // Refused by the write path (a self-approval, an expired request): the reason, as an error.
        (s, requestID) = approving()
        let own = PolicyRefusal(policy: "step-up", reason: "ana@lab cannot approve their own request", kind: .stepUpFailed)
        #expect(s.handle(.writeRefused(requestID: requestID, .stepUpFailed(own))) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .error)
        #expect(s.notice?.text == "Request \(id) not approved: Refused by step-up: ana@lab cannot approve their own request")
        // Not found, no key: the failure's words.
        (s, requestID) = approving()
        _ = s.handle(.publishFailed(requestID: requestID, message: "no two-person request \(id) in the audit log"))
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Request \(id) not approved: no two-person request \(id) in the audit log")
        // Esc abandons the key's request; a late answer to it changes nothing.
        (s, requestID) = approving()
        #expect(press(&s, .escape) == [.cancelApproval(requestID: requestID)])
        #expect(s.overlay == nil)
        #expect(s.notice?.text.contains("nothing was written") == true)

        // Without an id: the usage, nothing asked for.
        var u = Fixture.state(Fixture.model())
        press(&u, .character(":"))
        type(&u, "approve")
        #expect(press(&u, .enter) == [])
        guard case .palette(let palette)? = u.overlay else {
            Issue.record("the palette should stay open with the usage, got \(String(describing: u.overlay))")
            return
        }
        #expect(palette.error == "usage: approve REQUEST")
        // A read-only console refuses it like any write: no effect, no key asked.
        var model = Fixture.model()
        model.header.readOnly = true
        var r = Fixture.state(model)
        press(&r, .character(":"))
        type(&r, "approve " + id)
        #expect(press(&r, .enter) == [])
        #expect(r.overlay == nil)
        #expect(r.notice?.kind == .error)
        #expect(r.notice?.text.hasPrefix("Refused: this session is read-only") == true, "\(String(describing: r.notice))")
    }

    @Test("a key that fails verification closes the dialog with the refusal (no code prompt for a key)")
    func keyRefused() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.securityKey])
        let refusal = PolicyRefusal(policy: "step-up", reason: "the key did not report user verification", kind: .stepUpFailed)
        _ = s.handle(.writeRefused(requestID: preview.request.id, .stepUpFailed(refusal)))
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Refused by step-up: the key did not report user verification")
    }

    @Test("history and audit rows name who approved and how, and who proposed")
    func approvalsShown() {
        var record = Fixture.conflictRecord
        record.actor = "ana@laptop"
        record.approvals = [ChangeApproval(approver: "bob@desk", method: .securityKey, proposer: "ana@laptop")]
        #expect(record.approvalText == "approved by bob@desk (security key), proposed by ana@laptop")
        record.approvals = [ChangeApproval(approver: "ana@laptop", method: .code)]
        #expect(record.approvalText == "approved by ana@laptop (one-time code)")
        record.approvals = []
        #expect(record.approvalText.isEmpty)

        var s = Fixture.state(Fixture.model(), size: Size(width: 160, height: 30))
        press(&s, .character("a"))
        let entry = AuditEntry(
            sequence: 9, at: Fixture.now, actor: "ana@laptop", action: "publish", outcome: "published", detail: "50% → 100%",
            succeeded: true, version: 5,
            approvals: [ChangeApproval(approver: "bob@desk", method: .securityKey, proposer: "ana@laptop")])
        _ = s.handle(.auditLoaded(AuditLog(entries: [entry], integrity: .verified)))
        let screen = ConsoleScreen.render(s, size: Size(width: 160, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("approved by bob@desk (security key), proposed by ana@laptop"), "\(screen)")
    }

    @Test("phone: the verification starts, its status shows, the code is masked, c calls, a wrong code asks again, Esc cancels")
    func phone() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.code, .phone])
        let id = preview.request.id
        let effects = press(&s, .character("2"))
        let started = ConfirmedChange.withPhone(preview, reason: "why")
        #expect(effects == [.phoneStart(started)])
        // No code before the provider has sent one; no call either.
        type(&s, "1234")
        #expect(press(&s, .enter) == [])
        #expect(press(&s, .character("c")) == [])
        _ = s.handle(.phoneStatus(requestID: id, status: "provider: verification v-1: a code by SMS to +44••••••0123"))
        var screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(screen.contains("a code by SMS to +44••••••0123"), "\(screen)")
        #expect(!screen.contains("1234"), "the code must be masked: \(screen)")
        #expect(press(&s, .character("c")) == [.phoneCall(requestID: id)])
        let checked = ConfirmedChange.withPhone(preview, reason: "why", code: "1234")
        #expect(press(&s, .enter) == [.publish(checked)])
        #expect(press(&s, .character("5")) == [], "keys wait while the code is checked")
        // A wrong code: the prompt again, empty, with the write path's words; the status stays.
        let wrong = PolicyRefusal(policy: "step-up", reason: "wrong phone code", kind: .stepUpFailed)
        #expect(s.handle(.writeRefused(requestID: id, .stepUpFailed(wrong))) == [])
        guard case .phone(_, let status?, let field, let error?, false)? = s.overlay else {
            Issue.record("expected the phone prompt again, got \(String(describing: s.overlay))")
            return
        }
        #expect(status.contains("SMS") && field.text.isEmpty && error.contains("wrong phone code"))
        screen = ConsoleScreen.render(s, size: Size(width: 100, height: 30)).lines.joined(separator: "\n")
        #expect(!screen.contains("1234"))
        // Esc cancels the provider's verification.
        #expect(s.handle(.phoneEnded(requestID: id + 1)) == [], "another request's end changes nothing")
        #expect({ if case .phone? = s.overlay { true } else { false } }())
        #expect(press(&s, .escape) == [.phoneCancel(requestID: id)])
        #expect(s.overlay == nil)
        #expect(s.notice?.text.contains("nothing was published (the audit log records it)") == true)
        // The write path's refusal of the given-up change (audited by the bridge) arrives after: nothing more on screen.
        let notice = s.notice
        let given = PolicyRefusal(
            policy: "step-up", reason: "the phone code could not be checked: no code was entered; the verification was cancelled",
            kind: .stepUpFailed)
        #expect(s.handle(.writeRefused(requestID: id, .stepUpFailed(given))) == [])
        #expect(s.overlay == nil)
        #expect(s.notice == notice)
    }

    @Test("phone: the store lost while a code is awaited: the verification is cancelled at the provider, the notice shows")
    func phoneStoreLost() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.code, .phone])
        let id = preview.request.id
        _ = press(&s, .character("2"))
        _ = s.handle(.phoneStatus(requestID: id, status: "provider: verification v-1: a code by SMS to +44••••••0123"))
        var lost = Fixture.model()
        lost.header.storeLost = "the store was removed or replaced (no file at that path any more)"
        lost.header.readOnly = true
        let effects = s.handle(.snapshot(lost))
        #expect(effects.contains(.phoneCancel(requestID: id)), "\(effects)")
        guard case .storeLost? = s.overlay else {
            Issue.record("expected the store-lost notice, got \(String(describing: s.overlay))")
            return
        }
    }

    @Test("phone: the provider ended the verification (410): the dialog closes with the refusal")
    func phoneEnded() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.phone])
        _ = s.handle(.phoneStatus(requestID: preview.request.id, status: "sent"))
        type(&s, "1111")
        press(&s, .enter)
        let ended = PolicyRefusal(policy: "step-up", reason: "too many wrong phone codes", kind: .stepUpFailed)
        _ = s.handle(.writeRefused(requestID: preview.request.id, .stepUpFailed(ended)))
        #expect(s.handle(.phoneEnded(requestID: preview.request.id)) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .error)
        #expect(s.notice?.text.contains("too many wrong phone codes") == true)
    }

    @Test("phone: a verification the provider refuses to start (409, 429) closes the dialog with the refusal")
    func phoneNotStarted() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.phone])
        let refused = PolicyRefusal(
            policy: "step-up", reason: "the phone code could not be checked: 409 Conflict", kind: .stepUpFailed)
        #expect(s.handle(.writeRefused(requestID: preview.request.id, .stepUpFailed(refused))) == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Refused by step-up: the phone code could not be checked: 409 Conflict")
    }

    @Test("phone: the right code publishes; the answer closes the dialog")
    func phonePublishes() throws {
        var s = Fixture.state(Fixture.model())
        let preview = try reachStepUp(&s, options: [.phone])
        #expect(s.overlay == .phone(ConfirmedChange.withPhone(preview, reason: "why"), status: nil, field: TextField(content: .digits, maxLength: 8, masked: true), error: nil, checking: false))
        _ = s.handle(.phoneStatus(requestID: preview.request.id, status: "sent"))
        type(&s, "987654")
        press(&s, .enter)
        _ = s.handle(
            .published(
                PublishReceipt(
                    requestID: preview.request.id, version: "43", from: preview.from, to: preview.to)))
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .success)
    }
}
