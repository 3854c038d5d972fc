import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import SQLiteStore
import Telemetry
import Testing
import TestSupport
import Timekeeping

@Suite struct EventsIntakeTests {
    func batches(_ f: ServerFixture) throws -> [[SQLiteValue]] {
        try f.store.withDatabase {
            try $0.query("SELECT source, events, installations FROM telemetry_batches ORDER BY id")
        }
    }

    var bearer: [(String, String)] { [("Authorization", "Bearer \(ServerFixture.eventsToken)")] }

    @Test func ndjsonLandsAsOneBatchThroughTheIngest() throws {
        let f = try ServerFixture()
        let t = f.clock.now().microseconds
        let body = """
            {"t":\(t),"i":"fid-1","k":"success","c":"enabled","p":"appAttest","os":"17.4","app":"3.2.1"}
            {"t":\(t + 1),"i":"fid-2","k":"failure","e":"serverUnavailable","c":"enabled","p":"appAttest"}

            {"t":\(t + 2),"i":"fid-1","k":"session","c":"enabled"}
            """
        let r = try f.post("/v1/events", raw: Array(body.utf8), headers: bearer)
        #expect(r.status == 200, "\(r)")
        #expect(r.json?["accepted"]?.numberValue?.int64 == 3)
        let rows = try batches(f)
        #expect(rows.count == 1)
        #expect(rows.first?[1].int == 3 && rows.first?[2].int == 2)
        #expect(rows.first?[0].string == "http:127.0.0.1")
    }

    /// The same events through `POST /v1/events` and through `rollout ingest` leave the same telemetry rows.
    @Test func theSameEventsLandAsWithRolloutIngest() throws {
        let f = try ServerFixture()
        let t = f.clock.now().microseconds
        var lines = ""
        for i in 0..<200 {
            let kind = ["success", "failure", "session", "crash", "fetch"][i % 5]
            let extra = kind == "failure" ? ",\"e\":\"invalidKey\"" : kind == "fetch" ? ",\"v\":3" : ""
            lines +=
                "{\"t\":\(t + Int64(i) * 1_000_000),\"i\":\"fid-\(i % 37)\",\"k\":\"\(kind)\",\"c\":\""
                + "\(i % 3 == 0 ? "enabled" : "control")\",\"p\":\"appAttest\",\"os\":\"17.\(i % 4)\"\(extra)}\n"
        }
        #expect(try f.post("/v1/events", raw: Array(lines.utf8), headers: bearer).status == 200)
        let file = f.directory.appendingPathComponent("events.ndjson")
        try lines.write(to: file, atomically: true, encoding: .utf8)
        let other = f.directory.appendingPathComponent("other.db").path
        try #require(try TestSupport.run(try TestSupport.rolloutBinary(), ["init", "--store", other]).status == 0)
        let ingest = try TestSupport.run(try TestSupport.rolloutBinary(), ["ingest", file.path, "--store", other])
        try #require(ingest.status == 0, "\(ingest.stderr)")
        let queries = [
            "SELECT level, bucket, key, count FROM telemetry_counters ORDER BY level, bucket, key",
            "SELECT hour, key, count FROM telemetry_presence ORDER BY hour, key",
        ]
        let theirs = try RolloutStore(path: other, create: false)
        for q in queries {
            let served = try f.store.withDatabase { try $0.query(q) }
            let ingested = try theirs.withDatabase { try $0.query(q) }
            #expect(!served.isEmpty, "\(q)")
            #expect(served == ingested, "\(q)")
        }
        func installations(_ store: RolloutStore) throws -> [String] {
            try store.withDatabase { db in
                var all: [String] = []
                try TelemetryTables.forEachInstallation(in: db) { id, r in all.append("\(id) \(r)") }
                return all
            }
        }
        let served = try installations(f.store)
        #expect(served.count == 37)
        #expect(served == (try installations(theirs)))
    }

    @Test func aJSONArrayLandsLikeTheSameLines() throws {
        let f = try ServerFixture()
        let t = f.clock.now().microseconds
        let body = "[{\"t\":\(t),\"i\":\"fid-9\",\"k\":\"crash\"}, {\"t\":\(t + 5),\"i\":\"fid-8\",\"k\":\"session\"}]"
        let r = try f.post("/v1/events", raw: Array(body.utf8), headers: bearer)
        #expect(r.status == 200, "\(r)")
        #expect(r.json?["accepted"]?.numberValue?.int64 == 2)
        #expect(try batches(f).map { $0[1].int } == [2])
    }

    @Test func anUnreadableLineLandsNothingAndIs400() throws {
        let f = try ServerFixture()
        let t = f.clock.now().microseconds
        let body = "{\"t\":\(t),\"i\":\"fid-1\",\"k\":\"success\"}\n{\"t\":\(t),\"k\":\"success\"}\n"
        let r = try f.post("/v1/events", raw: Array(body.utf8), headers: bearer)
        #expect(r.status == 400)
        #expect(r.json?["error"]?["status"]?.stringValue == "INVALID_ARGUMENT")
        #expect(r.json?["error"]?["message"]?.stringValue?.contains("line 2") == true, "\(r)")
        #expect(try batches(f).isEmpty)
    }

    /// A member named twice is refused in NDJSON as it is in a JSON array: one rule for both shapes of a body.
    @Test func aMemberNamedTwiceIs400InEitherShape() throws {
        let f = try ServerFixture()
        let t = f.clock.now().microseconds
        let line = "{\"t\":\(t),\"i\":\"fid-1\",\"k\":\"success\",\"k\":\"failure\",\"e\":\"invalidKey\"}"
        for body in [line + "\n", "[" + line + "]"] {
            let r = try f.post("/v1/events", raw: Array(body.utf8), headers: bearer)
            #expect(r.status == 400, "\(body): \(r)")
            #expect(r.json?["error"]?["message"]?.stringValue?.contains("duplicate member name \"k\"") == true, "\(r)")
        }
        #expect(try batches(f).isEmpty)
    }

    @Test func withoutTheBearerTokenIs401() throws {
        let f = try ServerFixture()
        let body = Array("{\"t\":1,\"i\":\"x\",\"k\":\"success\"}\n".utf8)
        #expect(try f.post("/v1/events", raw: body).status == 401)
        #expect(try f.post("/v1/events", raw: body, headers: [("Authorization", "Bearer wrong-token")]).status == 401)
        #expect(
            try f.post("/v1/events", raw: body, headers: [("Authorization", "Basic \(ServerFixture.eventsToken)")])
                .status == 401)
        #expect(try batches(f).isEmpty)
    }

    @Test func anEventsBodyOverTheLimitIs413AndLandsNothing() throws {
        let f = try ServerFixture()
        let line = "{\"t\":\(f.clock.now().microseconds),\"i\":\"fid-1\",\"k\":\"success\"}\n"
        let body = Array(String(repeating: line, count: 65 * 1024 / line.utf8.count + 1).utf8)
        let r = try f.client.request("POST", "/v1/events", headers: bearer, body: body)
        #expect(r.status == 413)
        #expect(try batches(f).isEmpty)
    }
}

@Suite struct KeyRotationTests {
    func kids(_ f: ServerFixture) throws -> [String] {
        let r = try f.client.request("GET", "/v1/jwks")
        #expect(r.status == 200)
        return (try JSONParser().parse(r.body))["keys"]?.arrayValue?.compactMap { $0["kid"]?.stringValue } ?? []
    }

    func kid(of token: String) throws -> String? {
        let header = try #require(Base64.decode(String(token.split(separator: ".")[0])))
        return (try JSONParser().parse(header))["kid"]?.stringValue
    }

    @Test func rotationServesOldAndNewKeysDuringTheOverlapThenOnlyTheNew() throws {
        let f = try ServerFixture()
        let before = try kids(f)
        #expect(before.count == 1)
        let oldToken = try f.attest().token
        #expect(try kid(of: oldToken) == before[0])

        // As `rollout appcheck keys rotate --overlap 1h` does, from another connection to the store.
        let other = try AppCheckStateTables(database: RolloutStore(path: f.path, create: false).database)
        let fresh = try AppCheckExchange.rotateSigningKeys(state: other, now: f.clock.now(), overlap: .hours(1))
        // The server notices within its check interval.
        f.clock.advance(by: .seconds(Int64(3)))
        #expect(Set(try kids(f)) == Set([before[0], fresh.kid]))
        let newToken = try f.attest().token
        #expect(try kid(of: newToken) == fresh.kid)
        #expect(f.holder.exchange().evaluateToken(oldToken, consume: false).passed)
        #expect(f.holder.exchange().evaluateToken(newToken, consume: false).passed)
        // `rollout token verify` builds its verifier from the store: during the overlap both tokens pass there too.
        let during = try AppCheckTokenVerifier(state: other)
        #expect(during.evaluate(oldToken, at: f.clock.now()).passed)
        #expect(during.evaluate(newToken, at: f.clock.now()).passed)

        // After the overlap: only the new key is published, and the old key's tokens no longer verify.
        f.clock.advance(by: .hours(1))
        #expect(try kids(f) == [fresh.kid])
        #expect(!f.holder.exchange().evaluateToken(oldToken, consume: false).passed)
        // Nor in `token verify`, although the store still holds the retired key until the purge.
        #expect(try other.signingKeys().count == 2)
        let after = try AppCheckTokenVerifier(state: other)
        let refused = after.evaluate(oldToken, at: f.clock.now())
        #expect(refused.failure == .retiredSigningKey(before[0], at: try #require(other.signingKeys().first { $0.kid == before[0] }?.retiresAt)))
        #expect(after.evaluate(try f.attest().token, at: f.clock.now()).passed)
        // Purging forgets the retired private key.
        try f.tables.purgeExpired(before: f.clock.now())
        #expect(try f.tables.signingKeys().map(\.kid) == [fresh.kid])
    }

    @Test func stateSurvivesARestartOfTheServer() throws {
        let f = try ServerFixture()
        let (key, artifact, token) = try f.attest()
        f.server.shutdown()
        // A second server on the same store: same signing key, same attested key and counter.
        let state = try AppCheckStateTables(database: RolloutStore(path: f.path, create: false).database)
        let holder = try ExchangeHolder(state: state, clock: f.clock, trustDemo: true)
        #expect(holder.exchange().evaluateToken(token, consume: false).passed)
        let server = try HTTPServer(
            host: "127.0.0.1", port: 0, handler: ExchangeService(
                holder: holder, intake: nil, limiter: nil, bearerToken: ServerFixture.eventsToken))
        defer { server.shutdown() }
        let remote = RemoteAppCheckExchange(
            transport: try LoopbackHTTPClient(host: "127.0.0.1", port: server.port),
            project: ServerFixture.project.number)
        // The device asserts with the artifact it got from the first server: the key and its counter were kept.
        let c = try remote.generateChallenge(appId: ServerFixture.app.appId).challenge
        let t = try remote.exchangeAssertion(
            appId: ServerFixture.app.appId, artifact: artifact,
            assertion: try key.assertion(clientDataHash: SHA256.hash(artifact + c)), challenge: c, limitedUse: false)
        #expect(t.claims.subject == ServerFixture.app.appId)
        #expect(
            try state.attestedKey(appId: ServerFixture.app.appId, artifactDigest: SHA256.hash(artifact))?.counter == 1)
    }
}

@Suite struct ConsumedTokenTests {
    /// `v1beta/projects/{p}:verifyAppCheckToken` consumes a limited-use token once; the consumption is in the
    /// store, so a second server on the same file still calls the replay a replay.
    @Test func aLimitedUseTokenIsConsumedOnceAcrossRestarts() throws {
        let f = try ServerFixture()
        let r = try f.post(
            f.appPath("exchangeDebugToken"), ["debugToken": .string(ServerFixture.debugToken), "limitedUse": true])
        let token = try #require(r.json?["token"]?.stringValue)
        let verify = "/v1beta/projects/\(ServerFixture.project.number):verifyAppCheckToken"
        let first = try f.post(verify, raw: JSONWriter().bytes(["appCheckToken": .string(token)]), headers: Self.bearer)
        #expect(first.status == 200 && first.json?["alreadyConsumed"] == nil, "\(first)")
        #expect(
            try f.post(verify, raw: JSONWriter().bytes(["app_check_token": .string(token)]), headers: Self.bearer)
                .json?["alreadyConsumed"]?.boolValue == true)
        let state = try AppCheckStateTables(database: RolloutStore(path: f.path, create: false).database)
        let holder = try ExchangeHolder(state: state, clock: f.clock, trustDemo: true)
        let server = try HTTPServer(
            host: "127.0.0.1", port: 0, handler: ExchangeService(
                holder: holder, intake: nil, limiter: nil, bearerToken: ServerFixture.eventsToken))
        defer { server.shutdown() }
        let client = try LoopbackHTTPClient(host: "127.0.0.1", port: server.port)
        let again = try client.request(
            "POST", verify, headers: Self.bearer, body: JSONWriter().bytes(["appCheckToken": .string(token)]))
        #expect(again.status == 200)
        #expect((try JSONParser().parse(again.body))["alreadyConsumed"]?.boolValue == true)
    }

    static let bearer = [("Authorization", "Bearer \(ServerFixture.eventsToken)")]

    /// Reproduction: `verifyAppCheckToken` needed no credentials, so anyone holding a limited-use token (the
    /// device, or whoever took it from the device) could consume it, and the app's backend was then told
    /// `alreadyConsumed`. Firebase asks an authenticated backend for it; here it takes the server's bearer token
    /// (the one of `POST /v1/events`, which exists with the intake off too), checked on the head: without it, or
    /// with another, the answer is 401 before the body is read, and the token is not consumed.
    @Test(arguments: [true, false])
    func verifyingATokenNeedsTheBearerToken(events: Bool) throws {
        let f = try ServerFixture(events: events)
        let r = try f.post(
            f.appPath("exchangeDebugToken"), ["debugToken": .string(ServerFixture.debugToken), "limitedUse": true])
        let token = try #require(r.json?["token"]?.stringValue)
        let body = JSONWriter().bytes(["appCheckToken": .string(token)])
        for project in [ServerFixture.project.id, ServerFixture.project.number] {
            let verify = "/v1beta/projects/\(project):verifyAppCheckToken"
            for headers in [[], [("Authorization", "Bearer junk-0123456789abcdef")], [("Authorization", "Basic x")]] {
                let refused = try f.post(verify, raw: body, headers: headers)
                #expect(refused.status == 401, "\(refused)")
                #expect(refused.json?["error"]?["status"]?.stringValue == "UNAUTHENTICATED")
            }
        }
        let refusedOnTheHead = try SlowClientTests.RawSocket(port: f.server.port)
        refusedOnTheHead.send(
            "POST /v1beta/projects/\(ServerFixture.project.id):verifyAppCheckToken HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + "Content-Length: 100000\r\n\r\n")
        #expect(SlowClientTests.response(refusedOnTheHead.untilClosed(within: 10))?.status == 401)
        let verify = "/v1beta/projects/\(ServerFixture.project.id):verifyAppCheckToken"
        let first = try f.post(verify, raw: body, headers: Self.bearer)
        #expect(first.status == 200 && first.json?["alreadyConsumed"] == nil, "\(first)")
        #expect(try f.post(verify, raw: body, headers: Self.bearer).json?["alreadyConsumed"]?.boolValue == true)
    }
}

@Suite struct RemoteClientTests {
    /// A simulated device gets its tokens over HTTP: attestation first, assertions afterwards.
    @Test func simulatedDeviceAttestsAndAssertsOverHTTP() throws {
        let f = try ServerFixture()
        let remote = RemoteAppCheckExchange(transport: f.client, project: ServerFixture.project.id)
        let client = SimulatedAppCheckClient(key: try f.newKey(), appId: ServerFixture.app.appId)
        let first = try client.token(from: remote, at: f.clock.now())
        #expect(client.hasAttested)
        let second = try client.token(from: remote, at: f.clock.now(), limitedUse: true)
        #expect(second.ttl == .minutes(5) && second.claims.tokenId != nil)
        #expect(first.claims.subject == ServerFixture.app.appId)
        for t in [first, second] { #expect(f.holder.exchange().evaluateToken(t.token, consume: false).passed) }
        // A refusal keeps the server's reason as the error code (the simulator's telemetry error class).
        let stranger = SimulatedAppCheckClient(key: try f.newKey(), appId: "1:123456789:ios:unknown")
        #expect(throws: AppCheckClientError.self) { try stranger.token(from: remote, at: f.clock.now()) }
        do {
            _ = try stranger.token(from: remote, at: f.clock.now())
        } catch {
            #expect(error.code == "unknownApp")
        }
    }

    @Test func theClientRefusesNonLoopbackAddresses() {
        #expect(throws: HTTPClientError.self) { try LoopbackHTTPClient(host: "10.0.0.1", port: 80) }
        #expect(throws: HTTPClientError.self) { try LoopbackHTTPClient(url: "http://example.com:80") }
    }
}
