import Foundation
@testable import PostgresStore
import SQLiteStore
import StoreCopy
import StoreSupport
import Telemetry
import Testing
import TestSupport

/// `rollout store copy` fills an empty database only and copies one state of its source file: a target where the
/// writer role planted rows after `store migrate` is refused and left as it was (every table of the schema is
/// checked, and locked until the copy commits); a batch committed into the file while the copy reads it is in none
/// of the copy; a file of an older schema is refused with the command that upgrades it.
@Suite(.serialized)
struct PostgresStoreCopyTargetTests {
    let directory: URL
    let key: String

    init() throws {
        directory = try TestSupport.temporaryDirectory("pg-copy-target")
        key = directory.appendingPathComponent("team.key").path
    }

    @discardableResult
    func rollout(_ arguments: [String], store: String? = nil) throws -> TestSupport.ProcessResult {
        try TestSupport.run(
            try TestSupport.rolloutBinary(), arguments + (store.map { ["--store", $0] } ?? []),
            environment: ["ROLLOUT_STORE_KEY": key, "ROLLOUT_OPERATOR": "ana@test", "NO_COLOR": "1"])
    }

    /// A file store with two versions and one batch of telemetry.
    func sourceFile(_ name: String) throws -> String {
        let file = directory.appendingPathComponent(name).path
        #expect(try rollout(["init", "--seed", "copy-target"], store: file).status == 0)
        #expect(try rollout(["set", "10", "--reason", "start"], store: file).status == 0)
        try ingest(into: file, batch: 0)
        return file
    }

    /// Lands one batch of 20 session events through `rollout ingest` (another process).
    func ingest(into file: String, batch: Int) throws {
        let now = Int64(Date().timeIntervalSince1970 * 1_000_000)
        let events =
            (0..<20).map { i in
                #"{"t":\#(now - Int64(i) * 1_000_000),"i":"b\#(batch)-\#(i % 7)","k":"session","c":"\#(i % 2 == 0 ? "enabled" : "control")","p":"appAttest","os":"17.4"}"#
            }.joined(separator: "\n") + "\n"
        let path = directory.appendingPathComponent("\(URL(fileURLWithPath: file).lastPathComponent)-batch-\(batch).ndjson")
        try events.write(to: path, atomically: true, encoding: .utf8)
        let r = try rollout(["ingest", path.path], store: file)
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// A database with the schema and no version (`store migrate` on an empty database) and the documented grants:
    /// a target the docs accept.
    func migratedTarget(_ server: PostgresServer) throws -> String {
        let target = try server.freshDatabase()
        let migrate = try rollout(["store", "migrate"], store: server.uris(of: target).socket)
        #expect(migrate.status == 0, "\(migrate.stderr)")
        try PostgresRoleTests.applyDocumentedGrants(target)
        return target
    }

    /// Every row of every table of the rollout schema, as text: what a refused copy leaves as it was.
    static func contents(_ conninfo: String) throws -> [String] {
        let c = try PGConnection(conninfo)
        let tables = try c.query(
            "SELECT quote_ident(relname) FROM pg_class WHERE relkind = 'r' "
                + "AND relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'config_head'::regclass) ORDER BY relname"
        ).compactMap { $0.first ?? nil }
        #expect(tables.count > 30)
        var rows: [String] = []
        for table in tables {
            rows += try c.query("SELECT t::text FROM \(table) t ORDER BY 1").map { "\(table) \(($0.first ?? nil) ?? "")" }
        }
        return rows
    }

    /// Rows the writer role can insert with its documented grants, in tables the copy fills.
    static let plantings: [(table: String, statement: String)] = [
        ("stepup_policy", "INSERT INTO stepup_policy (key, value) VALUES ('increase-over', 'off'), ('policy-change', 'off')"),
        (
            "appcheck_debug_tokens",
            "INSERT INTO appcheck_debug_tokens (digest, app_id, name, created_at) VALUES (sha256('planted'::bytea), '1:123:ios:abc', 'planted', 1)"
        ),
        ("source_config", #"INSERT INTO source_config (name, definition) VALUES ('planted', '{"accessTokenCommand": "touch pwned"}')"#),
        ("telemetry_counters", "INSERT INTO telemetry_counters (level, bucket, key, count) VALUES (0, 1, 999999999, 123456)"),
    ]

    @Test func aTargetWhereTheWriterPlantedRowsIsRefusedAndLeftAsItWas() throws {
        let server = try PostgresServer.get()
        let file = try sourceFile("planted.db")
        // Each planted table alone, then all of them: refused (exit 1), the tables named, nothing written.
        for planted in Self.plantings.map({ [$0] }) + [Self.plantings] {
            let target = try migratedTarget(server)
            let writer = try PGConnection(target.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer"))
            for planting in planted { try writer.execute(planting.statement) }
            let before = try Self.contents(target)
            let copy = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
            #expect(copy.status == 1, "\(planted.map(\.table)): \(copy.stdout) \(copy.stderr)")
            for planting in planted {
                #expect(copy.stderr.contains(planting.table), "\(copy.stderr)")
            }
            #expect(copy.stderr.contains("nothing was written"), "\(copy.stderr)")
            #expect(try Self.contents(target) == before)
        }
        // The same database without planted rows takes the copy.
        let target = try migratedTarget(server)
        let copy = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
        #expect(copy.status == 0, "\(copy.stderr)")
        let verify = try rollout(["audit", "verify"], store: server.uris(of: target).socket)
        #expect(verify.status == 0, "\(verify.stderr)")
    }

    /// Nothing can be inserted between the copy's check of the target and its COMMIT: while the copy writes, the
    /// writer role cannot take the lock an INSERT, UPDATE or DELETE needs on any of the tables.
    @Test func theWriterCannotWriteWhileTheCopyRuns() throws {
        let server = try PostgresServer.get()
        let file = try sourceFile("locked.db")
        let target = try migratedTarget(server)
        let writer = try PGConnection(target.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer"))
        var probed: [String] = []
        _ = try PostgresStoreCopy.copy(
            from: try RolloutStore(path: file, create: false, access: .readOnly), to: target,
            teamKey: { [key] in try StoreKey.load(key) ?? StoreKey.create(key) }, progress: { _, _ in },
            afterReading: { table in
                guard table == "config_audit" else { return }
                for planting in Self.plantings {
                    try writer.execute("BEGIN")
                    let locked = Result { () throws(PostgresError) -> Void in
                        try writer.execute("LOCK TABLE \(planting.table) IN ROW EXCLUSIVE MODE NOWAIT")
                    }
                    try writer.execute("ROLLBACK")
                    if case .failure(let e) = locked, e.sqlState == "55P03" { probed.append(planting.table) }
                }
            })
        #expect(probed == Self.plantings.map(\.table))
        #expect(try rollout(["audit", "verify"], store: server.uris(of: target).socket).status == 0)
    }

    /// A batch that an `ingest` commits into the file while the copy reads it (here: right after the copy read the
    /// counters) is in none of the copy: the copy's batch log and counters are the file's of one moment.
    @Test func aBatchCommittedIntoTheFileMidCopyIsInNoneOfTheCopy() throws {
        let server = try PostgresServer.get()
        let file = try sourceFile("moving.db")
        let (batches, totals) = try Self.telemetry(ofFile: file)
        #expect(batches.count == 1)
        let target = try server.freshDatabase()
        var ingested = false
        let report = try PostgresStoreCopy.copy(
            from: try RolloutStore(path: file, create: false, access: .readOnly), to: target,
            teamKey: { [key] in try StoreKey.load(key) ?? StoreKey.create(key) }, progress: { _, _ in },
            afterReading: { table in
                guard table == "telemetry_counters", !ingested else { return }
                ingested = true
                try ingest(into: file, batch: 1)
            })
        #expect(ingested)
        #expect(try Self.telemetry(ofFile: file).batches.count == 2, "the batch did not land in the file")
        let team = PostgresTelemetry(store: try PostgresConfigStore(conninfo: target))
        #expect(report.telemetryBatches == 1)
        #expect(try team.batches() == batches)
        #expect(try team.allTimeTotals() == totals)
        let verify = try rollout(["audit", "verify"], store: server.uris(of: target).socket)
        #expect(verify.status == 0, "\(verify.stderr)")
    }

    static func telemetry(ofFile file: String) throws -> (batches: [BatchReceipt], totals: CounterTotals) {
        let store = try RolloutStore(path: file, create: false, access: .readOnly)
        return try store.withDatabase { db in
            let tables = try TelemetryTables(database: db)
            return (try tables.batches(), try tables.allTimeTotals())
        }
    }

    /// A file of an older schema cannot be upgraded by the copy, which only reads it: the refusal names the command
    /// that upgrades it (never "without --read-only", which nobody passed), and after that command the copy runs.
    @Test func aFileOfAnOlderSchemaIsRefusedWithTheCommandThatUpgradesIt() throws {
        let server = try PostgresServer.get()
        let file = try sourceFile("older.db")
        // Back to schema 10 in one write of the store (which seals what it leaves): `source_state` without `reads`.
        do {
            let store = try RolloutStore(path: file, create: false)
            try store.withDatabase { db in
                try db.transaction {
                    try db.execute(
                        "ALTER TABLE source_state RENAME TO source_state_11; CREATE TABLE source_state(source TEXT PRIMARY KEY NOT NULL, "
                            + "watermark INTEGER, last_success INTEGER, last_attempt INTEGER, last_error TEXT) WITHOUT ROWID; "
                            + "DROP TABLE source_state_11; PRAGMA user_version = 10")
                }
            }
        }
        let target = try server.freshDatabase()
        let refused = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(!refused.stderr.contains("open it once without --read-only"), "\(refused.stderr)")
        #expect(refused.stderr.contains("'rollout audit verify --store \(file)'"), "\(refused.stderr)")
        #expect(try PostgresSchema.version(PGConnection(target)) == nil)
        #expect(try rollout(["audit", "verify", "--store", file]).status == 0)
        let copy = try rollout(["store", "copy", "--from", file, "--to", server.uris(of: target).socket])
        #expect(copy.status == 0, "\(copy.stderr)")
    }
}
