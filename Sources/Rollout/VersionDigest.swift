import Crypto
import JSON
import RemoteConfig

/// The digest a version's audit record pins (`version sha256:<hex>` at the end of its detail): SHA-256 over every
/// column a publish writes, in one canonical JSON form. One definition for every store that keeps versions (the
/// SQLite file and the PostgreSQL team store), so a version copied between them keeps a record that still pins it.
public enum VersionDigest {
    /// The label before the digest in the audit record's detail.
    public static let label = "version sha256:"

    /// The hex digest of a version's row: its metadata, the template's stored form and its stored text.
    public static func hex(_ info: VersionInfo, form: RemoteConfigTemplate.Form, templateText: String) -> String {
        let canonical: JSONValue = [
            "number": .number(JSONNumber(info.number)),
            "etag": .string(info.etag),
            "time": .number(JSONNumber(info.updateTime.microseconds)),
            "user": .string(info.updateUser),
            "origin": .string(info.updateOrigin),
            "type": .string(info.updateType.rawValue),
            "description": .string(info.description),
            "rollbackSource": info.rollbackSource.map { .number(JSONNumber($0)) } ?? .null,
            "form": .string(form.rawValue),
            "template": .string(templateText),
        ]
        return SHA256.hex(Array(canonical.compactText.utf8))
    }

    /// Whether an audit record's detail pins this digest.
    public static func isPinned(_ hex: String, by detail: String) -> Bool { detail.hasSuffix(label + hex) }
}
