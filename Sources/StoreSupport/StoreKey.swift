import Crypto
import Glibc
import Platform
import Rollout

/// The store's secret key: 32 random bytes in a file beside the store (`<store>.key`, mode 0600), never in the
/// store file itself.
///
/// It encrypts the step-up secrets and the App Check private keys (token signing keys, the demo authority's
/// keys) at rest (AES-256-GCM, `seal(_:role:)`) and keys the seal (HMAC-SHA-256), so that a copy of the store file
/// alone reveals no secret, and a consistent rewrite of the tables needs the key as well. A team that
/// shares a store shares this file the way it shares any credential (see README, "Store files").
public struct StoreKey: Sendable {
    public let bytes: [UInt8]
    /// Where it was read from.
    public let path: String

    /// A key of these bytes (a throwaway one for the reference schema; real keys come from `load` and `create`).
    package init(bytes: [UInt8], path: String) {
        self.bytes = bytes
        self.path = path
    }

    /// `<store>.key`.
    public static func path(forStore store: String) -> String { store + ".key" }

    package static let header = "rollout-store-key-v1 "

    /// The key at `path`; nil when there is no such file; an error naming the file when it is unreadable,
    /// malformed, or readable by others.
    public static func load(_ path: String) throws -> StoreKey? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        guard st.st_mode & 0o077 == 0 else {
            throw StoreError.unavailable("the store key \(path) is readable by others (chmod 600 \(path))")
        }
        guard let text = SmallFile.text(path), text.hasPrefix(header),
            let bytes = Hex.decode(
                text.dropFirst(header.count).trimmingWhitespace()),
            bytes.count == AESGCM.keySize
        else { throw StoreError.unavailable("the store key \(path) is not a rollout store key") }
        return StoreKey(bytes: bytes, path: path)
    }

    /// Creates a new key file at `path` (mode 0600, never overwriting one).
    ///
    /// The key is written whole to a temporary file of its own and then linked to `path` (`link(2)` fails when
    /// `path` exists), so a process killed while creating it leaves no key file or a complete one, never a torn
    /// one that no later `init` could get past.
    public static func create(_ path: String) throws -> StoreKey {
        let bytes = SecureRandom.bytes(AESGCM.keySize)
        let temporary = path + ".tmp-\(getpid())-\(Hex.encode(SecureRandom.bytes(6)))"
        let fd = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw StoreError.unavailable("cannot create the store key \(path): \(String(cString: strerror(errno)))")
        }
        defer { unlink(temporary) }
        let text = Array((header + Hex.encode(bytes) + "\n").utf8)
        let written = write(fd, text, text.count) == text.count && fsync(fd) == 0
        close(fd)
        guard written else {
            throw StoreError.unavailable("cannot write the store key \(path): \(String(cString: strerror(errno)))")
        }
        guard link(temporary, path) == 0 else {
            throw StoreError.unavailable("cannot create the store key \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(of: path)
        return StoreKey(bytes: bytes, path: path)
    }

    /// Makes a new directory entry beside `path` durable (best effort: a failure leaves it to the next sync).
    private static func syncDirectory(of path: String) {
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { String(path.utf8[..<$0]) ?? "." } ?? "."
        let fd = open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }

    /// Encrypts a step-up secret for the row of `owner` (the owner is bound as associated data, so a secret
    /// moved to another operator's row does not open).
    public func sealSecret(_ secret: [UInt8], owner: String) -> [UInt8] {
        seal(secret, role: "stepup secret \(owner)")
    }

    /// Decrypts what `sealSecret` made.
    public func openSecret(_ box: [UInt8], owner: String) throws -> [UInt8] {
        try unseal(box, role: "stepup secret \(owner)", what: "the step-up secret of \(owner)")
    }

    /// Encrypts `secret` (AES-256-GCM) with its `role` bound as associated data: which secret of which row
    /// (`stepup secret <operator>`, `appcheck-signing-key:<kid>`, `demo-ca:root`), so that a box moved to
    /// another row or column does not open.
    public func seal(_ secret: [UInt8], role: String) -> [UInt8] {
        StoreKey.secretMagic + AESGCM.seal(secret, key: bytes, associatedData: Array(role.utf8))
    }

    /// Decrypts what `seal(_:role:)` made for `role`; `what` names the secret in errors.
    ///
    /// A box that is not encrypted (plaintext written outside rollout, or left by a version before encryption)
    /// is refused, never returned as it is.
    public func unseal(_ box: [UInt8], role: String, what: String) throws -> [UInt8] {
        guard StoreKey.isSealedSecret(box) else {
            throw StoreError.corrupt("\(what) is not encrypted (written outside rollout?)")
        }
        do {
            return try AESGCM.open(
                Array(box.dropFirst(StoreKey.secretMagic.count)), key: bytes, associatedData: Array(role.utf8))
        } catch {
            throw StoreError.corrupt("\(what) does not decrypt with \(path): \(error) (another store's key?)")
        }
    }

    package static let secretMagic = Array("RSE1".utf8)
    package static func isSealedSecret(_ bytes: [UInt8]) -> Bool { bytes.starts(with: secretMagic) }

    /// HMAC-SHA-256 of `message` under this key, hex.
    package func mac(_ message: String) -> String {
        Hex.encode(HMAC.authenticate(.sha256, key: bytes, message: Array(message.utf8)))
    }
}

/// A small file read whole as UTF-8 text with read(2), without Foundation's FileManager and `String(data:)`
/// (the key and the witness are read on every write; Foundation's path costs a short process a measurable share).
package enum SmallFile {
    /// The text of `path`; nil when it cannot be opened or read, is over `limit` bytes, or is not UTF-8.
    package static func text(_ path: String, limit: Int = 1 << 16) -> String? {
        bytes(path, limit: limit).flatMap { String(utf8Bytes: $0) }
    }

    /// The bytes of `path`; nil when it cannot be opened or read, or is over `limit` bytes.
    package static func bytes(_ path: String, limit: Int = 1 << 16) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
            guard bytes.count <= limit else { return nil }
        }
        return bytes
    }
}
