import Console
import Testing
import Timekeeping

/// `p`, `>` and `<`: commands for the simulation driving the screen, a message without one, and the header.
@Suite("Demo simulation keys")
struct DemoControlTests {
    static let wall = Instant(seconds: 1_900_000_000)

    static func driving(_ status: SimulationStatus = SimulationStatus(speed: "60x", paused: false, wall: wall))
        -> ConsoleState
    {
        var s = Fixture.state(Fixture.model())
        _ = s.handle(.simulation(status))
        return s
    }

    @Test func withoutASimulationTheKeysOnlySaySo() {
        var s = Fixture.state(Fixture.model())
        for key in ["p", ">", "<"] {
            #expect(s.handle(.key(.character(Character(key)))) == [])
            #expect(s.notice?.text == "No simulation drives this console: p, > and < work in 'rollout demo'")
            #expect(s.overlay == nil)
        }
        let help = HelpScreen.lines(for: s).map { $0.map(\.text).joined() }.joined(separator: "\n")
        #expect(!help.contains("The demo's simulation"))
    }

    @Test func withASimulationEachKeyIsACommand() {
        var s = Self.driving()
        #expect(s.handle(.key(.character("p"))) == [.simulation(.togglePause)])
        #expect(s.handle(.key(.character(">"))) == [.simulation(.faster)])
        #expect(s.handle(.key(.character("<"))) == [.simulation(.slower)])
        // Nothing past the ends of the ladder: a message, no command.
        s = Self.driving(SimulationStatus(speed: "max", paused: false, wall: Self.wall, isFastest: true))
        #expect(s.handle(.key(.character(">"))) == [])
        #expect(s.notice?.text == "Already at the fastest speed, max")
        s = Self.driving(SimulationStatus(speed: "1x", paused: false, wall: Self.wall, isSlowest: true))
        #expect(s.handle(.key(.character("<"))) == [])
        #expect(s.notice?.text == "Already at the slowest speed, 1x")
    }

    @Test func theAnswerSaysWhatHappened() {
        var s = Self.driving()
        _ = s.handle(
            .simulationChanged(SimulationStatus(speed: "60x", paused: true, wall: Self.wall), after: .togglePause))
        #expect(s.simulation?.paused == true)
        #expect(s.notice?.text == "Simulation paused: its time stands still; p resumes")
        _ = s.handle(.simulationChanged(SimulationStatus(speed: "600x", paused: true, wall: Self.wall), after: .faster))
        #expect(s.notice?.text == "Simulation speed 600x (paused; p resumes)")
        _ = s.handle(
            .simulationChanged(SimulationStatus(speed: "600x", paused: false, wall: Self.wall), after: .togglePause))
        #expect(s.notice?.text == "Simulation resumed at 600x")
    }

    @Test func theHeaderShowsSimulatedBesideWallTimeOnlyWhileASimulationDrives() {
        // Ticks run on the simulation's time; the status carries wall time.
        let simulated = Instant(seconds: 1_900_000_000 + 3 * 3600 + 25)
        var s = Self.driving(SimulationStatus(speed: "600x", paused: false, wall: Self.wall))
        _ = s.handle(.tick(simulated))
        let top = { (s: ConsoleState) in
            ConsoleScreen.render(s, size: Size(width: 200, height: 60)).lines[0]
        }
        #expect(
            top(s).contains("sim " + Format.time(simulated) + " 600x · wall " + Format.time(Self.wall)), "\(top(s))")
        _ = s.handle(.simulation(SimulationStatus(speed: "600x", paused: true, wall: Self.wall)))
        #expect(top(s).contains("‖ PAUSED sim " + Format.time(simulated)), "\(top(s))")
        var plain = Fixture.state(Fixture.model())
        _ = plain.handle(.tick(simulated))
        #expect(!top(plain).contains("sim ") && !top(plain).contains("wall "), "\(top(plain))")
    }
}

@Suite("Demo messages")
struct DemoMessageTests {
    /// Ticks run on the simulation's time (an hour per minute, or faster): a message still stays its seconds of
    /// wall time.
    @Test func messagesExpireOnWallTimeWhileASimulationDrives() {
        let wall = Instant(seconds: 1_900_000_000)
        var s = DemoControlTests.driving(SimulationStatus(speed: "600x", paused: false, wall: wall))
        _ = s.handle(.simulationChanged(SimulationStatus(speed: "600x", paused: true, wall: wall), after: .togglePause))
        // Ten minutes of simulated time pass in one wall second: the message stays.
        _ = s.handle(.simulation(SimulationStatus(speed: "600x", paused: false, wall: wall + .seconds(Int64(1)))))
        _ = s.handle(.tick(Fixture.now + .minutes(10)))
        #expect(s.notice != nil)
        _ = s.handle(.simulation(SimulationStatus(speed: "600x", paused: false, wall: wall + .seconds(Int64(7)))))
        _ = s.handle(.tick(Fixture.now + .minutes(11)))
        #expect(s.notice == nil)
    }
}
