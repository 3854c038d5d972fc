import CQRencode
import Glibc

/// A QR code symbol as a square matrix of modules, encoded by Debian's libqrencode.
///
/// Only the encoding comes from the library; drawing it for a terminal is `TerminalQR`'s job.
public struct QRCodeMatrix: Sendable, Equatable {
    /// The error-correction levels of ISO/IEC 18004.
    public enum Level: Sendable { case low, medium, quartile, high }

    /// The symbol version (1...40); the side is `17 + 4 * version` modules.
    public let version: Int
    /// Modules per side, without any quiet zone.
    public let size: Int
    /// Row-major; `true` is a dark module.
    public let modules: [Bool]

    /// Encodes `text` in the smallest symbol that holds it, the way the `qrencode` command does by default
    /// (its mode hint is 8-bit and it is case-sensitive: digits and upper-case runs still get the denser modes).
    public init(encoding text: String, level: Level = .low) throws(QRCodeError) {
        let ecLevel: QRecLevel
        switch level {
        case .low: ecLevel = QR_ECLEVEL_L
        case .medium: ecLevel = QR_ECLEVEL_M
        case .quartile: ecLevel = QR_ECLEVEL_Q
        case .high: ecLevel = QR_ECLEVEL_H
        }
        errno = 0
        guard let symbol = QRcode_encodeString(text, 0, ecLevel, QR_MODE_8, 1) else {
            let reason =
                errno == ERANGE
                ? "too long for a QR code (\(text.utf8.count) bytes)"
                : rollout_qrencode_unavailable().map { String(cString: $0) } ?? "libqrencode failed (errno \(errno))"
            throw QRCodeError(description: "cannot draw the QR code: \(reason)")
        }
        defer { QRcode_free(symbol) }
        let width = Int(symbol.pointee.width)
        version = Int(symbol.pointee.version)
        size = width
        // Bit 0 of each byte is the module's colour; the other bits describe its role (finder, timing, ...).
        modules = (0..<width * width).map { symbol.pointee.data[$0] & 1 == 1 }
    }

    /// Wraps a matrix (for tests and for symbols decoded from a rendering).
    public init(size: Int, modules: [Bool]) {
        precondition(modules.count == size * size, "a QR matrix of side \(size) has \(size * size) modules")
        self.size = size
        self.modules = modules
        version = (size - 17) / 4
    }

    /// Whether the module at column `x`, row `y` is dark; outside the symbol is light (the quiet zone).
    public func isDark(x: Int, y: Int) -> Bool {
        x >= 0 && y >= 0 && x < size && y < size && modules[y * size + x]
    }
}

/// A QR code that cannot be produced, with the reason.
public struct QRCodeError: Error, CustomStringConvertible, Sendable {
    public var description: String
}

/// Draws a QR code in a terminal with half-block characters: one character cell holds two modules stacked.
///
/// A scanner needs dark modules on a light background with a light quiet zone around the symbol. A terminal
/// has its own background, dark or light, so the style decides what is drawn:
/// - `.fixedColors` sets both colours explicitly (bright white on black, light modules drawn as blocks), so the
///   code reads the same in a dark and a light theme. The default wherever colour is allowed.
/// - `.lightOnDark` draws light modules as blocks in the terminal's foreground colour: right for a dark theme
///   (byte for byte what `qrencode -t UTF8` prints).
/// - `.darkOnLight` draws dark modules as blocks: right for a light theme (`qrencode -t UTF8i`).
public enum TerminalQR {
    public enum Style: String, Sendable, CaseIterable {
        case fixedColors = "color"
        case lightOnDark = "dark-terminal"
        case darkOnLight = "light-terminal"
    }

    /// The quiet zone drawn by default, in modules.
    ///
    /// ISO/IEC 18004 asks for 4 modules, which is also what `qrencode` draws; phone cameras reading a screen
    /// are content with less, but 4 keeps the code reliable when the terminal's own background is dark.
    public static let defaultQuietZone = 4

    /// The lines of the drawing, each `size + 2 * quietZone` cells wide, `ceil((size + 2 * quietZone) / 2)`
    /// lines tall. A missing module below the last row counts as light (more quiet zone).
    public static func lines(_ matrix: QRCodeMatrix, style: Style, quietZone: Int = defaultQuietZone) -> [String] {
        let side = matrix.size + 2 * quietZone
        var out: [String] = []
        out.reserveCapacity((side + 1) / 2)
        var y = 0
        while y < side {
            var line = style == .fixedColors ? "\u{1B}[97;40m" : ""
            for x in 0..<side {
                let top = matrix.isDark(x: x - quietZone, y: y - quietZone)
                let bottom = y + 1 < side && matrix.isDark(x: x - quietZone, y: y + 1 - quietZone)
                // What is drawn in the foreground: light modules, or dark ones for a light terminal.
                let drawDark = style == .darkOnLight
                line += glyph(top: top == drawDark, bottom: bottom == drawDark)
            }
            if style == .fixedColors { line += "\u{1B}[0m" }
            out.append(line)
            y += 2
        }
        return out
    }

    /// The drawing as one string with a newline after each line.
    public static func render(_ matrix: QRCodeMatrix, style: Style, quietZone: Int = defaultQuietZone) -> String {
        lines(matrix, style: style, quietZone: quietZone).map { $0 + "\n" }.joined()
    }

    private static func glyph(top: Bool, bottom: Bool) -> String {
        switch (top, bottom) {
        case (true, true): "\u{2588}"  // █
        case (true, false): "\u{2580}"  // ▀
        case (false, true): "\u{2584}"  // ▄
        case (false, false): " "
        }
    }
}
