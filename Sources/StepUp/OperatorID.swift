import Glibc
import Platform
import Rollout

/// Who is acting: an operator's name as given by `--operator`, `$ROLLOUT_OPERATOR` or `user@host`.
///
/// It becomes the account label in the authenticator app (`rollout:ana@laptop`), so it is printable text of
/// at most 128 characters without control characters or a colon (the label's issuer separator), and without
/// leading or trailing spaces (which would make two operators look alike in a list).
public struct OperatorID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(_ text: String) throws(OperatorIDError) {
        guard !text.isEmpty else { throw OperatorIDError("an operator id cannot be empty") }
        guard text.count <= 128 else { throw OperatorIDError("an operator id has at most 128 characters") }
        // Control characters, and the invisible ones that make an id look like another in the audit log: bidi
        // overrides and isolates, zero-width joiners, line and paragraph separators.
        let invisible: Set<Unicode.GeneralCategory> = [.control, .format, .lineSeparator, .paragraphSeparator]
        guard !text.unicodeScalars.contains(where: { invisible.contains($0.properties.generalCategory) || $0 == ":" }) else {
            throw OperatorIDError(
                "operator id '\(text.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined())' "
                    + "may not contain ':', control characters or invisible formatting characters")
        }
        guard text.trimmingSpaces() == text else {
            throw OperatorIDError("operator id '\(text)' has leading or trailing spaces")
        }
        rawValue = text
    }

    public var description: String { rawValue }
    public static func < (a: OperatorID, b: OperatorID) -> Bool { a.rawValue < b.rawValue }
}

/// An operator id that cannot be used, with the reason.
public struct OperatorIDError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
