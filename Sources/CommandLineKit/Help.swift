extension Command {
    /// The help text of this command, reached through `path`, wrapped to `width` columns.
    ///
    /// Global options are the options of the ancestors; they are listed after the command's own.
    public func helpText(path: [String], globalOptions: [Option] = [], width: Int = 100) -> String {
        var out: [String] = []
        let full = path.joined(separator: " ")
        out.append("\(full): \(summary)")
        out.append("")
        var usage = "USAGE: \(full)"
        if !subcommands.isEmpty { usage += " <command>" }
        if !options.isEmpty || !globalOptions.isEmpty { usage += " [options]" }
        for p in positionals {
            let n = p.variadic ? "\(p.name)..." : p.name
            usage += p.optional ? " [\(n)]" : " \(n)"
        }
        out.append(usage)
        if !discussion.isEmpty {
            out.append("")
            out += Command.wrap(discussion, width: width, indent: "")
        }
        if !subcommands.isEmpty {
            out.append("")
            out.append("COMMANDS:")
            let w = min(18, (subcommands.map(\.name.count).max() ?? 0) + 2)
            for s in subcommands { out += Command.row(s.name, s.summary, nameWidth: w, width: width) }
        }
        if !positionals.isEmpty {
            out.append("")
            out.append("ARGUMENTS:")
            let w = min(18, (positionals.map(\.name.count).max() ?? 0) + 2)
            for p in positionals { out += Command.row(p.name, p.help, nameWidth: w, width: width) }
        }
        func optionRows(_ opts: [Option]) -> [String] {
            let labels = opts.map { o in o.names.joined(separator: ", ") + (o.valueName.map { " \($0)" } ?? "") }
            let w = min(28, (labels.map(\.count).max() ?? 0) + 2)
            return zip(labels, opts).flatMap { Command.row($0, $1.help, nameWidth: w, width: width) }
        }
        if !options.isEmpty {
            out.append("")
            out.append("OPTIONS:")
            out += optionRows(options)
        }
        if !globalOptions.isEmpty {
            out.append("")
            out.append("GLOBAL OPTIONS:")
            out += optionRows(globalOptions)
        }
        out.append("")
        out.append("  -h, --help  Show this help.")
        if !examples.isEmpty {
            out.append("")
            out.append("EXAMPLES:")
            for e in examples { out.append("  \(e)") }
        }
        if !subcommands.isEmpty {
            out.append("")
            out.append("See '\(full) <command> --help' for the options of each command.")
        }
        return out.joined(separator: "\n") + "\n"
    }

    static func row(_ name: String, _ text: String, nameWidth: Int, width: Int) -> [String] {
        let indent = String(repeating: " ", count: nameWidth + 2)
        let lines = wrap(text, width: width, indent: indent)
        let head = "  " + name
        if head.count < indent.count, let first = lines.first {
            return [head + String(repeating: " ", count: indent.count - head.count) + first.dropFirst(indent.count)]
                + lines.dropFirst()
        }
        return [head] + lines
    }

    static func wrap(_ text: String, width: Int, indent: String) -> [String] {
        // Splits on the bytes of "\n" and " " (never inside a multi-byte character) and counts an ASCII word's
        // columns as its bytes: splitting by `Character` and counting graphemes were most of the instructions of
        // `rollout --help`. Widths are counted as the text is built.
        let indentWidth = indent.count
        var result: [String] = []
        for paragraph in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var line = indent
            var lineWidth = indentWidth
            for bytes in paragraph.split(separator: UInt8(ascii: " ")) {
                let word = Substring(bytes)
                let wordWidth = bytes.allSatisfy { $0 < 0x80 } ? bytes.count : word.count
                if lineWidth > indentWidth, lineWidth + 1 + wordWidth > width {
                    result.append(line)
                    line = indent
                    lineWidth = indentWidth
                }
                if lineWidth > indentWidth {
                    line += " "
                    lineWidth += 1
                }
                line += word
                lineWidth += wordWidth
            }
            result.append(line)
        }
        return result
    }
}

/// Text for a person on standard output, wrapped at word boundaries to the terminal's width.
///
/// A line longer than the terminal is broken by the terminal itself at its last column, in the middle of a word
/// (`cras h-free`, `-0 .245` in `rollout status` at 80 columns). When standard output is a terminal, `lines`
/// breaks it between words instead, continuing under a hanging indent; in a pipe or a file nothing changes, so
/// scripts read one record per line.
public enum WrappedOutput {
    /// The width of standard output's terminal, nil when it is not a terminal.
    public static var width: Int? { ProgressReporter.terminalWidth(1) }

    /// `text` as the lines to print within `width` columns, continuation lines indented by `indent` columns; a
    /// word longer than a line stays whole.
    public static func lines(_ text: String, indent: Int, width: Int?) -> [String] {
        guard let width, width >= indent + 20, text.count > width else { return [text] }
        let lead = text.prefix { $0 == " " }.count
        var out: [String] = []
        var line = String(repeating: " ", count: lead)
        var used = lead
        var fresh = true
        for word in text.dropFirst(lead).split(separator: " ", omittingEmptySubsequences: false) {
            let w = word.count
            if !fresh, used + 1 + w > width {
                out.append(line)
                line = String(repeating: " ", count: indent)
                used = indent
                fresh = true
            }
            if !fresh {
                line += " "
                used += 1
            }
            line += word
            used += w
            fresh = false
        }
        out.append(line)
        return out
    }
}
