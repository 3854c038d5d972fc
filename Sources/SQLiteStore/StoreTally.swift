import Crypto
import Glibc
import Platform
import Rollout
import StoreSupport

/// The tally of the per-request tables (App Check challenges, key counters, consumed tokens): for each table
/// the number of rows and the sum, modulo 2^256, of HMAC-SHA-256 under the store key of every row.
///
/// A sum of keyed row hashes is a multiset digest that a write updates in O(1) per row it changes (subtract the
/// old row's hash, add the new one's), in the same transaction, so that a request costs the same with a
/// thousand rows or ten million; the seal binds the result (HMAC) and the witness records it. Without the key
/// no one can compute a row's hash, so an edited, inserted or deleted row leaves the sum off by an amount no
/// later write can cancel (each write moves stored and true sums alike): `rollout audit verify`, which
/// recomputes every sum (O(rows)), names the table for ever after. Per-write checks cannot recompute a sum, so
/// unlike the small sealed tables a write does not refuse such a store; `audit verify` names it.
public enum StoreTally {
    public static let tables = ["appcheck_challenges", "appcheck_consumed_tokens", "appcheck_keys"]

    /// A table's tally: its row count and the sum of its rows' keyed hashes (four 64-bit limbs, little end first).
    public struct Value: Equatable, Sendable {
        var rows: Int64 = 0
        var sum: [UInt64] = [0, 0, 0, 0]

        mutating func add(_ h: [UInt64]) {
            addLimbs(h)
            rows += 1
        }

        mutating func subtract(_ h: [UInt64]) {
            var borrow: UInt64 = 0
            for i in 0..<4 {
                let (a, o1) = sum[i].subtractingReportingOverflow(h[i])
                let (b, o2) = a.subtractingReportingOverflow(borrow)
                sum[i] = b
                borrow = (o1 ? 1 : 0) + (o2 ? 1 : 0)
            }
            rows -= 1
        }

        /// Adds another tally (a transaction's delta: a negative count and a sum modulo 2^256).
        mutating func add(_ other: Value) {
            addLimbs(other.sum)
            rows += other.rows
        }

        private mutating func addLimbs(_ h: [UInt64]) {
            var carry: UInt64 = 0
            for i in 0..<4 {
                let (a, o1) = sum[i].addingReportingOverflow(h[i])
                let (b, o2) = a.addingReportingOverflow(carry)
                sum[i] = b
                carry = (o1 ? 1 : 0) + (o2 ? 1 : 0)
            }
        }

        /// `rows:` and the sum as 64 hex digits, most significant limb first.
        var text: String {
            let bigEndian = (sum[3].bigEndian, sum[2].bigEndian, sum[1].bigEndian, sum[0].bigEndian)
            return "\(rows):" + withUnsafeBytes(of: bigEndian) { Hex.encode($0) }
        }
    }

    /// The keyed hash of one row of `table`, as limbs.
    static func hash(_ table: String, _ row: [SQLiteValue], key: StoreKey) -> [UInt64] {
        let mac = HMAC.authenticate(
            .sha256, key: key.bytes, message: Array("tally \(table)\n\(StoreSeal.encode(row))".utf8))
        return (0..<4).map { i in mac[(i * 8)..<(i * 8 + 8)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
    }

    static func text(_ tally: [String: Value]) -> String {
        tables.map { "\($0)=\((tally[$0] ?? Value()).text)" }.joinedText(",")
    }

    /// What `text` wrote; empty text is a store sealed before tallies (all zero); nil when malformed.
    static func parse(_ text: String) -> [String: Value]? {
        guard !text.isEmpty else { return [:] }
        // Over the bytes: `table=rows:hex,...`, read at the start of every write.
        let bytes = Array(text.utf8)
        var out: [String: Value] = [:]
        var start = 0
        while start <= bytes.count {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: ",")) ?? bytes.count
            let part = bytes[start..<end]
            guard let eq = part.firstIndex(of: UInt8(ascii: "=")), eq > part.startIndex,
                let colon = part[(eq + 1)...].firstIndex(of: UInt8(ascii: ":")),
                let table = String(validating: part[part.startIndex..<eq], as: UTF8.self),
                let rowsText = String(validating: part[(eq + 1)..<colon], as: UTF8.self), let rows = Int64(rowsText)
            else { return nil }
            let hex = part[(colon + 1)...]
            guard hex.count == 64 else { return nil }
            var limbs: [UInt64] = []
            for i in (0..<4).reversed() {
                var v: UInt64 = 0
                for b in hex.dropFirst(i * 16).prefix(16) {
                    guard let d = Hex.value(of: b) else { return nil }
                    v = v << 4 | UInt64(d)
                }
                limbs.append(v)
            }
            out[table] = Value(rows: rows, sum: limbs)
            start = end + 1
        }
        return out
    }

    static func adding(_ delta: [String: Value], to base: [String: Value]) -> [String: Value] {
        var out = base
        for (table, d) in delta {
            var v = out[table] ?? Value()
            v.add(d)
            out[table] = v
        }
        return out
    }

    /// Every tallied table's tally recomputed from its rows (`audit verify`, the migration that starts them).
    static func recompute(_ db: SQLiteDatabase, key: StoreKey) throws -> [String: Value] {
        var out: [String: Value] = [:]
        for table in tables {
            var v = Value()
            let s = try db.prepare("SELECT * FROM \(table)")
            defer { s.reset() }
            while try s.step() { v.add(hash(table, s.row(), key: key)) }
            out[table] = v
        }
        return out
    }

    /// The first tallied table whose rows differ from its sealed tally, or nil.
    static func problem(_ db: SQLiteDatabase, key: StoreKey) throws -> ConfigIntegrityProblem? {
        let sealed = try StoreSeal.sealedTally(db)
        let found = try recompute(db, key: key)
        for table in tables where (sealed[table] ?? Value()) != found[table] {
            return ConfigIntegrityProblem(
                "table \(table)",
                "its rows differ from its sealed tally (\((sealed[table] ?? Value()).rows) rows sealed, "
                    + "\(found[table]!.rows) found: edited, inserted or deleted outside rollout)")
        }
        return nil
    }
}

extension SQLiteDatabase {
    /// Runs `body` (a change to rows of a tallied `table` that `whereClause` selects) and moves the table's
    /// tally from the rows before to the rows after. Without a store key (a bare connection) there is no seal
    /// to keep, and it just runs `body`.
    func tallied<T>(
        _ table: String, where whereClause: String, _ parameters: [SQLiteValue], _ body: () throws -> T
    ) throws -> T {
        guard let key = storeKey else { return try body() }
        let sql = "SELECT * FROM \(table) WHERE \(whereClause)"
        let before = try query(sql, parameters)
        let value = try body()
        let after = try query(sql, parameters)
        guard before != after else { return value }
        var d = tallyDelta[table] ?? StoreTally.Value()
        for row in before { d.subtract(StoreTally.hash(table, row, key: key)) }
        for row in after { d.add(StoreTally.hash(table, row, key: key)) }
        tallyDelta[table] = d
        return value
    }

    /// Moves `table`'s tally from rows `before` to rows `after` that the caller knows exactly (each as
    /// `SELECT *` returns it: every column, in order, with its stored type), sparing `tallied`'s two reads.
    func tallyChange(_ table: String, from before: [[SQLiteValue]], to after: [[SQLiteValue]]) {
        guard let key = storeKey, before != after else { return }
        var d = tallyDelta[table] ?? StoreTally.Value()
        for row in before { d.subtract(StoreTally.hash(table, row, key: key)) }
        for row in after { d.add(StoreTally.hash(table, row, key: key)) }
        tallyDelta[table] = d
    }
}
