import AppCheck
import Foundation
import Rollout
@testable import SQLiteStore
import StoreSupport
import Testing

/// Schema 8's migration on stores of schema 7, as the previous release left them (App Check private keys in
/// plaintext, a seal and a witness that cover no schema): it encrypts the keys and seals the schema, and it
/// launders nothing, neither an object added to the schema nor rows changed behind the seal's back.
struct SchemaSealMigrationTests {
    static let signingKey: [UInt8] = [0x30, 0x82, 0x04, 0xA2] + Array(repeating: 0x5A, count: 60)
    static let rootKey: [UInt8] = [0x30, 0x77, 0x02, 0x01] + Array(repeating: 0x11, count: 40)
    static let intermediateKey: [UInt8] = [0x30, 0x77, 0x02, 0x01] + Array(repeating: 0x22, count: 40)

    /// A store turned into what schema 7 wrote, then `edit` applied by another connection (the attacker's).
    static func schema7Store(_ f: StoreFixture, edit: String? = nil) throws {
        let (store, _) = try f.open()
        let state = try AppCheckStateTables(database: store.database)
        try state.addSigningKey(StoredSigningKey(kid: "k1", privateKeyDER: signingKey, createdAt: f.clock.now()))
        _ = try state.saveDemoAuthority(
            DemoCertificateAuthority.Material(
                rootCertificate: [1], rootPrivateKey: rootKey, intermediateCertificate: [2],
                intermediatePrivateKey: intermediateKey))
        try store.withDatabase { db in
            try db.transaction {
                try db.run("UPDATE appcheck_signing_keys SET private_key = ?", [.blob(signingKey)])
                try db.run(
                    "UPDATE appcheck_demo_authority SET root_key = ?, intermediate_key = ?",
                    [.blob(rootKey), .blob(intermediateKey)])
            }
            // The seal as schema 7 made it: the same tables, no schema entries; the witness to match.
            let old = try StoreSeal.current(db, schema: false)
            try db.run(
                "UPDATE store_seal SET tables = ?, mac = ? WHERE id = 1",
                [.text(old.entries), .text(try #require(store.key).mac(old.text))])
            try store.witness.write(old)
            try db.execute("PRAGMA user_version = 7")
        }
        if let edit { try SQLiteDatabase(path: f.path, create: false).execute(edit) }
    }

    static func column(_ f: StoreFixture, _ sql: String) throws -> [UInt8] {
        try #require(try SQLiteDatabase(path: f.path, create: false).query(sql).first?.first?.bytes)
    }

    @Test func aSchema7StoreIsUpgradedWithItsKeysEncrypted() throws {
        let f = try StoreFixture("schema7")
        try Self.schema7Store(f)
        #expect(try Self.column(f, "SELECT private_key FROM appcheck_signing_keys") == Self.signingKey)

        let store = try RolloutStore(path: f.path, create: false)
        try store.withDatabase { db throws in #expect(try StoreSchema.version(of: db) == StoreSchema.current) }
        for (sql, plain) in [
            ("SELECT private_key FROM appcheck_signing_keys", Self.signingKey),
            ("SELECT root_key FROM appcheck_demo_authority", Self.rootKey),
            ("SELECT intermediate_key FROM appcheck_demo_authority", Self.intermediateKey),
        ] {
            let stored = try Self.column(f, sql)
            #expect(StoreKey.isSealedSecret(stored) && stored != plain, "\(sql)")
            #expect(!stored.windowsContain(plain.prefix(16)), "\(sql): the plaintext is still in the box")
        }
        let state = try AppCheckStateTables(database: store.database)
        #expect(try state.signingKeys().map(\.privateKeyDER) == [Self.signingKey])
        let authority = try #require(try state.demoAuthority())
        #expect(authority.rootPrivateKey == Self.rootKey && authority.intermediatePrivateKey == Self.intermediateKey)
        // The new seal covers the schema, and the store verifies.
        let sealed = try Self.column(f, "SELECT tables FROM store_seal")
        #expect(String(decoding: sealed, as: UTF8.self).contains("schema:table:config_audit="))
        _ = try store.verify()
    }

    @Test(arguments: [
        (
            "CREATE TRIGGER t AFTER UPDATE ON store_seal BEGIN DELETE FROM stepup_policy; END",
            "trigger t on table store_seal"
        ),
        ("CREATE VIEW v AS SELECT * FROM stepup_operators", "view v"),
        ("CREATE INDEX i ON config_audit(actor)", "index i on table config_audit"),
        ("CREATE TABLE extra (a, b AS (a + 1))", "table extra"),
    ])
    func anObjectAddedToASchema7StoreIsRefusedNotSealed(_ edit: String, _ names: String) throws {
        let f = try StoreFixture("schema7-object")
        try Self.schema7Store(f, edit: edit)
        #expect {
            _ = try RolloutStore(path: f.path, create: false)
        } throws: { error in
            let text = "\(error)"
            return text.contains("fails verification, so nothing is written") && text.contains("schema: \(names)")
        }
        // Nothing was migrated: still schema 7, the keys still as they were.
        let db = try SQLiteDatabase(path: f.path, create: false)
        #expect(try StoreSchema.version(of: db) == 7)
        #expect(try Self.column(f, "SELECT private_key FROM appcheck_signing_keys") == Self.signingKey)
    }

    @Test func rowsChangedInASchema7StoreAreRefusedNotResealed() throws {
        let f = try StoreFixture("schema7-rows")
        try Self.schema7Store(f, edit: "UPDATE appcheck_signing_keys SET created_at = 1")
        #expect {
            _ = try RolloutStore(path: f.path, create: false)
        } throws: { error in
            "\(error)".contains("fails verification, so nothing is written: table appcheck_signing_keys")
        }
        #expect(try StoreSchema.version(of: SQLiteDatabase(path: f.path, create: false)) == 7)
    }

    /// Tables that stores from before schema versioning hold (`stepup_attempts`, with SQLite's `sqlite_sequence`
    /// for its AUTOINCREMENT), and a definition that differs in whitespace only (`ALTER TABLE ADD COLUMN` wrote the
    /// seal's tally column on one line), are not taken for tampering: the store is upgraded and verifies.
    @Test func tablesOfOlderReleasesAreKept() throws {
        let f = try StoreFixture("schema7-older-tables")
        try Self.schema7Store(
            f,
            edit: "CREATE TABLE stepup_attempts (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL); "
                + "INSERT INTO stepup_attempts (at) VALUES (1); PRAGMA writable_schema = ON; "
                + "UPDATE sqlite_schema SET sql = replace(sql, char(10), ' ') WHERE name = 'store_seal'")
        #expect(
            try SQLiteDatabase(path: f.path, create: false).query(
                "SELECT instr(sql, char(10)) FROM sqlite_schema WHERE name = 'store_seal'"
            ).first?.first?.int == 0)
        let store = try RolloutStore(path: f.path, create: false)
        try store.withDatabase { db throws in
            #expect(try StoreSchema.version(of: db) == StoreSchema.current)
            #expect(try db.hasTable("stepup_attempts") && db.hasTable("sqlite_sequence"))
        }
        _ = try store.verify()
    }

    /// A new store's schema is exactly the one the migrations create, which the reference learns in memory.
    @Test func aNewStoreMatchesTheReferenceSchema() throws {
        let f = try StoreFixture("schema-reference")
        let (store, _) = try f.open()
        try store.withDatabase { db throws in
            #expect(try ReferenceSchema.difference(db) == nil)
            #expect(try ReferenceSchema.foreignObject(db) == nil)
            #expect(ReferenceSchema.objects.count == (try StoreSeal.schemaEntries(db).count) + 1)  // + store_drill
        }
    }
}

extension Array where Element == UInt8 {
    fileprivate func windowsContain(_ part: ArraySlice<UInt8>) -> Bool {
        guard part.count <= count else { return false }
        return (0...(count - part.count)).contains { self[$0..<($0 + part.count)].elementsEqual(part) }
    }
}
