import Console
import Foundation
import RemoteConfig
import Rollout
import RolloutApp
import Testing
import TestSupport

/// The console's history and drill-down name each version's kind with the core's `Proposal.Kind`, derived from
/// structured data (the version's update type and the rollout before and after it), on a real store.
@Suite("console bridge: the kind of each version from structured data")
struct ConsoleBridgeKindTests {
    @Test func historyAndDrillDownNameTheKindFromTheVersionsNotFromAuditWords() throws {
        let dir = try TestSupport.temporaryDirectory("bridge-kind")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        let created = try TestSupport.run(
            try TestSupport.rolloutBinary(),
            ["init", "--seed", "rollout-2026", "--store", path, "--operator", "ana@example.com"])
        try #require(created.status == 0, "\(created)")

        let session = try Wiring.session(path: path, operatorID: "ana@example.com")
        let write = try session.writePath()
        func publish(_ intent: WritePath.Intent, origin: String = StoreConsoleExecutor.origin) throws {
            let outcome = try write.execute(
                WritePath.Request(intent: intent, actor: "ana@example.com", reason: "step", origin: origin))
            guard case .published = outcome else {
                Issue.record("expected a publish for \(intent)")
                return
            }
        }
        try publish(.rollout(.set(MicroPercent(percent: 10))), origin: Wiring.origin)  // v2
        try publish(.rollout(.nudge(MicroPercent(percent: 5))))  // v3
        try publish(.rollout(.kill))  // v4
        try publish(.rollout(.resume))  // v5
        try publish(.rollback(toVersion: 2))  // v6

        let executor = StoreConsoleExecutor(session: session)
        guard case .historyLoaded(let records)? = executor.perform(.loadHistory).first else {
            Issue.record("no history")
            return
        }
        #expect(records.map(\.version) == ["6", "5", "4", "3", "2"])
        // A change of percentage is a `set` whether it was typed as one or as a nudge: the version records the
        // percentage, not the keystroke.
        #expect(records.map(\.kind) == [.rollback, .resume, .kill, .set, .set])
        #expect(records.map(\.kindText) == ["rollback", "resume", "kill", "set", "set"])
        #expect(records[2].from == RolloutPosition(microPercent: MicroPercent(percent: 15)))
        #expect(records[2].to == RolloutPosition(microPercent: MicroPercent(percent: 15), killed: true))
        #expect(
            records[3].from.microPercent == MicroPercent(percent: 10)
                && records[3].to.microPercent == MicroPercent(percent: 15))

        guard case .versionLoaded(let detail)? = executor.perform(.loadVersion(4)).first else {
            Issue.record("no version 4")
            return
        }
        #expect(detail.record.kind == .kill && !detail.isCurrent)
    }

    /// The console asks for a reason exactly when the write path would refuse the change without one: an increase
    /// while `increase-reason` is on, never a decrease, and nothing once the policy is off.
    @Test func theConsoleAsksForAReasonWhenTheWritePathWouldNeedOne() throws {
        let dir = try TestSupport.temporaryDirectory("bridge-reason")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("rollout.db").path
        let rollout = try TestSupport.rolloutBinary()
        let created = try TestSupport.run(rollout, ["init", "--seed", "rollout-2026", "--store", path, "--operator", "ana@example.com"])
        try #require(created.status == 0, "\(created)")
        let set = try TestSupport.run(rollout, ["set", "10", "--reason", "start", "--store", path, "--operator", "ana@example.com"])
        try #require(set.status == 0, "\(set)")
        func asks(_ delta: Int64) throws -> Bool? {
            let session = try Wiring.session(path: path, operatorID: "ana@example.com")
            let request = ChangeRequest(id: 1, operation: .rollout(.nudge(MicroPercent(percent: delta))))
            guard case .previewReady(let shown)? = StoreConsoleExecutor(session: session).perform(.preview(request)).first else {
                Issue.record("no preview of a nudge by \(delta)")
                return nil
            }
            return shown.requiresReason
        }
        #expect(try asks(1) == true)
        #expect(try asks(-1) == false)
        let off = try TestSupport.run(rollout, ["policy", "set", "increase-reason", "off", "--store", path, "--operator", "ana@example.com"])
        try #require(off.status == 0, "\(off)")
        #expect(try asks(1) == false)
    }
}
