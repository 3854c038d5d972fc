import CommandLineKit
import Console
import FoundationEssentials
import Glibc
import Platform
import JSON
import PostgresStore
import RemoteConfig
import Rollout
import RolloutApp
import SQLiteStore
import StoreCopy
import Terminal

/// The commands' route to a PostgreSQL store (`--store postgresql://...`): the same commands, printing the same
/// way, on a `PostgresConfigStore` and the monitor's ports on it.
enum PostgresCommands {
    static let all: [Command] = [store]

    static let store = Command(
        "store", summary: "Manage a PostgreSQL team store.", subcommands: [migrate, copy])

    static let migrate = Command(
        "migrate",
        summary: "Apply the missing schema migrations to a PostgreSQL store (forward only; a newer schema is refused).",
        discussion:
            "Other commands never migrate: they refuse a store whose schema is older (asking for this command) or newer "
            + "than this program's. Each step and its row in rollout_schema commit together.",
        examples: ["rollout store migrate --store postgresql:///rollout?host=/run/postgresql"],
        action: StoreCommands.guarded { inv in
            // A Firebase project's PostgreSQL state store (--state postgresql://...) migrates the same way.
            let location = try FirebaseWiring.postgresState(inv) ?? StoreLocation.resolvedPath(inv)
            guard StoreLocation.isPostgres(location) else {
                throw CommandError("store migrate is for PostgreSQL stores (--store postgresql://...); a file store migrates when opened", exit: .usage)
            }
            guard !inv.flag("--read-only") else { throw WritePath.Failure.readOnly }
            let applied = try PostgresSchema.migrate(conninfo: location)
            print(
                applied.isEmpty
                    ? "schema \(PostgresSchema.current) is current: nothing to migrate"
                    : "migrated to schema \(PostgresSchema.current) (applied \(applied.map(String.init).joined(separator: ", ")))")
            return .ok
        })

    static let copy = Command(
        "copy",
        summary: "Copy an SQLite store into an empty PostgreSQL database (all or nothing).",
        discussion:
            "The source must pass 'audit verify'. Versions and the audit chain are copied exactly (same numbers, etags and "
            + "hashes), with the guardrail settings, the step-up policy, operators and pending enrolments (secrets sealed "
            + "again with the team store key, ROLLOUT_STORE_KEY or ~/.config/rollout/team-store.key, created when "
            + "missing), the telemetry and the App Check exchange state (its private keys sealed with the same key). The "
            + "copy is checked like 'audit verify' before it commits; a target that holds a store already is refused. "
            + "The ramp plan and its pre-approval are copied as they are. On a terminal, progress is shown on stderr.",
        options: [
            .value("--from", name: "FILE", help: "The SQLite store file to copy."),
            .value("--to", name: "URI", help: "The PostgreSQL database (postgresql://...)."),
            .flag("--quiet", help: "No progress line on the terminal."),
        ],
        examples: ["rollout store copy --from ~/.rollout/rollout.db --to postgresql:///rollout?host=/run/postgresql"],
        action: StoreCommands.guarded { inv in
            guard let from = inv.value("--from"), !from.isEmpty else { throw inv.usageError("store copy needs --from FILE") }
            guard let to = inv.value("--to"), StoreLocation.isPostgres(to) else {
                throw inv.usageError("store copy needs --to postgresql://...")
            }
            guard !inv.flag("--read-only") else { throw WritePath.Failure.readOnly }
            let source = try RolloutStore(path: from, create: false, access: .readOnly)
            var createdKey: String?
            let progress = ProgressReporter.standardError(label: "store copy", unit: .count("rows"), quiet: inv.flag("--quiet"))
            let report: PostgresStoreCopy.Report
            do {
                defer { progress.finish() }
                report = try PostgresStoreCopy.copy(
                    from: source, to: to,
                    teamKey: {
                        let (key, created) = try Wiring.teamStoreKey(create: true)
                        if created { createdKey = key?.path }
                        return key
                    },
                    progress: { done, total in
                        progress.total = total
                        progress.update(done: done)
                    })
            }
            print("copied \(from) to \(PostgresConfigStore.redacted(to))")
            print("\(report.versions) versions, \(report.auditRecords) audit records, head \(report.headHash)")
            print(
                "\(report.operators) operators, \(report.pendingEnrolments) pending enrolments, \(report.settings) guardrail settings, "
                    + "\(report.telemetryBatches) telemetry batches (\(report.installations) installations, \(report.counterRows) counter rows)")
            if !report.appCheck.isEmpty {
                print("App Check state: " + report.appCheck.map { "\($0.rows) \($0.table.dropFirst("appcheck_".count))" }.joined(separator: ", "))
            }
            if let createdKey { print("created the team store key \(createdKey): give it to every operator (mode 0600)") }
            if let plan = report.plan { print("ramp plan: '\(plan)'") }
            if !report.skipped.isEmpty { print("not copied (not on PostgreSQL yet): \(report.skipped.joined(separator: ", "))") }
            return .ok
        })

    /// `init` on a PostgreSQL location; nil for a file store.
    static func initStore(_ inv: Invocation, seed: String, form: RemoteConfigTemplate.Form) throws -> ExitCode? {
        if let team = try FirebaseWiring.adoptWithTeamState(inv, seed: seed, form: form), let firebase = team.firebase {
            let current = try firebase.current()
            print("created store \(team.location)")
            print("version \(current.info.number) (etag \(current.etag)), \(form.rawValue) template, seed \(seed)")
            print(StoreCommands.rolloutLine(current.template))
            return .ok
        }
        let location = try StoreLocation.resolvedPath(inv)
        guard StoreLocation.isPostgres(location) else { return nil }
        let (team, createdKey) = try Wiring.createTeamStore(
            conninfo: location, seed: seed, form: form, operatorID: try Wiring.operatorID(inv))
        if let createdKey {
            StandardStream.error.write(
                "rollout: created the team store key \(createdKey): it seals the store; give it to every operator (mode 0600)\n")
        }
        let current = try team.config.current()
        print("created store \(team.location)")
        print("version 1 (etag \(current.etag)), \(form.rawValue) template, seed \(seed)")
        print(StoreCommands.rolloutLine(current.template))
        return .ok
    }

    /// The config store of the invocation, whichever backend.
    static func configStore(_ inv: Invocation) throws -> any ConfigStore {
        if let team = try Wiring.teamSession(inv) { return team.templates }
        return try Wiring.session(inv).config
    }

    /// The write path, acting operator and read-only flag of the invocation, whichever backend.
    static func writeTarget(_ inv: Invocation) throws -> (WritePath, String, Bool) {
        if let team = try Wiring.teamSession(inv) { return (try team.writePath(), team.operatorID, team.readOnly) }
        let session = try Wiring.session(inv)
        return (try session.writePath(), session.operatorID, session.readOnly)
    }

    /// `status` on PostgreSQL: the same assessment as on SQLite (`RolloutMonitor` on the store's ports).
    static func status(_ inv: Invocation, _ team: TeamSession) throws -> ExitCode {
        let health = try team.monitor().status()
        let current = health.current
        let rollout = Result { try RolloutPlan.locate(in: current.template) }
        let guardrail = GuardrailReport(health)
        let stepUp = try team.stepUp.isEnforced()
        if inv.flag("--json") {
            var out = JSONObject()
            out["store"] = .string(team.location)
            out["version"] = StoreCommands.versionJSON(current.info)
            switch rollout {
            case .success(let plan?): out["rollout"] = StoreCommands.planJSON(plan)
            case .success(nil): out["rollout"] = .null
            case .failure(let e): out["rolloutError"] = .string("\(e)")
            }
            out["startedAt"] = health.startedAt.map { .string($0.iso8601) } ?? .null
            out["guardrail"] = guardrail.json
            out["stepUp"] = ["enforced": .bool(stepUp)]
            out["assessment"] = AssessmentJSON.value(health)
            print(JSONValue.object(out).prettyText, terminator: "")
            return inv.flag("--check") ? AssessmentJSON.exitCode(health.assessment.verdict.level) : .ok
        }
        let info = current.info
        var rows: [(String, String)] = [
            ("store", team.location + " (PostgreSQL)"),
            ("version", "\(info.number) (etag \(info.etag))"),
            ("updated", "\(info.updateTime.iso8601) by \(StoreCommands.printable(info.updateUser)) (\(info.updateOrigin), \(info.updateType.rawValue))"),
        ]
        if !info.description.isEmpty { rows.append(("reason", StoreCommands.printable(info.description))) }
        rows.append(("", ""))
        switch rollout {
        case .success(let plan?):
            rows += [
                (plan.names.parameter, StoreCommands.describe(plan)),
                ("seed", StoreCommands.printable(plan.seed)),
            ]
        case .success(nil): rows.append(("rollout", "none: the template has no rollout of \(RolloutNames.standard.parameter)"))
        case .failure(let e): rows.append(("rollout", "cannot read it: \(e)"))
        }
        rows.append(("", ""))
        rows += guardrail.rows.map { ($0.0, StoreCommands.printable($0.1)) }
        rows.append(("step-up", stepUp ? "on: risky changes need a one-time code" : "off (no operator enrolled)"))
        StoreCommands.printRows(rows)
        return inv.flag("--check") ? AssessmentJSON.exitCode(health.assessment.verdict.level) : .ok
    }

    /// `console` on PostgreSQL: the same screen, its picture woken by NOTIFY (`PostgresConsoleSource`), its
    /// effects through the same executor and write path. No auto-kill from the console here yet.
    static func console(_ inv: Invocation, _ team: TeamSession) throws -> ExitCode {
        let themes = try ConsoleCommands.theme(inv)
        let source = try PostgresConsoleSource(team: team, conninfo: team.config.conninfo, project: team.firebase?.client.project ?? "team")
        let options = ConsoleOptions(
            themes: themes, noColor: inv.flag("--no-color"), environment: inv.environment, clock: team.clock,
            state: ConsoleState.Configuration(staleAfter: try source.status().settings.staleAfter, bell: !inv.flag("--no-bell")),
            terminal: ConsoleCommands.terminal(inv))
        do {
            switch try ConsoleApp.run(options: options, source: source, executor: StoreConsoleExecutor(session: team)) {
            case .quit: return .ok
            case .signal(let n): exit(128 + n)
            }
        } catch {
            throw CommandError(error.description)
        }
    }

    static func verify(_ inv: Invocation, _ team: TeamSession) throws -> ExitCode {
        let report: (auditRecords: Int, versions: Int, headHash: String)
        let seal: PostgresConfigStore.SealReport
        do {
            if let firebase = team.firebase {
                // The chain on the team store, and every published record naming the Firebase version it produced.
                let r = try firebase.verifyIntegrity()
                report = (r.auditRecords, r.versions, r.headHash)
            } else {
                let r = try team.config.verify()
                report = (r.auditRecords, r.versions, r.headHash)
            }
            // The seal of the tables that decide a write, under the team store key, and this machine's witness.
            do {
                seal = try team.config.verifySeal()
            } catch let e as PostgresError where e.sqlState == "42501" {
                throw CommandError(
                    "audit verify failed: the seal cannot be checked as this role, which may not read every sealed table "
                        + "(\(e.message)): run it as the writer or the owner role")
            }
        } catch let e as StoreError {
            throw CommandError("audit verify failed: \(e)")
        } catch let p as ConfigIntegrityProblem {
            throw CommandError("audit verify failed: \(p)")
        } catch let p as PostgresSealProblem {
            throw CommandError("audit verify failed: \(p)")
        }
        if inv.flag("--json") {
            let out: JSONValue = [
                "intact": true, "auditRecords": .number(JSONNumber(report.auditRecords)),
                "versions": .number(JSONNumber(report.versions)), "headHash": .string(report.headHash),
                "sealedTables": .array(seal.sealedTables.map { .string($0) }),
                "witness": ["path": .string(seal.witnessPath), "sequence": .number(JSONNumber(seal.headSequence))],
            ]
            print(out.prettyText, terminator: "")
        } else {
            print("audit log intact: \(report.auditRecords) records, \(report.versions) versions checked against their records")
            print("head: \(report.headHash)")
            print("sealed tables match the seal and the team store key: \(seal.sealedTables.joined(separator: ", "))")
            print("witness \(seal.witnessPath): record \(seal.headSequence) is in the chain, unchanged")
        }
        return .ok
    }
}
