import Foundation
import JSON
import RemoteConfig
import Rollout
import StepUp
import Timekeeping

/// What a check of the conformance suite found wrong.
public struct ConformanceFailure: Error, CustomStringConvertible {
    public var description: String
    init(_ d: String) { description = d }

    /// Runs one check of a suite; whatever it throws comes out as a failure named by the check.
    static func naming(_ check: String, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let f as ConformanceFailure {
            throw ConformanceFailure("\(check): \(f.description)")
        } catch {
            throw ConformanceFailure("\(check): \(error)")
        }
    }
}

/// The conformance suite of the core's ports: checks every store must pass, whatever its backend (the SQLite
/// store, the in-memory store, and the Firebase and PostgreSQL stores of other issues).
///
/// Each check takes a factory for a fresh store and throws `ConformanceFailure` naming the rule it broke; a test
/// target runs them with its own factory, e.g. `try ConfigStoreConformance.all(fresh)` inside a `@Test`.
public enum ConfigStoreConformance {
    /// Makes a fresh store whose version 1 is `RolloutPlan.initialTemplate(seed:)` on the given seed.
    public typealias Factory = (_ seed: String) throws -> any ConfigStore

    /// Every check, in order.
    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a new store holds version 1 with the rollout", newStoreHoldsVersionOne),
        (
            "publish with the current etag makes the next version, atomically with its audit record",
            publishMakesNextVersion
        ),
        ("publish with a stale etag is a conflict naming the winner, and writes no version", staleETagConflicts),
        ("If-Match * publishes over anything", forcedPublishWins),
        ("versions are listed newest first and page with before", versionsPage),
        ("version(n) returns that template; a missing one is StoreError.noSuchVersion", versionLookup),
        ("appended audit records chain and verify", auditChains),
        ("unknown template members survive a publish", unknownMembersSurvive),
        ("templates are stamped with their version and etag", stamping),
        ("of concurrent publishes on one etag exactly one wins", concurrentPublishes),
    ]

    /// Runs every check; the first failure names its rule.
    public static func all(_ factory: Factory) throws {
        for check in checks { try ConformanceFailure.naming(check.name) { try check.run(factory) } }
    }

    static func expect(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        if !condition { throw ConformanceFailure(message()) }
    }

    static let t0 = Instant(seconds: 1_780_000_000)
    static let later = Instant(seconds: 1_780_000_060)

    static func request(
        _ store: any ConfigStore, _ template: RemoteConfigTemplate, ifMatch: IfMatch, user: String = "ana@test"
    )
        -> PublishRequest
    {
        PublishRequest(
            template: template, ifMatch: ifMatch, updateUser: user, updateOrigin: "CONFORMANCE",
            updateType: .incremental,
            description: "conformance", time: later,
            audit: AuditEntry(time: later, actor: user, action: "set", result: .published))
    }

    static func changed(_ stored: StoredTemplate, percent: Int64) throws -> RemoteConfigTemplate {
        try RolloutPlan.apply(
            .set(MicroPercent(percent: percent)), to: stored.template.strippingVersionInfo(), newSeed: "x"
        )
        .template
    }

    static func newStoreHoldsVersionOne(_ factory: Factory) throws {
        let store = try factory("conformance-seed")
        let current = try store.current()
        try expect(current.info.number == 1, "current version is \(current.info.number), not 1")
        let plan = try RolloutPlan.locate(in: current.template)
        try expect(
            plan?.seed == "conformance-seed" && plan?.state == .notStarted, "version 1 is not the rollout, not started")
        try expect(!current.etag.isEmpty, "version 1 has no etag")
    }

    static func publishMakesNextVersion(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        let before = try store.auditRecords(limit: 1000, before: nil).count
        let published = try store.publish(request(store, try changed(base, percent: 10), ifMatch: .etag(base.etag)))
        try expect(published.info.number == 2, "published version \(published.info.number), not 2")
        try expect(published.etag != base.etag, "the new version kept the old etag")
        try expect(try store.current().info == published.info, "current() is not the published version")
        let records = try store.auditRecords(limit: 1000, before: nil)
        try expect(records.count == before + 1, "\(records.count - before) audit records for one publish")
        try expect(
            records.first?.entry.version == 2 && records.first?.entry.result == .published,
            "the audit record does not name version 2")
        try expect(
            try RolloutPlan.locate(in: store.current().template)?.percentage == MicroPercent(percent: 10),
            "the template did not round-trip")
    }

    static func staleETagConflicts(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        let winner = try store.publish(
            request(store, try changed(base, percent: 10), ifMatch: .etag(base.etag), user: "bob@test"))
        do {
            _ = try store.publish(request(store, try changed(base, percent: 20), ifMatch: .etag(base.etag)))
            throw ConformanceFailure("a publish on a stale etag went through")
        } catch let c as PublishConflict {
            try expect(c.current.info == winner.info, "the conflict does not carry the winning version")
            try expect(c.expectedETag == base.etag, "the conflict does not carry the expected etag")
        }
        try expect(try store.current().info.number == 2, "the losing publish wrote a version")
    }

    static func forcedPublishWins(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        _ = try store.publish(request(store, try changed(base, percent: 10), ifMatch: .etag(base.etag)))
        let forced = try store.publish(request(store, try changed(base, percent: 30), ifMatch: .any))
        try expect(forced.info.number == 3, "If-Match * did not publish version 3")
    }

    static func versionsPage(_ factory: Factory) throws {
        let store = try factory("s")
        for p in 1...4 {
            let base = try store.current()
            _ = try store.publish(request(store, try changed(base, percent: Int64(p)), ifMatch: .etag(base.etag)))
        }
        let all = try store.versions(limit: 10, before: nil).map(\.number)
        try expect(all == [5, 4, 3, 2, 1], "versions are \(all), not newest first")
        let page = try store.versions(limit: 2, before: 4).map(\.number)
        try expect(page == [3, 2], "versions(limit: 2, before: 4) is \(page)")
    }

    static func versionLookup(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        _ = try store.publish(request(store, try changed(base, percent: 10), ifMatch: .etag(base.etag)))
        let one = try store.version(1)
        try expect(
            try RolloutPlan.locate(in: one.template)?.state == .notStarted, "version(1) is not the first template")
        do {
            _ = try store.version(99)
            throw ConformanceFailure("version(99) returned something")
        } catch let e as StoreError {
            try expect(e == .noSuchVersion(99), "version(99) threw \(e), not noSuchVersion(99)")
        }
    }

    static func auditChains(_ factory: Factory) throws {
        let store = try factory("s")
        let first = try store.appendAudit(
            AuditEntry(time: t0, actor: "ana@test", action: "step-up set", result: .stepUpRefused))
        let second = try store.appendAudit(
            AuditEntry(time: t0, actor: "ana@test", action: "kill", result: .refusedByPolicy))
        try expect(
            second.sequence == first.sequence + 1, "sequences \(first.sequence), \(second.sequence) are not consecutive"
        )
        try expect(second.previousHash == first.hash, "the second record does not chain to the first")
        let records = try store.auditRecords(limit: 1000, before: nil)
        try expect(records.first == second, "the newest record is not listed first")
        if let broken = AuditChain.verify(records.reversed()) {
            throw ConformanceFailure("the chain breaks: \(broken)")
        }
        let older = try store.auditRecords(limit: 1, before: second.sequence)
        try expect(older == [first], "auditRecords(before:) does not page")
    }

    static func unknownMembersSurvive(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        var template = try changed(base, percent: 10)
        template.setMember("futureField", ["nested": [1, 2, 3], "flag": true])
        _ = try store.publish(request(store, template, ifMatch: .etag(base.etag)))
        let back = try store.current().template.json["futureField"]
        try expect(
            back == ["nested": [1, 2, 3], "flag": true], "an unknown member came back as \(String(describing: back))")
    }

    static func stamping(_ factory: Factory) throws {
        let store = try factory("s")
        let current = try store.current()
        try expect(
            current.template.versionNumber == current.info.number, "the template's versionNumber differs from the info")
        try expect(current.template.etag == current.etag, "the template's etag differs from the info")
    }

    static func concurrentPublishes(_ factory: Factory) throws {
        let store = try factory("s")
        let base = try store.current()
        let template = try changed(base, percent: 10)
        let request = request(store, template, ifMatch: .etag(base.etag))
        nonisolated(unsafe) let shared = store
        let lock = NSLock()
        nonisolated(unsafe) var wins = 0
        nonisolated(unsafe) var conflicts = 0
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            do {
                _ = try shared.publish(request)
                lock.withLock { wins += 1 }
            } catch is PublishConflict {
                lock.withLock { conflicts += 1 }
            } catch {}
        }
        try expect(wins == 1 && conflicts == 7, "\(wins) wins and \(conflicts) conflicts of 8 publishes on one etag")
    }
}

/// Conformance checks of the `StepUpStore` port, on a fresh store with one operator enrolled.
public enum StepUpStoreConformance {
    /// Makes a fresh store with `operator` enrolled (its record saved as given) and the default policy.
    public typealias Factory = (_ operator: OperatorRecord) throws -> any StepUpStore

    public static func all(_ factory: Factory) throws {
        let start = Instant(seconds: 1_780_000_005)
        let ana = OperatorRecord(id: try OperatorID("ana@test"), secret: .generate(), enrolledAt: start)
        let store = try factory(ana)
        let state = try store.enforcement()
        try ConfigStoreConformance.expect(state.enforced && state.policy == .standard, "enforcement is \(state)")
        try ConfigStoreConformance.expect(
            try store.operatorRecord(ana.id)?.secret == ana.secret, "the enrolled record does not round-trip")
        try ConfigStoreConformance.expect(
            try store.operatorRecord(try OperatorID("nobody@test")) == nil, "an unknown operator has a record")
        let change = StepUpChange(.rollback)
        let code = TOTP.standard.code(secret: ana.secret, at: start)
        var events: [StepUpAuditEvent] = []
        let accepted = try store.authorize(change, by: ana.id, code: code, at: ManualClock(start)) { events.append($0) }
        try ConfigStoreConformance.expect(
            accepted.verdict == .accepted && events.count == 1, "a current code was not accepted")
        let replay = try store.authorize(change, by: ana.id, code: code, at: ManualClock(start)) { events.append($0) }
        try ConfigStoreConformance.expect(replay.refusal != nil && events.count == 2, "a replayed code was accepted")
        for _ in 0..<StepUpPolicy.standard.lockoutAttempts {
            _ = try store.authorize(change, by: ana.id, code: "000000", at: ManualClock(start)) { events.append($0) }
        }
        try ConfigStoreConformance.expect(
            try store.operatorRecord(ana.id)?.isLockedOut(at: start) == true,
            "wrong codes did not lock the operator out")
        // An error from the audit sink undoes the attempt.
        struct SinkDown: Error {}
        let before = try store.operatorRecord(ana.id)
        _ = try? store.authorize(change, by: ana.id, code: "111111", at: ManualClock(start)) { _ in throw SinkDown() }
        try ConfigStoreConformance.expect(
            try store.operatorRecord(ana.id) == before, "a failed audit did not undo the attempt")
    }
}
