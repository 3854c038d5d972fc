import FirebaseFake
import FirebaseRemoteConfig
import WebClient
import Foundation
import JSON
import Rollout
import TestSupport
import Testing
import Timekeeping

/// App Check enforcement over `projects.services`: the strict fake checked against Google's own client, and
/// rollout's client against the fake.
@Suite(.serialized)
struct AppCheckServicesTests {
    static func client(_ fake: FakeFirebase, scope: String = AppCheckServicesClient.scope) throws -> AppCheckServicesClient {
        let tokens = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: fake.transport, clock: SystemClock(),
            scope: scope)
        let caller = GoogleAPICaller(
            project: fake.project, tokens: tokens, transport: fake.transport,
            policy: RetryPolicy(attempts: 3, base: .milliseconds(10), cap: .milliseconds(50)))
        return AppCheckServicesClient(endpoint: try AppCheckEndpoint(origin: fake.origin), project: fake.project, caller: caller)
    }

    /// google-api-python-client, built from its shipped discovery document, with google-auth's service-account
    /// credentials fetching the token from the fake: list, get, patch with the etag, a stale etag refused, a
    /// missing updateMask refused, batchUpdate, and paging.
    @Test func googlesOwnClientAgreesWithTheFake() throws {
        let fake = try FakeFirebase()
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/FirebaseFake/appcheck_client_check.py").path
        let r = try TestSupport.run(try TestSupport.python(), [script, fake.origin, fake.keyFile, fake.projectNumber])
        #expect(r.status == 0, "\(r.stderr)")
        let seen = try JSONParser().parse(Array(r.stdout.utf8))
        #expect(seen["list_empty"]?["services"] == nil)
        #expect(seen["get"]?["enforcementMode"]?.stringValue == "OFF")
        #expect(seen["get"]?["name"]?.stringValue == "projects/\(fake.projectNumber)/services/firestore.googleapis.com")
        #expect(seen["patch"]?["enforcementMode"]?.stringValue == "UNENFORCED")
        #expect(seen["patch"]?["etag"] != seen["get"]?["etag"])
        #expect(seen["stale"]?["status"]?.numberValue?.int64 == 409)
        #expect(seen["stale"]?["error"]?.stringValue == "ABORTED")
        #expect(seen["no_mask"]?["status"]?.numberValue?.int64 == 400)
        #expect(seen["batch"]?["services"]?.arrayValue?.count == 2)
        let pages = seen["pages"]?.arrayValue?.map { $0.arrayValue?.compactMap(\.stringValue) ?? [] } ?? []
        #expect(
            pages == [
                ["firebasedatabase.googleapis.com", "firebasestorage.googleapis.com"], ["firestore.googleapis.com"],
            ], "\(pages)")
    }

    @Test func rolloutsClientReadsEveryServiceAndPatchesWithTheEtag() throws {
        let fake = try FakeFirebase()
        let client = try Self.client(fake)
        let all = try client.known()
        #expect(all.map(\.id) == AppCheckServicesClient.knownServices)
        #expect(all.allSatisfy { $0.enforcementMode == .off })
        #expect(try client.list().isEmpty)

        let firestore = try client.get("firestore.googleapis.com")
        #expect(firestore.replayProtection == "OFF")
        let patched = try client.setMode(firestore.id, .unenforced, etag: firestore.etag)
        #expect(patched.enforcementMode == .unenforced && patched.etag != firestore.etag)
        #expect(try client.list().map(\.id) == ["firestore.googleapis.com"])

        // A colleague enforces it in the Firebase console meanwhile: our etag is stale, nothing is overwritten.
        try fake.control("POST", "/_fake/appcheck", ["service": "firestore.googleapis.com", "mode": "ENFORCED"])
        #expect(throws: FirebaseError.self) { try client.setMode(firestore.id, .off, etag: patched.etag) }
        #expect(try client.get(firestore.id).enforcementMode == .enforced)

        // Not a service id: refused before anything is sent.
        #expect(throws: FirebaseError.self) { try client.get("../remoteConfig") }
    }

    /// The fake is strict about the token's scope: Remote Config's scope alone does not reach App Check.
    @Test func aTokenWithoutTheFirebaseScopeIsRefused() throws {
        let fake = try FakeFirebase()
        let client = try Self.client(fake, scope: ServiceAccountAssertion.remoteConfigScope)
        do {
            _ = try client.get("firestore.googleapis.com")
            Issue.record("a remote-config-only token read App Check")
        } catch let e as FirebaseError {
            #expect("\(e)".contains("HTTP 403"), "\(e)")
        }
    }
}
