import Foundation
import Rollout
import SQLiteStore
import Testing
import TestSupport

/// The simulator goes through the same gate as anyone: it acts only as `simulator`, and what step-up protects
/// needs a code it does not have.
@Suite("simulator through the gate", .serialized)
struct SimulatorGateTests {
    @Test func anEvilScenarioCannotActAsAnOperatorNorSkipStepUp() throws {
        let f = try ConsoleEndToEndTests.Fixture(initialized: false)
        let evil = f.directory.appendingPathComponent("evil.scenario")
        try "duration 5m\ndevices 200\nrollout 40%\nat 2m rollout 100%\n".write(to: evil, atomically: true, encoding: .utf8)
        // A drill store with an enrolled operator (step-up enforced).
        let made = try TestSupport.run(
            f.binary, ["simulate", "--scenario", "steady", "--devices", "100", "--speed", "max", "--duration", "1m", "--store", f.store, "--quiet"])
        try #require(made.status == 0, "\(made.stderr)")
        let started = try TestSupport.run(f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--store", f.store], stdin: "")
        let uri = try #require(started.stdout.split(separator: "\n").first { $0.contains("otpauth://totp/") })
        let base32 = String(try #require(uri.split(separator: "secret=").last?.split(separator: "&").first))
        let code = try TestSupport.run(
            try TestSupport.python(), ["-c", "import pyotp, sys; print(pyotp.TOTP(sys.argv[1]).now())", base32]
        ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(try TestSupport.run(f.binary, ["operator", "enroll", "--operator", "ana@example.com", "--code", code, "--store", f.store]).status == 0)
        let before = try RolloutStore(path: f.store, create: false).configStore().current().info.number

        // As an operator: refused outright.
        let asAna = try TestSupport.run(
            f.binary, ["simulate", "--scenario", evil.path, "--speed", "max", "--store", f.store, "--operator", "ana@example.com"])
        #expect(asAna.status == 2)
        #expect(asAna.stderr.contains("the simulator acts only as itself"))
        // As itself: both increases need a code (more than 10 points; reaching 100%), so nothing is published.
        let asItself = try TestSupport.run(f.binary, ["simulate", "--scenario", evil.path, "--speed", "max", "--store", f.store])
        #expect(asItself.status == 4, "\(asItself.stderr)")
        #expect(asItself.stderr.contains("not published"))
        let after = try RolloutStore(path: f.store, create: false).configStore().current().info.number
        #expect(after == before)
        #expect(try f.statusJSON().contains("\"microPercent\": 10000000"))
    }
}
