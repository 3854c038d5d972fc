import Console
import RemoteConfig
import Rollout
import Testing
import Timekeeping

/// Drives a state with keys and returns the effects of the last one.
@discardableResult
private func press(_ state: inout ConsoleState, _ keys: Key...) -> [ConsoleEffect] {
    var last: [ConsoleEffect] = []
    for key in keys { last = state.handle(.key(key)) }
    return last
}

private func type(_ state: inout ConsoleState, _ text: String) {
    for c in text { _ = state.handle(.key(.character(c))) }
}

private func ready() -> ConsoleState { Fixture.state(Fixture.model()) }

/// Opens the confirm dialog for `+` and returns the request it is for.
private func openConfirm(_ s: inout ConsoleState, preview: ((ChangeRequest) -> ChangePreview)? = nil) throws
    -> ChangeRequest
{
    let effects = press(&s, .character("+"))
    guard case .preview(let request)? = effects.first else {
        Issue.record("no preview effect: \(effects)")
        throw CancellationError()
    }
    _ = s.handle(.previewReady((preview ?? Fixture.preview(for:))(request)))
    return request
}

private func plainPreview(_ request: ChangeRequest) -> ChangePreview {
    var p = Fixture.preview(for: request)
    p.requiresReason = false
    p.requiresStepUp = false
    return p
}

@Suite("Main-screen keys")
struct MainKeyTests {
    @Test(
        "+ and → nudge up by the step; - and ← nudge down",
        arguments: [
            (Key.character("+"), Int64(1_000_000)), (.right, 1_000_000), (.character("-"), -1_000_000),
            (.left, -1_000_000),
        ])
    func nudges(_ key: Key, _ micro: Int64) {
        let delta = MicroPercent(micro)
        var s = ready()
        let effects = press(&s, key)
        #expect(effects == [.preview(ChangeRequest(id: 1, operation: .rollout(.nudge(delta))))])
        #expect(s.overlay == .preparing(ChangeRequest(id: 1, operation: .rollout(.nudge(delta)))))
    }

    @Test("] and [ move through the steps and stop at the ends")
    func steps() {
        var s = ready()
        #expect(s.step == MicroPercent(1_000_000))
        press(&s, .character("]"))
        #expect(s.step == MicroPercent(2_000_000))
        #expect(s.notice?.text == "Step 2%")
        press(&s, .character("]"), .character("]"), .character("]"), .character("]"))
        #expect(s.step == MicroPercent(10_000_000))
        press(
            &s, .character("["), .character("["), .character("["), .character("["), .character("["),
            .character("["), .character("["))
        #expect(s.step == MicroPercent(100_000))
        #expect(s.notice?.text == "Step 0.1%")
        let effects = press(&s, .character("+"))
        #expect(effects == [.preview(ChangeRequest(id: 1, operation: .rollout(.nudge(MicroPercent(100_000)))))])
    }

    @Test("K, r and u ask for previews of kill, resume and roll back (to the version before the one on screen)")
    func killResumeRollback() {
        for (key, op) in [("K", ChangeOperation.rollout(.kill)), ("r", .rollout(.resume)), ("u", .rollback(toVersion: 41))] {
            var s = ready()
            let effects = press(&s, .character(Character(key)))
            #expect(effects == [.preview(ChangeRequest(id: 1, operation: op))])
        }
    }

    @Test("q quits, Ctrl-L redraws, Esc clears the message, unknown keys do nothing")
    func screenKeys() {
        var s = ready()
        #expect(press(&s, .character("q")) == [.quit])
        #expect(press(&s, .control("l")) == [.redraw])
        press(&s, .character("]"))
        #expect(s.notice != nil)
        #expect(press(&s, .escape) == [])
        #expect(s.notice == nil)
        let before = s
        #expect(press(&s, .character("Z"), .function(5), .pageDown) == [])
        #expect(s == before)
    }

    @Test("t cycles through the themes and wraps")
    func themes() {
        var s = ready()
        #expect(s.themeName == "default")
        press(&s, .character("t"))
        #expect(s.themeName == "light")
        #expect(s.notice?.text == "Theme light")
        press(&s, .character("t"), .character("t"), .character("t"))
        #expect(s.themeName == "default")
    }

    @Test("f freezes the display: snapshots are held until unfrozen")
    func freeze() {
        var s = ready()
        press(&s, .character("f"))
        #expect(s.frozen)
        var newer = Fixture.model()
        newer.header.templateVersion = "43"
        _ = s.handle(.snapshot(newer))
        #expect(s.model?.header.templateVersion == "42")
        #expect(s.heldModel?.header.templateVersion == "43")
        press(&s, .character("f"))
        #expect(!s.frozen)
        #expect(s.model?.header.templateVersion == "43")
        #expect(s.heldModel == nil)
    }

    @Test("? opens help generated from the key table; arrows scroll; Esc and ? close")
    func help() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 20))
        press(&s, .character("?"))
        #expect(s.overlay == .help(scroll: 0))
        press(&s, .down, .down)
        #expect(s.overlay == .help(scroll: 2))
        press(&s, .end)
        let count = HelpScreen.lines(for: s).count
        #expect(s.overlay == .help(scroll: count - ConsoleScreen.listRows(for: s.screenSize)))
        press(&s, .home)
        #expect(s.overlay == .help(scroll: 0))
        press(&s, .up)
        #expect(s.overlay == .help(scroll: 0))
        press(&s, .escape)
        #expect(s.overlay == nil)
        press(&s, .character("?"), .character("?"))
        #expect(s.overlay == nil)
        // Every binding, the demo's simulation keys included: they are listed while a simulation drives the screen.
        _ = s.handle(.simulation(SimulationStatus(speed: "60x", paused: false, wall: Instant(seconds: 0))))
        // The descriptions are wrapped to the width: compared with every run of spaces and line breaks as one space.
        func words(_ t: String) -> String { t.split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ") }
        let text = words(HelpScreen.lines(for: s).map { $0.map(\.text).joined() }.joined(separator: "\n"))
        for binding in KeyMap.main {
            #expect(text.contains(words(binding.help)), "help lacks: \(binding.help)")
        }
    }
}

@Suite("Exact value prompt")
struct ValuePromptTests {
    @Test("= opens a prompt holding the current value; a valid value asks for a preview")
    func valid() {
        var s = ready()
        press(&s, .character("="))
        guard case .valuePrompt(let field, nil)? = s.overlay else {
            Issue.record("no prompt: \(String(describing: s.overlay))")
            return
        }
        #expect(field.text == "12.5")
        press(&s, .control("u"))
        type(&s, "17.25%")
        let effects = press(&s, .enter)
        #expect(effects == [.preview(ChangeRequest(id: 1, operation: .rollout(.set(MicroPercent(17_250_000)))))])
    }

    @Test("an invalid value keeps the prompt open with the reason; typing clears it")
    func invalid() {
        var s = ready()
        press(&s, .character("="), .control("u"))
        type(&s, "101")
        #expect(press(&s, .enter) == [])
        guard case .valuePrompt(_, let error?)? = s.overlay else {
            Issue.record("expected an error")
            return
        }
        #expect(error.contains("outside 0–100%"))
        press(&s, .backspace)
        guard case .valuePrompt(_, nil)? = s.overlay else {
            Issue.record("error should clear on edit")
            return
        }
    }

    /// "3 a.m.", item 5. Reproduction: the `=` prompt showed 41; typing 150 gave `'41150' is outside 0–100%`, and
    /// at 2% typing 5 gave 25. The pre-filled value is selected: typing replaces it; a cursor key keeps it to edit.
    @Test("the pre-filled value is selected: typing replaces it; a cursor key keeps it")
    func typingReplacesThePrefilledValue() {
        var s = ready()
        press(&s, .character("="))
        type(&s, "150")
        guard case .valuePrompt(let typed, _)? = s.overlay else {
            Issue.record("prompt closed")
            return
        }
        #expect(typed.text == "150")
        press(&s, .escape)
        press(&s, .character("="))
        type(&s, "5")
        #expect(press(&s, .enter) == [.preview(ChangeRequest(id: 1, operation: .rollout(.set(MicroPercent(5_000_000)))))])
        var t = ready()
        press(&t, .character("="), .end)
        type(&t, "1")
        guard case .valuePrompt(let edited, _)? = t.overlay else {
            Issue.record("prompt closed")
            return
        }
        #expect(edited.text == "12.51")
    }

    @Test("q is typed into the prompt instead of quitting, and Enter refuses it as no percentage; Esc cancels at once")
    func keysStayInPrompt() {
        var s = ready()
        press(&s, .character("="))
        #expect(press(&s, .character("q")) == [])
        #expect(press(&s, .enter) == [])
        guard case .valuePrompt(let field, let error)? = s.overlay else {
            Issue.record("prompt closed")
            return
        }
        #expect(field.text == "q")
        #expect(error == PercentText.ParseError.notANumber("q").description)
        press(&s, .escape)
        #expect(s.overlay == nil)
    }

    /// Tester's report: `=` then `2,5` asked for 25% and `1e1` for 11%, while `rollout set 2,5` exits 2 and the
    /// palette's `set 2,5` refuses: the field dropped the characters it did not expect.
    @Test("= keeps every character typed: 2,5 and 1e1 are refused with the parser's words, as the palette refuses them",
        arguments: ["2,5", "1e1", "1_0", "٣"])
    func refusedAsThePaletteRefuses(_ text: String) {
        var s = ready()
        press(&s, .character("="))
        type(&s, text)
        #expect(press(&s, .enter) == [])
        guard case .valuePrompt(let field, let error?)? = s.overlay else {
            Issue.record("no refusal: \(String(describing: s.overlay))")
            return
        }
        #expect(field.text == text)
        var parserSays = ""
        do { _ = try PercentText.parse(text) } catch { parserSays = error.description }
        #expect(!parserSays.isEmpty)
        #expect(error == parserSays)
        var p = ready()
        press(&p, .character(":"))
        type(&p, "set " + text)
        #expect(press(&p, .enter) == [])
        guard case .palette(let palette)? = p.overlay else {
            Issue.record("palette closed: \(String(describing: p.overlay))")
            return
        }
        #expect(palette.error == parserSays)
    }
}

@Suite("The write path: confirm, reason, step-up, publish")
struct WritePathTests {
    @Test("the confirm dialog opens with Cancel focused; Enter on Cancel writes nothing")
    func cancelFocused() throws {
        var s = ready()
        let request = try openConfirm(&s)
        #expect(s.overlay == .confirm(Fixture.preview(for: request), focus: .cancel))
        #expect(press(&s, .enter) == [])
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Cancelled; nothing was written.")
    }

    @Test("Tab, Shift-Tab and arrows move the focus between the two buttons")
    func focus() throws {
        var s = ready()
        let request = try openConfirm(&s)
        let p = Fixture.preview(for: request)
        for key in [Key.tab, .backTab, .left, .right] {
            press(&s, key)
            #expect(s.overlay == .confirm(p, focus: .act), "\(key)")
            press(&s, key)
            #expect(s.overlay == .confirm(p, focus: .cancel), "\(key)")
        }
    }

    @Test("the target is frozen while the dialog is open: new data and other keys do not change it")
    func frozenTarget() throws {
        var s = ready()
        let request = try openConfirm(&s)
        var newer = Fixture.model()
        newer.condition.desiredMicroPercent = MicroPercent(20_000_000)
        _ = s.handle(.snapshot(newer))
        #expect(press(&s, .character("+"), .character("]"), .character("K"), .character("=")) == [])
        #expect(s.overlay == .confirm(Fixture.preview(for: request), focus: .cancel))
        #expect(s.step == MicroPercent(1_000_000))
    }

    @Test("an increase asks for a reason, then the step-up code, then publishes with both")
    func fullPath() throws {
        var s = ready()
        let request = try openConfirm(&s)
        let preview = Fixture.preview(for: request)
        #expect(press(&s, .tab, .enter) == [])
        guard case .reason? = s.overlay else {
            Issue.record("expected the reason prompt, got \(String(describing: s.overlay))")
            return
        }
        press(&s, .enter)
        guard case .reason(_, _, let error?)? = s.overlay else {
            Issue.record("an empty reason must be refused")
            return
        }
        #expect(error == "A reason is required for an increase.")
        type(&s, "  crash-free flat for 1h ")
        #expect(press(&s, .enter) == [])
        guard case .stepUp(_, let reason, let field, nil)? = s.overlay else {
            Issue.record("expected the step-up prompt, got \(String(describing: s.overlay))")
            return
        }
        #expect(reason == "crash-free flat for 1h")
        #expect(field.masked)
        type(&s, "12a3")
        press(&s, .enter)
        guard case .stepUp(_, _, let short, let shortError?)? = s.overlay else {
            Issue.record("a short code must be refused")
            return
        }
        #expect(short.text == "123")
        #expect(short.displayText == "•••")
        #expect(shortError.contains("6-digit"))
        type(&s, "456")
        let effects = press(&s, .enter)
        let publish = ConfirmedChange(preview: preview, reason: "crash-free flat for 1h", stepUpCode: "123456")
        #expect(effects == [.publish(publish)])
        #expect(s.overlay == .publishing(publish))
    }

    @Test("a decrease without step-up publishes straight from the confirm dialog")
    func directPublish() throws {
        var s = ready()
        let request = try openConfirm(&s, preview: plainPreview)
        let effects = press(&s, .right, .enter)
        #expect(effects == [.publish(ConfirmedChange(preview: plainPreview(request), reason: "", stepUpCode: nil))])
    }

    @Test("a published change closes the dialog, says so, and asks for a refresh")
    func published() throws {
        var s = ready()
        let request = try openConfirm(&s, preview: plainPreview)
        press(&s, .tab, .enter)
        #expect(press(&s, .escape, .character("q")) == [], "a publish in flight cannot be cancelled or quit")
        guard case .publishing? = s.overlay else {
            Issue.record("publishing must stay open")
            return
        }
        let effects = s.handle(
            .published(
                PublishReceipt(
                    requestID: request.id, version: "43", from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
                    to: RolloutPosition(microPercent: MicroPercent(13_500_000)))))
        #expect(effects == [.refresh])
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Published v43: 12.5% → 13.5%")
        #expect(s.notice?.kind == .success)
    }

    @Test("a wrong step-up code reopens the code prompt with the core's message")
    func wrongCode() throws {
        var s = ready()
        let request = try openConfirm(&s)
        press(&s, .tab, .enter)
        type(&s, "why")
        press(&s, .enter)
        type(&s, "000000")
        press(&s, .enter)
        let wrong = PolicyRefusal(policy: "step-up", reason: "wrong code; 2 attempts left", kind: .stepUpFailed)
        _ = s.handle(.writeRefused(requestID: request.id, .stepUpFailed(wrong)))
        guard case .stepUp(_, "why", let field, "refused by step-up: wrong code; 2 attempts left")? = s.overlay else {
            Issue.record("expected the code prompt again, got \(String(describing: s.overlay))")
            return
        }
        #expect(field.text.isEmpty)
    }

    @Test("refusals and failures close the dialog with the reason")
    func refusals() throws {
        for (event, text) in [
            (
                ConsoleEvent.writeRefused(requestID: 1, .guardrail(PolicyRefusal(policy: "guardrail", reason: "HALT", kind: .guardrail))),
                "Refused by guardrail: HALT"
            ),
            (.writeRefused(requestID: 1, .readOnly(.requested)), "Refused: this session is read-only (--read-only)"),
            (.publishFailed(requestID: 1, message: "disk full"), "Not published: disk full"),
        ] {
            var s = ready()
            _ = try openConfirm(&s, preview: plainPreview)
            press(&s, .tab, .enter)
            #expect(s.handle(event) == [.refresh])
            #expect(s.overlay == nil)
            #expect(s.notice?.text == text)
            #expect(s.notice?.kind == .error)
        }
    }

    @Test("Esc cancels at once from the preparing, confirm, reason and code steps")
    func escapeEverywhere() throws {
        var s = ready()
        press(&s, .character("+"), .escape)
        #expect(s.overlay == nil)
        _ = try openConfirm(&s)
        press(&s, .escape)
        #expect(s.overlay == nil)
        _ = try openConfirm(&s)
        press(&s, .tab, .enter, .escape)
        #expect(s.overlay == nil)
        _ = try openConfirm(&s)
        press(&s, .tab, .enter)
        type(&s, "why")
        press(&s, .enter, .escape)
        #expect(s.overlay == nil)
    }

    @Test("answers for a cancelled request are ignored")
    func staleAnswers() {
        var s = ready()
        press(&s, .character("+"), .escape)
        _ = s.handle(
            .previewReady(Fixture.preview(for: ChangeRequest(id: 1, operation: .rollout(.nudge(MicroPercent(1_000_000)))))))
        #expect(s.overlay == nil)
        press(&s, .character("+"))
        _ = s.handle(
            .previewReady(Fixture.preview(for: ChangeRequest(id: 1, operation: .rollout(.nudge(MicroPercent(1_000_000)))))))
        #expect(s.overlay == .preparing(ChangeRequest(id: 2, operation: .rollout(.nudge(MicroPercent(1_000_000))))))
        _ = s.handle(.previewFailed(requestID: 2, message: "already at 100%"))
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Cannot nudge +1 point: already at 100%")
    }

    @Test("a conflict shows who changed what; re-apply asks for a fresh preview of the same operation")
    func conflict() throws {
        var s = ready()
        let request = try openConfirm(&s, preview: plainPreview)
        press(&s, .tab, .enter)
        let report = Fixture.conflictReport()
        #expect(s.handle(.writeRefused(requestID: request.id, .conflict(report), intervening: [Fixture.conflictRecord])) == [.refresh])
        let conflict = ConflictDialog(request: request, expectedVersion: "42", report: report, intervening: [Fixture.conflictRecord])
        #expect(s.overlay == .conflict(conflict, focus: .cancel))
        #expect(conflict.current == RolloutPosition(microPercent: MicroPercent(15_000_000)))
        let text = ConsoleScreen.render(s, size: Size(width: 80, height: 24)).lines.joined()
        #expect(text.contains("bo@example.com"))
        #expect(text.contains("re-applied on top: 16%"))
        let effects = press(&s, .tab, .enter)
        #expect(effects == [.preview(ChangeRequest(id: 2, operation: .rollout(.nudge(MicroPercent(1_000_000)))))])
        #expect(s.overlay == .preparing(ChangeRequest(id: 2, operation: .rollout(.nudge(MicroPercent(1_000_000))))))
    }

    @Test("Cancel on the conflict screen writes nothing")
    func conflictCancel() throws {
        var s = ready()
        let request = try openConfirm(&s, preview: plainPreview)
        press(&s, .tab, .enter)
        _ = s.handle(.writeRefused(requestID: request.id, .conflict(Fixture.conflictReport(at: MicroPercent(1)))))
        #expect(press(&s, .enter) == [])
        #expect(s.overlay == nil)
    }
}

@Suite("History and audit views")
struct ListViewTests {
    static func records(_ n: Int) -> [ChangeRecord] {
        (0..<n).map { (i: Int) -> ChangeRecord in
            let from = MicroPercent(Int64(i))
            return ChangeRecord(
                version: String(100 - i), at: Fixture.at(Int64(i * 60)), actor: "ana@example.com",
                kind: .nudge, from: RolloutPosition(microPercent: from),
                to: RolloutPosition(microPercent: from + MicroPercent(1)),
                reason: "r\(i)")
        }
    }

    @Test("h loads the history, scrolls by line and page, and closes with Esc, q or h")
    func history() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 24))
        #expect(press(&s, .character("h")) == [.loadHistory])
        #expect(s.overlay == .history(entries: nil, cursor: ListCursor()))
        _ = s.handle(.historyLoaded(Self.records(50)))
        press(&s, .down, .down, .character("j"))
        #expect(s.overlay == .history(entries: Self.records(50), cursor: ListCursor(selected: 3, offset: 0)))
        let page = ConsoleScreen.listRows(for: s.screenSize)
        press(&s, .pageDown)
        #expect(s.overlay == .history(entries: Self.records(50), cursor: ListCursor(selected: 3 + page, offset: 4)))
        press(&s, .end)
        #expect(s.overlay == .history(entries: Self.records(50), cursor: ListCursor(selected: 49, offset: 50 - page)))
        press(&s, .home)
        #expect(s.overlay == .history(entries: Self.records(50), cursor: ListCursor(selected: 0, offset: 0)))
        let screen = ConsoleScreen.render(s, size: s.screenSize).lines.joined(separator: "\n")
        #expect(screen.contains("v100"))
        #expect(screen.contains("entry 1 of 50"))
        for key in [Key.escape, .character("q"), .character("h")] {
            press(&s, .character("h"))
            press(&s, key)
            #expect(s.overlay == nil)
        }
    }

    @Test("a shrinking terminal keeps the selected entry visible")
    func resize() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 40))
        press(&s, .character("h"))
        _ = s.handle(.historyLoaded(Self.records(50)))
        press(&s, .end)
        _ = s.handle(.resize(Size(width: 80, height: 16)))
        guard case .history(_, let cursor)? = s.overlay else {
            Issue.record("no history overlay: \(String(describing: s.overlay))")
            return
        }
        #expect(cursor.selected == 49)
        #expect(cursor.offset == 50 - ConsoleScreen.listRows(for: Size(width: 80, height: 16)))
    }

    @Test("a answers with the audit log and its chain status; a failed load closes with the reason")
    func audit() {
        var s = ready()
        #expect(press(&s, .character("a")) == [.loadAudit])
        let log = AuditLog(
            entries: [
                AuditEntry(
                    sequence: 7, at: Fixture.at(5), actor: "ana@example.com", action: "publish",
                    outcome: "conflict", detail: "v42 → v43 lost to bo@", succeeded: false)
            ],
            integrity: .broken(atSequence: 5, reason: "hash mismatch"))
        _ = s.handle(.auditLoaded(log))
        #expect(s.overlay == .audit(log: log, cursor: ListCursor()))
        let screen = ConsoleScreen.render(s, size: Size(width: 80, height: 24)).lines.joined(separator: "\n")
        #expect(screen.contains("chain ✗ broken at #5"))
        #expect(screen.contains("✗ conflict"))
        press(&s, .character("a"))
        #expect(s.overlay == nil)
        press(&s, .character("a"))
        _ = s.handle(.loadFailed(message: "store locked"))
        #expect(s.overlay == nil)
        #expect(s.notice?.text == "Could not load: store locked")
    }
}

@Suite("Time, data and staleness")
struct DataTests {
    @Test("data older than the limit is stale; a source failure is stale until the next snapshot")
    func staleness() {
        var s = ready()
        #expect(!s.isStale)
        _ = s.handle(.tick(Fixture.now + .milliseconds(4_000)))
        #expect(!s.isStale)
        _ = s.handle(.tick(Fixture.now + .milliseconds(5_000)))
        #expect(s.isStale)
        #expect(s.dataAge == .milliseconds(5_400))
        _ = s.handle(.snapshot(Fixture.model(dataAge: .milliseconds(-5_000))))
        #expect(!s.isStale)
        _ = s.handle(.sourceFailed("store unreachable"))
        #expect(s.isStale)
        let screen = ConsoleScreen.render(s, size: Size(width: 80, height: 24)).lines.joined(separator: "\n")
        #expect(screen.contains("data source: store unreachable"))
        #expect(screen.contains("STALE"))
        _ = s.handle(.snapshot(Fixture.model(dataAge: .milliseconds(-5_000))))
        #expect(!s.isStale)
        #expect(s.sourceProblem == nil)
    }

    @Test("no data yet counts as stale and the screen says it is waiting")
    func waiting() {
        let s = Fixture.state(nil)
        #expect(s.isStale)
        let screen = ConsoleScreen.render(s, size: Size(width: 80, height: 24)).lines.joined(separator: "\n")
        #expect(screen.contains("Waiting for the first data"))
    }

    @Test("the data source can mark the data stale itself")
    func staleReason() {
        let s = Fixture.state(Fixture.model(staleReason: "ingest stalled"))
        #expect(s.isStale)
    }

    /// Issue 35, item 1: on a store a simulation writes to, ticks run on simulated time, and `✗ Refused by
    /// guardrail, nothing was written` expired 0.15 s after it appeared (`✓ Published` never showed). Information
    /// still expires; a result stays until the operator's next key, and the log keeps it.
    @Test("information expires; results stay until the next key and are kept in the log")
    func expiry() {
        var s = ready()
        press(&s, .character("]"))
        _ = s.handle(.tick(Fixture.now + .milliseconds(5_000)))
        #expect(s.notice != nil)
        _ = s.handle(.tick(Fixture.now + .milliseconds(6_500)))
        #expect(s.notice == nil)
        press(&s, .character("+"))
        _ = s.handle(.previewFailed(requestID: 1, message: "read-only console"))
        // Ticks on a simulation's time, an hour of it: the result stays.
        for minute in 1...60 as ClosedRange<Int64> {
            _ = s.handle(.tick(Fixture.now + .minutes(minute)))
            #expect(s.notice?.kind == .error)
        }
        #expect(s.verdictLog.last?.text == "Cannot nudge +2 points: read-only console", "\(s.verdictLog.map(\.text))")
        #expect(s.verdictLog.last?.severity == .critical)
        let screen = ConsoleScreen.render(s, size: Size(width: 120, height: 40)).lines.joined(separator: "\n")
        #expect(screen.contains("✗ Cannot nudge +2 points: read-only console"), "\(screen)")
        press(&s, .character("?"))
        #expect(s.notice == nil, "the next key clears it")
        #expect(s.verdictLog.last?.text == "Cannot nudge +2 points: read-only console", "the log keeps it")
    }
}

@Suite("Kill dialog")
struct KillDialogTests {
    /// "3 a.m.", item 7. Reproduction: at HALT the footer says `K kill now`; the kill dialog focused Cancel, so the
    /// Enter that followed cancelled the kill. A kill only lowers exposure: its dialog focuses Kill.
    @Test("K then Enter kills; other dialogs still focus Cancel")
    func enterKills() {
        var s = ready()
        guard case .preview(let request)? = press(&s, .character("K")).first else {
            Issue.record("K asked for no preview")
            return
        }
        // As the write path previews a kill: no code, no reason.
        var kill = Fixture.preview(for: request)
        kill.requiresStepUp = false
        kill.requiresReason = false
        _ = s.handle(.previewReady(kill))
        guard case .confirm(_, let focus)? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        #expect(focus == .act)
        let effects = press(&s, .enter)
        #expect(effects.contains { if case .publish = $0 { true } else { false } }, "\(effects)")
        var t = ready()
        guard case .preview(let nudge)? = press(&t, .character("+")).first else {
            Issue.record("+ asked for no preview")
            return
        }
        _ = t.handle(.previewReady(Fixture.preview(for: nudge)))
        guard case .confirm(_, let nudgeFocus)? = t.overlay else {
            Issue.record("no confirm dialog")
            return
        }
        #expect(nudgeFocus == .cancel)
    }
}

@Suite("Text fields")
struct TextFieldTests {
    @Test("typing, moving and deleting")
    func editing() {
        var f = TextField("abc")
        #expect(f.cursor == 3)
        #expect(f.handle(.left) == .edited)
        #expect(f.handle(.character("X")) == .edited)
        #expect(f.text == "abXc")
        #expect(f.handle(.home) == .edited)
        #expect(f.handle(.delete) == .edited)
        #expect(f.text == "bXc")
        #expect(f.handle(.backspace) == .ignored)
        #expect(f.handle(.end) == .edited)
        #expect(f.handle(.backspace) == .edited)
        #expect(f.text == "bX")
        #expect(f.handle(.control("a")) == .edited)
        #expect(f.handle(.control("k")) == .edited)
        #expect(f.text == "")
        #expect(f.handle(.enter) == .submitted)
        #expect(f.handle(.escape) == .cancelled)
        #expect(f.handle(.up) == .ignored)
    }

    @Test("a selected pre-filled text is replaced by typing, cleared by a deletion, kept by a cursor key")
    func selection() {
        var f = TextField("reason to 45", selected: true)
        #expect(f.isSelected)
        #expect(f.handle(.character("n")) == .edited)
        #expect(f.text == "n" && !f.isSelected)
        var g = TextField("41", content: .digits, selected: true)
        // A character the emptied field would refuse leaves the selection as it was.
        #expect(g.handle(.character("x")) == .ignored)
        #expect(g.text == "41" && g.isSelected)
        #expect(g.handle(.backspace) == .edited)
        #expect(g.text == "" && !g.isSelected)
        var h = TextField("41", content: .digits, selected: true)
        #expect(h.handle(.left) == .edited)
        #expect(!h.isSelected && h.text == "41" && h.cursor == 1)
        #expect(!TextField("", selected: true).isSelected)
    }

    @Test("text fields take every printable character; code fields digits only")
    func content() {
        var t = TextField()
        for c in "2,5e1 %\u{7}" { _ = t.handle(.character(c)) }
        #expect(t.text == "2,5e1 %")
        var code = TextField(content: .digits, maxLength: 8, masked: true)
        for c in "12 34x567890" { _ = code.handle(.character(c)) }
        #expect(code.text == "12345678")
        #expect(code.displayText == "••••••••")
    }
}

@Suite("Header freshness")
struct HeaderFreshnessTests {
    static func header(_ s: ConsoleState) -> String {
        ConsoleScreen.render(s, size: Size(width: 100, height: 24)).lines[0]
    }

    @Test("the header shows the time of the newest data, which does not change between ticks; stale is marked once")
    func freshness() {
        var s = Fixture.state(Fixture.model(dataAge: .milliseconds(0)))
        // Fixture.now is 2026-05-28 20:26:40 UTC.
        let fresh = Self.header(s)
        #expect(fresh.hasSuffix("● 20:26:40 "))
        for ms in [750, 2_300, 2_900, 4_900] {
            _ = s.handle(.tick(Fixture.now + .milliseconds(Int64(ms))))
            #expect(Self.header(s) == fresh, "an idle screen must not change as the data ages (\(ms) ms)")
        }
        _ = s.handle(.tick(Fixture.now + .milliseconds(12_000)))
        let stale = Self.header(s)
        #expect(stale.hasSuffix("! STALE since 20:26:40 "))
        _ = s.handle(.tick(Fixture.now + .milliseconds(75_000)))
        #expect(Self.header(s) == stale, "stale is marked once, not re-counted every second")
        _ = s.handle(.key(.character("f")))
        #expect(Self.header(s).hasSuffix("‖ FROZEN at 20:26:40 "), "a frozen display says so instead of stale")
        var next = Fixture.model(dataAge: .milliseconds(0))
        next.header.dataAsOf = Fixture.now + .milliseconds(75_000)
        _ = s.handle(.key(.character("f")))
        _ = s.handle(.snapshot(next))
        #expect(Self.header(s).hasSuffix("● 20:27:55 "), "new data moves the time")
    }

    @Test("before the first event the header says there is no data, not that old data is stale")
    func noDataYet() {
        var empty = Fixture.model()
        empty.header.dataAsOf = nil
        var s = Fixture.state(empty)
        #expect(s.isStale, "nothing to judge is never fresh")
        #expect(Self.header(s).hasSuffix("! NO DATA "))
        #expect(!Self.header(s).contains("STALE"))
        _ = s.handle(.sourceFailed("store unreachable"))
        #expect(Self.header(s).contains("STALE"), "a failing source is stale whatever the data")
    }
}

@Suite("Terminal too small")
struct TooSmallTests {
    static let small = Size(width: ConsoleScreen.minimumSize.width - 1, height: ConsoleScreen.minimumSize.height)

    @Test("Below the minimum size no key opens a change: - K u r = and the palette do nothing; q, Ctrl-L and Esc work")
    func keysIgnored() {
        for size in [Self.small, Size(width: 80, height: ConsoleScreen.minimumSize.height - 1)] {
            var s = Fixture.state(Fixture.model(), size: size)
            for key: Key in [.character("-"), .character("+"), .right, .character("K"), .character("u"), .character("r"),
                .character("="), .character(":"), .character("h"), .character("y"), .enter]
            {
                #expect(press(&s, key) == [], "\(key)")
                #expect(s.overlay == nil, "\(key)")
            }
            #expect(press(&s, .control("l")) == [.redraw])
            #expect(press(&s, .character("q")) == [.quit])
            press(&s, .character("]"))
            #expect(s.step == MicroPercent(1_000_000))
        }
    }

    @Test("Shrinking below the minimum closes an open confirm dialog: a later y or Enter publishes nothing")
    func confirmClosed() throws {
        var s = ready()
        _ = try openConfirm(&s, preview: plainPreview)
        #expect(s.handle(.resize(TooSmallTests.small)) == [])
        #expect(s.overlay == nil)
        #expect(press(&s, .character("y")) == [])
        #expect(press(&s, .enter) == [])
        #expect(s.handle(.click(.button(.act))) == [])
        #expect(s.overlay == nil)
        // Back at a size that is drawn, the change is gone: it has to be asked for again, in sight.
        _ = s.handle(.resize(Size(width: 80, height: 24)))
        #expect(s.overlay == nil)
        #expect(press(&s, .character("y")) == [])
    }

    @Test("Shrinking below the minimum cancels a kill prepared or a value being typed; a security key's approval is abandoned")
    func otherDialogsClosed() throws {
        var s = ready()
        press(&s, .character("K"))
        guard case .preparing(let request)? = s.overlay else { throw CancellationError() }
        _ = s.handle(.resize(TooSmallTests.small))
        #expect(s.overlay == nil)
        // The preview's answer for the cancelled request opens nothing.
        _ = s.handle(.previewReady(plainPreview(request)))
        #expect(s.overlay == nil)

        s = ready()
        press(&s, .character("="))
        _ = s.handle(.resize(TooSmallTests.small))
        #expect(s.overlay == nil)

        s = ready()
        let key = try openConfirm(&s) { r in
            var p = Fixture.preview(for: r)
            p.requiresReason = false
            p.stepUpOptions = [.securityKey]
            return p
        }
        press(&s, .character("y"))
        guard case .securityKey? = s.overlay else {
            Issue.record("no security key prompt: \(String(describing: s.overlay))")
            return
        }
        #expect(s.handle(.resize(TooSmallTests.small)) == [.cancelApproval(requestID: key.id)])
        #expect(s.overlay == nil)
    }
}

@Suite("Undo is the change on screen")
struct UndoOnScreenTests {
    /// A colleague's kill, published as v43 while this console's display is frozen on v42.
    static func colleagueKill() -> ConsoleModel {
        var m = Fixture.model(state: .killed)
        m.changes[0].actor = "bo@example.com"
        return m
    }

    /// Tester's report: frozen on v42, a colleague killed (v43); `u` undid their kill, which the screen never showed.
    @Test("Frozen, u rolls back the change on screen (to v41), not the colleague's newer kill; the dialog says the store moved")
    func frozenUndoIsPinned() throws {
        var s = ready()
        press(&s, .character("f"))
        _ = s.handle(.snapshot(Self.colleagueKill()))
        #expect(s.model?.header.templateVersion == "42")
        let effects = press(&s, .character("u"))
        #expect(effects == [.preview(ChangeRequest(id: 1, operation: .rollback(toVersion: 41)))])
        guard case .preview(let request)? = effects.first else { return }
        // The write path previews it on what the store holds now: v43, killed.
        var p = plainPreview(request)
        p.baseVersion = "43"
        p.from = RolloutPosition(microPercent: MicroPercent(12_500_000), killed: true)
        p.to = RolloutPosition(microPercent: MicroPercent(10_000_000))
        _ = s.handle(.previewReady(p))
        guard case .confirm(let shown, _)? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        #expect(shown.supersedes == "42")
        #expect(shown.movedBy.map(\.version) == ["43"])
        let screen = ConsoleScreen.render(s, size: Size(width: 120, height: 40)).lines.joined(separator: "\n")
        #expect(screen.contains("Updated while open"), "\(screen)")
        #expect(screen.contains("v43 by bo@example.com"), "\(screen)")
    }

    @Test("Live, a change prepared on the version on screen carries no moved banner")
    func liveUndoHasNoBanner() throws {
        var s = ready()
        guard case .preview(let request)? = press(&s, .character("u")).first else {
            Issue.record("no preview")
            return
        }
        _ = s.handle(.previewReady(plainPreview(request)))
        guard case .confirm(let shown, _)? = s.overlay else {
            Issue.record("no confirm dialog")
            return
        }
        #expect(shown.supersedes == nil)
        #expect(shown.movedBy.isEmpty)
    }

    /// Tester's report: the console undid to v41 (published v43); a colleague then set 5% as v44; the next `u`
    /// offered to roll back to v40, past the colleague's change, raising the exposure again.
    @Test("A colleague's publish ends the walk back: the next u rolls back their change, not past it")
    func colleaguePublishClearsTheTrail() throws {
        var s = ready()
        guard case .preview(let first)? = press(&s, .character("u")).first else {
            Issue.record("no preview")
            return
        }
        let p = plainPreview(first)
        _ = s.handle(.previewReady(p))
        press(&s, .character("y"))
        _ = s.handle(.published(PublishReceipt(requestID: first.id, version: "43", from: p.from, to: p.to)))
        var own = Fixture.model()
        own.header.templateVersion = "43"
        _ = s.handle(.snapshot(own))
        // The console's own publish keeps the walk going.
        guard case .preview(let again)? = press(&s, .character("u")).first else {
            Issue.record("no preview")
            return
        }
        #expect(again.operation == .rollback(toVersion: 40))
        press(&s, .escape)
        var theirs = own
        theirs.header.templateVersion = "44"
        _ = s.handle(.snapshot(theirs))
        guard case .preview(let next)? = press(&s, .character("u")).first else {
            Issue.record("no preview")
            return
        }
        #expect(next.operation == .rollback(toVersion: 43))
    }
}

@Suite("History and audit views follow the store")
struct ListReloadTests {
    static func newer(_ version: String) -> ConsoleModel {
        var m = Fixture.model()
        m.header.templateVersion = version
        return m
    }

    static func audit(_ sequences: [Int]) -> AuditLog {
        AuditLog(
            entries: sequences.map {
                AuditEntry(
                    sequence: $0, at: Fixture.at(Int64(100 - $0)), actor: "ana@example.com", action: "publish",
                    outcome: "published", detail: "#\($0)", succeeded: true, version: $0)
            }, integrity: .verified)
    }

    /// Tester's report: `h` and `a` never showed a change published while they were open (the README says others'
    /// changes appear within a refresh): the list was read once.
    @Test("h: a snapshot with a newer version reads the history again; the selection stays on the same version")
    func historyReloads() {
        var s = ready()
        press(&s, .character("h"))
        _ = s.handle(.historyLoaded(ListViewTests.records(50)))
        press(&s, .down, .down, .down)
        // The same version again loads nothing.
        #expect(!s.handle(.snapshot(Fixture.model())).contains(.loadHistory))
        #expect(s.handle(.snapshot(Self.newer("43"))).contains(.loadHistory))
        // The newest entry (v101) arrives on top: the selected v97 is now the fifth row.
        var more = ListViewTests.records(50)
        more.insert(
            ChangeRecord(
                version: "101", at: Fixture.now, actor: "bo@example.com", kind: .set,
                from: RolloutPosition(microPercent: MicroPercent(50)), to: RolloutPosition(microPercent: MicroPercent(0), killed: true),
                reason: "kill"), at: 0)
        _ = s.handle(.historyLoaded(more))
        guard case .history(let entries?, let cursor)? = s.overlay else {
            Issue.record("history closed: \(String(describing: s.overlay))")
            return
        }
        #expect(entries.count == 51)
        #expect(entries[cursor.selected].version == "97")
        #expect(cursor.selected == 4)
        let screen = ConsoleScreen.render(s, size: s.screenSize).lines.joined(separator: "\n")
        #expect(screen.contains("v101"), "\(screen)")
    }

    @Test("a: a snapshot with a newer version reads the audit log again; the selection stays on the same record")
    func auditReloads() {
        var s = ready()
        press(&s, .character("a"))
        _ = s.handle(.auditLoaded(Self.audit([9, 8, 7, 6])))
        press(&s, .down)
        #expect(s.handle(.snapshot(Self.newer("43"))).contains(.loadAudit))
        _ = s.handle(.auditLoaded(Self.audit([11, 10, 9, 8, 7, 6])))
        guard case .audit(let log?, let cursor)? = s.overlay else {
            Issue.record("audit closed: \(String(describing: s.overlay))")
            return
        }
        #expect(log.entries[cursor.selected].sequence == 8)
        // A newer version while the log is still loading asks again: the answer under way may predate it.
        press(&s, .character("a"), .character("a"))
        #expect(s.handle(.snapshot(Self.newer("44"))) == [.loadAudit])
        _ = s.handle(.auditLoaded(Self.audit([12])))
        #expect(s.overlay == .audit(log: Self.audit([12]), cursor: ListCursor()))
    }
}
