import Console
import Foundation
import Terminal
import TestSupport
import Testing

/// Finding themes: shipped names, files in `themes/`, a team's directory overriding a shipped name, and one clear
/// error for each way a theme cannot be had.
struct ThemeCatalogTests {
    @Test func everyShippedThemeLoadsByNameAndEveryFileInThemesParses() throws {
        for name in Theme.builtInNames {
            #expect(try ThemeCatalog.load(name).name == name)
        }
        let dir = TestSupport.packageRoot.appendingPathComponent("themes")
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".theme") }
        #expect(files.count >= 4)
        for file in files {
            let theme = try ThemeCatalog.load(dir.appendingPathComponent(file).path)
            #expect(theme.name + ".theme" == file)
        }
    }

    @Test func aDirectoryOverridesAShippedName() throws {
        let dir = try TestSupport.temporaryDirectory("themes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let shipped = TestSupport.packageRoot.appendingPathComponent("themes/light.theme")
        try FileManager.default.copyItem(at: shipped, to: dir.appendingPathComponent("default.theme"))
        let overridden = try ThemeCatalog.load("default", directories: [dir.path])
        #expect(overridden.name == "default")
        #expect(overridden != (try ThemeCatalog.load("default")))
    }

    @Test func eachFailureSaysWhat() throws {
        #expect {
            try ThemeCatalog.load("neon")
        } throws: { error in
            "\(error)".contains("unknown theme 'neon'") && "\(error)".contains("light")
        }
        #expect {
            try ThemeCatalog.load("/nonexistent/x.theme")
        } throws: { error in
            "\(error)".contains("/nonexistent/x.theme: cannot read the theme file")
        }
        let dir = try TestSupport.temporaryDirectory("themes")
        defer { try? FileManager.default.removeItem(at: dir) }
        let bad = dir.appendingPathComponent("bad.theme")
        try "this is not a theme\n".write(to: bad, atomically: true, encoding: .utf8)
        #expect(throws: ThemeLoadError.self) { try ThemeCatalog.load(bad.path) }
    }

    @Test func theCycleStartsWithTheGivenThemeAndVisitsEachOnce() throws {
        let first = try ThemeCatalog.load("light")
        let cycle = ThemeCatalog.cycle(startingWith: first)
        #expect(cycle.first?.name == "light")
        #expect(Set(cycle.map(\.name)) == Set(Theme.builtInNames))
        #expect(cycle.count == Theme.builtInNames.count)
    }
}
