import Console
import RemoteConfig
import Testing
import Timekeeping

/// A named way to reach a screen through real events, so the goldens also exercise the reducer.
struct Scenario: Sendable, CustomStringConvertible {
    var name: String
    var build: @Sendable (Size) -> ConsoleState
    var description: String { name }

    static let all: [Scenario] = [
        Scenario(name: "normal") { Fixture.state(Fixture.model(), size: $0) },
        Scenario(name: "killed") {
            Fixture.state(
                Fixture.model(state: .killed, verdict: .hold, reasons: ["kill switch on; an operator decides next"]),
                size: $0)
        },
        Scenario(name: "stale") {
            Fixture.state(Fixture.model(dataAge: .milliseconds(42_000)), size: $0)
        },
        Scenario(name: "halt") {
            Fixture.state(
                Fixture.model(
                    verdict: .halt,
                    reasons: [
                        "exposed crash rate 2.4× control (sequential test crossed harm bound)",
                        "guardrail kills the rollout at the next check",
                    ]),
                size: $0)
        },
        Scenario(name: "confirm") { size in
            var s = Fixture.state(Fixture.model(), size: size)
            let effects = s.handle(.key(.character("+")))
            guard case .preview(let request)? = effects.first else { return s }
            _ = s.handle(.previewReady(Fixture.preview(for: request)))
            return s
        },
        Scenario(name: "conflict") { size in
            var s = Fixture.state(Fixture.model(), size: size)
            guard case .preview(let request)? = s.handle(.key(.character("+"))).first else { return s }
            _ = s.handle(.previewReady(Fixture.preview(for: request)))
            _ = s.handle(.key(.tab))
            _ = s.handle(.key(.enter))
            for c in "steady" { _ = s.handle(.key(.character(c))) }
            _ = s.handle(.key(.enter))
            for c in "123456" { _ = s.handle(.key(.character(c))) }
            _ = s.handle(.key(.enter))
            _ = s.handle(
                .writeRefused(
                    requestID: request.id, .conflict(Fixture.conflictReport()), intervening: [Fixture.conflictRecord]))
            return s
        },
        Scenario(name: "verdict") { size in
            var s = Fixture.state(
                Fixture.model(
                    verdict: .halt,
                    reasons: [
                        "exposed users crash more than control: SPRT Λ = 3.41 reached 2.89 (testing 1.50× crash rate)"
                    ]), size: size)
            _ = s.handle(.key(.character("v")))
            return s
        },
        Scenario(name: "alert") { size in
            // The verdict has just risen to HALT: the header flashes, the footer offers the kill.
            var s = Fixture.state(Fixture.model(), size: size)
            var halt = Fixture.model(
                verdict: .halt,
                reasons: ["exposed users crash more than control: SPRT Λ = 3.41 reached 2.89 (testing 1.50× crash rate)"])
            halt.crash.autoKill = true
            _ = s.handle(.snapshot(halt))
            return s
        },
        Scenario(name: "drilldown") { DrillFixture.drilledDown(size: $0) },
        Scenario(name: "liveconfirm") { DrillFixture.liveConfirm(size: $0) },
        Scenario(name: "logfocus") { size in
            // Tab focused the log, ↓ selected the second published change (v41): highlighted, the keys in the footer.
            var s = Fixture.state(Fixture.model(), size: size)
            _ = s.handle(.key(.tab))
            _ = s.handle(.key(.down))
            return s
        },
        Scenario(name: "help") { size in
            var s = Fixture.state(Fixture.model(), size: size)
            _ = s.handle(.key(.character("?")))
            return s
        },
    ]
}

@Suite("Golden screens")
struct GoldenScreenTests {
    static let sizes = [
        Size(width: 80, height: 24), Size(width: 120, height: 40), Size(width: 200, height: 60), ConsoleScreen.minimumSize,
    ]

    @Test("screens at 80×24, 120×40, 200×60 and the minimum size, colour and monochrome", arguments: Scenario.all, sizes)
    func screen(_ scenario: Scenario, _ size: Size) throws {
        let state = scenario.build(size)
        let grid = ConsoleScreen.render(state, size: size)
        let base = "\(scenario.name)-\(size.width)x\(size.height)"
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .indexed256), title: scenario.name),
            name: base + "-colour")
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: scenario.name),
            name: base + "-mono")
    }

    @Test(
        "charts at 80×24, 120×40 and 200×60 at every zoom, colour and monochrome",
        arguments: ChartZoom.allCases, [Size(width: 80, height: 24), Size(width: 120, height: 40), Size(width: 200, height: 60)])
    func charts(_ zoom: ChartZoom, _ size: Size) throws {
        let grid = ConsoleScreen.render(ChartFixture.state(zoom: zoom, size: size), size: size)
        let base = "charts-\(zoom.minutes)min-\(size.width)x\(size.height)"
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .indexed256), title: "charts \(zoom.text)"),
            name: base + "-colour")
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: "charts \(zoom.text)"),
            name: base + "-mono")
    }

    @Test("a terminal below the minimum size gets the too-small message")
    func tooSmall() throws {
        let size = Size(width: 40, height: 10)
        let grid = ConsoleScreen.render(Fixture.state(Fixture.model(), size: size), size: size)
        try GoldenScreen.check(
            GoldenScreen.dump(grid, theme: Theme.default.resolved(for: .monochrome), title: "too small"),
            name: "too-small-40x10-mono")
    }
}
