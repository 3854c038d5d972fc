import Crypto
import FirebaseRemoteConfig
import WebClient
import FirebaseFake
import Foundation
import JSON
import RemoteConfig
import Rollout
import SQLiteStore
import TestSupport
import Testing
import Timekeeping

/// The REST client, the OAuth flow and the Firebase store in-process, against the strict fake.
@Suite(.serialized)
struct RemoteConfigClientTests {
    static func writePath(_ store: ConfigStore, clock: any Clock = SystemClock()) -> WritePath {
        WritePath(store: store, clock: clock, newSeed: { "rollout-2026" })
    }

    static func nudge(_ store: ConfigStore, _ points: Double, retry: Bool = false, actor: String = "ana@example.com")
        throws -> WritePath.Outcome
    {
        var r = WritePath.Request(
            intent: .rollout(.nudge(MicroPercent(Int64((points * 1_000_000).rounded())))), actor: actor,
            reason: "test nudge", origin: "ROLLOUT_CLI")
        r.retryOnConflict = retry
        return try writePath(store).execute(r)
    }

    // MARK: Reading

    @Test func readsTheTemplateWithItsETagHeader() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        let head = try store.current()
        #expect(head.etag == "etag-\(fake.projectNumber)-1")
        #expect(head.info.number == 1)
        #expect(head.info.updateUser == "console-user@example.com")
        #expect(head.template.parameter("new_checkout") != nil)
        #expect(head.template.etag == head.etag)
    }

    /// A proxy that strips the ETag: both Google SDKs refuse such an answer, and so do we.
    struct StrippingETag: HTTPTransport {
        func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
            var r = try CurlTransport().send(request)
            r.headers["etag"] = nil
            return r
        }
    }

    @Test func anAnswerWithoutETagIsAnError() throws {
        let fake = try FakeFirebase()
        let key = try ServiceAccountKey.load(path: fake.keyFile)
        let client = RemoteConfigClient(
            endpoint: try RemoteConfigEndpoint(origin: fake.origin), project: fake.project,
            tokens: try ServiceAccountTokenProvider(key: key, transport: CurlTransport(), clock: SystemClock()),
            transport: StrippingETag())
        #expect(
            throws: FirebaseError.protocolViolation(
                "Firebase's answer carries no ETag header; refusing to continue without one")
        ) {
            _ = try client.get()
        }
    }

    @Test func theFakeRefusesAPublishWithoutIfMatchAndRequestsWithoutAToken() throws {
        let fake = try FakeFirebase()
        let key = try ServiceAccountKey.load(path: fake.keyFile)
        let token = try ServiceAccountTokenProvider(key: key, transport: CurlTransport(), clock: SystemClock()).token(
            refresh: false)
        let url = fake.origin + "/v1/projects/\(fake.project)/remoteConfig"
        let put = try CurlTransport().send(
            HTTPRequest(
                method: "PUT", url: url, headers: [("Authorization", "Bearer \(token)")], body: Array("{}".utf8),
                timeout: .seconds(Int64(5))))
        let error = try JSONParser().parse(put.body)["error"]
        #expect(put.status == 400)
        #expect(
            error?["message"]?.stringValue == "[VERSION_MISMATCH]: No If-Match header found on UpdateRemoteConfig call")
        let anonymous = try CurlTransport().send(HTTPRequest(method: "GET", url: url, timeout: .seconds(Int64(5))))
        #expect(anonymous.status == 401)
        #expect(try JSONParser().parse(anonymous.body)["error"]?["status"]?.stringValue == "UNAUTHENTICATED")
        #expect(try fake.versions().count == 1)
    }

    @Test func versionMetadataParsesBothPrecisionsStringNumbersAndUnknownValues() throws {
        let millis = try FirebaseConfigStore.info(
            [
                "versionNumber": "17", "updateTime": "2026-03-01T10:00:00.123Z", "updateUser": ["email": "a@b.c"],
                "updateOrigin": "SOMETHING_NEW",
                "updateType": "A_FUTURE_TYPE", "description": "d", "rollbackSource": "12",
            ], etag: "e")
        #expect(millis.number == 17)
        #expect(millis.updateTime == Instant(microseconds: 1_772_359_200_123_000))
        #expect(millis.updateOrigin == "SOMETHING_NEW")
        #expect(millis.updateType == .incremental)
        #expect(millis.rollbackSource == 12)
        let micros = try FirebaseConfigStore.info(
            ["versionNumber": "3", "updateTime": "2026-03-01T10:00:00.123456Z", "updateType": "ROLLBACK"], etag: "e")
        #expect(micros.updateTime == Instant(microseconds: 1_772_359_200_123_456))
        #expect(micros.updateType == .rollback)
        #expect(throws: FirebaseError.self) {
            _ = try FirebaseConfigStore.info(["updateTime": "2026-03-01T10:00:00Z"], etag: "")
        }
    }

    /// Content is compared in the form Firebase holds it (proto3 JSON: fields without presence at their default
    /// value left out), while the members of a value's union, which have presence, stay apart from their absence.
    @Test func contentIsComparedInTheFormFirebaseHoldsIt() {
        let sent: JSONValue = [
            "conditions": [
                [
                    "name": "c", "expression": "true", "description": "",
                    "tagColor": "CONDITION_DISPLAY_COLOR_UNSPECIFIED",
                ]
            ],
            "parameters": [
                "a": [
                    "defaultValue": ["value": "x"], "conditionalValues": [:], "description": "",
                    "valueType": "PARAMETER_VALUE_TYPE_UNSPECIFIED",
                ],
                "r": ["conditionalValues": ["c": ["rolloutValue": ["rolloutId": "r1", "value": "", "percent": 0]]]],
            ],
            "parameterGroups": ["g": ["description": "", "parameters": [:]]],
        ]
        let held: JSONValue = [
            "conditions": [["name": "c", "expression": "true"]],
            "parameters": [
                "a": ["defaultValue": ["value": "x"]],
                "r": ["conditionalValues": ["c": ["rolloutValue": ["rolloutId": "r1"]]]],
            ],
            "parameterGroups": ["g": [:]],
        ]
        #expect(FirebaseConfigStore.content(sent) == FirebaseConfigStore.content(held))
        func value(_ v: JSONValue) -> String { FirebaseConfigStore.content(["parameters": ["p": ["defaultValue": v]]]) }
        #expect(value(["value": ""]) != value([:]), "an empty value serves \"\"; no value serves nothing")
        #expect(value(["useInAppDefault": false]) != value([:]))
        #expect(value(["value": "", "unknownField": ""]) != value(["value": ""]), "members nobody knows are kept")
        #expect(
            FirebaseConfigStore.content(["conditions": [], "parameters": [:]])
                == FirebaseConfigStore.content(["parameterGroups": [:]]))
    }

    // MARK: Publishing

    @Test(arguments: ["400", "412"])
    func aStaleETagIsTheSamePublishConflictInBothForms(form: String) throws {
        let fake = try FakeFirebase(template: existingTemplate, conflictForm: form)
        let store = try fake.store()
        let base = try store.current()
        let theirs = try fake.publishAsColleague(base.template.strippingVersionInfo().json)
        var caught: PublishConflict?
        do {
            _ = try store.publish(
                PublishRequest(
                    template: base.template, ifMatch: .etag(base.etag), updateUser: "ana", updateOrigin: "ROLLOUT_CLI",
                    updateType: .incremental,
                    description: "mine", time: SystemClock().now(),
                    audit: AuditEntry(time: SystemClock().now(), actor: "ana", action: "set", result: .published)))
        } catch let c as PublishConflict {
            caught = c
        }
        #expect(caught?.current.info.number == theirs)
        #expect(caught?.current.info.updateUser == "bob@example.com")
        #expect(caught?.expectedETag == base.etag)
        #expect(try fake.headNumber() == theirs, "nothing published")
        #expect(try fake.stat("conflict") == 1)
        #expect(try store.auditRecords(limit: 10, before: nil).isEmpty)
    }

    @Test func everyPublishIsValidatedFirstAndValidationWritesNothing() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        let base = try store.current()
        let check = try store.client.put(
            base.template.strippingVersionInfo().json, ifMatch: base.etag, validateOnly: true)
        #expect(check.etag.hasSuffix("-0"))
        #expect(try fake.versions().count == 1)
        guard case .published(let s, _, _) = try Self.nudge(store, 5) else {
            throw TestSupport.Failure("not published")
        }
        #expect(s.info.number == 2)
        #expect(try fake.stat("validate") == 2)
        #expect(try fake.stat("publish") == 1)
        let record = try #require(try store.auditRecords(limit: 1, before: nil).first)
        #expect(record.entry.version == 2)
        #expect(record.entry.detail.contains("firebase version 2 etag etag-\(fake.projectNumber)-2"))
        // Firebase records the service account; the store shows the operator who published through it.
        #expect(try fake.head()["version"]?["updateUser"]?["email"]?.stringValue == fake.email)
        #expect(try store.current().info.updateUser == "ana@example.com")
    }

    @Test func forceSendsIfMatchStarOnlyWhenAskedAndIsAudited() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        _ = try Self.nudge(store, 1)
        let base = try store.current()
        try fake.publishAsColleague(base.template.strippingVersionInfo().json)
        var r = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 3))), actor: "ana@example.com", reason: "override",
            origin: "ROLLOUT_CLI")
        r.force = true
        r.basedOnETag = nil
        guard case .published(let s, _, _) = try Self.writePath(store).execute(r) else {
            throw TestSupport.Failure("not published")
        }
        #expect(s.info.number == 4)
        #expect(try fake.head()["version"]?["updateType"]?.stringValue == "FORCED_UPDATE")
        let record = try #require(try store.auditRecords(limit: 1, before: nil).first)
        #expect(record.entry.detail.hasPrefix("forced (no compare-and-swap); firebase version 4 etag "))
        #expect(try fake.stat("conflict") == 0)
    }

    @Test func aValidationErrorShowsFirebasesMessageAndPublishesNothing() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        let base = try store.current()
        var t = base.template.strippingVersionInfo()
        t.setParameterJSON("flag", ["defaultValue": ["value": "yes"], "valueType": "BOOLEAN"])
        var message = ""
        do {
            _ = try store.publish(
                PublishRequest(
                    template: t, ifMatch: .etag(base.etag), updateUser: "ana", updateOrigin: "ROLLOUT_CLI",
                    updateType: .incremental, description: "bad",
                    time: SystemClock().now(),
                    audit: AuditEntry(time: SystemClock().now(), actor: "ana", action: "import", result: .published)))
        } catch let e as FirebaseError {
            message = e.description
        }
        #expect(
            message
                == "Firebase rejected the template, nothing was published: [VALIDATION_ERROR]: Parameter flag is BOOLEAN but has the value 'yes'"
        )
        #expect(try fake.stat("publish") == 0)
        #expect(try fake.versions().count == 1)
    }

    /// A rollback is published as version 2's template under `If-Match` (Firebase's `:rollback` takes no
    /// precondition): Firebase records an ordinary update; the audit record says it is a rollback to version 2.
    @Test func rollbackPublishesTheOldTemplateWithIfMatchAndIsAuditedAsARollback() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store()
        _ = try Self.nudge(store, 5)
        _ = try Self.nudge(store, 5)
        var r = WritePath.Request(
            intent: .rollback(toVersion: 2), actor: "ana@example.com", reason: "back", origin: "ROLLOUT_CLI")
        r.force = false
        guard case .published(let s, _, _) = try Self.writePath(store).execute(r) else {
            throw TestSupport.Failure("not published")
        }
        #expect(s.info.number == 4)
        #expect(s.info.updateType == .incremental)
        let versions = try fake.versions()
        #expect(versions[3]["version"]?["updateType"]?.stringValue == "INCREMENTAL_UPDATE")
        #expect(versions[3]["version"]?["rollbackSource"] == nil)
        #expect(FirebaseConfigStore.content(versions[3]) == FirebaseConfigStore.content(versions[1]))
        #expect(try fake.stat("rollback") == 0)
        #expect(try fake.stat("publish") == 3 && fake.stat("conflict") == 0)
        #expect(try RolloutPlan.locate(in: try store.current().template)?.percentage == MicroPercent(percent: 5))
        let record = try #require(try store.auditRecords(limit: 1, before: nil).first)
        #expect(record.entry.action == "rollback to 2" && record.entry.version == 4)
        #expect(
            record.entry.detail.hasPrefix("rollback of version 2; firebase version 4 etag "), "\(record.entry.detail)")
    }

    @Test func theConsolesPollReusesTheHeadForItsIntervalAndConflictsReadFresh() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let clock = ManualClock(SystemClock().now())
        let store = try fake.store(clock: clock)
        store.pollInterval = .seconds(Int64(5))
        let seen = try store.current()
        let gets = try fake.stat("get")
        let theirs = try fake.publishAsColleague(seen.template.strippingVersionInfo().json)
        clock.advance(by: .seconds(Int64(4)))
        #expect(try store.current().info.number == 1, "within the interval")
        #expect(try fake.stat("get") == gets)
        // A change based on the stale head is a conflict naming the colleague's version, not a lost update.
        do {
            _ = try Self.nudge(store, 1)
            Issue.record("published over a newer version")
        } catch let WritePath.Failure.conflict(report) {
            #expect(report.winner.number == theirs)
            #expect(report.winner.updateUser == "bob@example.com")
        }
        #expect(try fake.headNumber() == theirs)
        clock.advance(by: .seconds(Int64(2)))
        #expect(try store.current().info.number == theirs)
    }

    /// After its interval the poll asks for the newest version's number (one `listVersions` entry) and reads the
    /// template again only when that number moved: an unchanged template costs no `get`.
    @Test func thePollAfterItsIntervalReadsTheTemplateOnlyWhenTheNewestVersionMoved() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let clock = ManualClock(SystemClock().now())
        let store = try fake.store(clock: clock)
        store.pollInterval = .seconds(Int64(5))
        let seen = try store.current()
        let (gets, lists) = (try fake.stat("get"), try fake.stat("list"))
        for round in 1...3 {
            clock.advance(by: .seconds(Int64(6)))
            let again = try store.current()
            #expect(again.info.number == seen.info.number && again.etag == seen.etag)
            #expect(try fake.stat("get") == gets, "round \(round): the unchanged template was fetched again")
            #expect(try fake.stat("list") == lists + round)
        }
        let theirs = try fake.publishAsColleague(seen.template.strippingVersionInfo().json)
        clock.advance(by: .seconds(Int64(6)))
        let moved = try store.current()
        #expect(moved.info.number == theirs && moved.etag != seen.etag)
        #expect(try fake.stat("get") == gets + 1)
        #expect(try fake.stat("list") == lists + 4)
    }

    // MARK: Versions

    @Test func versionsPageNewestFirstAndKeepOnly300() throws {
        let fake = try FakeFirebase()
        for i in 0..<309 {
            try fake.publishAsColleague(["parameters": ["n": ["defaultValue": ["value": .string(String(i))]]]])
        }
        let store = try fake.store()
        store.pageSize = 7
        let newest = try store.versions(limit: 20, before: nil)
        #expect(newest.map(\.number) == Array((291...310).reversed()))
        #expect(try fake.stat("list") == 3, "20 versions in pages of 7")
        #expect(try store.versions(limit: 5, before: 100).map(\.number) == [99, 98, 97, 96, 95])
        store.pageSize = 100
        let all = try store.versions(limit: 1000, before: nil)
        #expect(all.count == 300)
        #expect(all.last?.number == 11)
        // Version 10 existed: Firebase purged it (the newest 300 are kept), and says so.
        do {
            _ = try store.version(10)
            Issue.record("a purged version was read")
        } catch let p as PurgedVersion {
            #expect(p.number == 10 && p.oldestKept == 11)
        }
        // A version that never existed is still no such version.
        #expect(throws: StoreError.noSuchVersion(311)) { _ = try store.version(311) }
        #expect(try store.version(11).template.parameter("n")?.defaultValue == .value("9"))
    }

    // MARK: Retries and faults

    @Test func readsRetry503WithBackOffAndOtherErrorsAreNotRetried() throws {
        let fake = try FakeFirebase()
        let recorder = DelayRecorder()
        let store = try fake.store(sleeps: false, recorder: recorder)
        try fake.fault("unavailable", match: "get", count: 2)
        #expect(try store.current().info.number == 1)
        #expect(recorder.delays.count == 2)
        #expect(try fake.stat("get") == 1)
        #expect(throws: StoreError.noSuchVersion(42)) { _ = try store.version(42) }
        #expect(recorder.delays.count == 2, "a 404 is not retried")
        try fake.fault("unavailable", match: "get", count: 10)
        #expect(throws: FirebaseError.self) { _ = try store.current() }
        #expect(recorder.delays.count == 2 + 3, "4 attempts in all")
    }

    @Test func backOffIsExponentialWithJitterAndCapped() {
        let p = RetryPolicy(attempts: 6, base: .milliseconds(500), cap: .seconds(Int64(4)))
        #expect(p.delay(retry: 1, random: 0) == .milliseconds(250))
        #expect(p.delay(retry: 1, random: 1) == .milliseconds(500))
        #expect(p.delay(retry: 3, random: 1) == .milliseconds(2000))
        #expect(p.delay(retry: 9, random: 1) == .milliseconds(4000))
        #expect(p.delay(retry: 9, random: 0.5) == .milliseconds(3000))
        #expect(
            RetryPolicy.isRetryable(status: 429) && RetryPolicy.isRetryable(status: 500)
                && RetryPolicy.isRetryable(status: 503))
        #expect(
            !RetryPolicy.isRetryable(status: 400) && !RetryPolicy.isRetryable(status: 412)
                && !RetryPolicy.isRetryable(status: 502))
    }

    /// Each way the answer to a publish can be lost: the publish is applied exactly once.
    @Test(arguments: [
        ("drop_after", 0.0), ("drop_before", 0.0), ("delay_after", 2.5), ("delay_before", 2.5), ("unavailable", 0.0),
    ])
    func aLostPublishAnswerIsSettledAndNeverAppliedTwice(fault: String, seconds: Double) throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store(timeout: 1)
        _ = try Self.nudge(store, 1)
        try fake.fault(fault, match: "publish", count: 1, seconds: seconds)
        let conflicts = try fake.stat("conflict")
        guard case .published(let s, _, _) = try Self.nudge(store, 1) else {
            throw TestSupport.Failure("not published")
        }
        if fault == "delay_before" {
            // The held request reaches the fake after the publish was settled, and is refused as stale.
            let refused = try TestSupport.eventually(within: 30) { try fake.stat("conflict") > conflicts }
            #expect(refused, "the held request")
        }
        #expect(s.info.number == 3)
        #expect(try fake.stat("faults_pending") == 0, "the fault happened")
        #expect(try fake.headNumber() == 3, "exactly one new version")
        #expect(try RolloutPlan.locate(in: try store.current().template)?.percentage == MicroPercent(percent: 2))
        let published = try store.auditRecords(limit: 10, before: nil).filter { $0.entry.result == .published }
        #expect(published.map(\.entry.version) == [3, 2])
    }

    /// A forced publish (`If-Match: *`) lands on whatever version is newest when Firebase applies it: when a
    /// colleague's publish came first and the answer is lost, the publish is found after the colleague's version
    /// (settled as `reconcile` settles it), not reported as a conflict that wrote nothing.
    @Test func aForcedPublishWhoseAnswerIsLostBehindAColleaguesVersionIsFoundThere() throws {
        let fake = try FakeFirebase(template: existingTemplate)
        let store = try fake.store(sleeps: false)
        _ = try Self.nudge(store, 1)
        var theirs = try store.current().template.strippingVersionInfo()
        theirs.setParameterJSON("welcome_message", ["defaultValue": ["value": "Hello"], "valueType": "STRING"])
        try fake.colleaguePublishes(theirs.json, before: "publish", then: "drop_after")
        var r = WritePath.Request(
            intent: .rollout(.set(MicroPercent(percent: 3))), actor: "ana@example.com", reason: "override",
            origin: "ROLLOUT_CLI")
        r.force = true
        guard case .published(let s, _, _) = try Self.writePath(store).execute(r) else {
            throw TestSupport.Failure("not published")
        }
        #expect(try fake.stat("faults_pending") == 0, "the race happened")
        #expect(s.info.number == 4)
        #expect(try fake.headNumber() == 4 && fake.versions().count == 4, "applied once, after the colleague's 3")
        let records = try store.auditRecords(limit: 10, before: nil)
        #expect(records.map(\.entry.result) == [.published, .published], "no conflict recorded")
        #expect(records.first?.entry.version == 4)
        #expect(
            records.first?.entry.detail.contains("published on top of version 3, not 2") == true,
            "\(records.first?.entry.detail ?? "")")
        #expect(try store.pendingIntents().isEmpty)
        #expect(try store.reconcile() == [])
        #expect(try store.verifyIntegrity().versions == 2)
    }

    @Test func a401RefreshesTheTokenOnceAndPersistentOnesNameTheCredentials() throws {
        let fake = try FakeFirebase()
        let store = try fake.store()
        _ = try store.current()
        #expect(try fake.stat("token") == 1)
        _ = try store.current()
        #expect(try fake.stat("token") == 1, "the token is cached")
        try fake.fault("unauthenticated", match: "get", count: 1)
        _ = try store.current()
        #expect(try fake.stat("token") == 2)
        try fake.fault("unauthenticated", match: "get", count: 3)
        #expect(throws: FirebaseError.self) { _ = try store.current() }
        do { _ = try store.current() } catch { Issue.record("the next call works again: \(error)") }
    }

    @Test func aForbiddenProjectNamesTheMissingPermission() throws {
        let fake = try FakeFirebase()
        let state = try FirebaseState.open(path: fake.statePath, project: "someone-elses", create: true)
        let key = try ServiceAccountKey.load(path: fake.keyFile)
        let client = RemoteConfigClient(
            endpoint: try RemoteConfigEndpoint(origin: fake.origin), project: "someone-elses",
            tokens: try ServiceAccountTokenProvider(key: key, transport: CurlTransport(), clock: SystemClock()),
            transport: CurlTransport())
        let store = FirebaseConfigStore(client: client, state: try state.configStore(), clock: SystemClock())
        do {
            _ = try store.current()
            Issue.record("read a project the credentials cannot")
        } catch let e as FirebaseError {
            #expect(
                e.description.hasPrefix(
                    "Firebase refused: the credentials lack the permission cloudconfig.configs.get (HTTP 403: "))
        }
        do {
            _ = try client.put(["parameters": [:]], ifMatch: "etag-1-1", validateOnly: false)
        } catch let e as FirebaseError {
            #expect(e.description.contains("cloudconfig.configs.update"))
        }
    }

    // MARK: Credentials

    @Test func theAssertionIsAnRS256JWTWithGooglesClaims() throws {
        let fake = try FakeFirebase()
        let key = try ServiceAccountKey.load(path: fake.keyFile)
        let now = Instant(seconds: 1_780_000_000)
        let jwt = try ServiceAccountAssertion.make(key: key, now: now)
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try JSONParser().parse(Base64.decode(parts[0])!)
        let claims = try JSONParser().parse(Base64.decode(parts[1])!)
        #expect(header == ["alg": "RS256", "typ": "JWT", "kid": .string(fake.keyID)])
        #expect(claims["iss"]?.stringValue == fake.email)
        #expect(claims["scope"]?.stringValue == "https://www.googleapis.com/auth/firebase.remoteconfig")
        #expect(claims["aud"]?.stringValue == "http://127.0.0.1:\(fake.port)/token")
        #expect(claims["iat"]?.numberValue?.int64 == 1_780_000_000)
        #expect(claims["exp"]?.numberValue?.int64 == 1_780_003_600)
        #expect(Base64.decode(parts[2])?.count == 256, "an RSA-2048 signature")
    }

    @Test func aKeyTheFakeDoesNotKnowIsRefusedByTheTokenEndpoint() throws {
        let fake = try FakeFirebase()
        let other = try FakeFirebase()
        var key = try ServiceAccountKey.load(path: fake.keyFile)
        key.privateKeyPEM = try ServiceAccountKey.load(path: other.keyFile).privateKeyPEM
        let provider = try ServiceAccountTokenProvider(key: key, transport: CurlTransport(), clock: SystemClock())
        #expect(
            throws: CredentialsError.exchange(
                "the token endpoint refused the service account \(fake.email): invalid_grant: Invalid JWT Signature.")
        ) {
            _ = try provider.token(refresh: false)
        }
        let skewed = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(),
            clock: ManualClock(SystemClock().now() + .hours(2)))
        do {
            _ = try skewed.token(refresh: false)
            Issue.record("a token from the future was accepted")
        } catch let e as CredentialsError {
            #expect(
                e.description.contains("Token must be a short-lived token (60 minutes) and in a reasonable timeframe"))
        }
    }

    @Test func theAccessTokenIsKeptUntilShortlyBeforeItExpires() throws {
        let fake = try FakeFirebase(tokenLifetime: 400)
        let clock = ManualClock(SystemClock().now())
        let provider = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(), clock: clock)
        let first = try provider.token(refresh: false)
        clock.advance(by: .seconds(Int64(99)))
        #expect(try provider.token(refresh: false) == first)
        #expect(provider.exchanges == 1)
        clock.advance(by: .seconds(Int64(2)))  // 101 s: within 5 minutes of the 400 s lifetime
        let second = try provider.token(refresh: false)
        #expect(second != first)
        #expect(provider.exchanges == 2)
        #expect(try fake.stat("token") == 2)
    }

    /// An `expires_in` too large for the clock's arithmetic is kept a day at most (it trapped the process): the
    /// token is reused 23 hours later, and within 5 minutes of a day the endpoint is asked again (the fake then
    /// refuses the assertion, signed a day away from its wall clock: the exchange was attempted).
    @Test func aHugeExpiresInIsKeptADayAtMost() throws {
        let fake = try FakeFirebase(tokenLifetime: Int(Int64.max))
        let clock = ManualClock(SystemClock().now())
        let provider = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(), clock: clock)
        let first = try provider.token(refresh: false)
        clock.advance(by: .hours(23))
        #expect(try provider.token(refresh: false) == first)
        #expect(provider.exchanges == 1)
        clock.advance(by: .minutes(56))
        #expect(throws: CredentialsError.self) { try provider.token(refresh: false) }
        #expect(provider.exchanges == 2)
    }

    /// An `expires_in` of zero or less keeps nothing: the next request exchanges again.
    @Test(arguments: [0, -5])
    func aNonPositiveExpiresInKeepsNoToken(_ lifetime: Int) throws {
        let fake = try FakeFirebase(tokenLifetime: lifetime)
        let provider = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(), clock: SystemClock())
        _ = try provider.token(refresh: false)
        _ = try provider.token(refresh: false)
        #expect(provider.exchanges == 2)
    }

    /// The fake's token endpoint with its access_token replaced by `token`.
    struct ReplacingToken: HTTPTransport {
        let token: String
        func send(_ request: HTTPRequest) throws(TransportError) -> HTTPResponse {
            var r = try CurlTransport().send(request)
            if request.url.hasSuffix("/token"), r.status == 200 {
                let answer: JSONValue = ["access_token": .string(token), "expires_in": 3599, "token_type": "Bearer"]
                r.body = Array(answer.compactText.utf8)
            }
            return r
        }
    }

    /// A token with CR/LF (or anything outside RFC 6750's b64token) from the token endpoint or a command is
    /// refused, and no header value with CR, LF or NUL leaves the transport: no header can be injected.
    @Test func aTokenThatCouldInjectHeadersIsRefused() throws {
        let fake = try FakeFirebase()
        for bad in ["ya29.a\r\nX-Injected: yes", "ya29 a", "ya29\u{0}a", "ya29=a"] {
            let provider = try ServiceAccountTokenProvider(
                key: try ServiceAccountKey.load(path: fake.keyFile), transport: ReplacingToken(token: bad), clock: SystemClock())
            #expect(
                throws: CredentialsError.exchange(
                    "the token endpoint's access_token holds characters a bearer token cannot (RFC 6750 b64token)")
            ) { _ = try provider.token(refresh: false) }
        }
        let fine = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: ReplacingToken(token: "ya29.A-b_c~d+e/f=="),
            clock: SystemClock())
        #expect(try fine.token(refresh: false) == "ya29.A-b_c~d+e/f==")
        #expect(throws: CredentialsError.self) {
            _ = try CommandTokenProvider(command: "printf 'ya29:a'", clock: SystemClock()).token(refresh: false)
        }
        for value in ["Bearer a\r\nX-Injected: yes", "Bearer a\nX", "Bearer a\u{0}b"] {
            let request = HTTPRequest(
                method: "GET", url: fake.origin + "/v1/projects/\(fake.project)/remoteConfig", headers: [("Authorization", value)],
                body: nil, timeout: .seconds(Int64(10)))
            #expect {
                _ = try CurlTransport().send(request)
            } throws: { error in
                guard let e = error as? TransportError else { return false }
                return e.kind == .invalidRequest && !e.isTransient && !e.message.contains("X-Injected")
            }
        }
    }

    @Test func keyFilesOthersCanReadAreRefused() throws {
        let fake = try FakeFirebase()
        chmod(fake.keyFile, 0o644)
        #expect(
            throws: CredentialsError.loosePermissions(
                "the service-account key file \(fake.keyFile) is accessible to group or others (mode 644); run: chmod 600 \(fake.keyFile)"
            )
        ) {
            _ = try ServiceAccountKey.load(path: fake.keyFile)
        }
        chmod(fake.keyFile, 0o640)
        #expect(throws: CredentialsError.self) { _ = try ServiceAccountKey.load(path: fake.keyFile) }
        chmod(fake.keyFile, 0o400)
        #expect(try ServiceAccountKey.load(path: fake.keyFile).clientEmail == fake.email)
    }

    /// A key file is read up to 64 KiB (a real one is about 2.3 KB): a larger one is refused naming the limit,
    /// without being read whole (a sparse 1 GiB file is refused at once); a key padded to the limit is read.
    /// A FIFO is refused without waiting for a writer.
    @Test func keyFilesLargerThanTheLimitAreRefused() throws {
        let fake = try FakeFirebase()
        let key = try String(contentsOfFile: fake.keyFile, encoding: .utf8)
        let padded = fake.directory.appendingPathComponent("padded.json").path
        func write(_ text: String) throws {
            FileManager.default.createFile(
                atPath: padded, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        }
        try write(key + String(repeating: " ", count: ServiceAccountKey.maximumFileBytes - key.utf8.count))
        #expect(try ServiceAccountKey.load(path: padded).clientEmail == fake.email)
        try write(key + String(repeating: " ", count: ServiceAccountKey.maximumFileBytes + 1 - key.utf8.count))
        let refusal = CredentialsError.invalid(
            "the service-account key file \(padded) is larger than 64 KiB (a key file is a few KB); refused")
        #expect(throws: refusal) { _ = try ServiceAccountKey.load(path: padded) }
        #expect(truncate(padded, 1 << 30) == 0)
        let start = Date()
        #expect(throws: refusal) { _ = try ServiceAccountKey.load(path: padded) }
        #expect(Date().timeIntervalSince(start) < 1)
        // A FIFO is refused as it was, without waiting for a writer.
        let fifo = fake.directory.appendingPathComponent("fifo.json").path
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(
            throws: CredentialsError.unreadable("cannot read the service-account key file \(fifo): not a regular file")
        ) {
            _ = try ServiceAccountKey.load(path: fifo)
        }
    }

    @Test func theCommandTokenIsUsedAsTheBearer() throws {
        let fake = try FakeFirebase()
        let token = try ServiceAccountTokenProvider(
            key: try ServiceAccountKey.load(path: fake.keyFile), transport: CurlTransport(), clock: SystemClock()
        )
        .token(refresh: false)
        let provider = CommandTokenProvider(command: "printf '%s\\n' \(token)", clock: SystemClock())
        #expect(try provider.token(refresh: false) == token)
        #expect(throws: CredentialsError.command("the access-token command 'exit 3' failed (exit 3)")) {
            _ = try CommandTokenProvider(command: "exit 3", clock: SystemClock()).token(refresh: false)
        }
    }

    /// A token command's output is read up to 64 KiB (a token is a few KB): one that prints a flood is ended and
    /// refused, its output never held whole.
    @Test func aTokenCommandThatPrintsAFloodIsRefused() throws {
        let command = "head -c 100000000 /dev/zero | tr '\\0' a"
        #expect(
            throws: CredentialsError.command(
                "the access-token command '\(command)' printed more than 64 KiB (an access token is a few KB); refused")
        ) {
            _ = try CommandTokenProvider(command: command, clock: SystemClock()).token(refresh: false)
        }
        let largest = "head -c \(CommandTokenProvider.maximumOutputBytes) /dev/zero | tr '\\0' a"
        #expect(
            try CommandTokenProvider(command: largest, clock: SystemClock()).token(refresh: false).utf8.count == 65_536)
    }

    // MARK: Endpoint

    @Test func plainHTTPIsAcceptedOnlyForLoopbackHosts() throws {
        #expect(
            try RemoteConfigEndpoint(origin: "https://firebaseremoteconfig.googleapis.com/").origin
                == "https://firebaseremoteconfig.googleapis.com")
        #expect(try RemoteConfigEndpoint(origin: "http://127.0.0.1:8080/v1").origin == "http://127.0.0.1:8080")
        #expect(throws: Never.self) { _ = try RemoteConfigEndpoint(origin: "http://localhost:9") }
        #expect(throws: Never.self) { _ = try RemoteConfigEndpoint(origin: "http://[::1]:9") }
        for bad in [
            "http://10.0.0.1:80", "http://example.com", "http://127.0.0.1.evil.com", "ftp://127.0.0.1", "not a url",
        ] {
            #expect(throws: FirebaseError.self, "\(bad)") { _ = try RemoteConfigEndpoint(origin: bad) }
        }
        #expect(try RemoteConfigEndpoint.from(environment: [:]).origin == RemoteConfigEndpoint.google)
        #expect(
            try RemoteConfigEndpoint.from(environment: ["FIREBASE_REMOTE_CONFIG_URL": "http://127.0.0.1:1"]).origin
                == "http://127.0.0.1:1")
        #expect(
            try RemoteConfigEndpoint.from(environment: [
                "FIREBASE_REMOTE_CONFIG_URL": "http://127.0.0.1:1", "ROLLOUT_FIREBASE_URL": "http://127.0.0.1:2",
            ]).origin
                == "http://127.0.0.1:2")
        #expect(throws: FirebaseError.self) {
            _ = try RemoteConfigEndpoint.from(environment: ["ROLLOUT_FIREBASE_URL": "http://192.168.1.2"])
        }
    }
}
