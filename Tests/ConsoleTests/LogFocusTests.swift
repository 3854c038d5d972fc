import Console
import RemoteConfig
import Testing
import Timekeeping

/// The main screen's log from the keyboard: Tab focuses it, ↑↓ select a published change, Enter opens it.
@Suite("Log focus")
struct LogFocusTests {
    private func screen(_ s: ConsoleState) -> [String] { ConsoleScreen.render(s, size: s.screenSize).lines }

    @Test("Tab selects the newest change; ↓ ↑ walk the changes in the log's order, skipping events; Enter opens it")
    func walkAndOpen() throws {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        #expect(s.logSelection == nil)
        #expect(s.handle(.key(.tab)) == [])
        #expect(s.logSelection == 42)
        _ = s.handle(.key(.down))
        #expect(s.logSelection == 41, "the two events between v42 and v41 are not stops")
        _ = s.handle(.key(.character("j")))
        #expect(s.logSelection == 40)
        _ = s.handle(.key(.down))
        #expect(s.logSelection == 40, "the oldest change is the end")
        _ = s.handle(.key(.up))
        #expect(s.logSelection == 41)
        _ = s.handle(.key(.home))
        #expect(s.logSelection == 42)
        _ = s.handle(.key(.end))
        #expect(s.logSelection == 40)
        _ = s.handle(.key(.character("k")))
        #expect(s.handle(.key(.enter)) == [.loadVersion(41)])
        guard case .version(41, nil, 0, nil)? = s.overlay else {
            Issue.record("Enter did not open v41: \(String(describing: s.overlay))")
            return
        }
        _ = s.handle(.versionLoaded(DrillFixture.detail))
        #expect(screen(s).joined().contains("What v41 changed against v40:"))
        _ = s.handle(.key(.escape))
        #expect(s.overlay == nil)
        #expect(s.logSelection == 41, "Esc from the drill-down returns to the same change")
        _ = s.handle(.key(.escape))
        #expect(s.logSelection == nil, "Esc leaves the log")
        #expect(s.handle(.key(.enter)) == [], "Enter is the verdict's again")
        #expect(s.overlay == .verdict(scroll: 0))
    }

    @Test("the selected change is highlighted, the footer and the log's title say the keys; Tab leaves")
    func rendering() throws {
        for size in [Size(width: 80, height: 24), Size(width: 120, height: 40), ConsoleScreen.minimumSize] {
            var s = Fixture.state(Fixture.model(), size: size)
            let before = ConsoleScreen.render(s, size: size)
            _ = s.handle(.key(.tab))
            _ = s.handle(.key(.down))
            let grid = ConsoleScreen.render(s, size: size)
            let y = try #require(
                grid.lines.firstIndex { $0.contains("bo@example.com") }, "v41 is in the log at \(size)")
            let x = try #require(MouseTests.point(of: "bo@example.com", in: grid)).x
            #expect(grid[x, y].role == .selection, "the selected change is highlighted at \(size)")
            #expect(before[x, y].role != .selection)
            #expect(
                grid.lines.last?.contains("Esc leave the log") == true, "footer at \(size): \(grid.lines.last ?? "")")
            _ = s.handle(.key(.tab))
            #expect(s.logSelection == nil)
            #expect(ConsoleScreen.render(s, size: size).lines.dropLast(2) == before.lines.dropLast(2))
        }
    }

    @Test("a selected change below the log's rows scrolls the log so it stays in sight")
    func scrolls() throws {
        var m = Fixture.model()
        for v in 43...60 {
            m.events.insert(NotableEvent(at: Fixture.at(10), severity: .info, text: "event \(v)"), at: 0)
        }
        var s = Fixture.state(m, size: Size(width: 80, height: 24))
        #expect(!screen(s).joined().contains("first step"), "v40 is below the log's rows before it is selected")
        _ = s.handle(.key(.tab))
        _ = s.handle(.key(.end))
        #expect(s.logSelection == 40)
        let lines = screen(s)
        #expect(lines.joined().contains("first step"), "the log scrolled to v40")
    }

    @Test("the selection follows its change as rows arrive, and falls back to the newest when it leaves the log")
    func followsSnapshots() throws {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        _ = s.handle(.key(.tab))
        _ = s.handle(.key(.down))
        var newer = Fixture.model()
        newer.changes.insert(
            ChangeRecord(
                version: "43", at: Fixture.at(5), actor: "cy@example.com", kind: .nudge,
                from: RolloutPosition(microPercent: MicroPercent(12_500_000)),
                to: RolloutPosition(microPercent: MicroPercent(13_500_000)), reason: "on"), at: 0)
        _ = s.handle(.snapshot(newer))
        #expect(s.logSelection == 41)
        newer.changes.removeAll { $0.version == "41" }
        _ = s.handle(.snapshot(newer))
        #expect(s.logSelection == 43)
    }

    @Test("keys other than the log's work as on the main screen with the focus kept; no change, no focus")
    func otherKeys() throws {
        var s = Fixture.state(Fixture.model(), size: Size(width: 120, height: 40))
        _ = s.handle(.key(.tab))
        guard case .preview(let request)? = s.handle(.key(.character("+"))).first else {
            Issue.record("+ did not ask for a preview with the log focused")
            return
        }
        #expect(request.operation == .rollout(.nudge(s.step)))
        _ = s.handle(.key(.escape))
        #expect(s.logSelection == 42)

        var empty = Fixture.model()
        empty.changes = []
        var e = Fixture.state(empty, size: Size(width: 120, height: 40))
        _ = e.handle(.key(.tab))
        #expect(e.logSelection == nil)
        #expect(e.notice?.text == "The log shows no published change to open yet")
    }
}
