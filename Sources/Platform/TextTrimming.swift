/// Trimming without Foundation: `trimmingCharacters(in:)` bridges through NSString, and its first call in a
/// process costs about 0.7 million instructions (a conformance scan and NSString's machinery), a thirtieth of a
/// whole `rollout nudge`. The sets are Foundation's, so the results are the same.
extension StringProtocol {
    /// Without leading and trailing spaces and tabs (Foundation's `.whitespaces`).
    @inlinable public func trimmingSpaces() -> String { trimmingScalars(TextSets.isSpace) }

    /// Without leading and trailing white space and line ends (Foundation's `.whitespacesAndNewlines`).
    @inlinable public func trimmingWhitespace() -> String { trimmingScalars(TextSets.isWhitespace) }

    /// True when the text is empty or only spaces and tabs.
    @inlinable public var isBlank: Bool { unicodeScalars.allSatisfy(TextSets.isSpace) }

    // Inlinable, as the three above: called unspecialised from another module, a generic walk over a
    // `StringProtocol`'s scalars looks up its associated types' conformances at run time, about a quarter of a
    // million instructions each the first time in a process.
    @inlinable public func trimmingScalars(_ drop: (Unicode.Scalar) -> Bool) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !drop($0) }), let last = scalars.lastIndex(where: { !drop($0) })
        else { return "" }
        // A slice of `self` (a `Substring`: scalar-aligned bounds are kept exactly), not a scalar view rebuilt with
        // `append(contentsOf:)`, which is generic in the standard library and costs its run-time lookups.
        return String(self[first..<scalars.index(after: last)])
    }
}

/// Foundation's sets on Linux: `.whitespaces` is category Zs, the tab and U+200B (zero width space, which
/// swift-corelibs-foundation keeps from older Unicode); `.whitespacesAndNewlines` adds U+000A–U+000D, U+0085,
/// U+2028 and U+2029.
@usableFromInline enum TextSets {
    @usableFromInline static func isSpace(_ s: Unicode.Scalar) -> Bool {
        // ASCII first: the first Unicode property lookup of a process costs about half a million instructions.
        if s.isASCII { return s == " " || s == "\t" }
        return s == "\u{200B}" || s.properties.generalCategory == .spaceSeparator
    }

    @usableFromInline static func isWhitespace(_ s: Unicode.Scalar) -> Bool {
        isSpace(s) || (s.value >= 0x0A && s.value <= 0x0D) || s == "\u{85}" || s == "\u{2028}" || s == "\u{2029}"
    }
}

extension String {
    /// The lines of a text file as people write them: split at LF and at CRLF (one `Character` in Swift, which a
    /// split at "\n" never finds), after a UTF-8 byte order mark at the start, if any, is dropped. The last line is
    /// empty when the text ends with a line end; empty lines are kept, so a line's index + 1 is its number.
    public func textFileLines() -> [Substring] {
        var body = self[...]
        if body.unicodeScalars.first == "\u{FEFF}" { body = body.dropFirst() }
        return body.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
    }

    /// Exactly `width` characters: cut, or filled with spaces on the right (Foundation's
    /// `padding(toLength:withPad:" ",startingAt:0)`).
    public func padded(to width: Int) -> String {
        let n = count
        if n >= width { return String(prefix(width)) }
        return self + String(repeating: " ", count: width - n)
    }
}

extension StringProtocol {
    /// The text in single quotes as an error message quotes it: whole when short, else its first `limit`
    /// characters and its size (`'aaaa…' (10485760 bytes)`), so that a bad value of megabytes is never echoed whole;
    /// what a terminal would act on shown as `Sanitiser` escapes (`'\u001b[2J'`), since the text came from outside.
    public func quotedExcerpt(_ limit: Int = 60) -> String {
        // Bytes first: a short text costs no character walk.
        guard utf8.count > limit, count > limit else { return "'\(Sanitiser.escape(self))'" }
        return "'\(Sanitiser.escape(prefix(limit)))…' (\(utf8.count) bytes)"
    }
}
