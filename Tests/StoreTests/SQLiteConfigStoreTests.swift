import Foundation
import JSON
import RemoteConfig
import Rollout
import SQLiteStore
import Testing
import Timekeeping

struct SQLiteConfigStoreTests {
    @Test func newStoreHoldsTheSeedTemplateAsVersionOneWithAnInitRecord() throws {
        let f = try StoreFixture()
        let (_, config) = try f.open()
        let v1 = try config.current()
        #expect(v1.info.number == 1 && v1.info.updateUser == "init@test" && v1.info.updateOrigin == "ROLLOUT_INIT")
        #expect(v1.template.versionNumber == 1 && v1.template.etag == v1.etag)
        let plan = try #require(try RolloutPlan.locate(in: v1.template))
        #expect(plan.state == .notStarted && plan.seed == "s" && plan.percentage == .zero)
        #expect(v1.template.parameter("AppAttestEnabled")?.defaultValue == .value("false"))
        let records = try config.auditRecords(limit: 10, before: nil)
        #expect(records.count == 1)
        #expect(
            records[0].entry.action == "init" && records[0].entry.result == .published && records[0].entry.version == 1)
        // A second initialisation (another process starting on the same file) adds nothing.
        #expect(
            try config.initializeIfEmpty {
                Issue.record("genesis drawn twice"); throw StoreError.unavailable("")
            } == false)
        #expect(try config.versions(limit: 10, before: nil).count == 1)
    }

    @Test func publishIsCompareAndSwapOnTheETag() throws {
        let f = try StoreFixture()
        let (_, config) = try f.open()
        let v1 = try config.current()
        let template = try RolloutPlan.apply(
            .set(MicroPercent(percent: 10)), to: v1.template.strippingVersionInfo(), newSeed: "x"
        ).template
        func request(_ ifMatch: IfMatch, _ who: String) -> PublishRequest {
            PublishRequest(
                template: template, ifMatch: ifMatch, updateUser: who, updateOrigin: "TEST", updateType: .incremental,
                description: "d",
                time: f.clock.now(),
                audit: AuditEntry(time: f.clock.now(), actor: who, action: "set 10", result: .published))
        }
        let v2 = try config.publish(request(.etag(v1.etag), "ana"))
        #expect(v2.info.number == 2 && v2.etag != v1.etag)
        #expect(throws: PublishConflict.self) { try config.publish(request(.etag(v1.etag), "bob")) }
        do {
            _ = try config.publish(request(.etag(v1.etag), "bob"))
        } catch let c as PublishConflict {
            #expect(c.current.info.number == 2 && c.current.info.updateUser == "ana" && c.expectedETag == v1.etag)
        }
        // Forced: no precondition.
        let v3 = try config.publish(request(.any, "carol"))
        #expect(v3.info.number == 3)
        #expect(try config.auditRecords(limit: 10, before: nil).map(\.entry.version) == [3, 2, 1])
    }

    @Test func etagsAreUniquePerVersionAndNotDerivableFromContent() throws {
        let a = try StoreFixture("a")
        let b = try StoreFixture("b")
        let (_, ca) = try a.open()
        let (_, cb) = try b.open()
        // Same seed, same content, same time: the ETags still differ (random salt).
        #expect(try ca.current().template.strippingVersionInfo() == cb.current().template.strippingVersionInfo())
        #expect(try ca.current().etag != cb.current().etag)
        let path = a.writePath(ca)
        var etags = Set<String>()
        for n in 1...20 {
            _ = try path.execute(StoreFixture.request(.set(MicroPercent(percent: Int64(n % 2 == 0 ? 10 : 20)))))
        }
        for v in try ca.versions(limit: 100, before: nil) {
            #expect(v.etag.hasPrefix("etag-\(v.number)-") && v.etag.count == "etag-\(v.number)-".count + 16)
            etags.insert(v.etag)
        }
        #expect(etags.count == 21)
    }

    @Test func keepsEveryVersionBeyondFirebasesLimitAndPagesNewestFirst() throws {
        let f = try StoreFixture()
        let (_, config) = try f.open()
        let path = f.writePath(config)
        for n in 1...320 {
            f.clock.advance(by: .milliseconds(1_000))
            _ = try path.execute(StoreFixture.request(.set(MicroPercent(Int64(n) * 10_000))))
        }
        #expect(try config.current().info.number == 321)
        #expect(try config.version(1).info.description == "initial template")
        #expect(try StoreFixture.percentage(config) == MicroPercent(3_200_000))
        let page = try config.versions(limit: 5, before: 100)
        #expect(page.map(\.number) == [99, 98, 97, 96, 95])
        #expect(try config.versions(limit: 1000, before: nil).count == 321)
        #expect(throws: StoreError.noSuchVersion(400)) { try config.version(400) }
        let audit = try config.auditRecords(limit: 3, before: 10)
        #expect(audit.map(\.sequence) == [9, 8, 7])
        #expect(try config.verifyIntegrity().versions == 321)
    }

    @Test func survivesReopeningAndKeepsUnknownFieldsByteForByte() throws {
        let f = try StoreFixture()
        let unknownParameterJSON = try JSONParser().parse(
            #"{"defaultValue": {"value": "1"}, "valueType": "NUMBER", "futureField": {"nested": [1, 2.50, "x", 1e400]}}"#
        )
        do {
            let (_, config) = try f.open()
            var t = try config.current().template.strippingVersionInfo()
            t.setParameterJSON("Other", unknownParameterJSON)
            t.setMember("rolloutValues", ["keep": true])
            _ = try f.writePath(config).execute(
                WritePath.Request(intent: .importTemplate(t), actor: "ana", reason: "add", origin: "TEST"))
        }
        let (_, config) = try f.open(create: false)
        _ = try f.writePath(config).execute(StoreFixture.request(.nudge(MicroPercent(percent: 5))))
        let current = try config.current()
        #expect(current.info.number == 3)
        #expect(current.template.parameter("Other")?.json == unknownParameterJSON)
        #expect(current.template.parameter("Other")?.json.compactText.contains(#"[1,2.50,"x",1e400]"#) == true)
        #expect(current.template.json["rolloutValues"] == ["keep": true])
        #expect(try StoreFixture.percentage(config) == MicroPercent(percent: 5))
    }

    @Test func writePathOverSQLiteMatchesTheInMemoryStore() throws {
        let f = try StoreFixture()
        let (_, sqlite) = try f.open()
        let memory = InMemoryConfigStore(
            initial: try sqlite.current().template.strippingVersionInfo(), time: f.clock.now())
        let operations: [WritePath.Intent] = [
            .rollout(.set(MicroPercent(percent: 10))), .rollout(.nudge(MicroPercent(2_500_000))), .rollout(.kill),
            .rollout(.resume),
            .rollout(.nudge(MicroPercent(-500_000))), .rollback(toVersion: 2),
            .rollout(.set(MicroPercent(percent: 60))),
        ]
        for intent in operations {
            let request = WritePath.Request(intent: intent, actor: "ana", reason: "r", origin: "TEST")
            let a = try f.writePath(sqlite).execute(request)
            let b = try WritePath(store: memory, clock: f.clock, newSeed: { "unused" }).execute(request)
            guard case .published(let sa, let pa, _) = a, case .published(let sb, let pb, _) = b else {
                Issue.record("expected both to publish \(intent)")
                return
            }
            #expect(sa.template.strippingVersionInfo() == sb.template.strippingVersionInfo())
            #expect(sa.info.number == sb.info.number && sa.info.updateType == sb.info.updateType)
            #expect(pa.summary == pb.summary && pa.diff == pb.diff)
        }
        let sqliteAudit = try sqlite.auditRecords(limit: 100, before: nil).dropLast().map {
            [$0.entry.action, $0.entry.from, $0.entry.to]
        }
        let memoryAudit = try memory.auditRecords(limit: 100, before: nil).map {
            [$0.entry.action, $0.entry.from, $0.entry.to]
        }
        #expect(sqliteAudit == memoryAudit)
    }

    @Test func refusalsAndConflictsAreChainedIntoTheSameLog() throws {
        let f = try StoreFixture()
        let (_, config) = try f.open()
        let seen = try config.current().etag
        _ = try f.writePath(config).execute(StoreFixture.request(.set(MicroPercent(percent: 20)), actor: "bob"))
        var stale = StoreFixture.request(.nudge(MicroPercent(percent: 1)))
        stale.basedOnETag = seen
        #expect(throws: WritePath.Failure.self) { try f.writePath(config).execute(stale) }
        // A read-only session writes nothing, not even its refusal.
        #expect(throws: WritePath.Failure.self) {
            try f.writePath(config, readOnly: true).execute(StoreFixture.request(.kill))
        }
        let results = try config.auditRecords(limit: 10, before: nil).map(\.entry.result)
        #expect(results == [.conflict, .published, .published])
        let report = try config.verifyIntegrity()
        #expect(report.auditRecords == 3 && report.versions == 2 && report.headSequence == 3)
    }
}

struct RolloutStoreFileTests {
    @Test func createsPrivateDirectoryAndFiles() throws {
        let root = try TemporaryDirectory()
        let path = root.url.appendingPathComponent("a/b/rollout.db").path
        let store = try RolloutStore(path: path)
        _ = try store.configStore().initializeIfEmpty {
            try SQLiteConfigStore.genesis(seed: "s", actor: "t", time: Instant(microseconds: 0))
        }
        func mode(_ p: String) throws -> Int {
            let attributes = try FileManager.default.attributesOfItem(atPath: p)
            return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
        }
        #expect(try mode(root.url.appendingPathComponent("a").path) == 0o700)
        #expect(try mode(root.url.appendingPathComponent("a/b").path) == 0o700)
        #expect(try mode(path) == 0o600)
        #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        #expect(try mode(path + "-wal") == 0o600)
        #expect(try mode(path + "-shm") == 0o600)
        #expect(try store.database.query("PRAGMA journal_mode").first?.first?.string == "wal")
        #expect(try store.database.query("PRAGMA synchronous").first?.first?.int == 2)
    }

    @Test func refusesWhatIsNotARolloutStoreWithoutTouchingIt() throws {
        let root = try TemporaryDirectory()
        let text = root.url.appendingPathComponent("notes.txt").path
        let bytes = Data("hello, this is not a database\n".utf8)
        #expect(FileManager.default.createFile(atPath: text, contents: bytes))
        #expect {
            try RolloutStore(path: text)
        } throws: { e in "\(e)".contains("not an SQLite database") }
        #expect(FileManager.default.contents(atPath: text) == bytes)

        // Another application's SQLite database (rollback journal, its own table) is not switched to WAL.
        let foreign = root.url.appendingPathComponent("foreign.db").path
        do {
            let db = try SQLiteDatabase(path: foreign)
            try db.execute("PRAGMA journal_mode=DELETE; CREATE TABLE notes(x); INSERT INTO notes VALUES (1)")
        }
        let before = FileManager.default.contents(atPath: foreign)
        #expect {
            try RolloutStore(path: foreign)
        } throws: { e in "\(e)".contains("another application's SQLite database") }
        #expect(FileManager.default.contents(atPath: foreign) == before)
        #expect(!FileManager.default.fileExists(atPath: foreign + "-wal"))

        #expect {
            try RolloutStore(path: root.url.appendingPathComponent("missing.db").path, create: false)
        } throws: { e in "\(e)".contains("no store at") }
        #expect(!FileManager.default.fileExists(atPath: root.url.appendingPathComponent("missing.db").path))
        #expect(throws: StoreError.self) { try RolloutStore(path: root.url.path) }
    }

    @Test func otherDomainsShareTheFileThroughTheDatabase() throws {
        let f = try StoreFixture()
        let (store, config) = try f.open()
        try store.withDatabase { db in
            try db.execute("CREATE TABLE IF NOT EXISTS telemetry_example (n INTEGER)")
            try db.run("INSERT INTO telemetry_example VALUES (?)", [.integer(7)])
        }
        #expect(try config.verifyIntegrity().versions == 1)
        let (again, _) = try f.open(create: false)
        #expect(try again.database.query("SELECT n FROM telemetry_example").first?.first?.int == 7)
    }
}
