import Crypto
import Foundation
@testable import PostgresStore
import Rollout
import StepUp
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// Operators' phones on the PostgreSQL team store (`stepup_phones`, schema 9): the number sealed with the team
/// store key, the phone method's lockout kept per operator, the table in the seal, and the documented roles: the
/// writer records attempts, the viewer sees who has a phone and its lockout but never the number (not even sealed).
struct PostgresPhonesTests {
    static let t0 = Instant(seconds: 1_780_000_005)

    @Test func sealedNumberLockoutAndRoles() throws {
        let (owner, conninfo) = try PostgresStoreTests.freshStore()
        try PostgresRoleTests.applyDocumentedGrants(conninfo)
        let key = try PostgresTeamTablesTests.keyFile()
        let ana = try OperatorID("ana@test")
        let stepUp = PostgresStepUpStore(store: owner, key: key)
        try stepUp.save(OperatorRecord(id: ana, secret: .generate(), enrolledAt: Self.t0))
        try stepUp.savePhoneRow(PhoneEnrolment(operatorID: ana, number: "+447700900123", enrolledAt: Self.t0))
        #expect(try stepUp.phoneEnrolment(ana)?.number == "+447700900123")
        #expect(try stepUp.phoneEnrolment(try OperatorID("bob@test")) == nil)
        let raw = try #require(try owner.connection.query("SELECT encode(number, 'hex') FROM stepup_phones").first?.first ?? nil)
        #expect(!raw.contains(Hex.encode(Array("447700900123".utf8))) && !raw.contains("447700900123"))
        // Another key opens nothing.
        #expect(throws: (any Error).self) { try PostgresStepUpStore(store: owner, key: try PostgresTeamTablesTests.keyFile()).phoneEnrolment(ana) }

        // The writer records attempts: three wrong codes lock the phone method (the standard policy).
        let writerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")
        let writer = PostgresStepUpStore(store: try PostgresConfigStore(conninfo: writerInfo), key: key)
        var audited: [PhoneEnrolment] = []
        for _ in 0..<3 {
            _ = try writer.recordPhoneAttempt(ana, accepted: false, policy: .standard, at: Self.t0) { audited.append($0) }
        }
        #expect(audited.map(\.failedAttempts) == [1, 2, 0])
        #expect(try stepUp.phoneEnrolment(ana)?.isLockedOut(at: Self.t0) == true)

        // The viewer sees the lockout, not the number.
        let viewerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer")
        let viewer = try PGConnection(viewerInfo)
        #expect(try viewer.query("SELECT id, enrolled_at, failed_attempts, locked_until FROM stepup_phones").count == 1)
        #expect(throws: PostgresError.self) { try viewer.query("SELECT number FROM stepup_phones") }
        #expect(throws: PostgresError.self) { try viewer.query("DELETE FROM stepup_phones") }

        // The table is one of the sealed ones (its rows are in the seal's state).
        #expect(PostgresSeal.sealedTables.contains("stepup_phones"))
    }
}
