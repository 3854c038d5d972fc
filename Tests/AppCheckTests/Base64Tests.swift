import Crypto
import Testing

/// The one Base64 decoder: canonical spellings only, per field options (issue 13).
@Suite struct Base64Tests {
    static let spellings: [(url: Bool, padded: Bool)] = [(false, true), (false, false), (true, true), (true, false)]

    @Test func everySpellingRoundTripsAtEveryLength() {
        var rng = SystemRandomNumberGenerator()
        for length in 0...70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for s in Self.spellings {
                let text = Base64.encode(bytes, urlSafe: s.url, padded: s.padded)
                #expect(Base64.decode(text) == bytes, "\(text)")
                if s.url && !s.padded { #expect(Base64.decode(text, .jwt) == bytes) }
                if !s.url && s.padded { #expect(Base64.decode(text, .standard) == bytes) }
            }
        }
        // Every byte value through every position of a group.
        let all = (0...255).map(UInt8.init)
        #expect(Base64.decode(Base64.encode(all)) == all)
        #expect(Base64.decode(Base64.encodeURL(all), .jwt) == all)
    }

    @Test(arguments: [
        "T=", "T==", "T", "QQ=", "QQ===", "QUI==", "QUJD=", "QUJD====", "=", "==", "QQ==QQ==", "Q=Q=", "QQ ==",
        " QQ==", "QQ==\n", "QR==", "QR", "QUK=", "QUK", "ab+_", "a-b/", "QQ\u{0}", "Q\u{FF}Q=", "QQ==\u{301}",
    ])
    func nonCanonicalSpellingsAreRefused(_ text: String) {
        #expect(Base64.decode(text) == nil)
        #expect(Base64.decode(text, .jwt) == nil)
        #expect(Base64.decode(text, .standard) == nil)
    }

    @Test func optionsChooseTheAlphabetAndThePadding() {
        #expect(Base64.decode("-_8", .jwt) == [0xfb, 0xff])
        #expect(Base64.decode("+/8", .jwt) == nil)
        #expect(Base64.decode("-_8=", .jwt) == nil)
        #expect(Base64.decode("+/8=", .standard) == [0xfb, 0xff])
        #expect(Base64.decode("+/8", .standard) == nil)
        #expect(Base64.decode("-_8=", .standard) == nil)
        for t in ["-_8", "-_8=", "+/8", "+/8="] { #expect(Base64.decode(t) == [0xfb, 0xff], "\(t)") }
        #expect(Base64.decode("", .jwt) == [])
        #expect(Base64.decode("QUJD", .standard) == Array("ABC".utf8))
    }

    /// Exhaustive over short strings of a small alphabet that holds both alphabets' extras and padding: a string
    /// is accepted exactly when it is the encoding of some bytes in one of the four spellings (the oracle reads
    /// the bits leniently, then encodes them again), and then it decodes to those bytes.
    @Test func acceptedExactlyWhenCanonical() {
        let symbols = Array("AQRgw+/-_=".utf8)
        let values: [UInt8: UInt32] = [65: 0, 81: 16, 82: 17, 103: 32, 119: 48, 43: 62, 45: 62, 47: 63, 95: 63]
        func lenient(_ u: [UInt8]) -> [UInt8] {
            var out: [UInt8] = []
            var acc: UInt32 = 0
            var bits = 0
            for c in u where c != 61 {
                acc = (acc << 6 | values[c]!) & 0xffff
                bits += 6
                if bits >= 8 {
                    bits -= 8
                    out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                }
            }
            return out
        }
        var level: [[UInt8]] = [[]]
        var accepted = 0
        var total = 0
        for _ in 1...5 {
            level = level.flatMap { s in symbols.map { s + [$0] } }
            for u in level {
                total += 1
                let text = String(decoding: u, as: UTF8.self)
                let bytes = lenient(u)
                let canonical = Self.spellings.contains {
                    Base64.encode(bytes, urlSafe: $0.url, padded: $0.padded) == text
                }
                let decoded = Base64.decode(text)
                #expect((decoded != nil) == canonical, "\(text)")
                if let decoded {
                    accepted += 1
                    #expect(decoded == bytes, "\(text)")
                }
            }
        }
        #expect(total == 111_110)
        #expect(accepted > 1000)
    }
}
