import AppCheck
import Glibc
import Platform
import Rollout
import StoreSupport
import Timekeeping

/// The App Check exchange's state in the store's SQLite file (tables `appcheck_*`).
///
/// Every change runs in a `BEGIN IMMEDIATE` transaction on a connection with synchronous=FULL, the durability
/// of config versions, so a redeemed challenge, an advanced counter or a consumed token id survives a crash
/// and is seen by every other process at once. Counters advance with a conditional UPDATE, so of two
/// processes verifying assertions with the same counter only one wins. Instants are stored as microseconds.
///
/// The per-request writes (a challenge redeemed, a key saved, a counter advanced, a token consumed) are
/// committed in groups (`GroupCommit`): the writes of concurrent requests share one transaction, so one seal
/// check, one re-seal, one witness write and one WAL sync serve them all; each write still decides in order, in
/// a savepoint of its own, and its call returns only after its group committed (its WAL synced; the witness's
/// sync runs after it and is waited for by the next group, `WitnessSync`). The requests' reads (a key by
/// its artifact, a debug token) go through a second, read-only connection that never waits for a group's sync.
///
/// The demo certificate authority (certificates and private keys) lives here too, so the store file is the one
/// thing to keep; it is created with mode 0600 by the store. Every private key (the token signing keys, the demo
/// authority's root and intermediate keys) is encrypted with the store key (AES-256-GCM, its role bound as
/// associated data: `appcheck-signing-key:<kid>`, `demo-ca:root`, `demo-ca:intermediate`), like the step-up
/// secrets, so the store file alone mints no token and signs no certificate. Calls are serialised by a lock, since
/// a connection serves one thread at a time.
public final class AppCheckStateTables: AppCheckState, @unchecked Sendable {
    private let db: SQLiteDatabase
    private let lock = Lock()
    /// The per-request writes (challenges, counters, consumed tokens, attested keys), committed in groups.
    private var group: GroupCommit<PerRequestWrite, PerRequestOutcome>!
    /// Reads of the per-request tables on a connection of their own, so that they do not queue behind a group's
    /// sync (nil when it cannot be opened: reads then share the writing connection).
    private let reader: SQLiteDatabase?
    private let readerLock = Lock()

    /// Uses `database`, creating the tables if needed.
    public init(database: SQLiteDatabase) throws {
        db = database
        try Self.createSchema(in: database)
        reader = database.path.isEmpty || database.path == ":memory:"
            ? nil
            : try? SQLiteDatabase(path: database.path, create: false, readOnly: true, lockWaits: database.lockWaits)
        group = GroupCommit(anticipation: requestCommitAnticipation) { [unowned self] writes in
            try self.commitGroup(writes)
        }
    }

    typealias PerRequestWrite = AppCheckPerRequestWrite
    typealias PerRequestOutcome = AppCheckPerRequestOutcome

    /// Group commit (`GroupCommit`): one `BEGIN IMMEDIATE` transaction (one seal check, one re-seal and witness,
    /// one WAL sync) for every write queued while the previous group synced; each write runs in a savepoint of
    /// its own, in arrival order, so a failing write rolls back alone and every outcome is the one it would have
    /// had in a transaction of its own. No caller returns before the transaction holding its write committed.
    private func commitGroup(_ writes: [PerRequestWrite]) throws -> [Result<PerRequestOutcome, any Error>] {
        try lock.withLock {
            try db.transaction(immediate: true) {
                writes.map { w in Result { try db.transaction(immediate: true) { try apply(w) } } }
            }
        }
    }

    private func apply(_ write: PerRequestWrite) throws -> PerRequestOutcome {
        switch write {
        case .redeemChallenge(let c, let appId, let expiresAt):
            return .redemption(try redeem(c, appId: appId, expiresAt: expiresAt))
        case .saveAttestedKey(let key):
            try upsertKey(key)
            return .done
        case .advanceCounter(let appId, let keyId, let counter):
            return .changed(try advance(appId: appId, keyId: keyId, to: counter))
        case .consumeToken(let id, let expiresAt):
            return .changed(try consume(id: id, expiresAt: expiresAt))
        case .redeemThenAdvance(let c, let appId, let expiresAt, let keyId, let counter):
            let r = try redeem(c, appId: appId, expiresAt: expiresAt)
            return .redeemedThen(r, r == .redeemed ? try advance(appId: appId, keyId: keyId, to: counter) : false)
        case .redeemThenSave(let c, let appId, let expiresAt, let key):
            let r = try redeem(c, appId: appId, expiresAt: expiresAt)
            if r == .redeemed { try upsertKey(key) }
            return .redeemedThen(r, r == .redeemed)
        }
    }

    /// Groups committed and the writes they held since this object was made (benchmarks).
    public var groupStatistics: (groups: Int, writes: Int) {
        let s = group.statistics
        return (s.groups, s.operations)
    }

    public static func createSchema(in db: SQLiteDatabase) throws {
        try db.execute(
            """
            CREATE TABLE IF NOT EXISTS appcheck_project (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                project_number TEXT NOT NULL,
                project_id TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS appcheck_apps (
                app_id TEXT PRIMARY KEY,
                team_id TEXT NOT NULL,
                bundle_id TEXT NOT NULL,
                environment TEXT NOT NULL CHECK (environment IN ('development', 'production')),
                trusts_demo_root INTEGER NOT NULL CHECK (trusts_demo_root IN (0, 1)),
                token_ttl_seconds INTEGER NOT NULL,
                position INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS appcheck_challenges (
                challenge BLOB PRIMARY KEY,
                app_id TEXT NOT NULL,
                expires_at INTEGER NOT NULL,
                used INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS appcheck_challenges_expiry ON appcheck_challenges (expires_at);
            CREATE TABLE IF NOT EXISTS appcheck_keys (
                app_id TEXT NOT NULL,
                key_id BLOB NOT NULL,
                public_key BLOB NOT NULL,
                counter INTEGER NOT NULL CHECK (counter BETWEEN 0 AND 4294967295),
                artifact_digest BLOB NOT NULL UNIQUE,
                receipt BLOB NOT NULL,
                environment TEXT NOT NULL,
                attested_at INTEGER NOT NULL,
                PRIMARY KEY (app_id, key_id));
            CREATE TABLE IF NOT EXISTS appcheck_consumed_tokens (
                token_id TEXT PRIMARY KEY,
                expires_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE INDEX IF NOT EXISTS appcheck_consumed_tokens_expiry ON appcheck_consumed_tokens (expires_at);
            CREATE TABLE IF NOT EXISTS appcheck_signing_keys (
                kid TEXT PRIMARY KEY,
                private_key BLOB NOT NULL,
                created_at INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS appcheck_signing_key_retirements (
                kid TEXT PRIMARY KEY,
                retires_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS appcheck_debug_tokens (
                digest BLOB PRIMARY KEY,
                app_id TEXT NOT NULL,
                name TEXT NOT NULL,
                created_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS appcheck_demo_authority (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                root_certificate BLOB NOT NULL,
                root_key BLOB NOT NULL,
                intermediate_certificate BLOB NOT NULL,
                intermediate_key BLOB NOT NULL);
            """)
    }

    /// Whether the connection refuses writes (`--read-only`): consuming a token or a challenge then fails.
    public var isReadOnly: Bool { db.isReadOnly }

    private func write<T>(_ body: () throws -> T) throws -> T {
        try lock.withLock { try db.transaction(immediate: true, body) }
    }

    private func read<T>(_ body: () throws -> T) throws -> T {
        try lock.withLock { try body() }
    }

    /// A read a request makes (its key, a debug token): on the reading connection, which sees every committed
    /// group (WAL) and never waits for one to sync.
    private func readPerRequest<T>(_ body: (SQLiteDatabase) throws -> T) throws -> T {
        guard let reader else { return try lock.withLock { try body(db) } }
        return try readerLock.withLock { try body(reader) }
    }

    public func configuration() throws -> AppCheckConfiguration? {
        try read {
            guard let p = try db.query("SELECT project_number, project_id FROM appcheck_project WHERE id = 1").first,
                let number = p[0].string, let id = p[1].string
            else { return nil }
            let rows = try db.query(
                "SELECT app_id, team_id, bundle_id, environment, trusts_demo_root, token_ttl_seconds FROM appcheck_apps ORDER BY position"
            )
            let apps = try rows.map { r -> AppAttestApp in
                guard let appId = r[0].string, let team = r[1].string, let bundle = r[2].string,
                    let env = r[3].string.flatMap(AppAttestEnvironment.init(rawValue:)), let trusts = r[4].int,
                    let ttl = r[5].int
                else { throw SQLiteError(code: 1, message: "appcheck_apps holds a malformed row") }
                return AppAttestApp(
                    appId: appId, identity: AppIdentity(teamId: team, bundleId: bundle), environment: env,
                    trustsDemoRoot: trusts == 1, tokenTTL: .seconds(ttl))
            }
            return AppCheckConfiguration(project: AppCheckProject(number: number, id: id), apps: apps)
        }
    }

    public func saveConfiguration(_ configuration: AppCheckConfiguration) throws {
        try write {
            try db.run(
                "INSERT INTO appcheck_project (id, project_number, project_id) VALUES (1, ?, ?) "
                    + "ON CONFLICT (id) DO UPDATE SET project_number = excluded.project_number, project_id = excluded.project_id",
                [.text(configuration.project.number), .text(configuration.project.id)])
            try db.run("DELETE FROM appcheck_apps")
            for (i, app) in configuration.apps.enumerated() {
                try db.run(
                    "INSERT INTO appcheck_apps (app_id, team_id, bundle_id, environment, trusts_demo_root, token_ttl_seconds, position) "
                        + "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        .text(app.appId), .text(app.identity.teamId), .text(app.identity.bundleId),
                        .text(app.environment.rawValue),
                        .integer(app.trustsDemoRoot ? 1 : 0), .integer(app.tokenTTL.microseconds / 1_000_000),
                        .integer(Int64(i)),
                    ])
            }
        }
    }

    public func redeemChallenge(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        guard case .redemption(let r) = try group.run(.redeemChallenge(challenge, appId: appId, expiresAt: expiresAt))
        else { throw GroupCommitError.outcomeCount(expected: 1, got: 0) }
        return r
    }

    /// Records the challenge as used: a row inserted the first time (challenges are not stored when issued; they
    /// authenticate themselves), nothing after.
    private func redeem(_ challenge: [UInt8], appId: String, expiresAt: Instant) throws -> ChallengeRedemption {
        let row: [SQLiteValue] = [.blob(challenge), .text(appId), .integer(expiresAt.microseconds), .integer(1)]
        try db.run(
            "INSERT INTO appcheck_challenges (challenge, app_id, expires_at, used) VALUES (?, ?, ?, ?) "
                + "ON CONFLICT (challenge) DO NOTHING", row)
        guard db.changes == 1 else { return .alreadyUsed }
        // A new row: its hash joins the tally, no query needed.
        db.tallyChange("appcheck_challenges", from: [], to: [row])
        return .redeemed
    }

    public func saveAttestedKey(_ key: AttestedKeyRecord) throws {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        _ = try group.run(.saveAttestedKey(key))
    }

    private func upsertKey(_ key: AttestedKeyRecord) throws {
        try db.tallied("appcheck_keys", where: "app_id = ? AND key_id = ?", [.text(key.appId), .blob(key.keyId)]) {
            try db.run(
                """
                INSERT INTO appcheck_keys (app_id, key_id, public_key, counter, artifact_digest, receipt, environment, attested_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (app_id, key_id) DO UPDATE SET
                    public_key = excluded.public_key, counter = max(counter, excluded.counter),
                    artifact_digest = excluded.artifact_digest, receipt = excluded.receipt,
                    environment = excluded.environment, attested_at = excluded.attested_at
                """,
                [
                    .text(key.appId), .blob(key.keyId), .blob(key.publicKey), .integer(Int64(key.counter)),
                    .blob(key.artifactDigest),
                    .blob(key.receipt), .text(key.environment.rawValue), .integer(key.attestedAt.microseconds),
                ])
        }
    }

    public func attestedKey(appId: String, artifactDigest: [UInt8]) throws -> AttestedKeyRecord? {
        try readPerRequest { db in
            guard
                let r = try db.query(
                    "SELECT key_id, public_key, counter, receipt, environment, attested_at FROM appcheck_keys WHERE artifact_digest = ? AND app_id = ?",
                    [.blob(artifactDigest), .text(appId)]
                ).first
            else { return nil }
            guard let keyId = r[0].bytes, let publicKey = r[1].bytes, let counter = r[2].int,
                let env = r[4].string.flatMap(AppAttestEnvironment.init(rawValue:)),
                let at = r[5].int
            else { throw SQLiteError(code: 1, message: "appcheck_keys holds a malformed row") }
            return AttestedKeyRecord(
                appId: appId, keyId: keyId, publicKey: publicKey, counter: UInt32(counter),
                artifactDigest: artifactDigest,
                receipt: r[3].bytes ?? [], environment: env, attestedAt: Instant(microseconds: at))
        }
    }

    public func advanceCounter(appId: String, keyId: [UInt8], to counter: UInt32) throws -> Bool {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        guard case .changed(let c) = try group.run(.advanceCounter(appId: appId, keyId: keyId, counter: counter)) else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return c
    }

    private func advance(appId: String, keyId: [UInt8], to counter: UInt32) throws -> Bool {
        return try db.tallied("appcheck_keys", where: "app_id = ? AND key_id = ?", [.text(appId), .blob(keyId)]) {
            try db.run(
                "UPDATE appcheck_keys SET counter = ? WHERE app_id = ? AND key_id = ? AND counter < ?",
                [.integer(Int64(counter)), .text(appId), .blob(keyId), .integer(Int64(counter))])
            return db.changes == 1
        }
    }

    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenAdvance keyId: [UInt8], to counter: UInt32
    ) throws -> (ChallengeRedemption, advanced: Bool) {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        let outcome = try group.run(
            .redeemThenAdvance(challenge, appId: appId, expiresAt: expiresAt, keyId: keyId, counter: counter))
        guard case .redeemedThen(let r, let advanced) = outcome else { throw GroupCommitError.outcomeCount(expected: 1, got: 0) }
        return (r, advanced)
    }

    public func redeemChallenge(
        _ challenge: [UInt8], appId: String, expiresAt: Instant, thenSave key: AttestedKeyRecord
    ) throws -> ChallengeRedemption {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        let outcome = try group.run(.redeemThenSave(challenge, appId: appId, expiresAt: expiresAt, key: key))
        guard case .redeemedThen(let r, _) = outcome else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return r
    }

    public func consumeToken(id: String, expiresAt: Instant) throws -> Bool {
        if isReadOnly { throw SQLiteError.readOnly(db) }
        guard case .changed(let c) = try group.run(.consumeToken(id: id, expiresAt: expiresAt)) else {
            throw GroupCommitError.outcomeCount(expected: 1, got: 0)
        }
        return c
    }

    private func consume(id: String, expiresAt: Instant) throws -> Bool {
        let row: [SQLiteValue] = [.text(id), .integer(expiresAt.microseconds)]
        try db.run(
            "INSERT INTO appcheck_consumed_tokens (token_id, expires_at) VALUES (?, ?) ON CONFLICT (token_id) DO NOTHING",
            row)
        guard db.changes == 1 else { return false }
        db.tallyChange("appcheck_consumed_tokens", from: [], to: [row])
        return true
    }

    public func signingKeys() throws -> [StoredSigningKey] {
        try read {
            try db.query(
                "SELECT k.kid, k.private_key, k.created_at, r.retires_at FROM appcheck_signing_keys k "
                    + "LEFT JOIN appcheck_signing_key_retirements r ON r.kid = k.kid ORDER BY k.created_at, k.kid"
            ).map { r in
                guard let kid = r[0].string, let der = r[1].bytes, let at = r[2].int else {
                    throw SQLiteError(code: 1, message: "appcheck_signing_keys holds a malformed row")
                }
                return StoredSigningKey(
                    kid: kid, privateKeyDER: try Self.openSigningKey(der, kid: kid, in: db),
                    createdAt: Instant(microseconds: at), retiresAt: r[3].int.map { Instant(microseconds: $0) })
            }
        }
    }

    public func addSigningKey(_ key: StoredSigningKey) throws {
        try write {
            try db.run(
                "INSERT INTO appcheck_signing_keys (kid, private_key, created_at) VALUES (?, ?, ?) ON CONFLICT (kid) DO NOTHING",
                [
                    .text(key.kid), .blob(try sealed(key.privateKeyDER, role: Self.signingKeyRole(key.kid))),
                    .integer(key.createdAt.microseconds),
                ])
        }
    }

    public func rotateSigningKeys(to key: StoredSigningKey, retiringOthersAt retiresAt: Instant) throws {
        try write {
            try db.run(
                "INSERT INTO appcheck_signing_key_retirements (kid, retires_at) SELECT kid, ? FROM appcheck_signing_keys "
                    + "WHERE kid <> ? AND kid NOT IN (SELECT kid FROM appcheck_signing_key_retirements)",
                [.integer(retiresAt.microseconds), .text(key.kid)])
            try db.run(
                "INSERT INTO appcheck_signing_keys (kid, private_key, created_at) VALUES (?, ?, ?) ON CONFLICT (kid) DO NOTHING",
                [
                    .text(key.kid), .blob(try sealed(key.privateKeyDER, role: Self.signingKeyRole(key.kid))),
                    .integer(key.createdAt.microseconds),
                ])
        }
    }

    public func addDebugToken(_ token: DebugTokenRecord) throws {
        try write {
            try db.run(
                "INSERT INTO appcheck_debug_tokens (digest, app_id, name, created_at) VALUES (?, ?, ?, ?) "
                    + "ON CONFLICT (digest) DO NOTHING",
                [.blob(token.digest), .text(token.appId), .text(token.name), .integer(token.createdAt.microseconds)])
        }
    }

    public func debugTokens() throws -> [DebugTokenRecord] {
        try read {
            try db.query("SELECT app_id, digest, name, created_at FROM appcheck_debug_tokens ORDER BY created_at, name")
                .map { r in
                    guard let app = r[0].string, let digest = r[1].bytes, let name = r[2].string, let at = r[3].int
                    else { throw SQLiteError(code: 1, message: "appcheck_debug_tokens holds a malformed row") }
                    return DebugTokenRecord(
                        appId: app, digest: digest, name: name, createdAt: Instant(microseconds: at))
                }
        }
    }

    public func hasDebugToken(appId: String, digest: [UInt8]) throws -> Bool {
        try readPerRequest { db in
            !(try db.query(
                "SELECT 1 FROM appcheck_debug_tokens WHERE digest = ? AND app_id = ?", [.blob(digest), .text(appId)]
            ).isEmpty)
        }
    }

    public func removeDebugToken(appId: String, name: String) throws -> Int {
        try write {
            try db.run("DELETE FROM appcheck_debug_tokens WHERE app_id = ? AND name = ?", [.text(appId), .text(name)])
            return db.changes
        }
    }

    public func demoAuthority() throws -> DemoCertificateAuthority.Material? {
        try read { try loadDemoAuthority() }
    }

    private func loadDemoAuthority() throws -> DemoCertificateAuthority.Material? {
        guard
            let r = try db.query(
                "SELECT root_certificate, root_key, intermediate_certificate, intermediate_key FROM appcheck_demo_authority WHERE id = 1"
            ).first
        else { return nil }
        guard let rc = r[0].bytes, let rk = r[1].bytes, let ic = r[2].bytes, let ik = r[3].bytes else {
            throw SQLiteError(code: 1, message: "appcheck_demo_authority holds a malformed row")
        }
        return DemoCertificateAuthority.Material(
            rootCertificate: rc, rootPrivateKey: try Self.openDemoKey(rk, .root, in: db), intermediateCertificate: ic,
            intermediatePrivateKey: try Self.openDemoKey(ik, .intermediate, in: db))
    }

    public func saveDemoAuthority(_ material: DemoCertificateAuthority.Material) throws
        -> DemoCertificateAuthority.Material
    {
        try write {
            try db.run(
                "INSERT INTO appcheck_demo_authority (id, root_certificate, root_key, intermediate_certificate, intermediate_key) "
                    + "VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                [
                    .blob(material.rootCertificate),
                    .blob(try sealed(material.rootPrivateKey, role: DemoKey.root.role)),
                    .blob(material.intermediateCertificate),
                    .blob(try sealed(material.intermediatePrivateKey, role: DemoKey.intermediate.role)),
                ])
            return try loadDemoAuthority()!
        }
    }

    public func purgeExpired(before time: Instant) throws {
        try write {
            try db.tallied("appcheck_challenges", where: "expires_at < ?", [.integer(time.microseconds)]) {
                try db.run("DELETE FROM appcheck_challenges WHERE expires_at < ?", [.integer(time.microseconds)])
            }
            try db.tallied("appcheck_consumed_tokens", where: "expires_at < ?", [.integer(time.microseconds)]) {
                try db.run("DELETE FROM appcheck_consumed_tokens WHERE expires_at < ?", [.integer(time.microseconds)])
            }
            try db.run(
                "DELETE FROM appcheck_signing_keys WHERE kid IN "
                    + "(SELECT kid FROM appcheck_signing_key_retirements WHERE retires_at < ?)",
                [.integer(time.microseconds)])
            try db.run(
                "DELETE FROM appcheck_signing_key_retirements WHERE retires_at < ?", [.integer(time.microseconds)])
        }
    }

    // MARK: Private keys at rest

    /// The associated data of a signing key's box: the key's id, so a box moved to another row does not open.
    static func signingKeyRole(_ kid: String) -> String { "appcheck-signing-key:\(kid)" }

    /// The demo authority's two private keys.
    public enum DemoKey: String, Sendable {
        case root, intermediate
        var role: String { "demo-ca:\(rawValue)" }
    }

    /// `der` as this connection stores it: encrypted with the store key on a store's connection.
    private func sealed(_ der: [UInt8], role: String) throws -> [UInt8] {
        guard db.encryptsPrivateKeys else { return der }
        return try Self.key(db, "stored").seal(der, role: role)
    }

    /// A signing key's DER from its stored box (`rollout store copy` reads the column itself, hence public).
    public static func openSigningKey(_ box: [UInt8], kid: String, in db: SQLiteDatabase) throws -> [UInt8] {
        guard db.encryptsPrivateKeys else { return box }
        return try key(db, "read").unseal(
            box, role: signingKeyRole(kid), what: "the App Check signing key \(kid) in \(db.path)")
    }

    /// One of the demo authority's private keys from its stored box.
    public static func openDemoKey(_ box: [UInt8], _ which: DemoKey, in db: SQLiteDatabase) throws -> [UInt8] {
        guard db.encryptsPrivateKeys else { return box }
        return try key(db, "read").unseal(
            box, role: which.role, what: "the demo authority's \(which.rawValue) key in \(db.path)")
    }

    private static func key(_ db: SQLiteDatabase, _ verb: String) throws -> StoreKey {
        guard let key = db.storeKey else {
            throw StoreError.unavailable(
                "the store key \(StoreKey.path(forStore: db.path)) is missing: the App Check private keys cannot be "
                    + "\(verb) (restore the key file, see README 'Store files')")
        }
        return key
    }

    /// Encrypts every private key still stored in plaintext (schema 8's migration, inside its transaction).
    static func encryptPrivateKeys(in db: SQLiteDatabase, key: StoreKey) throws {
        if try db.hasTable("appcheck_signing_keys") {
            for row in try db.query("SELECT kid, private_key FROM appcheck_signing_keys") {
                guard let kid = row[0].string, let der = row[1].bytes, !StoreKey.isSealedSecret(der) else { continue }
                try db.run(
                    "UPDATE appcheck_signing_keys SET private_key = ? WHERE kid = ?",
                    [.blob(key.seal(der, role: signingKeyRole(kid))), .text(kid)])
            }
        }
        if try db.hasTable("appcheck_demo_authority"),
            let row = try db.query("SELECT root_key, intermediate_key FROM appcheck_demo_authority WHERE id = 1").first,
            let root = row[0].bytes, let intermediate = row[1].bytes
        {
            try db.run(
                "UPDATE appcheck_demo_authority SET root_key = ?, intermediate_key = ? WHERE id = 1",
                [
                    .blob(StoreKey.isSealedSecret(root) ? root : key.seal(root, role: DemoKey.root.role)),
                    .blob(
                        StoreKey.isSealedSecret(intermediate)
                            ? intermediate : key.seal(intermediate, role: DemoKey.intermediate.role)),
                ])
        }
    }
}
