import CommandLineKit
import FirebaseFake
import Foundation
import PostgresStore
import Rollout
import RolloutApp
import TestSupport

/// The four backends a `RolloutSession` is opened on, as `Wiring.session(_:)` picks them from the invocation.
enum Backend: String, CaseIterable, CustomStringConvertible, Sendable {
    /// `--store PATH`: an SQLite store file.
    case file
    /// `--store postgresql://...`: the PostgreSQL team store.
    case postgresql
    /// `--store firebase:PROJECT --state PATH`: Firebase Remote Config, the state in a file.
    case firebaseFile = "firebase+file"
    /// `--store firebase:PROJECT --state postgresql://...`: Firebase Remote Config, the state on PostgreSQL.
    case firebasePostgres = "firebase+postgresql"

    var description: String { rawValue }

    var isFirebase: Bool { self == .firebaseFile || self == .firebasePostgres }
    var isPostgres: Bool { self == .postgresql || self == .firebasePostgres }
}

/// One fresh store of a backend, created the way `rollout init` creates it (`Wiring.createStore`), and the
/// invocations that open it through the one opener (`Wiring.session`) or run the built binary on it.
///
/// One PostgreSQL server serves the whole process (`PostgresServer.get()`, a fresh database per store); each
/// Firebase store has its own strict fake (a Python process), whose state lives in the store's directory or in a
/// fresh database.
final class StoreUnderTest: @unchecked Sendable {
    let backend: Backend
    let directory: URL
    let fake: FakeFirebase?
    /// The PostgreSQL database (libpq keyword/value form) of `postgresql` and `firebase+postgresql`.
    let conninfo: String?
    /// `--store` and `--state` as the CLI gets them.
    let store: String
    let state: String?
    /// The team store key (`ROLLOUT_STORE_KEY` of the binary's and the in-process invocations' environment).
    let key: String
    let operatorID = "ana@test"

    init(_ backend: Backend, seed: String = "conformance", inProcess: Bool = true) throws {
        self.backend = backend
        directory = try TestSupport.temporaryDirectory("session-\(backend.rawValue)")
        key = directory.appendingPathComponent("team.key").path
        switch backend {
        case .file:
            fake = nil
            conninfo = nil
            store = directory.appendingPathComponent("rollout.db").path
            state = nil
        case .postgresql:
            fake = nil
            let server = try PostgresServer.get()
            let info = try server.freshDatabase()
            conninfo = info
            store = server.uris(of: info).socket
            state = nil
        case .firebaseFile:
            let f = try FakeFirebase(template: existingTemplate)
            fake = f
            conninfo = nil
            store = "firebase:\(f.project)"
            state = f.statePath
        case .firebasePostgres:
            let f = try FakeFirebase(template: existingTemplate)
            fake = f
            let server = try PostgresServer.get()
            let info = try server.freshDatabase()
            conninfo = info
            store = "firebase:\(f.project)"
            state = server.uris(of: info).socket
            f.stateLocation = state!
        }
        if inProcess {
            _ = try Wiring.createStore(try invocation("init"), seed: seed, form: .client)
        } else {
            let r = try rollout(["init", "--seed", seed])
            guard r.status == 0 else {
                throw TestSupport.Failure("init on \(backend) failed (\(r.status)): \(r.stderr)")
            }
        }
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// The environment of the binary and of in-process invocations: the fake's endpoint and credentials.
    func environment(operator id: String? = nil) -> [String: String] {
        var env =
            fake?.environment(operator: id ?? operatorID) ?? [
                "ROLLOUT_OPERATOR": id ?? operatorID, "NO_COLOR": "1", "HOME": directory.path,
                "XDG_STATE_HOME": directory.appendingPathComponent("xdg").path,
            ]
        env["ROLLOUT_STORE_KEY"] = key
        env["ROLLOUT_STORE"] = nil
        return env
    }

    /// The store's location with the PostgreSQL role swapped (`rollout_viewer`), for the state or the store.
    func asRole(_ role: String, _ location: String) -> String {
        location.replacingOccurrences(of: "user=rollout", with: "user=\(role)")
    }

    /// An invocation of `command` (its path after `rollout`) on this store, as the parser would make it.
    func invocation(_ command: String, readOnly: Bool = false, role: String? = nil) throws -> Invocation {
        let root = Command(
            "rollout", summary: "",
            options: [
                .value("--store", name: "PATH", help: ""), .value("--operator", name: "ID", help: ""),
                .flag("--read-only", help: ""),
            ] + FirebaseWiring.options,
            subcommands: [Command(command, summary: "", action: { _ in .ok })])
        let arguments = [command] + storeArguments(role: role) + (readOnly ? ["--read-only"] : [])
        guard case .run(_, let invocation) = try root.parse(arguments, environment: environment()) else {
            throw TestSupport.Failure("\(arguments) did not parse as a command")
        }
        return invocation
    }

    /// A session through the one opener.
    func open(readOnly: Bool = false, role: String? = nil) throws -> RolloutSession {
        try Wiring.session(try invocation("status", readOnly: readOnly, role: role))
    }

    /// The CLI arguments naming this store (and its state), as `role` where the backend has PostgreSQL.
    func storeArguments(role: String? = nil) -> [String] {
        var storeArg = store
        var stateArg = state
        if let role {
            if backend == .postgresql { storeArg = asRole(role, store) }
            if backend == .firebasePostgres { stateArg = state.map { asRole(role, $0) } }
        }
        return ["--store", storeArg] + (stateArg.map { ["--state", $0] } ?? [])
    }

    /// Runs the built binary on this store.
    func rollout(
        _ arguments: [String], role: String? = nil, operator id: String? = nil, stdin: String? = nil
    ) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + storeArguments(role: role), stdin: stdin,
            environment: environment(operator: id), currentDirectory: directory)
    }

    /// The documented roles of docs/POSTGRES.md (`rollout_viewer`, `rollout_writer`) on this store's database.
    func applyDocumentedGrants() throws {
        guard let conninfo else { return }
        let admin = try PGConnection(conninfo)
        for statement in try TestSupport.documentedRoleStatements() {
            let result = Result { () throws(PostgresError) -> Void in try admin.execute(statement) }
            if case .failure(let e) = result, !TestSupport.roleExistsAlready(statement, sqlState: e.sqlState) { throw e }
        }
    }
}

/// How an operation ended when it did not succeed: an access refusal (`--read-only`, a role the store does not let
/// write: the CLI's exit 4) with its kind, or nil for any other error.
func accessRefusal(_ error: any Error) -> SessionRefusal.Kind? {
    if case WritePath.Failure.readOnly = error { return .readOnly }
    if let refusal = error as? WriteRefusal, case .readOnly = refusal { return .readOnly }
    return SessionRefusal(error)?.kind
}
