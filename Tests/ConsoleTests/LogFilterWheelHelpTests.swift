import Console
import RemoteConfig
import Rollout
import Testing
import Timekeeping

/// The k9s/lazygit habits of the 3 a.m. issue beyond the palette: `/` on the main log, the mouse wheel, a help
/// cheat sheet that fits 80×24, breadcrumbs in overlay titles.
@Suite("Log filter, wheel, help cheat sheet, breadcrumbs")
struct LogFilterWheelHelpTests {
    private func text(_ s: ConsoleState) -> String {
        ConsoleScreen.render(s, size: s.screenSize).lines.joined(separator: "\n")
    }

    @Test("/ filters the main log as it is typed; Enter keeps it with a count in the title; Esc clears it")
    func logFilter() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        #expect(text(s).contains("second step of the plan"))
        _ = s.handle(.key(.character("/")))
        for c in "BO@" { _ = s.handle(.key(.character(c))) }
        var screen = text(s)
        // bo@ made v41 and v40; ana@'s v42 and the events are hidden.
        #expect(screen.contains("second step of the plan"))
        #expect(screen.contains("first step"))
        #expect(!screen.contains("steady for an hour"), "\(screen)")
        #expect(!screen.contains("95% of active devices"))
        #expect(screen.contains("2 match · Enter keeps · Esc clears"), "\(screen)")
        // Keys go to the filter, not to the main screen: q is typed, not quit.
        #expect(s.handle(.key(.character("q"))) == [])
        #expect(s.logFilter?.text == "BO@q")
        _ = s.handle(.key(.backspace))
        _ = s.handle(.key(.enter))
        screen = text(s)
        #expect(screen.contains("Log / BO@ 2 of 5"), "\(screen)")
        // Tab walks the changes the filter shows.
        _ = s.handle(.key(.tab))
        #expect(s.logSelection == 41)
        _ = s.handle(.key(.escape))
        _ = s.handle(.key(.escape))
        #expect(s.logFilter == nil)
        #expect(text(s).contains("steady for an hour"))
    }

    @Test("a filter that matches nothing says so")
    func logFilterEmpty() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        _ = s.handle(.key(.character("/")))
        for c in "zzz" { _ = s.handle(.key(.character(c))) }
        _ = s.handle(.key(.enter))
        #expect(text(s).contains("No line of the log matches “zzz”"))
    }

    @Test("the wheel scrolls help and lists, moves the log's selection, and does nothing on a bare main screen")
    func wheel() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 24))
        #expect(s.handle(.wheel(1)) == [])
        #expect(s.overlay == nil && s.logSelection == nil)
        _ = s.handle(.key(.character("?")))
        _ = s.handle(.wheel(2))
        #expect(s.overlay == .help(scroll: 6))
        _ = s.handle(.wheel(-1))
        #expect(s.overlay == .help(scroll: 3))
        _ = s.handle(.wheel(-5))
        #expect(s.overlay == .help(scroll: 0))
        _ = s.handle(.key(.escape))

        _ = s.handle(.key(.character("h")))
        let entries: [ChangeRecord] = (1...30).map { (i: Int) -> ChangeRecord in
            let to = RolloutPosition(microPercent: MicroPercent(Int64(i) * 1000))
            return ChangeRecord(
                version: String(i), at: Fixture.at(Int64(1000 - i)), actor: "ana@example.com", kind: .set,
                from: RolloutPosition(microPercent: MicroPercent(0)), to: to, reason: "r\(i)")
        }
        _ = s.handle(.historyLoaded(entries))
        _ = s.handle(.wheel(1))
        guard case .history(_, let cursor)? = s.overlay else {
            Issue.record("\(String(describing: s.overlay))")
            return
        }
        #expect(cursor.selected == 3)
        _ = s.handle(.key(.escape))

        _ = s.handle(.key(.tab))
        #expect(s.logSelection == 42)
        _ = s.handle(.wheel(1))
        #expect(s.logSelection == 41)
    }

    @Test("at 80×24 the help opens on a cheat sheet with every key of the main screen, nothing cut")
    func cheatSheetFits() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 80, height: 24))
        _ = s.handle(.key(.character("?")))
        let screen = text(s)
        for binding in KeyMap.main where binding.group != .simulation {
            #expect(screen.contains(HelpScreen.short(binding)), "\(binding.intent) missing:\n\(screen)")
        }
        #expect(screen.contains("In dialogs, prompts and lists"))
        #expect(!screen.contains("…"), "\(screen)")
        // The full descriptions follow, wrapped rather than cut, at any width.
        for width in [60, 80, 120] {
            s = Fixture.state(Fixture.model(), size: Size(width: width, height: 24))
            let lines = HelpScreen.lines(for: s)
            #expect(
                lines.allSatisfy { $0.reduce(0) { $0 + CharacterWidth.of($1.text) } <= width - 4 }, "width \(width)")
            #expect(!lines.map { $0.map(\.text).joined() }.joined().contains("…"))
        }
    }

    @Test("overlay titles carry the way they were reached")
    func breadcrumbs() {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        _ = s.handle(.key(.character("h")))
        _ = s.handle(.historyLoaded(Fixture.model().changes))
        #expect(text(s).contains("rollout › History"))
        _ = s.handle(.key(.enter))
        #expect(text(s).contains("rollout › History › Version v42"), "\(text(s))")
        _ = s.handle(.key(.escape))
        _ = s.handle(.key(.escape))
        _ = s.handle(.key(.character(":")))
        #expect(text(s).contains("rollout › Command"))
        for c in "kil" { _ = s.handle(.key(.character(c))) }
        #expect(text(s).contains("Enter runs kill"))
    }
}
