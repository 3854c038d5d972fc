import Foundation

extension TestSupport {
    /// What "the store is unchanged" means, taken from outside the program: the SHA-256 (`sha256sum`) of the store
    /// file after its WAL is checkpointed by the `sqlite3` CLI, and of the key and witness files beside it.
    public struct StoreFingerprint: Equatable, Sendable, CustomStringConvertible {
        /// The store file's SHA-256 (WAL checkpointed), or `missing`.
        public var store: String
        public var key: String
        public var witness: String
        /// Names of the files in the store's directory (nothing new may appear).
        public var files: [String]

        public var description: String {
            "store \(store.prefix(16))…, key \(key.prefix(8))…, witness \(witness.prefix(8))…"
        }

        /// Fingerprints the store at `path`.
        public static func of(_ path: String) throws -> StoreFingerprint {
            if FileManager.default.fileExists(atPath: path) {
                let r = try TestSupport.run("/usr/bin/sqlite3", [path, "PRAGMA wal_checkpoint(TRUNCATE);"])
                guard r.status == 0 else { throw Failure("sqlite3 checkpoint of \(path) failed: \(r.stderr)") }
            }
            let directory = (path as NSString).deletingLastPathComponent
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
                .filter { !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }.sorted()
            return StoreFingerprint(
                store: try sha256(path), key: try sha256(path + ".key"), witness: try sha256(path + ".witness"),
                files: files)
        }

        public static func sha256(_ path: String) throws -> String {
            guard FileManager.default.fileExists(atPath: path) else { return "missing" }
            let r = try TestSupport.run("/usr/bin/sha256sum", [path])
            guard r.status == 0, let hash = r.stdout.split(separator: " ").first else {
                throw Failure("sha256sum \(path) failed: \(r.stderr)")
            }
            return String(hash)
        }
    }
}
