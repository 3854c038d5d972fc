import Crypto
import Foundation
import RemoteConfig
import Rollout
import SecurityKey
import SoftwareAuthenticator
import SQLiteStore
import StepUp
import Testing
import TestSupport
import Timekeeping

/// A protected change approved with a security key, through the real write path on a real store file: the key
/// (the software authenticator behind libfido2) signs the change document the write path names; the policy checks
/// the document is this change and verifies the assertion against the sealed credential; the audit record keeps
/// what is needed to verify it again.
@Suite("Security keys in the write path")
struct WritePathSecurityKeyTests {
    static let start = Instant(seconds: 1_780_000_005)

    final class Fixture {
        let directory: URL
        let clock = ManualClock(WritePathSecurityKeyTests.start)
        let store: RolloutStore
        let config: SQLiteConfigStore
        let policy: StepUpWritePolicy
        let key = SoftwareAuthenticator()

        init() throws {
            directory = try TestSupport.temporaryDirectory("stepup-securitykey")
            store = try RolloutStore(path: directory.appendingPathComponent("rollout.db").path)
            config = try store.configStore()
            _ = try config.initializeIfEmpty {
                try SQLiteConfigStore.genesis(seed: "rollout-test", actor: "init", time: WritePathSecurityKeyTests.start)
            }
            policy = try StepUpWritePolicy(store: store, clock: clock)
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        var device: SecurityKeyDevice {
            let key = self.key
            return SecurityKeyDevice(name: key.path) { key.open($0) }
        }

        var path: WritePath { WritePath(store: config, clock: clock, policies: [policy], newSeed: { "unused" }) }

        /// Enrols `id` for step-up (a TOTP record turns step-up on) and gives it a security key.
        @discardableResult
        func enrol(_ id: String) throws -> SecurityKeyCredential {
            let operatorID = try OperatorID(id)
            let r = OperatorRecord(id: operatorID, secret: .generate(), enrolledAt: clock.now())
            try store.database.transaction { try OperatorTables.save(r, in: store.database) }
            let credential = try SecurityKeyClient.enrol(
                operatorID, relyingParty: "rollout:" + store.path, device: device, pin: nil, at: clock.now())
            try SQLiteStepUpStore(store: store).saveSecurityKey(credential) {}
            return credential
        }

        func request(_ percent: Int64, actor: String = "ana@laptop") -> WritePath.Request {
            WritePath.Request(intent: .rollout(.set(MicroPercent(percent: percent))), actor: actor, reason: "ready", origin: "TEST")
        }

        /// The document the write path would name for `request`, changed by `edit`, approved by `signer`'s key.
        func approve(
            _ request: WritePath.Request, signer: String = "ana@laptop", edit: (inout ChangeDocument) -> Void = { _ in }
        ) throws -> WritePath.Request {
            var document = policy.changeDocument(for: try path.preview(request).proposal)
            edit(&document)
            let credential = try #require(try SQLiteStepUpStore(store: store).securityKey(try OperatorID(signer)))
            let assertion = try SecurityKeyClient.approve(document, with: credential, device: device, pin: nil)
            var r = request
            r.secondFactor = SecondFactorEvidence(document, assertion)
            return r
        }

        func refusal(_ request: WritePath.Request) throws -> PolicyRefusal? {
            do {
                _ = try path.execute(request)
                return nil
            } catch WritePath.Failure.refused(let r) {
                return r
            }
        }

        func version() throws -> Int { try config.current().info.number }
        func lastAudit() throws -> AuditEntry { try #require(try config.auditRecords(limit: 5, before: nil).first?.entry) }
        func stepUpAudit() throws -> AuditEntry {
            try #require(try config.auditRecords(limit: 5, before: nil).map(\.entry).first { $0.action.hasPrefix("step-up") })
        }
    }

    @Test("approved with a security key: published once, and the audit record verifies again")
    func approved() throws {
        let f = try Fixture()
        let credential = try f.enrol("ana@laptop")
        // Without any factor the change is refused (step-up is on: reaching 100% needs one).
        #expect(try f.refusal(f.request(100))?.kind == .stepUpNeeded)
        let before = try f.version()
        #expect(try f.refusal(try f.approve(f.request(100))) == nil)
        #expect(try f.version() == before + 1)
        let audit = try f.stepUpAudit()
        #expect(audit.result == .stepUpAccepted)
        // Anyone can check again, from the record alone, who approved exactly what.
        let approval = try #require(RecordedApproval(actor: audit.actor, auditDetail: audit.detail))
        #expect(approval.outcome == .accepted(signCount: 2))
        #expect(approval.operatorID == "ana@laptop")
        #expect(approval.document.to == 100_000_000)
        #expect(approval.document.baseVersion == before)
        #expect(approval.document.store == f.store.path)
        #expect(audit.detail.contains("public-key \(Hex.encode(credential.publicKey))"))
        // A record whose document was edited (to 99%) no longer verifies.
        var edited = approval.document
        edited.to = 99_000_000
        let forged = audit.detail.replacingOccurrences(
            of: Hex.encode(approval.document.canonicalBytes), with: Hex.encode(edited.canonicalBytes))
        #expect(forged != audit.detail)
        #expect(RecordedApproval(actor: audit.actor, auditDetail: forged)?.outcome == .badSignature)
        // Under another actor's name it is not an approval of theirs.
        #expect(RecordedApproval(actor: "ben@desk", auditDetail: audit.detail)?.outcome == .malformed)
        #expect(try SQLiteStepUpStore(store: f.store).securityKey(try OperatorID("ana@laptop"))?.signCount == 2)
    }

    @Test("another percentage, another base version, expired, UV off, another operator's key: refused, nothing published, audited")
    func refused() throws {
        let f = try Fixture()
        try f.enrol("ana@laptop")
        try f.enrol("ben@desk")
        let version = try f.version()
        func expectRefused(_ request: WritePath.Request, _ result: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
            let refusal = try f.refusal(request)
            #expect(refusal?.kind == .stepUpFailed, sourceLocation: sourceLocation)
            #expect(try f.version() == version, sourceLocation: sourceLocation)
            let audit = try f.stepUpAudit()
            #expect(audit.result == .stepUpRefused, sourceLocation: sourceLocation)
            #expect(audit.detail.hasPrefix("result \(result);"), "\(audit.detail)", sourceLocation: sourceLocation)
        }
        try expectRefused(try f.approve(f.request(90)).with { $0.intent = .rollout(.set(MicroPercent(percent: 100))) }, "other-change")
        try expectRefused(try f.approve(f.request(100)) { $0.baseVersion -= 1 }, "other-change")
        try expectRefused(try f.approve(f.request(100)) { $0.baseETag = "another" }, "other-change")
        let late = try f.approve(f.request(100))
        f.clock.advance(by: .minutes(3))
        try expectRefused(late, "expired")
        f.key.faults = [.noUserVerification]
        try expectRefused(try f.approve(f.request(100)), "user-not-verified")
        f.key.faults = []
        // Ben's key over Ana's change: the credential is not Ana's.
        try expectRefused(try f.approve(f.request(100), signer: "ben@desk"), "other-credential")
        // A key whose operator is no longer enrolled approves nothing.
        let bensApproval = try f.approve(f.request(100).with { $0.actor = "ben@desk" }, signer: "ben@desk")
        try f.store.database.transaction { _ = try OperatorTables.remove(try OperatorID("ben@desk"), in: f.store.database) }
        #expect(try f.refusal(bensApproval)?.kind == .stepUpBlocked)
        #expect(try f.stepUpAudit().detail.hasPrefix("result not-enrolled;"))
        #expect(try f.version() == version)
        // And after all that, a good approval still publishes.
        #expect(try f.refusal(try f.approve(f.request(100))) == nil)
        #expect(try f.version() == version + 1)
    }

    @Test("two-person rule: A's key alone records a request; B's key over the same document publishes once; A cannot approve A's; expired refused; kill by anyone")
    func twoPerson() throws {
        let f = try Fixture()
        try f.enrol("ana@laptop")
        try f.enrol("ben@desk")
        let proposal = try f.path.preview(f.request(100)).proposal
        #expect(try f.policy.documentLifetime(for: proposal) == .minutes(2))
        var policy = try OperatorTables.policy(in: f.store.database)
        policy.twoPerson = true
        try f.store.database.transaction { try OperatorTables.savePolicy(policy, in: f.store.database) }
        let version = try f.version()
        // A second operator must be reached: the document lives longer.
        #expect(try f.policy.documentLifetime(for: proposal) == .minutes(15))
        #expect(try f.policy.documentLifetime(for: try f.path.preview(f.request(40)).proposal) == .minutes(2))

        // Ana alone: her approval is accepted and recorded as a request, the change is not published.
        let asked = try f.approve(f.request(100))
        let refusal = try #require(try f.refusal(asked))
        #expect(refusal.kind == .stepUpBlocked)
        let askedEvidence = try #require(asked.secondFactor)
        let document = try #require(ChangeDocument(canonical: askedEvidence.document))
        let id = ChangeDocument.requestID(document)
        #expect(refusal.reason.contains("request \(id)"))
        #expect(try f.version() == version)
        let recorded = try f.stepUpAudit()
        #expect(recorded.result == .stepUpAccepted)
        #expect(RecordedApproval(actor: recorded.actor, auditDetail: recorded.detail)?.request == id)

        /// The request completed by `approver`'s key over the same document.
        func completed(by approver: String) throws -> WritePath.Request {
            let credential = try #require(try SQLiteStepUpStore(store: f.store).securityKey(try OperatorID(approver)))
            var r = asked
            r.basedOnETag = document.baseETag
            r.coApproval = SecondFactorEvidence(
                document, try SecurityKeyClient.approve(document, with: credential, device: f.device, pin: nil))
            r.coApprover = approver
            return r
        }
        // Ana approving her own request is refused.
        #expect(try f.refusal(try completed(by: "ana@laptop"))?.kind == .stepUpBlocked)
        #expect(try f.stepUpAudit().detail.hasPrefix("result self-approval;"))
        #expect(try f.version() == version)
        // Ben approves: published once, both approvals in the log.
        let approved = try completed(by: "ben@desk")
        #expect(try f.refusal(approved) == nil)
        #expect(try f.version() == version + 1)
        let benRecord = try f.stepUpAudit()
        #expect(benRecord.actor == "ben@desk")
        let ben = try #require(RecordedApproval(actor: benRecord.actor, auditDetail: benRecord.detail))
        #expect(ben.outcome.isAccepted && ben.isCoApproval && ben.request == id)
        // The same approval again finds another base: a conflict, nothing published twice.
        #expect(throws: WritePath.Failure.self) { try f.path.execute(approved) }
        #expect(try f.version() == version + 1)
        // Kill by anyone, at any time.
        #expect(try f.refusal(WritePath.Request(intent: .rollout(.kill), actor: "carol@ops", reason: "", origin: "TEST")) == nil)

        // An expired request is refused even with a second operator's key.
        let again = try f.approve(f.request(100).with { $0.intent = .rollout(.resume) })
        #expect(try f.refusal(again)?.kind == .stepUpBlocked)
        f.clock.advance(by: .minutes(3))
        let againEvidence = try #require(again.secondFactor)
        let againDocument = try #require(ChangeDocument(canonical: againEvidence.document))
        let benKey = try #require(try SQLiteStepUpStore(store: f.store).securityKey(try OperatorID("ben@desk")))
        var expired = again
        expired.coApproval = SecondFactorEvidence(
            againDocument, try SecurityKeyClient.approve(againDocument, with: benKey, device: f.device, pin: nil))
        expired.coApprover = "ben@desk"
        #expect(try f.refusal(expired)?.kind == .stepUpFailed)
        #expect(try f.stepUpAudit().detail.hasPrefix("result expired;"))
    }

    @Test("a kill is never gated, whatever the factor")
    func killNeverGated() throws {
        let f = try Fixture()
        try f.enrol("ana@laptop")
        #expect(try f.refusal(try f.approve(f.request(100))) == nil)
        #expect(try f.refusal(WritePath.Request(intent: .rollout(.kill), actor: "nobody", reason: "", origin: "TEST")) == nil)
    }
}

extension WritePath.Request {
    fileprivate func with(_ edit: (inout WritePath.Request) -> Void) -> WritePath.Request {
        var r = self
        edit(&r)
        return r
    }
}
