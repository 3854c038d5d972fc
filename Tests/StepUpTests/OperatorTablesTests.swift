import Foundation
import StepUp
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

@Suite("Operator tables in the store")
struct OperatorTablesTests {
    static let start = Instant(seconds: 1_780_000_005)

    /// A fresh store file with the step-up schema (created twice: the schema is idempotent).
    private func store() throws -> (SQLiteDatabase, URL) {
        let dir = try TestSupport.temporaryDirectory("stepup-store")
        // A store opened through RolloutStore: its key encrypts the secrets, its migrations made the tables.
        let db = try RolloutStore(path: dir.appendingPathComponent("rollout.db").path).database
        try db.transaction { try OperatorTables.createSchema(in: db) }
        return (db, dir)
    }

    private func enrol(_ name: String, in db: SQLiteDatabase) throws -> OperatorRecord {
        let r = OperatorRecord(id: try OperatorID(name), secret: .generate(), enrolledAt: Self.start)
        try db.transaction { try OperatorTables.save(r, in: db) }
        return r
    }

    @Test func recordsRoundTripAndEnforcementFollowsEnrolment() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try OperatorTables.isEnforced(in: db) == false)
        var ana = try enrol("ana@laptop", in: db)
        #expect(try OperatorTables.isEnforced(in: db))
        ana.lastAcceptedStep = 42
        ana.failedAttempts = 2
        ana.lockedUntil = Self.start + .minutes(15)
        try db.transaction { try OperatorTables.save(ana, in: db) }
        #expect(try OperatorTables.record(ana.id, in: db) == ana)
        _ = try enrol("bob", in: db)
        #expect(try OperatorTables.operators(in: db).map(\.id.rawValue) == ["ana@laptop", "bob"])
        #expect(try OperatorTables.remove(ana.id, in: db))
        #expect(try OperatorTables.remove(ana.id, in: db) == false)
        #expect(try OperatorTables.record(ana.id, in: db) == nil)
    }

    @Test func pendingEnrolmentsAreKeptApart() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let pending = Enrolment.start(try OperatorID("carol"), approvedBy: try OperatorID("ana"), at: Self.start)
        try db.transaction { try OperatorTables.savePending(pending, in: db) }
        #expect(try OperatorTables.pendingEnrolment(pending.id, in: db) == pending)
        #expect(try OperatorTables.isEnforced(in: db) == false)
        try OperatorTables.removePending(pending.id, in: db)
        #expect(try OperatorTables.pendingEnrolments(in: db).isEmpty)
    }

    @Test func policyIsStoredWhole() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try OperatorTables.policy(in: db) == .standard)
        let p = try StepUpPolicy.standard.setting("increase-over", "20").setting("rollback", "off")
        try db.transaction { try OperatorTables.savePolicy(p, in: db) }
        #expect(try OperatorTables.policy(in: db) == p)
        #expect(try db.query("SELECT count(*) FROM stepup_policy").first?.first?.int == Int64(StepUpPolicy.keys.count))
        try db.run("INSERT OR REPLACE INTO stepup_policy (key, value) VALUES ('from-the-future', 'x')")
        #expect(throws: StoredStepUpError.self) { try OperatorTables.policy(in: db) }
    }

    @Test func authorizeCommitsRefusedAttemptsAndHandsOverTheirEvents() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ana = try enrol("ana@laptop", in: db)
        let clock = ManualClock(Self.start)
        let change = StepUpChange(.rollback, from: 30_000_000, to: 20_000_000)
        let right = TOTP.standard.code(secret: ana.secret, at: Self.start)
        let wrong = right == "000000" ? "000001" : "000000"
        var events: [StepUpAuditEvent] = []
        for code in [wrong, wrong, wrong, right] {
            let d = try OperatorTables.authorize(change, by: ana.id, code: code, in: db, clock: clock) {
                events.append($0)
            }
            #expect(d.event == events.last)
            #expect(d.verdict == .refused)
        }
        #expect(events.map(\.result) == ["wrong", "wrong", "wrong", "locked-out"])
        #expect(events.allSatisfy { $0.reasons == ["rollback"] })
        let stored = try #require(try OperatorTables.record(ana.id, in: db))
        #expect(stored.failedAttempts == 3)
        #expect(stored.lockedUntil == Self.start + .minutes(15))
        // The audit log's form of the events names the outcome and never the secret or a code.
        let entries = events.map(\.auditEntry)
        #expect(entries.map(\.result) == [.stepUpRefused, .stepUpRefused, .stepUpRefused, .stepUpRefused])
        #expect(
            entries[2].detail
                == "result wrong; needed for rollback; wrong codes 3; locked out until \((Self.start + .minutes(15)).iso8601)"
        )
        #expect(entries[0].action == "step-up rollback 30% -> 20%")
        let text = entries.map { "\($0)" }.joined()
        #expect(!text.contains(ana.secret.base32))
        #expect(!text.contains(right) && !text.contains(wrong))
    }

    @Test func anAuditFailureRollsTheAttemptBack() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ana = try enrol("ana", in: db)
        struct AuditDown: Error {}
        #expect(throws: AuditDown.self) {
            try OperatorTables.authorize(
                StepUpChange(.rollback), by: ana.id, code: TOTP.standard.code(secret: ana.secret, at: Self.start),
                in: db,
                clock: ManualClock(Self.start)
            ) { _ in throw AuditDown() }
        }
        #expect(try OperatorTables.record(ana.id, in: db) == ana)
    }

    /// Four processes' worth of connections race to use one code: exactly one wins.
    @Test func oneCodeIsAcceptedOnceAcrossConnections() throws {
        let (db, dir) = try store()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ana = try enrol("ana", in: db)
        let code = TOTP.standard.code(secret: ana.secret, at: Self.start)
        let path = db.path
        let results = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let result: String
            do {
                let connection = try RolloutStore(path: path, create: false).database
                result =
                    try OperatorTables.authorize(
                        StepUpChange(.rollback), by: ana.id, code: code, in: connection, clock: ManualClock(Self.start)
                    ) { _ in }.outcome?.result ?? "none"
            } catch {
                result = "error: \(error)"
            }
            results.withLock { $0.append(result) }
        }
        #expect(results.withLock { $0.sorted() } == ["accepted", "replayed", "replayed", "replayed"])
    }
}

/// A tiny lock-protected box for collecting results from concurrent closures.
final class Mutex<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<T>(_ body: (inout Value) -> T) -> T { lock.withLock { body(&value) } }
}
