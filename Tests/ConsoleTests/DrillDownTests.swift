import Console
import RemoteConfig
import Rollout
import Telemetry
import Testing
import Timekeeping

@discardableResult
private func press(_ state: inout ConsoleState, _ keys: Key...) -> [ConsoleEffect] {
    var effects: [ConsoleEffect] = []
    for key in keys { effects += state.handle(.key(key)) }
    return effects
}

private func type(_ state: inout ConsoleState, _ text: String) {
    for c in text { _ = state.handle(.key(.character(c))) }
}

private func screen(_ s: ConsoleState) -> String {
    ConsoleScreen.render(s, size: s.screenSize).lines.joined(separator: "\n")
}

enum DrillFixture {
    static let detail = VersionDetail(
        record: Fixture.model().changes[1], origin: "ROLLOUT_CONSOLE", updateType: "INCREMENTAL_UPDATE",
        diff: [
            "~ condition app_attest_rollout: percent('rollout-2026') <= 5  →  percent('rollout-2026') <= 10",
            "+ condition app_attest_control: percent('rollout-2026') > 50 && percent('rollout-2026') <= 60",
        ], isCurrent: false)

    static func audit() -> AuditLog {
        AuditLog(
            entries: [
                AuditEntry(
                    sequence: 9, at: Fixture.at(600), actor: "ana@example.com", action: "nudge", outcome: "published",
                    detail: "10% → 12.5%", succeeded: true, version: 42),
                AuditEntry(
                    sequence: 8, at: Fixture.at(700), actor: "bo@example.com", action: "step-up", outcome: "wrong code",
                    detail: "", succeeded: false),
                AuditEntry(
                    sequence: 7, at: Fixture.at(4_200), actor: "bo@example.com", action: "set", outcome: "published",
                    detail: "5% → 10%", succeeded: true, version: 41),
            ], integrity: .verified)
    }

    /// The history open on v41 (the second row), its drill-down loaded.
    static func drilledDown(size: Size) -> ConsoleState {
        var s = Fixture.state(Fixture.model(), size: size)
        _ = s.handle(.key(.character("h")))
        _ = s.handle(.historyLoaded(Fixture.model().changes))
        _ = s.handle(.key(.down))
        _ = s.handle(.key(.enter))
        _ = s.handle(.versionLoaded(detail))
        return s
    }

    /// A confirm dialog opened on v42 that the store moved under (a colleague published v43), re-judged.
    static func liveConfirm(size: Size) -> ConsoleState {
        var s = Fixture.state(Fixture.model(), size: size)
        guard case .preview(let request)? = s.handle(.key(.character("+"))).first else { return s }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        var moved = Fixture.model()
        moved.header.templateVersion = "43"
        moved.changes.insert(Fixture.conflictRecord, at: 0)
        guard case .preview(let again)? = s.handle(.snapshot(moved)).first else { return s }
        var fresh = Fixture.preview(for: again)
        fresh.from = RolloutPosition(microPercent: MicroPercent(15_000_000))
        fresh.to = RolloutPosition(microPercent: MicroPercent(16_000_000))
        fresh.baseVersion = "43"
        fresh.baseETag = "etag-43aa"
        fresh.propagation = 0.31
        _ = s.handle(.previewReady(fresh))
        return s
    }
}

@Suite("Drill-down, filter and the live confirm dialog")
struct DrillDownTests {
    @Test("Enter on a history row opens that version; r rolls back to it through the write path; Esc returns")
    func historyDrillDown() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        press(&s, .character("h"))
        _ = s.handle(.historyLoaded(Fixture.model().changes))
        press(&s, .down)
        #expect(press(&s, .enter) == [.loadVersion(41)])
        #expect(screen(s).contains("Loading v41"))
        // An answer for another version (a stale load) changes nothing.
        _ = s.handle(
            .versionLoaded(
                VersionDetail(
                    record: Fixture.model().changes[0], origin: "", updateType: "", diff: [], isCurrent: true)))
        #expect(screen(s).contains("Loading v41"))
        _ = s.handle(.versionLoaded(DrillFixture.detail))
        let text = screen(s)
        #expect(text.contains("Version v41"))
        #expect(text.contains("by bo@example.com"))
        #expect(text.contains("second step of the plan"))
        #expect(text.contains("What v41 changed against v40:"))
        #expect(
            text.contains(
                "~ condition app_attest_rollout: percent('rollout-2026') <= 5 → percent('rollout-2026') <= 10"))
        #expect(text.contains("r  roll back to this version"))

        // Esc goes back to the list, on the same row.
        press(&s, .escape)
        guard case .history(_, let cursor)? = s.overlay else {
            Issue.record("Esc did not return to the history: \(String(describing: s.overlay))")
            return
        }
        #expect(cursor.selected == 1)

        press(&s, .enter)
        _ = s.handle(.versionLoaded(DrillFixture.detail))
        let effects = press(&s, .character("r"))
        guard case .preview(let request)? = effects.first else {
            Issue.record("r asked for no preview: \(effects)")
            return
        }
        #expect(request.operation == .rollback(toVersion: 41))
        #expect(s.overlay == .preparing(request))
    }

    @Test("the current version cannot be rolled back to: a message, no write")
    func currentVersion() {
        var s = Fixture.state(Fixture.model())
        press(&s, .character("h"))
        _ = s.handle(.historyLoaded(Fixture.model().changes))
        press(&s, .enter)
        var current = DrillFixture.detail
        current.record = Fixture.model().changes[0]
        current.isCurrent = true
        _ = s.handle(.versionLoaded(current))
        #expect(press(&s, .character("r")) == [])
        #expect(s.notice?.text == "v42 is the version the store serves now: nothing to roll back to")
        #expect(screen(s).contains("This is the version the store serves now."))
    }

    @Test("Enter on an audit row opens the version it names; an entry without one says so")
    func auditDrillDown() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        press(&s, .character("a"))
        _ = s.handle(.auditLoaded(DrillFixture.audit()))
        #expect(press(&s, .enter) == [.loadVersion(42)])
        press(&s, .escape)
        #expect(press(&s, .down, .enter) == [])
        #expect(s.notice?.text == "Audit entry #8 names no version: nothing to open")
        #expect(press(&s, .down, .enter) == [.loadVersion(41)])
        _ = s.handle(.loadFailed(message: "version 41 is gone"))
        guard case .audit? = s.overlay else {
            Issue.record("a failed load did not return to the audit log")
            return
        }
        #expect(s.notice?.text == "Could not load: version 41 is gone")
    }

    @Test("/ filters the list as it is typed; Enter keeps the filter, Esc clears it; Enter opens the filtered row")
    func filter() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        press(&s, .character("a"))
        _ = s.handle(.auditLoaded(DrillFixture.audit()))
        press(&s, .character("/"))
        type(&s, "BO@")
        var text = screen(s)
        #expect(text.contains("2 of 3 match"))
        #expect(!text.contains("10% → 12.5%"), "the filter is case-insensitive and hides what does not match")
        #expect(text.contains("wrong code"))
        press(&s, .enter)
        #expect(s.listFilter == ListFilter(text: "BO@"))
        // j, q and h are letters while typing, keys once applied: the list moves, then opens the second match.
        #expect(press(&s, .down, .enter) == [.loadVersion(41)])
        press(&s, .escape)
        #expect(s.listFilter?.text == "BO@", "the filter survives the drill-down")
        press(&s, .character("/"))
        type(&s, "zzz")
        text = screen(s)
        #expect(text.contains("0 of 3 match"))
        #expect(text.contains("No entry matches the filter."))
        #expect(press(&s, .enter) == [])
        #expect(press(&s, .enter) == [], "Enter on an empty filtered list opens nothing")
        press(&s, .character("/"), .escape)
        #expect(s.listFilter == nil)
        #expect(screen(s).contains("10% → 12.5%"))
        press(&s, .escape)
        #expect(s.overlay == nil)
    }

    @Test("a publish under an open confirm dialog re-previews it on the new version, pinned and re-judged")
    func liveConfirm() {
        let s = DrillFixture.liveConfirm(size: Size(width: 120, height: 40))
        guard case .confirm(let preview, let focus)? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        #expect(preview.baseVersion == "43")
        #expect(preview.supersedes == "42")
        #expect(focus == .cancel)
        let text = screen(s)
        #expect(text.contains("↻ Updated while open: the store moved from v42 to v43; re-judged on it"))
        #expect(text.contains("15% → 16%"))
        #expect(text.contains("! Stacking on v43: only 31% of active devices have it yet"))
    }

    @Test("a verdict that changes under an open confirm dialog re-judges it on the same version, and says so")
    func verdictChangeUnderAnOpenDialog() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        guard case .preview(let request)? = s.handle(.key(.character("+"))).first else {
            Issue.record("+ asked for no preview")
            return
        }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        var held = Fixture.model()
        held.crash.verdict = .hold
        let effects = s.handle(.snapshot(held))
        guard
            let again = effects.lazy.compactMap({ e -> ChangeRequest? in
                if case .preview(let r) = e { return r } else { return nil }
            }).first
        else {
            Issue.record("a new verdict asked for no new preview")
            return
        }
        var fresh = Fixture.preview(for: again)
        fresh.guardrail = GuardrailAssessment(
            verdict: .hold, reasons: ["crash rate higher when exposed"],
            refusal: PolicyRefusal(policy: "guardrail", reason: "crash rate higher when exposed", kind: .guardrail))
        _ = s.handle(.previewReady(fresh))
        guard case .confirm(let preview, _)? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        #expect(preview.baseVersion == "42")
        #expect(preview.supersedes == nil, "the store did not move")
        #expect(preview.rejudgedFrom == .ok)
        let text = screen(s)
        #expect(text.contains("↻ Updated while open: the verdict went from OK to HOLD; re-judged on it"), "\(text)")
        #expect(!text.contains("moved from v42 to v42"), "\(text)")
    }

    @Test("the typed reason survives the re-judged dialog and a conflict's re-apply")
    func reasonKept() {
        var s = Fixture.state(Fixture.model())
        guard case .preview(let request)? = press(&s, .character("+")).first else {
            Issue.record("the key asked for no preview")
            return
        }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        press(&s, .character("y"))
        type(&s, "crash-free flat for an hour")
        var moved = Fixture.model()
        moved.header.templateVersion = "43"
        let effects = s.handle(.snapshot(moved))
        guard case .preview(let again)? = effects.first else {
            Issue.record("the moved store asked for no re-preview: \(effects)")
            return
        }
        #expect(again.operation == request.operation)
        // The same snapshot again does not ask twice.
        #expect(s.handle(.snapshot(moved)) == [])
        var fresh = Fixture.preview(for: again)
        fresh.baseVersion = "43"
        _ = s.handle(.previewReady(fresh))
        // Issue 35, item 8: typing goes on in the reason prompt, re-judged on v43, with the text as typed (it used
        // to go back to the confirm dialog with Cancel focused).
        guard case .reason(let revised, let field, _)? = s.overlay else {
            Issue.record("no reason prompt: \(String(describing: s.overlay))")
            return
        }
        #expect(field.text == "crash-free flat for an hour")
        #expect(revised.baseVersion == "43" && revised.supersedes == "42")
        type(&s, " and more")
        guard case .reason(_, let typed, _)? = s.overlay else { return }
        #expect(typed.text == "crash-free flat for an hour and more")
    }

    /// Issue 35, item 8: a colleague's publish while the reason is typed: the prompt stays, keeps the text, and
    /// says who changed what.
    @Test("a publish while typing a reason keeps the prompt and the text and names who changed what")
    func reasonPromptSaysWhoMoved() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        guard case .preview(let request)? = press(&s, .character("+")).first else {
            Issue.record("the key asked for no preview")
            return
        }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        press(&s, .character("y"))
        type(&s, "steady for an hour")
        var moved = Fixture.model()
        moved.header.templateVersion = "43"
        moved.changes.insert(Fixture.conflictRecord, at: 0)
        guard case .preview(let again)? = s.handle(.snapshot(moved)).first else {
            Issue.record("no re-preview")
            return
        }
        var fresh = Fixture.preview(for: again)
        fresh.baseVersion = "43"
        _ = s.handle(.previewReady(fresh))
        guard case .reason(let revised, let field, _)? = s.overlay else {
            Issue.record("no reason prompt: \(String(describing: s.overlay))")
            return
        }
        #expect(field.text == "steady for an hour")
        #expect(revised.movedBy.map(\.version) == [Fixture.conflictRecord.version])
        let text = screen(s)
        #expect(text.contains("↻ Updated while open: the store moved from v42 to v43"), "\(text)")
        #expect(text.contains("v43 by \(Fixture.conflictRecord.actor)"), "\(text)")
        #expect(text.contains("steady for an hour"), "\(text)")
    }

    @Test("a dialog prepared on a newer version than the console's snapshot is not revised by that snapshot")
    func dialogAheadOfTheSnapshot() {
        // A conflict's re-apply is prepared on the winner (v43) before the console's poll has read it (v42).
        var s = Fixture.state(Fixture.model())
        guard case .preview(let request)? = press(&s, .character("+")).first else {
            Issue.record("the key asked for no preview")
            return
        }
        var ahead = Fixture.preview(for: request)
        ahead.baseVersion = "43"
        _ = s.handle(.previewReady(ahead))
        press(&s, .tab)
        #expect(s.handle(.snapshot(Fixture.model())) == [], "the older snapshot is no move")
        var caughtUp = Fixture.model()
        caughtUp.header.templateVersion = "43"
        #expect(s.handle(.snapshot(caughtUp)) == [], "the snapshot caught up with the dialog")
        guard case .confirm(let kept, let focus)? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        #expect(kept.baseVersion == "43" && focus != .cancel, "the dialog and its focus are the operator's")
        var moved = Fixture.model()
        moved.header.templateVersion = "44"
        guard case .preview? = s.handle(.snapshot(moved)).first else {
            Issue.record("a publish past the dialog's version asked for no re-preview")
            return
        }
    }

    @Test("u pressed before a colleague's publish stays pinned to the version it meant")
    func rollbackPinned() {
        var s = Fixture.state(Fixture.model())
        guard case .preview(let request)? = press(&s, .character("u")).first else {
            Issue.record("the key asked for no preview")
            return
        }
        var p = Fixture.preview(for: request)
        p.guardrail = GuardrailAssessment(verdict: .ok, reasons: [])
        _ = s.handle(.previewReady(p))
        var moved = Fixture.model()
        moved.header.templateVersion = "43"
        guard case .preview(let again)? = s.handle(.snapshot(moved)).first else {
            Issue.record("no re-preview")
            return
        }
        #expect(again.operation == .rollback(toVersion: 41))
    }

    @Test("a re-preview the write path turns down closes the dialog and says why")
    func revisionFails() {
        var s = Fixture.state(Fixture.model())
        guard case .preview(let request)? = press(&s, .character("+")).first else {
            Issue.record("the key asked for no preview")
            return
        }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        var killed = Fixture.model(state: .killed)
        killed.header.templateVersion = "43"
        let effects = s.handle(.snapshot(killed))
        guard
            let again = effects.compactMap({ e -> ChangeRequest? in
                if case .preview(let r) = e { return r }
                return nil
            }).first
        else {
            Issue.record("no re-preview: \(effects)")
            return
        }
        _ = s.handle(.previewFailed(requestID: again.id, message: "read-only: store opened read-only"))
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .warning)
        #expect(s.notice?.text.hasPrefix("The store moved while the dialog was open") == true)
    }
}

@Suite("Mouse clicks")
struct MouseTests {
    /// Clicks where the frame drew `text`.
    static func point(of text: String, in grid: Grid) -> Point? {
        for (y, line) in grid.lines.enumerated() {
            if let r = line.range(of: text) {
                // Columns, not characters: the lines here are single-width up to the text.
                return Point(x: CharacterWidth.of(String(line[..<r.lowerBound])) + 1, y: y)
            }
        }
        return nil
    }

    @Test("a click on Publish acts like y, on Cancel like n; the buttons are where the frame drew them")
    func buttons() throws {
        for size in [Size(width: 80, height: 24), Size(width: 200, height: 60)] {
            var s = Fixture.state(Fixture.model(), size: size)
            guard case .preview(let request)? = s.handle(.key(.character("+"))).first else {
                Issue.record("the key asked for no preview")
                return
            }
            _ = s.handle(.previewReady(Fixture.preview(for: request)))
            let grid = ConsoleScreen.render(s, size: size)
            let publish = try #require(Self.point(of: "[ Publish ]", in: grid))
            let cancel = try #require(Self.point(of: "▶ Cancel ◀", in: grid))
            #expect(grid.target(at: publish) == .button(.act))
            #expect(grid.target(at: cancel) == .button(.cancel))
            #expect(grid.target(at: Point(x: 0, y: 0)) == nil)
            var yes = s
            _ = yes.handle(.click(.button(.act)))
            guard case .reason? = yes.overlay else {
                Issue.record("a click on Publish did not go on to the reason: \(String(describing: yes.overlay))")
                return
            }
            _ = s.handle(.click(.button(.cancel)))
            #expect(s.overlay == nil)
            #expect(s.notice?.text == "Cancelled; nothing was written.")
        }
    }

    @Test("a click on a published change in the main screen's log opens that version; Esc returns to the screen")
    func logRow() throws {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        let grid = ConsoleScreen.render(s, size: s.screenSize)
        let row = try #require(Self.point(of: "second step of the plan", in: grid))
        #expect(grid.target(at: row) == .version(41))
        let event = try #require(Self.point(of: "95% of active devices on v42", in: grid))
        #expect(grid.target(at: event) == nil, "an event line opens nothing")
        #expect(s.handle(.click(.version(41))) == [.loadVersion(41)])
        _ = s.handle(.versionLoaded(DrillFixture.detail))
        #expect(ConsoleScreen.render(s, size: s.screenSize).lines.joined().contains("What v41 changed against v40:"))
        _ = s.handle(.key(.escape))
        #expect(s.overlay == nil)
    }

    @Test("a click on a list row selects it; a click on the selected row opens it")
    func rows() throws {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        _ = s.handle(.key(.character("h")))
        _ = s.handle(.historyLoaded(Fixture.model().changes))
        let grid = ConsoleScreen.render(s, size: s.screenSize)
        let row = try #require(Self.point(of: "v40", in: grid))
        #expect(grid.target(at: row) == .row(2))
        #expect(s.handle(.click(.row(2))) == [])
        guard case .history(_, let cursor)? = s.overlay else {
            Issue.record("no history overlay: \(String(describing: s.overlay))")
            return
        }
        #expect(cursor.selected == 2)
        #expect(s.handle(.click(.row(2))) == [.loadVersion(40)])
    }
}

@Suite("Annotated chart")
struct AnnotatedChartTests {
    @Test("every published change in the window is marked at its minute; older ones are not; crashes get a row")
    func markers() throws {
        let size = Size(width: 120, height: 40)
        var model = Fixture.model()
        // A change in the newest minute, one 10 minutes back (v42), and two older than the 30 minutes shown.
        model.changes.insert(
            ChangeRecord(
                version: "43", at: Fixture.at(5), actor: "bo@example.com", kind: .nudge,
                from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
                to: RolloutPosition(microPercent: MicroPercent(13_500_000)),
                reason: ""), at: 0)
        let lines = ConsoleScreen.render(Fixture.state(model, size: size), size: size).lines
        let publ = try #require(lines.first { $0.contains("│ publ ") })
        let crash = try #require(lines.first { $0.contains("│ crash ") })
        let fail = try #require(lines.first { $0.contains("│ fail ") })
        #expect(publ.contains("▲v42") && publ.contains("v43▲"), "v43's label goes left of its marker at the edge")
        #expect(!publ.contains("v41") && !publ.contains("v40"))
        // v43 is in the newest minute: the last minute's first column, two columns (spread 2) before the end of
        // the fail row's bars; v42 is 10 minutes, 20 columns, before it.
        let failChars = Array(fail)
        let lastBar = try #require(failChars.lastIndex { "▁▂▃▄▅▆▇█".contains($0) })
        let v43 = try #require(Array(publ).firstIndex(of: "▲").map { _ in Array(publ).lastIndex(of: "▲")! })
        #expect(v43 == lastBar - 1)
        let v42 = try #require(Array(publ).firstIndex(of: "▲"))
        #expect(v42 == v43 - 20)
        #expect(crash.contains("█"), "the crash row charts crashes per 1,000 sessions")
    }
}
