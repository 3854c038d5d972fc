import StoreConformance
import Foundation
@testable import PostgresStore
import Rollout
import SQLiteStore
import TestSupport
import Testing
import Timekeeping

/// The Firebase state store on PostgreSQL (`PostgresFirebaseState`, schema 5) below the Firebase store: the
/// binding to one project, the roles of docs/POSTGRES.md, read-only connections and `audit verify`'s checks.
struct PostgresFirebaseStateTests {
    static let t0 = Instant(seconds: 1_780_000_000)

    static func intent(base: Int = 3, actor: String = "ana@test") -> PublishIntent {
        PublishIntent.sample(base: base, actor: actor, at: t0)
    }

    @Test func initBindsTheDatabaseToOneProjectAndNothingElseCreatesIt() throws {
        let conninfo = try PostgresServer.get().freshDatabase()
        #expect { _ = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-one", create: false) } throws: {
            "\($0)".contains("is not yet the state store of firebase:p-one")
                && "\($0)".contains("rollout init --store firebase:p-one")
        }
        #expect(try PGConnection(conninfo).query("SELECT to_regclass('rollout_schema') IS NULL").first?.first == "t")
        let state = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-one", create: true)
        #expect(try PostgresSchema.version(state.store.connection) == PostgresSchema.current)
        // Adopting again is harmless; another project is refused, with or without create.
        _ = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-one", create: true)
        for create in [false, true] {
            #expect {
                _ = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-two", create: create)
            } throws: {
                "\($0)".contains("is the state store of firebase:p-one, not of firebase:p-two")
            }
        }
        // A team store holding template versions is not a state store, and a state store is not a new team store.
        let (_, team) = try PostgresStoreTests.freshStore()
        #expect { _ = try PostgresFirebaseState.open(conninfo: team, project: "p-one", create: true) } throws: {
            "\($0)".contains("team store holding template versions (newest 1)")
        }
        #expect {
            _ = try PostgresConfigStore.create(conninfo: conninfo) { try PostgresStoreTests.genesis(seed: "x") }
        } throws: {
            "\($0)".contains("state store of firebase:p-one")
        }
        #expect(try PGConnection(conninfo).query("SELECT count(*) FROM config_versions").first?.first == "0")
    }

    /// (The port's transaction rules run against SQLite and PostgreSQL in FirebasePostgresStateTests.)
    @Test func anEditedAuditRecordFailsVerification() throws {
        let state = try PostgresFirebaseState.open(
            conninfo: try PostgresServer.get().freshDatabase(), project: "p-one", create: true)
        try state.appendAudit(Self.intent().audit)
        try state.appendAudit(Self.intent(base: 4).audit)
        #expect(try state.verifiedAuditChain().map(\.sequence) == [1, 2])
        try state.store.connection.query("UPDATE config_audit SET reason = 'edited' WHERE sequence = 1")
        #expect { try state.verifiedAuditChain() } throws: {
            ($0 as? ConfigIntegrityProblem)?.description.contains("audit") == true
        }
    }

    @Test func theViewerRoleAndReadOnlyConnectionsRefuseWritesAndTheWriterWorks() throws {
        let conninfo = try PostgresServer.get().freshDatabase()
        let owner = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-one", create: true)
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        let writer = try PostgresFirebaseState.open(
            conninfo: conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer"), project: "p-one",
            create: false)
        let id = try writer.atomically { try writer.insertPublishIntent(Self.intent()) }
        try writer.atomically {
            #expect(try writer.removePublishIntent(id))
            try writer.appendAudit(Self.intent().audit)
        }
        _ = try writer.atomically { try writer.insertPublishIntent(Self.intent(base: 4)) }

        let viewer = try PostgresFirebaseState.open(
            conninfo: conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer"), project: "p-one",
            create: false)
        #expect(try viewer.publishIntents().count == 1)
        #expect(try viewer.verifiedAuditChain().count == 1)
        #expect { _ = try viewer.insertPublishIntent(Self.intent()) } throws: { "\($0)".contains("permission denied") }
        #expect { _ = try viewer.removePublishIntent(2) } throws: { "\($0)".contains("permission denied") }

        let readOnly = try PostgresFirebaseState.open(
            conninfo: conninfo, project: "p-one", create: false, readOnly: true)
        #expect(throws: PostgresStoreError.self) { _ = try readOnly.insertPublishIntent(Self.intent()) }
        #expect(throws: PostgresStoreError.self) { _ = try readOnly.removePublishIntent(2) }
        #expect(throws: PostgresStoreError.self) { try readOnly.appendAudit(Self.intent().audit) }
        #expect(throws: PostgresStoreError.self) {
            _ = try PostgresFirebaseState.open(conninfo: conninfo, project: "p-one", create: true, readOnly: true)
        }
        #expect(try owner.publishIntents().count == 1 && (try owner.auditRecords(limit: 10, before: nil)).count == 1)
    }
}
