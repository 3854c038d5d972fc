import CommandLineKit
import JSON
import PostgresStore
import RemoteConfig
import Rollout
import RolloutApp

/// The commands' route to a PostgreSQL store (`--store postgresql://...`): the same commands, printing the same
/// way, on a `PostgresConfigStore`. Telemetry, guardrails and step-up are not on PostgreSQL yet, so `status`
/// shows the version and the rollout only.
enum PostgresCommands {
    static let all: [Command] = [store]

    static let store = Command(
        "store", summary: "Manage a PostgreSQL team store.", subcommands: [migrate])

    static let migrate = Command(
        "migrate",
        summary: "Apply the missing schema migrations to a PostgreSQL store (forward only; a newer schema is refused).",
        discussion:
            "Other commands never migrate: they refuse a store whose schema is older (asking for this command) or newer "
            + "than this program's. Each step and its row in rollout_schema commit together.",
        examples: ["rollout store migrate --store postgresql:///rollout?host=/run/postgresql"],
        action: StoreCommands.guarded { inv in
            let location = try StoreLocation.resolvedPath(inv)
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

    /// `init` on a PostgreSQL location; nil for a file store.
    static func initStore(_ inv: Invocation, seed: String, form: RemoteConfigTemplate.Form) throws -> ExitCode? {
        let location = try StoreLocation.resolvedPath(inv)
        guard StoreLocation.isPostgres(location) else { return nil }
        let team = try Wiring.createTeamStore(conninfo: location, seed: seed, form: form, operatorID: try Wiring.operatorID(inv))
        let current = try team.config.current()
        print("created store \(team.location)")
        print("version 1 (etag \(current.etag)), \(form.rawValue) template, seed \(seed)")
        print(StoreCommands.rolloutLine(current.template))
        return .ok
    }

    /// The config store of the invocation, whichever backend.
    static func configStore(_ inv: Invocation) throws -> any ConfigStore {
        if let team = try Wiring.teamSession(inv) { return team.config }
        return try Wiring.session(inv).config
    }

    /// The write path, acting operator and read-only flag of the invocation, whichever backend.
    static func writeTarget(_ inv: Invocation) throws -> (WritePath, String, Bool) {
        if let team = try Wiring.teamSession(inv) { return (team.writePath(), team.operatorID, team.readOnly) }
        let session = try Wiring.session(inv)
        return (try session.writePath(), session.operatorID, session.readOnly)
    }

    static func status(_ inv: Invocation, _ team: TeamSession) throws -> ExitCode {
        let current = try team.config.current()
        let rollout = Result { try RolloutPlan.locate(in: current.template) }
        if inv.flag("--json") {
            var out = JSONObject()
            out["store"] = .string(team.location)
            out["version"] = StoreCommands.versionJSON(current.info)
            switch rollout {
            case .success(let plan?): out["rollout"] = StoreCommands.planJSON(plan)
            case .success(nil): out["rollout"] = .null
            case .failure(let e): out["rolloutError"] = .string("\(e)")
            }
            print(JSONValue.object(out).prettyText, terminator: "")
            return .ok
        }
        let info = current.info
        var rows: [(String, String)] = [
            ("store", team.location + " (PostgreSQL)"),
            ("version", "\(info.number) (etag \(info.etag))"),
            ("updated", "\(info.updateTime.iso8601) by \(StoreCommands.printable(info.updateUser)) (\(info.updateOrigin), \(info.updateType.rawValue))"),
        ]
        if !info.description.isEmpty { rows.append(("reason", StoreCommands.printable(info.description))) }
        switch rollout {
        case .success(let plan?):
            rows += [
                (plan.names.parameter, StoreCommands.describe(plan)),
                ("seed", StoreCommands.printable(plan.seed)),
            ]
        case .success(nil): rows.append(("rollout", "none: the template has no rollout of \(RolloutNames.standard.parameter)"))
        case .failure(let e): rows.append(("rollout", "cannot read it: \(e)"))
        }
        rows.append(("telemetry", "not kept on PostgreSQL stores yet (no guardrail verdict)"))
        StoreCommands.printRows(rows)
        return .ok
    }

    static func verify(_ inv: Invocation, _ team: TeamSession) throws -> ExitCode {
        let report: PostgresConfigStore.IntegrityReport
        do {
            report = try team.config.verify()
        } catch let e as StoreError {
            throw CommandError("audit verify failed: \(e)")
        }
        if inv.flag("--json") {
            let out: JSONValue = [
                "intact": true, "auditRecords": .number(JSONNumber(report.auditRecords)),
                "versions": .number(JSONNumber(report.versions)), "headHash": .string(report.headHash),
            ]
            print(out.prettyText, terminator: "")
        } else {
            print("audit log intact: \(report.auditRecords) records, \(report.versions) versions checked against their records")
            print("head: \(report.headHash)")
        }
        return .ok
    }
}
