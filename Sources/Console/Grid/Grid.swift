import Platform

/// The semantic role of a cell: what it means, never which colour it is.
///
/// Themes map roles to colours and to monochrome attributes; the renderer only ever names roles, so that every
/// screen works in monochrome and a theme can never make a status unreadable.
public enum Role: UInt8, CaseIterable, Sendable, Comparable {
    case text
    case muted
    case title
    case border
    case header
    case accent
    case ok
    case warn
    case bad
    case alert
    case selection
    case key
    case chart
    case dialog
    case input

    /// The key naming this role in theme files.
    public var key: String {
        switch self {
        case .text: "text"
        case .muted: "muted"
        case .title: "title"
        case .border: "border"
        case .header: "header"
        case .accent: "accent"
        case .ok: "ok"
        case .warn: "warn"
        case .bad: "bad"
        case .alert: "alert"
        case .selection: "selection"
        case .key: "key"
        case .chart: "chart"
        case .dialog: "dialog"
        case .input: "input"
        }
    }

    /// What the role is for, as theme files document it.
    public var purpose: String {
        switch self {
        case .text: "ordinary text and the screen background"
        case .muted: "labels and secondary text"
        case .title: "panel titles"
        case .border: "panel borders"
        case .header: "the header bar"
        case .accent: "figures worth a glance"
        case .ok: "healthy status"
        case .warn: "status that needs attention"
        case .bad: "failures and bad status"
        case .alert: "banners that demand action (HALT, KILLED)"
        case .selection: "the selected row and the focused button"
        case .key: "key names in hints and help"
        case .chart: "sparklines and bars"
        case .dialog: "dialog bodies"
        case .input: "text fields"
        }
    }

    public static func < (a: Role, b: Role) -> Bool { a.rawValue < b.rawValue }

    public init?(key: String) {
        guard let r = Role.allCases.first(where: { $0.key == key }) else { return nil }
        self = r
    }
}

/// Text attributes that survive on any terminal, colour or not.
public struct TextAttributes: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let bold = TextAttributes(rawValue: 1 << 0)
    public static let underline = TextAttributes(rawValue: 1 << 1)
    public static let reverse = TextAttributes(rawValue: 1 << 2)
    public static let dim = TextAttributes(rawValue: 1 << 3)

    /// The attribute names, in the order theme files write them.
    public static let names: [(String, TextAttributes)] = [
        ("bold", .bold), ("underline", .underline), ("reverse", .reverse), ("dim", .dim),
    ]

    /// Space-separated names, or `plain` when empty.
    public var names: String {
        let list = TextAttributes.names.filter { contains($0.1) }.map(\.0)
        return list.isEmpty ? "plain" : list.joined(separator: " ")
    }
}

/// One terminal cell: a character, its role and any extra attributes.
///
/// A wide character occupies its own cell with `width == 2` and the cell to its right with `width == 0`
/// (a continuation that painters skip). Eight bytes, so a 200×60 grid compares in microseconds.
public struct Cell: Hashable, Sendable {
    public var scalar: Unicode.Scalar
    public var role: Role
    public var attributes: TextAttributes
    public var width: UInt8

    public init(_ scalar: Unicode.Scalar = " ", role: Role = .text, attributes: TextAttributes = [], width: UInt8 = 1) {
        self.scalar = scalar
        self.role = role
        self.attributes = attributes
        self.width = width
    }

    public static let blank = Cell()
    public var isContinuation: Bool { width == 0 }
}

/// A styled run of text.
public struct Span: Hashable, Sendable {
    public var text: String
    public var role: Role
    public var attributes: TextAttributes

    public init(_ text: String, _ role: Role = .text, _ attributes: TextAttributes = []) {
        self.text = text
        self.role = role
        self.attributes = attributes
    }

    public var width: Int { CharacterWidth.of(text) }
}

/// An off-screen frame of cells: the renderer draws a whole frame into a grid; the terminal backend paints only the
/// cells that differ from the previous frame.
public struct Grid: Hashable, Sendable {
    public private(set) var size: Size
    public private(set) var cells: [Cell]
    /// Where the terminal cursor should be shown (a text field being edited), or nil to hide it.
    public var cursor: Point?
    /// What a mouse click on each area means (dialog buttons, list rows), registered by the widgets that draw
    /// them, so that a click hits exactly what is on screen; later registrations lie on top.
    public private(set) var clickTargets: [ClickRegion] = []

    /// Makes `area` answer clicks with `target`.
    public mutating func register(_ target: ClickTarget, at area: Rect) {
        clickTargets.append(ClickRegion(area: area, target: target))
    }

    /// The target under a click at `point`, if any.
    public func target(at point: Point) -> ClickTarget? {
        clickTargets.last { $0.area.contains(point) }?.target
    }

    public init(size: Size, fill: Cell = .blank) {
        self.size = size
        self.cells = Array(repeating: fill, count: size.width * size.height)
    }

    public var bounds: Rect { Rect(size) }

    public subscript(x: Int, y: Int) -> Cell {
        get { cells[y * size.width + x] }
        set { cells[y * size.width + x] = newValue }
    }

    /// Fills an area with one cell (clipped to the grid).
    public mutating func fill(_ area: Rect, with cell: Cell) {
        let a = area.intersection(bounds)
        guard !a.isEmpty else { return }
        for y in a.y..<a.maxY {
            let base = y * size.width
            for x in a.x..<a.maxX { cells[base + x] = cell }
        }
        repairEdges(a)
    }

    /// Sets the role (and adds attributes) of every cell in an area, keeping the characters.
    public mutating func restyle(_ area: Rect, role: Role, adding attributes: TextAttributes = []) {
        let a = area.intersection(bounds)
        guard !a.isEmpty else { return }
        for y in a.y..<a.maxY {
            let base = y * size.width
            for x in a.x..<a.maxX {
                cells[base + x].role = role
                cells[base + x].attributes.formUnion(attributes)
            }
        }
    }

    /// Writes `text` from (x, y), never past `limit` columns from x or the clip area; returns the columns used.
    ///
    /// This is where all text enters the grid, so it is where text from outside (telemetry error classes,
    /// template values, condition names) is made safe: control characters (C0, DEL, C1) and bidirectional
    /// overrides are shown as `\u001b`-style escapes by `Sanitiser`, the one output sanitiser, so that no
    /// string can drive or reorder the terminal. Text that does not fit is cut and ends in `…`; zero-width
    /// scalars are dropped (the grid holds one scalar per cell).
    @discardableResult
    public mutating func write(
        _ raw: String, x: Int, y: Int, role: Role = .text, attributes: TextAttributes = [], limit: Int? = nil,
        clip: Rect? = nil
    ) -> Int {
        let text = Sanitiser.escape(raw)
        let area = (clip ?? bounds).intersection(bounds)
        guard y >= area.y, y < area.maxY, x < area.maxX else { return 0 }
        let end = min(area.maxX, limit.map { x + max(0, $0) } ?? area.maxX)
        guard x < end else { return 0 }
        let available = end - x
        let needsEllipsis = CharacterWidth.of(text) > available
        let room = needsEllipsis ? available - 1 : available
        var col = x
        let base = y * size.width
        for s in text.unicodeScalars {
            let scalar = s
            let w = CharacterWidth.of(s)
            if w == 0 { continue }
            if col - x + w > room { break }
            if col >= area.x {
                cells[base + col] = Cell(scalar, role: role, attributes: attributes, width: UInt8(w))
                if w == 2 { cells[base + col + 1] = Cell(" ", role: role, attributes: attributes, width: 0) }
            }
            col += w
        }
        if needsEllipsis && col < end && col >= area.x {
            cells[base + col] = Cell("…", role: role, attributes: attributes)
            col += 1
        }
        repairEdges(Rect(x: x, y: y, width: col - x, height: 1))
        return col - x
    }

    /// Writes styled spans one after another, together never wider than `limit`; returns the columns used.
    @discardableResult
    public mutating func write(_ spans: [Span], x: Int, y: Int, limit: Int, clip: Rect? = nil) -> Int {
        var used = 0
        for span in spans where used < limit {
            used += write(
                span.text, x: x + used, y: y, role: span.role, attributes: span.attributes,
                limit: limit - used, clip: clip)
        }
        return used
    }

    /// Keeps wide characters whole at the edges of an area that was just overwritten.
    ///
    /// Overwriting one half of a wide character leaves the other half orphaned; it becomes a space of the same
    /// style, so that the terminal and the grid never disagree about columns.
    private mutating func repairEdges(_ area: Rect) {
        guard !area.isEmpty else { return }
        for y in area.y..<area.maxY {
            let base = y * size.width
            let left = area.x
            if left > 0, left < size.width, cells[base + left - 1].width == 2, !cells[base + left].isContinuation {
                cells[base + left - 1].scalar = " "
                cells[base + left - 1].width = 1
            }
            let right = area.maxX
            if right < size.width, right > 0, cells[base + right].isContinuation, cells[base + right - 1].width != 2 {
                cells[base + right].scalar = " "
                cells[base + right].width = 1
            }
        }
    }

    /// The characters of each row as text (continuation cells omitted), for tests and diagnostics.
    public var lines: [String] {
        (0..<size.height).map { y in
            var s = String.UnicodeScalarView()
            for x in 0..<size.width where !self[x, y].isContinuation { s.append(self[x, y].scalar) }
            return String(s)
        }
    }
}

/// What a click can hit.
public enum ClickTarget: Hashable, Sendable {
    /// A dialog button.
    case button(DialogFocus)
    /// A row of the open list, by its position among the rows shown (after the `/` filter).
    case row(Int)
    /// A published change in the main screen's log: opens that version.
    case version(Int)
}

/// An area of the screen and what a click on it means.
public struct ClickRegion: Hashable, Sendable {
    public var area: Rect
    public var target: ClickTarget
}
