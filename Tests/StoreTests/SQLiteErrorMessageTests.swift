import Foundation
import SQLiteStore
import Testing

/// A failure of the file system under SQLite names the operating system's reason beside SQLite's words: on a full
/// disk `rollout nudge` said only "disk I/O error" (now "disk I/O error (No space left on device)").
struct SQLiteErrorMessageTests {
    @Test func aFileThatCannotBeOpenedNamesTheSystemsReason() throws {
        let missing = FileManager.default.temporaryDirectory.appendingPathComponent("no-such-dir-\(UUID().uuidString)/store.db").path
        var message = ""
        do {
            _ = try SQLiteDatabase(path: missing, create: true)
        } catch {
            message = error.message
        }
        #expect(message.hasPrefix("\(missing): unable to open database file"), "\(message)")
        #expect(message.hasSuffix(" (No such file or directory)"), "\(message)")
        #expect(!FileManager.default.fileExists(atPath: missing))
    }

    /// SQLite's own failures (not of the file system) keep SQLite's words alone.
    @Test func aConstraintFailureIsSQLitesWordsAlone() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-message-\(UUID().uuidString).db").path
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let db = try SQLiteDatabase(path: path, create: true)
        try db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY); INSERT INTO t VALUES (1)")
        var message = ""
        do {
            try db.execute("INSERT INTO t VALUES (1)")
        } catch {
            message = error.message
        }
        #expect(message == "UNIQUE constraint failed: t.x", "\(message)")
    }
}
