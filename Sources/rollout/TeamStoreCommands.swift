import CommandLineKit
import Glibc
import Platform
import Rollout
import RolloutApp

/// The team store's own administration: `store migrate` (its schema) and `store copy` (a file copied into it).
/// Every other command runs on any backend through `Wiring.session`.
enum TeamStoreCommands {
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
            let migration = try Wiring.migrateTeamStore(inv)
            print(
                migration.applied.isEmpty
                    ? "schema \(migration.schema) is current: nothing to migrate"
                    : "migrated to schema \(migration.schema) (applied \(migration.applied.map(String.init).joined(separator: ", ")))")
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
            + "copy is checked like 'audit verify' before it commits. A target where any table of the rollout schema holds "
            + "a row (beyond what 'store migrate' writes) is refused, naming the tables; the copy locks them against writes "
            + "until it commits, so run it as the database's owner. The source file is read from one snapshot: what is "
            + "ingested into it meanwhile is not copied. "
            + "The ramp plan and its pre-approval are copied as they are. On a terminal, progress is shown on stderr.",
        options: [
            .value("--from", name: "FILE", help: "The SQLite store file to copy."),
            .value("--to", name: "URI", help: "The PostgreSQL database (postgresql://...)."),
            .flag("--quiet", help: "No progress line on the terminal."),
        ],
        examples: ["rollout store copy --from ~/.rollout/rollout.db --to postgresql:///rollout?host=/run/postgresql"],
        action: StoreCommands.guarded { inv in
            guard let from = inv.value("--from"), !from.isEmpty else { throw inv.usageError("store copy needs --from FILE") }
            guard let to = inv.value("--to") else { throw inv.usageError("store copy needs --to postgresql://...") }
            let progress = ProgressReporter.standardError(label: "store copy", unit: .count("rows"), quiet: inv.flag("--quiet"))
            let copy = try {
                defer { progress.finish() }
                return try Wiring.copyToTeamStore(
                    from: from, to: to, invocation: inv,
                    progress: { done, total in
                        progress.total = total
                        progress.update(done: done)
                    })
            }()
            let (report, createdKey) = (copy.report, copy.createdKey)
            print("copied \(from) to \(Wiring.storeLabel(to))")
            print("\(report.versions) versions, \(report.auditRecords) audit records, head \(report.headHash)")
            print(
                "\(report.operators) operators, \(report.pendingEnrolments) pending enrolments, \(report.securityKeys) security keys, "
                    + "\(report.phones) phones, \(report.settings) guardrail settings, "
                    + "\(report.telemetryBatches) telemetry batches (\(report.installations) installations, \(report.counterRows) counter rows)")
            if !report.appCheck.isEmpty {
                print("App Check state: " + report.appCheck.map { "\($0.rows) \($0.table.dropFirst("appcheck_".count))" }.joined(separator: ", "))
            }
            if let createdKey { print("created the team store key \(createdKey): give it to every operator (mode 0600)") }
            if let plan = report.plan { print("ramp plan: '\(plan)'") }
            if !report.skipped.isEmpty { print("not copied (not on PostgreSQL yet): \(report.skipped.joined(separator: ", "))") }
            return .ok
        })
}
