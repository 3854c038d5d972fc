import Foundation
import Rollout
import SQLiteStore
import StoreSupport
import TestSupport
import Testing

/// The store key file appears whole or not at all (written to a temporary file of its own, then linked).
@Suite struct StoreKeyFileTests {
    func names(in directory: TemporaryDirectory) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted()
    }

    @Test func aNewKeyIsCompleteAndLeavesNothingElse() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.db.key").path
        let key = try StoreKey.create(path)
        #expect(try names(in: directory) == ["store.db.key"])
        let loaded = try #require(try StoreKey.load(path))
        #expect(loaded.sealSecret([1, 2, 3], owner: "ana").count > 3)
        #expect(try loaded.openSecret(key.sealSecret([1, 2, 3], owner: "ana"), owner: "ana") == [1, 2, 3])
        var st = stat()
        #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
    }

    @Test func anExistingKeyIsNeverReplaced() throws {
        let directory = try TemporaryDirectory()
        let path = directory.url.appendingPathComponent("store.db.key").path
        _ = try StoreKey.create(path)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(throws: StoreError.self) { _ = try StoreKey.create(path) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(try names(in: directory) == ["store.db.key"])
    }
}
