import Foundation
@testable import PostgresStore
import StoreConformance
import StoreSupport
import Telemetry
import TelemetrySources
import Testing
import TestSupport
import Timekeeping

/// Telemetry sources on the team store (schema 7): the same conformance checks as the store file
/// (`SourceStateConformanceTests`), the documented roles on the new tables, and `store migrate` of a sealed store
/// from schema 6, which checks the seal before the step and seals again after it.
@Suite(.serialized)
struct PostgresSourceStateTests {
    @Test(arguments: SourceStateConformance.checks.map(\.name))
    func conformance(_ check: String) throws {
        let factory: SourceStateConformance.Factory = {
            let (_, conninfo) = try PostgresStoreTests.freshStore()
            return SourceStateConformance.Fixture(
                open: {
                    let store = try PostgresConfigStore(conninfo: conninfo)
                    return (store, PostgresTelemetry(store: store))
                },
                openReadOnly: { try PostgresConfigStore(conninfo: conninfo, readOnly: true) })
        }
        try SourceStateConformance.checks.first { $0.name == check }!.run(factory)
    }

    /// The viewer reads the configured sources and their state, and the server refuses its writes; the writer
    /// lands a pull.
    @Test func viewerReadsSourcesAndWriterPulls() throws {
        let (owner, conninfo) = try PostgresStoreTests.freshStore()
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        let configuration = try SourceConfiguration(
            name: "bq", kind: .bigQuery, project: "demo-rollout", analytics: "demo-rollout.analytics_1", crashlytics: nil,
            location: nil, origin: SourceStateConformance.origin)
        try PostgresSourceConfig(store: owner).save(configuration)

        let viewer = try PostgresConfigStore(conninfo: conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer"))
        #expect(try PostgresSourceConfig(store: viewer).load().map(\.name) == ["bq"])
        #expect(try viewer.sourceState(SourceStateConformance.ledger.key) == nil)
        let plan = SourceStateConformance.plan(nil)
        let pull = SourceStateConformance.pull(plan, SourceStateConformance.counts(plan))
        #expect { try viewer.commitPull(pull, at: SourceStateConformance.now) } throws: { "\($0)".contains("permission denied") }
        #expect { try PostgresSourceConfig(store: viewer).remove("bq") } throws: { "\($0)".contains("permission denied") }

        let writer = try PostgresConfigStore(conninfo: conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer"))
        #expect(try writer.commitPull(pull, at: SourceStateConformance.now).count == pull.counts.count)
        #expect(try viewer.sourceState(SourceStateConformance.ledger.key)?.watermark == plan.nextWatermark)
    }

    /// A store sealed at schema 6 (before sources): `store migrate` without the team key is refused and migrates
    /// nothing; a tampered store is refused naming what differs; with the key the step runs and the store is sealed
    /// again in the same transaction, so `audit verify` and the next write pass.
    @Test func migratingASealedStoreSealsItAgain() throws {
        let cli = try PostgresSealTests()
        let (conninfo, uri) = try cli.initialized("pg-sources-migrate")
        try PostgresSealTests.psql(
            conninfo, "DROP TABLE source_config, source_state, source_ledger, stepup_security_keys, stepup_phones; ALTER TABLE telemetry_installations DROP COLUMN last_crash; DELETE FROM rollout_schema WHERE version >= 7")
        let key = try #require(try StoreKey.load(cli.key))
        let sealKey = PostgresSealKey(teamKey: key.bytes, path: key.path)
        // The seal schema 6 wrote: its sealed tables, under the key.
        let c = try PGConnection(conninfo)
        let six = PostgresSeal.sealedTables.filter { !["source_config", "stepup_security_keys", "stepup_phones"].contains($0) }
        let state = try PostgresSeal.current(c, tables: six).state.text
        try c.query("UPDATE store_seal SET state = $1, mac = $2 WHERE id = 1", [state, sealKey.mac(state)])

        let old = try cli.rollout(["status"], store: uri)
        #expect(old.status != 0 && old.stderr.contains("run 'rollout store migrate'"), "\(old.stderr)")
        let missing = cli.directory.appendingPathComponent("absent.key").path
        let keyless = try cli.rollout(["store", "migrate"], store: uri, key: missing)
        #expect(keyless.status != 0 && keyless.stderr.contains("needs the team store key"), "\(keyless.stderr)")
        #expect(try PostgresSchema.version(c) == 6)

        try PostgresSealTests.psql(PostgresSealTests.writer(conninfo), "INSERT INTO guardrail_settings (key, value) VALUES ('guardrails.auto-kill', 'on')")
        let tampered = try cli.rollout(["store", "migrate"], store: uri)
        #expect(tampered.status != 0 && tampered.stderr.contains("table guardrail_settings"), "\(tampered.stderr)")
        #expect(try PostgresSchema.version(c) == 6)
        try PostgresSealTests.psql(conninfo, "DELETE FROM guardrail_settings WHERE key = 'guardrails.auto-kill'")

        let migrate = try cli.rollout(["store", "migrate"], store: uri)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        #expect(try PostgresSchema.version(c) == PostgresSchema.current)
        // The owner grants the new tables (docs/POSTGRES.md, Roles: again after a migration).
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        let verify = try cli.rollout(["audit", "verify"], store: uri)
        #expect(verify.status == 0, "\(verify.stderr)")
        let add = try cli.rollout(
            ["source", "add", "bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1"], store: uri)
        #expect(add.status == 0, "\(add.stderr)")
        // The configured sources are sealed: a row written without the key is named.
        try PostgresSealTests.psql(
            PostgresSealTests.writer(conninfo), "UPDATE source_config SET definition = replace(definition, 'demo-rollout', 'other')")
        let edited = try cli.rollout(["audit", "verify"], store: uri)
        #expect(edited.status == 1 && edited.stderr.contains("table source_config"), "\(edited.stderr)")
    }

    /// As the writer role (psql, without the team store key): a source's access-token command planted in
    /// `source_config` was run on the next operator's machine by `follow` and `source test` (a pull takes no head lock
    /// and checked no seal; the next write named the table, after the fact). The sources a pull acts on are now read
    /// after the seal's check in the same snapshot: refused naming the table, and the command never runs.
    @Test func aSourceRowTheWriterRoleWroteIsNeverPulled() throws {
        let cli = try PostgresSealTests()
        let (conninfo, uri) = try cli.initialized("pg-planted-source")
        let add = try cli.rollout(
            [
                "source", "add", "bq", "--bigquery", "demo-rollout", "--analytics", "demo-rollout.analytics_1",
                "--source-token-command", "echo tok",
            ], store: uri)
        try #require(add.status == 0, "\(add.stderr)")
        let marker = cli.directory.appendingPathComponent("planted-command-ran").path
        try PostgresSealTests.psql(
            PostgresSealTests.writer(conninfo),
            "UPDATE source_config SET definition = replace(definition, 'echo tok', 'touch \(marker); echo tok')")
        for arguments in [["follow", "--looks", "1"], ["source", "test", "bq"]] {
            let r = try cli.rollout(arguments, store: uri)
            #expect(r.status == 1 && r.stderr.contains("table source_config"), "\(arguments): \(r.stdout) \(r.stderr)")
            #expect(!FileManager.default.fileExists(atPath: marker), "\(arguments): the planted command ran")
        }
    }

    /// Step 13 on a team store of schema 12, whose sources kept what they landed under their names: the rows move
    /// to the events' ledgers, two sources over one export merged, by the same rules as the store file's schema 11
    /// (`SourceStateConformance.checkMovedLedgers`); before the step, the store is refused asking for a migration.
    @Test func schema12LedgersMoveToTheEventsTheirSourcesRead() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let names = try SourceStateConformance.landLegacyPulls(store)
        for c in try SourceStateConformance.legacyConfigurations() { try PostgresSourceConfig(store: store).save(c) }
        let owner = try PGConnection(conninfo)
        try owner.execute("SET client_min_messages = warning")
        for (key, name) in names {
            for table in ["source_state", "source_ledger"] {
                try owner.query("UPDATE \(table) SET source = $1 WHERE source = $2", [name, key])
            }
        }
        try owner.execute("ALTER TABLE source_state DROP COLUMN reads; DELETE FROM rollout_schema WHERE version = 13")
        #expect(throws: (any Error).self) { try PostgresConfigStore(conninfo: conninfo) }
        #expect(try PostgresSchema.migrate(conninfo: conninfo) == [13])
        let migrated = try PostgresConfigStore(conninfo: conninfo)
        try SourceStateConformance.checkMovedLedgers(migrated, PostgresTelemetry(store: migrated))
        _ = try migrated.verify()
    }
}
