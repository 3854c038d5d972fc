import RemoteConfig
import Testing

struct ExpressionTests {
    @Test func parsesPercentTermsWithAndWithoutSeeds() throws {
        let e = try ConditionExpression(parsing: "percent <= 10")
        #expect(e.root == .percent(PercentTerm(.lessOrEqual(MicroPercent(10_000_000)), seed: nil)))
        let s = try ConditionExpression(parsing: "percent('my seed') > 12.345678")
        #expect(s.root == .percent(PercentTerm(.greaterThan(MicroPercent(12_345_678)), seed: "my seed")))
        let b = try ConditionExpression(parsing: "percent(\"s\") between 0 and 0.5")
        #expect(b.root == .percent(PercentTerm(.between(.zero, MicroPercent(500_000)), seed: "s")))
    }

    @Test func combinesWithPrecedenceAndKeepsOpaqueTermsVerbatim() throws {
        let e = try ConditionExpression(
            parsing: "device.os == 'ios' && (percent('a') <= 5 || !app.version.>=(['1.2.0'])) || false")
        guard case .or(let items) = e.root, items.count == 2, case .and(let left) = items[0] else {
            Issue.record("unexpected tree \(e.root)")
            return
        }
        #expect(left[0] == .opaque(OpaqueTerm(source: .expression("device.os == 'ios'"))))
        guard case .or(let inner) = left[1] else {
            Issue.record("expected the parenthesised or")
            return
        }
        #expect(inner[1] == .not(.opaque(OpaqueTerm(source: .expression("app.version.>=(['1.2.0'])")))))
        #expect(items[1] == .constant(false))
        #expect(e.root.opaqueTerms.count == 2)
    }

    @Test(arguments: [
        ("", 1, "expected a condition, found an empty expression"),
        ("percent <= ", 12, "expected a percentage"),
        ("percent < 10", 9, "expected '<=', '>' or 'between' after 'percent'"),
        ("percent <= 10.1234567", 12, "expected a percentage with at most 6 decimals"),
        ("percent <= 101", 12, "expected a percentage from 0 to 100"),
        ("percent between 20 and 10", 24, "expected the lower bound 20 not above the upper bound 10"),
        ("percent between 1 10", 19, "expected 'and' between the two bounds"),
        ("(percent <= 1", 14, "expected ')' to close '('"),
        ("percent <= 1 &&", 16, "expected a condition after this point"),
        ("percent('s <= 1", 9, "unterminated string"),
        ("percent <= 1 percent <= 2", 14, "expected '&&', '||' or the end of the expression"),
        ("device.os == 'ios')", 19, "expected '&&', '||' or the end of the expression"),
    ])
    func syntaxErrorsGiveColumnAndExpectation(text: String, column: Int, message: String) {
        #expect {
            try ConditionExpression(parsing: text)
        } throws: { error in
            let e = error as! ExpressionError
            return e.column == column && e.message.hasPrefix(message)
        }
    }

    @Test func replacingAPercentKeepsEveryOtherCharacter() throws {
        let e = try ConditionExpression(parsing: "app.id == 'x'  &&   percent('s') <= 7.25 /* none */".replacingOccurrences(of: " /* none */", with: ""))
        let r = try e.replacingPercent(at: 0, with: .lessOrEqual(MicroPercent(12_000_000)))
        #expect(r.text == "app.id == 'x'  &&   percent('s') <= 12")
        let b = try ConditionExpression(parsing: "percent between 50 and 60")
        #expect(try b.replacingPercent(at: 0, with: .between(MicroPercent.fifty, MicroPercent(62_500_000))).text == "percent between 50 and 62.5")
        #expect(throws: ExpressionError.self) { try b.replacingPercent(at: 0, with: .lessOrEqual(.zero)) }
    }

    @Test func renderedTermsParseBack() throws {
        for term in [
            PercentTerm(.lessOrEqual(MicroPercent(1)), seed: "it's"), PercentTerm(.greaterThan(.hundred), seed: nil),
            PercentTerm(.between(MicroPercent(1_500_000), MicroPercent(99_999_999)), seed: "back\\slash"),
            // A backslash and a quote each followed by a combining mark: one Character each (found by fuzzing).
            PercentTerm(.lessOrEqual(MicroPercent(10_000_000)), seed: "\\\u{064E}x'\u{0301}"),
        ] {
            #expect(try ConditionExpression(parsing: ConditionExpression.render(term)).root == .percent(term))
        }
    }
}

struct MicroPercentTests {
    @Test(arguments: [("25", 25_000_000), ("12.5", 12_500_000), ("0.000001", 1), ("100", 100_000_000), ("0", 0), ("7%", 7_000_000), (" 3.10 ", 3_100_000)])
    func parsesExactly(text: String, micro: Int64) throws {
        #expect(try MicroPercent.parse(text).value == micro)
    }

    @Test(arguments: ["", "ten", "NaN", "10.1234567", "1e1", "--1", "1.", ".", "1.2.3", "0x10", "+5", "-1", "inf", "1 000"])
    func refusesBadInputWithAOneLineReason(text: String) {
        #expect {
            try MicroPercent.parse(text)
        } throws: { error in
            let d = "\(error)"
            return d.hasPrefix("invalid percentage") && !d.contains("\n")
        }
    }

    @Test func signedParsingAndRangeCheckAreSeparate() throws {
        #expect(try MicroPercent.parse("+0.1", allowSign: true).value == 100_000)
        #expect(try MicroPercent.parse("-2.5", allowSign: true).value == -2_500_000)
        #expect(!(try MicroPercent.parse("101")).isValidPercentage)
        #expect(MicroPercent(12_500_000).description == "12.5%" && MicroPercent(-100_000).signedText == "-0.1")
        // Exact arithmetic: a thousand nudges of 0.1 are exactly 100.
        var sum = MicroPercent.zero
        for _ in 0..<1000 { sum = sum + (try MicroPercent.parse("0.1")) }
        #expect(sum == .hundred)
    }
}
