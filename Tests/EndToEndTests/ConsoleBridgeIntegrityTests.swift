import Console
import Foundation
import Rollout
import RolloutApp
import Store
import Testing
import TestSupport

/// The console's audit view names the record where a store's chain breaks from the integrity problem's structured
/// `sequence`, not from its text, on a real store tampered with behind rollout's back.
@Suite("console bridge: a broken chain's record from the integrity problem's field")
struct ConsoleBridgeIntegrityTests {
    @Test func anEditedAuditRecordIsNamedByItsSequence() throws {
        let dir = try TestSupport.temporaryDirectory("bridge-integrity")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        let binary = try TestSupport.rolloutBinary()
        let created = try TestSupport.run(
            binary, ["init", "--seed", "rollout-2026", "--store", path, "--operator", "ana@example.com"])
        try #require(created.status == 0, "\(created)")
        for percent in ["5", "10"] {
            let set = try TestSupport.run(
                binary, ["set", percent, "--reason", "step", "--store", path, "--operator", "ana@example.com"])
            try #require(set.status == 0, "\(set)")
        }

        func audit() throws -> AuditLog? {
            let executor = StoreConsoleExecutor(session: try Wiring.session(path: path, operatorID: "ana@example.com"))
            guard case .auditLoaded(let log)? = executor.perform(.loadAudit).first else { return nil }
            return log
        }
        #expect(try audit()?.integrity == .verified)

        let records = try #require(try audit()?.entries.map(\.sequence))
        let edited = try #require(records.sorted().dropFirst().first, "at least two audit records")
        try SQLiteDatabase(path: path, create: false).execute(
            "UPDATE config_audit SET reason = 'nothing to see' WHERE sequence = \(edited)")
        let log = try #require(try audit())
        guard case .broken(let at, let reason) = log.integrity else {
            Issue.record("the edit went unnoticed: \(log.integrity)")
            return
        }
        #expect(at == edited, "the record edited, from the problem's field")
        #expect(reason.contains("edited") && !reason.hasPrefix("audit record"), "\(reason)")
    }
}
