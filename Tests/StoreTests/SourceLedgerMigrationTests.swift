import Foundation
@testable import SQLiteStore
import StoreConformance
import Telemetry
import TelemetrySources
import Testing
import TestSupport

/// Schema 11 on a store file of schema 10, whose telemetry sources kept what they landed under their names: the
/// rows move to the events' ledgers, two sources over one export merged (`SourceStateConformance.checkMovedLedgers`,
/// which the PostgreSQL store's step 13 passes too), and the store verifies.
struct SourceLedgerMigrationTests {
    /// `source_state` as schema 10 created it on first use.
    static let schema10State = """
        CREATE TABLE source_state(
            source TEXT PRIMARY KEY NOT NULL, watermark INTEGER, last_success INTEGER, last_attempt INTEGER,
            last_error TEXT) WITHOUT ROWID
        """

    @Test func schema10LedgersMoveToTheEventsTheirSourcesRead() throws {
        let directory = try TestSupport.temporaryDirectory("source-ledger-migration")
        defer { try? FileManager.default.removeItem(at: directory) }
        let path: String
        do {
            let store = try TelemetryAndSettingsConformanceTests.freshStore(directory, "s10")
            path = store.path
            let names = try SourceStateConformance.landLegacyPulls(store)
            // Back to schema 10, in one write of the store (which seals what it leaves): the sources configured,
            // `source_state` without `reads`, every row under its source's name.
            try store.withDatabase { db in
                try db.transaction {
                    for c in try SourceStateConformance.legacyConfigurations() { try SourceConfigTable.save(c, in: db) }
                    try db.execute(
                        "ALTER TABLE source_state RENAME TO source_state_11; \(Self.schema10State); "
                            + "INSERT INTO source_state SELECT source, watermark, last_success, last_attempt, last_error "
                            + "FROM source_state_11; DROP TABLE source_state_11")
                    for (key, name) in names {
                        for table in ["source_state", "source_ledger"] {
                            try db.run("UPDATE \(table) SET source = ? WHERE source = ?", [.text(name), .text(key)])
                        }
                    }
                    try db.execute("PRAGMA user_version = 10")
                }
            }
        }
        let store = try RolloutStore(path: path, create: false)
        try store.withDatabase { db throws in #expect(try StoreSchema.version(of: db) == StoreSchema.current) }
        try SourceStateConformance.checkMovedLedgers(store, try store.telemetryCounters())
        _ = try store.verify()
        // Run again (a version lowered by hand), the move finds nothing left to move.
        let before = try store.sourceLedgers()
        try store.withDatabase { db in try db.transaction { try SourceTables.migrate(db) } }
        #expect(try store.sourceLedgers() == before)
    }
}
