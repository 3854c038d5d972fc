import FirebaseFake
import FirebaseRemoteConfig
import Foundation
import JSON
import RemoteConfig
import Rollout
import TestSupport
import Testing
import Timekeeping
import WebClient

/// Answers of 200 that are wrong (the fake's lies, beyond the documents): a publish answered but not applied, an
/// answer naming another version, a list whose nextPageToken never ends. Nothing is recorded that Firebase does not
/// hold, and no list loops.
@Suite(.serialized)
struct FirebaseLyingAnswersTests {
    static func nudge(_ store: ConfigStore) throws -> StoredTemplate {
        guard case .published(let s, _, _) = try RemoteConfigClientTests.nudge(store, 1) else {
            throw TestSupport.Failure("not published")
        }
        return s
    }

    static func published(_ store: FirebaseConfigStore) throws -> [AuditRecord] {
        try store.auditRecords(limit: 100, before: nil).filter { $0.entry.result == .published }
    }

    // MARK: Publishes

    /// Firebase answers 200 with the version the publish would have become, and does not apply it: the answer is
    /// checked against what Firebase holds, the publish sent again, and the record names the version it really made.
    @Test func aPublishAnswered200ButNotAppliedIsSentAgainAndRecordedAsWhatFirebaseHolds() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store(sleeps: false)
        _ = try Self.nudge(store)
        try fake.fault("ok_unapplied", match: "publish", count: 1)
        let s = try Self.nudge(store)
        #expect(try fake.stat("faults_pending") == 0, "the lie was told")
        #expect(try fake.headNumber() == 3 && fake.versions().count == 3, "applied exactly once")
        #expect(s.info.number == 3)
        let record = try #require(try Self.published(store).first)
        #expect(record.entry.version == 3)
        #expect(record.entry.detail.contains("firebase version 3 etag etag-\(fake.projectNumber)-3"), "\(record.entry.detail)")
        #expect(record.entry.detail.contains("which it does not hold"), "\(record.entry.detail)")
        #expect(try RolloutPlan.locate(in: try store.current().template)?.percentage == MicroPercent(percent: 2))
        _ = try store.verifyIntegrity()
    }

    /// Firebase never takes it, answering 200 each time: the publish fails as unsettled, no record claims a
    /// version, and its intent stays for a later command to settle (it is never recorded as published).
    @Test func aPublishFirebaseAnswersButNeverTakesFailsAndClaimsNoVersion() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store(sleeps: false)
        _ = try Self.nudge(store)
        try fake.fault("ok_unapplied", match: "publish", count: 100)
        do {
            _ = try Self.nudge(store)
            Issue.record("a publish Firebase does not hold was taken as published")
        } catch let e as FirebaseError {
            guard case .unsettled = e else { throw e }
            #expect("\(e)".contains("which it does not hold"), "\(e)")
        }
        #expect(try fake.headNumber() == 2)
        #expect(try Self.published(store).map(\.entry.version) == [2])
        #expect(try store.pendingIntents().count == 1, "kept for reconcile, not dropped")
    }

    /// Firebase applies the publish as version 3 and answers "version 1": the record names version 3 (with its
    /// ETag), says how it was settled, and no two records claim one version.
    @Test func anAnswerNamingAnotherVersionIsRecordedAsTheVersionFirebaseMade() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store(sleeps: false)
        _ = try Self.nudge(store)
        try fake.fault("ok_misnumbered", match: "publish", count: 1, value: "1")
        let s = try Self.nudge(store)
        #expect(try fake.stat("faults_pending") == 0, "the lie was told")
        #expect(s.info.number == 3 && s.etag == "etag-\(fake.projectNumber)-3")
        #expect(try fake.headNumber() == 3 && fake.versions().count == 3)
        let records = try Self.published(store)
        #expect(records.map(\.entry.version) == [3, 2])
        #expect(records.first?.entry.detail.contains("naming version 1") == true, "\(records.first?.entry.detail ?? "")")
        #expect(records.first?.entry.detail.contains("firebase version 3 etag etag-\(fake.projectNumber)-3") == true)
        #expect(try store.verifyIntegrity().versions == 2)
    }

    /// Two records claiming one Firebase version cannot both be true: verify says so.
    @Test func verifyRefusesTwoRecordsClaimingOneVersion() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        _ = try Self.nudge(store)
        #expect(try store.verifyIntegrity().versions == 1)
        try store.appendAudit(
            AuditEntry(
                time: SystemClock().now(), actor: "ana@example.com", action: "nudge +1", result: .published, version: 2,
                detail: "firebase version 2 etag etag-\(fake.projectNumber)-2 origin ROLLOUT_CLI"))
        do {
            _ = try store.verifyIntegrity()
            Issue.record("two records claiming version 2 verified")
        } catch let p as ConfigIntegrityProblem {
            #expect(p.subject == "audit record 2", "\(p)")
            #expect(p.problem.contains("claims Firebase version 2, as record 1 does"), "\(p)")
        }
    }

    // MARK: Lists

    /// A nextPageToken given again is an error naming it, not a loop; a list that repeats its versions under new
    /// tokens lists each once.
    @Test func aPageTokenGivenAgainIsAnErrorAndRepeatedVersionsAreListedOnce() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        _ = try Self.nudge(store)
        _ = try Self.nudge(store)
        try fake.fault("page_loop", match: "list", count: 5, value: "same")
        do {
            let listed = try store.versions(limit: 20, before: nil)
            Issue.record("a list that never ends was taken: \(listed.map(\.number))")
        } catch let e as FirebaseError {
            #expect("\(e)".contains("nextPageToken"), "\(e)")
        }
        try fake.clearFaults()
        try fake.fault("page_loop", match: "list", count: 5)
        #expect(try store.versions(limit: 20, before: nil).map(\.number) == [3, 2, 1])
        #expect(try fake.stat("faults_pending") == 0)
    }

    /// New tokens without end: stopped at the most pages Firebase's 300 versions can fill, with an error naming
    /// nextPageToken, rather than answering "no such version" after listing forever (`rollback 999`).
    @Test func aListThatNeverEndsStopsAtThePageCap() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        try fake.fault("page_loop", match: "list", count: 400)
        let lists = try fake.stat("list")
        do {
            let v = try store.version(999)
            Issue.record("read version \(v.info.number)")
        } catch let e as FirebaseError {
            #expect("\(e)".contains("nextPageToken") && "\(e)".contains("300 pages"), "\(e)")
        }
        #expect(try fake.stat("list") - lists == 300)
    }

    /// App Check's services list follows the same rule.
    @Test func appChecksServicesListStopsAtATokenGivenAgain() throws {
        let fake = try FakeFirebase()
        let client = try AppCheckServicesTests.client(fake)
        try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "ENFORCED"])
        try fake.fault("page_loop", match: "appcheck_get", count: 5, value: "same")
        do {
            let listed = try client.list()
            Issue.record("a list that never ends was taken: \(listed.map(\.id))")
        } catch let e as FirebaseError {
            #expect("\(e)".contains("nextPageToken"), "\(e)")
        }
    }
}
