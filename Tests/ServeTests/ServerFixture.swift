import AppCheck
import Crypto
import ExchangeServer
import Foundation
import JSON
import SQLiteStore
import Telemetry
import TestSupport
import Timekeeping

/// A state that fails on demand (a store that stopped answering), delegating to a real one otherwise.
final class FailingState: AppCheckState, @unchecked Sendable {
    let base: any AppCheckState
    private let lock = NSLock()
    private var failing = false
    init(_ base: any AppCheckState) { self.base = base }
    func fail(_ on: Bool) { lock.withLock { failing = on } }
    private func check() throws {
        if lock.withLock({ failing }) { throw TestSupport.Failure("disk I/O error at /srv/secret/store.db") }
    }

    func configuration() throws -> AppCheckConfiguration? { try base.configuration() }
    func saveConfiguration(_ c: AppCheckConfiguration) throws { try base.saveConfiguration(c) }
    func redeemChallenge(_ c: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption {
        try check()
        return try base.redeemChallenge(c, appId: appId, expiresAt: expiresAt)
    }
    func saveAttestedKey(_ k: AttestedKeyRecord) throws {
        try check()
        try base.saveAttestedKey(k)
    }
    func attestedKey(appId: String, artifactDigest: [UInt8]) throws -> AttestedKeyRecord? {
        try check()
        return try base.attestedKey(appId: appId, artifactDigest: artifactDigest)
    }
    func advanceCounter(appId: String, keyId: [UInt8], to c: UInt32) throws -> Bool {
        try check()
        return try base.advanceCounter(appId: appId, keyId: keyId, to: c)
    }
    func consumeToken(id: String, expiresAt: Instant) throws -> Bool {
        try check()
        return try base.consumeToken(id: id, expiresAt: expiresAt)
    }
    func signingKeys() throws -> [StoredSigningKey] {
        try check()
        return try base.signingKeys()
    }
    func addSigningKey(_ k: StoredSigningKey) throws { try base.addSigningKey(k) }
    func rotateSigningKeys(to k: StoredSigningKey, retiringOthersAt t: Instant) throws {
        try base.rotateSigningKeys(to: k, retiringOthersAt: t)
    }
    func addDebugToken(_ t: DebugTokenRecord) throws { try base.addDebugToken(t) }
    func debugTokens() throws -> [DebugTokenRecord] { try base.debugTokens() }
    func hasDebugToken(appId: String, digest: [UInt8]) throws -> Bool {
        try check()
        return try base.hasDebugToken(appId: appId, digest: digest)
    }
    func removeDebugToken(appId: String, name: String) throws -> Int {
        try base.removeDebugToken(appId: appId, name: name)
    }
    func demoAuthority() throws -> DemoCertificateAuthority.Material? { try base.demoAuthority() }
    func saveDemoAuthority(_ m: DemoCertificateAuthority.Material) throws -> DemoCertificateAuthority.Material {
        try base.saveDemoAuthority(m)
    }
    func purgeExpired(before t: Instant) throws { try base.purgeExpired(before: t) }
}

/// Telemetry counters whose commits fail on demand (a store that stopped answering), delegating to real ones.
final class FailingCounters: TelemetryCounters, @unchecked Sendable {
    let base: any TelemetryCounters
    private let lock = NSLock()
    private var failing = false
    init(_ base: any TelemetryCounters) { self.base = base }
    func fail(_ on: Bool) { lock.withLock { failing = on } }

    func commit(_ batch: TelemetryBatch, source: String, at committedAt: Instant) throws -> BatchReceipt? {
        if lock.withLock({ failing }) { throw TestSupport.Failure("disk I/O error at /srv/secret/store.db") }
        return try base.commit(batch, source: source, at: committedAt)
    }
    func snapshot(_ c: WatchConfiguration, now: Instant) throws -> TelemetrySnapshot { try base.snapshot(c, now: now) }
    func counterLooks(_ level: BucketLevel, from: Int64, to: Int64) throws -> [CounterLook] {
        try base.counterLooks(level, from: from, to: to)
    }
    func newestEvent() throws -> Instant? { try base.newestEvent() }
    func installation(_ id: String) throws -> InstallationRecord? { try base.installation(id) }
    func installationCount() throws -> Int { try base.installationCount() }
    func batches() throws -> [BatchReceipt] { try base.batches() }
    func allTimeTotals() throws -> CounterTotals { try base.allTimeTotals() }
    func reason(of detail: FailureDetail) throws -> String? { try base.reason(of: detail) }
    func describe(_ detail: FailureDetail) throws -> String { try base.describe(detail) }
}

/// An access log kept in memory.
final class LogBook: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [AccessLogEntry] = []
    func add(_ e: AccessLogEntry) { lock.withLock { entries.append(e) } }
    var all: [AccessLogEntry] { lock.withLock { entries } }

    /// The entries once there are `count` of them: a line is written when libmicrohttpd reports its request
    /// complete, just after the response, so this waits (up to 20 s) rather than reading at once.
    func waitFor(_ count: Int) -> [AccessLogEntry] {
        let deadline = Date().addingTimeInterval(20)
        while all.count < count, Date() < deadline { usleep(5_000) }
        return all
    }
}

/// `rollout serve`'s pieces on a fresh store file, bound to 127.0.0.1 on a free port, with a manual clock that
/// starts at the real time (firebase-admin checks expiry against the real clock, with no leeway).
final class ServerFixture {
    static let project = AppCheckProject(number: "123456789", id: "rollout-serve-test")
    static let app = AppAttestApp(
        appId: "1:123456789:ios:serve", identity: AppIdentity(teamId: "ABCDE12345", bundleId: "com.example.serve"),
        environment: .production, trustsDemoRoot: true)
    static let eventsToken = "events-token-for-the-tests-0123456789"
    static let debugToken = "0A1B2C3D-4E5F-4061-8273-94A5B6C7D8E9"

    let directory: URL
    let path: String
    let clock: ManualClock
    let store: RolloutStore
    let tables: AppCheckStateTables
    let state: FailingState
    let counters: FailingCounters
    let authority: DemoCertificateAuthority
    let holder: ExchangeHolder
    let service: ExchangeService
    let server: HTTPServer
    let log: LogBook
    let client: LoopbackHTTPClient

    init(
        rateLimit: Double? = nil, trustDemo: Bool = true, exchangeBodyLimit: Int = 64 * 1024,
        eventsBodyLimit: Int = 64 * 1024, events: Bool = true, limits: HTTPServerLimits = HTTPServerLimits()
    ) throws {
        directory = try TestSupport.temporaryDirectory("rollout-serve")
        path = directory.appendingPathComponent("store.db").path
        let clock = ManualClock(SystemClock().now())
        self.clock = clock
        store = try RolloutStore(path: path)
        tables = try AppCheckStateTables(database: RolloutStore(path: path, create: false).database)
        try tables.saveConfiguration(AppCheckConfiguration(project: Self.project, apps: [Self.app]))
        try tables.addDebugToken(
            DebugTokenRecord(
                appId: Self.app.appId, digest: SHA256.hash(Array(Self.debugToken.utf8)), name: "ci",
                createdAt: clock.now()))
        authority = try DemoCertificateAuthority.loadOrCreate(in: tables)
        state = FailingState(tables)
        holder = try ExchangeHolder(state: state, clock: clock, trustDemo: trustDemo)
        let limiter = rateLimit.map { RateLimiter(rate: $0, burst: $0, clock: clock) }
        counters = FailingCounters(try store.telemetryCounters())
        service = ExchangeService(
            holder: holder,
            intake: events ? EventsIntake(counters: counters, bearerToken: Self.eventsToken, clock: clock) : nil,
            limiter: limiter, bearerToken: Self.eventsToken, exchangeBodyLimit: exchangeBodyLimit,
            eventsBodyLimit: eventsBodyLimit)
        let book = LogBook()
        log = book
        server = try HTTPServer(host: "127.0.0.1", port: 0, handler: service, limits: limits, clock: clock) {
            book.add($0)
        }
        client = try LoopbackHTTPClient(host: "127.0.0.1", port: server.port)
    }

    deinit {
        server.shutdown()
        try? FileManager.default.removeItem(at: directory)
    }

    var endpoint: String { "http://127.0.0.1:\(server.port)" }
    func appPath(_ method: String, project: String = ServerFixture.project.id, app: String = ServerFixture.app.appId)
        -> String
    { "/v1/projects/\(project)/apps/\(app):\(method)" }

    func newKey() throws -> SimulatedAppAttestKey {
        try SimulatedAppAttestKey(authority: authority, app: Self.app.identity, environment: .production)
    }

    /// POSTs a JSON object (or raw bytes) and returns status and parsed body.
    @discardableResult
    func post(_ path: String, _ body: JSONValue) throws -> (status: Int, json: JSONValue?) {
        try post(path, raw: JSONWriter().bytes(body))
    }

    func post(_ path: String, raw: [UInt8], headers: [(String, String)] = []) throws -> (status: Int, json: JSONValue?)
    {
        let r = try client.request("POST", path, headers: [("Content-Type", "application/json")] + headers, body: raw)
        return (r.status, try? JSONParser().parse(r.body))
    }

    func challenge() throws -> [UInt8] {
        let r = try post(appPath("generateAppAttestChallenge"), [:])
        guard r.status == 200, let text = r.json?["challenge"]?.stringValue, let c = Base64.decode(text) else {
            throw TestSupport.Failure("no challenge: \(r)")
        }
        return c
    }

    /// Attests a fresh key over HTTP: (key, artifact, token).
    func attest() throws -> (key: SimulatedAppAttestKey, artifact: [UInt8], token: String) {
        let key = try newKey()
        let c = try challenge()
        let attestation = try key.attestation(clientDataHash: SHA256.hash(c), at: clock.now())
        let r = try post(
            appPath("exchangeAppAttestAttestation"),
            [
                "attestationStatement": .string(Base64.encode(attestation)), "challenge": .string(Base64.encode(c)),
                "keyId": .string(Base64.encode(key.keyId)),
            ])
        guard r.status == 200, let a = r.json?["artifact"]?.stringValue, let artifact = Base64.decode(a),
            let token = r.json?["appCheckToken"]?["token"]?.stringValue
        else { throw TestSupport.Failure("attestation refused: \(r)") }
        return (key, artifact, token)
    }

    /// Runs google_client.py with `request` and returns its JSON answer.
    func python(_ request: [String: Any]) throws -> [String: Any] {
        let script = TestSupport.packageRoot.appendingPathComponent("Tests/ServeTests/google_client.py").path
        let result = try TestSupport.run(
            try TestSupport.python(), [script],
            stdin: String(decoding: try JSONSerialization.data(withJSONObject: request), as: UTF8.self))
        guard result.status == 0 else { throw TestSupport.Failure("google_client.py failed: \(result.stderr)") }
        guard let answer = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] else {
            throw TestSupport.Failure("google_client.py printed no JSON object: \(result.stdout)")
        }
        return answer
    }

    /// The discovery document shipped in google-api-python-client.
    static func discoveryDocument() throws -> String {
        let result = try TestSupport.run(
            try TestSupport.python(),
            [
                "-c",
                "import googleapiclient, os; print(os.path.join(os.path.dirname(googleapiclient.__file__), "
                    + "'discovery_cache', 'documents', 'firebaseappcheck.v1.json'))",
            ])
        let path = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard result.status == 0, FileManager.default.fileExists(atPath: path) else {
            throw TestSupport.Failure(
                "google-api-python-client is not installed in the peer environment (pip install google-api-python-client): \(result.stderr)"
            )
        }
        return path
    }
}
