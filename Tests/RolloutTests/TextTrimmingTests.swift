import Foundation
import Rollout
import Testing

/// The Foundation-free trimming gives Foundation's answers, on ASCII and on Unicode spaces and line ends.
struct TextTrimmingTests {
    static let samples = [
        "", " ", "\t", "abc", "  abc  ", "\tab c\t", "\n abc \n", "\u{00A0}abc\u{3000}", "\u{2028}abc\u{2029}",
        "a\u{0301} ", " \u{0085}x\u{0085} ", "\r\n", "\u{200B}x\u{200B}", " \u{1680}é\u{202F} ", "\u{000B}v\u{000C}",
    ]

    @Test(arguments: samples)
    func agreesWithFoundation(text: String) {
        #expect(text.trimmingSpaces() == text.trimmingCharacters(in: .whitespaces))
        #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(text.isBlank == text.trimmingCharacters(in: .whitespaces).isEmpty)
        #expect(text[...].trimmingSpaces() == text.trimmingCharacters(in: .whitespaces))
    }
}
