/// A one-line text field: typing, cursor movement, deletion; submit with Enter, cancel with Esc.
public struct TextField: Hashable, Sendable {
    /// Which characters the field accepts.
    public enum Content: Hashable, Sendable {
        /// Any printable character.
        case text
        /// Digits only (step-up codes).
        case digits
    }

    /// What a key did to the field.
    public enum Outcome: Hashable, Sendable {
        case edited
        case submitted
        case cancelled
        case ignored
    }

    public private(set) var characters: [Character]
    /// Cursor position, 0...characters.count.
    public private(set) var cursor: Int
    public let content: Content
    public let maxLength: Int
    /// Shown as bullets (step-up codes).
    public let masked: Bool
    /// The whole text is selected, as a pre-filled field opens (the `=` prompt's current value, a reason kept
    /// from before a conflict): typing replaces it and a deletion clears it, as in every text box people know; a
    /// cursor key keeps it and moves the cursor. Typing after a pre-filled `41` gave `41150`.
    public private(set) var isSelected: Bool

    /// A field holding `text`; `selected`: the text is pre-filled and selected (ignored for an empty text).
    public init(
        _ text: String = "", content: Content = .text, maxLength: Int = 200, masked: Bool = false, selected: Bool = false
    ) {
        self.characters = Array(text.prefix(maxLength))
        self.cursor = characters.count
        self.content = content
        self.maxLength = maxLength
        self.masked = masked
        self.isSelected = selected && !text.isEmpty
    }

    public var text: String { String(characters) }

    /// What the field shows: the text, or one bullet per character when masked.
    public var displayText: String { masked ? String(repeating: "•", count: characters.count) : text }

    /// Applies one key.
    public mutating func handle(_ key: Key) -> Outcome {
        if isSelected {
            switch key {
            case .enter, .escape:
                break
            case .character(let c):
                // The typed character replaces the selection, if the emptied field accepts it.
                var emptied = self
                emptied.characters = []
                emptied.cursor = 0
                emptied.isSelected = false
                guard emptied.accepts(c) else { return .ignored }
                self = emptied
            case .backspace, .control("h"), .delete, .control("d"), .control("u"), .control("k"):
                characters = []
                cursor = 0
                isSelected = false
                return .edited
            default:
                isSelected = false
            }
        }
        switch key {
        case .enter: return .submitted
        case .escape: return .cancelled
        case .character(let c):
            guard accepts(c), characters.count < maxLength else { return .ignored }
            characters.insert(c, at: cursor)
            cursor += 1
        case .backspace, .control("h"):
            guard cursor > 0 else { return .ignored }
            characters.remove(at: cursor - 1)
            cursor -= 1
        case .delete, .control("d"):
            guard cursor < characters.count else { return .ignored }
            characters.remove(at: cursor)
        case .left, .control("b"):
            guard cursor > 0 else { return .ignored }
            cursor -= 1
        case .right, .control("f"):
            guard cursor < characters.count else { return .ignored }
            cursor += 1
        case .home, .control("a"): cursor = 0
        case .end, .control("e"): cursor = characters.count
        case .control("u"):
            characters.removeFirst(cursor)
            cursor = 0
        case .control("k"):
            characters.removeLast(characters.count - cursor)
        default:
            return .ignored
        }
        return .edited
    }

    private func accepts(_ c: Character) -> Bool {
        switch content {
        case .text:
            return !c.unicodeScalars.contains { $0.properties.generalCategory == .control }
        case .digits:
            return c.isASCII && c.isNumber
        }
    }
}
