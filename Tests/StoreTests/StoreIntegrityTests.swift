import Foundation
import RemoteConfig
import Rollout
import SQLiteStore
import Testing
import Timekeeping

/// Tampering with the file behind the store's back, through SQL: each change must be named by `verifyIntegrity`.
struct StoreIntegrityTests {
    /// A store with 5 versions and 6 audit records (the newest is a conflict, not a publish).
    static func populated() throws -> StoreFixture {
        let f = try StoreFixture("integrity")
        let (_, config) = try f.open()
        for n in [10, 20, 30, 40] {
            f.clock.advance(by: .minutes(1))
            _ = try f.writePath(config).execute(
                StoreFixture.request(.set(MicroPercent(percent: Int64(n))), reason: "step \(n)"))
        }
        var stale = StoreFixture.request(.kill)
        stale.basedOnETag = "etag-seen-before"
        _ = try? f.writePath(config).execute(stale)
        #expect(try config.verifyIntegrity() == config.verifyIntegrity())
        #expect(try config.verifyIntegrity().auditRecords == 6)
        return f
    }

    /// Applies `sql` directly to the file, then verifies through a fresh connection.
    static func tamper(_ sql: String) throws -> ConfigIntegrityProblem? {
        let f = try populated()
        try SQLiteDatabase(path: f.path, create: false).execute(sql)
        let (_, config) = try f.open(create: false)
        do {
            _ = try config.verifyIntegrity()
            return nil
        } catch let p as ConfigIntegrityProblem {
            return p
        }
    }

    @Test func intactStoreVerifies() throws {
        let f = try Self.populated()
        let (_, config) = try f.open(create: false)
        let report = try config.verifyIntegrity()
        #expect(
            report.versions == 5 && report.auditRecords == 6 && report.headSequence == 6 && report.headHash.count == 64)
    }

    @Test func editedRecordIsNamed() throws {
        let p = try #require(try Self.tamper("UPDATE config_audit SET reason = 'nothing to see' WHERE sequence = 3"))
        #expect(p.subject == "audit record 3" && p.problem.contains("edited"))
    }

    @Test func editedRecordWithRecomputedHashBreaksItsSuccessor() throws {
        // The forger rewrites record 3 consistently but cannot fix record 4's link without rewriting everything after.
        let f = try Self.populated()
        let (_, config) = try f.open(create: false)
        var r3 = try config.auditRecords(limit: 1, before: 4)[0]
        r3.entry.actor = "mallory"
        let hash = AuditChain.hash(sequence: 3, entry: r3.entry, previousHash: r3.previousHash)
        try SQLiteDatabase(path: f.path, create: false).execute(
            "UPDATE config_audit SET actor = 'mallory', hash = '\(hash)' WHERE sequence = 3")
        #expect {
            try config.verifyIntegrity()
        } throws: { e in
            let p = e as? ConfigIntegrityProblem
            return p?.subject == "audit record 4" && p?.problem.contains("record 3") == true
        }
    }

    @Test func deletedMiddleRecordIsNamed() throws {
        let p = try #require(try Self.tamper("DELETE FROM config_audit WHERE sequence = 2"))
        #expect(p.subject == "audit record 2" && p.problem.contains("missing"))
    }

    @Test func deletedNewestRecordIsNamed() throws {
        let p = try #require(try Self.tamper("DELETE FROM config_audit WHERE sequence = 6"))
        #expect(p.subject == "audit record 6" && p.problem.contains("missing"))
    }

    @Test func deletedNewestRecordAndVersionAreNamed() throws {
        // Remove the last publish entirely, and the refusal after it, and roll the head back by hand without its hash.
        let p = try #require(
            try Self.tamper(
                "DELETE FROM config_audit WHERE sequence >= 5; DELETE FROM config_versions WHERE number = 5"))
        #expect(p.subject == "audit record 5" && p.problem.contains("missing"))
    }

    @Test func editedVersionTemplateIsNamed() throws {
        let p = try #require(
            try Self.tamper(
                "UPDATE config_versions SET template = replace(template, '<= 20', '<= 90') WHERE number = 3"))
        #expect(p.subject == "version 3" && p.problem.contains("edited"))
    }

    @Test func editedVersionAuthorIsNamed() throws {
        let p = try #require(try Self.tamper("UPDATE config_versions SET update_user = 'mallory' WHERE number = 2"))
        #expect(p.subject == "version 2")
    }

    @Test func deletedOldVersionIsNamed() throws {
        let p = try #require(try Self.tamper("DELETE FROM config_versions WHERE number = 2"))
        #expect(p.subject == "version 2" && p.problem.contains("missing"))
    }

    /// Writes refuse to run on a store that fails verification, the kill switch included: a write would re-seal
    /// the damaged state and hide it. The deletion stays detectable and nothing is written.
    @Test func writesAfterADeletedTailAreRefusedAndTheGapStaysVisible() throws {
        let f = try Self.populated()
        try SQLiteDatabase(path: f.path, create: false).execute("DELETE FROM config_audit WHERE sequence = 6")
        let (_, config) = try f.open(create: false)
        let before = try f.dump()
        #expect {
            try f.writePath(config).execute(StoreFixture.request(.kill))
        } throws: { e in "\(e)".contains("fails verification, so nothing is written: audit record 6") }
        #expect(try f.dump() == before)
        #expect {
            try config.verifyIntegrity()
        } throws: { e in (e as? ConfigIntegrityProblem)?.subject == "audit record 6" }
    }

    @Test func unreadableRowsAreNamedNotCrashed() throws {
        let p = try #require(
            try Self.tamper("UPDATE config_audit SET result = 'approved by nobody' WHERE sequence = 4"))
        #expect(p.subject == "audit record 4")
        let q = try #require(
            try Self.tamper("UPDATE config_versions SET template = '{\"conditions\": 7' WHERE number = 4"))
        #expect(q.subject == "version 4")
    }
}
