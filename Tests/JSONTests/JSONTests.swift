import JSON
import Testing

struct JSONTests {
    @Test func keepsKeyOrderNumberSpellingAndUnicode() throws {
        let text = #"{"z":1,"a":[1.50,-0,2e10,1E-7],"é":"ü\u00e9\ud83d\ude80","n":null,"t":true,"nested":{"y":{},"x":[]}}"#
        let value = try JSONParser().parse(text)
        #expect(value.objectValue?.keys == ["z", "a", "é", "n", "t", "nested"])
        #expect(value.compactText == #"{"z":1,"a":[1.50,-0,2e10,1E-7],"é":"üé🚀","n":null,"t":true,"nested":{"y":{},"x":[]}}"#)
        #expect(try JSONParser().parse(value.compactText) == value)
        #expect(try JSONParser().parse(value.prettyText) == value)
    }

    @Test func prettyPrintsLikeTheFirebaseCLI() throws {
        let value: JSONValue = ["conditions": [], "parameters": ["A": ["defaultValue": ["value": "x"]]], "version": [:]]
        #expect(
            value.prettyText == """
                {
                  "conditions": [],
                  "parameters": {
                    "A": {
                      "defaultValue": {
                        "value": "x"
                      }
                    }
                  },
                  "version": {}
                }

                """)
    }

    @Test func escapesOnlyWhatJSONRequires() {
        let s: JSONValue = .string("a\"b\\c\n\t\u{01}/é")
        #expect(s.compactText == #""a\"b\\c\n\t\u0001/é""#)
    }

    @Test(arguments: [
        ("", "expected a value, found end of input"),
        ("{\"a\":1,}", "expected a member name in double quotes, found '}'"),
        ("[1,2", "expected ',' or ']', found end of input"),
        ("{\"a\":1} x", "expected end of input after the document, found 'x'"),
        ("{\"a\":1,\"a\":2}", "duplicate member name \"a\""),
        ("01", "expected no leading zeros in a number, found '1'"),
        ("\"\\x\"", "expected a valid escape"),
        ("\"\\ud800\"", "expected a low surrogate after a high surrogate"),
        ("\"tab\there\"", "expected no control characters inside a string"),
        ("nul", "expected 'null'"),
        ("1.", "expected a digit after '.'"),
    ])
    func rejectsMalformedInputWithItsPosition(input: String, message: String) {
        #expect {
            try JSONParser().parse(input)
        } throws: { error in
            (error as? JSONError)?.message.hasPrefix(message) == true
        }
    }

    @Test func reportsLineAndColumn() {
        #expect {
            try JSONParser().parse("{\n  \"a\": [1,\n    oops]\n}")
        } throws: { error in
            let e = error as! JSONError
            return e.line == 3 && e.column == 5
        }
    }

    @Test func rejectsInvalidUTF8AndDeepNesting() {
        #expect(throws: JSONError.self) { try JSONParser().parse([0x22, 0xFF, 0x22]) }
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        #expect(throws: JSONError.self) { try JSONParser().parse(deep) }
        var shallow = JSONParser()
        shallow.maximumDepth = 400
        #expect((try? shallow.parse(deep)) != nil)
    }

    @Test func objectEditsKeepPositions() {
        var o = JSONObject([("a", 1), ("b", 2), ("c", 3)])
        o["b"] = "two"
        o["d"] = 4
        o["a"] = nil
        #expect(o.keys == ["b", "c", "d"])
        o.insert(0, forKey: "z", at: 1)
        #expect(o.keys == ["b", "z", "c", "d"])
        // Large objects switch to a hashed index; order and lookups stay right.
        var big = JSONObject()
        for i in 0..<100 { big["k\(i)"] = .number(JSONNumber(i)) }
        big["k50"] = nil
        #expect(big.count == 99 && big["k99"] == 99 && big["k50"] == nil && big.keys[50] == "k51")
    }
}
