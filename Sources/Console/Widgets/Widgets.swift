/// A line of styled spans, the unit most panels are built from.
public typealias Line = [Span]

extension Grid {
    /// Draws lines top to bottom into an area, one per row, cutting what does not fit.
    public mutating func draw(_ lines: [Line], in area: Rect) {
        for (i, line) in lines.prefix(area.height).enumerated() {
            write(line, x: area.x, y: area.y + i, limit: area.width, clip: area)
        }
    }

    /// Draws a line right-aligned in a one-row area; returns the column it starts at.
    @discardableResult
    public mutating func drawRight(_ line: Line, in area: Rect) -> Int {
        let width = min(area.width, line.reduce(0) { $0 + $1.width })
        let x = area.maxX - width
        write(line, x: x, y: area.y, limit: width, clip: area)
        return x
    }
}

/// A box with a title set into its top border, like a panel in htop or k9s.
public struct Frame: Sendable {
    public var title: Line
    /// Spans set into the top border at the right.
    public var status: Line
    public var role: Role

    public init(title: Line, status: Line = [], role: Role = .border) {
        self.title = title
        self.status = status
        self.role = role
    }

    /// Draws the frame and returns the area inside it (one column of padding left and right).
    @discardableResult
    public func render(into grid: inout Grid, area: Rect) -> Rect {
        guard area.width >= 2, area.height >= 2 else { return Rect(x: area.x, y: area.y, width: 0, height: 0) }
        let top = area.y
        let bottom = area.maxY - 1
        let right = area.maxX - 1
        grid.fill(area.inset(dx: 1, dy: 1), with: .blank)
        for x in area.x + 1..<right {
            grid[x, top] = Cell("─", role: role)
            grid[x, bottom] = Cell("─", role: role)
        }
        for y in top + 1..<bottom {
            grid[area.x, y] = Cell("│", role: role)
            grid[right, y] = Cell("│", role: role)
        }
        grid[area.x, top] = Cell("┌", role: role)
        grid[right, top] = Cell("┐", role: role)
        grid[area.x, bottom] = Cell("└", role: role)
        grid[right, bottom] = Cell("┘", role: role)
        let room = area.width - 4
        if room > 2 {
            let titleWidth = title.isEmpty ? 0 : min(room, title.width + 2)
            if titleWidth > 2 {
                grid.write([Span(" ", role)] + title + [Span(" ", role)], x: area.x + 1, y: top, limit: titleWidth)
            }
            let statusRoom = room - titleWidth - 1
            let statusWidth = status.isEmpty ? 0 : min(statusRoom, status.width + 2)
            if statusWidth > 2 {
                grid.drawRight(
                    [Span(" ", role)] + status + [Span(" ", role)],
                    in: Rect(x: right - 1 - statusWidth, y: top, width: statusWidth, height: 1))
            }
        }
        return Rect(x: area.x + 2, y: area.y + 1, width: area.width - 4, height: area.height - 2)
    }
}

/// A sparkline or small bar chart of counts, newest at the right, scaled to the largest value shown.
public struct Sparkline: Sendable {
    static let blocks: [Unicode.Scalar] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"]

    public var values: [Int]
    public var role: Role

    public init(values: [Int], role: Role = .chart) {
        self.values = values
        self.role = role
    }

    /// The chart as `rows` lines of `width` columns (top line first).
    public func lines(width: Int, rows: Int) -> [Line] {
        guard width > 0, rows > 0 else { return [] }
        let shown = Array(values.suffix(width))
        let peak = max(1, shown.max() ?? 0)
        let eighths = rows * 8
        let levels = shown.map { v -> Int in
            guard v > 0 else { return 0 }
            return max(1, Int((Double(v) / Double(peak) * Double(eighths)).rounded()))
        }
        let pad = width - shown.count
        return (0..<rows).map { r in
            let rowFromBottom = rows - 1 - r
            var text = String.UnicodeScalarView()
            text.append(contentsOf: repeatElement(" ", count: pad))
            for level in levels {
                text.append(Sparkline.blocks[min(8, max(0, level - rowFromBottom * 8))])
            }
            return [Span(String(text), role)]
        }
    }
}

/// A horizontal bar showing a share of 0...1 in eighths of a cell.
public enum Gauge {
    static let partial: [Unicode.Scalar] = ["▏", "▎", "▍", "▌", "▋", "▊", "▉"]

    public static func line(_ share: Double?, width: Int, role: Role = .chart) -> Line {
        guard width > 0 else { return [] }
        guard let share, share.isFinite else { return [Span(String(repeating: "·", count: width), .muted)] }
        let clamped = min(1, max(0, share))
        let eighths = Int((clamped * Double(width * 8)).rounded())
        var filled = String.UnicodeScalarView()
        filled.append(contentsOf: repeatElement("█", count: eighths / 8))
        if eighths % 8 > 0 { filled.append(partial[eighths % 8 - 1]) }
        let used = filled.count
        return [Span(String(filled), role), Span(String(repeating: "░", count: width - used), .muted)]
    }
}

/// Two buttons, Cancel first; the focused one is marked with arrows as well as by its role, so focus shows
/// without colour.
public enum Buttons {
    public static func line(cancel: String, act: String, focus: DialogFocus, width: Int) -> Line {
        func button(_ label: String, focused: Bool) -> Span {
            focused ? Span("▶ " + label + " ◀", .selection, .bold) : Span("[ " + label + " ]", .dialog)
        }
        let spans = [button(cancel, focused: focus == .cancel), Span("   "), button(act, focused: focus == .act)]
        let total = spans.reduce(0) { $0 + $1.width }
        let lead = max(0, (width - total) / 2)
        return [Span(String(repeating: " ", count: lead))] + spans
    }
}

/// A one-row text field drawn with its cursor; scrolls horizontally to keep the cursor visible.
public enum TextInput {
    public static func render(_ field: TextField, into grid: inout Grid, area: Rect) {
        guard !area.isEmpty else { return }
        let row = area.row(0)
        grid.fill(row, with: Cell(" ", role: .input))
        let shown = Array(field.displayText)
        let room = max(1, row.width - 1)
        let start = max(0, field.cursor - room + 1)
        var x = row.x
        var cursorX = row.x
        for (i, ch) in shown.enumerated() where i >= start {
            if i == field.cursor { cursorX = x }
            let w = max(1, CharacterWidth.of(String(ch)))
            if x + w > row.maxX { break }
            // A selected (pre-filled) text is drawn as a selection, so that typing is seen to replace it.
            grid.write(String(ch), x: x, y: row.y, role: field.isSelected ? .selection : .input, limit: w, clip: row)
            x += w
        }
        if field.cursor >= shown.count { cursorX = x }
        grid.cursor = Point(x: min(cursorX, row.maxX - 1), y: row.y)
    }
}

/// The key hint bar: as many hints as fit, most important first, shown in table order.
public enum HintBar {
    public struct Item: Hashable, Sendable {
        public var keys: String
        public var label: String
        public var priority: Int

        public init(_ keys: String, _ label: String, priority: Int = 0) {
            self.keys = keys
            self.label = label
            self.priority = priority
        }

        var width: Int { CharacterWidth.of(keys) + 1 + CharacterWidth.of(label) }
    }

    public static func line(_ items: [Item], width: Int) -> Line {
        let gap = 2
        var chosen = Set<Int>()
        var used = 0
        for (index, item) in items.enumerated().sorted(by: { ($0.1.priority, $0.0) < ($1.1.priority, $1.0) }) {
            let w = item.width + (chosen.isEmpty ? 0 : gap)
            if used + w > width - 1 { continue }
            chosen.insert(index)
            used += w
        }
        var line: Line = [Span(" ")]
        for (index, item) in items.enumerated() where chosen.contains(index) {
            if line.count > 1 { line.append(Span("  ")) }
            line.append(Span(item.keys, .key))
            line.append(Span(" " + item.label, .muted))
        }
        return line
    }
}
