import AppCheck
import Foundation
import Rollout
import SQLiteStore
import Testing
import Timekeeping

/// The per-request App Check state (challenges, key counters, consumed tokens) is sealed by its tally: every
/// change made behind the store's back through SQL, with or without keeping the rows plausible, is named by
/// `RolloutStore.verify` (`rollout audit verify`), and stays named after later writes.
struct AppCheckTallyTests {
    static let t0 = Instant(seconds: 1_780_000_000)
    static let app = "1:1234567890:ios:0123456789abcdef"
    static let keyID = [UInt8](repeating: 7, count: 32)

    /// A store with 3 redeemed challenges, an attested key advanced to counter 5, and 2 consumed tokens.
    static func populated() throws -> StoreFixture {
        let f = try StoreFixture("tally")
        let (store, _) = try f.open()
        let state = try AppCheckStateTables(database: store.database)
        for i in 0..<3 {
            _ = try state.redeemChallenge([UInt8](repeating: UInt8(i), count: 32), appId: app, expiresAt: t0 + .minutes(5))
        }
        try state.saveAttestedKey(
            AttestedKeyRecord(
                appId: app, keyId: keyID, publicKey: [0x04] + [UInt8](repeating: 9, count: 64), counter: 0,
                artifactDigest: [UInt8](repeating: 1, count: 32), receipt: [1], environment: .production, attestedAt: t0
            ))
        for c in 1...5 { _ = try state.advanceCounter(appId: app, keyId: keyID, to: UInt32(c)) }
        _ = try state.consumeToken(id: "jti-1", expiresAt: t0 + .minutes(60))
        _ = try state.consumeToken(id: "jti-2", expiresAt: t0 + .minutes(60))
        _ = try store.verify()
        return f
    }

    /// The problem `verify` names after `sql` is applied to the file behind the store's back.
    static func tamper(_ sql: String, then: ((AppCheckStateTables) throws -> Void)? = nil) throws
        -> ConfigIntegrityProblem?
    {
        let f = try populated()
        try SQLiteDatabase(path: f.path, create: false).execute(sql)
        let (store, _) = try f.open(create: false)
        if let then { try then(try AppCheckStateTables(database: store.database)) }
        do {
            _ = try store.verify()
            return nil
        } catch let p as ConfigIntegrityProblem {
            return p
        }
    }

    @Test func intactStateVerifiesAfterEveryKindOfChange() throws {
        let f = try Self.populated()
        let (store, _) = try f.open(create: false)
        let state = try AppCheckStateTables(database: store.database)
        // Re-attestation, a refused counter, a replayed token, a purge: the tally follows every one.
        try state.saveAttestedKey(
            AttestedKeyRecord(
                appId: Self.app, keyId: Self.keyID, publicKey: [0x04] + [UInt8](repeating: 9, count: 64), counter: 1,
                artifactDigest: [UInt8](repeating: 2, count: 32), receipt: [2], environment: .production,
                attestedAt: Self.t0))
        #expect(try !state.advanceCounter(appId: Self.app, keyId: Self.keyID, to: 3))
        #expect(try !state.consumeToken(id: "jti-1", expiresAt: Self.t0 + .minutes(60)))
        #expect(
            try state.redeemChallenge([UInt8](repeating: 3, count: 32), appId: Self.app, expiresAt: Self.t0 + .minutes(5))
                == .redeemed)
        try state.purgeExpired(before: Self.t0 + .minutes(30))
        _ = try store.verify()
        // A write that fails half-way (its savepoint rolls back) leaves the tally where the rows are.
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try store.database.transaction {
                _ = try state.consumeToken(id: "jti-3", expiresAt: Self.t0 + .minutes(90))
                throw Abort()
            }
        }
        _ = try store.verify()
    }

    @Test(arguments: [
        ("UPDATE appcheck_keys SET counter = 0", "appcheck_keys"),
        ("UPDATE appcheck_challenges SET used = 0", "appcheck_challenges"),
        ("UPDATE appcheck_challenges SET expires_at = expires_at + 3600000000", "appcheck_challenges"),
        ("DELETE FROM appcheck_consumed_tokens WHERE token_id = 'jti-1'", "appcheck_consumed_tokens"),
        (
            "INSERT INTO appcheck_consumed_tokens (token_id, expires_at) VALUES ('forged', 0)",
            "appcheck_consumed_tokens"
        ),
        ("DELETE FROM appcheck_keys", "appcheck_keys"),
        ("DELETE FROM appcheck_challenges", "appcheck_challenges"),
    ])
    func tamperedRowsAreNamed(_ sql: String, table: String) throws {
        let p = try #require(try Self.tamper(sql))
        #expect(p.subject == "table \(table)", "\(p)")
    }

    @Test func tamperStaysNamedAfterLaterWrites() throws {
        // The counter is reset behind the store's back, then the exchange (unaware) accepts counter 1 again and
        // consumes more tokens: the tally still does not add up.
        let p = try #require(
            try Self.tamper("UPDATE appcheck_keys SET counter = 0") { state in
                #expect(try state.advanceCounter(appId: Self.app, keyId: Self.keyID, to: 1))
                _ = try state.consumeToken(id: "jti-9", expiresAt: Self.t0 + .minutes(60))
                try state.purgeExpired(before: Self.t0 + .minutes(90))
            })
        #expect(p.subject == "table appcheck_keys", "\(p)")
    }

    @Test func forgedTallyIsCaughtByTheSealsMAC() throws {
        // Rewriting the sealed tally to match the edited rows needs the store key: without it the HMAC fails.
        let p = try #require(
            try Self.tamper(
                "UPDATE store_seal SET tally = replace(tally, 'appcheck_consumed_tokens=2:', 'appcheck_consumed_tokens=1:')"
            ))
        #expect(p.subject == "seal" && p.problem.contains("HMAC"), "\(p)")
    }
}
