import Crypto
import Foundation
@testable import PostgresStore
import RemoteConfig
import Rollout
import StepUp
import SQLiteStore
import StoreConformance
import StoreSupport
import Telemetry
import Testing
import TestSupport
import Timekeeping

/// The write path's other ports on a real PostgreSQL server: step-up (the shared conformance checks, secrets
/// encrypted at rest, one code accepted once across connections), guardrail settings, and telemetry (the same
/// figures as the SQLite store for the same batches, and many ingesting connections at once).
struct PostgresTeamTablesTests {
    static let t0 = Instant(seconds: 1_780_000_020)

    static func keyFile() throws -> StoreKey {
        let dir = try TestSupport.temporaryDirectory("pg-key")
        return try StoreKey.create(dir.appendingPathComponent("team.key").path)
    }

    // MARK: Step-up

    @Test func stepUpStorePassesTheConformanceSuite() throws {
        let key = try Self.keyFile()
        try StepUpStoreConformance.all { record in
            let (store, _) = try PostgresStoreTests.freshStore()
            let stepUp = PostgresStepUpStore(store: store, key: key)
            try stepUp.save(record)
            return stepUp
        }
    }

    @Test func secretsAreEncryptedAtRestAndNeedTheTeamKey() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let key = try Self.keyFile()
        let ana = OperatorRecord(id: try OperatorID("ana@test"), secret: .generate(), enrolledAt: Self.t0)
        try PostgresStepUpStore(store: store, key: key).save(ana)
        let raw = try #require(try PGConnection(conninfo).query("SELECT encode(secret, 'hex') FROM stepup_operators").first?.first ?? nil)
        #expect(!raw.contains(Hex.encode(ana.secret.bytes)))
        // Another team's key and no key are both named, never a garbled secret.
        let other = PostgresStepUpStore(store: try PostgresConfigStore(conninfo: conninfo), key: try Self.keyFile())
        #expect { try other.operatorRecord(ana.id) } throws: { "\($0)".contains("not this PostgreSQL store's key") }
        let none = PostgresStepUpStore(store: try PostgresConfigStore(conninfo: conninfo), key: nil)
        #expect { try none.operatorRecord(ana.id) } throws: { "\($0)".contains("ROLLOUT_STORE_KEY") }
        #expect(try PostgresStepUpStore(store: try PostgresConfigStore(conninfo: conninfo), key: key).operatorRecord(ana.id)?.secret == ana.secret)
    }

    /// Eight connections present the same current code at once: exactly one is accepted (the head lock orders
    /// them, and each sees the accepted step of the one before).
    @Test func oneCodeIsAcceptedOnceAcrossConnections() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let key = try Self.keyFile()
        let ana = OperatorRecord(id: try OperatorID("ana@test"), secret: .generate(), enrolledAt: Self.t0)
        try PostgresStepUpStore(store: store, key: key).save(ana)
        let code = TOTP.standard.code(secret: ana.secret, at: Self.t0)
        let lock = NSLock()
        nonisolated(unsafe) var verdicts: [String] = []
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let verdict: String
            do {
                let mine = PostgresStepUpStore(store: try PostgresConfigStore(conninfo: conninfo), key: key)
                let d = try mine.authorize(StepUpChange(.rollback), by: ana.id, code: code, at: ManualClock(Self.t0)) { _ in }
                verdict = "\(d.verdict)"
            } catch {
                verdict = "error \(error)"
            }
            lock.withLock { verdicts.append(verdict) }
        }
        #expect(verdicts.filter { $0 == "accepted" }.count == 1, "\(verdicts)")
        #expect(verdicts.filter { $0 == "refused" }.count == 7, "\(verdicts)")
    }

    /// The step-up policy of the write path on PostgreSQL: an increase past the policy needs a code; the refused
    /// attempt and the accepted one are audited in the store's chain.
    @Test func writePathOnPostgresRunsTheStepUpPolicy() throws {
        let (store, _) = try PostgresStoreTests.freshStore()
        let key = try Self.keyFile()
        let stepUp = PostgresStepUpStore(store: store, key: key)
        let ana = OperatorRecord(id: try OperatorID("ana@test"), secret: .generate(), enrolledAt: Self.t0)
        try stepUp.save(ana)
        let clock = ManualClock(Self.t0)
        let path = WritePath(store: store, clock: clock, policies: [StepUpWritePolicy(store: stepUp, clock: clock)], newSeed: { "x" })
        var request = WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 50))), actor: "ana@test", reason: "go", origin: "TEST")
        #expect(throws: WritePath.Failure.self) { try path.execute(request) }
        #expect(try store.current().info.number == 1)
        request.stepUpCode = TOTP.standard.code(secret: ana.secret, at: Self.t0)
        guard case .published = try path.execute(request) else { Issue.record("not published"); return }
        #expect(try RolloutPlan.locate(in: store.current().template)?.percentage == MicroPercent(percent: 50))
        let results = try store.auditRecords(limit: 10, before: nil).reversed().map(\.entry.result)
        #expect(results == [.published, .stepUpRefused, .refusedByPolicy, .stepUpAccepted, .published])
        _ = try store.verify()
    }

    // MARK: Guardrail settings

    @Test func guardrailSettingsRoundTripAndReadOnlyIsRefused() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let settings = PostgresGuardrailSettings(store: store)
        #expect(try settings.guardrailSettings() == GuardrailSettings())
        try settings.saveGuardrailSetting("guardrails.auto-kill", "on")
        var expected = GuardrailSettings()
        try expected.set("guardrails.auto-kill", "on")
        #expect(try PostgresGuardrailSettings(store: try PostgresConfigStore(conninfo: conninfo)).guardrailSettings() == expected)
        #expect(throws: (any Error).self) { try settings.saveGuardrailSetting("guardrails.auto-kill", "sometimes") }
        let reader = PostgresGuardrailSettings(store: try PostgresConfigStore(conninfo: conninfo, readOnly: true))
        #expect(try reader.guardrailSettings() == expected)
        #expect(throws: PostgresStoreError.self) { try reader.saveGuardrailSetting("guardrails.auto-kill", "off") }
        #expect(try settings.guardrailSettings() == expected)
    }

    // MARK: Telemetry

    static func event(
        _ seconds: Int64, _ id: String, _ kind: TelemetryEventKind, _ cohort: Cohort, provider: AttestationProvider = .appAttest
    ) -> TelemetryEvent {
        TelemetryEvent(
            time: t0 + .seconds(seconds), installationID: id, kind: kind, cohort: cohort, provider: provider, osVersion: "17.4",
            appVersion: "3.2.1")
    }

    /// Lands `batches` from `writers` connections at once, each batch by exactly one writer (handed out in order
    /// under a lock), batch m as source "m<m>" at minute m; answers the writers' failures (none when all landed).
    static func land(_ batches: [TelemetryBatch], writers: Int, on conninfo: String) -> [String] {
        nonisolated(unsafe) let batches = batches
        let lock = NSLock()
        nonisolated(unsafe) var failures: [String] = []
        nonisolated(unsafe) var next = 0
        DispatchQueue.concurrentPerform(iterations: writers) { w in
            do {
                let mine = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
                while true {
                    let m: Int? = lock.withLock {
                        guard next < batches.count else { return nil }
                        next += 1
                        return next - 1
                    }
                    guard let m else { break }
                    try mine.commit(batches[m], source: "m\(m)", at: t0 + .minutes(Int64(m)))
                }
            } catch {
                lock.withLock { failures.append("writer \(w): \(error)") }
            }
        }
        return failures
    }

    /// `minutes` of a small rollout: sessions, crashes leaning to the exposed side, attestation successes and
    /// failures (two rejection reasons), config fetches; ids with quotes and backslashes.
    static func traffic(minutes: Range<Int64>, salt: UInt64 = 11) -> [TelemetryBatch] {
        var rng = SplitMix64(state: salt)
        return minutes.map { m in
            let b = TelemetryBatch()
            for i in 0..<40 {
                let cohort: Cohort = i % 2 == 0 ? .enabled : .control
                let id = i % 7 == 0 ? "i\"\\\(i)-\(m / 10)" : "i\(i)-\(m / 10)"
                let s = m * 60 + Int64(i)
                b.record(event(s, id, .sessionStart, cohort))
                if rng.uniform() < (cohort == .enabled ? 0.3 : 0.1) { b.record(event(s + 1, id, .crash(fatal: true), cohort)) }
                if cohort == .enabled {
                    let r = rng.uniform()
                    b.record(
                        event(
                            s + 2, id,
                            r < 0.85
                                ? .attestationSuccess
                                : r < 0.93 ? .attestationFailure(.rejected(reason: "badChain")) : .attestationFailure(.rejected(reason: "stale\"nonce")),
                            cohort))
                }
                if i % 5 == 0 { b.record(event(s + 3, id, .configFetch(templateVersion: 2 + m / 10), cohort)) }
            }
            return b
        }
    }

    static func sqliteTables() throws -> TelemetryTables {
        let dir = try TestSupport.temporaryDirectory("pg-telemetry-ref")
        return try TelemetryTables(database: SQLiteDatabase(path: dir.appendingPathComponent("ref.db").path))
    }

    static func expectSame(_ a: TelemetrySnapshot, _ b: TelemetrySnapshot, _ label: String) {
        #expect(a.totals == b.totals, "\(label): totals")
        #expect(a.preRollout == b.preRollout, "\(label): preRollout")
        #expect(a.windows == b.windows, "\(label): windows")
        #expect(a.series == b.series, "\(label): series")
        #expect(a.currentMinute == b.currentMinute, "\(label): current minute")
        #expect(a.crash == b.crash, "\(label): crash")
        #expect(a.failureMonitors == b.failureMonitors, "\(label): failure monitors")
        #expect(a.activity == b.activity, "\(label): activity")
        #expect(a.fetchedVersions == b.fetchedVersions, "\(label): fetched versions")
        #expect(a.newestEvent == b.newestEvent && a.lastBatchAt == b.lastBatchAt && a.settledThrough == b.settledThrough, "\(label): times")
    }

    /// The same batches landed in the SQLite store and in PostgreSQL give the same dashboard at every refresh,
    /// with late data, and the same installation records and reason catalog.
    @Test func telemetryAgreesWithTheSQLiteStore() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let pg = PostgresTelemetry(store: store)
        let ref = try Self.sqliteTables()
        let config = WatchConfiguration(since: Self.t0)
        let batches = Self.traffic(minutes: 0..<30)
        // Minutes 10..<30 first, then 0..<10 late.
        for (m, b) in Array(batches.enumerated().dropFirst(10)) + Array(batches.enumerated().prefix(10)) {
            let at = Self.t0 + .minutes(Int64(m) + 1)
            let receipt = try #require(try pg.commit(b, source: "m\(m)", at: at))
            let refReceipt = try #require(try ref.commit(b, source: "m\(m)", at: at))
            #expect(receipt.events == refReceipt.events && receipt.installations == refReceipt.installations)
            let now = at + .seconds(Int64(30))
            Self.expectSame(try pg.snapshot(config, now: now), try ref.snapshot(config, now: now), "after minute \(m)")
        }
        let later = Self.t0 + .minutes(45)
        Self.expectSame(try pg.snapshot(config, now: later), try ref.snapshot(config, now: later), "warm")
        Self.expectSame(
            try PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo)).snapshot(config, now: later),
            try ref.snapshot(config, now: later), "cold")
        #expect(try pg.allTimeTotals() == (try ref.allTimeTotals()))
        #expect(try pg.installationCount() == (try ref.installationCount()))
        for id in ["i1-0", "i\"\\7-2", "i38-2", "missing"] { #expect(try pg.installation(id) == (try ref.installation(id)), "\(id)") }
        var reasons: [String: Int64] = [:]
        for (d, n) in try pg.allTimeTotals().failuresByDetail() { reasons[try pg.describe(d)] = n }
        var refReasons: [String: Int64] = [:]
        for (d, n) in try ref.allTimeTotals().failuresByDetail() { refReasons[try ref.describe(d)] = n }
        #expect(reasons == refReasons && reasons.keys.contains("rejected:stale\"nonce"))
        #expect(try pg.batches().map(\.id) == Array(1...30))
        #expect(try pg.newestEvent() == (try ref.newestEvent()))
        #expect(try pg.commit(TelemetryBatch(), source: "empty", at: later) == nil)
    }

    /// Six connections land 60 batches at once, sharing installations and reasons. Batch ids are 1...60 in
    /// commit order, and the store holds exactly what landing the same batches one after another in that order
    /// gives the SQLite store: counters, installation records, reasons, and the whole dashboard.
    @Test func manyIngestingConnectionsAtOnce() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let batches = Self.traffic(minutes: 0..<60, salt: 5)
        let failures = Self.land(batches, writers: 6, on: conninfo)
        #expect(failures.isEmpty, "\(failures)")
        let pg = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
        let landed = try pg.batches()
        #expect(landed.map(\.id) == Array(1...60))
        #expect(Set(landed.map(\.source)).count == 60)
        // The reference: the same batches, one after another, in PostgreSQL's commit order.
        let ref = try Self.sqliteTables()
        for receipt in landed {
            let m = try #require(Int(receipt.source.dropFirst()))
            try ref.commit(batches[m], source: receipt.source, at: receipt.committedAt)
        }
        #expect(try pg.allTimeTotals() == (try ref.allTimeTotals()))
        #expect(try pg.installationCount() == (try ref.installationCount()))
        for i in 0..<40 {
            for g in 0..<6 {
                let id = i % 7 == 0 ? "i\"\\\(i)-\(g)" : "i\(i)-\(g)"
                #expect(try pg.installation(id) == (try ref.installation(id)), "\(id)")
            }
        }
        let config = WatchConfiguration(since: Self.t0)
        let now = Self.t0 + .minutes(61)
        Self.expectSame(try pg.snapshot(config, now: now), try ref.snapshot(config, now: now), "after the burst")
    }

    /// Every installation of a store, by id.
    static func installations(_ read: ((String, InstallationRecord) throws -> Void) throws -> Void) throws -> [String: InstallationRecord] {
        var out: [String: InstallationRecord] = [:]
        try read { id, r in
            #expect(out[id] == nil, "\(id) stored twice")
            out[id] = r
        }
        return out
    }

    /// Schema 12: a store whose installations are rows (schema 11, as PostgreSQL stored them before blocks)
    /// migrates with the same answers: every installation record, their count and the dashboard, as the SQLite
    /// store holds them; the rows table is left empty, and batches after the migration land as on the SQLite store.
    /// The rows move in chunks (here 7 at a time), each merged into the blocks the chunks before made.
    @Test(arguments: [20_000, 7])
    func installationRowsMigrateToBlocks(chunk: Int) throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let pg = PostgresTelemetry(store: store)
        let ref = try Self.sqliteTables()
        let batches = Self.traffic(minutes: 0..<40)
        for (m, b) in batches.enumerated().prefix(30) {
            try pg.commit(b, source: "m\(m)", at: Self.t0 + .minutes(Int64(m) + 1))
            try ref.commit(b, source: "m\(m)", at: Self.t0 + .minutes(Int64(m) + 1))
        }
        // Back to schema 11: the installations as rows, the blocks gone (and step 13's column on the sources).
        let rows = try Self.installations(ref.forEachInstallation)
        #expect(rows.count == 120)
        let owner = try PGConnection(conninfo)
        try owner.execute("SET client_min_messages = warning; SET bytea_output = hex")
        try owner.execute(
            "DROP TABLE telemetry_installation_blocks; ALTER TABLE source_state DROP COLUMN reads; "
                + "DELETE FROM rollout_schema WHERE version >= 12")
        for (id, r) in rows {
            try owner.query(
                "INSERT INTO telemetry_installations (\(PostgresTelemetry.legacyInstallationColumns)) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)",
                [
                    id, String(r.firstSeen), String(r.lastSeen), String(r.cohort.code), String(r.provider.rawValue), String(r.osMajor),
                    String(r.sessions), String(r.enteredCohorts), String(r.crashedCohorts), r.fetchedAt.map { String($0) },
                    r.templateVersion.map { String($0) }, r.lastCrashAt.map { String($0) },
                ])
        }
        #expect(throws: (any Error).self) { try PostgresConfigStore(conninfo: conninfo) }
        if chunk == 20_000 {
            #expect(try PostgresSchema.migrate(conninfo: conninfo) == [12, 13])
        } else {
            try owner.execute("BEGIN")
            try owner.execute(PostgresSchema.migrations[11])
            try PostgresTelemetry.moveInstallationsToBlocks(owner, chunk: chunk)
            try owner.query("INSERT INTO rollout_schema (version) VALUES (12)")
            try owner.execute("COMMIT")
            #expect(try PostgresSchema.migrate(conninfo: conninfo) == [13])
        }
        #expect(try owner.query("SELECT count(*) FROM telemetry_installations") == [["0"]])
        let migrated = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
        #expect(try Self.installations(migrated.forEachInstallation) == rows)
        #expect(try migrated.installationCount() == rows.count)
        for id in ["i1-0", "i\"\\7-2", "i38-2", "missing"] { #expect(try migrated.installation(id) == (try ref.installation(id)), "\(id)") }
        let config = WatchConfiguration(since: Self.t0)
        Self.expectSame(
            try migrated.snapshot(config, now: Self.t0 + .minutes(31)), try ref.snapshot(config, now: Self.t0 + .minutes(31)), "migrated")
        for (m, b) in batches.enumerated().dropFirst(30) {
            try migrated.commit(b, source: "m\(m)", at: Self.t0 + .minutes(Int64(m) + 1))
            try ref.commit(b, source: "m\(m)", at: Self.t0 + .minutes(Int64(m) + 1))
        }
        #expect(try Self.installations(migrated.forEachInstallation) == (try Self.installations(ref.forEachInstallation)))
        #expect(try migrated.allTimeTotals() == (try ref.allTimeTotals()))
        Self.expectSame(
            try migrated.snapshot(config, now: Self.t0 + .minutes(41)), try ref.snapshot(config, now: Self.t0 + .minutes(41)), "after")
    }

    /// Four writers at once on batches of the bench's shape (thousands of installations, so blocks fill and split
    /// while others write): the counters and every installation record are exactly what landing the same batches
    /// one after another, in PostgreSQL's commit order, gives the SQLite store.
    @Test func fourWritersKeepExactCountsWhileBlocksSplit() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let batches = (0..<12).map { b -> TelemetryBatch in
            let out = TelemetryBatch()
            var rng = SplitMix64(state: UInt64(b + 1))
            for e in 0..<3_000 {
                // New installations arrive with every batch (ids after and between the stored ones).
                let installation = "w-\(Int(rng.uniform() * Double(400 + b * 150)))"
                let r = rng.uniform()
                let kind: TelemetryEventKind =
                    r < 0.1 ? .crash(fatal: true) : r < 0.2 ? .attestationFailure(.serverUnavailable) : r < 0.3 ? .configFetch(templateVersion: 3)
                    : r < 0.6 ? .attestationSuccess : .sessionStart
                out.record(Self.event(Int64(b * 60 + e % 60), installation, kind, rng.uniform() < 0.5 ? .enabled : .control))
            }
            return out
        }
        let failures = Self.land(batches, writers: 4, on: conninfo)
        #expect(failures.isEmpty, "\(failures)")
        let pg = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
        let ref = try Self.sqliteTables()
        for receipt in try pg.batches() {
            let m = try #require(Int(receipt.source.dropFirst()))
            try ref.commit(batches[m], source: receipt.source, at: receipt.committedAt)
        }
        #expect(try pg.batches().count == 12)
        #expect(try pg.allTimeTotals() == (try ref.allTimeTotals()))
        let all = try Self.installations(pg.forEachInstallation)
        #expect(all.count > 1_500)
        #expect(all == (try Self.installations(ref.forEachInstallation)))
        #expect(try pg.installationCount() == all.count)
        let blocks = try PGConnection(conninfo).query("SELECT count(*) FROM telemetry_installation_blocks").first?.first?.flatMap { Int($0) } ?? 0
        #expect(blocks > 64, "blocks were split")
    }

    /// A batch that fails in the middle of its writes (a trigger, as the owner could add, refuses its counters
    /// after its installations were written in the same round trip) leaves nothing: no installation, counter,
    /// presence row, batch id or notification; once the trigger is gone the same batch lands, and the store holds
    /// what the SQLite store holds for the batches that landed.
    @Test func telemetryBatchFailingMidwayWritesNothing() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let pg = PostgresTelemetry(store: store)
        let ref = try Self.sqliteTables()
        let batches = Self.traffic(minutes: 0..<2)
        try pg.commit(batches[0], source: "m0", at: Self.t0)
        try ref.commit(batches[0], source: "m0", at: Self.t0)
        let owner = try PGConnection(conninfo)
        func rows(_ table: String) throws -> String? {
            try owner.query("SELECT string_agg(t::text, ';' ORDER BY t::text) FROM \(table) t").first?.first ?? nil
        }
        let tables = [
            "telemetry_installation_blocks", "telemetry_counters", "telemetry_presence", "telemetry_batches", "telemetry_meta", "telemetry_reasons",
        ]
        let before = try tables.map(rows)
        try owner.execute(
            "CREATE FUNCTION refuse_counters() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$; "
                + "CREATE TRIGGER refuse_counters BEFORE INSERT ON telemetry_counters FOR EACH ROW EXECUTE FUNCTION refuse_counters()")
        let listener = try PostgresChangeListener(conninfo: conninfo)
        #expect { try pg.commit(batches[1], source: "m1", at: Self.t0 + .minutes(1)) } throws: { "\($0)".contains("injected failure") }
        #expect(try tables.map(rows) == before)
        #expect(try listener.next(timeout: 0.2) == nil)
        try owner.execute("DROP TRIGGER refuse_counters ON telemetry_counters; DROP FUNCTION refuse_counters()")
        let receipt = try #require(try pg.commit(batches[1], source: "m1", at: Self.t0 + .minutes(1)))
        try ref.commit(batches[1], source: "m1", at: Self.t0 + .minutes(1))
        #expect(receipt.id == 2)
        #expect(try pg.allTimeTotals() == (try ref.allTimeTotals()))
        #expect(try pg.installationCount() == (try ref.installationCount()))
    }

    /// The integer array literals the telemetry statements send are read by the server as exactly the values:
    /// none, one, zero, both ends of the range, and a few hundred of every magnitude and sign.
    @Test func integerArrayLiteralsAreTheValues() throws {
        let c = try PGConnection(try PostgresServer.get().freshDatabase())
        var rng = SplitMix64(state: 3)
        let mixed = (0..<300).map { i -> Int64 in
            let v = Int64(bitPattern: rng.next()) >> (i % 63)
            return i % 2 == 0 ? v : 0 &- v
        }
        for values in [[], [0], [7], [-1, 10, -100], [Int64.max, Int64.min, 0], mixed] {
            let literal = PGArray.ints(values)
            #expect(literal == "{" + values.map(String.init).joined(separator: ",") + "}")
            let read = try c.query("SELECT array_to_string($1::bigint[], ',')", [literal]).first?.first ?? nil
            #expect(read == values.map(String.init).joined(separator: ","), "\(values.prefix(3))")
        }
    }

    /// Minute `m` of thirty installations that come back every minute, one of them refused for the same reason.
    static func sameInstallations(_ m: Int) -> TelemetryBatch {
        let out = TelemetryBatch()
        for i in 0..<30 {
            let s = Int64(m * 60 + i)
            out.record(event(s, "e\(i)", .sessionStart, i % 2 == 0 ? .enabled : .control))
            out.record(event(s + 1, "e\(i)", i == m ? .attestationFailure(.rejected(reason: "badChain")) : .attestationSuccess, .enabled))
        }
        return out
    }

    /// A writer whose last read found every block it asked for unchanged lands its next batch in one round trip,
    /// and only while the guard finds the store as it expects: after another writer rewrote the same blocks, the
    /// guard refuses the batch, which lands again after reading; the batch after it (whose read brought blocks back)
    /// reads too. Every batch lands as on the SQLite store.
    @Test func aBatchLandsInOneRoundTripOnlyWhileItsGuardConfirmsWhatItsWriterExpects() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let a = PostgresTelemetry(store: store)
        let b = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
        let ref = try Self.sqliteTables()
        let batches = (0..<7).map(Self.sameInstallations)
        func land(_ m: Int, by writer: PostgresTelemetry) throws {
            let at = Self.t0 + .minutes(Int64(m))
            try writer.commit(batches[m], source: "m\(m)", at: at)
            try ref.commit(batches[m], source: "m\(m)", at: at)
        }
        func trips() -> [Int] { [a.oneRoundTrip.landed, a.oneRoundTrip.refused] }
        // The first batch adds the reason, which the second reads: only the third knows all it needs to expect.
        try land(0, by: a)
        try land(1, by: a)
        #expect(trips() == [0, 0])
        try land(2, by: a)
        #expect(trips() == [1, 0])
        // Another writer rewrites the same blocks: the guard refuses the next batch, which lands after reading.
        try land(3, by: b)
        try land(4, by: a)
        #expect(trips() == [1, 1])
        // Its read brought blocks back, so the batch after it reads too; the one after that needs one round trip.
        try land(5, by: a)
        #expect(trips() == [1, 1])
        try land(6, by: a)
        #expect(trips() == [2, 1])
        #expect(try a.allTimeTotals() == (try ref.allTimeTotals()))
        let all = try Self.installations(a.forEachInstallation)
        #expect(all.count == 30)
        #expect(all == (try Self.installations(ref.forEachInstallation)))
        let config = WatchConfiguration(since: Self.t0)
        let now = Self.t0 + .minutes(8)
        Self.expectSame(try a.snapshot(config, now: now), try ref.snapshot(config, now: now), "after seven batches")
    }

    /// The guard answers 0 when the store holds exactly the blocks, newest event and reasons' ids expected, and
    /// otherwise fails (SQLSTATE 22P02, with the marker the writer recognises) naming what differs: checked on the
    /// server, with every kind of difference.
    @Test func theGuardFailsOnEveryDifferenceAndOnlyThen() throws {
        let (store, _) = try PostgresStoreTests.freshStore()
        let pg = PostgresTelemetry(store: store)
        for m in 0..<2 { try pg.commit(Self.sameInstallations(m), source: "m\(m)", at: Self.t0 + .minutes(Int64(m))) }
        let c = store.connection
        let (groups, _) = try InstallationRanges.grouped(Self.sameInstallations(2), groups: Int(PostgresTelemetry.partitions))
        // What the store holds, read with the statement the guard checks against.
        let lookup = PostgresTelemetry.blockLookup(groups, cache: nil)
        var runs = [[PostgresTelemetry.StoredBlock]](repeating: [], count: groups.count)
        for row in try c.query(lookup.sql, lookup.params) {
            let part = try #require(row[0].flatMap { Int($0) })
            runs[part].append(
                .init(upper: try #require(try PostgresTelemetry.bytea(row[1])), revision: try #require(row[2].flatMap { Int64($0) }), data: []))
        }
        #expect(runs.contains { !$0.isEmpty })
        let newest = try #require(try c.query("SELECT value FROM telemetry_meta WHERE key = 'newest_event'").first?.first?.flatMap { Int64($0) })
        let reason = try #require(try c.query("SELECT id FROM telemetry_reasons WHERE reason = 'badChain'").first?.first?.flatMap { UInt16($0) })
        func check(_ runs: [[PostgresTelemetry.StoredBlock]], newest: Int64?, reasons: [(String, UInt16)]) -> String? {
            let q = PostgresTelemetry.guardQuery(groups, runs: runs, newest: newest, reasons: reasons)
            do {
                let rows = try c.query(q.sql, q.params)
                return rows == [["0"]] ? nil : "answered \(rows)"
            } catch {
                guard error.sqlState == "22P02", error.message.contains(PostgresTelemetry.guardMarker) else { return "failed otherwise: \(error)" }
                return error.message
            }
        }
        #expect(check(runs, newest: newest, reasons: [("badChain", reason)]) == nil)
        let p = try #require(runs.indices.first { !runs[$0].isEmpty })
        var stale = runs
        stale[p][0].revision -= 1
        #expect(check(stale, newest: newest, reasons: [("badChain", reason)])?.contains("block \(p)") == true)
        var missing = runs
        missing[p].removeLast()
        #expect(check(missing, newest: newest, reasons: [("badChain", reason)])?.contains("block \(p)") == true)
        var extra = runs
        extra[p].append(.init(upper: Array("zzzz".utf8), revision: 1, data: []))
        #expect(check(extra, newest: newest, reasons: [("badChain", reason)])?.contains("block \(p)") == true)
        #expect(check(runs, newest: newest - 1, reasons: [("badChain", reason)])?.contains("newest event") == true)
        #expect(check(runs, newest: nil, reasons: [("badChain", reason)])?.contains("newest event") == true)
        #expect(check(runs, newest: newest, reasons: [("badChain", reason + 1)])?.contains("reason badChain") == true)
        #expect(check(runs, newest: newest, reasons: [("neverSeen", 7)])?.contains("reason neverSeen") == true)
        #expect(check(runs, newest: newest, reasons: []) == nil)
    }

    /// A writer whose cache lacks blocks another writer made (it has seen only other installations of the same
    /// partitions) expects the batch's installations in the blocks it knows, which it has seen unchanged; the guard
    /// finds the blocks it never saw in the run and refuses the batch, which lands after reading, as on the SQLite
    /// store (had the guard checked only the blocks expected, installations would be stored twice).
    @Test func aWriterThatNeverSawSomeBlocksIsRefusedNotMisled() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let a = PostgresTelemetry(store: store)
        let b = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo))
        let ref = try Self.sqliteTables()
        // 6,400 installations: about a hundred per partition, several blocks each.
        func batch(_ m: Int, _ ids: [Int]) -> TelemetryBatch {
            let out = TelemetryBatch()
            for i in ids {
                out.record(Self.event(Int64(m * 60 + i % 50), String(format: "i%04d", i), .sessionStart, i % 2 == 0 ? .enabled : .control))
            }
            return out
        }
        let low = Array(0..<1_000)
        let high = Array(5_000..<6_400)
        let batches = [batch(0, Array(0..<6_400)), batch(1, high), batch(2, high), batch(3, low + high)]
        for (m, writer) in [b, a, a, a].enumerated() {
            let at = Self.t0 + .minutes(Int64(m))
            try writer.commit(batches[m], source: "m\(m)", at: at)
            try ref.commit(batches[m], source: "m\(m)", at: at)
        }
        #expect(try store.connection.query("SELECT count(*) > 128 FROM telemetry_installation_blocks") == [["t"]])
        #expect(a.oneRoundTrip.landed == 0 && a.oneRoundTrip.refused == 1)
        #expect(try a.allTimeTotals() == (try ref.allTimeTotals()))
        let all = try Self.installations(a.forEachInstallation)
        #expect(all.count == 6_400)
        #expect(all == (try Self.installations(ref.forEachInstallation)))
    }

    /// A batch costs two round trips whatever its size when it reads first (BEGIN with the locks and reads; the
    /// writes with COMMIT: four before), and one once its writer's last read found its blocks cached (the locks, the
    /// guard, the writes and COMMIT); inside a transaction of its caller it reads and leaves COMMIT to that
    /// transaction.
    @Test func aTelemetryBatchCostsOneOrTwoRoundTrips() throws {
        let (store, _) = try PostgresStoreTests.freshStore()
        let pg = PostgresTelemetry(store: store)
        let ref = try Self.sqliteTables()
        let batches = (0..<4).map(Self.sameInstallations)
        // The first batch also adds its rejection reason to the catalog (a few round trips per new reason).
        try pg.commit(batches[0], source: "m0", at: Self.t0)
        try ref.commit(batches[0], source: "m0", at: Self.t0)
        var before = store.roundTrips
        try pg.commit(batches[1], source: "m1", at: Self.t0 + .minutes(1))
        #expect(store.roundTrips - before == 2)
        try ref.commit(batches[1], source: "m1", at: Self.t0 + .minutes(1))
        before = store.roundTrips
        try pg.commit(batches[2], source: "m2", at: Self.t0 + .minutes(2))
        #expect(store.roundTrips - before == 1)
        #expect(pg.oneRoundTrip.landed == 1 && pg.oneRoundTrip.refused == 0)
        try ref.commit(batches[2], source: "m2", at: Self.t0 + .minutes(2))
        // Nested: the batch's writes, then the caller's COMMIT (the batch is not committed on its own).
        let nested = store.roundTrips
        #expect {
            try store.transaction(lockingHead: false) {
                try pg.commit(batches[3], source: "m3", at: Self.t0 + .minutes(3))
                throw StoreError.unavailable("the caller fails after the batch")
            }
        } throws: { "\($0)".contains("the caller fails") }
        #expect(store.roundTrips - nested == 3)  // reads, writes, ROLLBACK
        #expect(try pg.batches().count == 3)
        #expect(try pg.allTimeTotals() == (try ref.allTimeTotals()))
    }

    @Test func telemetryBatchesNotifyListeners() throws {
        let (store, conninfo) = try PostgresStoreTests.freshStore()
        let listener = try PostgresChangeListener(conninfo: conninfo)
        let receipt = try #require(try PostgresTelemetry(store: store).commit(Self.traffic(minutes: 0..<1)[0], source: "n", at: Self.t0))
        #expect(try listener.next(timeout: 10) == .telemetry(batch: receipt.id))
        #expect(try listener.next(timeout: 0.2) == nil)
    }

    @Test func readOnlyStoreRefusesTelemetryBatches() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let reader = PostgresTelemetry(store: try PostgresConfigStore(conninfo: conninfo, readOnly: true))
        #expect(throws: PostgresStoreError.self) { try reader.commit(Self.traffic(minutes: 0..<1)[0], source: "r", at: Self.t0) }
        #expect(try reader.batches().isEmpty)
    }
}

/// The roles of docs/POSTGRES.md, exactly as documented: the viewer reads and is refused every write by the
/// server; the writer does what an operator does (publishes through the write path, lands telemetry, records
/// step-up attempts) without owning the schema.
struct PostgresRoleTests {
    /// Runs the documented statements as the owner of the database at `conninfo`.
    static func applyDocumentedGrants(_ conninfo: String) throws {
        let admin = try PGConnection(conninfo)
        let grants = try TestSupport.documentedRoleStatements()
        #expect(grants.count >= 10)
        for statement in grants {
            let result = Result { () throws(PostgresError) -> Void in try admin.execute(statement) }
            if case .failure(let e) = result, !TestSupport.roleExistsAlready(statement, sqlState: e.sqlState) { throw e }
        }
    }

    @Test func viewerIsRefusedWritesAndWriterWorks() throws {
        let (owner, conninfo) = try PostgresStoreTests.freshStore()
        try Self.applyDocumentedGrants(conninfo)
        let viewerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer")
        let writerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")
        let key = try PostgresTeamTablesTests.keyFile()
        try PostgresStepUpStore(store: owner, key: key).saveStepUpPolicy(.standard)

        // The viewer reads everything a console shows.
        let viewer = try PostgresConfigStore(conninfo: viewerInfo)
        #expect(try viewer.current().info.number == 1)
        _ = try viewer.verify()
        _ = try PostgresTelemetry(store: viewer).snapshot(WatchConfiguration(since: PostgresTeamTablesTests.t0), now: PostgresTeamTablesTests.t0)
        #expect(try PostgresStepUpStore(store: viewer, key: nil).isEnforced() == false)
        // ...and the server refuses its writes, even outside a read-only transaction.
        let path = WritePath(store: viewer, clock: ManualClock(PostgresTeamTablesTests.t0), newSeed: { "x" })
        #expect { try path.execute(WritePath.Request(intent: .rollout(.kill), actor: "v@test", reason: "no", origin: "TEST")) } throws: {
            "\($0)".contains("42501") || "\($0)".contains("permission denied")
        }
        #expect { try PostgresTelemetry(store: viewer).commit(PostgresTeamTablesTests.traffic(minutes: 0..<1)[0], source: "v", at: PostgresTeamTablesTests.t0) } throws: {
            "\($0)".contains("permission denied")
        }
        #expect(throws: PostgresError.self) { try PGConnection(viewerInfo).query("SELECT secret FROM stepup_operators") }

        // The writer: publishes, telemetry, step-up attempts; but not the schema.
        let writer = try PostgresConfigStore(conninfo: writerInfo)
        let stepUp = PostgresStepUpStore(store: writer, key: key)
        let ana = OperatorRecord(id: try OperatorID("ana@test"), secret: .generate(), enrolledAt: PostgresTeamTablesTests.t0)
        try stepUp.save(ana)
        let clock = ManualClock(PostgresTeamTablesTests.t0)
        let writes = WritePath(store: writer, clock: clock, policies: [StepUpWritePolicy(store: stepUp, clock: clock)], newSeed: { "x" })
        var r = WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 30))), actor: "ana@test", reason: "go", origin: "TEST")
        r.stepUpCode = TOTP.standard.code(secret: ana.secret, at: PostgresTeamTablesTests.t0)
        guard case .published = try writes.execute(r) else { Issue.record("the writer did not publish"); return }
        var wrong = WritePath.Request(intent: .rollout(.set(MicroPercent(percent: 60))), actor: "ana@test", reason: "go", origin: "TEST")
        wrong.stepUpCode = "000000"
        #expect(throws: WritePath.Failure.self) { try writes.execute(wrong) }
        try PostgresTelemetry(store: writer).commit(PostgresTeamTablesTests.traffic(minutes: 0..<1)[0], source: "w", at: PostgresTeamTablesTests.t0)
        try PostgresTelemetry(store: writer).commit(PostgresTeamTablesTests.traffic(minutes: 1..<2)[0], source: "w", at: PostgresTeamTablesTests.t0)
        try PostgresGuardrailSettings(store: writer).saveGuardrailSetting("guardrails.auto-kill", "on")
        #expect(try owner.verify().versions == 2)
        #expect(throws: PostgresError.self) { try PGConnection(writerInfo).execute("DELETE FROM config_audit") }
        #expect(throws: PostgresError.self) { try PGConnection(writerInfo).execute("UPDATE config_versions SET description = 'x'") }
        #expect(throws: PostgresError.self) { try PGConnection(writerInfo).execute("CREATE TABLE x (a int)") }
    }
}
