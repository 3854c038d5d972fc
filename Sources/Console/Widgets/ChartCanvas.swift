import Timekeeping

/// A plotting surface of braille cells: each cell holds 2×4 dots, so a chart of W×H cells has 2W×4H points.
///
/// Up to two series are drawn: the first with a solid line, the second dashed (one cell on, one off), so they
/// stay apart without colour; each cell takes the role of the series that has most dots in it. Bands (an
/// interval) are shaded per cell behind the lines: `░` for the first series' band, `▒` for the second's, `▓`
/// where both overlap. Markers (a published change) are a column of `┊` in the empty cells, with a label at the
/// top.
public struct ChartCanvas: Sendable {
    public let width: Int
    public let height: Int
    /// Dot bits per cell (the braille pattern's low byte).
    var dots: [UInt8]
    /// Dots per series per cell, to decide the cell's role.
    var counts: [[UInt8]]
    /// Band bits per cell: 1 the first series' band, 2 the second's.
    var bands: [UInt8]
    var markers: [(column: Int, label: String)] = []

    public init(width: Int, height: Int) {
        self.width = max(0, width)
        self.height = max(0, height)
        dots = Array(repeating: 0, count: self.width * self.height)
        counts = [Array(repeating: 0, count: self.width * self.height), Array(repeating: 0, count: self.width * self.height)]
        bands = Array(repeating: 0, count: self.width * self.height)
    }

    /// Points across and up.
    public var dotWidth: Int { width * 2 }
    public var dotHeight: Int { height * 4 }

    /// The braille bit of dot (dx, dy) in a cell, dy counted from the cell's top.
    static func bit(_ dx: Int, _ dy: Int) -> UInt8 {
        switch (dx, dy) {
        case (0, 3): 0x40
        case (1, 3): 0x80
        case (0, let r): UInt8(1) << r
        default: UInt8(1) << (dy + 3)
        }
    }

    /// The dot row (from the top) of a value in `range`, clamped to the canvas.
    public func dotRow(_ value: Double, in range: ClosedRange<Double>) -> Int {
        let span = range.upperBound - range.lowerBound
        let share = span > 0 ? (value - range.lowerBound) / span : 0
        let fromBottom = Int((min(1, max(0, share)) * Double(dotHeight - 1)).rounded())
        return dotHeight - 1 - fromBottom
    }

    /// The cell row (from the top) of a value in `range`.
    public func cellRow(_ value: Double, in range: ClosedRange<Double>) -> Int { dotRow(value, in: range) / 4 }

    mutating func setDot(x: Int, y: Int, series: Int) {
        guard x >= 0, x < dotWidth, y >= 0, y < dotHeight else { return }
        let cell = (y / 4) * width + x / 2
        let b = ChartCanvas.bit(x % 2, y % 4)
        if dots[cell] & b == 0 { counts[min(1, series)][cell] &+= 1 }
        dots[cell] |= b
    }

    /// Plots one series: `values[i]` at dot column i (nil: no data, a gap). Consecutive points are joined by a
    /// vertical run so that a jump reads as a line. The second series (`series: 1`) is dashed.
    public mutating func plot(_ values: [Double?], in range: ClosedRange<Double>, series: Int) {
        var previous: Int?
        for (x, value) in values.prefix(dotWidth).enumerated() {
            guard let value, value.isFinite else {
                previous = nil
                continue
            }
            if series == 1 && (x / 2) % 2 == 1 {
                previous = dotRow(value, in: range)
                continue
            }
            let y = dotRow(value, in: range)
            let from = previous.map { min($0, y) } ?? y
            let to = previous.map { max($0, y) } ?? y
            // Join to the previous point through its midpoint, so the step is drawn in this column.
            for row in from...to { setDot(x: x, y: row, series: series) }
            previous = y
        }
    }

    /// Shades the band between `lower[i]` and `upper[i]` at the cells of dot column i.
    public mutating func band(lower: [Double?], upper: [Double?], in range: ClosedRange<Double>, series: Int) {
        for x in 0..<min(dotWidth, lower.count, upper.count) {
            guard let lo = lower[x], let hi = upper[x], lo.isFinite, hi.isFinite else { continue }
            let top = cellRow(max(lo, hi), in: range)
            let bottom = cellRow(min(lo, hi), in: range)
            for row in top...bottom { bands[row * width + x / 2] |= series == 0 ? 1 : 2 }
        }
    }

    /// Marks a column (a published change) with its label.
    public mutating func mark(column: Int, label: String) {
        guard column >= 0, column < width else { return }
        markers.append((column, label))
    }

    /// The canvas as lines of spans, top first.
    public func lines(roles: [Role], bandRoles: [Role] = [.chart, .muted], markerRole: Role = .accent) -> [Line] {
        var marked = [Int: String]()
        for m in markers { marked[m.column] = m.label }
        var labelCells = [Int: (String, Int)]()  // column → (scalar, row 0)
        for m in markers.sorted(by: { $0.column < $1.column }) {
            // The version right of its marker, else left of it, in top-row cells no line or other label uses.
            let label = Array(m.label.unicodeScalars)
            let free = { (start: Int) -> Bool in
                start >= 0 && start + label.count <= self.width
                    && (start..<start + label.count).allSatisfy({
                        labelCells[$0] == nil && marked[$0] == nil && self.dots[$0] == 0
                    })
            }
            guard let start = [m.column + 1, m.column - label.count].first(where: free) else { continue }
            for (i, s) in label.enumerated() { labelCells[start + i] = (String(s), 0) }
        }
        return (0..<height).map { row in
            // Runs of one role become one span each (a row is a handful of spans, not one per cell).
            var line: Line = []
            var run = String.UnicodeScalarView()
            var runRole = Role.text
            func add(_ scalar: Unicode.Scalar, _ role: Role) {
                if role != runRole, !run.isEmpty {
                    line.append(Span(String(run), runRole))
                    run.removeAll(keepingCapacity: true)
                }
                runRole = role
                run.append(scalar)
            }
            for x in 0..<width {
                let cell = row * width + x
                if dots[cell] != 0 {
                    let role = counts[1][cell] > counts[0][cell] ? roles[min(1, roles.count - 1)] : roles[0]
                    add(Unicode.Scalar(0x2800 + UInt32(dots[cell]))!, role)
                } else if row == 0, let (text, _) = labelCells[x] {
                    add(text.unicodeScalars.first!, markerRole)
                } else if marked[x] != nil {
                    add(row == 0 ? "▼" : "┊", markerRole)
                } else if bands[cell] != 0 {
                    let glyph: Unicode.Scalar = bands[cell] == 1 ? "░" : bands[cell] == 2 ? "▒" : "▓"
                    add(glyph, bands[cell] == 2 ? bandRoles[min(1, bandRoles.count - 1)] : bandRoles[0])
                } else {
                    add(" ", .text)
                }
            }
            if !run.isEmpty { line.append(Span(String(run), runRole)) }
            return line
        }
    }
}

/// Time on a chart's horizontal axis: which minutes each dot column covers, and the axis' labels.
public struct ChartTimeAxis: Hashable, Sendable {
    /// The window's end (telemetry time) and its length in minutes.
    public var end: Instant
    public var minutes: Int
    /// Dot columns across the plot.
    public var columns: Int

    public init(end: Instant, minutes: Int, columns: Int) {
        self.end = end
        self.minutes = max(1, minutes)
        self.columns = max(1, columns)
    }

    public var start: Instant { Instant(microseconds: end.microseconds - Int64(minutes) * 60_000_000) }

    /// The minutes (0 = the window's first) dot column `c` covers: at least one, so that a short window repeats a
    /// minute over several columns and a long one sums several minutes into one.
    public func minuteRange(ofColumn c: Int) -> Range<Int> {
        let lo = c * minutes / columns
        let hi = max(lo + 1, (c + 1) * minutes / columns)
        return lo..<min(minutes, hi)
    }

    /// The dot column of an instant, nil outside the window.
    public func column(of t: Instant) -> Int? {
        guard t.microseconds >= start.microseconds, t.microseconds <= end.microseconds else { return nil }
        let share = Double(t.microseconds - start.microseconds) / Double(end.microseconds - start.microseconds)
        return min(columns - 1, Int(share * Double(columns)))
    }

    /// Tick spacing in minutes for a window, chosen so labels (`HH:MM`, 5 wide plus a gap) do not crowd.
    func tickMinutes(cells: Int) -> Int {
        let candidates = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720]
        let fit = max(1, cells / 8)
        return candidates.first { minutes / $0 <= fit } ?? 1440
    }

    /// The axis line (`└──┴───┴─`) and the label line under it, `cells` wide, after a `lead`-column margin.
    public func lines(cells: Int, lead: Int, utcOffsetSeconds: Int) -> [Line] {
        guard cells > 0 else { return [] }
        let step = Int64(tickMinutes(cells: cells)) * 60_000_000
        var axis = Array(repeating: "─", count: cells)
        var labels = Array(repeating: " ", count: cells)
        // Ticks at whole multiples of the step (in the shown time zone).
        let offset = Int64(utcOffsetSeconds) * 1_000_000
        var t = ((start.microseconds + offset + step - 1) / step) * step - offset
        var lastEnd = -1
        while t <= end.microseconds {
            if let c = column(of: Instant(microseconds: t)) {
                let cell = c / 2
                axis[cell] = "┴"
                let text = Array(String(Format.time(Instant(microseconds: t), utcOffsetSeconds: utcOffsetSeconds).prefix(5)))
                let begin = min(max(0, cell - 2), cells - text.count)
                if begin > lastEnd, begin >= 0 {
                    for (i, ch) in text.enumerated() { labels[begin + i] = String(ch) }
                    lastEnd = begin + text.count
                }
            }
            t += step
        }
        let pad = String(repeating: " ", count: max(0, lead - 1))
        return [
            [Span(pad + "└" + axis.joined(), .muted)],
            [Span(String(repeating: " ", count: lead) + labels.joined(), .muted)],
        ]
    }
}
