import Platform
/// A theme file that cannot be used, with the place to fix it.
public struct ThemeError: Error, Hashable, Sendable, CustomStringConvertible {
    public var file: String
    /// 1-based; 0 when the error concerns the whole file.
    public var line: Int
    public var message: String

    public init(file: String, line: Int, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }

    public var description: String { line > 0 ? "\(file):\(line): \(message)" : "\(file): \(message)" }
}

extension Theme {
    /// Parses a theme file; roles it does not mention keep the style they have in `base` (the default theme).
    ///
    /// The format is one `key = value` per line, `#` starts a comment:
    ///
    ///     title      = #5fafff bold        # foreground, attributes
    ///     header     = white on #005f87    # foreground on background
    ///     header.mono = reverse bold       # attributes when there is no colour
    ///
    /// Colours are `#rrggbb`, a palette index `0`–`255`, an ANSI name (`red`, `bright-blue`, ...) or `default`.
    /// Attributes are `bold`, `underline`, `reverse`, `dim`, or `plain` for none. Unknown keys, bad colours and
    /// repeated keys are errors naming the file and the line, like a schema that fails loudly.
    public static func parse(_ text: String, name: String, file: String, base: Theme = .default) throws(ThemeError)
        -> Theme
    {
        var theme = base
        theme.name = name
        var seen: [String: Int] = [:]
        var lineNumber = 0
        for rawLine in text.textFileLines() {
            lineNumber += 1
            func fail(_ message: String) -> ThemeError { ThemeError(file: file, line: lineNumber, message: message) }
            var line = Substring(rawLine)
            if let hash = commentStart(line) { line = line[..<hash] }
            let trimmed = line.trimmingSpaces
            if trimmed.isEmpty { continue }
            guard let eq = trimmed.firstIndex(of: "=") else {
                throw fail("expected 'role = colour [on colour] [attributes]', found '\(trimmed)'")
            }
            let key = String(trimmed[..<eq]).trimmingSpaces
            let value = String(trimmed[trimmed.index(after: eq)...]).trimmingSpaces
            if let previous = seen[key] { throw fail("'\(key)' is already set on line \(previous)") }
            seen[key] = lineNumber
            let isMono = key.hasSuffix(".mono")
            let roleKey = isMono ? String(key.dropLast(5)) : key
            guard let role = Role(key: roleKey) else {
                throw fail(
                    "unknown key '\(key)'; known roles: \(Role.allCases.map(\.key).joined(separator: ", "))"
                        + " (each also as ROLE.mono)")
            }
            guard !value.isEmpty else { throw fail("'\(key)' has no value") }
            let words = value.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            if isMono {
                var attributes: TextAttributes = []
                for word in words {
                    if word == "plain" { continue }
                    guard let a = TextAttributes.names.first(where: { $0.0 == word })?.1 else {
                        throw fail("'\(word)' is not an attribute; \(key) takes bold, underline, reverse, dim or plain")
                    }
                    attributes.insert(a)
                }
                theme[role].monochrome = attributes
            } else {
                var style = ThemeStyle(monochrome: theme[role].monochrome)
                var foregroundSet = false
                var i = 0
                while i < words.count {
                    let word = words[i]
                    if word == "on" {
                        guard i + 1 < words.count else { throw fail("'on' must be followed by a background colour") }
                        guard let bg = parseColour(words[i + 1]) else { throw fail(badColour(words[i + 1], key)) }
                        style.background = bg
                        i += 2
                        continue
                    }
                    if let a = TextAttributes.names.first(where: { $0.0 == word })?.1 {
                        style.attributes.insert(a)
                    } else if word == "plain" {
                        // explicit "no attributes"
                    } else if !foregroundSet, let fg = parseColour(word) {
                        style.foreground = fg
                        foregroundSet = true
                    } else if looksLikeColour(word) || !foregroundSet {
                        throw fail(badColour(word, key))
                    } else {
                        throw fail(
                            "unexpected '\(word)' in '\(key)'; write COLOUR [on COLOUR] [bold underline reverse dim]")
                    }
                    i += 1
                }
                theme[role] = style
            }
        }
        return theme
    }

    /// A colour word: `#rrggbb`, `0`–`255`, an ANSI name or `default`.
    static func parseColour(_ word: String) -> ThemeColor? {
        let w = word.lowercased()
        if w == "default" { return .terminalDefault }
        if w.hasPrefix("#") {
            let hex = Array(w.dropFirst())
            guard hex.count == 6 else { return nil }
            var values: [UInt8] = []
            for i in stride(from: 0, to: 6, by: 2) {
                guard let v = UInt8(String(hex[i...i + 1]), radix: 16) else { return nil }
                values.append(v)
            }
            return .rgb(values[0], values[1], values[2])
        }
        if let n = Int(w) { return (0...255).contains(n) ? .indexed(UInt8(n)) : nil }
        if let i = ansiNames.firstIndex(of: w) { return .indexed(UInt8(i)) }
        if w == "gray" || w == "grey" { return .indexed(8) }
        return nil
    }

    static let ansiNames = [
        "black", "red", "green", "yellow", "blue", "magenta", "cyan", "white",
        "bright-black", "bright-red", "bright-green", "bright-yellow", "bright-blue", "bright-magenta", "bright-cyan",
        "bright-white",
    ]

    private static func badColour(_ word: String, _ key: String) -> String {
        "bad colour '\(word)' for '\(key)'; use #rrggbb, 0-255, an ANSI name (red, bright-blue, ...) or default"
    }

    private static func looksLikeColour(_ word: String) -> Bool {
        word.hasPrefix("#") || word.first?.isNumber == true || word.hasPrefix("bright")
    }

    /// Where a comment starts: a `#` opening the line, or a `#` followed by a space or the end of the line.
    /// Any other `#` begins a colour, so that `#12345g` is reported as a bad colour rather than ignored.
    private static func commentStart(_ line: Substring) -> Substring.Index? {
        var index = line.startIndex
        var onlySpacesBefore = true
        while index < line.endIndex {
            let c = line[index]
            if c == "#" {
                let next = line.index(after: index)
                if onlySpacesBefore || next == line.endIndex || line[next] == " " || line[next] == "\t" { return index }
            }
            if !c.isWhitespace { onlySpacesBefore = false }
            index = line.index(after: index)
        }
        return nil
    }
}

extension StringProtocol {
    var trimmingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
