/// The client template's condition expression language, for the parts rollout needs.
///
/// Grammar (whitespace between tokens is free):
/// ```
/// expr    := or
/// or      := and ( "||" and )*
/// and     := unary ( "&&" unary )*
/// unary   := "!" unary | primary
/// primary := "(" expr ")" | "true" | "false" | percent | opaque
/// percent := "percent" ( "(" string ")" )? ( "<=" number | ">" number | "between" number "and" number )
/// opaque  := any other element up to a top-level "&&", "||" or ")", kept verbatim
/// ```
/// Numbers are percentages with at most 6 decimals. Parsing keeps the source position of every percent number
/// so that a rollout edit can replace just those characters and leave the rest of the expression as written.
public struct ConditionExpression: Hashable, Sendable {
    /// The expression exactly as written.
    public let text: String
    public let root: ConditionNode
    /// Where each percent term's numbers are in `text` (UTF-8 offsets), in reading order of `root.percentTerms`.
    public let percentSpans: [PercentSpan]

    public struct PercentSpan: Hashable, Sendable {
        /// Byte ranges of the number literals: one for `<=`/`>`, two for `between`.
        public var numbers: [Range<Int>]
    }

    public init(parsing text: String) throws(ExpressionError) {
        var parser = ExpressionParser(text)
        let root = try parser.parseExpression()
        self.text = text
        self.root = root
        percentSpans = parser.spans
    }

    /// A copy where the `index`-th percent term's numbers are replaced, everything else byte for byte the same.
    public func replacingPercent(at index: Int, with op: PercentOperator) throws(ExpressionError) -> ConditionExpression {
        let span = percentSpans[index]
        let numbers: [MicroPercent]
        switch (op, span.numbers.count) {
        case (.lessOrEqual(let m), 1), (.greaterThan(let m), 1): numbers = [m]
        case (.between(let a, let b), 2): numbers = [a, b]
        default:
            throw ExpressionError(
                expression: text, column: 1, message: "cannot change the operator of percent term \(index + 1) in place")
        }
        var bytes = Array(text.utf8)
        for (range, value) in zip(span.numbers, numbers).reversed() {
            bytes.replaceSubrange(range, with: Array(value.decimalText.utf8))
        }
        let updated = try ConditionExpression(parsing: String(decoding: bytes, as: UTF8.self))
        return updated
    }

    /// The canonical text of a single percent term: `percent('seed') <= 12.5`. An empty seed is written as
    /// `percent('')`, so that the text parses back to the same term (found by the ConditionExpression fuzz target).
    public static func render(_ term: PercentTerm) -> String {
        var s = "percent"
        if let seed = term.seed {
            // Escaped byte by byte, the inverse of the tokenizer: a String-level replace compares Characters, and a
            // backslash followed by a combining mark is one Character that it misses (found by the fuzz target).
            var escaped: [UInt8] = []
            for byte in seed.utf8 {
                if byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "'") { escaped.append(UInt8(ascii: "\\")) }
                escaped.append(byte)
            }
            s += "('" + String(decoding: escaped, as: UTF8.self) + "')"
        }
        switch term.op {
        case .lessOrEqual(let m): s += " <= " + m.decimalText
        case .greaterThan(let m): s += " > " + m.decimalText
        case .between(let a, let b): s += " between " + a.decimalText + " and " + b.decimalText
        case .unknown(let n): s += " " + n
        }
        return s
    }
}

/// A syntax error with the 1-based column and what was expected there.
public struct ExpressionError: Error, CustomStringConvertible, Sendable, Equatable {
    public var expression: String
    public var column: Int
    public var message: String
    public var description: String { "condition expression, column \(column): \(message)" }
}

private struct Token: Equatable {
    enum Kind: Equatable {
        case identifier(String)
        case number
        case string(String)
        case symbol(String)
    }
    var kind: Kind
    var range: Range<Int>
}

private struct ExpressionParser {
    let text: String
    let bytes: [UInt8]
    var tokens: [Token] = []
    var position = 0
    var spans: [ConditionExpression.PercentSpan] = []
    var depth = 0
    var lexError: ExpressionError?

    init(_ text: String) {
        self.text = text
        bytes = Array(text.utf8)
        do {
            tokens = try ExpressionParser.tokenize(bytes, text: text)
        } catch {
            lexError = error
        }
    }

    static func column(_ offset: Int, in bytes: [UInt8]) -> Int {
        bytes[..<min(offset, bytes.count)].filter { $0 & 0xC0 != 0x80 }.count + 1
    }

    static func tokenize(_ b: [UInt8], text: String) throws(ExpressionError) -> [Token] {
        var out: [Token] = []
        var i = 0
        func isIdent(_ c: UInt8) -> Bool {
            (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c == 95 || c == 46 || c >= 0x80
        }
        while i < b.count {
            let c = b[i]
            if c == 32 || c == 9 || c == 10 || c == 13 {
                i += 1
                continue
            }
            let start = i
            if c == 39 || c == 34 {  // ' or "
                i += 1
                var value: [UInt8] = []
                var closed = false
                while i < b.count {
                    if b[i] == 92, i + 1 < b.count {
                        value.append(b[i + 1])
                        i += 2
                        continue
                    }
                    if b[i] == c {
                        closed = true
                        i += 1
                        break
                    }
                    value.append(b[i])
                    i += 1
                }
                guard closed else {
                    throw ExpressionError(
                        expression: text, column: column(start, in: b), message: "unterminated string; expected a closing quote")
                }
                out.append(Token(kind: .string(String(decoding: value, as: UTF8.self)), range: start..<i))
                continue
            }
            if c >= 48 && c <= 57 {
                while i < b.count, (b[i] >= 48 && b[i] <= 57) || b[i] == 46 { i += 1 }
                // A number glued to letters (e.g. `1.2.0beta`) is part of an opaque element, keep it whole.
                if i < b.count, isIdent(b[i]) {
                    while i < b.count, isIdent(b[i]) { i += 1 }
                    out.append(Token(kind: .identifier(String(decoding: b[start..<i], as: UTF8.self)), range: start..<i))
                } else {
                    out.append(Token(kind: .number, range: start..<i))
                }
                continue
            }
            if isIdent(c) {
                while i < b.count, isIdent(b[i]) { i += 1 }
                out.append(Token(kind: .identifier(String(decoding: b[start..<i], as: UTF8.self)), range: start..<i))
                continue
            }
            let two = i + 1 < b.count ? String(decoding: b[i...i + 1], as: UTF8.self) : ""
            if ["&&", "||", "<=", ">=", "==", "!="].contains(two) {
                out.append(Token(kind: .symbol(two), range: i..<i + 2))
                i += 2
                continue
            }
            out.append(Token(kind: .symbol(String(UnicodeScalar(c))), range: i..<i + 1))
            i += 1
        }
        return out
    }

    func error(_ message: String, at tokenIndex: Int? = nil) -> ExpressionError {
        let t = tokenIndex ?? position
        let offset = t < tokens.count ? tokens[t].range.lowerBound : bytes.count
        return ExpressionError(expression: text, column: ExpressionParser.column(offset, in: bytes), message: message)
    }

    var current: Token? { position < tokens.count ? tokens[position] : nil }

    func isSymbol(_ s: String) -> Bool { current?.kind == .symbol(s) }
    func isWord(_ s: String) -> Bool { current?.kind == .identifier(s) }

    mutating func parseExpression() throws(ExpressionError) -> ConditionNode {
        if let lexError { throw lexError }
        guard !tokens.isEmpty else { throw error("expected a condition, found an empty expression") }
        let node = try parseOr()
        if let t = current {
            throw error("expected '&&', '||' or the end of the expression, found '\(slice(t.range))'")
        }
        return node
    }

    func slice(_ r: Range<Int>) -> String { String(decoding: bytes[r], as: UTF8.self) }

    mutating func parseOr() throws(ExpressionError) -> ConditionNode {
        var items = [try parseAnd()]
        while isSymbol("||") {
            position += 1
            items.append(try parseAnd())
        }
        return items.count == 1 ? items[0] : .or(items)
    }

    mutating func parseAnd() throws(ExpressionError) -> ConditionNode {
        var items = [try parseUnary()]
        while isSymbol("&&") {
            position += 1
            items.append(try parseUnary())
        }
        return items.count == 1 ? items[0] : .and(items)
    }

    mutating func parseUnary() throws(ExpressionError) -> ConditionNode {
        depth += 1
        defer { depth -= 1 }
        guard depth < 100 else { throw error("expected nesting no deeper than 100") }
        if isSymbol("!") {
            position += 1
            return .not(try parseUnary())
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws(ExpressionError) -> ConditionNode {
        guard let t = current else { throw error("expected a condition after this point, found the end of the expression") }
        switch t.kind {
        case .symbol("("):
            position += 1
            let inner = try parseOr()
            guard isSymbol(")") else {
                throw error(current == nil ? "expected ')' to close '(', found the end of the expression" : "expected ')' to close '('")
            }
            position += 1
            return inner
        case .identifier("true") where isTermEnd(position + 1):
            position += 1
            return .constant(true)
        case .identifier("false") where isTermEnd(position + 1):
            position += 1
            return .constant(false)
        case .identifier("percent"):
            return try parsePercent()
        case .symbol("&&"), .symbol("||"), .symbol(")"):
            throw error("expected a condition, found '\(slice(t.range))'")
        default:
            return try parseOpaque()
        }
    }

    func isTermEnd(_ i: Int) -> Bool {
        guard i < tokens.count else { return true }
        return [Token.Kind.symbol("&&"), .symbol("||"), .symbol(")")].contains(tokens[i].kind)
    }

    mutating func parsePercent() throws(ExpressionError) -> ConditionNode {
        position += 1
        var seed: String?
        if isSymbol("(") {
            position += 1
            guard case .string(let s)? = current?.kind else { throw error("expected a quoted seed after 'percent('") }
            seed = s
            position += 1
            guard isSymbol(")") else { throw error("expected ')' after the seed") }
            position += 1
        }
        let op: PercentOperator
        var numbers: [Range<Int>] = []
        if isSymbol("<=") || isSymbol(">") {
            let lessOrEqual = isSymbol("<=")
            position += 1
            let (m, r) = try parseNumber()
            numbers = [r]
            op = lessOrEqual ? .lessOrEqual(m) : .greaterThan(m)
        } else if isWord("between") {
            position += 1
            let (a, ra) = try parseNumber()
            guard isWord("and") else { throw error("expected 'and' between the two bounds") }
            position += 1
            let (b, rb) = try parseNumber()
            guard a <= b else { throw error("expected the lower bound \(a.decimalText) not above the upper bound \(b.decimalText)", at: position - 1) }
            numbers = [ra, rb]
            op = .between(a, b)
        } else {
            throw error("expected '<=', '>' or 'between' after 'percent'")
        }
        spans.append(ConditionExpression.PercentSpan(numbers: numbers))
        return .percent(PercentTerm(op, seed: seed))
    }

    mutating func parseNumber() throws(ExpressionError) -> (MicroPercent, Range<Int>) {
        guard let t = current, t.kind == .number else { throw error("expected a percentage (0 to 100, up to 6 decimals)") }
        let text = slice(t.range)
        let value: MicroPercent
        do {
            value = try MicroPercent.parse(text)
        } catch {
            throw self.error("expected a percentage with at most 6 decimals, found '\(text)'")
        }
        guard value.isValidPercentage else { throw error("expected a percentage from 0 to 100, found '\(text)'") }
        position += 1
        return (value, t.range)
    }

    /// Everything up to a top-level `&&`, `||` or unmatched `)`; brackets and parentheses inside are balanced.
    mutating func parseOpaque() throws(ExpressionError) -> ConditionNode {
        let startToken = position
        var nesting = 0
        while let t = current {
            if nesting == 0, isTermEnd(position) { break }
            if t.kind == .symbol("(") || t.kind == .symbol("[") { nesting += 1 }
            if t.kind == .symbol(")") || t.kind == .symbol("]") {
                nesting -= 1
                guard nesting >= 0 else { throw error("unbalanced '\(slice(t.range))'") }
            }
            position += 1
        }
        guard nesting == 0 else { throw error("expected a closing bracket, found the end of the expression") }
        let range = tokens[startToken].range.lowerBound..<tokens[position - 1].range.upperBound
        return .opaque(OpaqueTerm(source: .expression(slice(range))))
    }
}
