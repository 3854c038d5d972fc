/// The xterm colour palette and nearest-colour mapping for degrading themes to fewer colours.
public enum Palette {
    /// The 16 ANSI colours as xterm shows them by default.
    static let ansi: [(UInt8, UInt8, UInt8)] = [
        (0x00, 0x00, 0x00), (0xCD, 0x00, 0x00), (0x00, 0xCD, 0x00), (0xCD, 0xCD, 0x00),
        (0x00, 0x00, 0xEE), (0xCD, 0x00, 0xCD), (0x00, 0xCD, 0xCD), (0xE5, 0xE5, 0xE5),
        (0x7F, 0x7F, 0x7F), (0xFF, 0x00, 0x00), (0x00, 0xFF, 0x00), (0xFF, 0xFF, 0x00),
        (0x5C, 0x5C, 0xFF), (0xFF, 0x00, 0xFF), (0x00, 0xFF, 0xFF), (0xFF, 0xFF, 0xFF),
    ]

    /// The levels of the 6×6×6 colour cube (indices 16–231).
    static let cubeLevels: [UInt8] = [0, 95, 135, 175, 215, 255]

    /// The RGB value of a 256-colour palette index.
    public static func rgb(ofIndex index: UInt8) -> (UInt8, UInt8, UInt8) {
        let i = Int(index)
        if i < 16 { return ansi[i] }
        if i < 232 {
            let c = i - 16
            return (cubeLevels[c / 36], cubeLevels[c / 6 % 6], cubeLevels[c % 6])
        }
        let g = UInt8(8 + (i - 232) * 10)
        return (g, g, g)
    }

    /// The palette index in `0..<limit` (8, 16 or 256) closest to a colour.
    public static func nearest(_ r: UInt8, _ g: UInt8, _ b: UInt8, limit: Int) -> Int {
        if limit > 16 {
            // Only the cube and the grey ramp: the first 16 are redefined by many users' terminal settings.
            let cube = 16 + 36 * cubeIndex(r) + 6 * cubeIndex(g) + cubeIndex(b)
            let average = (Int(r) + Int(g) + Int(b)) / 3
            let grey = 232 + min(23, max(0, (average - 3) / 10))
            return distance(rgb(ofIndex: UInt8(cube)), (r, g, b)) <= distance(rgb(ofIndex: UInt8(grey)), (r, g, b))
                ? cube : grey
        }
        return nearestANSI(r, g, b, bright: limit >= 16)
    }

    /// The closest of the 8 or 16 ANSI colours, keeping hue rather than raw distance.
    ///
    /// Nearest-by-distance sends pastel reds and blues to grey; for an on-call screen a warning must stay reddish.
    /// Colours with little saturation map to the nearest grey (black, grey, white); the others to the ANSI colour
    /// of their hue sector, in its bright variant when the colour is light.
    static func nearestANSI(_ r: UInt8, _ g: UInt8, _ b: UInt8, bright: Bool) -> Int {
        let high = max(r, g, b)
        let low = min(r, g, b)
        let saturation = high == 0 ? 0 : Double(high - low) / Double(high)
        if saturation < 0.3 {
            let greys = bright ? [0, 8, 7, 15] : [0, 7]
            return greys.min { distance(ansi[$0], (r, g, b)) < distance(ansi[$1], (r, g, b)) }!
        }
        let (rd, gd, bd) = (Double(r), Double(g), Double(b))
        let span = Double(high - low)
        var hue: Double
        if high == r {
            hue = 60 * (gd - bd) / span
        } else if high == g {
            hue = 120 + 60 * (bd - rd) / span
        } else {
            hue = 240 + 60 * (rd - gd) / span
        }
        if hue < 0 { hue += 360 }
        // Sectors of 60° centred on red, yellow, green, cyan, blue, magenta.
        let sector = Int((hue / 60).rounded()) % 6
        let base = [1, 3, 2, 6, 4, 5][sector]
        return bright && (high >= 0xF0 || low >= 0x50) ? base + 8 : base
    }

    /// A theme colour as the backend paints it at `depth` (not monochrome).
    static func convert(_ color: ThemeColor, to depth: ColorDepth) -> TerminalColor {
        switch (color, depth) {
        case (.terminalDefault, _), (_, .monochrome):
            return .terminalDefault
        case (.rgb(let r, let g, let b), .trueColor):
            return .rgb(UInt32(r) << 16 | UInt32(g) << 8 | UInt32(b))
        case (.indexed(let n), .trueColor):
            let (r, g, b) = rgb(ofIndex: n)
            return .rgb(UInt32(r) << 16 | UInt32(g) << 8 | UInt32(b))
        case (.indexed(let n), .indexed256):
            return .index(Int(n))
        case (.indexed(let n), .ansi16) where n < 16, (.indexed(let n), .ansi8) where n < 8:
            return .index(Int(n))
        case (.indexed(let n), .ansi8) where n < 16:
            return .index(Int(n) - 8)
        case (.indexed(let n), _):
            let (r, g, b) = rgb(ofIndex: n)
            return .index(nearest(r, g, b, limit: depth == .ansi16 ? 16 : 8))
        case (.rgb(let r, let g, let b), _):
            return .index(nearest(r, g, b, limit: depth == .indexed256 ? 256 : depth == .ansi16 ? 16 : 8))
        }
    }

    private static func cubeIndex(_ v: UInt8) -> Int {
        // Level boundaries halfway between 0, 95, 135, 175, 215, 255.
        v < 48 ? 0 : v < 115 ? 1 : Int(v - 35) / 40
    }

    /// Perceptual distance ("redmean" weighting), squared.
    private static func distance(_ a: (UInt8, UInt8, UInt8), _ b: (UInt8, UInt8, UInt8)) -> Int {
        let rm = (Int(a.0) + Int(b.0)) / 2
        let dr = Int(a.0) - Int(b.0)
        let dg = Int(a.1) - Int(b.1)
        let db = Int(a.2) - Int(b.2)
        return (((512 + rm) * dr * dr) >> 8) + 4 * dg * dg + (((767 - rm) * db * db) >> 8)
    }

    static func hex(_ v: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return String([digits[Int(v >> 4)], digits[Int(v & 0xF)]])
    }
}
