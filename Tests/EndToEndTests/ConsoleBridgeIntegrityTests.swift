import Console
import Foundation
import Rollout
import RolloutApp
import SQLiteStore
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

    /// An edited version names the audit record that pinned it (its sequence, not the version's number, which the
    /// subject's first number was), and the audit view draws that record as where the chain breaks.
    @Test func anEditedVersionIsNamedByThePinningRecord() throws {
        let dir = try TestSupport.temporaryDirectory("bridge-integrity-version")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        let binary = try TestSupport.rolloutBinary()
        let created = try TestSupport.run(
            binary, ["init", "--seed", "rollout-2026", "--store", path, "--operator", "ana@example.com"])
        try #require(created.status == 0, "\(created)")
        // A record that publishes nothing first, so that v2 is published by record 3.
        let policy = try TestSupport.run(
            binary, ["policy", "set", "increase-over", "20", "--store", path, "--operator", "ana@example.com"])
        try #require(policy.status == 0, "\(policy)")
        for percent in ["5", "10"] {
            let set = try TestSupport.run(
                binary, ["set", percent, "--reason", "step", "--store", path, "--operator", "ana@example.com"])
            try #require(set.status == 0, "\(set)")
        }
        let executor = StoreConsoleExecutor(session: try Wiring.session(path: path, operatorID: "ana@example.com"))
        guard case .auditLoaded(let before)? = executor.perform(.loadAudit).first else {
            Issue.record("no audit log")
            return
        }
        let pinning = try #require(before.entries.first { $0.version == 2 }?.sequence, "the record that published v2")
        try #require(pinning != 2, "the test tells the record from the version only when their numbers differ")

        try SQLiteDatabase(path: path, create: false).execute(
            "UPDATE config_versions SET description = 'nothing to see' WHERE number = 2")
        guard case .auditLoaded(let log)? = executor.perform(.loadAudit).first else {
            Issue.record("no audit log after the edit")
            return
        }
        guard case .broken(let at, let reason) = log.integrity else {
            Issue.record("the edit went unnoticed: \(log.integrity)")
            return
        }
        #expect(at == pinning, "\(reason)")
        #expect(reason.contains("audit record \(pinning) pinned"), "\(reason)")

        var state = ConsoleState(screenSize: Size(width: 120, height: 40))
        _ = state.handle(.key(.character("a")))
        _ = state.handle(.auditLoaded(log))
        let screen = ConsoleScreen.render(state, size: state.screenSize).lines.joined(separator: "\n")
        #expect(screen.contains("chain ✗ broken at #\(pinning)"), "\(screen)")
    }
}
