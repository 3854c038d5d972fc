import Foundation
import TestSupport
import Testing

@testable import SQLiteStore

/// The seal digests an empty sealed table without reading it (one statement tells which tables hold rows): the
/// digests must be the ones a read of every table gives.
@Suite struct SealDigestTests {
    @Test("the seal's digests of empty, filled and missing tables are those of a full read of each table")
    func emptyTablesDigestLikeAFullRead() throws {
        let directory = try TemporaryDirectory()
        let db = try SQLiteDatabase(path: directory.url.appendingPathComponent("seal.db").path)
        try db.execute("CREATE TABLE config_head (id INTEGER PRIMARY KEY, audit_sequence INTEGER, audit_hash TEXT)")
        try db.execute(StoreSeal.schema)
        try db.execute("CREATE TABLE stepup_policy (key TEXT PRIMARY KEY, value TEXT)")
        try db.execute("INSERT INTO stepup_policy VALUES ('reach-100', 'on'), ('cross', '50')")
        try db.execute("CREATE TABLE guardrail_settings (key TEXT PRIMARY KEY, value TEXT)")
        try db.execute("CREATE TABLE ramp_plan (id INTEGER PRIMARY KEY, plan BLOB)")
        try db.execute("INSERT INTO ramp_plan VALUES (1, x'00ff')")
        try db.execute("CREATE TABLE ramp_plan_approval (id INTEGER PRIMARY KEY)")
        let state = try StoreSeal.current(db)
        #expect(state.tables.count == StoreSeal.sealedTables.count)
        for table in StoreSeal.sealedTables {
            #expect(state.tables[table] == (try StoreSeal.digest(of: table, in: db)), "\(table)")
        }
        #expect(state.tables["guardrail_settings"] == StoreSeal.digest(ofRows: []))
        #expect(state.tables["stepup_policy"] != StoreSeal.digest(ofRows: []))
        #expect(state.tables["appcheck_apps"] == StoreSeal.absent)
        // A row appears: the digest follows it.
        try db.execute("INSERT INTO guardrail_settings VALUES ('auto-kill', 'on')")
        let after = try StoreSeal.current(db)
        #expect(after.tables["guardrail_settings"] == (try StoreSeal.digest(of: "guardrail_settings", in: db)))
        #expect(after.tables["guardrail_settings"] != StoreSeal.digest(ofRows: []))
    }

    @Test("a state's lines and digest are built once and follow every change of any of its parts")
    func linesFollowEveryPart() {
        func fresh(_ s: StoreSeal.State) -> StoreSeal.State {
            StoreSeal.State(tables: s.tables, sequence: s.sequence, hash: s.hash, tally: s.tally, schema: s.schema)
        }
        var state = StoreSeal.State(tables: ["stepup_policy": "aa", "ramp_plan": "bb"], sequence: 3, hash: "h3")
        let copy = state
        #expect(state.digest == copy.digest && state.text == fresh(state).text)
        var seen: Set<String> = [state.digest]
        let changes: [(inout StoreSeal.State) -> Void] = [
            { $0.tables["ramp_plan"] = "cc" }, { $0.sequence = 4 }, { $0.hash = "h4" },
            { $0.tally["appcheck_keys"] = StoreTally.Value(rows: 1, sum: [1, 2, 3, 4]) },
            { $0.schema = StoreSeal.SchemaEntries(["schema:table:t": "dd"]) },
        ]
        for change in changes {
            _ = (state.entries, state.text, state.digest)
            change(&state)
            // What the changed state builds is what a state made with its parts builds, and new each time.
            #expect(state.entries == fresh(state).entries)
            #expect(state.text == fresh(state).text)
            #expect(state.digest == fresh(state).digest)
            #expect(seen.insert(state.digest).inserted)
        }
        // The copy taken before the changes still builds its own lines.
        #expect(copy.text == fresh(copy).text && copy.digest != state.digest)
    }
}
