import Telemetry

/// The guardrail settings of a store (`guardrail_settings`: one row per key that was ever set).
public enum GuardrailSettingsTable {
    public static func createSchema(in db: SQLiteDatabase) throws {
        try db.execute("CREATE TABLE IF NOT EXISTS guardrail_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    }

    /// The stored settings; defaults for keys never set (and for a store that has none: nothing is created).
    public static func load(from db: SQLiteDatabase) throws -> GuardrailSettings {
        var settings = GuardrailSettings()
        guard try db.hasTable("guardrail_settings") else { return settings }
        for row in try db.query("SELECT key, value FROM guardrail_settings ORDER BY key") {
            guard let k = row[0].string, let v = row[1].string else { continue }
            do {
                try settings.set(k, v)
            } catch {
                throw StoredSettingError(description: "the guardrail setting \(k) in \(db.path) is unreadable: \(error)")
            }
        }
        return settings
    }

    /// Stores one validated setting (callers run this through the write policies first).
    public static func save(_ key: String, _ value: String, in db: SQLiteDatabase) throws {
        var check = GuardrailSettings()
        try check.set(key, value)
        try createSchema(in: db)
        try db.run("INSERT OR REPLACE INTO guardrail_settings (key, value) VALUES (?, ?)", [.text(key), .text(value)])
    }

    public struct StoredSettingError: Error, CustomStringConvertible {
        public var description: String
    }
}
