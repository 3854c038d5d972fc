import Crypto
import Glibc
import Platform
import Rollout
import StoreSupport

/// The key of the PostgreSQL store's seal and witness: HMAC-SHA-256 of a fixed label under the team store key, so
/// the seal never uses the key that boxes the secrets directly, and the database (which never holds the team key)
/// cannot compute it.
public struct PostgresSealKey: Sendable {
    let bytes: [UInt8]
    /// The team store key file it was derived from, for messages.
    public let path: String

    /// Derives the seal key from the 32 bytes of the team store key read from `path`.
    public init(teamKey: [UInt8], path: String) {
        bytes = HMAC.authenticate(.sha256, key: teamKey, message: Array("rollout postgresql seal v1".utf8))
        self.path = path
    }

    /// HMAC-SHA-256 of `text` under this key, hex.
    func mac(_ text: String) -> String { Hex.encode(HMAC.authenticate(.sha256, key: bytes, message: Array(text.utf8))) }
}

/// How a `PostgresConfigStore` keeps the seal: the seal key of this machine (nil when the team store key file is
/// missing) and where this machine keeps its witnesses.
///
/// A store opened without one (`sealing: nil`, a bare connection: tests of other features, benchmarks) refuses to
/// write a sealed store and writes an unsealed one as before; the executable always opens with one, so that
/// without the key every write is refused, pointing to the key file.
public struct PostgresSealing: Sendable {
    public var key: PostgresSealKey?
    /// The team store key file this machine would read (named when it is missing).
    public var keyPath: String
    /// The directory of this machine's witness files, one per database.
    public var witnessDirectory: String

    public init(key: PostgresSealKey?, keyPath: String, witnessDirectory: String) {
        self.key = key
        self.keyPath = keyPath
        self.witnessDirectory = witnessDirectory
    }
}

/// What fails verification, named: `table stepup_operators`, `chain head`, `seal`, `witness`...
public struct PostgresSealProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var subject: String
    public var problem: String
    public var description: String { "\(subject): \(problem)" }

    init(_ subject: String, _ problem: String) {
        self.subject = subject
        self.problem = problem
    }
}

/// The seal of a PostgreSQL team store: one row (`store_seal`, schema 6) holding the state of everything that decides
/// a write, and an HMAC-SHA-256 of it under a key derived from the team store key, which the database never holds.
///
/// The state is one line per item: the chain head (sequence and hash), the newest audit record and version (row
/// digests), the schema version, a SHA-256 of every sealed table's rows (`sealedTables`), and a digest of the
/// catalog of the rollout tables (triggers and their functions, rules, row-level security, columns, defaults,
/// constraints). Every write transaction that takes the chain-head lock (`PostgresConfigStore.transaction`) checks
/// it right after the lock and before writing, and writes it again before COMMIT; `rollout audit verify` checks it
/// too. So a role without the key file (the documented writer role with psql, or the owner) that appends, edits or
/// deletes a row of a sealed table or the chain leaves a state whose seal it cannot compute: the next write and
/// `audit verify` name what differs. A consistent rollback of the whole database (chain, head and seal together, as
/// a superuser restoring a snapshot can do) is what the `PostgresWitness` of a machine that saw the later state
/// detects.
///
/// The per-request App Check state (challenges, key counters, consumed token ids) and telemetry are not sealed:
/// they change on every request or batch without the chain-head lock (docs/POSTGRES.md, "Tamper evidence").
public enum PostgresSeal {
    /// The tables that decide a write, digested whole in the seal: `SealedTables.all`, the one list both stores
    /// seal, but the retirements table the team store has not got (it keeps a key's retirement in
    /// `appcheck_signing_keys`).
    ///
    /// A seal written before a table joined the list has no item for it: the check leaves it out (the HMAC covers
    /// the items the seal has, so none can be removed without the key) and the next write seals it (`check`).
    public static let sealedTables = SealedTables.sealed(without: ["appcheck_signing_key_retirements"])

    /// The state of the sealed items, as `name value` pairs in a fixed order.
    package struct State: Equatable {
        var items: [(name: String, value: String)]

        package static func == (a: State, b: State) -> Bool { a.text == b.text }

        /// The canonical text the HMAC covers: one `name=value` line per item.
        var text: String { items.map { "\($0.name)=\($0.value)\n" }.joined() }

        /// What `text` wrote; nil when it is not such a text.
        init?(text: String) {
            var items: [(String, String)] = []
            for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
                guard let eq = line.firstIndex(of: "=") else { return nil }
                items.append((String(line[..<eq]), String(line[line.index(after: eq)...])))
            }
            self.items = items
        }

        init(items: [(name: String, value: String)]) { self.items = items }

        func value(_ name: String) -> String? { items.first { $0.name == name }?.value }
    }

    /// SHA-256 over a query's rows as text (`t::text`), sorted byte-wise, one per line: stable for a database
    /// (the `C` collation, `bytea_output = hex` on every connection, no floating-point columns in sealed tables).
    static func digest(of table: String) -> String { "(SELECT \(hashed(sortedLines("t::text"))) FROM \(table) t)" }

    /// The values of a text expression over a query's rows, sorted byte-wise and joined one per line ('' for none).
    static func sortedLines(_ x: String) -> String {
        "coalesce(string_agg(\(x), E'\\n' ORDER BY \(x) COLLATE \"C\"), '')"
    }

    /// The schema of the rollout tables (the namespace of `config_head`).
    static let namespace = "(SELECT relnamespace FROM pg_class WHERE oid = 'config_head'::regclass)"

    /// A digest of what changes what a statement on the rollout tables does: triggers (with their functions'
    /// source), rules, row-level security and its policies, columns with their types and defaults, constraints.
    static let catalogDigest = """
        (SELECT \(hashed(sortedLines("x"))) FROM (
          SELECT format('trigger %s %s', pg_get_triggerdef(t.oid), pg_get_functiondef(t.tgfoid)) AS x
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = \(namespace) AND NOT t.tgisinternal
          UNION ALL SELECT format('rule %s %s', r.rulename, pg_get_ruledef(r.oid))
            FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class WHERE c.relnamespace = \(namespace)
          UNION ALL SELECT format('policy %s %s %s %s %s %s %s', c.relname, p.polname, p.polcmd, p.polpermissive,
              pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid), p.polroles)
            FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = \(namespace)
          UNION ALL SELECT format('relation %s %s rls %s %s', c.relname, c.relkind, c.relrowsecurity, c.relforcerowsecurity)
            FROM pg_class c WHERE c.relnamespace = \(namespace) AND c.relkind IN ('r', 'v', 'm', 'p', 'f')
          UNION ALL SELECT format('column %s %s %s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
              a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = \(namespace) AND c.relkind IN ('r', 'v', 'm', 'p', 'f') AND a.attnum > 0 AND NOT a.attisdropped
          UNION ALL SELECT format('constraint %s %s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
            FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = \(namespace)
        ) s)
        """

    /// The first privilege on a rollout table that lets a role other than the owner remove evidence: TRUNCATE or
    /// TRIGGER on any table, UPDATE or DELETE on versions, audit records or the schema table (or a column of
    /// them), INSERT into the schema table, DELETE of the seal or the head. The documented grants hold none; nil
    /// when no role holds one.
    static let excessPrivilege = """
        (SELECT x FROM (
          SELECT format('%s holds %s on %s', coalesce(r.rolname, 'PUBLIC'), a.privilege_type, c.relname) AS x
            FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee
            WHERE c.relnamespace = \(namespace) AND c.relkind = 'r' AND a.grantee <> c.relowner AND (
              a.privilege_type IN ('TRUNCATE', 'TRIGGER')
              OR (c.relname IN ('config_versions', 'config_audit', 'rollout_schema') AND a.privilege_type IN ('UPDATE', 'DELETE'))
              OR (c.relname = 'rollout_schema' AND a.privilege_type = 'INSERT')
              OR (c.relname IN ('store_seal', 'config_head') AND a.privilege_type = 'DELETE'))
          UNION ALL SELECT format('%s holds %s (%s) on %s', coalesce(r.rolname, 'PUBLIC'), a.privilege_type, att.attname, c.relname)
            FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid CROSS JOIN LATERAL aclexplode(att.attacl) a
            LEFT JOIN pg_roles r ON r.oid = a.grantee
            WHERE c.relnamespace = \(namespace) AND c.relname IN ('config_versions', 'config_audit', 'rollout_schema')
              AND a.grantee <> c.relowner AND a.privilege_type = 'UPDATE'
        ) p ORDER BY x COLLATE "C" LIMIT 1)
        """

    /// A fingerprint of the catalog rows that `catalogDigest` and `excessPrivilege` read: every relation of the
    /// rollout tables' schema (its `pg_class` row holds the owner, the ACL, the row-level security flags, the name,
    /// the kind), and, for each of them of a kind those two read (tables, views, materialized views, partitioned and
    /// foreign tables), each of its columns (`pg_attribute`: name, type, NOT NULL, the column ACL), defaults,
    /// triggers and the functions they call, rules, policies and constraints. Per catalog, how many such row
    /// versions there are and the sum of their `xmin` (the transaction that wrote each), tagged, then the smallest
    /// `distance` of any of them (see `stillNames`).
    ///
    /// PostgreSQL never changes a catalog row in place for DDL or GRANT: every CREATE, ALTER, DROP, GRANT or
    /// REVOKE (and a superuser's UPDATE of a catalog) writes a new row version, whose `xmin` is the id of the
    /// transaction that made it. A row version is seen only once its transaction committed (READ COMMITTED), so
    /// one that was seen is final: a later change is another transaction's, and a deleted row leaves the list.
    /// `stillNames` trusts the same fingerprint only while no row version counted was written by a transaction id
    /// handed out since the cached one was read (ids below that had all finished when it was read). Then every row
    /// version counted now was counted then: it was written by a finished transaction, so it was seen then unless
    /// it was deleted before, and a deleted row stays deleted. So the same count per catalog is the same rows, and
    /// a row removed (a trigger dropped) lowers its catalog's count. The sum of the `xmin`s is not needed for that;
    /// it makes every change show in the fingerprint too (a GRANT leaves the count as it was). Ids are 32-bit and
    /// come round again after 2^32 transactions, so a later change could carry the `xmin` of the version it
    /// replaces: the distance rule rules that out too. (The connection's own DDL, a migration, drops the cache:
    /// `catalogChanged`.) So while the fingerprint holds, the rows are the same and so are the digest and the
    /// privilege check computed from them; the in-place updates PostgreSQL does make (VACUUM's statistics,
    /// `relhasindex`, the frozen-xid horizon, freezing itself, which keeps a row's `xmin` as read) touch no column
    /// either of them reads. The indexes', sequences' and composite types' own columns are left out: neither reads
    /// them (their `pg_class` rows are in).
    ///
    /// Counting and summing, where a list of each row's identity and `xmin` was built and hashed before, and joins
    /// on the tables' oids where each scan compared every row with an array of them: measured on the server with
    /// `EXPLAIN (ANALYZE, TIMING OFF)` on a store's database, medians of 150 runs in two rounds, the fingerprint
    /// took 0.447 and 0.429 ms before, 0.370 and 0.345 ms after, and the state query a write reads after its head
    /// lock (`fingerprintedStateQuery`, of which it is most) 0.761 and 0.709 ms before, 0.702 and 0.641 after.
    /// A connection keeps the digest and the privilege check it computed with their fingerprint
    /// (`PostgresConfigStore.catalogCache`) and recomputes both whenever the fingerprint differs.
    static let catalogFingerprint = """
        (WITH rel AS MATERIALIZED (SELECT oid, xmin, relkind FROM pg_class WHERE relnamespace = \(namespace)),
          tabs AS MATERIALIZED (SELECT oid FROM rel WHERE relkind IN ('r', 'v', 'm', 'p', 'f')),
          lists (tag, x, m) AS (
            SELECT 'c', \(counted("xmin")), min(\(distance("xmin"))) FROM rel
            UNION ALL SELECT 'a', \(counted("a.xmin")), min(\(distance("a.xmin")))
              FROM tabs JOIN pg_attribute a ON a.attrelid = tabs.oid WHERE a.attnum > 0
            UNION ALL SELECT 'd', \(counted("d.xmin")), min(\(distance("d.xmin")))
              FROM tabs JOIN pg_attrdef d ON d.adrelid = tabs.oid
            UNION ALL SELECT 't', \(counted("t.xmin")) || '/' || \(counted("p.xmin")),
              least(min(\(distance("t.xmin"))), min(\(distance("p.xmin"))))
              FROM tabs JOIN pg_trigger t ON t.tgrelid = tabs.oid LEFT JOIN pg_proc p ON p.oid = t.tgfoid
            UNION ALL SELECT 'r', \(counted("w.xmin")), min(\(distance("w.xmin")))
              FROM tabs JOIN pg_rewrite w ON w.ev_class = tabs.oid
            UNION ALL SELECT 'p', \(counted("p.xmin")), min(\(distance("p.xmin")))
              FROM tabs JOIN pg_policy p ON p.polrelid = tabs.oid
            UNION ALL SELECT 'k', \(counted("k.xmin")), min(\(distance("k.xmin")))
              FROM tabs JOIN pg_constraint k ON k.conrelid = tabs.oid)
        SELECT string_agg(tag || x, ' ') || ' ' || coalesce(min(m), \(farthest)) FROM lists)
        """

    /// How many rows have an `xmin` (a column that is NULL on the outer side of a join counts none) and their sum,
    /// `count:sum`.
    static func counted(_ xmin: String) -> String { "count(\(xmin)) || ':' || coalesce(sum(\(xmin)::text::bigint), 0)" }

    /// A fingerprint of the sealed tables' rows: each table's name and the row identity (`ctid`) and `xmin` of
    /// each of its row versions, in scan order, hashed server-side into one short value, followed by the smallest
    /// `distance` of those row versions.
    ///
    /// The argument is the catalog fingerprint's (`catalogFingerprint`): an UPDATE, INSERT or DELETE of another
    /// session never changes a committed row version in place; it writes a new one (another `ctid`, an `xmin` of
    /// its own transaction, one handed out since the last check, as `stillNames` requires) or removes one from
    /// what a statement sees.
    /// A row version seen committed is final, so the same list of (`ctid`, `xmin`) per table means the same rows,
    /// and the same rows give the same digest on one connection (its settings, `bytea_output`, are its own; the
    /// columns' types are the catalog's, whose fingerprint is read beside this one). A different order of the
    /// same rows only makes the next write compute the digests again. Each table is named in the list, so rows
    /// cannot move from one table's list to another's unnoticed.
    static func rowsFingerprint(_ tables: [String] = sealedTables) -> String {
        "(WITH lists (n, x, m) AS ("
            + tables.map {
                "SELECT '\($0)', string_agg(t.ctid::text || t.xmin::text, ','), min(\(distance("t.xmin"))) FROM \($0) t"
            }.joined(separator: " UNION ALL ")
            + ") SELECT \(hashed("string_agg(n || ' ' || coalesce(x, ''), E'\\n')")) || ' ' || coalesce(min(m), \(farthest)) FROM lists)"
    }

    /// How many transaction ids before the present transaction's the one that wrote a row version was (`xid`, its
    /// `xmin`), counted modulo 2^32 as the ids themselves are: 0 for this transaction's own rows, 2^32 - 1 for
    /// one written by the id after it one wraparound ago.
    static func distance(_ xid: String) -> String { "((age(\(xid))::bigint + 4294967296) % 4294967296)" }

    /// The distance given when there is no row at all.
    static let farthest = "4294967295"

    /// The hex SHA-256 of a text expression.
    static func hashed(_ text: String) -> String { "encode(sha256(convert_to(\(text), 'UTF8')), 'hex')" }

    /// The two columns a fingerprinting state query ends with: this transaction's id (the head lock, a row lock,
    /// gave it one) and the oldest transaction id its snapshot did not see finished (`pg_snapshot_xmin`: every
    /// transaction below it had committed or aborted when the statement read). Both as 64-bit ids (with the epoch).
    static let transactionColumns =
        "pg_current_xact_id_if_assigned()::text, pg_snapshot_xmin(pg_current_snapshot())::text"

    /// A fingerprint column as read: the hash, then the smallest `distance` of any row version it lists.
    static func fingerprint(_ column: String?) -> (hash: String, distance: UInt64)? {
        guard let column, let space = column.lastIndex(of: " "), let distance = UInt64(column[column.index(after: space)...])
        else { return nil }
        return (String(column[..<space]), distance)
    }

    /// Whether a fingerprint read now (`column`, in the transaction with id `now`) still names the rows that the
    /// cached one (`hash`, read by a statement whose snapshot's oldest unfinished id was `since`) named.
    ///
    /// The same hash is the same list of row versions, each by its identity and `xmin`, unless a row version was
    /// written with the `xmin` of the one it replaced: transaction ids are 32-bit and come round again after 2^32
    /// of them, and `xmin` keeps the id (a frozen row's too). So the list is only trusted while no row version in
    /// it was written by a transaction with an id from `since` to `now`, modulo 2^32 (a row's `distance` is then at
    /// least `now - since + 1`): every row version written or rewritten since the cached list was read has such an
    /// id (transactions below `since` had finished and were seen), so none can hide behind a reused id, and a row
    /// removed shortens the list. Beyond 2^31 ids since, it is not trusted at all.
    static func stillNames(_ hash: String, since: UInt64, column: String?, now: UInt64?) -> Bool {
        guard let (read, distance) = fingerprint(column), read == hash, let now, now >= since, now - since < 1 << 31
        else { return false }
        return distance > now - since
    }

    /// Which digests of the sealed tables a state query computes.
    enum TableDigests {
        /// Every table's.
        case all
        /// None (NULL in their columns): the connection holds those of the rows' fingerprint (`rowsFingerprint`).
        case none
        /// Those of the tables the open transaction wrote (inserted, updated or deleted a row of; NULL for the
        /// others), by the server's own count of the connection's writes (`pg_stat_get_xact_tuples_*`). That
        /// count can also hold an earlier transaction's writes not yet flushed to the statistics, which only
        /// digests such a table again, as every renewal did before.
        case writtenByThisTransaction
    }

    /// One round trip: the head, the newest record and version, the schema version, the catalog, the privileges,
    /// then every sealed table's digest.
    static let stateQuery = stateQuery(catalog: true)

    /// `stateQuery` and then the catalog's fingerprint (`catalogFingerprint`) and the sealed rows' fingerprint
    /// (`rowsFingerprint`): what a connection's second write reads after its head lock, to keep the catalog's
    /// digest and privilege check and the tables' digests for the writes after it. (The first reads `stateQuery`
    /// alone: a command that writes once does not pay for fingerprints it never uses.)
    static let fingerprintingStateQuery = stateQuery(catalog: true, fingerprint: true)

    /// `stateQuery` with the two fingerprints in place of the catalog's digest, the privileges and the tables'
    /// digests (NULL in their columns): what a write transaction reads after the head lock while its connection
    /// holds the digests and privilege check of those fingerprints (`PostgresConfigStore.catalogCache`,
    /// `tablesCache`).
    static let fingerprintedStateQuery = stateQuery(catalog: false, digests: .none, fingerprint: true)

    /// `stateQuery` without the catalog's digest and the privileges, and with the digests of only the sealed
    /// tables this transaction wrote (NULL in the other columns): what a write transaction re-reads before
    /// writing its seal. Its own statements change rows, never the catalog; the catalog and the tables it did
    /// not write are sealed as it checked them after the head lock, so a change another session made meanwhile
    /// is named by the next check instead of being sealed (a table this transaction wrote is digested whole
    /// again, in the transaction's one snapshot, taken right after the head lock: another login's change committed
    /// since the check is not in it, so it too is named by the next check). A count that missed a write of this transaction could only leave the old digest in
    /// the seal, which the next check then refuses: never a state sealed that no check saw.
    ///
    /// Read only when `renewalQuery` counted a write to a sealed table: a transaction that wrote none (a
    /// publish) reads a statement that names no sealed table, so the server neither locks nor scans them.
    static let writtenRenewalQuery = stateQuery(catalog: false, digests: .writtenByThisTransaction)

    /// The head, the newest record and version and the schema version (NULL for the catalog, the privileges and
    /// every table), then how many rows of the sealed tables the connection wrote (`TableDigests`): what a write
    /// transaction reads before writing its seal; when that count is not 0 it reads `writtenRenewalQuery`.
    static let renewalQuery =
        stateQuery(catalog: false, digests: .none).replacing(
            " FROM config_head h WHERE h.id = 1",
            with: ", " + sealedTables.map(written).joined(separator: " + ") + " FROM config_head h WHERE h.id = 1")

    /// How many rows of `table` the connection inserted, updated or deleted and not yet flushed to the
    /// statistics: the open transaction's writes, and maybe an earlier one's. With `track_counts` off (a
    /// superuser's setting) the server counts nothing: then every table counts as written (1), as before.
    static func written(_ table: String) -> String {
        "(CASE WHEN current_setting('track_counts')::boolean THEN "
            + ["inserted", "updated", "deleted"].map { "pg_stat_get_xact_tuples_\($0)('\(table)'::regclass)" }
                .joined(separator: " + ") + " ELSE 1 END)"
    }

    /// The query over `tables` (`sealedTables`, or those of them an older schema has, when migrating).
    static func stateQuery(
        catalog: Bool, digests: TableDigests = .all, fingerprint: Bool = false, tables: [String] = sealedTables
    ) -> String {
        let columns: [String] =
            switch digests {
            case .all: tables.map(digest(of:))
            case .none: tables.map { _ in "NULL" }
            case .writtenByThisTransaction: tables.map { "CASE WHEN \(written($0)) > 0 THEN \(digest(of: $0)) END" }
            }
        return "SELECT h.version, h.audit_sequence, h.audit_hash, "
            + "(SELECT sequence FROM config_audit ORDER BY sequence DESC LIMIT 1), "
            + "(SELECT \(hashed("t::text")) FROM config_audit t ORDER BY sequence DESC LIMIT 1), "
            + "(SELECT hash FROM config_audit ORDER BY sequence DESC LIMIT 1), "
            + "(SELECT number FROM config_versions ORDER BY number DESC LIMIT 1), "
            + "(SELECT \(hashed("t::text")) FROM config_versions t ORDER BY number DESC LIMIT 1), "
            + "(SELECT max(version) FROM rollout_schema), "
            + (catalog ? catalogDigest + ", " + excessPrivilege : "NULL, NULL") + ", "
            + columns.joined(separator: ", ")
            + (fingerprint ? ", " + catalogFingerprint + ", " + rowsFingerprint(tables) + ", " + transactionColumns : "")
            + " FROM config_head h WHERE h.id = 1"
    }

    /// The current state of the store on `c`, and a problem that needs no seal to see (a head that is not the
    /// newest record or version, a privilege beyond the documented ones), if any.
    static func current(_ c: PGConnection, tables: [String] = sealedTables) throws
        -> (state: State, problem: PostgresSealProblem?)
    {
        current(row: try c.query(tables == sealedTables ? stateQuery : stateQuery(catalog: true, tables: tables)).first, tables: tables)
    }

    /// The same from `stateQuery`'s row, read by the caller (in the round trip of the head lock).
    static func current(row: [String?]?, tables: [String] = sealedTables) -> (state: State, problem: PostgresSealProblem?) {
        guard let row else {
            return (State(items: []), PostgresSealProblem("chain head", "missing (config_head deleted?)"))
        }
        func text(_ i: Int) -> String { row[i] ?? "none" }
        var items: [(name: String, value: String)] = [
            ("chain head", "\(text(1)) \(text(2))"),
            ("newest audit record", "\(text(3)) \(text(4))"),
            ("newest version", "\(text(6)) \(text(7))"),
            ("schema", text(8)),
            ("catalog", text(9)),
        ]
        for (i, table) in tables.enumerated() { items.append(("table \(table)", text(11 + i))) }
        let state = State(items: items)
        if row[1] != (row[3] ?? "0") || row[2] != (row[5] ?? AuditChain.genesis) {
            return (
                state,
                PostgresSealProblem(
                    "chain head",
                    "the head names record \(text(1)), the newest audit record is \(row[3] ?? "none") (records appended or removed outside rollout)"
                )
            )
        }
        if row[0] != (row[6] ?? "0") {
            return (
                state,
                PostgresSealProblem(
                    "chain head",
                    "the head names version \(text(0)), the newest version is \(row[6] ?? "none") (versions added or removed outside rollout)"
                )
            )
        }
        if let excess = row[10] {
            return (
                state,
                PostgresSealProblem(
                    "privileges",
                    "\(excess), beyond the documented grants (docs/POSTGRES.md, Roles): it could remove evidence")
            )
        }
        return (state, nil)
    }

    /// The first thing wrong with the seal of the store on `c` against its current state `now`; nil when the seal
    /// holds, and for a store never sealed (`sealed` false: the caller decides). `key` nil: the contents are
    /// compared, the HMAC cannot be.
    static func check(_ c: PGConnection, now: State, key: PostgresSealKey?) throws -> (
        sealed: Bool, problem: PostgresSealProblem?
    ) {
        check(sealRow: try c.query(sealQuery).first, now: now, key: key)
    }

    static let sealQuery = "SELECT state, mac FROM store_seal WHERE id = 1"

    /// The same from `sealQuery`'s row (nil: no seal), read by the caller.
    static func check(sealRow: [String?]?, now: State, key: PostgresSealKey?) -> (sealed: Bool, problem: PostgresSealProblem?) {
        guard let row = sealRow else { return (false, nil) }
        guard let text = row[0], let mac = row[1], let sealed = State(text: text) else {
            return (true, PostgresSealProblem("seal", "a column has an unexpected value (edited outside rollout?)"))
        }
        // A table the seal has no item for joined `sealedTables` after the seal was written: not covered yet (the
        // write that checks this seals it: its checked state has the table's digest).
        for item in now.items where sealed.value(item.name) != item.value {
            if sealed.value(item.name) == nil, item.name.hasPrefix("table ") { continue }
            return (
                true,
                PostgresSealProblem(item.name, differs(item.name, sealed: sealed.value(item.name), now: item.value))
            )
        }
        if sealed.items.contains(where: { now.value($0.name) == nil }) {
            return (true, PostgresSealProblem("seal", "it seals other items than this program's (edited?)"))
        }
        guard let key else { return (true, nil) }
        if !constantTimeEquals(Array(key.mac(text).utf8), Array(mac.utf8)) {
            return (
                true,
                PostgresSealProblem(
                    "seal",
                    "its HMAC does not match under \(key.path) (the seal was rewritten without the team store key, or this is another store's key)"
                )
            )
        }
        return (true, nil)
    }

    /// How the item `name` differs from its sealed value, in words.
    static func differs(_ name: String, sealed: String?, now: String) -> String {
        let then = sealed.map { $0.split(separator: " ").first.map(String.init) ?? $0 } ?? "nothing"
        let found = now.split(separator: " ").first.map(String.init) ?? now
        switch name {
        case "chain head", "newest audit record":
            return
                "record \(found) is not the sealed one (record \(then)): the audit log or its head was changed outside rollout"
        case "newest version":
            return
                "version \(found) is not the sealed one (version \(then)): a version was added, edited or removed outside rollout"
        case "schema": return "schema \(found) is not the sealed one (\(then)): rollout_schema was changed outside rollout"
        case "catalog":
            return
                "a trigger, rule, row-level security policy, column or constraint of the rollout tables changed since the seal (outside rollout)"
        default:
            return "its rows differ from the sealed state (changed outside rollout: edited, inserted or deleted rows)"
        }
    }

    /// Writes the seal of the current state on `c` (inside the caller's write transaction, just before COMMIT).
    /// `thenCommit`: COMMIT in the round trip of the seal's write.
    /// `checked`: the state this transaction checked after the head lock, whose catalog item is sealed again
    /// (`renewalQuery`); nil reads everything again.
    package static func renew(_ c: PGConnection, key: PostgresSealKey, checked: State? = nil, thenCommit: Bool = false) throws -> State {
        var (state, problem): (State, PostgresSealProblem?)
        if let checked {
            try c.prepare(renewalQuery)
            var row = try c.query(renewalQuery).first
            let count = 11 + sealedTables.count
            if let read = row, read.count > count {
                // Anything but a count of 0 (nil included) digests the tables written.
                if read[count].flatMap({ Int64($0) }) != 0 {
                    try c.prepare(writtenRenewalQuery)
                    row = try c.query(writtenRenewalQuery).first
                } else {
                    row = Array(read.prefix(count))
                }
            }
            // The tables this transaction did not write are sealed as checked (see `renewalQuery`).
            for (i, table) in sealedTables.enumerated() where row != nil && row![11 + i] == nil {
                row![11 + i] = checked.value("table \(table)")
            }
            (state, problem) = current(row: row)
        } else {
            (state, problem) = try current(c)
        }
        if let problem { throw problem }
        if let catalog = checked?.value("catalog"), let i = state.items.firstIndex(where: { $0.name == "catalog" }) {
            state.items[i].value = catalog
        }
        let text = state.text
        let write = PGStatement(
            "INSERT INTO store_seal (id, state, mac) VALUES (1, $1, $2) "
                + "ON CONFLICT (id) DO UPDATE SET state = excluded.state, mac = excluded.mac",
            [text, key.mac(text)], prepare: true)
        try c.pipeline(statements: [write] + (thenCommit ? [PGStatement("COMMIT", [])] : []))
        return state
    }

    /// The database's identity for the witness: the cluster's system identifier and the database's name.
    package static func identity(_ c: PGConnection) throws -> String {
        guard
            let row = try c.query("SELECT (SELECT system_identifier FROM pg_control_system()), current_database()")
                .first,
            let system = row[0], let name = row[1]
        else { throw PostgresSealProblem("witness", "cannot read the database's identity (pg_control_system)") }
        return "\(system) \(name)"
    }
}

/// The witness of one operator machine: a file per database (`<directory>/<system identifier>-<database>`,
/// mode 0600) recording the newest audit record this machine saw (sequence and hash), MAC'd with the seal key.
///
/// Other machines append to the chain, so the check is that this record is still in the chain, unchanged: a
/// database rolled back to an earlier snapshot, a truncated or rewritten history, or an old seal replayed with its
/// head are all told apart from a store that merely moved on. Every write and `audit verify` checks it and then
/// advances it to the head it saw.
struct PostgresWitness {
    let path: String
    let identity: String
    let key: PostgresSealKey

    init(directory: String, identity: String, key: PostgresSealKey) {
        let safe = String(identity.map { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" ? $0 : "-" })
        path = directory + "/" + safe + ".witness"
        self.identity = identity
        self.key = key
    }

    static let header = "rollout-postgresql-witness-v1"

    /// The record this machine saw last; nil when it never saw this database.
    func read() throws -> (sequence: Int64, hash: String)? {
        guard access(path, F_OK) == 0 else { return nil }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw PostgresSealProblem("witness", "\(path) is not readable")
        }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        let n = Glibc.read(fd, &bytes, bytes.count)
        let lines = String(decoding: bytes.prefix(max(0, n)), as: UTF8.self).split(separator: "\n").map(String.init)
        guard lines.count == 4, lines[0] == Self.header, lines[1] == "database \(identity)",
            let mac = lines[3].split(separator: " ").last, lines[3].hasPrefix("mac "),
            key.mac(lines[0...2].joined(separator: "\n")) == mac
        else {
            throw PostgresSealProblem(
                "witness",
                "\(path) is not a witness of this database under \(key.path) (edited, or another store's key)")
        }
        let parts = lines[2].split(separator: " ")
        guard parts.count == 4, parts[0] == "sequence", let sequence = Int64(parts[1]), parts[2] == "hash" else {
            throw PostgresSealProblem("witness", "\(path) is malformed")
        }
        return (sequence, String(parts[3]))
    }

    /// The hash the chain holds for a record (`$1`: its sequence).
    static let recordQuery = "SELECT hash FROM config_audit WHERE sequence = $1"

    /// The first problem with the chain on `c` against what this machine saw, or nil.
    func check(_ c: PGConnection) throws -> PostgresSealProblem? {
        // Record 0 is the empty chain's genesis, in every chain.
        guard let seen = try read(), seen.sequence > 0 else { return nil }
        let found = try c.query(Self.recordQuery, [String(seen.sequence)]).first?.first ?? nil
        return check(seen: seen, found: found)
    }

    /// The same from what the file holds (`seen`) and the hash the chain holds for that record (`found`, nil when
    /// the chain has no such record), read by the caller.
    func check(seen: (sequence: Int64, hash: String), found: String?) -> PostgresSealProblem? {
        guard seen.sequence > 0 else { return nil }
        guard let found else {
            return PostgresSealProblem(
                "witness",
                "this machine saw audit record \(seen.sequence) (\(seen.hash.prefix(12))…, \(path)), which the chain no longer holds: the database was rolled back or its history truncated"
            )
        }
        if found != seen.hash {
            return PostgresSealProblem(
                "witness",
                "audit record \(seen.sequence) is not the one this machine saw (\(seen.hash.prefix(12))…, \(path)): the history was rewritten or an older copy restored"
            )
        }
        return nil
    }

    /// The size of a witness file: its lines padded with newlines (which `read` skips), so that advancing it
    /// rewrites one sector in place.
    static let size = 512

    /// Records `sequence`/`hash` when it is newer than what the file holds.
    ///
    /// A file of `size` bytes is rewritten in place: one write of 512 bytes at offset 0 and `fdatasync`, the unit
    /// a disk writes whole (PostgreSQL keeps `pg_control` within 512 bytes for the same reason), so no new inode
    /// and no directory change per write. With `sync` that `fdatasync` is handed to it (`WitnessSync`): it runs
    /// on its own thread, off the answer's path, and the connection's next sealed write waits for it before its
    /// COMMIT (`PostgresConfigStore.renewSeal`), so a crash of the machine leaves the witness one write behind at
    /// most. Any other file (a first witness, or one written before) is replaced whole: a temporary file, fsync,
    /// rename.
    func advance(sequence: Int64, hash: String, sync: WitnessSync? = nil) throws {
        guard sequence > 0 else { return }
        if let seen = try? read(), seen.sequence >= sequence { return }
        let body = "\(Self.header)\ndatabase \(identity)\nsequence \(sequence) hash \(hash)"
        var bytes = Array("\(body)\nmac \(key.mac(body))\n".utf8)
        if bytes.count < Self.size { bytes += [UInt8](repeating: UInt8(ascii: "\n"), count: Self.size - bytes.count) }
        var status = stat()
        if bytes.count == Self.size, stat(path, &status) == 0, status.st_size == Self.size,
            (status.st_mode & S_IFMT) == S_IFREG
        {
            // (A sync of this connection's last write that failed is not an error here: this write syncs anew.)
            try? sync?.waitUntilSynced()
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                let written = pwrite(fd, bytes, bytes.count, 0) == bytes.count
                if written, let sync {
                    sync.hold(fd: fd, path: path)
                    sync.release()
                    return
                }
                let ok = written && fdatasync(fd) == 0
                close(fd)
                guard ok else { throw PostgresSealProblem("witness", "cannot write \(path): \(String(cString: strerror(errno)))") }
                return
            }
        }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        _ = mkdir(directory, 0o700)
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw PostgresSealProblem("witness", "cannot write \(temporary): \(String(cString: strerror(errno)))")
        }
        let ok = write(fd, bytes, bytes.count) == bytes.count && fsync(fd) == 0
        close(fd)
        guard ok, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw PostgresSealProblem("witness", "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

extension PostgresConfigStore {
    /// Checks the seal right after the chain-head lock, before the transaction writes anything: refuses a store
    /// that fails verification (naming what differs), a sealed store without the key, and, on a connection of the
    /// executable (`sealing` set), any write without the key. A store never sealed (made before schema 6) is
    /// checked as `audit verify` checks its chain, and sealed at this transaction's COMMIT.
    ///
    /// `read`: the rows of `PostgresSeal.stateQuery` and `sealQuery`, when the caller read them in the round trip
    /// of the head lock (after it).
    ///
    /// `witnessRead`: the record this machine's witness saw and the hash the chain holds for it (nil: none),
    /// read in that round trip too.
    func checkSealBeforeWriting(
        read: (state: [String?]?, seal: [String?]?)? = nil, witnessRead: ((sequence: Int64, hash: String), String?)? = nil
    ) throws {
        var label: String { Self.redacted(conninfo) }
        let (now, early) = try read.map { PostgresSeal.current(row: $0.state) } ?? PostgresSeal.current(connection)
        let (sealed, problem) =
            try read.map { PostgresSeal.check(sealRow: $0.seal, now: now, key: sealing?.key) }
            ?? PostgresSeal.check(connection, now: now, key: sealing?.key)
        var found = early ?? problem
        let witness = try witness()
        if found == nil, let witness {
            found = try witnessRead.map { witness.check(seen: $0.0, found: $0.1) } ?? witness.check(connection)
            if found == nil, !sealed, try witnessRead != nil || witness.read() != nil {
                found = PostgresSealProblem(
                    "seal", "missing (store_seal deleted?): this machine's witness \(witness.path) saw the store sealed"
                )
            }
        }
        // Only a write that will seal the store checks its whole chain first (once: from then on it is sealed).
        if found == nil, !sealed, sealing?.key != nil {
            do {
                _ = try Self.check(connection)
            } catch StoreError.corrupt(let why) {
                found = PostgresSealProblem("audit log", why)
            }
        }
        if let found {
            throw StoreError.corrupt(
                "\(label) fails verification, so nothing is written: \(found) (see 'rollout audit verify')")
        }
        guard let sealing else {
            if sealed {
                throw StoreError.unavailable(
                    "\(label) is sealed: writing needs the team store key (this connection has none), so nothing is written"
                )
            }
            return
        }
        guard witness != nil else {
            // A store made before schema 6 may never have recorded a key: say how to make one.
            let never = try connection.query("SELECT 1 FROM store_key_check WHERE id = 1").isEmpty && !sealed
            throw StoreError.unavailable(
                "the team store key \(sealing.keyPath) is missing: every write to a PostgreSQL store checks and renews its "
                    + "seal with it, so nothing is written (set ROLLOUT_STORE_KEY to the team's key file; docs/POSTGRES.md)"
                    + (never
                        ? "; this store never recorded one: 'rollout operator enroll' creates it on this machine" : ""))
        }
        let directory = sealing.witnessDirectory
        _ = mkdir(directory, 0o700)
        guard access(directory, W_OK) == 0 else {
            throw StoreError.unavailable(
                "cannot write the witness directory \(directory) (\(String(cString: strerror(errno)))), so nothing is written"
            )
        }
        renewsSeal = true
        checkedSeal = now
    }

    /// This machine's witness of the store (nil without a seal key).
    func witness() throws -> PostgresWitness? {
        guard let sealing, let key = sealing.key else { return nil }
        if witnessIdentity == nil { witnessIdentity = try PostgresSeal.identity(connection) }
        return PostgresWitness(directory: sealing.witnessDirectory, identity: witnessIdentity!, key: key)
    }

    /// Before COMMIT of a transaction whose seal was checked: writes the seal of the state it leaves; returns
    /// the chain head it sealed (nil when nothing was sealed).
    ///
    /// `thenCommit`: COMMIT in the same round trip as the seal's write; then a non-nil answer means committed
    /// (sequence 0 when the head could not be read back, which advances no witness).
    func renewSeal(thenCommit: Bool = false) throws -> (sequence: Int64, hash: String)? {
        guard renewsSeal, let key = sealing?.key else { return nil }
        // The witness's sync of this connection's last write ends before this one commits: on disk the witness
        // is never more than one write behind (`WitnessSync`). A failed sync leaves it behind, which is allowed
        // (the record it names is still in the chain); this write's witness is synced anew.
        try? witnessSync.waitUntilSynced()
        let state = try PostgresSeal.renew(connection, key: key, checked: checkedSeal, thenCommit: thenCommit)
        let head = (state.value("chain head") ?? "").split(separator: " ")
        guard head.count == 2, let sequence = Int64(head[0]) else { return thenCommit ? (0, "") : nil }
        return (sequence, String(head[1]))
    }

    /// After COMMIT: this machine's witness moves to the head just committed, its sync handed to `witnessSync`.
    /// A failure leaves it at the older record, still in the chain, so it is not an error.
    func advanceWitness(to head: (sequence: Int64, hash: String)) {
        try? witness()?.advance(sequence: head.sequence, hash: head.hash, sync: witnessSync)
    }

    /// What `verifySeal` found intact.
    public struct SealReport: Sendable, Equatable {
        public var sealedTables: [String]
        public var headSequence: Int64
        public var headHash: String
        /// This machine's witness file, which now records the head.
        public var witnessPath: String
    }

    /// `rollout audit verify`'s check of the seal and this machine's witness (after `verify`, which checks the
    /// chain): throws a `PostgresSealProblem` naming the first thing that differs; then advances the witness.
    /// Reads only, in one read-only snapshot; needs the key (the HMAC cannot be checked without it).
    public func verifySeal() throws -> SealReport {
        let (state, mine): (PostgresSeal.State, PostgresWitness?) = try reading {
            try connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            defer { try? connection.execute("COMMIT") }
            let (now, early) = try PostgresSeal.current(connection)
            if let early { throw early }
            let (sealed, problem) = try PostgresSeal.check(connection, now: now, key: sealing?.key)
            if let problem { throw problem }
            let witness = try witness()
            if let problem = try witness?.check(connection) { throw problem }
            guard sealed else {
                throw PostgresSealProblem(
                    "seal",
                    "missing: store_seal was deleted, or the store was made before schema 6 and never written since "
                        + "(the next write with the team store key checks the chain and seals it)")
            }
            guard witness != nil else {
                throw PostgresSealProblem(
                    "seal",
                    "cannot be checked: the team store key \(sealing?.keyPath ?? "(none)") is missing (set ROLLOUT_STORE_KEY; docs/POSTGRES.md)"
                )
            }
            return (now, witness)
        }
        let head = (state.value("chain head") ?? "").split(separator: " ")
        let sequence = head.first.flatMap { Int64($0) } ?? 0
        let hash = head.count == 2 ? String(head[1]) : AuditChain.genesis
        try mine?.advance(sequence: sequence, hash: hash)
        return SealReport(
            sealedTables: PostgresSeal.sealedTables, headSequence: sequence, headHash: hash,
            witnessPath: mine?.path ?? "")
    }
}
