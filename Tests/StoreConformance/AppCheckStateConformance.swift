import AppCheck
import Foundation
import Timekeeping

/// Conformance checks of the `AppCheckState` port's per-request state: used challenges, key counters and consumed
/// tokens, and challenges issued by one handle's exchange redeemed through another's. `open` gives another handle on the same store (another connection, as another process would have;
/// the in-memory state returns itself), so that "used once" holds across handles, not just in one.
public enum AppCheckStateConformance {
    /// Opens another handle on one store.
    public typealias Opener = () throws -> any AppCheckState
    /// Makes a fresh store with no App Check state and returns its opener.
    public typealias Factory = () throws -> Opener

    public static let checks: [(name: String, run: @Sendable (Factory) throws -> Void)] = [
        ("a challenge is redeemed once, on any handle, and remembered until its expiry is purged", challengeSingleUse),
        (
            "a challenge issued by one handle's exchange redeems once through another's; forged or expired ones are refused",
            challengesAcrossExchanges
        ),
        ("of concurrent redemptions of one challenge on two handles exactly one succeeds", concurrentRedemption),
        ("a key's counter only increases, also across a re-attestation", countersOnlyIncrease),
        ("of concurrent advances to one counter exactly one succeeds", concurrentAdvance),
        ("a token is consumed once until it expires and is purged", consumedTokens),
        ("a combined redemption changes the key only when the challenge redeems", combinedRedemption),
        ("many concurrent writes (group-committed) decide as if one at a time", concurrentMixedWrites),
    ]

    public static func all(_ factory: Factory) throws {
        for check in checks { try ConformanceFailure.naming(check.name) { try check.run(factory) } }
    }

    static let expect = ConfigStoreConformance.expect
    static let t0 = Instant(seconds: 1_780_000_000)
    static let app = "1:1234567890:ios:0123456789abcdef"

    static func key(counter: UInt32, artifact: UInt8 = 1) -> AttestedKeyRecord {
        AttestedKeyRecord(
            appId: app, keyId: [UInt8](repeating: 7, count: 32), publicKey: [0x04] + [UInt8](repeating: 9, count: 64),
            counter: counter, artifactDigest: [UInt8](repeating: artifact, count: 32), receipt: [1, 2, 3],
            environment: .production, attestedAt: t0)
    }

    static func challengeSingleUse(_ factory: Factory) throws {
        let open = try factory()
        let a = try open()
        let b = try open()
        let c1: [UInt8] = Array(0..<32)
        let c2: [UInt8] = Array(32..<64)
        let expiry = t0 + .minutes(5)
        try expect(try b.redeemChallenge(c1, appId: app, expiresAt: expiry) == .redeemed, "a challenge did not redeem")
        try expect(try a.redeemChallenge(c1, appId: app, expiresAt: expiry) == .alreadyUsed, "redeemed twice")
        try expect(
            try a.redeemChallenge(c1, appId: "other-app", expiresAt: expiry) == .alreadyUsed,
            "a used challenge redeemed again under another app")
        try expect(try a.redeemChallenge(c2, appId: app, expiresAt: expiry + .hours(1)) == .redeemed, "c2 not redeemed")
        // A purge before a used challenge's expiry keeps it; one after forgets only the expired one.
        try b.purgeExpired(before: expiry)
        try expect(try b.redeemChallenge(c1, appId: app, expiresAt: expiry) == .alreadyUsed, "an early purge forgot c1")
        try b.purgeExpired(before: expiry + .minutes(1))
        try expect(
            try a.redeemChallenge(c2, appId: app, expiresAt: expiry + .hours(1)) == .alreadyUsed,
            "the purge forgot a challenge still live")
        try expect(try a.redeemChallenge(c1, appId: app, expiresAt: expiry) == .redeemed, "the purge kept c1")
    }

    /// Two exchanges on two handles of one store, as two `serve` processes: they share the challenge keys (derived
    /// from the stored signing keys) and the used challenges.
    static func challengesAcrossExchanges(_ factory: Factory) throws {
        let open = try factory()
        let a = try open()
        let b = try open()
        let configuration = AppCheckConfiguration(
            project: AppCheckProject(number: "1234567890", id: "conformance"),
            apps: [
                AppAttestApp(
                    appId: app, identity: AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.conformance"),
                    environment: .production),
                AppAttestApp(
                    appId: "1:1234567890:ios:other", identity: AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.other"),
                    environment: .production),
            ])
        let clock = ManualClock(t0)
        let issuing = try AppCheckExchange(configuration: configuration, state: a, clock: clock)
        let redeeming = try AppCheckExchange(configuration: configuration, state: b, clock: clock)
        func refusal(_ c: [UInt8], _ appId: String = app) -> AppCheckExchangeError? {
            do {
                _ = try redeeming.authenticChallengeExpiry(c, appId: appId)
                return nil
            } catch { return error }
        }
        let c = try issuing.generateChallenge(appId: app).challenge
        try expect(try issuing.generateChallenge(appId: app).challenge != c, "two challenges are equal")
        let expiresAt = try redeeming.authenticChallengeExpiry(c, appId: app)
        try expect(expiresAt == t0 + AppCheckExchange.challengeTTL, "the challenge expires at \(expiresAt)")
        try expect(try b.redeemChallenge(c, appId: app, expiresAt: expiresAt) == .redeemed, "it did not redeem")
        try expect(try a.redeemChallenge(c, appId: app, expiresAt: expiresAt) == .alreadyUsed, "a replay redeemed")
        // Any changed byte (expiry, nonce, tag), a cut, another app: not this exchange's challenge.
        for i in c.indices {
            var forged = c
            forged[i] ^= 0x01
            try expect(refusal(forged) == .unknownChallenge, "a challenge with byte \(i) changed was accepted")
        }
        try expect(refusal(Array(c.dropLast())) == .unknownChallenge, "a truncated challenge was accepted")
        try expect(refusal(c, "1:1234567890:ios:other") == .unknownChallenge, "another app's challenge was accepted")
        try expect(refusal([UInt8](repeating: 0, count: 32)) == .unknownChallenge, "random bytes were accepted")
        // At its expiry a challenge is refused as expired, before the state is asked.
        let late = try issuing.generateChallenge(appId: app).challenge
        clock.advance(by: AppCheckExchange.challengeTTL)
        try expect(refusal(late) == .challengeExpired, "a challenge at its expiry gave \(String(describing: refusal(late)))")
    }

    static func concurrentRedemption(_ factory: Factory) throws {
        let open = try factory()
        let handles = [try open(), try open()]
        let challenge = [UInt8](repeating: 42, count: 32)
        let lock = NSLock()
        nonisolated(unsafe) var results: [ChallengeRedemption] = []
        nonisolated(unsafe) var errors: [String] = []
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            do {
                let r = try handles[i % 2].redeemChallenge(challenge, appId: app, expiresAt: t0 + .minutes(5))
                lock.withLock { results.append(r) }
            } catch {
                lock.withLock { errors.append("\(error)") }
            }
        }
        try expect(errors.isEmpty, "redemptions failed: \(errors)")
        try expect(
            results.filter { $0 == .redeemed }.count == 1 && results.filter { $0 == .alreadyUsed }.count == 7,
            "8 concurrent redemptions gave \(results)")
    }

    static func countersOnlyIncrease(_ factory: Factory) throws {
        let open = try factory()
        let a = try open()
        let b = try open()
        let k = key(counter: 5)
        try a.saveAttestedKey(k)
        try expect(try b.attestedKey(appId: app, artifactDigest: k.artifactDigest) == k, "the key does not read back")
        try expect(try !b.advanceCounter(appId: app, keyId: k.keyId, to: 5), "the counter advanced to its own value")
        try expect(try !b.advanceCounter(appId: app, keyId: k.keyId, to: 4), "the counter moved back")
        try expect(try b.advanceCounter(appId: app, keyId: k.keyId, to: 6), "the counter did not advance to 6")
        try expect(try !a.advanceCounter(appId: app, keyId: k.keyId, to: 6), "the other handle advanced to 6 again")
        try expect(
            try !a.advanceCounter(appId: "other-app", keyId: k.keyId, to: 100), "another app's unknown key advanced")
        // A re-attestation of the same key with a new artifact keeps the higher counter.
        let again = key(counter: 2, artifact: 2)
        try b.saveAttestedKey(again)
        let stored = try a.attestedKey(appId: app, artifactDigest: again.artifactDigest)
        try expect(stored?.counter == 6, "a re-attestation moved the counter to \(String(describing: stored?.counter))")
        try expect(
            try a.attestedKey(appId: app, artifactDigest: k.artifactDigest) == nil,
            "the old artifact still finds the key")
        try expect(
            try !a.advanceCounter(appId: app, keyId: k.keyId, to: 3), "after re-attestation the counter moved back")
    }

    static func concurrentAdvance(_ factory: Factory) throws {
        let open = try factory()
        let handles = [try open(), try open()]
        let k = key(counter: 0)
        try handles[0].saveAttestedKey(k)
        let lock = NSLock()
        nonisolated(unsafe) var wins = 0
        nonisolated(unsafe) var errors: [String] = []
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            do {
                if try handles[i % 2].advanceCounter(appId: app, keyId: k.keyId, to: 1) { lock.withLock { wins += 1 } }
            } catch {
                lock.withLock { errors.append("\(error)") }
            }
        }
        try expect(errors.isEmpty, "advances failed: \(errors)")
        try expect(wins == 1, "\(wins) of 8 concurrent advances to 1 succeeded")
    }

    static func consumedTokens(_ factory: Factory) throws {
        let open = try factory()
        let a = try open()
        let b = try open()
        try expect(try a.consumeToken(id: "jti-1", expiresAt: t0 + .minutes(60)), "a fresh token was not consumed")
        try expect(try !b.consumeToken(id: "jti-1", expiresAt: t0 + .minutes(60)), "a token was consumed twice")
        try expect(try b.consumeToken(id: "jti-2", expiresAt: t0 + .minutes(120)), "a second token was not consumed")
        // Purging before the expiry keeps both; after the first's expiry it forgets only that one.
        try a.purgeExpired(before: t0 + .minutes(30))
        try expect(try !b.consumeToken(id: "jti-1", expiresAt: t0 + .minutes(60)), "an early purge forgot a live token")
        try a.purgeExpired(before: t0 + .minutes(90))
        try expect(try !a.consumeToken(id: "jti-2", expiresAt: t0 + .minutes(120)), "the purge forgot a live token")
        try expect(
            try b.consumeToken(id: "jti-1", expiresAt: t0 + .minutes(60)), "an expired, purged token is remembered")
    }

    static func combinedRedemption(_ factory: Factory) throws {
        let open = try factory()
        let a = try open()
        let b = try open()
        let c1: [UInt8] = Array(100..<132)
        let c2: [UInt8] = Array(132..<164)
        let k = key(counter: 0)
        let expiry = t0 + .minutes(5)
        // A used challenge saves nothing.
        try expect(try a.redeemChallenge(c1, appId: app, expiresAt: expiry) == .redeemed, "c1 did not redeem")
        try expect(
            try b.redeemChallenge(c1, appId: app, expiresAt: expiry, thenSave: k) == .alreadyUsed, "a replay redeemed")
        try expect(try b.attestedKey(appId: app, artifactDigest: k.artifactDigest) == nil, "a replay saved a key")
        try expect(try b.redeemChallenge(c2, appId: app, expiresAt: expiry, thenSave: k) == .redeemed, "c2 did not redeem")
        try expect(try a.attestedKey(appId: app, artifactDigest: k.artifactDigest) == k, "the key was not saved")
        // A replayed challenge advances nothing; a fresh one advances once.
        let replay = try a.redeemChallenge(c2, appId: app, expiresAt: expiry, thenAdvance: k.keyId, to: 3)
        try expect(replay == (.alreadyUsed, false), "a replayed challenge gave \(replay)")
        try expect(try b.attestedKey(appId: app, artifactDigest: k.artifactDigest)?.counter == 0, "a replay advanced")
        let fresh = try b.redeemChallenge(Array(196..<228), appId: app, expiresAt: expiry, thenAdvance: k.keyId, to: 3)
        try expect(fresh == (.redeemed, true), "a fresh challenge gave \(fresh)")
        try expect(try a.attestedKey(appId: app, artifactDigest: k.artifactDigest)?.counter == 3, "the counter is not 3")
        // A redeemed challenge with a counter that does not increase: the challenge is used, the counter stays.
        let c3: [UInt8] = Array(164..<196)
        let stale = try a.redeemChallenge(c3, appId: app, expiresAt: expiry, thenAdvance: k.keyId, to: 3)
        try expect(stale == (.redeemed, false), "a stale counter gave \(stale)")
        try expect(try b.redeemChallenge(c3, appId: app, expiresAt: expiry) == .alreadyUsed, "the challenge was not used up")
    }

    /// 64 threads on two handles at once, so that each handle commits their writes in groups: every token id
    /// consumed exactly once, every challenge redeemed exactly once, and of assertions with distinct fresh
    /// challenges all carrying counter 1 exactly one advances the key.
    static func concurrentMixedWrites(_ factory: Factory) throws {
        let open = try factory()
        let handles = [try open(), try open()]
        let k = key(counter: 0)
        try handles[0].saveAttestedKey(k)
        let challenges = (0..<16).map { i in [UInt8](repeating: UInt8(i), count: 31) + [0xC7] }
        let fresh = (0..<16).map { i in [UInt8](repeating: UInt8(i), count: 31) + [0xD8] }
        let lock = NSLock()
        nonisolated(unsafe) var consumed = [Int](repeating: 0, count: 16)
        nonisolated(unsafe) var redeemed = [Int](repeating: 0, count: 16)
        nonisolated(unsafe) var advanced = 0
        nonisolated(unsafe) var freshRedeemed = 0
        nonisolated(unsafe) var errors: [String] = []
        DispatchQueue.concurrentPerform(iterations: 64) { i in
            let h = handles[i % 2]
            do {
                switch i % 4 {
                case 0, 1:
                    if try h.consumeToken(id: "jti-\(i % 16)", expiresAt: t0 + .minutes(60)) {
                        lock.withLock { consumed[i % 16] += 1 }
                    }
                case 2:
                    if try h.redeemChallenge(challenges[i % 16], appId: app, expiresAt: t0 + .minutes(5)) == .redeemed {
                        lock.withLock { redeemed[i % 16] += 1 }
                    }
                default:
                    let (r, a) = try h.redeemChallenge(fresh[i / 4], appId: app, expiresAt: t0 + .minutes(5), thenAdvance: k.keyId, to: 1)
                    lock.withLock {
                        if r == .redeemed { freshRedeemed += 1 }
                        if a { advanced += 1 }
                    }
                }
            } catch {
                lock.withLock { errors.append("\(error)") }
            }
        }
        try expect(errors.isEmpty, "writes failed: \(errors.prefix(3))")
        // Each id (challenge) that some threads tried is consumed (redeemed) exactly once; the others never.
        func once(_ kinds: Set<Int>) -> [Int] {
            (0..<16).map { c in (0..<64).contains { kinds.contains($0 % 4) && $0 % 16 == c } ? 1 : 0 }
        }
        try expect(consumed == once([0, 1]), "token ids consumed \(consumed) times, expected \(once([0, 1]))")
        try expect(redeemed == once([2]), "challenges redeemed \(redeemed) times, expected \(once([2]))")
        try expect(freshRedeemed == 16, "\(freshRedeemed) of 16 fresh challenges redeemed")
        try expect(advanced == 1, "\(advanced) of 16 assertions with counter 1 advanced the key")
        try expect(
            try handles[0].attestedKey(appId: app, artifactDigest: k.artifactDigest)?.counter == 1, "the counter is not 1")
    }
}
