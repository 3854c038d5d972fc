import AppCheck
import Crypto
import Foundation
@testable import PostgresStore
import SQLiteStore
import StoreConformance
import StoreSupport
import Testing
import TestSupport
import Timekeeping

/// `PostgresAppCheckState` on the real server: the shared conformance suite (each handle its own connection, as
/// another process would have), races over many connections, the registrations, private keys at rest, read-only.
struct PostgresAppCheckStateTests {
    static let t0 = Instant(seconds: 1_780_000_000)
    static let app = "1:1234567890:ios:0123456789abcdef"

    /// A fresh store and an opener of App Check handles on it, each on a new connection.
    static func fresh(key: StoreKey? = nil) throws -> (
        open: () throws -> PostgresAppCheckState, conninfo: String, key: StoreKey
    ) {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        let key = try key ?? PostgresTeamTablesTests.keyFile()
        return ({ PostgresAppCheckState(store: try PostgresConfigStore(conninfo: conninfo), key: key) }, conninfo, key)
    }

    @Test(arguments: AppCheckStateConformance.checks.map(\.name))
    func conformance(_ check: String) throws {
        let factory: AppCheckStateConformance.Factory = {
            let (open, _, _) = try Self.fresh()
            return { try open() }
        }
        try AppCheckStateConformance.checks.first { $0.name == check }!.run(factory)
    }

    /// 6 connections race on each of 15 tokens, 15 challenges and 15 counter steps: every one has exactly one winner.
    @Test func manyConnectionsRaceOnOneTokenChallengeAndCounter() throws {
        let (open, _, _) = try Self.fresh()
        let handles = try (0..<6).map { _ in try open() }
        let rounds = 15
        let key = AttestedKeyRecord(
            appId: Self.app, keyId: [UInt8](repeating: 3, count: 32),
            publicKey: [0x04] + [UInt8](repeating: 5, count: 64), counter: 0,
            artifactDigest: [UInt8](repeating: 8, count: 32), receipt: [], environment: .production, attestedAt: Self.t0
        )
        try handles[0].saveAttestedKey(key)
        let lock = NSLock()
        nonisolated(unsafe) var tokenWins = [Int](repeating: 0, count: rounds)
        nonisolated(unsafe) var challengeOutcomes = [[ChallengeRedemption]](repeating: [], count: rounds)
        nonisolated(unsafe) var counterWins = [Int](repeating: 0, count: rounds)
        nonisolated(unsafe) var errors: [String] = []
        DispatchQueue.concurrentPerform(iterations: 6) { h in
            let state = handles[h]
            for r in 0..<rounds {
                do {
                    let consumed = try state.consumeToken(id: "jti-\(r)", expiresAt: Self.t0 + .hours(1))
                    let redemption = try state.redeemChallenge(
                        [UInt8](repeating: UInt8(r), count: 32), appId: Self.app, expiresAt: Self.t0 + .minutes(5))
                    let advanced = try state.advanceCounter(appId: Self.app, keyId: key.keyId, to: UInt32(r + 1))
                    lock.withLock {
                        if consumed { tokenWins[r] += 1 }
                        challengeOutcomes[r].append(redemption)
                        if advanced { counterWins[r] += 1 }
                    }
                } catch {
                    lock.withLock { errors.append("handle \(h), round \(r): \(error)") }
                }
            }
        }
        #expect(errors.isEmpty)
        #expect(tokenWins == [Int](repeating: 1, count: rounds))
        for (r, outcomes) in challengeOutcomes.enumerated() {
            #expect(
                outcomes.filter { $0 == .redeemed }.count == 1 && outcomes.filter { $0 == .alreadyUsed }.count == 5,
                "round \(r): \(outcomes)")
        }
        // A handle may advance past a round another has not reached yet, but no value is accepted twice, so the
        // total of wins is at most one per value, and the counter ends at the highest.
        #expect(counterWins.allSatisfy { $0 <= 1 })
        #expect(
            try handles[3].attestedKey(appId: Self.app, artifactDigest: key.artifactDigest)?.counter == UInt32(rounds))
    }

    /// Rotations racing on 4 connections leave exactly one key unretired after every round (the advisory lock
    /// orders them; without it a rotation's UPDATE does not see a concurrent rotation's new key). The store only
    /// seals the private key's bytes, so the racing keys are random bytes rather than slow RSA key generations.
    /// A group of consumes is one round trip to the server (BEGIN, the statements, COMMIT), each deciding as
    /// alone: the first group is held by another session's uncommitted insert of its token until eight more
    /// consumes queue behind it; they then commit as the next group, in one round trip (nine before: one per
    /// statement and COMMIT).
    @Test func aGroupOfConsumesIsOneRoundTrip() throws {
        let (_, conninfo, key) = try Self.fresh()
        let store = try PostgresConfigStore(conninfo: conninfo)
        let state = PostgresAppCheckState(store: store, key: key)
        #expect(try state.consumeToken(id: "warm", expiresAt: Self.t0 + .hours(1)))
        let blocker = try PGConnection(conninfo)
        try blocker.execute("BEGIN")
        try blocker.query("INSERT INTO appcheck_consumed_tokens (token_id, expires_at) VALUES ('held', 0)")
        let before = store.roundTrips
        let statisticsBefore = state.groupStatistics
        let lock = NSLock()
        nonisolated(unsafe) var outcomes: [String: Bool] = [:]
        let done = DispatchGroup()
        func consume(_ id: String) {
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                let consumed = (try? state.consumeToken(id: id, expiresAt: Self.t0 + .hours(1))) ?? false
                lock.withLock { outcomes[id] = consumed }
            }
        }
        func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
            let deadline = Date().addingTimeInterval(30)
            while try !condition() {
                guard Date() < deadline else { throw TestSupport.Failure("timed out waiting until \(what)") }
                usleep(2_000)
            }
        }
        consume("held")
        try waitUntil("the first group waits for the held token") {
            try !blocker.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").isEmpty
        }
        for i in 0..<8 { consume("t\(i)") }
        try waitUntil("eight consumes queue behind the first group") { state.group.queued == 8 }
        try blocker.execute("ROLLBACK")
        done.wait()
        #expect(outcomes.count == 9 && outcomes.values.allSatisfy { $0 })
        let statistics = state.groupStatistics
        #expect(statistics.groups - statisticsBefore.groups == 2 && statistics.writes - statisticsBefore.writes == 9)
        #expect(store.roundTrips - before == 2, "one round trip per group")
        #expect(try !state.consumeToken(id: "t3", expiresAt: Self.t0 + .hours(1)), "a replay is refused")
    }

    @Test func concurrentRotationsLeaveOneSigningKey() throws {
        let (open, _, _) = try Self.fresh()
        let handles = try (0..<4).map { _ in try open() }
        try handles[0].addSigningKey(
            StoredSigningKey(kid: "first", privateKeyDER: SecureRandom.bytes(64), createdAt: Self.t0))
        let lock = NSLock()
        nonisolated(unsafe) var errors: [String] = []
        nonisolated(unsafe) var unretired: [Int] = []
        for round in 1...20 {
            let now = Self.t0 + .seconds(Int64(round))
            DispatchQueue.concurrentPerform(iterations: 4) { h in
                do {
                    try handles[h].rotateSigningKeys(
                        to: StoredSigningKey(
                            kid: "k\(round)-\(h)", privateKeyDER: SecureRandom.bytes(64), createdAt: now),
                        retiringOthersAt: now + .hours(1))
                } catch {
                    lock.withLock { errors.append("\(error)") }
                }
            }
            unretired.append(try handles[round % 4].signingKeys().filter { $0.retiresAt == nil }.count)
        }
        #expect(errors.isEmpty)
        #expect(unretired == [Int](repeating: 1, count: 20))
        #expect(try handles[1].signingKeys().count == 81)
    }

    /// Configuration saves racing on 4 connections all succeed, and the stored one is one of them whole (the
    /// project row's lock orders the apps' delete and insert).
    @Test func concurrentConfigurationSavesStayWhole() throws {
        let (open, _, _) = try Self.fresh()
        let handles = try (0..<4).map { _ in try open() }
        @Sendable func configuration(_ h: Int) -> AppCheckConfiguration {
            AppCheckConfiguration(
                project: AppCheckProject(number: "1234567890", id: "my-app"),
                apps: (0...h).map { i in
                    AppAttestApp(
                        appId: "1:1234567890:ios:\(i)",
                        identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.example.h\(h)"),
                        environment: .production)
                })
        }
        let lock = NSLock()
        nonisolated(unsafe) var errors: [String] = []
        for _ in 0..<10 {
            DispatchQueue.concurrentPerform(iterations: 4) { h in
                do { try handles[h].saveConfiguration(configuration(h)) } catch {
                    lock.withLock { errors.append("\(error)") }
                }
            }
            let stored = try handles[0].configuration()
            #expect((0..<4).contains { configuration($0) == stored }, "\(String(describing: stored))")
        }
        #expect(errors.isEmpty, "\(errors)")
    }

    @Test func registrationsRoundTripAndPrivateKeysAreSealed() throws {
        let (open, conninfo, key) = try Self.fresh()
        let a = try open()
        let b = try open()
        #expect(try b.configuration() == nil)
        let configuration = AppCheckConfiguration(
            project: AppCheckProject(number: "1234567890", id: "my-app"),
            apps: [
                AppAttestApp(
                    appId: Self.app, identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.example.app"),
                    environment: .production),
                AppAttestApp(
                    appId: "1:1234567890:ios:fedcba",
                    identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.example.drill"),
                    environment: .development, trustsDemoRoot: true, tokenTTL: .days(7)),
            ])
        try a.saveConfiguration(configuration)
        #expect(try b.configuration() == configuration)
        var fewer = configuration
        fewer.apps.removeFirst()
        try b.saveConfiguration(fewer)
        #expect(try a.configuration() == fewer)

        // Signing keys: the port gives the DER back; the column holds a box that does not contain it.
        let signing = try AppCheckSigningKey.generate(createdAt: Self.t0)
        try a.addSigningKey(
            StoredSigningKey(kid: signing.kid, privateKeyDER: signing.privateKeyDER, createdAt: Self.t0))
        #expect(
            try b.signingKeys() == [
                StoredSigningKey(kid: signing.kid, privateKeyDER: signing.privateKeyDER, createdAt: Self.t0)
            ])
        let raw = try #require(
            try PGConnection(conninfo).query("SELECT encode(private_key, 'hex') FROM appcheck_signing_keys").first?
                .first ?? nil)
        #expect(raw.hasPrefix(Hex.encode(PostgresAppCheckState.boxMagic)))
        #expect(!raw.contains(Hex.encode(Array(signing.privateKeyDER.suffix(32)))))
        // Another key does not open it, and says so; no key at all is named as such.
        let other = try PostgresTeamTablesTests.keyFile()
        #expect {
            try PostgresAppCheckState(store: try PostgresConfigStore(conninfo: conninfo), key: other).signingKeys()
        } throws: {
            "\($0)".contains("is not this PostgreSQL store's key")
        }
        #expect {
            try PostgresAppCheckState(store: try PostgresConfigStore(conninfo: conninfo), key: nil).signingKeys()
        } throws: {
            "\($0)".contains("no store key for this PostgreSQL store: App Check signing keys")
        }
        // A box moved to another key's row does not open.
        let second = try AppCheckSigningKey.generate(createdAt: Self.t0 + .seconds(Int64(1)))
        try a.rotateSigningKeys(
            to: StoredSigningKey(
                kid: second.kid, privateKeyDER: second.privateKeyDER, createdAt: Self.t0 + .seconds(Int64(1))),
            retiringOthersAt: Self.t0 + .hours(1))
        let rotated = try b.signingKeys()
        #expect(rotated.map(\.kid) == [signing.kid, second.kid])
        #expect(rotated.map(\.retiresAt) == [Self.t0 + .hours(1), nil])
        try PGConnection(conninfo).query(
            "UPDATE appcheck_signing_keys SET private_key = (SELECT private_key FROM appcheck_signing_keys WHERE kid = $1) WHERE kid = $2",
            [signing.kid, second.kid])
        #expect { try a.signingKeys() } throws: { "\($0)".contains("does not decrypt") }
        try PGConnection(conninfo).query("DELETE FROM appcheck_signing_keys WHERE kid = $1", [second.kid])
        // Retired keys go at the purge after their retirement.
        try a.purgeExpired(before: Self.t0 + .hours(1))
        #expect(try b.signingKeys().count == 1)
        try a.purgeExpired(before: Self.t0 + .hours(1) + .seconds(Int64(1)))
        #expect(try b.signingKeys().isEmpty)

        // Debug tokens.
        let digest = SHA256.hash(Array("0123456789abcdef-token".utf8))
        try a.addDebugToken(DebugTokenRecord(appId: Self.app, digest: digest, name: "ci", createdAt: Self.t0))
        try a.addDebugToken(DebugTokenRecord(appId: Self.app, digest: digest, name: "again", createdAt: Self.t0))
        #expect(
            try b.debugTokens() == [DebugTokenRecord(appId: Self.app, digest: digest, name: "ci", createdAt: Self.t0)])
        #expect(try b.hasDebugToken(appId: Self.app, digest: digest))
        #expect(try !b.hasDebugToken(appId: "other", digest: digest))
        #expect(try b.removeDebugToken(appId: Self.app, name: "ci") == 1)
        #expect(try a.removeDebugToken(appId: Self.app, name: "ci") == 0)
        #expect(try !a.hasDebugToken(appId: Self.app, digest: digest))

        // The demo authority: the first saved stays; its keys are sealed too.
        #expect(try a.demoAuthority() == nil)
        let first = try DemoCertificateAuthority.loadOrCreate(in: a).material
        let again = try b.saveDemoAuthority(try DemoCertificateAuthority.generate().material)
        #expect(again == first)
        #expect(try b.demoAuthority() == first)
        let demoRaw = try #require(
            try PGConnection(conninfo).query("SELECT encode(root_key, 'hex') FROM appcheck_demo_authority").first?.first
                ?? nil)
        #expect(demoRaw.hasPrefix(Hex.encode(PostgresAppCheckState.boxMagic)))
        _ = key
    }

    @Test func readOnlyRefusesEveryChange() throws {
        let (open, conninfo, key) = try Self.fresh()
        let reader = PostgresAppCheckState(store: try PostgresConfigStore(conninfo: conninfo, readOnly: true), key: key)
        #expect(reader.isReadOnly)
        #expect(throws: PostgresStoreError.self) { try reader.consumeToken(id: "jti", expiresAt: Self.t0 + .hours(1)) }
        #expect(throws: PostgresStoreError.self) {
            try reader.redeemChallenge(Array(0..<32), appId: Self.app, expiresAt: Self.t0 + .minutes(5))
        }
        // Nothing was used by the refused redemption.
        #expect(try open().redeemChallenge(Array(0..<32), appId: Self.app, expiresAt: Self.t0 + .minutes(5)) == .redeemed)
        #expect(try open().consumeToken(id: "jti", expiresAt: Self.t0 + .hours(1)))
    }
}

extension PostgresRoleTests {
    /// The App Check grants of docs/POSTGRES.md: the writer runs every exchange operation; the viewer lists the
    /// apps and keys' ids, and is refused the private keys, the per-request state and every change.
    @Test func appCheckGrants() throws {
        let (_, conninfo) = try PostgresStoreTests.freshStore()
        try Self.applyDocumentedGrants(conninfo)
        let key = try PostgresTeamTablesTests.keyFile()
        let t0 = PostgresAppCheckStateTests.t0
        let app = PostgresAppCheckStateTests.app
        let writer = PostgresAppCheckState(
            store: try PostgresConfigStore(
                conninfo: conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")), key: key)
        let configuration = AppCheckConfiguration(
            project: AppCheckProject(number: "1234567890", id: "my-app"),
            apps: [
                AppAttestApp(
                    appId: app, identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.example.app"),
                    environment: .production)
            ])
        try writer.saveConfiguration(configuration)
        try writer.saveConfiguration(configuration)
        _ = try DemoCertificateAuthority.loadOrCreate(in: writer)
        _ = try AppCheckExchange.loadOrCreateSigningKeys(state: writer, now: t0)
        _ = try AppCheckExchange.rotateSigningKeys(state: writer, now: t0, overlap: .hours(1))
        #expect(try writer.redeemChallenge(Array(0..<32), appId: app, expiresAt: t0 + .minutes(5)) == .redeemed)
        let attested = AttestedKeyRecord(
            appId: app, keyId: [UInt8](repeating: 1, count: 32), publicKey: [0x04] + [UInt8](repeating: 2, count: 64),
            counter: 0,
            artifactDigest: [UInt8](repeating: 3, count: 32), receipt: [9], environment: .production, attestedAt: t0)
        try writer.saveAttestedKey(attested)
        try writer.saveAttestedKey(attested)
        #expect(try writer.advanceCounter(appId: app, keyId: attested.keyId, to: 1))
        #expect(try writer.attestedKey(appId: app, artifactDigest: attested.artifactDigest)?.counter == 1)
        #expect(try writer.consumeToken(id: "jti", expiresAt: t0 + .hours(1)))
        try writer.addDebugToken(DebugTokenRecord(appId: app, digest: SHA256.hash([1]), name: "ci", createdAt: t0))
        #expect(try writer.hasDebugToken(appId: app, digest: SHA256.hash([1])))
        #expect(try writer.removeDebugToken(appId: app, name: "ci") == 1)
        try writer.purgeExpired(before: t0 + .days(1))
        #expect(try writer.signingKeys().count == 1)

        let viewerInfo = conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_viewer")
        let viewer = PostgresAppCheckState(store: try PostgresConfigStore(conninfo: viewerInfo), key: nil)
        #expect(try viewer.configuration() == configuration)
        #expect(
            try !PGConnection(viewerInfo).query("SELECT kid, created_at, retires_at FROM appcheck_signing_keys").isEmpty
        )
        #expect(try !PGConnection(viewerInfo).query("SELECT root_certificate FROM appcheck_demo_authority").isEmpty)
        for secret in [
            "SELECT private_key FROM appcheck_signing_keys", "SELECT root_key FROM appcheck_demo_authority",
            "SELECT intermediate_key FROM appcheck_demo_authority", "SELECT digest FROM appcheck_debug_tokens",
            "SELECT challenge FROM appcheck_challenges", "SELECT token_id FROM appcheck_consumed_tokens",
            "SELECT key_id FROM appcheck_keys",
        ] {
            #expect(throws: PostgresError.self, "the viewer ran \(secret)") {
                try PGConnection(viewerInfo).query(secret)
            }
        }
        #expect { try viewer.consumeToken(id: "jti-2", expiresAt: t0 + .hours(1)) } throws: {
            "\($0)".contains("permission denied")
        }
        #expect { try viewer.saveConfiguration(configuration) } throws: { "\($0)".contains("permission denied") }
        // The writer cannot change the schema of these tables either.
        #expect(throws: PostgresError.self) {
            try PGConnection(conninfo.replacingOccurrences(of: "user=rollout", with: "user=rollout_writer")).execute(
                "DROP TABLE appcheck_keys")
        }
    }
}
