import AppCheck
import Crypto
import Foundation
import SQLiteStore
import Testing
import TestSupport
import Timekeeping

/// A demo project with one app trusting the demo root and one trusting Apple only.
struct ExchangeFixture {
    static let project = AppCheckProject(number: "123456789012", id: "rollout-demo")
    static let demoApp = AppAttestApp(
        appId: "1:123456789012:ios:demo", identity: Demo.app, environment: .production, trustsDemoRoot: true)
    static let appleApp = AppAttestApp(
        appId: "1:123456789012:ios:real", identity: AppIdentity(teamId: "8YE23NZS57", bundleId: "com.kayak.travel"),
        environment: .production)
    static let configuration = AppCheckConfiguration(project: project, apps: [demoApp, appleApp])

    let clock = ManualClock(Demo.time)
    let state: any AppCheckState
    let exchange: AppCheckExchange
    let device: SimulatedAppAttestKey

    init(state: any AppCheckState = InMemoryAppCheckState()) throws {
        self.state = state
        _ = try state.saveDemoAuthority(Demo.authority.material)
        try state.saveConfiguration(Self.configuration)
        exchange = try AppCheckExchange(configuration: Self.configuration, state: state, clock: clock)
        device = try SimulatedAppAttestKey(authority: Demo.authority, app: Demo.app, environment: .production)
    }

    /// The client side of the Firebase flow: challenge → attestKey(SHA-256(challenge)) → exchange.
    func attest(_ device: SimulatedAppAttestKey? = nil, limitedUse: Bool = false) throws -> AttestationExchangeResult {
        let d = device ?? self.device
        let c = try exchange.generateChallenge(appId: Self.demoApp.appId).challenge
        let attestation = try d.attestation(clientDataHash: SHA256.hash(c), at: clock.now())
        return try exchange.exchangeAttestation(
            appId: Self.demoApp.appId, attestation: attestation, keyId: d.keyId, challenge: c, limitedUse: limitedUse)
    }

    /// challenge → generateAssertion(SHA-256(artifact ‖ challenge)) → exchange.
    func assert(artifact: [UInt8], _ device: SimulatedAppAttestKey? = nil, limitedUse: Bool = false) throws
        -> AppCheckToken
    {
        let d = device ?? self.device
        let c = try exchange.generateChallenge(appId: Self.demoApp.appId).challenge
        let assertion = try d.assertion(clientDataHash: SHA256.hash(artifact + c))
        return try exchange.exchangeAssertion(
            appId: Self.demoApp.appId, artifact: artifact, assertion: assertion, challenge: c, limitedUse: limitedUse)
    }
}

/// Both state implementations, so every exchange test runs against memory and SQLite.
enum StateKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, sqlite
    var testDescription: String { rawValue }

    func make() throws -> any AppCheckState {
        switch self {
        case .memory: return InMemoryAppCheckState()
        case .sqlite:
            let dir = try TestSupport.temporaryDirectory("appcheck-state")
            return try AppCheckStateTables(database: SQLiteDatabase(path: dir.appendingPathComponent("store.db").path))
        }
    }
}

@Suite struct ExchangeTests {
    @Test(arguments: StateKind.allCases)
    func attestThenAssertIssuesFirebaseTokens(_ kind: StateKind) throws {
        let f = try ExchangeFixture(state: kind.make())
        let attested = try f.attest()
        #expect(attested.artifact.count == 32)
        #expect(attested.token.ttl == .hours(1))
        let claims = attested.token.claims
        #expect(claims.issuer == "https://firebaseappcheck.googleapis.com/123456789012")
        #expect(claims.audience == ["projects/123456789012", "projects/rollout-demo"])
        #expect(claims.subject == ExchangeFixture.demoApp.appId)
        #expect(claims.expiresAt - claims.issuedAt == 3600)
        #expect(claims.tokenId == nil)
        #expect(f.exchange.evaluateToken(attested.token.token, consume: false).value == claims)

        for expected in 1...3 {
            f.clock.advance(by: .minutes(10))
            let token = try f.assert(artifact: attested.artifact)
            #expect(f.device.counter == UInt32(expected))
            #expect(f.exchange.evaluateToken(token.token, consume: false).passed)
        }
    }

    @Test(arguments: StateKind.allCases)
    func replayedOrStaleChallengesAreRejected(_ kind: StateKind) throws {
        let f = try ExchangeFixture(state: kind.make())
        let app = ExchangeFixture.demoApp.appId
        let c = try f.exchange.generateChallenge(appId: app).challenge
        #expect(c.count == ChallengeAuthenticator.length)
        let attestation = try f.device.attestation(clientDataHash: SHA256.hash(c), at: f.clock.now())
        _ = try f.exchange.exchangeAttestation(
            appId: app, attestation: attestation, keyId: f.device.keyId, challenge: c)
        #expect(throws: AppCheckExchangeError.challengeAlreadyUsed) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: attestation, keyId: f.device.keyId, challenge: c)
        }
        let late = try f.exchange.generateChallenge(appId: app).challenge
        f.clock.advance(by: .minutes(5))
        #expect(throws: AppCheckExchangeError.challengeExpired) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: f.device.attestation(clientDataHash: SHA256.hash(late), at: f.clock.now()),
                keyId: f.device.keyId, challenge: late)
        }
        #expect(throws: AppCheckExchangeError.unknownChallenge) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: attestation, keyId: f.device.keyId, challenge: SecureRandom.bytes(32))
        }
        // A challenge is scoped to its app.
        let other = try f.exchange.generateChallenge(appId: ExchangeFixture.appleApp.appId).challenge
        #expect(throws: AppCheckExchangeError.unknownChallenge) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: attestation, keyId: f.device.keyId, challenge: other)
        }
        // A failed attempt uses the challenge up too.
        let once = try f.exchange.generateChallenge(appId: app).challenge
        #expect(throws: AppCheckExchangeError.attestationRejected(.nonceMismatch)) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: attestation, keyId: f.device.keyId, challenge: once)
        }
        #expect(throws: AppCheckExchangeError.challengeAlreadyUsed) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: attestation, keyId: f.device.keyId, challenge: once)
        }
    }

    @Test(arguments: StateKind.allCases)
    func aCounterThatDoesNotIncreaseIsRejected(_ kind: StateKind) throws {
        let f = try ExchangeFixture(state: kind.make())
        let attested = try f.attest()
        _ = try f.assert(artifact: attested.artifact)
        _ = try f.assert(artifact: attested.artifact)
        // A clone of the key that restarted its counter: signatures are valid, the counter goes back.
        let clone = SimulatedAppAttestKey(
            authority: Demo.authority, app: Demo.app, environment: .production, key: f.device.privateKey, counter: 1)
        #expect(throws: AppCheckExchangeError.assertionRejected(.counterNotIncreasing(previous: 2, received: 2))) {
            try f.assert(artifact: attested.artifact, clone)
        }
        _ = try f.assert(artifact: attested.artifact)
        #expect(f.device.counter == 3)
        #expect(throws: AppCheckExchangeError.unknownArtifact) { try f.assert(artifact: SecureRandom.bytes(32)) }
    }

    @Test func demoLeafIsRefusedByAnAppleOnlyApp() throws {
        let f = try ExchangeFixture()
        let app = ExchangeFixture.appleApp.appId
        let device = try SimulatedAppAttestKey(
            authority: Demo.authority, app: ExchangeFixture.appleApp.identity, environment: .production)
        let c = try f.exchange.generateChallenge(appId: app).challenge
        #expect(throws: AppCheckExchangeError.attestationRejected(.demoRootNotTrusted)) {
            try f.exchange.exchangeAttestation(
                appId: app, attestation: device.attestation(clientDataHash: SHA256.hash(c), at: f.clock.now()),
                keyId: device.keyId, challenge: c)
        }
    }

    @Test(arguments: StateKind.allCases)
    func limitedUseTokensAreConsumedOnce(_ kind: StateKind) throws {
        let f = try ExchangeFixture(state: kind.make())
        let attested = try f.attest(limitedUse: true)
        let token = attested.token
        #expect(token.ttl == .minutes(5))
        let jti = try #require(token.claims.tokenId)
        #expect(jti.count >= 16)
        #expect(token.claims.expiresAt - token.claims.issuedAt == 300)
        let first = f.exchange.evaluateToken(token.token, consume: true)
        #expect(first.passed)
        #expect(first.checks.last?.name == "replay")
        let second = f.exchange.evaluateToken(token.token, consume: true)
        #expect(second.failure == .alreadyConsumed)
        #expect(f.exchange.evaluateToken(token.token, consume: false).passed)
        let assertionToken = try f.assert(artifact: attested.artifact, limitedUse: true)
        #expect(assertionToken.claims.tokenId != nil && assertionToken.claims.tokenId != jti)
        #expect(f.exchange.evaluateToken(assertionToken.token, consume: true).passed)
        #expect(f.exchange.evaluateToken(assertionToken.token, consume: true).failure == .alreadyConsumed)
    }

    @Test func expiredForgedAndMisaddressedTokensAreRejected() throws {
        let f = try ExchangeFixture()
        let token = try f.attest().token
        f.clock.advance(by: .hours(1))
        #expect(
            f.exchange.evaluateToken(token.token, consume: false).failure
                == .expired(expiresAt: token.claims.expiresAt, at: f.clock.now()))

        let key = try AppCheckSigningKey(
            privateKeyDER: try #require(f.state.signingKeys().first).privateKeyDER, createdAt: Demo.time)
        let issuer = AppCheckTokenIssuer(key: key)
        let now = f.clock.now()
        func claims(project: AppCheckProject = ExchangeFixture.project, app: String = ExchangeFixture.demoApp.appId)
            -> AppCheckTokenClaims
        {
            .firebase(project: project, appId: app, issuedAt: now, ttl: .hours(1), tokenId: nil)
        }
        let evaluate = { (t: String) in f.exchange.evaluateToken(t, consume: false).failure }
        #expect(evaluate(try issuer.token(claims())) == nil)
        // The header segment, written once per key, is Firebase's header for this key, members in its order.
        let header = try #require(Base64.decode(String(try issuer.token(claims()).split(separator: ".")[0]), .jwt))
        #expect(String(decoding: header, as: UTF8.self) == "{\"alg\":\"RS256\",\"kid\":\"\(key.kid)\",\"typ\":\"JWT\"}")
        var wrongAudience = claims()
        wrongAudience.audience = ["projects/999", "projects/someone-else"]
        #expect(evaluate(try issuer.token(wrongAudience)) == .wrongAudience(["projects/999", "projects/someone-else"]))
        var wrongIssuer = claims()
        wrongIssuer.issuer = "https://firebaseappcheck.googleapis.com/999"
        #expect(evaluate(try issuer.token(wrongIssuer)) == .wrongIssuer("https://firebaseappcheck.googleapis.com/999"))
        #expect(evaluate(try issuer.token(claims(app: "1:1:ios:unknown"))) == .unknownApp("1:1:ios:unknown"))
        var future = claims()
        future.issuedAt += 3600
        future.expiresAt += 3600
        #expect(evaluate(try issuer.token(future)) == .issuedInFuture(issuedAt: future.issuedAt, at: now))

        let good = try issuer.token(claims())
        let parts = good.split(separator: ".").map(String.init)
        var sig = Base64.decode(parts[2])!
        sig[10] ^= 1
        #expect(evaluate(parts[0] + "." + parts[1] + "." + Base64.encodeURL(sig)) == .signatureInvalid)
        let otherKey = AppCheckTokenIssuer(key: try AppCheckSigningKey.generate(createdAt: now))
        #expect(evaluate(try otherKey.token(claims())) == .unknownSigningKey(otherKey.key.kid))
        let none = Base64.encodeURL(Array("{\"alg\":\"none\",\"typ\":\"JWT\",\"kid\":\"\(key.kid)\"}".utf8))
        #expect(evaluate(none + "." + parts[1] + "." + parts[2]) == .unsupportedHeader("alg is none, not RS256"))
        #expect(evaluate("not a token") == .malformedToken("not three base64url parts holding JSON objects"))
    }

    @Test func stateSurvivesReopeningTheStore() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-reopen").appendingPathComponent("store.db").path
        let artifact: [UInt8]
        let kid: String
        do {
            let f = try ExchangeFixture(state: AppCheckStateTables(database: SQLiteDatabase(path: path)))
            artifact = try f.attest().artifact
            _ = try f.assert(artifact: artifact)
            kid = try #require(f.state.signingKeys().first?.kid)
        }
        let state = try AppCheckStateTables(database: SQLiteDatabase(path: path))
        #expect(try state.configuration() == ExchangeFixture.configuration)
        #expect(try state.demoAuthority() == Demo.authority.material)
        #expect(try state.signingKeys().map(\.kid) == [kid])
        let record = try #require(
            try state.attestedKey(appId: ExchangeFixture.demoApp.appId, artifactDigest: SHA256.hash(artifact)))
        #expect(record.counter == 1)
        #expect(try state.advanceCounter(appId: record.appId, keyId: record.keyId, to: 1) == false)
        #expect(try state.advanceCounter(appId: record.appId, keyId: record.keyId, to: 2) == true)
        let reopened = try AppCheckExchange(
            configuration: ExchangeFixture.configuration, state: state, clock: ManualClock(Demo.time))
        #expect(reopened.tokenVerifier.keys.map(\.kid) == [kid])
    }

    @Test func countersAdvanceOnceUnderConcurrentConnections() throws {
        let path = try TestSupport.temporaryDirectory("appcheck-race").appendingPathComponent("store.db").path
        let setup = try AppCheckStateTables(database: SQLiteDatabase(path: path))
        let record = AttestedKeyRecord(
            appId: "a", keyId: [1, 2, 3], publicKey: [4], counter: 0, artifactDigest: [5], receipt: [],
            environment: .production, attestedAt: Demo.time)
        try setup.saveAttestedKey(record)
        let connections = try (0..<4).map { _ in try AppCheckStateTables(database: SQLiteDatabase(path: path)) }
        let wins = Atomic()
        let errors = Atomic()
        DispatchQueue.concurrentPerform(iterations: 4 * 50) { i in
            let counter = UInt32(i / 4 + 1)
            do {
                if try connections[i % 4].advanceCounter(appId: "a", keyId: [1, 2, 3], to: counter) { wins.add() }
            } catch {
                errors.add()
            }
        }
        // Four connections race with each counter value: at most one of them wins it, and none fails.
        #expect(errors.value == 0)
        #expect(wins.value >= 1 && wins.value <= 50)
        #expect(try setup.attestedKey(appId: "a", artifactDigest: [5])?.counter == 50)
    }

    @Test(arguments: StateKind.allCases)
    func purgeForgetsExpiredChallengesAndTokens(_ kind: StateKind) throws {
        let state = try kind.make()
        #expect(try state.redeemChallenge([1], appId: "a", expiresAt: Demo.time) == .redeemed)
        #expect(try state.redeemChallenge([2], appId: "a", expiresAt: Demo.time + .hours(2)) == .redeemed)
        #expect(try state.consumeToken(id: "t1", expiresAt: Demo.time))
        try state.purgeExpired(before: Demo.time + .hours(1))
        #expect(try state.redeemChallenge([1], appId: "a", expiresAt: Demo.time) == .redeemed)
        #expect(try state.redeemChallenge([2], appId: "a", expiresAt: Demo.time + .hours(2)) == .alreadyUsed)
        #expect(try state.consumeToken(id: "t1", expiresAt: Demo.time))
    }

    @Test func demoAuthorityIsStoredOnceAndReloaded() throws {
        let state = InMemoryAppCheckState()
        let a = try DemoCertificateAuthority.loadOrCreate(in: state)
        let b = try DemoCertificateAuthority.loadOrCreate(in: state)
        #expect(a.material == b.material)
        var broken = a.material
        broken.intermediatePrivateKey = Demo.authority.material.intermediatePrivateKey
        #expect(throws: DemoCertificateAuthority.InvalidMaterial.self) {
            try DemoCertificateAuthority(material: broken)
        }
    }

    @Test func setupRefusesADemoTrustingAppWithoutADemoAuthority() throws {
        #expect(throws: AppCheckSetupError.self) {
            try AppCheckExchange(
                configuration: ExchangeFixture.configuration, state: InMemoryAppCheckState(),
                clock: ManualClock(Demo.time))
        }
    }
}

/// A thread-safe counter for the race test.
final class Atomic: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func add() { lock.withLock { n += 1 } }
    var value: Int { lock.withLock { n } }
}

@Suite struct SimulatedClientTests {
    @Test func attestsOnceThenAsserts() throws {
        let f = try ExchangeFixture()
        let client = SimulatedAppCheckClient(key: f.device, appId: ExchangeFixture.demoApp.appId)
        #expect(!client.hasAttested)
        let first = try client.token(from: f.exchange, at: f.clock.now())
        let artifact = try #require(client.artifact)
        #expect(f.device.counter == 0)
        let second = try client.token(from: f.exchange, at: f.clock.now(), limitedUse: true)
        #expect(f.device.counter == 1)
        #expect(client.artifact == artifact)
        #expect(second.claims.tokenId != nil && first.claims.tokenId == nil)
        #expect(f.exchange.evaluateToken(second.token, consume: true).passed)
    }

    @Test func reportsTheExchangesReasonAsItsCode() throws {
        let f = try ExchangeFixture()
        let stranger = try SimulatedAppAttestKey(
            authority: Demo.authority, app: AppIdentity(teamId: "OTHERTEAM1", bundleId: "x"), environment: .production)
        let client = SimulatedAppCheckClient(key: stranger, appId: ExchangeFixture.demoApp.appId)
        #expect(throws: AppCheckClientError.exchange(.attestationRejected(.rpIdHashMismatch))) {
            try client.token(from: f.exchange, at: f.clock.now())
        }
        #expect(!client.hasAttested)
        let unknown = SimulatedAppCheckClient(key: f.device, appId: "1:1:ios:nope")
        do {
            _ = try unknown.token(from: f.exchange, at: f.clock.now())
            Issue.record("an unknown app got a token")
        } catch {
            #expect(error.code == "unknownApp")
        }
    }
}
