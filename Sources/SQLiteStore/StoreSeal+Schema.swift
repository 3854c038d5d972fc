import Crypto
import Glibc
import Platform
import Rollout
import StoreSupport

// The seal's cover of the schema: every object of `sqlite_schema` as an entry of the sealed state.
extension StoreSeal {
    /// The schema's entries (`schema:<type>:<name>` = digest of the object's table and SQL) and their
    /// `key=digest` text in sorted order, made once per read of the schema: every write builds the state's text
    /// several times.
    struct SchemaEntries: Equatable {
        let entries: [String: String]
        let text: String

        init(_ entries: [String: String] = [:]) {
            self.entries = entries
            text = entries.keys.sorted().map { "\($0)=\(entries[$0]!)" }.joinedText(" ")
        }

        static func == (a: SchemaEntries, b: SchemaEntries) -> Bool { a.entries == b.entries }
    }

    /// One entry per object of the main schema (`sqlite_schema`: tables, indexes, views, triggers, SQLite's own
    /// automatic indexes): the key `schema:<type>:<name>` (the name escaped, see `escape`) and the SHA-256 of the
    /// object's table and full SQL text.
    ///
    /// The full text covers everything SQLite runs on a write besides rollout's own statements: a trigger's body,
    /// a view's INSTEAD OF trigger, a CHECK constraint, a DEFAULT expression, a generated column, an index on an
    /// expression, as well as edits made through `PRAGMA writable_schema` (SQLite compiles the schema from this
    /// text when it opens the file). Temporary triggers live in a connection's own `temp` schema, which no other
    /// process can reach.
    static func schemaEntries(_ db: SQLiteDatabase) throws -> [String: String] {
        var out: [String: String] = [:]
        let rows = try db.prepare("SELECT type, name, tbl_name, sql FROM main.sqlite_schema")
        defer { rows.reset() }
        // Hashed from the column bytes: this runs at the start of every write.
        var bytes: [UInt8] = []
        while try rows.step() {
            bytes.removeAll(keepingCapacity: true)
            rows.withBytes(2) { bytes += $0 }
            bytes.append(UInt8(ascii: "\n"))
            if rows.isNull(3) {
                bytes.append(UInt8(ascii: "n"))
            } else {
                bytes.append(UInt8(ascii: "t"))
                rows.withBytes(3) { bytes += $0 }
            }
            out[schemaKey(type: rows.text(0), name: rows.text(1))] = SHA256.hex(bytes)
        }
        return out
    }

    /// `schema:<type>:<name>`, with every byte of the name outside `[A-Za-z0-9_.-]` written `%XX`, so that a
    /// name chosen by someone else cannot break the `tables` column's `key=value key=value` syntax.
    static func schemaKey(type: String, name: String) -> String {
        "schema:\(escape(type)):\(escape(name))"
    }

    static func escape(_ text: String) -> String {
        if text.utf8.allSatisfy(isPlain) { return text }
        var out = ""
        for b in text.utf8 {
            if isPlain(b) {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                out += "%" + Hex.encode([b]).uppercased()
            }
        }
        return out
    }

    private static func isPlain(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"):
            true
        default: false
        }
    }

    /// What `escape` wrote, back (a malformed escape is kept as it is).
    static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var rest = Array(text.utf8)[...]
        while let b = rest.first {
            if b == UInt8(ascii: "%"), rest.count >= 3, let hi = Hex.value(of: rest[rest.startIndex + 1]),
                let lo = Hex.value(of: rest[rest.startIndex + 2])
            {
                bytes.append(UInt8(hi) << 4 | UInt8(lo))
                rest = rest.dropFirst(3)
            } else {
                bytes.append(b)
                rest = rest.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The object a schema key names, as a person reads it (`trigger t`, `index x on table y`).
    static func describe(schemaKey key: String, table: String? = nil) -> String {
        let parts = key.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3 else { return key }
        let name = unescape(parts[2])
        let on = table.flatMap { $0 == name ? nil : " on table \($0)" } ?? ""
        return "\(parts[1]) \(name)\(on)"
    }

    /// Whether the file's seal covers the schema (it was made by schema 8 or later).
    static func coversSchema(_ db: SQLiteDatabase) throws -> Bool {
        guard try db.hasTable("store_seal"),
            let tables = try db.query("SELECT tables FROM store_seal WHERE id = 1").first?.first?.string
        else { return false }
        return tables.contains(" schema:") || tables.hasPrefix("schema:")
    }

    /// The first difference between the sealed schema and the file's, or nil.
    static func schemaProblem(_ db: SQLiteDatabase, sealed: [String: String], now: [String: String]) throws
        -> ConfigIntegrityProblem?
    {
        let sealedSchema = sealed.filter { $0.key.hasPrefix("schema:") }
        guard sealedSchema != now else { return nil }
        var tables: [String: String] = [:]
        for row in try db.query("SELECT type, name, tbl_name FROM main.sqlite_schema") {
            if let type = row[0].string, let name = row[1].string {
                tables[schemaKey(type: type, name: name)] = row[2].string
            }
        }
        for key in now.keys.sorted() where sealedSchema[key] == nil {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key, table: tables[key]))",
                "not part of the schema rollout sealed: added outside rollout (a trigger, view, index or table runs or "
                    + "changes what rollout's own writes do)")
        }
        for key in sealedSchema.keys.sorted() where now[key] == nil {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key))", "in the sealed schema but missing: dropped outside rollout")
        }
        for key in now.keys.sorted() where sealedSchema[key] != now[key] {
            return ConfigIntegrityProblem(
                "schema: \(describe(schemaKey: key, table: tables[key]))",
                "its definition differs from the sealed schema: changed outside rollout")
        }
        return nil
    }
}
