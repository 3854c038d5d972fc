import Crypto
import Glibc
import Platform
import JSON
import RemoteConfig
import Rollout
import Timekeeping

/// The embedded `ConfigStore`: every version and the audit chain in one SQLite file.
///
/// A publish is one `BEGIN IMMEDIATE` transaction: it takes the write lock, compares the ETag with the newest
/// version's, inserts the version and its audit record chained to the previous one, and moves the chain head.
/// Processes that race therefore serialise on SQLite's lock, and exactly one of two publishes based on the same
/// ETag wins. History is never trimmed.
///
/// Tamper evidence beyond the hash chain: each version row keeps the sequence and hash of the audit record
/// written with it, that record carries a digest of the whole version row (`version sha256:` in its detail),
/// and `config_head` keeps the newest version number and the chain's head, so deleting the newest audit record
/// or editing a version's template is detected as well (see `verifyIntegrity`).
public final class SQLiteConfigStore: ConfigStore, @unchecked Sendable {
    public let database: SQLiteDatabase
    /// Serialises use of the connection; shared with the other domains that use the same `SQLiteDatabase`.
    private let lock: RecursiveLock
    /// The last template text parsed, with its parse: a write reads the current version twice (the proposal,
    /// then the compare-and-swap inside its transaction), and the same text parses to the same template.
    private var lastParsed: (text: String, form: RemoteConfigTemplate.Form, template: RemoteConfigTemplate)?

    /// Uses `database` (creating the tables if needed). The store has no version until `initializeIfEmpty`.
    public init(database: SQLiteDatabase, lock: RecursiveLock = RecursiveLock()) throws {
        self.database = database
        self.lock = lock
        try lock.withLock { try SQLiteConfigStore.createSchema(in: database) }
    }

    /// Creates the config tables when they do not exist.
    public static func createSchema(in db: SQLiteDatabase) throws(SQLiteError) {
        try db.createTables(
            ["config_versions", "config_audit", "config_head"],
            """
            CREATE TABLE IF NOT EXISTS config_versions (
                number INTEGER PRIMARY KEY,
                etag TEXT NOT NULL UNIQUE,
                template TEXT NOT NULL,
                form TEXT NOT NULL,
                update_time INTEGER NOT NULL,
                update_user TEXT NOT NULL,
                update_origin TEXT NOT NULL,
                update_type TEXT NOT NULL,
                description TEXT NOT NULL,
                rollback_source INTEGER,
                audit_sequence INTEGER NOT NULL,
                audit_hash TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS config_audit (
                sequence INTEGER PRIMARY KEY,
                time INTEGER NOT NULL,
                actor TEXT NOT NULL,
                action TEXT NOT NULL,
                from_state TEXT NOT NULL,
                to_state TEXT NOT NULL,
                reason TEXT NOT NULL,
                result TEXT NOT NULL,
                version INTEGER,
                detail TEXT NOT NULL,
                previous_hash TEXT NOT NULL,
                hash TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS config_head (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                version INTEGER NOT NULL,
                audit_sequence INTEGER NOT NULL,
                audit_hash TEXT NOT NULL
            );
            """)
    }

    // MARK: Creation

    /// Publishes `genesis()` as version 1 if the store has no version yet; returns whether it did.
    ///
    /// Checked and written in one transaction, so processes starting together on a new file create exactly one
    /// version 1.
    @discardableResult
    public func initializeIfEmpty(_ genesis: () throws -> PublishRequest) throws -> Bool {
        try serialized {
            // Most opens find a store: answer without taking the write lock.
            guard try database.query("SELECT 1 FROM config_versions LIMIT 1").isEmpty else { return false }
            return try database.transaction {
                guard try database.query("SELECT 1 FROM config_versions LIMIT 1").isEmpty else { return false }
                _ = try insertVersion(try genesis())
                return true
            }
        }
    }

    /// The publish that creates a new store's version 1: `RolloutPlan.initialTemplate` on `seed` (flag present,
    /// rollout not started) and an `init` audit record.
    public static func genesis(seed: String, form: RemoteConfigTemplate.Form = .client, actor: String, time: Instant)
        throws
        -> PublishRequest
    {
        let template = try RolloutPlan.initialTemplate(seed: seed, form: form)
        let plan = try RolloutPlan.locate(in: template)
        let to = plan.map { "\($0.percentage) (\($0.state.rawValue))" } ?? "no rollout"
        return PublishRequest(
            template: template, ifMatch: .any, updateUser: actor, updateOrigin: "ROLLOUT_INIT",
            updateType: .incremental,
            description: "initial template", time: time,
            audit: AuditEntry(
                time: time, actor: actor, action: "init", from: "no store", to: to, reason: "initial template",
                result: .published,
                detail: "seed \(seed), \(form.rawValue) template"))
    }

    // MARK: ConfigStore

    public func current() throws -> StoredTemplate {
        try serialized {
            guard
                let row = try database.query(
                    "SELECT \(Self.versionColumns) FROM config_versions ORDER BY number DESC LIMIT 1"
                ).first
            else { throw StoreError.unavailable("the store has no version yet (create it with 'rollout init')") }
            return try stored(VersionRow(row))
        }
    }

    public func publish(_ request: PublishRequest) throws -> StoredTemplate {
        try serialized {
            try database.transaction {
                if case .etag(let expected) = request.ifMatch {
                    guard
                        let newest = try database.query(
                            "SELECT \(Self.versionColumns) FROM config_versions ORDER BY number DESC LIMIT 1"
                        ).first
                    else {
                        throw StoreError.unavailable("the store has no version yet (create it with 'rollout init')")
                    }
                    let row = try VersionRow(newest)
                    if row.info.etag != expected {
                        throw PublishConflict(current: try stored(row), expectedETag: expected)
                    }
                }
                return try insertVersion(request)
            }
        }
    }

    /// `row`'s template, parsed once for a text read again (the caller holds the lock).
    private func stored(_ row: VersionRow) throws -> StoredTemplate {
        if let last = lastParsed, last.form == row.form, last.text == row.templateText {
            return StoredTemplate(stamping: last.template, info: row.info)
        }
        let template = try row.template()
        lastParsed = (row.templateText, row.form, template)
        return StoredTemplate(stamping: template, info: row.info)
    }

    public func versions(limit: Int, before: Int?) throws -> [VersionInfo] {
        try serialized {
            try database.query(
                "SELECT \(Self.versionColumns) FROM config_versions WHERE number < ? ORDER BY number DESC LIMIT ?",
                [.integer(Int64(before ?? Int.max)), .integer(Int64(max(0, limit)))]
            ).map { try VersionRow($0).info }
        }
    }

    public func version(_ number: Int) throws -> StoredTemplate {
        try serialized {
            guard
                let row = try database.query(
                    "SELECT \(Self.versionColumns) FROM config_versions WHERE number = ?", [.integer(Int64(number))]
                ).first
            else { throw StoreError.noSuchVersion(number) }
            return try stored(VersionRow(row))
        }
    }

    @discardableResult
    public func appendAudit(_ entry: AuditEntry) throws -> AuditRecord {
        try serialized {
            try database.transaction {
                let head = try chainHead()
                let record = head.chaining(entry)
                try insert(record)
                try database.run(
                    "INSERT INTO config_head (id, version, audit_sequence, audit_hash) VALUES (1, ?, ?, ?) "
                        + "ON CONFLICT (id) DO UPDATE SET audit_sequence = excluded.audit_sequence, audit_hash = excluded.audit_hash",
                    [.integer(Int64(head.version)), .integer(record.sequence), .text(record.hash)])
                return record
            }
        }
    }

    /// One `BEGIN IMMEDIATE` transaction (the store's seal checked first and renewed at commit); the publishes
    /// and appends inside nest as savepoints.
    public func atomically<T>(_ body: () throws -> T) throws -> T {
        try withConnection { try database.transaction(body) }
    }

    public func auditRecords(limit: Int, before: Int64?) throws -> [AuditRecord] {
        try serialized {
            try database.query(
                "SELECT \(Self.auditColumns) FROM config_audit WHERE sequence < ? ORDER BY sequence DESC LIMIT ?",
                [.integer(before ?? Int64.max), .integer(Int64(max(0, limit)))]
            ).map { try Self.auditRecord($0) }
        }
    }

    // MARK: Writing

    /// Inserts the next version and its audit record and moves the head; the caller holds the write transaction.
    private func insertVersion(_ request: PublishRequest) throws -> StoredTemplate {
        let head = try chainHead()
        let newest = try database.query("SELECT max(number) FROM config_versions").first?.first?.int ?? 0
        // The head, not the rows, decides the next number: a deleted newest version leaves a visible gap.
        let number = Int(max(Int64(head.version), newest)) + 1
        let template = request.template.strippingVersionInfo()
        let text = template.json.compactText
        let info = VersionInfo(
            number: number, etag: Self.newETag(number: number, content: text), updateTime: request.time,
            updateUser: request.updateUser,
            updateOrigin: request.updateOrigin, updateType: request.updateType, description: request.description,
            rollbackSource: request.rollbackSource)
        let row = VersionRow(info: info, form: template.form, templateText: text, auditSequence: 0, auditHash: "")
        var entry = request.audit
        entry.version = number
        entry.detail = (entry.detail.isEmpty ? "" : entry.detail + "; ") + Self.digestLabel + row.digest
        let record = head.chaining(entry)
        try insert(record)
        try database.run(
            "INSERT INTO config_versions (\(Self.versionColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                .integer(Int64(number)), .text(info.etag), .text(text), .text(template.form.rawValue),
                .integer(info.updateTime.microseconds),
                .text(info.updateUser), .text(info.updateOrigin), .text(info.updateType.rawValue),
                .text(info.description),
                info.rollbackSource.map { .integer(Int64($0)) } ?? .null, .integer(record.sequence), .text(record.hash),
            ])
        try database.run(
            "INSERT INTO config_head (id, version, audit_sequence, audit_hash) VALUES (1, ?, ?, ?) "
                + "ON CONFLICT (id) DO UPDATE SET version = excluded.version, audit_sequence = excluded.audit_sequence, audit_hash = excluded.audit_hash",
            [.integer(Int64(number)), .integer(record.sequence), .text(record.hash)])
        return StoredTemplate(stamping: template, info: info)
    }

    private func insert(_ record: AuditRecord) throws {
        let e = record.entry
        try database.run(
            "INSERT INTO config_audit (\(Self.auditColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                .integer(record.sequence), .integer(e.time.microseconds), .text(e.actor), .text(e.action),
                .text(e.from), .text(e.to),
                .text(e.reason), .text(e.result.rawValue), e.version.map { .integer(Int64($0)) } ?? .null,
                .text(e.detail),
                .text(record.previousHash), .text(record.hash),
            ])
    }

    /// Where the chain continues: the head row (not the newest audit row, so that a deleted newest record stays
    /// a visible gap instead of being papered over by the next append).
    private func chainHead() throws -> ChainHead {
        if let row = try database.query("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1")
            .first
        {
            guard let version = row[0].int, let sequence = row[1].int, let hash = row[2].string else {
                throw StoreError.corrupt("the chain head has an unexpected value (run 'rollout audit verify')")
            }
            return ChainHead(version: Int(version), sequence: sequence, hash: hash)
        }
        // A store without a head yet: continue from the newest record, if any.
        let last = try database.query("SELECT sequence, hash FROM config_audit ORDER BY sequence DESC LIMIT 1").first
        return ChainHead(version: 0, sequence: last?[0].int ?? 0, hash: last?[1].string ?? AuditChain.genesis)
    }

    /// The newest version and the newest audit record, as `config_head` keeps them.
    struct ChainHead {
        var version: Int
        var sequence: Int64
        var hash: String

        func chaining(_ entry: AuditEntry) -> AuditRecord {
            let next = sequence + 1
            return AuditRecord(
                sequence: next, entry: entry, previousHash: hash,
                hash: AuditChain.hash(sequence: next, entry: entry, previousHash: hash))
        }
    }

    /// `etag-<n>-<16 hex>`: unique per version (the number) and not guessable from the content (a random salt).
    static func newETag(number: Int, content: String) -> String {
        var hasher = SHA256.Hasher()
        hasher.update("\(number)\n")
        hasher.update(content)
        hasher.update(SecureRandom.bytes(16))
        return "etag-\(number)-" + Hex.encode(hasher.finish().prefix(8))
    }

    /// Runs `body` holding the connection's lock; a row that does not decode surfaces as `StoreError.corrupt`.
    func serialized<T>(_ body: () throws -> T) throws -> T {
        do {
            return try withConnection(body)
        } catch let p as ConfigIntegrityProblem {
            throw StoreError.corrupt("\(p) (run 'rollout audit verify')")
        }
    }

    /// Runs `body` holding the connection's lock.
    func withConnection<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: Rows

    static let digestLabel = "version sha256:"

    static let versionColumns =
        "number, etag, template, form, update_time, update_user, update_origin, update_type, description, rollback_source, audit_sequence, audit_hash"
    static let auditColumns =
        "sequence, time, actor, action, from_state, to_state, reason, result, version, detail, previous_hash, hash"

    /// One row of `config_versions`.
    struct VersionRow {
        var info: VersionInfo
        var form: RemoteConfigTemplate.Form
        var templateText: String
        var auditSequence: Int64
        var auditHash: String

        init(
            info: VersionInfo, form: RemoteConfigTemplate.Form, templateText: String, auditSequence: Int64,
            auditHash: String
        ) {
            self.info = info
            self.form = form
            self.templateText = templateText
            self.auditSequence = auditSequence
            self.auditHash = auditHash
        }

        init(_ row: [SQLiteValue]) throws {
            let n = row[0].int.map { Int($0) }
            func bad(_ what: String) -> ConfigIntegrityProblem {
                ConfigIntegrityProblem("version \(n.map(String.init) ?? "?")", what)
            }
            guard let n else { throw bad("its number is not an integer") }
            guard let etag = row[1].string, let text = row[2].string,
                let form = row[3].string.flatMap(RemoteConfigTemplate.Form.init),
                let time = row[4].int, let user = row[5].string, let origin = row[6].string,
                let type = row[7].string.flatMap(UpdateType.init(rawValue:)), let description = row[8].string,
                row[9] == .null || row[9].int != nil, let auditSequence = row[10].int, let auditHash = row[11].string
            else { throw bad("a column has an unexpected value (edited?)") }
            info = VersionInfo(
                number: n, etag: etag, updateTime: Instant(microseconds: time), updateUser: user, updateOrigin: origin,
                updateType: type,
                description: description, rollbackSource: row[9].int.map { Int($0) })
            self.form = form
            templateText = text
            self.auditSequence = auditSequence
            self.auditHash = auditHash
        }

        func stored() throws -> StoredTemplate { StoredTemplate(stamping: try template(), info: info) }

        func template() throws -> RemoteConfigTemplate {
            do {
                return try RemoteConfigTemplate(json: try JSONParser().parse(templateText), preferredForm: form)
            } catch {
                throw ConfigIntegrityProblem("version \(info.number)", "its template does not parse (\(error))")
            }
        }

        /// SHA-256 over every column a publish writes, as the version's audit record pins it (`VersionDigest`,
        /// shared with the PostgreSQL store).
        var digest: String { VersionDigest.hex(info, form: form, templateText: templateText) }
    }

    static func auditRecord(_ row: [SQLiteValue]) throws -> AuditRecord {
        let sequence = row[0].int
        guard let sequence else {
            throw ConfigIntegrityProblem("audit log", "a record's sequence is not an integer (edited?)")
        }
        guard let time = row[1].int, let actor = row[2].string, let action = row[3].string, let from = row[4].string,
            let to = row[5].string, let reason = row[6].string,
            let result = row[7].string.flatMap(AuditEntry.Result.init(rawValue:)),
            row[8] == .null || row[8].int != nil, let detail = row[9].string, let previous = row[10].string,
            let hash = row[11].string
        else { throw ConfigIntegrityProblem(auditRecord: sequence, "a column has an unexpected value (edited?)") }
        let entry = AuditEntry(
            time: Instant(microseconds: time), actor: actor, action: action, from: from, to: to, reason: reason,
            result: result,
            version: row[8].int.map { Int($0) }, detail: detail)
        return AuditRecord(sequence: sequence, entry: entry, previousHash: previous, hash: hash)
    }
}
