import Console
import RemoteConfig
import Rollout
import Testing

/// The `:` command palette: fuzzy names, and every command on the same intent as its key (no second write path).
@Suite("Command palette")
struct CommandPaletteTests {
    private func ready() -> ConsoleState { Fixture.state(Fixture.model()) }

    /// Opens the palette, types `text`, presses Enter; returns the effects of Enter.
    private func run(_ s: inout ConsoleState, _ text: String) -> [ConsoleEffect] {
        _ = s.handle(.key(.character(":")))
        for c in text { _ = s.handle(.key(.character(c))) }
        return s.handle(.key(.enter))
    }

    private func operation(_ effects: [ConsoleEffect]) -> ChangeOperation? {
        if case .preview(let request)? = effects.first, effects.count == 1 { return request.operation }
        return nil
    }

    @Test(
        "names are matched fuzzily, the rest are arguments",
        arguments: [
            ("rb 12", "rollback to", ["12"]), ("rollback to v12", "rollback to", ["v12"]), ("k", "kill", []),
            ("gv 7", "goto version", ["7"]), ("plan s", "plan skip", []), ("plan res", "plan resume", []),
            ("se 25", "set", ["25"]), ("nudge -0.5", "nudge", ["-0.5"]), ("th dark", "theme", ["dark"]),
            ("src", "source", []),
        ])
    func fuzzy(_ text: String, _ name: String, _ args: [String]) {
        let best = PaletteCommand.matches(text).first
        #expect(best?.command.name == name, "\(text) → \(String(describing: best))")
        #expect(best?.arguments == args)
    }

    @Test("an empty palette lists every command; nonsense matches none")
    func listing() {
        #expect(PaletteCommand.matches("").count == PaletteCommand.all.count)
        #expect(PaletteCommand.matches("zzq").isEmpty)
    }

    @Test("each command asks for exactly what its key asks for")
    func sameIntentsAsTheKeys() {
        func key(_ keys: Key...) -> ChangeOperation? {
            var s = ready()
            var last: [ConsoleEffect] = []
            for k in keys { last = s.handle(.key(k)) }
            return operation(last)
        }
        func palette(_ text: String) -> ChangeOperation? {
            var s = ready()
            return operation(run(&s, text))
        }
        #expect(palette("kill") != nil)
        #expect(palette("kill") == key(.character("K")))
        #expect(palette("resume") == key(.character("r")))
        #expect(palette("nudge +") == key(.character("+")))
        #expect(palette("nudge -") == key(.character("-")))
        #expect(palette("rollback") == key(.character("u")))
        #expect(palette("set 25") == key(.character("="), .character("2"), .character("5"), .enter))
        #expect(palette("set 25") == .rollout(.set(MicroPercent(25_000_000))))
        #expect(palette("nudge +2.5") == .rollout(.nudge(MicroPercent(2_500_000))))
        #expect(palette("nudge -2.5") == .rollout(.nudge(.zero - MicroPercent(2_500_000))))
        #expect(palette("rollback to 40") == .rollback(toVersion: 40))
        #expect(palette("rb v40") == .rollback(toVersion: 40))
    }

    @Test("a change from the palette goes through confirm, reason and step-up like the key's")
    func stepUpStillApplies() {
        var s = ready()
        guard case .preview(let request)? = run(&s, "set 13.5").first else {
            Issue.record("no preview")
            return
        }
        #expect(s.overlay == .preparing(request))
        var preview = Fixture.preview(for: request)
        preview.requiresReason = true
        _ = s.handle(.previewReady(preview))
        guard case .confirm? = s.overlay else {
            Issue.record("no confirm dialog: \(String(describing: s.overlay))")
            return
        }
        _ = s.handle(.key(.character("y")))
        for c in "steady" { _ = s.handle(.key(.character(c))) }
        #expect(s.handle(.key(.enter)) == [])
        guard case .stepUp? = s.overlay else {
            Issue.record("no step-up prompt: \(String(describing: s.overlay))")
            return
        }
    }

    @Test(
        "a command that cannot run keeps the palette open with the reason and asks for nothing",
        arguments: [
            ("set", "usage: set PERCENT"), ("set abc", "abc"), ("set 12.5", "already at 12.5%"),
            ("kill now", "usage: kill"), ("zzq", "no command matches"), ("theme nosuch", "no theme 'nosuch'"),
            ("goto version x1", "not a version number"), ("nudge 2", "say which way"),
        ])
    func refusals(_ text: String, _ said: String) {
        var s = ready()
        #expect(run(&s, text) == [])
        guard case .palette(let p)? = s.overlay else {
            Issue.record("the palette closed: \(String(describing: s.overlay))")
            return
        }
        #expect(p.error != nil)
        #expect(p.error?.contains(said) == true, "\(String(describing: p.error))")
    }

    @Test("theme by name, goto version, source, and Esc")
    func others() {
        var s = ready()
        let names = s.configuration.themeNames
        try? #require(names.count > 1)
        _ = run(&s, "theme " + names[1])
        #expect(s.themeIndex == 1)
        #expect(run(&s, "goto version 41") == [.loadVersion(41)])
        guard case .version(41, nil, 0, nil)? = s.overlay else {
            Issue.record("\(String(describing: s.overlay))")
            return
        }
        _ = s.handle(.key(.escape))
        _ = run(&s, "source")
        #expect(s.notice?.text.contains("sqlite /home/ana/.local/share/rollout/store.db") == true)
        _ = s.handle(.key(.character(":")))
        _ = s.handle(.key(.escape))
        #expect(s.overlay == nil)
    }

    @Test("↑↓ choose among the matches and Tab completes the chosen name")
    func chooseAndComplete() {
        var s = ready()
        _ = s.handle(.key(.character(":")))
        for c in "plan" { _ = s.handle(.key(.character(c))) }
        _ = s.handle(.key(.down))
        _ = s.handle(.key(.tab))
        guard case .palette(let p)? = s.overlay else {
            Issue.record("\(String(describing: s.overlay))")
            return
        }
        #expect(p.field.text == "plan resume")
    }

    @Test("after the store is lost, a write from the palette is refused like the key")
    func lostStore() {
        var s = ready()
        var lost = Fixture.model()
        lost.header.storeLost = "the store was removed or replaced (no file at that path any more)"
        _ = s.handle(.snapshot(lost))
        _ = s.handle(.key(.escape))
        #expect(run(&s, "kill") == [])
        #expect(s.notice?.text.contains("nothing was written") == true)
    }
}
