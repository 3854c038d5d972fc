import AppCheck
import Crypto
import Glibc
import Platform
import StoreSupport
import Timekeeping

/// The App Check exchange's state (`AppCheckState`) on the PostgreSQL team store (tables `appcheck_*`, schema 3),
/// so that several `rollout serve` processes on several machines share one set of challenges, key counters,
/// consumed tokens and signing keys.
///
/// It runs on a `PostgresConfigStore`'s connection and transaction runner (one transaction per call, READ
/// COMMITTED, serialisation failures retried inside the runner, `--read-only` refused by the server), **without**
/// the chain-head lock: an exchange never queues behind a publish. The SQLite adapter gets its guarantees from one
/// write lock on the file; here each guarantee comes from one statement that decides and changes at once, so
/// that the row lock PostgreSQL takes for it is the only serialisation needed:
///
/// - a challenge (authenticated by the exchange; issued ones are not stored) is redeemed by `INSERT ... ON CONFLICT
///   DO NOTHING RETURNING`: of concurrent redemptions, on any process, the others wait for the first inserter to
///   commit and insert nothing (a replay);
/// - a counter advances by `UPDATE ... WHERE counter < $n RETURNING` (the same re-check: one winner, never back);
///   a re-attestation is `INSERT ... ON CONFLICT DO UPDATE SET counter = GREATEST(...)`;
/// - a token id is consumed by `INSERT ... ON CONFLICT DO NOTHING RETURNING`: the second inserter waits for the
///   first to commit and inserts nothing;
/// - the demo authority is `INSERT ... ON CONFLICT DO NOTHING`, then read back in the next statement's snapshot.
///
/// Two writes span several rows, and there a single statement is not enough under READ COMMITTED (a concurrent
/// transaction's new rows are invisible to a statement that started before it committed): a rotation takes a
/// transaction-scoped advisory lock first (else two rotations could each leave their new key unretired), and a
/// configuration save upserts the project row first, whose row lock then orders the app rows' delete and insert.
///
/// Every private key (token signing keys, the demo authority's two keys) is an AES-256-GCM box under the team's
/// store key with its role bound as associated data, like the step-up secrets: a database dump alone signs nothing.
/// The viewer role is granted no private-key column (docs/POSTGRES.md).
///
/// Group commit: the per-request writes (a challenge redeemed, a key saved, a counter advanced, a token
/// consumed) of concurrent requests share one transaction (`GroupCommit`): one `BEGIN`, their statements in
/// arrival order, one `COMMIT` (one WAL flush on the server), and each call returns only after that COMMIT. The
/// statements are the ones above, so each decides exactly as alone; a statement that fails aborts the group's
/// transaction, which is then rolled back and its writes run again one transaction each, in order (the first
/// run left nothing). The requests' reads (a key by its artifact, a debug token) use a second connection, so
/// they never wait behind a group's COMMIT.
public final class PostgresAppCheckState: AppCheckState, @unchecked Sendable {
    private let store: PostgresConfigStore
    private let key: StoreKey?
    var group: GroupCommit<PerRequestWrite, PerRequestOutcome>!
    private let readerLock = Lock()
    /// The reading connection, opened on first use (nil until then, and when it cannot be opened).
    private var reader: PGConnection?

    public init(store: PostgresConfigStore, key: StoreKey?) {
        self.store = store
        self.key = key
        group = GroupCommit(anticipation: requestCommitAnticipation) { [unowned self] writes in
            try self.commitGroup(writes)
        }
    }

    typealias PerRequestWrite = AppCheckPerRequestWrite
    typealias PerRequestOutcome = AppCheckPerRequestOutcome

    /// A group whose writes are each one statement (every write but the two that redeem a challenge and then
    /// decide a second statement by it) is one round trip: `BEGIN`, the statements in arrival order (planned
    /// once per connection), `COMMIT` (`PostgresConfigStore.pipelineThenCommit`). The server runs them one
    /// after another in the one transaction, exactly as one `query` each would: each decides as alone.
    private func commitGroup(_ writes: [PerRequestWrite]) throws -> [Result<PerRequestOutcome, any Error>] {
        let singles = writes.compactMap(Self.single)
        if writes.count == 1, let one = singles.first {
            return [Result { try write { try pipelined([one])[0] } }]
        }
        if writes.count > 1 {
            do {
                if singles.count == writes.count { return try write { try pipelined(singles).map { .success($0) } } }
                return try write { try writes.map { .success(try apply($0)) } }
            } catch let e as PostgresError where !e.sqlState.isEmpty {
                // A statement failed and the server aborted the whole transaction (rolled back by the runner):
                // each write alone below, in order, so only the failing one fails.
            }
        }
        return writes.map { w in Result { try write { try apply(w) } } }
    }

    /// One statement of a per-request write and how its rows answer it.
    private struct Single {
        var sql: String
        var params: [String?]
        var outcome: ([[String?]]) -> PerRequestOutcome
    }

    static let redeemSQL =
        "INSERT INTO appcheck_challenges (challenge, app_id, expires_at, used) VALUES (decode($1, 'hex'), $2, $3, true) "
        + "ON CONFLICT (challenge) DO NOTHING RETURNING 1"
    static let upsertKeySQL = """
        INSERT INTO appcheck_keys (app_id, key_id, public_key, counter, artifact_digest, receipt, environment, attested_at)
        VALUES ($1, decode($2, 'hex'), decode($3, 'hex'), $4, decode($5, 'hex'), decode($6, 'hex'), $7, $8)
        ON CONFLICT (app_id, key_id) DO UPDATE SET
            public_key = excluded.public_key, counter = GREATEST(appcheck_keys.counter, excluded.counter),
            artifact_digest = excluded.artifact_digest, receipt = excluded.receipt,
            environment = excluded.environment, attested_at = excluded.attested_at
        """
    static let advanceSQL =
        "UPDATE appcheck_keys SET counter = $1 WHERE app_id = $2 AND key_id = decode($3, 'hex') AND counter < $1 RETURNING 1"
    static let consumeSQL =
        "INSERT INTO appcheck_consumed_tokens (token_id, expires_at) VALUES ($1, $2) ON CONFLICT (token_id) DO NOTHING RETURNING 1"

    /// The write as one statement; nil for the two that redeem a challenge and then write only if it was theirs.
    private static func single(_ write: PerRequestWrite) -> Single? {
        switch write {
        case .redeemChallenge(let challenge, let appId, let expiresAt):
            return Single(sql: redeemSQL, params: [Hex.encode(challenge), appId, String(expiresAt.microseconds)]) {
                .redemption($0.isEmpty ? .alreadyUsed : .redeemed)
            }
        case .saveAttestedKey(let key):
            return Single(sql: upsertKeySQL, params: keyParams(key)) { _ in .done }
        case .advanceCounter(let appId, let keyId, let counter):
            return Single(sql: advanceSQL, params: [String(counter), appId, Hex.encode(keyId)]) { .changed(!$0.isEmpty) }
        case .consumeToken(let id, let expiresAt):
            return Single(sql: consumeSQL, params: [id, String(expiresAt.microseconds)]) { .changed(!$0.isEmpty) }
        case .redeemThenAdvance, .redeemThenSave:
            return nil
        }
    }

    /// `writes` and COMMIT in one round trip, inside the transaction the caller opened (`write`).
    private func pipelined(_ writes: [Single]) throws -> [PerRequestOutcome] {
        for sql in Set(writes.map(\.sql)) { try c.prepare(sql) }
        let rows = try store.pipelineThenCommit(writes.map { ($0.sql, $0.params) })
        return zip(writes, rows).map { $0.outcome($1) }
    }

    private func apply(_ write: PerRequestWrite) throws -> PerRequestOutcome {
        if let one = Self.single(write) { return one.outcome(try c.query(one.sql, one.params)) }
        switch write {
        case .redeemChallenge, .saveAttestedKey, .advanceCounter, .consumeToken:
            preconditionFailure("a single statement")
        case .redeemThenAdvance(let challenge, let appId, let expiresAt, let keyId, let counter):
            let r = try redeem(challenge, appId: appId, expiresAt: expiresAt)
            guard r == .redeemed else { return .redeemedThen(r, false) }
            guard case .changed(let advanced) = try apply(.advanceCounter(appId: appId, keyId: keyId, counter: counter))
            else { return .redeemedThen(r, false) }
            return .redeemedThen(r, advanced)
        case .redeemThenSave(let challenge, let appId, let expiresAt, let key):
            let r = try redeem(challenge, appId: appId, expiresAt: expiresAt)
            if r == .redeemed { try upsertKey(key) }
            return .redeemedThen(r, r == .redeemed)
        }
    }

    /// Groups committed and the writes they held since this object was made (benchmarks).
    public var groupStatistics: (groups: Int, writes: Int) {
        let s = group.statistics
        return (s.groups, s.operations)
    }

    /// A read a request makes, on the reading connection (the writing one when no second connection opens).
    private func readPerRequest<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try readerLock.withLock {
            if reader == nil {
                reader = try? PostgresConfigStore.session(
                    store.conninfo, readOnly: store.isReadOnly, lockTimeoutMilliseconds: store.lockTimeoutMilliseconds)
            }
            guard let reader, reader.reconnectIfLost() else { return try read { try body(c) } }
            return try body(reader)
        }
    }

    /// Whether the connection refuses writes (`--read-only`).
    public var isReadOnly: Bool { store.isReadOnly }

    private var c: PGConnection { store.connection }

    /// Key of the advisory lock a rotation holds (the schema's is `PostgresSchema.advisoryLock`).
    static let rotationLock = "5282125"

    private func write<T>(_ body: () throws -> T) throws -> T {
        try store.transaction(lockingHead: false, body)
    }

    /// A write of a sealed table (the configuration, signing keys, debug tokens, the demo authority): under the
    /// chain-head lock, so the seal is checked before it and renewed at its COMMIT (`PostgresSeal`).
    private func sealedWrite<T>(_ body: () throws -> T) throws -> T {
        try store.transaction(lockingHead: true, body)
    }

    private func read<T>(_ body: () throws -> T) throws -> T {
        try store.readingLocked(body)
    }

    private static func int(_ text: String?, _ table: String) throws -> Int64 {
        guard let text, let n = Int64(text) else { throw PostgresStoredDataError("\(table) holds a malformed row") }
        return n
    }

    private static func bytes(_ hex: String?, _ table: String) throws -> [UInt8] {
        guard let hex, let b = Hex.decode(hex) else { throw PostgresStoredDataError("\(table) holds a malformed row") }
        return b
    }

    // MARK: Configuration

    public func configuration() throws -> AppCheckConfiguration? {
        try store.consistentRead {
            guard let p = try c.query("SELECT project_number, project_id FROM appcheck_project WHERE id = 1").first,
                let number = p[0], let id = p[1]
            else { return nil }
            let apps = try c.query(
                "SELECT app_id, team_id, bundle_id, environment, trusts_demo_root, token_ttl_seconds FROM appcheck_apps ORDER BY position"
            ).map { r -> AppAttestApp in
                guard let appId = r[0], let team = r[1], let bundle = r[2],
                    let env = r[3].flatMap(AppAttestEnvironment.init(rawValue:))
                else { throw PostgresStoredDataError("appcheck_apps holds a malformed row") }
                return AppAttestApp(
                    appId: appId, identity: AppIdentity(teamId: team, bundleId: bundle), environment: env,
                    trustsDemoRoot: r[4] == "t", tokenTTL: .seconds(try Self.int(r[5], "appcheck_apps")))
            }
            return AppCheckConfiguration(project: AppCheckProject(number: number, id: id), apps: apps)
        }
    }

    public func saveConfiguration(_ configuration: AppCheckConfiguration) throws {
        try sealedWrite {
            // First: the project row's lock orders concurrent saves, so the delete below sees the apps of any save
            // that committed before this one.
            try c.query(
                "INSERT INTO appcheck_project (id, project_number, project_id) VALUES (1, $1, $2) "
                    + "ON CONFLICT (id) DO UPDATE SET project_number = excluded.project_number, project_id = excluded.project_id",
                [configuration.project.number, configuration.project.id])
            try c.query("DELETE FROM appcheck_apps")
            for (i, app) in configuration.apps.enumerated() {
                try c.query(
                    "INSERT INTO appcheck_apps (app_id, team_id, bundle_id, environment, trusts_demo_root, token_ttl_seconds, position) "
                        + "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    [
                        app.appId, app.identity.teamId, app.identity.bundleId, app.environment.rawValue,
                        app.trustsDemoRoot ? "t" : "f",
                        String(app.tokenTTL.microseconds / 1_000_000), String(i),
                    ])
            }
        }
    }

    // MARK: Challenges, keys, tokens

    public func redeemChallenge(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption {
        guard case .redemption(let r) = try group.run(.redeemChallenge(challenge, appId: appId, expiresAt: expiresAt))
        else { throw GroupCommitError.outcomeCount(expected: 1, got: 0) }
        return r
    }

    private func redeem(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption {
        try c.query(Self.redeemSQL, [Hex.encode(challenge), appId, String(expiresAt.microseconds)]).isEmpty ? .alreadyUsed : .redeemed
    }

    public func saveAttestedKey(_ key: AttestedKeyRecord) throws {
        _ = try group.run(.saveAttestedKey(key))
    }

    private func upsertKey(_ key: AttestedKeyRecord) throws {
        try c.query(Self.upsertKeySQL, Self.keyParams(key))
    }

    private static func keyParams(_ key: AttestedKeyRecord) -> [String?] {
        [
            key.appId, Hex.encode(key.keyId), Hex.encode(key.publicKey), String(key.counter), Hex.encode(key.artifactDigest),
            Hex.encode(key.receipt), key.environment.rawValue, String(key.attestedAt.microseconds),
        ]
    }

    public func attestedKey(appId: String, artifactDigest: [UInt8]) throws -> AttestedKeyRecord? {
        try readPerRequest { c in
            guard
                let r = try c.query(
                    "SELECT encode(key_id, 'hex'), encode(public_key, 'hex'), counter, encode(receipt, 'hex'), environment, attested_at "
                        + "FROM appcheck_keys WHERE artifact_digest = decode($1, 'hex') AND app_id = $2",
                    [Hex.encode(artifactDigest), appId]
                ).first
            else { return nil }
            let table = "appcheck_keys"
            guard let env = r[4].flatMap(AppAttestEnvironment.init(rawValue:)),
                let counter = UInt32(exactly: try Self.int(r[2], table))
            else { throw PostgresStoredDataError("\(table) holds a malformed row") }
            return AttestedKeyRecord(
                appId: appId, keyId: try Self.bytes(r[0], table), publicKey: try Self.bytes(r[1], table),
                counter: counter,
                artifactDigest: artifactDigest, receipt: try Self.bytes(r[3], table), environment: env,
                attestedAt: Instant(microseconds: try Self.int(r[5], table)))
        }
    }

    public func advanceCounter(appId: String, keyId: [UInt8], to counter: UInt32) throws -> Bool {
        guard case .changed(let c) = try group.run(.advanceCounter(appId: appId, keyId: keyId, counter: counter)) else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return c
    }

    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenAdvance keyId: [UInt8], to counter: UInt32
    ) throws -> (ChallengeRedemption, advanced: Bool) {
        let outcome = try group.run(
            .redeemThenAdvance(challenge, appId: appId, expiresAt: expiresAt, keyId: keyId, counter: counter))
        guard case .redeemedThen(let r, let advanced) = outcome else { throw GroupCommitError.outcomeCount(expected: 1, got: 0) }
        return (r, advanced)
    }

    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenSave key: AttestedKeyRecord
    ) throws -> ChallengeRedemption {
        let outcome = try group.run(.redeemThenSave(challenge, appId: appId, expiresAt: expiresAt, key: key))
        guard case .redeemedThen(let r, _) = outcome else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return r
    }

    public func consumeToken(id: String, expiresAt: Instant) throws -> Bool {
        guard case .changed(let c) = try group.run(.consumeToken(id: id, expiresAt: expiresAt)) else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return c
    }

    // MARK: Signing keys

    public func signingKeys() throws -> [StoredSigningKey] {
        try read {
            let rows = try c.query(
                "SELECT kid, encode(private_key, 'hex'), created_at, retires_at FROM appcheck_signing_keys ORDER BY created_at, kid"
            )
            guard !rows.isEmpty else { return [] }
            let key = try store.checkedStoreKey(key, for: "App Check signing keys")
            return try rows.map { r in
                guard let kid = r[0] else {
                    throw PostgresStoredDataError("appcheck_signing_keys holds a malformed row")
                }
                return StoredSigningKey(
                    kid: kid,
                    privateKeyDER: try Self.open(
                        try Self.bytes(r[1], "appcheck_signing_keys"), Self.signingRole(kid), key),
                    createdAt: Instant(microseconds: try Self.int(r[2], "appcheck_signing_keys")),
                    retiresAt: try r[3].map { Instant(microseconds: try Self.int($0, "appcheck_signing_keys")) })
            }
        }
    }

    public func addSigningKey(_ key: StoredSigningKey) throws {
        try sealedWrite { try insertSigningKey(key) }
    }

    public func rotateSigningKeys(to key: StoredSigningKey, retiringOthersAt retiresAt: Instant) throws {
        try sealedWrite {
            try c.query("SELECT pg_advisory_xact_lock($1)", [Self.rotationLock])
            try c.query(
                "UPDATE appcheck_signing_keys SET retires_at = $1 WHERE kid <> $2 AND retires_at IS NULL",
                [String(retiresAt.microseconds), key.kid])
            try insertSigningKey(key)
        }
    }

    private func insertSigningKey(_ signing: StoredSigningKey) throws {
        let key = try store.checkedStoreKey(key, for: "App Check signing keys")
        try c.query(
            "INSERT INTO appcheck_signing_keys (kid, private_key, created_at, retires_at) VALUES ($1, decode($2, 'hex'), $3, $4) "
                + "ON CONFLICT (kid) DO NOTHING",
            [
                signing.kid, Hex.encode(Self.seal(signing.privateKeyDER, Self.signingRole(signing.kid), key)),
                String(signing.createdAt.microseconds), signing.retiresAt.map { String($0.microseconds) },
            ])
    }

    // MARK: Debug tokens

    public func addDebugToken(_ token: DebugTokenRecord) throws {
        _ = try sealedWrite {
            try c.query(
                "INSERT INTO appcheck_debug_tokens (digest, app_id, name, created_at) VALUES (decode($1, 'hex'), $2, $3, $4) "
                    + "ON CONFLICT (digest) DO NOTHING",
                [Hex.encode(token.digest), token.appId, token.name, String(token.createdAt.microseconds)])
        }
    }

    /// Only the columns the viewer role is granted (docs/POSTGRES.md): listing needs no private key.
    public func signingKeySummaries() throws -> [SigningKeySummary] {
        try read {
            try c.query("SELECT kid, created_at, retires_at FROM appcheck_signing_keys ORDER BY created_at, kid").map { r in
                guard let kid = r[0] else { throw PostgresStoredDataError("appcheck_signing_keys holds a malformed row") }
                return SigningKeySummary(
                    kid: kid, createdAt: Instant(microseconds: try Self.int(r[1], "appcheck_signing_keys")),
                    retiresAt: try r[2].map { Instant(microseconds: try Self.int($0, "appcheck_signing_keys")) })
            }
        }
    }

    /// Only the columns the viewer role is granted: listing needs no digest.
    public func debugTokenSummaries() throws -> [DebugTokenSummary] {
        try read {
            try c.query("SELECT app_id, name, created_at FROM appcheck_debug_tokens ORDER BY created_at, name").map { r in
                guard let app = r[0], let name = r[1] else {
                    throw PostgresStoredDataError("appcheck_debug_tokens holds a malformed row")
                }
                return DebugTokenSummary(
                    appId: app, name: name, createdAt: Instant(microseconds: try Self.int(r[2], "appcheck_debug_tokens")))
            }
        }
    }

    public func debugTokens() throws -> [DebugTokenRecord] {
        try read {
            try c.query(
                "SELECT app_id, encode(digest, 'hex'), name, created_at FROM appcheck_debug_tokens ORDER BY created_at, name"
            )
            .map { r in
                guard let app = r[0], let name = r[2] else {
                    throw PostgresStoredDataError("appcheck_debug_tokens holds a malformed row")
                }
                return DebugTokenRecord(
                    appId: app, digest: try Self.bytes(r[1], "appcheck_debug_tokens"), name: name,
                    createdAt: Instant(microseconds: try Self.int(r[3], "appcheck_debug_tokens")))
            }
        }
    }

    public func hasDebugToken(appId: String, digest: [UInt8]) throws -> Bool {
        try readPerRequest { c in
            try !c.query(
                "SELECT 1 FROM appcheck_debug_tokens WHERE digest = decode($1, 'hex') AND app_id = $2",
                [Hex.encode(digest), appId]
            ).isEmpty
        }
    }

    public func removeDebugToken(appId: String, name: String) throws -> Int {
        try sealedWrite {
            try c.query("DELETE FROM appcheck_debug_tokens WHERE app_id = $1 AND name = $2 RETURNING 1", [appId, name])
                .count
        }
    }

    // MARK: Demo authority

    public func demoAuthority() throws -> DemoCertificateAuthority.Material? {
        try read { try loadDemoAuthority() }
    }

    private func loadDemoAuthority() throws -> DemoCertificateAuthority.Material? {
        guard
            let r = try c.query(
                "SELECT encode(root_certificate, 'hex'), encode(root_key, 'hex'), encode(intermediate_certificate, 'hex'), "
                    + "encode(intermediate_key, 'hex') FROM appcheck_demo_authority WHERE id = 1"
            ).first
        else { return nil }
        let key = try store.checkedStoreKey(key, for: "the demo authority's keys")
        let table = "appcheck_demo_authority"
        return DemoCertificateAuthority.Material(
            rootCertificate: try Self.bytes(r[0], table),
            rootPrivateKey: try Self.open(try Self.bytes(r[1], table), Self.demoRootRole, key),
            intermediateCertificate: try Self.bytes(r[2], table),
            intermediatePrivateKey: try Self.open(try Self.bytes(r[3], table), Self.demoIntermediateRole, key))
    }

    public func saveDemoAuthority(_ material: DemoCertificateAuthority.Material) throws
        -> DemoCertificateAuthority.Material
    {
        try sealedWrite {
            let key = try store.checkedStoreKey(key, for: "the demo authority's keys")
            try c.query(
                "INSERT INTO appcheck_demo_authority (id, root_certificate, root_key, intermediate_certificate, intermediate_key) "
                    + "VALUES (1, decode($1, 'hex'), decode($2, 'hex'), decode($3, 'hex'), decode($4, 'hex')) ON CONFLICT (id) DO NOTHING",
                [
                    Hex.encode(material.rootCertificate),
                    Hex.encode(Self.seal(material.rootPrivateKey, Self.demoRootRole, key)),
                    Hex.encode(material.intermediateCertificate),
                    Hex.encode(Self.seal(material.intermediatePrivateKey, Self.demoIntermediateRole, key)),
                ])
            guard let stored = try loadDemoAuthority() else {
                throw PostgresStoredDataError("the demo authority did not save")
            }
            return stored
        }
    }

    public func purgeExpired(before time: Instant) throws {
        try write {
            let t = String(time.microseconds)
            try c.query("DELETE FROM appcheck_challenges WHERE expires_at < $1", [t])
            try c.query("DELETE FROM appcheck_consumed_tokens WHERE expires_at < $1", [t])
        }
        // Retired signing keys are sealed: removed under the head lock, and only when there are any.
        let t = String(time.microseconds)
        guard try read({ try !c.query("SELECT 1 FROM appcheck_signing_keys WHERE retires_at < $1 LIMIT 1", [t]).isEmpty }) else {
            return
        }
        try sealedWrite { _ = try c.query("DELETE FROM appcheck_signing_keys WHERE retires_at < $1", [t]) }
    }

    // MARK: Private keys at rest

    package static func signingRole(_ kid: String) -> String { "signing key " + kid }
    package static let demoRootRole = "demo root key"
    package static let demoIntermediateRole = "demo intermediate key"
    static let boxMagic = Array("RAK1".utf8)

    /// A private key sealed under the team store key, its role (which key of which row) bound as associated data:
    /// a box moved to another row or column does not open.
    package static func seal(_ privateKey: [UInt8], _ role: String, _ key: StoreKey) -> [UInt8] {
        boxMagic + AESGCM.seal(privateKey, key: key.bytes, associatedData: Array("rollout appcheck \(role)".utf8))
    }

    static func open(_ box: [UInt8], _ role: String, _ key: StoreKey) throws -> [UInt8] {
        guard box.starts(with: boxMagic) else {
            throw PostgresStoredDataError(
                "the App Check \(role) is not sealed with the team store key (written outside rollout?)")
        }
        do {
            return try AESGCM.open(
                Array(box.dropFirst(boxMagic.count)), key: key.bytes,
                associatedData: Array("rollout appcheck \(role)".utf8))
        } catch {
            throw PostgresStoredDataError(
                "the App Check \(role) does not decrypt with \(key.path): \(error) (moved, or another store's key?)")
        }
    }
}
