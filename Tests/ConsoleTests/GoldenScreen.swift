import Console
import Foundation
import Testing

/// Golden text screens: the rendered grid as text plus a per-cell style map, compared with files beside the tests.
///
/// `ROLLOUT_RECORD_GOLDEN=1 swift test --filter ConsoleTests` rewrites the files; a recording run fails on purpose,
/// so that a test can never pass by recording its own expectation.
enum GoldenScreen {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Golden")
    static let recording = ProcessInfo.processInfo.environment["ROLLOUT_RECORD_GOLDEN"] == "1"

    /// The text form of a grid: the characters framed by `|`, then each distinct style with a letter, then the map.
    static func dump(_ grid: Grid, theme: ResolvedTheme, title: String) -> String {
        var out = "# \(title) · \(grid.size) · theme \(theme.name) · \(theme.depth.rawValue)\n"
        for line in grid.lines { out += "|" + line + "|\n" }
        var letters: [CellStyle: Character] = [:]
        var order: [CellStyle] = []
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        var map = ""
        for y in 0..<grid.size.height {
            for x in 0..<grid.size.width {
                let cell = grid[x, y]
                let style = theme.style(for: cell)
                if letters[style] == nil {
                    letters[style] = alphabet[min(order.count, alphabet.count - 1)]
                    order.append(style)
                }
                map.append(cell.isContinuation ? "." : letters[style]!)
            }
            map += "\n"
        }
        out += "styles:\n"
        for style in order { out += "  \(letters[style]!) = \(style)\n" }
        out += "map:\n" + map
        out += "cursor: " + (grid.cursor.map { "\($0.x),\($0.y)" } ?? "hidden") + "\n"
        return out
    }

    /// Compares `actual` with the golden file `name`, or records it when asked to.
    static func check(_ actual: String, name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let url = directory.appendingPathComponent(name + ".txt")
        if recording {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try actual.write(to: url, atomically: true, encoding: .utf8)
            Issue.record(
                "recorded \(name).txt; run again without ROLLOUT_RECORD_GOLDEN to check it",
                sourceLocation: sourceLocation)
            return
        }
        guard let expected = try? String(contentsOf: url, encoding: .utf8) else {
            Issue.record(
                "golden file \(url.path) is missing; record it with ROLLOUT_RECORD_GOLDEN=1",
                sourceLocation: sourceLocation)
            return
        }
        if expected != actual {
            let e = expected.split(separator: "\n", omittingEmptySubsequences: false)
            let a = actual.split(separator: "\n", omittingEmptySubsequences: false)
            let line = zip(e, a).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(e.count, a.count)
            let saved = FileManager.default.temporaryDirectory.appendingPathComponent(name + ".actual.txt")
            try? actual.write(to: saved, atomically: true, encoding: .utf8)
            Issue.record(
                """
                \(name).txt differs at line \(line + 1):
                expected: \(line < e.count ? String(e[line]) : "<end>")
                actual:   \(line < a.count ? String(a[line]) : "<end>")
                (the whole actual screen is in \(saved.path))
                """, sourceLocation: sourceLocation)
        }
    }
}
