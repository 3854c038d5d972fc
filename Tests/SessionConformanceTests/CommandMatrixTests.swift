import Foundation
import Testing
import TestSupport

/// Every command of the built binary on every backend: the command list is read from `rollout --help` and each
/// group's `--help`, and each command runs on a store of each backend (made by `rollout init`), either working or
/// ending with its documented error. Then every write again with `--read-only` on every backend, and every command
/// as the PostgreSQL viewer role of docs/POSTGRES.md: reads work, writes exit 4.
///
/// Commands that never end run bounded: `watch` and `plan run` with `--looks 1`; `serve` until it says it serves
/// (at most 30 s), then SIGTERM, which it answers by finishing what is in flight and exiting 0. Commands that need
/// a terminal (`console`, `demo`) are checked on their refusal paths only: without a terminal `console` exits 1
/// naming it, and `demo` refuses a store that is not a drill store file before it looks for one.
struct CommandMatrixTests {
    /// How a command is expected to end.
    enum Outcome: Equatable, CustomStringConvertible {
        /// Exit 0.
        case works
        /// `watch`: the exit code is the verdict (0 OK, 5 WATCH, 6 HOLD, 7 HALT).
        case verdict
        /// Exit 4, the typed refusal, saying this (its output holds the phrase).
        case refused(String)
        /// Another documented exit code (1 failure, 2 usage), saying this.
        case fails(Int32, String)

        var description: String {
            switch self {
            case .works: "works (0)"
            case .verdict: "verdict (0/5/6/7)"
            case .refused(let says): "refused (4): \(says)"
            case .fails(let code, let says): "fails (\(code)): \(says)"
            }
        }

        /// Whether a run ended so: its exit code, and for a refusal or failure the phrase in its output.
        func accepts(_ r: Ran) -> Bool {
            switch self {
            case .works: r.status == 0
            case .verdict: [0, 5, 6, 7].contains(r.status)
            case .refused(let says): r.status == 4 && (r.stderr + r.stdout).contains(says)
            case .fails(let code, let says): r.status == code && (r.stderr + r.stdout).contains(says)
            }
        }
    }

    /// What a command does to the store: the `--read-only` and viewer sweeps expect exit 4 of every `write`, and
    /// the viewer's reads to end as the owner's do; `none`: the command does not use the store.
    enum Access { case read, write, none }

    /// One row of the matrix: a command (its words after `rollout`), its arguments on a store, and its outcome on
    /// each backend. The rows run in this order on one store per backend (a plan is started before it is paused).
    struct Row: Sendable {
        var command: String
        var access: Access
        var arguments: @Sendable (Fixture) throws -> [String] = { _ in [] }
        var expected: @Sendable (Backend) -> Outcome = { _ in .works }
        /// Run until stdout holds this text, then SIGTERM (a command that never ends by itself).
        var readiness: String? = nil
        /// The outcome of a read as the viewer role, where it differs from `expected`.
        var asViewer: Outcome? = nil
        /// Why the viewer's outcome is not yet what docs/POSTGRES.md says (a known issue, reported).
        var viewerIssue: String? = nil
        /// The outcome of a write under `--read-only` on a backend, where it is not the refusal (exit 4).
        var readOnly: @Sendable (Backend) -> Outcome? = { _ in nil }
        /// What the owner runs before this row in the access sweeps, so that the write refused would change
        /// something (on PostgreSQL a write that changes nothing is refused too, elsewhere it ends 0).
        var sweepBefore: (@Sendable (Fixture) -> [String])? = nil

        init(
            _ command: String, _ access: Access,
            _ arguments: @escaping @Sendable (Fixture) throws -> [String] = { _ in [] }
        ) {
            self.command = command
            self.access = access
            self.arguments = arguments
        }

        func expecting(_ outcome: @escaping @Sendable (Backend) -> Outcome) -> Row {
            var row = self
            row.expected = outcome
            return row
        }

        func until(_ text: String) -> Row {
            var row = self
            row.readiness = text
            return row
        }

        func asViewer(_ outcome: Outcome?, issue: String? = nil) -> Row {
            var row = self
            row.asViewer = outcome
            row.viewerIssue = issue
            return row
        }

        func readOnly(_ outcome: @escaping @Sendable (Backend) -> Outcome?) -> Row {
            var row = self
            row.readOnly = outcome
            return row
        }

        func sweepBefore(_ arguments: @escaping @Sendable (Fixture) -> [String]) -> Row {
            var row = self
            row.sweepBefore = arguments
            return row
        }
    }

    static let appID = "1:123456789012:ios:0123456789abcdef"
    /// A simulation writes only into a drill store file, never into a team store or a Firebase project.
    static let fileOnly = "drill store file"
    /// `store migrate` is for PostgreSQL stores; a file store migrates when it is opened.
    static let migratesWhenOpened = "store migrate is for PostgreSQL stores"

    /// The matrix. Every command works on every backend except (expected outcome, and why):
    ///
    /// | command        | file                      | postgresql          | firebase+file       | firebase+postgresql |
    /// |----------------|---------------------------|---------------------|---------------------|---------------------|
    /// | simulate       | works (--on-ordinary-store) | refused 4: drill store files only | refused 4 | refused 4 |
    /// | demo           | refused 4: not a drill store | refused 4: drill store files only | refused 4 | refused 4 |
    /// | console        | fails 1: needs a terminal  | fails 1             | fails 1             | fails 1             |
    /// | store migrate  | fails 2: file migrates when opened | works       | fails 2             | works (the state)   |
    /// | token verify   | fails 1: a forged token is rejected | fails 1    | fails 1             | fails 1             |
    /// | init (again)   | fails 1: init only creates (Firebase: adopts once) | fails 1 | fails 1 | fails 1      |
    /// | watch, follow  | a verdict: 0, 5, 6 or 7 (one look) | same       | same                | same                |
    /// | source test    | fails 1: no source named (none added) | fails 1 | fails 1             | fails 1             |
    ///
    /// As the viewer role: `audit verify` fails 1 (the seal cannot be checked as a role that may not read the
    /// sealed secrets, docs/POSTGRES.md), `token verify` is refused 4 (the key material is not the viewer's), and
    /// `appcheck keys list` and `appcheck debug-token list` are refused 4 although documented (a known issue).
    static let rows: [Row] = [
        Row("status", .read, { _ in ["--json"] }),
        Row("set", .write, { _ in ["5", "--reason", "matrix"] }),
        Row("nudge", .write, { _ in ["+1", "--reason", "matrix"] }),
        Row("kill", .write, { _ in ["--reason", "matrix"] }),
        Row("resume", .write, { _ in ["--reason", "matrix"] }).sweepBefore { _ in ["kill", "--reason", "sweep"] },
        Row("history", .read),
        Row("diff", .read, { f in [String(f.firstVersion), String(f.firstVersion + 1)] }),
        Row("rollback", .write, { f in [String(f.firstVersion + 1), "--reason", "matrix"] }),
        Row("config export", .read, { f in ["--output", f.exported] }),
        Row("config import", .write, { f in [f.exported, "--reason", "matrix"] })
            .sweepBefore { f in ["config", "export", "--version", "1", "--output", f.exported] },
        Row("audit show", .read),
        Row("audit verify", .read)
            .asViewer(.fails(1, "the seal cannot be checked as this role")),
        Row("ingest", .write, { f in [f.events, "--quiet"] }),
        Row("telemetry", .read),
        Row("watch", .read, { _ in ["--looks", "1", "--interval", "0.01"] }).expecting { _ in .verdict },
        // Telemetry sources, configured in the store on every backend.
        Row("source add", .write, { _ in ["bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1"] }),
        Row("source list", .read),
        Row("source test", .read, { _ in ["nosuch"] }).expecting { _ in .fails(1, "no source named nosuch") },
        Row("source remove", .write, { _ in ["bq"] })
            .sweepBefore { _ in ["source", "add", "bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1"] },
        // With no source configured, follow is watch: one look, the verdict as exit code.
        Row("follow", .read, { _ in ["--looks", "1", "--interval", "0.01"] }).expecting { _ in .verdict },
        Row("operator enroll", .write, { _ in ["--qr", "none"] }),
        Row("operator list", .read),
        Row("operator remove", .write, { _ in ["ana@test"] }),
        Row("policy show", .read),
        Row("policy set", .write, { _ in ["guardrails.auto-kill", "on"] }),
        // No two-person request was made: the request is looked up (after the read-only and access refusals) and
        // not found.
        Row("approve", .write, { _ in ["0011223344556677"] })
            .expecting { _ in .fails(1, "no two-person request") },
        Row(
            "appcheck app add", .write,
            { _ in
                [
                    appID, "--project-number", "123456789012", "--project-id", "demo-rollout", "--team", "8YE23NZS57",
                    "--bundle", "com.example.app",
                ]
            }),
        Row("appcheck app list", .read),
        Row("appcheck debug-token add", .write, { _ in ["--app", appID, "--name", "ci"] }),
        Row("appcheck debug-token list", .read),
        Row("appcheck debug-token remove", .write, { _ in ["--app", appID, "--name", "ci"] }),
        Row("appcheck keys rotate", .write),
        Row("appcheck keys list", .read),
        Row("token verify", .read, { _ in ["eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"] })
            .expecting { _ in .fails(1, "rejected: ") }
            .asViewer(.refused("permission denied for table appcheck_signing_keys")),
        Row("serve", .write, { _ in ["--listen", "127.0.0.1:0"] }).until("serving App Check"),
        Row("plan start", .write, { f in [f.plan] }),
        Row("plan status", .read),
        Row("plan pause", .write),
        Row("plan resume", .write).sweepBefore { _ in ["plan", "pause"] },
        Row("plan run", .write, { _ in ["--looks", "1", "--interval", "0.01", "--quiet"] })
            .sweepBefore { _ in ["plan", "resume"] },
        Row("plan abort", .write),
        Row("store migrate", .write)
            .expecting { $0.isPostgres ? .works : .fails(2, migratesWhenOpened) }
            .readOnly { $0.isPostgres ? nil : .fails(2, migratesWhenOpened) },
        Row("store copy", .none, { f in ["--from", f.copySource, "--to", try f.emptyDatabase(), "--quiet"] }),
        Row("evaluate", .none, { f in ["--template", f.exported, "--ids-file", f.ids] }),
        Row("attest verify", .none, { _ in try attestationVector() }),
        Row("console", .read).expecting { _ in .fails(1, "needs an interactive terminal") },
        Row("demo", .write).expecting { $0 == .file ? .refused("is not a drill store") : .refused(fileOnly) },
        Row(
            "simulate", .write,
            { f in
                ["--scenario", "steady", "--devices", "10", "--duration", "2m", "--speed", "max", "--quiet"]
                    + (f.backend == .file ? ["--on-ordinary-store"] : [])
            }
        ).expecting { $0 == .file ? .works : .refused(fileOnly) },
        // App Check enforcement is a Firebase project's: the other stores refuse it (4). The viewer's change is
        // refused before anything is sent (the requested record cannot be written).
        Row("enforcement show", .read).expecting { $0.isFirebase ? .works : .refused("--store firebase:PROJECT") },
        Row("enforcement set", .write, { _ in ["firestore.googleapis.com", "unenforced", "--reason", "matrix"] })
            .expecting { $0.isFirebase ? .works : .refused("--store firebase:PROJECT") }
            .sweepBefore { f in
                f.backend.isFirebase ? ["enforcement", "set", "firestore.googleapis.com", "off", "--reason", "sweep"] : []
            },
        Row("appcheck app remove", .write, { _ in [appID] }),
        Row("init", .write, { _ in ["--seed", "again"] })
            .expecting { _ in .fails(1, "init only") },
    ]

    /// The files and stores a backend's rows use.
    final class Fixture: @unchecked Sendable {
        let store: StoreUnderTest
        var backend: Backend { store.backend }
        var directory: URL { store.directory }
        /// The version `init` made: 1, on Firebase 2 (the adoption's publish after the project's own version 1). The
        /// next one is the matrix's `set 5`, which `rollback` brings back, so every backend watches the same rollout.
        var firstVersion: Int { backend.isFirebase ? 2 : 1 }
        let plan: String
        let events: String
        let exported: String
        let ids: String
        /// An SQLite store file for `store copy --from`.
        let copySource: String

        init(_ backend: Backend) throws {
            store = try StoreUnderTest(backend, seed: "matrix", inProcess: false)
            let dir = store.directory
            plan = dir.appendingPathComponent("ramp.plan").path
            try "name ramp\nstep 5% hold 1h\nstep 10%\n".write(toFile: plan, atomically: true, encoding: .utf8)
            let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
            events = dir.appendingPathComponent("events.ndjson").path
            try
                ((0..<10).map {
                    #"{"t":\#(now - Int64($0) * 1_000_000),"i":"v-\#($0)","k":"session","c":"\#($0 % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
                }.joined(separator: "\n") + "\n").write(toFile: events, atomically: true, encoding: .utf8)
            exported = dir.appendingPathComponent("template.json").path
            ids = dir.appendingPathComponent("ids.txt").path
            try "a\nb\nc\n".write(toFile: ids, atomically: true, encoding: .utf8)
            if backend == .file {
                copySource = store.store
            } else {
                copySource = dir.appendingPathComponent("source.db").path
                let made = try TestSupport.run(
                    try TestSupport.rolloutBinary(), ["init", "--seed", "copy", "--store", copySource],
                    environment: store.environment())
                guard made.status == 0 else { throw TestSupport.Failure("init of the copy source: \(made.stderr)") }
            }
        }

        /// A fresh, empty PostgreSQL database (`store copy --to`).
        func emptyDatabase() throws -> String {
            let server = try PostgresServer.get()
            return server.uris(of: try server.freshDatabase()).socket
        }
    }

    /// `attest verify` of Apple's own sample attestation (the shared vectors), as of its leaf's validity.
    static func attestationVector() throws -> [String] {
        let url = try TestSupport.vector("appattest/apple-guide-2024.json")
        guard let v = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any],
            let hash = v["client_data_hash_or_challenge"] as? [String: Any]
        else { throw TestSupport.Failure("the vector does not parse") }
        return [
            "--attestation", v["attestation_b64"] as! String, "--key-id", v["key_id_b64"] as! String, "--team",
            v["team_id"] as! String, "--bundle", v["bundle_id"] as! String, "--env", v["environment"] as! String,
            "--at", v["verify_at_time"] as! String, "--client-data-hash", hash["value_b64"] as! String,
        ]
    }

    // MARK: The command list

    /// The command names of a help text's COMMANDS section.
    static func commands(inHelp text: String) -> [String] {
        guard let section = text.components(separatedBy: "\nCOMMANDS:\n").dropFirst().first else { return [] }
        var names: [String] = []
        for line in section.components(separatedBy: "\n") {
            if line.isEmpty { break }
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { continue }
            if let name = line.dropFirst(2).split(separator: " ").first { names.append(String(name)) }
        }
        return names
    }

    /// Every command the binary lists, its groups expanded to their subcommands (`appcheck app add`).
    static func listedCommands() throws -> [String] {
        let binary = try TestSupport.rolloutBinary()
        func leaves(_ path: [String]) throws -> [String] {
            let help = try TestSupport.run(binary, path + ["--help"])
            guard help.status == 0 else { throw TestSupport.Failure("\(path) --help: \(help.status) \(help.stderr)") }
            let subcommands = commands(inHelp: help.stdout)
            if subcommands.isEmpty { return [path.joined(separator: " ")] }
            return try subcommands.flatMap { try leaves(path + [$0]) }
        }
        return try commands(inHelp: try TestSupport.run(binary, ["--help"]).stdout).flatMap { try leaves([$0]) }
    }

    @Test func theMatrixHasARowForEveryListedCommand() throws {
        let listed = try Self.listedCommands()
        #expect(listed.count > 40, "\(listed)")
        #expect(
            Set(listed) == Set(Self.rows.map(\.command)),
            "listed, no row: \(Set(listed).subtracting(Self.rows.map(\.command))); row, not listed: \(Set(Self.rows.map(\.command)).subtracting(listed))"
        )
        #expect(Self.rows.count == Set(Self.rows.map(\.command)).count, "a command has two rows")
    }

    // MARK: Running

    struct Ran {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static func run(_ row: Row, on fixture: Fixture, extra: [String] = [], role: String? = nil) throws -> Ran {
        let arguments = row.command.split(separator: " ").map(String.init) + (try row.arguments(fixture)) + extra
        if let readiness = row.readiness { return try runUntil(readiness, arguments, on: fixture, role: role) }
        let r = try fixture.store.rollout(arguments, role: role)
        return Ran(status: r.status, stdout: r.stdout, stderr: r.stderr)
    }

    /// Runs a command that never ends until its stdout holds `readiness` (at most 30 s), then stops it with SIGTERM.
    static func runUntil(_ readiness: String, _ arguments: [String], on fixture: Fixture, role: String?) throws -> Ran {
        let out = fixture.directory.appendingPathComponent("bounded.out")
        let err = fixture.directory.appendingPathComponent("bounded.err")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try TestSupport.rolloutBinary())
        process.arguments = arguments + fixture.store.storeArguments(role: role)
        var env = ProcessInfo.processInfo.environment
        for (k, v) in fixture.store.environment() { env[k] = v }
        env["ROLLOUT_STORE"] = nil
        process.environment = env
        process.currentDirectoryURL = fixture.directory
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        let deadline = Date().addingTimeInterval(30)
        func text(_ url: URL) -> String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }
        while process.isRunning, !text(out).contains(readiness), Date() < deadline { usleep(20_000) }
        let ready = text(out).contains(readiness)
        TestSupport.stop(process, grace: 10)
        // Not ready in time: the run fails however it ended.
        return Ran(status: ready ? process.terminationStatus : -1, stdout: text(out), stderr: text(err))
    }

    static func firstLine(_ r: Ran) -> String {
        (r.stderr.split(separator: "\n").first.map(String.init) ?? "").prefix(200).description
    }

    /// Every command on a store of `backend`, in the order of the rows.
    @Test(arguments: Backend.allCases)
    func everyCommandOnEveryBackend(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        var table: [String] = []
        for row in Self.rows {
            let expected = row.expected(backend)
            let r = try Self.run(row, on: fixture)
            table.append("\(backend) | \(row.command) | \(r.status) | \(expected)")
            #expect(
                expected.accepts(r),
                "\(backend) \(row.command): exit \(r.status), expected \(expected): \(Self.firstLine(r))")
        }
        print(table.joined(separator: "\n"))
    }

    /// Every write with `--read-only` exits 4 on every backend, and the store is as it was (`audit verify`'s head).
    @Test(arguments: Backend.allCases)
    func everyWriteIsRefusedReadOnly(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        try Self.prepareForWrites(fixture)
        var before = try fixture.store.rollout(["audit", "verify", "--json"])
        try #require(before.status == 0, "\(before.stderr)")
        for row in Self.rows where row.access == .write && row.readiness == nil {
            if try Self.runBefore(row, on: fixture) {
                before = try fixture.store.rollout(["audit", "verify", "--json"])
            }
            let r = try Self.run(row, on: fixture, extra: ["--read-only"])
            let expected = row.readOnly(backend) ?? .refused("refused")
            #expect(
                expected.accepts(r),
                "\(backend) \(row.command) --read-only: exit \(r.status), expected \(expected): \(Self.firstLine(r))")
            let after = try fixture.store.rollout(["audit", "verify", "--json"])
            #expect(after.stdout == before.stdout, "\(backend) \(row.command) --read-only wrote")
        }
    }

    /// The PostgreSQL viewer role (docs/POSTGRES.md) runs every read command, and every write is refused with
    /// exit 4, on the team store and as the state store of Firebase.
    @Test(arguments: [Backend.postgresql, .firebasePostgres])
    func theViewerRoleReadsAndIsRefusedEveryWrite(_ backend: Backend) throws {
        let fixture = try Fixture(backend)
        try fixture.store.applyDocumentedGrants()
        try Self.prepareForWrites(fixture)
        var before = try fixture.store.rollout(["audit", "verify", "--json"])
        try #require(before.status == 0, "\(before.stderr)")
        for row in Self.rows where row.access != .none && row.readiness == nil {
            if try Self.runBefore(row, on: fixture) {
                before = try fixture.store.rollout(["audit", "verify", "--json"])
            }
            let r = try Self.run(row, on: fixture, role: "rollout_viewer")
            if row.access == .read {
                let expected = row.asViewer ?? row.expected(backend)
                let check = {
                    #expect(
                        expected.accepts(r),
                        "viewer \(backend) \(row.command): exit \(r.status), expected \(expected): \(Self.firstLine(r))"
                    )
                }
                if let issue = row.viewerIssue { withKnownIssue(Comment(rawValue: issue)) { check() } } else { check() }
            } else {
                let expected = row.readOnly(backend) ?? .refused("refused")
                #expect(
                    expected.accepts(r),
                    "viewer \(backend) \(row.command): exit \(r.status), expected \(expected): \(Self.firstLine(r))")
            }
            let after = try fixture.store.rollout(["audit", "verify", "--json"])
            #expect(after.stdout == before.stdout, "\(backend): the viewer's \(row.command) wrote")
        }
    }

    /// Runs the row's `sweepBefore` as the owner; whether there was one.
    static func runBefore(_ row: Row, on fixture: Fixture) throws -> Bool {
        guard let arguments = row.sweepBefore?(fixture), !arguments.isEmpty else { return false }
        let r = try fixture.store.rollout(arguments)
        guard r.status == 0 else {
            throw TestSupport.Failure("before \(row.command): \(arguments): \(r.status) \(r.stderr)")
        }
        return true
    }

    /// What the writes of the sweeps act on, so that each would work without its access refusal: a version to
    /// roll back to, a killed rollout to resume, an exported template, a running plan, an app and a pending
    /// enrolment.
    static func prepareForWrites(_ fixture: Fixture) throws {
        for arguments in [
            ["set", "3", "--reason", "matrix"], ["config", "export", "--output", fixture.exported],
            ["plan", "start", fixture.plan],
            rows.first { $0.command == "appcheck app add" }!.command.split(separator: " ").map(String.init)
                + (try rows.first { $0.command == "appcheck app add" }!.arguments(fixture)),
            ["operator", "enroll", "--qr", "none"],
        ] {
            let r = try fixture.store.rollout(arguments)
            guard r.status == 0 else { throw TestSupport.Failure("\(arguments): \(r.status) \(r.stderr)") }
        }
    }
}
