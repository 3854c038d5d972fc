import Foundation
@testable import PostgresStore
import RemoteConfig
import Rollout
import StoreConformance
import Testing
import TestSupport
import Timekeeping

/// The PostgreSQL store on a real server (see `PostgresServer`): the ports' conformance suite, many
/// connections writing through the write path at once, read-only transactions, migrations and NOTIFY.
struct PostgresStoreTests {
    static let t0 = Instant(seconds: 1_780_000_000)

    static func genesis(seed: String) throws -> PublishRequest {
        PublishRequest(
            template: try RolloutPlan.initialTemplate(seed: seed), ifMatch: .any, updateUser: "init@test",
            updateOrigin: "ROLLOUT_INIT", updateType: .incremental, description: "initial template", time: t0,
            audit: AuditEntry(time: t0, actor: "init@test", action: "init", result: .published, detail: "seed \(seed)"))
    }

    static func freshStore(seed: String = "pg-seed") throws -> (PostgresConfigStore, String) {
        let conninfo = try PostgresServer.get().freshDatabase()
        return (try PostgresConfigStore.create(conninfo: conninfo) { try genesis(seed: seed) }, conninfo)
    }

    @Test(arguments: ConfigStoreConformance.checks.map(\.name))
    func conformance(_ check: String) throws {
        var stores: [PostgresConfigStore] = []
        let factory: ConfigStoreConformance.Factory = { seed in
            let (store, _) = try Self.freshStore(seed: seed)
            stores.append(store)
            return store
        }
        try ConfigStoreConformance.checks.first { $0.name == check }!.run(factory)
        for store in stores { _ = try store.verify() }
    }

    /// The server ends the store's idle session (an administrator's `pg_terminate_backend`, a failover, an idle
    /// timeout): the next change is not refused with the server's goodbye, it runs on a new session, once.
    @Test func aSessionTheServerEndedWhileIdleDoesNotFailTheNextChange() throws {
        let (store, conninfo) = try Self.freshStore()
        let path = WritePath(store: store, clock: ManualClock(Self.t0), newSeed: { "unused" })
        let start = WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@test", reason: "start", origin: "TEST")
        guard case .published = try path.execute(start) else { throw TestSupport.Failure("the set published nothing") }
        let before = try store.current().info.number
        let server = try PostgresServer.get()
        #expect(try server.terminateSessions(of: conninfo) >= 1, "the store had a session to end")
        // The ended session is gone from the server (bounded wait) before the change is asked.
        let probe = try PGConnection(conninfo)
        let deadline = Date().addingTimeInterval(20)
        while try probe.query("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
            .first?.first ?? nil != "0", Date() < deadline
        {
            usleep(10_000)
        }
        let kill = WritePath.Request(intent: .rollout(.kill), actor: "ana@test", reason: "stop", origin: "TEST")
        guard case .published(let stored, _, _) = try path.execute(kill) else {
            Issue.record("the kill published nothing")
            return
        }
        #expect(stored.info.number == before + 1)
        #expect(try store.verify().versions == before + 1)
    }

    /// Eight connections (as eight processes would have) each nudge +0.1 25 times with --retry through the one
    /// write path: exactly +20 points, one version per nudge, contiguous, chain intact.
    @Test func concurrentNudgesThroughTheWritePath() throws {
        let (store, conninfo) = try Self.freshStore()
        let setup = WritePath(store: store, clock: ManualClock(Self.t0), newSeed: { "unused" })
        var start = WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 10))), actor: "ana@test", reason: "start", origin: "TEST")
        start.retryOnConflict = false
        _ = try setup.execute(start)
        let writers = 8
        let nudges = 25
        let errors = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        DispatchQueue.concurrentPerform(iterations: writers) { w in
            do {
                let mine = try PostgresConfigStore(conninfo: conninfo)
                let path = WritePath(store: mine, clock: ManualClock(Self.t0), newSeed: { "unused" })
                for _ in 0..<nudges {
                    var r = WritePath.Request(
                        intent: .rollout(.nudge(MicroPercent(MicroPercent.perPercent / 10))), actor: "w\(w)@test", reason: "burst",
                        origin: "TEST")
                    r.retryOnConflict = true
                    guard case .published = try path.execute(r) else { throw TestSupport.Failure("a nudge published nothing") }
                }
            } catch {
                errors.withLock { failures.append("writer \(w): \(error)") }
            }
        }
        #expect(failures.isEmpty, "\(failures)")
        let current = try store.current()
        #expect(current.info.number == 2 + writers * nudges)
        #expect(try RolloutPlan.locate(in: current.template)?.percentage == MicroPercent(percent: 10 + Int64(writers * nudges / 10)))
        let numbers = try store.versions(limit: 1000, before: nil).map(\.number)
        #expect(numbers == Array((1...(2 + writers * nudges)).reversed()))
        let report = try store.verify()
        #expect(report.versions == 2 + writers * nudges && report.auditRecords == 2 + writers * nudges)
    }

    /// `--read-only`: the server refuses every write (the transaction is READ ONLY), not only our checks.
    @Test func readOnlyConnectionRefusesWrites() throws {
        let (store, conninfo) = try Self.freshStore()
        let reader = try PostgresConfigStore(conninfo: conninfo, readOnly: true)
        let base = try reader.current()
        #expect(base.info.number == 1)
        #expect(throws: PostgresStoreError.self) { try reader.appendAudit(AuditEntry(time: Self.t0, actor: "a", action: "x", result: .refusedByPolicy)) }
        // Past the adapter's own check, straight to the server: refused by the read-only transaction.
        do {
            _ = try reader.atomically { try reader.connection.query("INSERT INTO config_head (id, version, audit_sequence, audit_hash) VALUES (2, 0, 0, '')") }
            Issue.record("the read-only connection wrote")
        } catch let e as PostgresStoreError {
            #expect("\(e)".contains("read-only"))
        }
        let direct = Result { () throws -> Void in _ = try reader.connection.query("UPDATE config_head SET version = 7") }
        switch direct {
        case .success: Issue.record("an autocommit write on the read-only connection went through")
        case .failure(let e): #expect((e as? PostgresError)?.isReadOnlyRefusal == true, "\(e)")
        }
        // The write path refuses before anything (exit 4 in the CLI).
        let path = WritePath(store: reader, clock: ManualClock(Self.t0), readOnly: reader.isReadOnly, newSeed: { "x" })
        #expect(throws: WritePath.Failure.self) {
            try path.execute(WritePath.Request(intent: .rollout(.kill), actor: "a", origin: "TEST"))
        }
        #expect(try store.verify().auditRecords == 1)
        #expect(try store.current().info.number == 1)
    }

    /// A pipeline answers each statement in order, in one transaction sees each statement's effect in the
    /// next, and on a failure throws the first error (not the skipped statements'), leaves the transaction
    /// aborted and the connection usable.
    @Test func pipelineRunsStatementsInOrderAndStopsAtTheFirstFailure() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        try c.execute("CREATE TABLE p (n INTEGER PRIMARY KEY)")
        let answers = try c.pipeline([
            ("BEGIN", []), ("INSERT INTO p VALUES ($1), ($2)", ["1", "2"]), ("SELECT n FROM p ORDER BY n", []),
            ("SELECT $1::text || 'b'", ["a"]), ("COMMIT", []),
        ])
        #expect(answers.count == 5)
        #expect(answers[2] == [["1"], ["2"]] && answers[3] == [["ab"]])
        #expect {
            try c.pipeline([("BEGIN", []), ("INSERT INTO p VALUES (3)", []), ("INSERT INTO p VALUES (1)", []), ("INSERT INTO p VALUES (4)", [])])
        } throws: { ($0 as? PostgresError)?.sqlState == "23505" }
        #expect(throws: PostgresError.self) { try c.query("SELECT 1") }  // the transaction is aborted
        try c.execute("ROLLBACK")
        #expect(try c.query("SELECT n FROM p ORDER BY n") == [["1"], ["2"]])
        #expect(try c.pipeline([]).isEmpty)
    }

    /// A binary `bytea` parameter arrives as exactly its bytes (every byte value, NUL and backslash included, and
    /// the empty value), beside text parameters and NULLs in the same statement, after deferred statements and
    /// through a prepared statement too.
    @Test func binaryByteaParametersArriveAsTheirBytes() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        let all = (0...255).map { UInt8($0) } + [0, 92, 0]
        let hex = all.map { String(format: "%02x", $0) }.joined()
        let sql = "SELECT encode($1::bytea, 'hex'), length($1::bytea), $2::text, $3::text IS NULL, encode($4::bytea, 'hex')"
        c.deferUntilNextRoundTrip([("SELECT 1", [])])
        let answers = try c.pipeline(statements: [PGStatement(sql, [nil, "t", nil, nil], binary: [0: all, 3: []])])
        #expect(answers == [[[hex, String(all.count), "t", "t", ""]]])
        try c.prepare(sql)
        let prepared = try c.pipeline(statements: [PGStatement(sql, [nil, "u", "x", nil], binary: [0: [7, 0, 92], 3: [1]])])
        #expect(prepared == [[["07005c", "3", "u", "f", "01"]]])
    }

    /// A statement sent with `prepare` is prepared in the round trip that first sends it (no round trip of its
    /// own) and run by name from then on; one the server refuses is thrown and prepared again next time, while a
    /// statement prepared before the failure in the same round trip stays prepared.
    @Test func statementsArePreparedInTheRoundTripThatFirstSendsThem() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        let add = "SELECT $1::int + 1"
        let twice = "SELECT $1::text || $1::text"
        let trips = c.roundTrips
        let first = try c.pipeline(statements: [
            PGStatement(add, ["1"], prepare: true), PGStatement(twice, ["a"], prepare: true), PGStatement(add, ["2"], prepare: true),
        ])
        #expect(first == [[["2"]], [["aa"]], [["3"]]])
        #expect(c.roundTrips == trips + 1)
        let preparedOnServer = "SELECT statement FROM pg_prepared_statements ORDER BY name"
        #expect(try c.query(preparedOnServer) == [[add], [twice]])
        #expect(try c.query(twice, ["ab"]) == [["abab"]])
        let bad = "SELECT nothing FROM nowhere_at_all WHERE $1::int = 1"
        let after = "SELECT $1::int * 2"
        #expect(throws: PostgresError.self) {
            try c.pipeline(statements: [PGStatement(after, ["4"], prepare: true), PGStatement(bad, ["1"], prepare: true)])
        }
        #expect(try c.query(preparedOnServer) == [[add], [twice], [after]])
        #expect(try c.pipeline(statements: [PGStatement(after, ["21"], prepare: true)]) == [[["42"]]])
        #expect(throws: PostgresError.self) { try c.pipeline(statements: [PGStatement(bad, ["1"], prepare: true)]) }
        try c.execute("CREATE TABLE nowhere_at_all (nothing int)")
        #expect(try c.pipeline(statements: [PGStatement(bad, ["1"], prepare: true)]) == [[]])
        #expect(try c.query(preparedOnServer) == [[add], [twice], [after], [bad]])
    }

    /// A statement sent with `syncAfter` runs, with those before it, as an implicit transaction of its own, ended
    /// before the next statement of the round trip starts: a REPEATABLE READ transaction can begin after it in the
    /// same round trip (its snapshot taken after the read), and a failure before the sync point skips only the
    /// statements before it while the call still throws it.
    @Test func aSyncPointEndsTheStatementsBeforeItInTheirOwnTransaction() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        try c.execute("CREATE TABLE s (n INTEGER PRIMARY KEY); INSERT INTO s VALUES (1)")
        let trips = c.roundTrips
        let rows = try c.pipeline(statements: [
            PGStatement("SELECT count(*) FROM s", [], prepare: true, syncAfter: true),
            PGStatement("BEGIN ISOLATION LEVEL REPEATABLE READ", []), PGStatement("INSERT INTO s VALUES (2)", []),
            PGStatement("SELECT count(*) FROM s", []),
        ])
        #expect(rows == [[["1"]], [], [], [["2"]]])
        #expect(c.roundTrips == trips + 1)
        try c.execute("ROLLBACK")
        #expect(throws: PostgresError.self) {
            try c.pipeline(statements: [
                PGStatement("SELECT nothing FROM nowhere_at_all", [], syncAfter: true),
                PGStatement("INSERT INTO s VALUES (3)", []),
            ])
        }
        #expect(try c.query("SELECT n FROM s ORDER BY n") == [["1"], ["3"]])
    }

    /// Statements deferred to the next round trip go first in it, in order, and everything sent after them sees
    /// them; a failure among them is thrown by that call, which then runs none of its own statements; a rollback
    /// drops what is still queued.
    @Test func deferredStatementsGoWithTheNextRoundTrip() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        try c.execute("CREATE TABLE d (n INTEGER PRIMARY KEY)")
        let trips = c.roundTrips
        c.deferUntilNextRoundTrip([("BEGIN", []), ("INSERT INTO d VALUES ($1)", ["1"]), ("INSERT INTO d VALUES (2)", [])])
        #expect(c.roundTrips == trips && c.hasDeferred)
        #expect(try c.query("SELECT n FROM d ORDER BY n") == [["1"], ["2"]])
        #expect(c.roundTrips == trips + 1 && !c.hasDeferred)
        c.deferUntilNextRoundTrip([("INSERT INTO d VALUES (3)", [])])
        try c.execute("COMMIT")
        #expect(c.roundTrips == trips + 2)
        #expect(try c.query("SELECT count(*) FROM d") == [["3"]])
        // A failing deferred statement: the next call throws it and runs nothing of its own.
        c.deferUntilNextRoundTrip([("BEGIN", []), ("INSERT INTO d VALUES (1)", [])])
        #expect { try c.pipeline([("INSERT INTO d VALUES (4)", []), ("COMMIT", [])]) } throws: {
            ($0 as? PostgresError)?.sqlState == "23505"
        }
        try c.execute("ROLLBACK")
        #expect(try c.query("SELECT count(*) FROM d") == [["3"]])
        // Dropped by a rollback: never sent.
        c.deferUntilNextRoundTrip([("INSERT INTO d VALUES (5)", [])])
        #expect(c.discardDeferred().count == 1)
        #expect(try c.query("SELECT count(*) FROM d") == [["3"]])
    }

    /// Schema 12: the installation blocks' pages keep room for a block's next version (heap-only updates by a batch).
    @Test func installationsKeepRoomForHeapOnlyUpdates() throws {
        let (_, conninfo) = try Self.freshStore()
        let options = try PGConnection(conninfo).query("SELECT reloptions FROM pg_class WHERE relname = 'telemetry_installation_blocks'")
        #expect(options == [["{fillfactor=50}"]])
    }

    @Test func schemaMigrationsAreExplicitAndForwardOnly() throws {
        let server = try PostgresServer.get()
        // An empty database is not a store, and opening it creates nothing.
        let empty = try server.freshDatabase()
        #expect(throws: StoreError.self) { try PostgresConfigStore(conninfo: empty) }
        #expect(try PostgresSchema.version(PGConnection(empty)) == nil)
        // An older schema asks for `store migrate`, which applies the missing steps once.
        let old = try server.freshDatabase()
        try PGConnection(old).execute("CREATE TABLE rollout_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        do {
            _ = try PostgresConfigStore(conninfo: old)
            Issue.record("an older schema opened")
        } catch let e as StoreError {
            #expect("\(e)".contains("store migrate"))
        }
        #expect(try PostgresSchema.migrate(conninfo: old) == Array(1...PostgresSchema.current))
        #expect(try PostgresSchema.migrate(conninfo: old) == [])
        _ = try PostgresConfigStore(conninfo: old)
        // A newer schema is refused by open and by migrate, and migrate changes nothing.
        let (_, newer) = try Self.freshStore()
        try PGConnection(newer).query("INSERT INTO rollout_schema (version) VALUES ($1)", [String(PostgresSchema.current + 1)])
        #expect(throws: StoreError.self) { try PostgresConfigStore(conninfo: newer) }
        #expect(throws: PostgresSchemaError.newer(found: PostgresSchema.current + 1, supported: PostgresSchema.current)) {
            try PostgresSchema.migrate(conninfo: newer)
        }
        // init refuses a database that already holds a store.
        let (_, existing) = try Self.freshStore()
        #expect(throws: StoreError.self) { try PostgresConfigStore.create(conninfo: existing) { try Self.genesis(seed: "again") } }
    }

    @Test func publishNotifiesListeners() throws {
        let (store, conninfo) = try Self.freshStore()
        let listener = try PostgresChangeListener(conninfo: conninfo)
        #expect(try listener.waitForChange(timeout: 0.2) == nil)
        let other = try PostgresConfigStore(conninfo: conninfo)
        let base = try other.current()
        _ = try other.publish(
            PublishRequest(
                template: try RolloutPlan.apply(.set(MicroPercent(percent: 5)), to: base.template.strippingVersionInfo(), newSeed: "x").template,
                ifMatch: .etag(base.etag), updateUser: "bob@test", updateOrigin: "TEST", updateType: .incremental, description: "go",
                time: Self.t0, audit: AuditEntry(time: Self.t0, actor: "bob@test", action: "set", result: .published)))
        #expect(try listener.waitForChange(timeout: 10) == 2)
        // A refusal or audit-only write is not a publish: no notification.
        _ = try store.appendAudit(AuditEntry(time: Self.t0, actor: "a", action: "kill", result: .refusedByPolicy))
        #expect(try listener.waitForChange(timeout: 0.3) == nil)
    }

    @Test func tamperingIsFoundByVerify() throws {
        let (store, conninfo) = try Self.freshStore()
        let admin = try PGConnection(conninfo)
        try admin.query("UPDATE config_versions SET description = 'edited' WHERE number = 1")
        #expect(throws: StoreError.self) { try store.verify() }
        try admin.query("UPDATE config_versions SET description = 'initial template' WHERE number = 1")
        _ = try store.verify()
        try admin.query("UPDATE config_audit SET actor = 'mallory' WHERE sequence = 1")
        #expect(throws: StoreError.self) { try store.verify() }
    }
}
