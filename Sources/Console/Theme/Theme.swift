/// A colour as a theme file writes it.
public enum ThemeColor: Hashable, Sendable, CustomStringConvertible {
    /// The terminal's own foreground or background.
    case terminalDefault
    /// An entry of the 256-colour palette (0–15 are the 16 ANSI colours).
    case indexed(UInt8)
    /// A 24-bit colour.
    case rgb(UInt8, UInt8, UInt8)

    public var description: String {
        switch self {
        case .terminalDefault: "default"
        case .indexed(let n): String(n)
        case .rgb(let r, let g, let b): "#" + Palette.hex(r) + Palette.hex(g) + Palette.hex(b)
        }
    }
}

/// How one role looks: colours and attributes in colour, and the attributes that stand in for colour in monochrome.
public struct ThemeStyle: Hashable, Sendable {
    public var foreground: ThemeColor
    /// nil: the background of `text` (the screen background), so panels and text never show seams.
    public var background: ThemeColor?
    public var attributes: TextAttributes
    public var monochrome: TextAttributes

    public init(
        foreground: ThemeColor = .terminalDefault, background: ThemeColor? = nil, attributes: TextAttributes = [],
        monochrome: TextAttributes = []
    ) {
        self.foreground = foreground
        self.background = background
        self.attributes = attributes
        self.monochrome = monochrome
    }
}

/// A complete mapping from every role to a style.
public struct Theme: Hashable, Sendable {
    public var name: String
    private var styles: [ThemeStyle]

    /// A theme with every role set to `style`.
    init(name: String, uniform style: ThemeStyle) {
        self.name = name
        self.styles = Array(repeating: style, count: Role.allCases.count)
    }

    public subscript(role: Role) -> ThemeStyle {
        get { styles[Int(role.rawValue)] }
        set { styles[Int(role.rawValue)] = newValue }
    }

    /// The styles to paint with at a colour depth.
    public func resolved(for depth: ColorDepth) -> ResolvedTheme {
        ResolvedTheme(theme: self, depth: depth)
    }
}

/// How many colours the terminal can show, from best to none.
public enum ColorDepth: String, Hashable, Sendable, CaseIterable {
    case trueColor = "true colour"
    case indexed256 = "256 colours"
    case ansi16 = "16 colours"
    case ansi8 = "8 colours"
    case monochrome = "monochrome"

    /// The depth to use for a terminal reporting `colors` colours.
    ///
    /// `NO_COLOR` (any non-empty value, as no-color.org defines it) and `--no-color` force monochrome.
    public static func detect(colors: Int, noColorFlag: Bool, environment: [String: String]) -> ColorDepth {
        if noColorFlag { return .monochrome }
        if let v = environment["NO_COLOR"], !v.isEmpty { return .monochrome }
        switch colors {
        case (1 << 24)...: return .trueColor
        case 256...: return .indexed256
        case 16...: return .ansi16
        case 8...: return .ansi8
        default: return .monochrome
        }
    }
}

/// A colour as the terminal backend paints it.
public enum TerminalColor: Hashable, Sendable, CustomStringConvertible {
    case terminalDefault
    /// A palette index valid at the resolved depth.
    case index(Int)
    /// 0xRRGGBB, only at true-colour depth.
    case rgb(UInt32)

    public var description: String {
        switch self {
        case .terminalDefault: "default"
        case .index(let n): String(n)
        case .rgb(let v):
            "#" + Palette.hex(UInt8(v >> 16 & 0xFF)) + Palette.hex(UInt8(v >> 8 & 0xFF)) + Palette.hex(UInt8(v & 0xFF))
        }
    }
}

/// The final look of a cell: what the backend hands to the terminal.
public struct CellStyle: Hashable, Sendable, CustomStringConvertible {
    public var foreground: TerminalColor
    public var background: TerminalColor
    public var attributes: TextAttributes

    public init(foreground: TerminalColor, background: TerminalColor, attributes: TextAttributes) {
        self.foreground = foreground
        self.background = background
        self.attributes = attributes
    }

    public var description: String {
        var parts: [String] = []
        if foreground != .terminalDefault || background != .terminalDefault {
            parts.append("fg=\(foreground) bg=\(background)")
        }
        if !attributes.isEmpty { parts.append(attributes.names) }
        return parts.isEmpty ? "plain" : parts.joined(separator: " ")
    }
}

/// A theme brought down to what one terminal can show.
public struct ResolvedTheme: Hashable, Sendable {
    public let name: String
    public let depth: ColorDepth
    private let styles: [CellStyle]

    init(theme: Theme, depth: ColorDepth) {
        self.name = theme.name
        self.depth = depth
        let screenBackground = theme[.text].background ?? .terminalDefault
        styles = Role.allCases.map { role in
            let s = theme[role]
            guard depth != .monochrome else {
                return CellStyle(foreground: .terminalDefault, background: .terminalDefault, attributes: s.monochrome)
            }
            let fg = Palette.convert(s.foreground, to: depth)
            let bg = Palette.convert(s.background ?? screenBackground, to: depth)
            // Two colours that collapse into one at a low depth would hide the text; fall back to attributes.
            if fg == bg && fg != .terminalDefault {
                return CellStyle(foreground: .terminalDefault, background: .terminalDefault, attributes: s.monochrome)
            }
            return CellStyle(foreground: fg, background: bg, attributes: s.attributes)
        }
    }

    /// The style of a role.
    public subscript(role: Role) -> CellStyle { styles[Int(role.rawValue)] }

    /// The style of a cell: its role's style plus the cell's own attributes.
    public func style(for cell: Cell) -> CellStyle {
        var s = styles[Int(cell.role.rawValue)]
        s.attributes.formUnion(cell.attributes)
        return s
    }
}
