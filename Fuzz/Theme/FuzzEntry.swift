import Console
import Platform

// libFuzzer entry for the theme file parser. Properties: no trap; an accepted theme resolves at every colour
// depth, and an error names a line of the file.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let theme = try Theme.parse(text, name: "fuzz", file: "fuzz.theme")
        for depth in ColorDepth.allCases { _ = theme.resolved(for: depth) }
    } catch {
        // Lines as the parser counts them (LF or CRLF, `String.textFileLines`).
        let lines = text.textFileLines().count
        precondition(error.line >= 0 && error.line <= lines, "the error names no line of the file")
    }
    return 0
}
