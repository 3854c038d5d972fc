import CNcurses
import Console

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the terminal reported: a key, or a change of size.
public enum TerminalInput: Hashable, Sendable {
    case key(Key)
    case resize
    /// A left click at a cell (column, row from the top left), where the terminal reports mouse events.
    case click(Point)
    /// The mouse wheel: -1 a notch up, +1 a notch down.
    case wheel(Int)
}

/// The ncurses backend: paints grids and reads keys. The only type in the product that calls curses.
///
/// It keeps the last grid it painted and sends the terminal only the cells that differ, so an unchanged frame
/// writes nothing at all. It uses `newterm` rather than `initscr` (which exits the process on an unknown `TERM`)
/// and must be used from one thread.
public final class TerminalScreen {
    /// Where and how to open the terminal.
    public struct Options: Sendable {
        public var input: Int32
        public var output: Int32
        /// The terminal type; nil reads `TERM`.
        public var terminalType: String?
        /// Refuse to start unless input and output are terminals (benchmarks paint into a pipe).
        public var requireTTY: Bool
        /// Start colour support; false for NO_COLOR and --no-color so that not even colour resets are sent.
        public var colors: Bool
        /// Ask the terminal to report left clicks (dialog buttons, list rows); text selection then needs Shift.
        public var mouse: Bool

        public init(
            input: Int32 = 0, output: Int32 = 1, terminalType: String? = nil, requireTTY: Bool = true,
            colors: Bool = true, mouse: Bool = true
        ) {
            self.mouse = mouse
            self.input = input
            self.output = output
            self.terminalType = terminalType
            self.requireTTY = requireTTY
            self.colors = colors
        }
    }

    public private(set) var size: Size
    /// Colours the terminal reports (0 when colour is off or unsupported).
    public let colorCount: Int
    public let inputDescriptor: Int32

    private let screen: OpaquePointer
    private let window: UnsafeMutablePointer<WINDOW>
    private let outputFile: UnsafeMutablePointer<FILE>
    private let inputFile: UnsafeMutablePointer<FILE>
    private let outputDescriptor: Int32
    private var previous: Grid?
    private var previousCursor: Point??
    private var paintedTheme: ResolvedTheme?
    private var pairs: [PairKey: Int32] = [:]
    private var closed = false

    private struct PairKey: Hashable {
        var foreground: TerminalColor
        var background: TerminalColor
    }

    public init(_ options: Options = Options()) throws(TerminalError) {
        TerminalScreen.chooseLocale()
        if options.requireTTY {
            guard isatty(options.input) == 1, isatty(options.output) == 1 else { throw .notATerminal }
        }
        let type = options.terminalType ?? getenv("TERM").map { String(cString: $0) }
        guard let type, !type.isEmpty else { throw .noTerminalType }
        var mode = termios()
        let hasMode = tcgetattr(options.output, &mode) == 0

        guard let out = fdopen(dup(options.output), "w"), let inp = fdopen(dup(options.input), "r") else {
            throw .notATerminal
        }
        guard let scr = newterm(type, out, inp) else {
            fclose(out)
            fclose(inp)
            throw .unknownTerminalType(type)
        }
        set_term(scr)
        let cup = tigetstr("cup")
        if cup == nil || Int(bitPattern: cup) == -1 {
            endwin()
            delscreen(scr)
            fclose(out)
            fclose(inp)
            throw .unsuitableTerminal(type)
        }
        screen = scr
        window = rollout_stdscr()
        outputFile = out
        inputFile = inp
        outputDescriptor = options.output
        inputDescriptor = options.input

        cbreak()
        noecho()
        nonl()
        intrflush(window, false)
        keypad(window, true)
        nodelay(window, true)
        // Esc must answer at once: wait at most 25 ms for the rest of an escape sequence.
        set_escdelay(25)
        curs_set(0)
        if options.mouse {
            mouseinterval(0)
            _ = mousemask(rollout_click_mask(), nil)
        }
        if options.colors && has_colors() {
            start_color()
            use_default_colors()
            colorCount = Int(rollout_colors())
        } else {
            colorCount = 0
        }
        var h: Int32 = 0
        var w: Int32 = 0
        rollout_getmaxyx(window, &h, &w)
        size = Size(width: Int(w), height: Int(h))
        if hasMode {
            // On a signal the terminal also stops reporting clicks (endwin does that on a normal exit).
            let mouseOff = options.mouse ? Array("\u{1B}[?1000l".utf8) : []
            SignalTrap.arm(fd: options.output, mode: mode, reset: TerminalScreen.resetSequence() + mouseOff)
        }
    }

    deinit { close() }

    /// Gives the terminal back: leaves curses mode, shows the cursor, restores the line settings.
    public func close() {
        guard !closed else { return }
        closed = true
        curs_set(1)
        endwin()
        delscreen(screen)
        fclose(outputFile)
        fclose(inputFile)
    }

    /// Paints a grid, sending only the cells that changed since the last paint; returns how many it sent.
    @discardableResult
    public func paint(_ grid: Grid, theme: ResolvedTheme) -> Int {
        if paintedTheme != theme {
            paintedTheme = theme
            previous = nil
        }
        if previous?.size != grid.size {
            previous = nil
            werase(window)
        }
        var written = 0
        let width = grid.size.width
        let cells = grid.cells
        let old = previous?.cells
        var wide: [wchar_t] = [0, 0]
        var cc = cchar_t()
        for y in 0..<grid.size.height {
            let base = y * width
            for x in 0..<width {
                let cell = cells[base + x]
                if cell.isContinuation { continue }
                if let old {
                    // A wide character is redrawn when either of its halves changed.
                    let same =
                        old[base + x] == cell
                        && (cell.width != 2 || x + 1 >= width || old[base + x + 1] == cells[base + x + 1])
                    if same { continue }
                }
                let style = theme.style(for: cell)
                var pair = pairNumber(style)
                wide[0] = wchar_t(bitPattern: cell.scalar.value)
                setcchar(&cc, wide, attributes(style.attributes), Int16(truncatingIfNeeded: pair), &pair)
                mvwadd_wch(window, Int32(y), Int32(x), &cc)
                written += 1
            }
        }
        let cursorChanged = previousCursor != .some(grid.cursor)
        if cursorChanged {
            if let c = grid.cursor {
                curs_set(1)
                wmove(window, Int32(c.y), Int32(c.x))
            } else {
                curs_set(0)
            }
            previousCursor = .some(grid.cursor)
        }
        if written > 0 || cursorChanged {
            if let c = grid.cursor { wmove(window, Int32(c.y), Int32(c.x)) }
            wnoutrefresh(window)
            doupdate()
        }
        previous = grid
        return written
    }

    /// Rings the terminal's bell (curses `beep`: the audible bell, or a visible flash where there is none).
    public func bell() {
        _ = beep()
        doupdate()
    }

    /// Forgets what is on the terminal, so the next paint redraws everything (Ctrl-L, after a resume).
    public func invalidate() {
        previous = nil
        previousCursor = nil
        clearok(window, true)
    }

    /// Reads the terminal's size again after SIGWINCH and tells curses about it.
    public func refreshSize() {
        var ws = winsize()
        if ioctl(outputDescriptor, UInt(TIOCGWINSZ), &ws) == 0, ws.ws_row > 0, ws.ws_col > 0 {
            resizeterm(Int32(ws.ws_row), Int32(ws.ws_col))
        }
        var h: Int32 = 0
        var w: Int32 = 0
        rollout_getmaxyx(window, &h, &w)
        size = Size(width: Int(w), height: Int(h))
        previous = nil
    }

    /// The next key or resize, or nil when no input is waiting.
    public func nextInput() -> TerminalInput? {
        var value: wint_t = 0
        let kind = wget_wch(window, &value)
        if kind == KEY_CODE_YES {
            let code = Int32(bitPattern: value)
            if code == rollout_key_mouse() {
                var x: Int32 = 0
                var y: Int32 = 0
                switch rollout_mouse_event(&x, &y) {
                case 1: return .click(Point(x: Int(x), y: Int(y)))
                case 2: return .wheel(-1)
                case 3: return .wheel(1)
                default: return nextInput()
                }
            }
            if code == rollout_key_resize() {
                var h: Int32 = 0
                var w: Int32 = 0
                rollout_getmaxyx(window, &h, &w)
                size = Size(width: Int(w), height: Int(h))
                previous = nil
                return .resize
            }
            return TerminalScreen.functionKey(code).map(TerminalInput.key) ?? nextInput()
        }
        guard kind == OK else { return nil }
        return TerminalScreen.character(value).map(TerminalInput.key) ?? nextInput()
    }

    // MARK: Mapping

    static func functionKey(_ code: Int32) -> Key? {
        switch code {
        case KEY_UP: .up
        case KEY_DOWN: .down
        case KEY_LEFT: .left
        case KEY_RIGHT: .right
        case KEY_HOME: .home
        case KEY_END: .end
        case KEY_PPAGE: .pageUp
        case KEY_NPAGE: .pageDown
        case KEY_BACKSPACE: .backspace
        case KEY_DC: .delete
        case KEY_BTAB: .backTab
        case KEY_ENTER: .enter
        case KEY_F0 + 1...KEY_F0 + 24: .function(Int(code - KEY_F0))
        default: nil
        }
    }

    static func character(_ value: wint_t) -> Key? {
        switch value {
        case 13, 10: return .enter
        case 27: return .escape
        case 9: return .tab
        case 127, 8: return .backspace
        case 1...26: return .control(Character(Unicode.Scalar(UInt8(value) + 96)))
        case 0..<32: return nil
        default:
            guard let scalar = Unicode.Scalar(value) else { return nil }
            return .character(Character(scalar))
        }
    }

    private func attributes(_ a: TextAttributes) -> attr_t {
        var result = rollout_a_normal()
        if a.contains(.bold) { result |= rollout_a_bold() }
        if a.contains(.underline) { result |= rollout_a_underline() }
        if a.contains(.reverse) { result |= rollout_a_reverse() }
        if a.contains(.dim) { result |= rollout_a_dim() }
        return result
    }

    /// The colour pair for a style, created on first use (pair 0 is the terminal's default colours).
    private func pairNumber(_ style: CellStyle) -> Int32 {
        guard colorCount > 0 else { return 0 }
        let key = PairKey(foreground: style.foreground, background: style.background)
        if key.foreground == .terminalDefault && key.background == .terminalDefault { return 0 }
        if let n = pairs[key] { return n }
        let n = Int32(pairs.count + 1)
        guard n < rollout_color_pairs() else { return 0 }
        init_extended_pair(n, colorNumber(key.foreground), colorNumber(key.background))
        pairs[key] = n
        return n
    }

    private func colorNumber(_ color: TerminalColor) -> Int32 {
        switch color {
        case .terminalDefault: -1
        case .index(let n): Int32(min(n, max(0, colorCount - 1)))
        case .rgb(let v): Int32(bitPattern: v)
        }
    }

    /// `setlocale` first, so curses sees UTF-8; falls back to C.UTF-8 when the environment's locale is not UTF-8.
    static func chooseLocale() {
        setlocale(LC_ALL, "")
        let codeset = String(cString: nl_langinfo(nl_item(CODESET)))
        if String(codeset.uppercased().filter { $0 != "-" }) != "UTF8" {
            setlocale(LC_CTYPE, "C.UTF-8")
        }
    }

    /// The terminal's own strings to leave the alternate screen, show the cursor and reset attributes.
    static func resetSequence() -> [UInt8] {
        var bytes: [UInt8] = []
        for cap in ["sgr0", "cnorm", "rmkx", "rmcup"] {
            guard let s = tigetstr(cap), Int(bitPattern: s) != -1 else { continue }
            var p = s
            while p.pointee != 0 {
                bytes.append(UInt8(bitPattern: p.pointee))
                p += 1
            }
        }
        return bytes + [13, 10]
    }
}
