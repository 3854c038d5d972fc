import Console
import Rollout
import Telemetry
import Foundation
import Testing
import TestSupport

@Suite("Themes")
struct ThemeTests {
    @Test("the shipped theme files are the compiled-in themes, byte for byte", arguments: Theme.builtInNames)
    func shippedFiles(_ name: String) throws {
        let url = TestSupport.packageRoot.appendingPathComponent("themes/\(name).theme")
        let file = try String(contentsOf: url, encoding: .utf8)
        #expect(Theme.builtInSource(name) == file)
        let theme = try #require(Theme.builtIn(name))
        #expect(theme.name == name)
    }

    @Test("every shipped theme file parses on its own", arguments: Theme.builtInNames)
    func parses(_ name: String) throws {
        let source = try #require(Theme.builtInSource(name))
        _ = try Theme.parse(source, name: name, file: "themes/\(name).theme")
    }

    @Test("the themes directory holds only the shipped themes")
    func directory() throws {
        let files = try FileManager.default.contentsOfDirectory(
            atPath: TestSupport.packageRoot.appendingPathComponent("themes").path)
        #expect(Set(files) == Set(Theme.builtInNames.map { $0 + ".theme" }))
    }

    @Test(
        "errors name the file and the line",
        arguments: [
            ("text = #d0d0d0\n\ntitel = red\n", "my.theme:3: unknown key 'titel'"),
            ("# c\ntext = #12345g\n", "my.theme:2: bad colour '#12345g' for 'text'"),
            ("ok = 256\n", "my.theme:1: bad colour '256' for 'ok'"),
            ("ok = mauve bold\n", "my.theme:1: bad colour 'mauve' for 'ok'"),
            ("ok = red on\n", "my.theme:1: 'on' must be followed by a background colour"),
            ("ok = red on #zzzzzz\n", "my.theme:1: bad colour '#zzzzzz' for 'ok'"),
            ("ok = red blink\n", "my.theme:1: unexpected 'blink' in 'ok'"),
            ("ok.mono = italic\n", "my.theme:1: 'italic' is not an attribute"),
            ("ok = red\nok = blue\n", "my.theme:2: 'ok' is already set on line 1"),
            ("ok red\n", "my.theme:1: expected 'role = colour"),
            ("ok =\n", "my.theme:1: 'ok' has no value"),
            ("ok.color = red\n", "my.theme:1: unknown key 'ok.color'"),
        ])
    func errors(_ source: String, _ prefix: String) {
        do {
            _ = try Theme.parse(source, name: "mine", file: "my.theme")
            Issue.record("no error for \(source.debugDescription)")
        } catch {
            #expect(error.description.hasPrefix(prefix), "\(error.description)")
        }
    }

    @Test("roles a theme leaves out, and .mono keys it leaves out, fall back to the default theme")
    func fallback() throws {
        let theme = try Theme.parse("ok = #00ff00 underline  # comment\n# whole-line comment\n", name: "t", file: "t")
        for role in Role.allCases where role != .ok {
            #expect(theme[role] == Theme.default[role], "\(role)")
        }
        #expect(theme[.ok].foreground == .rgb(0, 255, 0))
        #expect(theme[.ok].attributes == .underline)
        #expect(theme[.ok].monochrome == Theme.default[.ok].monochrome)
    }

    @Test("colour words: hex, palette index, ANSI names, default")
    func colours() throws {
        let theme = try Theme.parse(
            "text = 250 on default\nok = bright-green\nbad = RED on #000000 bold reverse\nmuted = grey\n",
            name: "t", file: "t")
        #expect(theme[.text].foreground == .indexed(250))
        #expect(theme[.text].background == .terminalDefault)
        #expect(theme[.ok].foreground == .indexed(10))
        #expect(
            theme[.bad]
                == ThemeStyle(
                    foreground: .indexed(1), background: .rgb(0, 0, 0),
                    attributes: [.bold, .reverse], monochrome: Theme.default[.bad].monochrome))
        #expect(theme[.muted].foreground == .indexed(8))
    }

    @Test("colour depth degrades from true colour to 256, 16, 8 and monochrome")
    func degradation() throws {
        let theme = try Theme.parse(
            "text = #d0d0d0\ntitle = #5fafff bold\nbad = #ff5f5f on 208\n", name: "t", file: "t")
        let title = theme.resolved(for: .trueColor)[.title]
        #expect(title == CellStyle(foreground: .rgb(0x5FAFFF), background: .terminalDefault, attributes: .bold))
        #expect(theme.resolved(for: .indexed256)[.title].foreground == .index(75))
        #expect(theme.resolved(for: .indexed256)[.bad].background == .index(208))
        #expect(theme.resolved(for: .trueColor)[.bad].background == .rgb(0xFF8700))
        #expect(theme.resolved(for: .ansi16)[.title].foreground == .index(12))
        #expect(theme.resolved(for: .ansi16)[.bad].foreground == .index(9))
        #expect(theme.resolved(for: .ansi8)[.bad].foreground == .index(1))
        let mono = theme.resolved(for: .monochrome)
        for role in Role.allCases {
            #expect(mono[role].foreground == .terminalDefault)
            #expect(mono[role].background == .terminalDefault)
            #expect(mono[role].attributes == theme[role].monochrome)
        }
        #expect(mono[.selection].attributes.contains(.reverse))
        #expect(mono[.alert].attributes == [.reverse, .bold])
    }

    @Test("palette indices above 15 degrade to the nearest ANSI colour; bright ones lose brightness at 8")
    func indexedDegradation() throws {
        let theme = try Theme.parse("ok = 46\nwarn = 11\n", name: "t", file: "t")
        #expect(theme.resolved(for: .ansi16)[.ok].foreground == .index(10))
        #expect(theme.resolved(for: .ansi8)[.warn].foreground == .index(3))
        #expect(Palette.nearest(0xFF, 0xFF, 0xFF, limit: 256) == 231)
        #expect(Palette.nearest(0x80, 0x80, 0x80, limit: 256) == 244)
        #expect(Palette.nearest(0x00, 0x00, 0x00, limit: 256) == 16)
    }

    @Test("colours that collapse into one at a low depth fall back to attributes instead of hiding text")
    func collapse() throws {
        let theme = try Theme.parse("header = #101010 on #000000\n", name: "t", file: "t")
        let style = theme.resolved(for: .ansi8)[.header]
        #expect(style.foreground == .terminalDefault)
        #expect(style.attributes == Theme.default[.header].monochrome)
        #expect(
            theme.resolved(for: .indexed256)[.header].foreground != theme.resolved(for: .indexed256)[.header].background
        )
    }

    @Test("NO_COLOR and --no-color force monochrome; otherwise the terminal's colour count decides")
    func detect() {
        #expect(ColorDepth.detect(colors: 256, noColorFlag: false, environment: ["NO_COLOR": "1"]) == .monochrome)
        #expect(ColorDepth.detect(colors: 256, noColorFlag: false, environment: ["NO_COLOR": ""]) == .indexed256)
        #expect(ColorDepth.detect(colors: 256, noColorFlag: true, environment: [:]) == .monochrome)
        #expect(ColorDepth.detect(colors: 1 << 24, noColorFlag: false, environment: [:]) == .trueColor)
        #expect(ColorDepth.detect(colors: 88, noColorFlag: false, environment: [:]) == .ansi16)
        #expect(ColorDepth.detect(colors: 8, noColorFlag: false, environment: [:]) == .ansi8)
        #expect(ColorDepth.detect(colors: 0, noColorFlag: false, environment: [:]) == .monochrome)
    }

    @Test("in every shipped theme and depth, no role paints text in its own background colour")
    func legible() throws {
        for name in Theme.builtInNames {
            let theme = try #require(Theme.builtIn(name))
            for depth in ColorDepth.allCases {
                let resolved = theme.resolved(for: depth)
                for role in Role.allCases {
                    let s = resolved[role]
                    #expect(
                        s.foreground == .terminalDefault || s.foreground != s.background, "\(name) \(depth) \(role)")
                }
            }
        }
    }

    @Test("status is never colour alone: every verdict and state is spelt out on the monochrome screen")
    func statusInWords() {
        for verdict in VerdictLevel.allCases {
            for (state, held) in RolloutState.allCases.map({ ($0, false) }) + [(.rolling, true)] {
                let model = Fixture.model(state: state, held: held, verdict: verdict, reasons: ["why"])
                let s = Fixture.state(model)
                for size in [Size(width: 80, height: 24), ConsoleScreen.minimumSize] {
                    let text = ConsoleScreen.render(s, size: size).lines.joined(separator: "\n")
                    #expect(text.contains(verdict.symbol + " " + verdict.description), "\(verdict) \(size)")
                    #expect(text.contains(model.condition.stateLabel.text), "\(state) held \(held) \(size)")
                }
            }
        }
    }
}
