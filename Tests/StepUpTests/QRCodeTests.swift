import Foundation
import StepUp
import Testing
import TestSupport

/// The terminal QR code: its geometry, agreement with Debian's `qrencode` command (same library, its own
/// drawing code), and a real decode of our drawing with `zbarimg` (Debian's zbar-tools).
@Suite("QR code in the terminal")
struct QRCodeTests {
    static let uri = OTPAuthURI(
        secret: TOTPSecret(bytes: Array("12345678901234567890".utf8)), issuer: "rollout", account: "ana@laptop"
    ).absoluteString

    @Test func geometryAndQuietZone() throws {
        let matrix = try QRCodeMatrix(encoding: Self.uri)
        #expect(matrix.size == 17 + 4 * matrix.version)
        #expect((1...40).contains(matrix.version))
        for quiet in [0, 1, 2, 4] {
            let side = matrix.size + 2 * quiet
            let lines = TerminalQR.lines(matrix, style: .lightOnDark, quietZone: quiet)
            #expect(lines.count == (side + 1) / 2)
            #expect(lines.allSatisfy { $0.count == side })
            // The first quiet / 2 lines and the first and last quiet columns are all light.
            for line in lines.prefix(quiet / 2) { #expect(line.allSatisfy { $0 == "█" }) }
            for line in lines {
                #expect(line.prefix(quiet).allSatisfy { $0 == "█" })
                #expect(line.suffix(quiet).allSatisfy { $0 == "█" })
            }
        }
        // The finder pattern's dark top-left corner sits right inside the quiet zone.
        #expect(matrix.isDark(x: 0, y: 0))
        #expect(!matrix.isDark(x: -1, y: 0))
        #expect(!matrix.isDark(x: 0, y: matrix.size))
    }

    /// An enrolment's code fits 80 columns with the standard quiet zone, and 23 lines with a quiet zone of 2
    /// (what the CLI draws on a 24-line terminal) for an id of up to 22 characters such as `ana.lopez@laptop-1234`;
    /// longer ids need a version-7 symbol and a taller terminal.
    @Test func enrolmentCodeFitsAnEightyByTwentyFourTerminal() throws {
        let long = OTPAuthURI(
            secret: .generate(), issuer: Enrolment.issuer, account: String(repeating: "o", count: 40) + "@example.com")
        #expect(
            TerminalQR.lines(try QRCodeMatrix(encoding: long.absoluteString), style: .lightOnDark).allSatisfy {
                $0.count <= 80
            })
        let usual = OTPAuthURI(secret: .generate(), issuer: Enrolment.issuer, account: "ana.lopez@laptop-12345")
        let matrix = try QRCodeMatrix(encoding: usual.absoluteString)
        #expect(matrix.size == 41)
        #expect(TerminalQR.lines(matrix, style: .fixedColors, quietZone: 2).count == 23)
        #expect(TerminalQR.lines(matrix, style: .fixedColors, quietZone: 4).count == 25)
    }

    @Test(arguments: [(TerminalQR.Style.lightOnDark, "UTF8"), (.darkOnLight, "UTF8i")])
    func matchesTheQrencodeCommand(style: TerminalQR.Style, type: String) throws {
        for text in [Self.uri, "hello", "otpauth://totp/rollout:x?secret=MZXW6YTBOI"] {
            let ours = TerminalQR.render(try QRCodeMatrix(encoding: text), style: style, quietZone: 4)
            let theirs = try TestSupport.run("/usr/bin/qrencode", ["-t", type, "-l", "L", "-m", "4", "-o", "-", text])
            try #require(theirs.status == 0, "qrencode failed (install Debian's qrencode): \(theirs.stderr)")
            #expect(ours == theirs.stdout)
        }
    }

    @Test func fixedColorsSetBothForegroundAndBackground() throws {
        let matrix = try QRCodeMatrix(encoding: Self.uri)
        let plain = TerminalQR.lines(matrix, style: .lightOnDark)
        let colored = TerminalQR.lines(matrix, style: .fixedColors)
        #expect(colored.count == plain.count)
        for (c, p) in zip(colored, plain) {
            #expect(c == "\u{1B}[97;40m" + p + "\u{1B}[0m")
        }
    }

    /// Reads our drawing back cell by cell, paints it into a bitmap and lets zbar decode it.
    @Test(arguments: TerminalQR.Style.allCases, [2, 4])
    func zbarDecodesTheDrawing(style: TerminalQR.Style, quietZone: Int) throws {
        let matrix = try QRCodeMatrix(encoding: Self.uri)
        let lines = TerminalQR.lines(matrix, style: style, quietZone: quietZone)
        let light = try Self.lightModules(lines, lightIsDrawn: style != .darkOnLight)
        let directory = try TestSupport.temporaryDirectory("stepup-qr")
        defer { try? FileManager.default.removeItem(at: directory) }
        let image = directory.appendingPathComponent("code.pbm")
        try Self.pbm(light, scale: 4).write(to: image, atomically: true, encoding: .ascii)
        let result = try TestSupport.run("/usr/bin/zbarimg", ["--quiet", "--raw", "--nodbus", image.path])
        try #require(result.status == 0, "zbarimg could not decode the drawing (Debian's zbar-tools): \(result.stderr)")
        #expect(result.stdout == Self.uri + "\n")
    }

    @Test func textTooLongForAnySymbolIsAnError() {
        #expect(throws: QRCodeError.self) { try QRCodeMatrix(encoding: String(repeating: "x", count: 4000)) }
    }

    /// Light/dark of every module of a half-block drawing (ANSI colour codes stripped).
    static func lightModules(_ lines: [String], lightIsDrawn: Bool) throws -> [[Bool]] {
        var rows: [[Bool]] = []
        for line in lines {
            let cells = line.replacingOccurrences(of: "\u{1B}[97;40m", with: "").replacingOccurrences(
                of: "\u{1B}[0m", with: "")
            var top: [Bool] = []
            var bottom: [Bool] = []
            for c in cells {
                let drawn: (Bool, Bool)
                switch c {
                case "█": drawn = (true, true)
                case "▀": drawn = (true, false)
                case "▄": drawn = (false, true)
                case " ": drawn = (false, false)
                default: throw TestSupport.Failure("unexpected character \(c) in the drawing")
                }
                top.append(drawn.0 == lightIsDrawn)
                bottom.append(drawn.1 == lightIsDrawn)
            }
            rows += [top, bottom]
        }
        return rows
    }

    /// A plain PBM (1 = black) with each module `scale` pixels square.
    static func pbm(_ light: [[Bool]], scale: Int) -> String {
        let width = (light.first?.count ?? 0) * scale
        var out = "P1\n\(width) \(light.count * scale)\n"
        for row in light {
            let line = row.flatMap { Array(repeating: $0 ? "0" : "1", count: scale) }.joined(separator: " ")
            for _ in 0..<scale { out += line + "\n" }
        }
        return out
    }
}
