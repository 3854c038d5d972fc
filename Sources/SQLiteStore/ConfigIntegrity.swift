import Rollout

extension SQLiteConfigStore {
    /// Checks the whole store in one read transaction and throws the first `ConfigIntegrityProblem`.
    ///
    /// In order: SQLite's `integrity_check`; the audit hash chain (`AuditChain.verify`, which names the first edited,
    /// missing or reordered record); the chain head (a deleted or edited newest record); the versions (contiguous
    /// from 1, each with a template that parses, each pinned by its own `published` audit record whose digest
    /// matches the row, the newest matching the head); and every `published` record pointing at its version.
    public func verifyIntegrity() throws -> ConfigIntegrityReport {
        try withConnection {
            try database.transaction(immediate: false) { try check(full: true) }
        }
    }

    /// The check every write of a `RolloutStore` runs first, inside its write transaction: the chain, the head
    /// and every version's digest, without SQLite's page-level check and without parsing each template (those
    /// are `verifyIntegrity`'s, in `rollout audit verify`).
    ///
    /// It costs the same however long the history is: the head against the newest audit record (its position,
    /// its hash, and its content against that hash) and against the newest version (its number, the record
    /// written with it and the digest that record pinned). Edits further back in the history are found by
    /// `verifyIntegrity`; the tables that decide a write are covered by the store's seal.
    static func checkBeforeWriting(_ db: SQLiteDatabase) throws {
        let head = try db.query("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1").first
        let newest = try db.query("SELECT \(auditColumns) FROM config_audit ORDER BY sequence DESC LIMIT 1").first
        guard let head else {
            if newest == nil, try db.query("SELECT 1 FROM config_versions LIMIT 1").isEmpty { return }
            throw ConfigIntegrityProblem("chain head", "missing or unreadable (deleted?) although the store has records")
        }
        guard let version = head[0].int, let sequence = head[1].int, let hash = head[2].string else {
            throw ConfigIntegrityProblem("chain head", "a column has an unexpected value (edited?)")
        }
        guard let newest else { throw ConfigIntegrityProblem(auditRecord: sequence, "missing (deleted?)") }
        let record = try auditRecord(newest)
        if record.sequence != sequence {
            throw ConfigIntegrityProblem(
                auditRecord: min(record.sequence, sequence) + 1,
                record.sequence < sequence ? "missing (deleted?)" : "not covered by the chain head (appended outside rollout?)")
        }
        if record.hash != hash { throw ConfigIntegrityProblem(auditRecord: sequence, "does not match the chain head's hash (edited)") }
        if AuditChain.hash(sequence: record.sequence, entry: record.entry, previousHash: record.previousHash) != record.hash {
            throw ConfigIntegrityProblem(auditRecord: sequence, "content does not match its hash (edited)")
        }
        guard version > 0 else { return }
        guard let raw = try db.query("SELECT \(versionColumns) FROM config_versions ORDER BY number DESC LIMIT 1").first else {
            throw ConfigIntegrityProblem("version \(version)", "missing (deleted?)")
        }
        let row = try VersionRow(raw)
        if row.info.number != Int(version) {
            throw ConfigIntegrityProblem(
                "version \(min(row.info.number, Int(version)) + 1)",
                row.info.number < Int(version) ? "missing (deleted?)" : "not covered by the chain head (inserted outside rollout?)")
        }
        guard let pinned = try db.query("SELECT \(auditColumns) FROM config_audit WHERE sequence = ?", [.integer(row.auditSequence)]).first
        else { throw ConfigIntegrityProblem("version \(version)", "its audit record \(row.auditSequence) is missing (deleted?)", sequence: row.auditSequence) }
        let pin = try auditRecord(pinned)
        guard pin.hash == row.auditHash,
            AuditChain.hash(sequence: pin.sequence, entry: pin.entry, previousHash: pin.previousHash) == pin.hash
        else { throw ConfigIntegrityProblem("version \(version)", "audit record \(pin.sequence) is not the one written with it (replaced or edited?)", sequence: pin.sequence) }
        guard pin.entry.detail.hasSuffix(digestLabel + row.digest) else {
            throw ConfigIntegrityProblem(
                "version \(version)", "its content or metadata differs from what audit record \(pin.sequence) pinned (edited)",
                sequence: pin.sequence)
        }
    }

    private func check(full: Bool) throws -> ConfigIntegrityReport {
        let integrity = full ? try database.query("PRAGMA integrity_check").compactMap { $0.first?.string } : ["ok"]
        if integrity != ["ok"] {
            throw ConfigIntegrityProblem(
                "database", "SQLite integrity check failed: \(integrity.prefix(3).joined(separator: "; "))")
        }

        // The chain.
        var records: [AuditRecord] = []
        for row in try database.query("SELECT \(Self.auditColumns) FROM config_audit ORDER BY sequence") {
            records.append(try Self.auditRecord(row))
        }
        if let b = AuditChain.verify(records) {
            throw ConfigIntegrityProblem(auditRecord: b.sequence, b.problem)
        }

        // The head.
        let headRow = try database.query("SELECT version, audit_sequence, audit_hash FROM config_head WHERE id = 1")
            .first
        let versionRows = try database.query("SELECT \(Self.versionColumns) FROM config_versions ORDER BY number")
        guard let headRow, let headVersion = headRow[0].int, let headSequence = headRow[1].int,
            let headHash = headRow[2].string
        else {
            if records.isEmpty && versionRows.isEmpty {
                return ConfigIntegrityReport(
                    auditRecords: 0, versions: 0, headSequence: 0, headHash: AuditChain.genesis)
            }
            throw ConfigIntegrityProblem(
                "chain head", "missing or unreadable (deleted?) although the store has records")
        }
        let last = records.last
        let lastSequence = last?.sequence ?? 0
        if headSequence > lastSequence {
            throw ConfigIntegrityProblem(
                auditRecord: lastSequence + 1,
                "missing (deleted?): the log ends at record \(lastSequence) but the chain head is record \(headSequence)"
            )
        }
        if headSequence < lastSequence {
            throw ConfigIntegrityProblem(
                auditRecord: headSequence + 1,
                "not covered by the chain head (record \(headSequence)): appended outside rollout?")
        }
        if let last, last.hash != headHash {
            throw ConfigIntegrityProblem(auditRecord: last.sequence, "does not match the chain head's hash (edited)")
        }

        // The versions, each against the record written with it.
        var referenced = Set<Int64>()
        var expected = 1
        for raw in versionRows {
            let row = try VersionRow(raw)
            let n = row.info.number
            let subject = "version \(n)"
            if n != expected {
                throw ConfigIntegrityProblem(
                    n > expected ? "version \(expected)" : subject, n > expected ? "missing (deleted?)" : "out of order"
                )
            }
            expected += 1
            if full {
                do {
                    _ = try row.stored()
                } catch {
                    throw ConfigIntegrityProblem(subject, "its template does not parse (edited or damaged)")
                }
            }
            let index = Int(row.auditSequence) - 1
            guard index >= 0, index < records.count else {
                throw ConfigIntegrityProblem(
                    subject, "its audit record \(row.auditSequence) is missing (deleted?)", sequence: row.auditSequence)
            }
            let record = records[index]
            guard record.hash == row.auditHash else {
                throw ConfigIntegrityProblem(
                    subject, "audit record \(record.sequence) is not the one written with it (replaced?)", sequence: record.sequence)
            }
            guard record.entry.result == .published, record.entry.version == n else {
                throw ConfigIntegrityProblem(
                    subject, "audit record \(record.sequence) does not record its publication", sequence: record.sequence)
            }
            guard record.entry.detail.hasSuffix(Self.digestLabel + row.digest) else {
                throw ConfigIntegrityProblem(
                    subject, "its content or metadata differs from what audit record \(record.sequence) pinned (edited)",
                    sequence: record.sequence
                )
            }
            referenced.insert(record.sequence)
        }
        let newest = expected - 1
        if headVersion > newest {
            throw ConfigIntegrityProblem(
                "version \(newest + 1)", "missing (deleted?): the chain head says version \(headVersion) exists")
        }
        if headVersion < newest {
            throw ConfigIntegrityProblem(
                "version \(headVersion + 1)", "not covered by the chain head (inserted outside rollout?)")
        }
        for r in records where r.entry.result == .published && !referenced.contains(r.sequence) {
            let v = r.entry.version.map { "version \($0)" } ?? "a version"
            throw ConfigIntegrityProblem(
                auditRecord: r.sequence,
                "records publishing \(v), which no version row matches (deleted or replaced?)")
        }
        return ConfigIntegrityReport(
            auditRecords: records.count, versions: newest, headSequence: headSequence, headHash: headHash)
    }
}
