import Foundation
import JSON
import Testing

@Suite("JSON scanner")
struct JSONScannerTests {
    func scan(_ text: String, _ body: (inout JSONScanner) throws(LineError) -> Void) -> LineError? {
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBytes { raw -> LineError? in
            var s = JSONScanner(UnsafeRawBufferPointer(raw), names: MemberNames())
            do throws(LineError) {
                try body(&s)
                try s.finish()
                return nil
            } catch {
                return error
            }
        }
    }

    @Test("skips any value and rejects what RFC 8259 rejects")
    func skipping() {
        #expect(
            scan(#" {"a":[1,-2.5e3,{"b":[]},"x\"y",true,false,null],"c":{}} "#) { s throws(LineError) in
                try s.skipValue()
            } == nil)
        for bad in [
            #"{"a":1,}"#, #"[1 2]"#, #"{"a" 1}"#, #"tru"#, #""abc"#, "\"a\u{01}b\"", #""\x""#, #"{"a":1}}"#, "-",
        ] {
            #expect(scan(bad) { s throws(LineError) in try s.skipValue() } != nil, "\(bad)")
        }
    }

    @Test("integers: range, quoted digits, no fractions")
    func integers() {
        var value: Int64 = 0
        #expect(scan("9223372036854775807") { s throws(LineError) in value = try s.integer() } == nil)
        #expect(value == .max)
        #expect(scan("\"-42\"") { s throws(LineError) in value = try s.integer() } == nil)
        #expect(value == -42)
        #expect(
            scan("9223372036854775808") { s throws(LineError) in value = try s.integer() }?.reason.contains(
                "out of range") == true)
        #expect(scan("1e3") { s throws(LineError) in value = try s.integer() } != nil)
    }

    @Test("escapes decode to the same text Foundation's parser gives")
    func escapes() throws {
        let json = #""a\u00e9\n\ud83d\ude00\/\\\"""#
        var decoded = ""
        #expect(scan(json) { s throws(LineError) in decoded = try s.string().text } == nil)
        let foundation = try JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed) as! String
        #expect(decoded == foundation)
    }
}

/// Issue 13: the JSON scanner (the ingest's reader) is a fast path of JSONParser's grammar.
@Suite("JSON scanner = JSONParser")
struct ScannerParserAgreementTests {
    func canonical(_ text: String, policy: DuplicateKeyPolicy = .reject) -> [UInt8]? {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { raw -> [UInt8]? in
            var s = JSONScanner(raw, names: MemberNames(policy: policy))
            var out: [UInt8] = []
            do throws(LineError) {
                try s.canonicalText(into: &out)
                try s.finish()
                return out
            } catch {
                return nil
            }
        }
    }

    @Test("numbers the old scanner accepted are refused, as JSONParser refuses them", arguments: [
        "1-2e+", "[1-2e+]", "01", "-", "1.", ".5", "1e", "+1", "1e+", "--1", "0x10", "1.5e3.2", "[1,2,]", "-01",
    ])
    func badNumbers(_ text: String) {
        #expect(canonical(text) == nil, "\(text)")
        #expect((try? JSONParser().parse(text)) == nil)
    }

    @Test("invalid UTF-8, lone surrogates and deep nesting are refused, as JSONParser refuses them")
    func badStrings() {
        for bytes: [UInt8] in [[0x22, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], [0x22, 0xFF, 0x22]] {
            let text = String(decoding: bytes, as: UTF8.self)
            _ = text
            let scanned = bytes.withUnsafeBytes { raw -> Bool in
                var s = JSONScanner(raw, names: MemberNames())
                return (try? s.skipValue()) != nil
            }
            #expect(!scanned, "\(bytes)")
            #expect((try? JSONParser().parse(bytes)) == nil)
        }
        for text in [#""\ud800""#, #""\udc00""#, #""\ud800\u0041""#] {
            #expect(canonical(text) == nil, "\(text)")
            #expect((try? JSONParser().parse(text)) == nil)
        }
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        #expect(canonical(deep) == nil)
        #expect((try? JSONParser().parse(deep)) == nil)
        let ok = String(repeating: "[", count: 256) + String(repeating: "]", count: 256)
        #expect(canonical(ok) != nil)
        #expect((try? JSONParser().parse(ok)) != nil)
    }

    @Test("accepted documents decode to the same values")
    func sameValues() throws {
        for text in [
            #"{"z":1,"a":[1.50,-0,2e10,1E-7],"é":"ü\u00e9\ud83d\ude80","n":null,"t":true,"nested":{"y":{},"x":[]}}"#,
            #" [ "a\/b\"\\\b\f\n\r\t", 0, -0.0e-0, 123456789012345678901234567890 ] "#,
            #"{"rejected":"\u001b]0;pwned\u0007"}"#,
            "{" + (0..<40).map { #""k\#($0)":\#($0)"# }.joined(separator: ",") + "}",
        ] {
            let value = try JSONParser().parse(text)
            #expect(canonical(text) == JSONWriter().bytes(value), "\(text)")
        }
        let many = "{" + (0..<40).map { #""k\#($0)":\#($0)"# }.joined(separator: ",") + #","k7":1}"#
        #expect(canonical(many) == nil)
        #expect(canonical(many, policy: .count) != nil)
    }
}

/// The scanner finds a name given twice among many short, similar names, whether written plainly or with escapes,
/// before or after the first time: the same answer as `JSONParser`.
@Suite("JSON scanner: duplicate names")
struct DuplicateNameTests {
    @Test("random objects of short, alike and escaped names: refused exactly when JSONParser refuses them")
    func agreesWithTheParser() throws {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ n: Int) -> Int {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return Int(state % UInt64(n))
        }
        // Names of one to three letters from a small alphabet: many alike, some the same text.
        let letters = Array("abcopt")
        var refused = 0
        var escapedDuplicates = 0
        for _ in 0..<3000 {
            var members: [String] = []
            var texts: [String] = []
            var forms: [String: [String]] = [:]
            for _ in 0..<(1 + next(40)) {
                let name = String((0...next(3)).map { _ in letters[next(letters.count)] })
                // Sometimes a letter written as a \u escape: the same text in other bytes.
                let first = name.unicodeScalars.first!.value
                let written = next(5) == 0 ? "\\u00" + String(first, radix: 16) + name.dropFirst() : name
                if let before = forms[name], written != name || before.contains(where: { $0 != name }) {
                    escapedDuplicates += 1
                }
                forms[name, default: []].append(written)
                texts.append(name)
                members.append("\"\(written)\":\(members.count)")
            }
            let text = "{" + members.joined(separator: ",") + "}"
            let parsed = (try? JSONParser().parse(text)) != nil
            #expect((ScannerParserAgreementTests().canonical(text) != nil) == parsed, "\(text)")
            #expect(parsed == (Set(texts).count == texts.count), "\(text)")
            if !parsed { refused += 1 }
        }
        #expect(refused > 500 && refused < 2900 && escapedDuplicates > 100, "\(refused) refused, \(escapedDuplicates)")
    }
}

/// `ByteSpan.sameBytes` stands in for `memcmp(a, b, n) == 0` on every name and value a line is compared with:
/// it must agree with `memcmp` at every length it handles itself and past them, whichever byte differs.
@Suite("JSON scanner: byte comparison")
struct ByteComparisonTests {
    @Test("agrees with memcmp for lengths 0 to 40, equal and with any one byte different")
    func agreesWithMemcmp() {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        func next() -> UInt8 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
        for n in 0...40 {
            // Unaligned starts too: the loads read at any offset.
            for offset in 0..<3 {
                let a = (0..<n + offset).map { _ in next() }
                var b = [UInt8](repeating: 0, count: n + 1)
                for i in 0..<n { b[i + 1] = a[i + offset] }
                a.withUnsafeBufferPointer { pa in
                    b.withUnsafeMutableBufferPointer { pb in
                        let x = pa.baseAddress! + offset, y = UnsafePointer(pb.baseAddress! + 1)
                        #expect(ByteSpan.sameBytes(x, y, n), "equal, length \(n), offset \(offset)")
                        for i in 0..<n {
                            let saved = pb[i + 1]
                            pb[i + 1] ^= 1 << UInt8(i % 8)
                            #expect(
                                ByteSpan.sameBytes(x, y, n) == (memcmp(x, y, n) == 0) && !ByteSpan.sameBytes(x, y, n),
                                "length \(n), byte \(i) different")
                            pb[i + 1] = saved
                        }
                    }
                }
            }
        }
    }
}
