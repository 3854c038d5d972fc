import CommandLineKit
import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import TestSupport
import Testing

/// Where the store is and who acts, from flags, then the environment, then defaults.
struct StoreLocationTests {
    /// The invocation a command line gives, parsed by the real grammar with the global options.
    static func invocation(_ values: [String: String] = [:], env: [String: String] = [:], flags: Set<String> = [])
        -> Invocation
    {
        let command = Command(
            "rollout", summary: "",
            options: [
                .value("--store", name: "PATH", help: ""), .value("--operator", name: "ID", help: ""),
                .flag("--read-only", help: ""),
            ],
            action: { _ in .ok })
        var args: [String] = []
        for (k, v) in values.sorted(by: { $0.key < $1.key }) { args += [k, v] }
        args += flags.sorted()
        guard case .run(_, let inv) = try? command.parse(args, environment: env) else {
            fatalError("the test's own command line does not parse: \(args)")
        }
        return inv
    }

    @Test func theStoreComesFromTheFlagThenTheEnvironmentThenTheStateDirectory() throws {
        let env = ["ROLLOUT_STORE": "/env/s.db", "XDG_STATE_HOME": "/xdg", "HOME": "/home/a"]
        #expect(StoreLocation.path(Self.invocation(["--store": "/flag/s.db"], env: env)) == "/flag/s.db")
        #expect(StoreLocation.path(Self.invocation(env: env)) == "/env/s.db")
        #expect(StoreLocation.path(Self.invocation(env: ["XDG_STATE_HOME": "/xdg", "HOME": "/home/a"])) == "/xdg/rollout/rollout.db")
        // A relative XDG_STATE_HOME is ignored, as the XDG specification says.
        #expect(
            StoreLocation.path(Self.invocation(env: ["XDG_STATE_HOME": "rel", "HOME": "/home/a"]))
                == "/home/a/.local/state/rollout/rollout.db")
        #expect(StoreLocation.path(Self.invocation(env: ["ROLLOUT_STORE": "", "HOME": "/h"])) == "/h/.local/state/rollout/rollout.db")
        #expect(throws: CommandError.self) { try StoreLocation.resolvedPath(Self.invocation(["--store": ""])) }
    }

    @Test func theOperatorComesFromTheFlagThenTheEnvironmentThenTheUser() {
        #expect(StoreLocation.operatorID(Self.invocation(["--operator": "alice"], env: ["ROLLOUT_OPERATOR": "bob"])) == "alice")
        #expect(StoreLocation.operatorID(Self.invocation(env: ["ROLLOUT_OPERATOR": "bob"])) == "bob")
        #expect(StoreLocation.operatorID(Self.invocation(env: ["USER": "carol"])).hasPrefix("carol@"))
    }
}

/// `Wiring.session`, the one place that picks a backend, on store files: it never creates anything, names what is
/// missing, carries `--read-only` into every write, and refuses what a store file cannot do with a typed refusal.
struct SessionWiringTests {
    @Test func aMissingStoreIsNamedAndNothingIsCreated() throws {
        let dir = try TestSupport.temporaryDirectory("wiring")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("nope.db").path
        #expect {
            try Wiring.session(StoreLocationTests.invocation(["--store": path]))
        } throws: { error in
            "\(error)".contains(path)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    @Test func aStoreFileSessionCarriesItsAccessAndRefusesEnforcement() throws {
        let dir = try TestSupport.temporaryDirectory("wiring")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-wiring", operatorID: "alice@test")

        let session = try Wiring.session(StoreLocationTests.invocation(["--store": path, "--operator": "alice"]))
        #expect(session.label == path)
        #expect(session.operatorID == "alice")
        #expect(!session.readOnly)
        #expect(try session.templates.current().info.number == 1)
        #expect {
            try session.enforcement()
        } throws: { error in
            (error as? SessionRefusal)?.kind == .unsupported
        }

        let reader = try Wiring.session(
            StoreLocationTests.invocation(["--store": path], flags: ["--read-only"]))
        #expect(reader.readOnly)
        let request = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 5))), actor: "alice", reason: "r", origin: "ROLLOUT_TEST")
        #expect {
            try reader.writePath().execute(request)
        } throws: { error in
            if case .readOnly = WriteRefusal(error as! WritePath.Failure) { return true }
            return false
        }
        #expect(try session.templates.current().info.number == 1)
        // The writer's session publishes through the same path.
        guard case .published = try session.writePath().execute(request) else {
            Issue.record("the writer's set did not publish"); return
        }
        #expect(try reader.templates.current().info.number == 2)
    }

    @Test func createRefusesAStoreThatHasAVersion() throws {
        let dir = try TestSupport.temporaryDirectory("wiring")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("s.db").path
        _ = try Wiring.createStore(path: path, seed: "rollout-wiring", operatorID: "alice@test")
        #expect(throws: (any Error).self) {
            try Wiring.createStore(path: path, seed: "rollout-other", operatorID: "alice@test")
        }
        let session = try Wiring.session(StoreLocationTests.invocation(["--store": path]))
        #expect(try session.templates.current().info.number == 1)
    }
}
