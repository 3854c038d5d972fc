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
