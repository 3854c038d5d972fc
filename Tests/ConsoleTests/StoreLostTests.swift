import Console
import RemoteConfig
import Rollout
import Testing
import Timekeeping

/// A store removed or replaced under a running console (3 a.m. issue, item 4, the read side): the data source marks
/// the snapshot (`HeaderInfo.storeLost`); the console turns read-only with a banner, and no write key asks the
/// write path for anything.
@Suite("Store lost under the console")
struct StoreLostTests {
    private func lostModel() -> ConsoleModel {
        var m = Fixture.model()
        m.header.storeLost = "the store was removed or replaced (no file at that path any more)"
        m.header.readOnly = true
        return m
    }

    @Test("the first snapshot that says so latches read-only, rings once and is logged")
    func latches() {
        var s = Fixture.state(Fixture.model())
        let effects = s.handle(.snapshot(lostModel()))
        #expect(effects == [.bell])
        #expect(s.storeLost?.contains("no file at that path") == true)
        #expect(s.verdictLog.last?.text.hasPrefix("READ-ONLY") == true)
        // A later snapshot without the mark does not undo it: a file back at the path is not known to be the store.
        #expect(s.handle(.snapshot(lostModel())) == [])
        _ = s.handle(.snapshot(Fixture.model()))
        #expect(s.storeLost != nil)
    }

    @Test(
        "every write key is refused with the reason and asks for no preview",
        arguments: ["+", "-", "K", "r", "u", "=", "X", "x"])
    func writesRefused(_ key: Character) {
        var s = Fixture.state(Fixture.model())
        _ = s.handle(.snapshot(lostModel()))
        let effects = s.handle(.key(.character(key)))
        #expect(effects.isEmpty, "\(effects)")
        #expect(s.overlay == nil)
        #expect(s.notice?.kind == .error)
        #expect(s.notice?.text.contains("nothing was written") == true, "\(String(describing: s.notice))")
    }

    @Test("an open confirm dialog becomes a notice that takes the Enter meant for Publish")
    func openDialogClosed() {
        var s = Fixture.state(Fixture.model())
        guard case .preview(let request)? = s.handle(.key(.character("K"))).first else {
            Issue.record("no preview")
            return
        }
        _ = s.handle(.previewReady(Fixture.preview(for: request)))
        guard case .confirm? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        _ = s.handle(.snapshot(lostModel()))
        guard case .storeLost? = s.overlay, let lost = s.storeLost else {
            Issue.record("no notice: \(String(describing: s.overlay))")
            return
        }
        #expect(lost.contains("no file at that path"))
        let size = Size(width: 120, height: 40)
        let screen = ConsoleScreen.render(s, size: size).lines.joined(separator: "\n")
        #expect(screen.contains("Store lost: the change was dropped"), "\(screen)")
        #expect(screen.contains("READ-ONLY: the store was removed or replaced"), "\(screen)")
        // Enter (meant for Publish) closes the notice: it neither publishes nor opens the verdict pane.
        #expect(s.handle(.key(.enter)) == [])
        #expect(s.overlay == nil)
        #expect(s.handle(.key(.character("y"))) == [])
        #expect(s.overlay == nil)
    }

    @Test("Esc closes the notice too, and a change being prepared is dropped the same way")
    func preparingDropped() {
        var s = Fixture.state(Fixture.model())
        guard case .preview? = s.handle(.key(.character("+"))).first, case .preparing? = s.overlay else {
            Issue.record("no preparing dialog: \(String(describing: s.overlay))")
            return
        }
        _ = s.handle(.snapshot(lostModel()))
        guard case .storeLost? = s.overlay else {
            Issue.record("no notice: \(String(describing: s.overlay))")
            return
        }
        #expect(s.handle(.key(.escape)) == [])
        #expect(s.overlay == nil)
    }

    @Test("the banner takes the message row, above HALT's, and stays after the next key")
    func banner() {
        var halted = Fixture.model(verdict: .halt, reasons: ["crash rate up"])
        var s = Fixture.state(halted)
        halted.header.storeLost = "the store was removed or replaced (another file is at that path now)"
        _ = s.handle(.snapshot(halted))
        _ = s.handle(.key(.escape))
        #expect(s.notice == nil)
        let row = ConsoleScreen.render(s, size: Size(width: 120, height: 40)).lines[38]
        #expect(row.contains("READ-ONLY: the store was removed or replaced (another file"), "\(row)")
        #expect(!row.contains("HALT"), "\(row)")
    }
}

/// After a kill (3 a.m. issue, item 7): the panel said `Desired 25% observed 8.0% ▲ above` and `v` still offered
/// `K kills by hand`.
@Suite("After a kill")
struct AfterKillTests {
    @Test("the panel says 0%, devices still on the flag falling, r resuming at the percentage before; v offers r")
    func killedPanelAndWhy() {
        var m = Fixture.model(state: .killed)
        m.condition.desiredMicroPercent = MicroPercent(25_000_000)
        m.condition.observedExposure = 0.08
        for size in [Size(width: 120, height: 40), Size(width: 70, height: 20)] {
            let s = Fixture.state(m, size: size)
            let screen = ConsoleScreen.render(s, size: size).lines.joined(separator: "\n")
            #expect(
                screen.contains("0%  observed 8.0% ▼ falling")
                    || screen.contains("desired 0%  observed 8.0% ▼ falling"), "\(screen)")
            #expect(screen.contains("KILLED  r → 25%"), "\(screen)")
            #expect(!screen.contains("▲ above"), "\(screen)")
        }
        var s = Fixture.state(m, size: Size(width: 120, height: 40))
        _ = s.handle(.key(.character("v")))
        let why = VerdictPane.lines(for: s, width: 116).map { $0.map(\.text).joined() }.joined(separator: "\n")
        #expect(why.contains("already off for everyone (killed): r resumes"), "\(why)")
        #expect(!why.contains("K kills by hand"))
    }
}

/// "`Difference` has no unit" (3 a.m. issue, smaller items): the crash-free difference is in percentage points.
@Suite("The difference's unit")
struct DifferenceUnitTests {
    @Test(
        "the crash panel and the compact layout say pp",
        arguments: [Size(width: 80, height: 24), Size(width: 120, height: 40), Size(width: 70, height: 20)])
    func unit(_ size: Size) {
        let s = Fixture.state(Fixture.model(), size: size)
        let screen = ConsoleScreen.render(s, size: size).lines.joined(separator: "\n")
        let line = screen.split(separator: "\n").first { $0.contains("-0.028") }.map(String.init) ?? "none"
        #expect(
            line.contains("-0.028 [-0.121, +0.065] pp") || line.contains("Diff (pp)  -0.028 [-0.121, +0.065]"),
            "\(line)")
    }
}
