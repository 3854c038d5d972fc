import FleetSimulator
import Foundation
import RemoteConfig
import Testing
import TestSupport
import Timekeeping

@Suite struct ScenarioTests {
    @Test func everyBuiltInScenarioReads() throws {
        let names = Scenario.builtInNames
        #expect(
            Set(names).isSuperset(of: ["steady", "throttling", "crash-regression", "bad-build", "slow-propagation"]))
        for name in names {
            let s = try Scenario.load(name)
            #expect(s.name == name && !s.summary.isEmpty && s.duration > .minutes(30))
            #expect(s.schedule.contains { if case .rollout = $0.action { true } else { false } })
        }
        let throttling = try Scenario.load("throttling")
        #expect(throttling.parameters.appleCapacity == 3)
        #expect(throttling.schedule.map(\.offset) == [.seconds(Int64(0)), .minutes(30)])
        #expect(throttling.schedule.last?.action == .rollout(MicroPercent(percent: 50)))
    }

    @Test("the shipped scenario files are the compiled-in scenarios, byte for byte, and no more")
    func shippedFilesAreTheCompiledInScenarios() throws {
        let dir = TestSupport.packageRoot.appendingPathComponent("Sources/FleetSimulator/Scenarios")
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(files == Scenario.builtInNames.map { $0 + ".scenario" })
        for name in Scenario.builtInNames {
            let file = try String(contentsOf: dir.appendingPathComponent(name + ".scenario"), encoding: .utf8)
            #expect(Scenario.builtInSource(name) == file, "\(name).scenario differs from BuiltInScenarios.swift")
        }
        #expect(Scenario.builtInSource("no-such-scenario") == nil)
        #expect(throws: ScenarioError.self) { try Scenario.load("no-such-scenario") }
    }

    @Test("a scenario path that cannot be read, or is too large, is refused with its reason")
    func unreadableScenarioFiles() throws {
        let dir = try TestSupportDirectory.make()
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            _ = try Scenario.load(dir.appendingPathComponent("missing.scenario").path)
            Issue.record("a missing file loaded")
        } catch { #expect("\(error)".contains("No such file or directory")) }
        do {
            _ = try Scenario.load(dir.path + "/")
            Issue.record("a directory loaded")
        } catch { #expect("\(error)".contains("Is a directory")) }
        let big = dir.appendingPathComponent("big.scenario")
        try Data(repeating: UInt8(ascii: "#"), count: (1 << 20) + 1).write(to: big)
        do {
            _ = try Scenario.load(big.path)
            Issue.record("a file over 1 MiB loaded")
        } catch { #expect("\(error)".contains("larger than 1 MiB")) }
    }

    @Test func aScenarioFileIsReadByPath() throws {
        let dir = try TestSupportDirectory.make()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("drill.scenario")
        try "summary drill\nduration 45m\ndevices 1234\nstart 2026-01-02T03:04:05Z\nrollout 2.5%\n".write(
            to: file, atomically: true, encoding: .utf8)
        let s = try Scenario.load(file.path)
        #expect(s.name == "drill" && s.devices == 1234 && s.duration == .minutes(45))
        #expect(s.start == ISO8601.parse("2026-01-02T03:04:05Z"))
        #expect(s.schedule.first?.action == .rollout(MicroPercent(2_500_000)))
        #expect(throws: ScenarioError.self) { try Scenario.load(dir.appendingPathComponent("missing.scenario").path) }
        #expect(throws: ScenarioError.self) { try Scenario.load("no-such-scenario") }
    }

    @Test func valuesAndScheduleParse() throws {
        let s = try Scenario.parse(
            """
            # a comment
            name   custom        # trailing comment
            os-versions 18.5:90% 13.7:10%
            app-versions 4.0.0:100%
            utc-offsets -5:50% 9:50%
            simulators 1%
            apple-capacity 30/min
            attest-failure.serverUnavailable 2.5%
            assert-failure.invalidKey 1%
            session-length 1h30m
            at 1h30m crash-rate 1%
            at 10m release 4.1.0 adoption 20%/h crash-rate 2% app-id OTHERTEAM1.dev.rollout.fleet
            at 5m kill
            at 6m resume
            """, name: "file")
        #expect(s.name == "custom")
        #expect(s.parameters.osVersions == [Weighted("18.5", 0.9), Weighted("13.7", 0.1)])
        #expect(s.parameters.utcOffsets == [Weighted(-5, 0.5), Weighted(9, 0.5)])
        #expect(s.parameters.appleCapacity == 0.5)
        #expect(s.parameters.attestationFailures[4] == 0.025 && s.parameters.assertionFailures[3] == 0.01)
        #expect(s.parameters.sessionLength == .minutes(90))
        #expect(
            s.schedule.map(\.action.description) == [
                "kill", "resume", "release 4.1.0 crash-rate 2.0% app-id OTHERTEAM1.dev.rollout.fleet", "crash-rate 1%",
            ])
        #expect(s.schedule.map(\.line) == [13, 14, 12, 11])
    }

    @Test(arguments: [
        ("sessions-per-day 4\nbogus 1\n", 2, "unknown parameter 'bogus'"),
        ("crash-rate 0.2\n", 1, "is not a share"),
        ("at 5m simulators 2%\n", 1, "fixed when the fleet is created"),
        ("at soon rollout 5%\n", 1, "is not a duration"),
        ("rollout 101%\n", 1, "0% to 100%"),
        ("apple-capacity fast\n", 1, "is not a rate"),
        ("attest-failure.tired 1%\n", 1, "unknown error class"),
        ("\n\nat 1h release\n", 3, "needs a version"),
        ("token-ttl 10m\n", 1, "30 minutes to 7 days"),
    ])
    func mistakesNameTheLine(text: String, line: Int, message: String) {
        do {
            _ = try Scenario.parse(text, name: "bad")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line)
            #expect(error.description.contains(message), "\(error)")
            #expect(error.description.hasPrefix("scenario bad, line \(line): "))
        }
    }
}

enum TestSupportDirectory {
    static func make() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("scenario-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
