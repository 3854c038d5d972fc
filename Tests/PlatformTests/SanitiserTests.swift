import JSON
import Platform
import Testing

struct SanitiserTests {
    /// Issue 13: this error class retitled the terminal and cleared the screen.
    @Test func escapesTheTitleAndClearSequence() {
        let hostile = "rejected:\u{1b}]0;pwned\u{07}\u{1b}[2J"
        #expect(Sanitiser.escape(hostile) == #"rejected:\u001b]0;pwned\u0007\u001b[2J"#)
        #expect(!Sanitiser.escape(hostile).unicodeScalars.contains { $0.value < 0x20 })
    }

    @Test func escapesEveryControlAndBidiScalar() {
        var escaped: [UInt32] = []
        for v in UInt32(0)...0x2100 {
            guard let s = Unicode.Scalar(v) else { continue }
            if Sanitiser.needsEscape(s) { escaped.append(v) }
        }
        let expected: [UInt32] =
            Array(0...0x1F) + Array(0x7F...0x9F) + [0x61C, 0x200E, 0x200F] + Array(0x2028...0x202E)
            + Array(0x2066...0x2069)
        #expect(escaped == expected)
        #expect(Sanitiser.escape("a\u{202E}b\u{2066}c\u{85}d\u{7F}") == #"a\u202eb\u2066c\u0085d\u007f"#)
        #expect(Sanitiser.escape("line\nnext\ttab") == #"line\u000anext\u0009tab"#)
    }

    @Test func leavesOrdinaryTextAlone() {
        for text in ["", "serverUnavailable", "ana@laptop", "Grüße 🚀 東京", #"back\slash"#, "percent <= 10"] {
            #expect(Sanitiser.escape(text) == text)
            #expect(!Sanitiser.needsEscape(text))
        }
    }

    /// The JSON writer escapes the same scalars, so JSON shown on a terminal is just as safe and still valid.
    @Test func jsonWriterEscapesTheSameScalarsAndStaysValid() throws {
        let hostile = "rejected:\u{1b}]0;pwned\u{07}\u{1b}[2J \u{85}\u{9B}2J \u{202E}txt.exe \u{2028}\u{7F}é"
        let text = JSONValue.string(hostile).compactText
        #expect(text == #""rejected:\u001b]0;pwned\u0007\u001b[2J \u0085\u009b2J \u202etxt.exe \u2028\u007fé""#)
        #expect(try JSONParser().parse(text) == .string(hostile))
        #expect(!text.unicodeScalars.contains(where: Sanitiser.needsEscape))
    }

    /// An error message quotes outside text through `quotedExcerpt`, which escapes it too (a plan file's line with
    /// `ESC[2J` cleared the screen of whoever read the error).
    @Test func quotedExcerptsAreEscaped() {
        #expect("\u{1b}[2Jevil\u{202e}".quotedExcerpt() == #"'\u001b[2Jevil\u202e'"#)
        #expect(String(repeating: "\u{7}", count: 70).quotedExcerpt(3) == #"'\u0007\u0007\u0007…' (70 bytes)"#)
        #expect("plain".quotedExcerpt() == "'plain'")
    }

    /// Lines as a plan, scenario or theme file has them: LF or CRLF, a byte order mark dropped, empty lines kept.
    @Test func textFileLinesSplitAtLFAndCRLF() {
        #expect("a\r\nb\nc".textFileLines() == ["a", "b", "c"])
        #expect("\u{FEFF}a\r\n\r\nb\r\n".textFileLines() == ["a", "", "b", ""])
        #expect("".textFileLines() == [""])
        #expect("a\rb".textFileLines() == ["a\rb"])
    }
}
