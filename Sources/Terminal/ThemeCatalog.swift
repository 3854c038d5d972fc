import Console
import FoundationEssentials
import Glibc
import Platform

/// Finds themes by name or path: the file system edge of theming (parsing itself is pure, in Console).
public enum ThemeCatalog {
    /// Loads a theme given as a name (`light`) or a path (`./mine.theme`, anything with a `/`).
    ///
    /// A name is looked up as `NAME.theme` in `directories` first (so a team can override a shipped theme), then
    /// among the shipped themes.
    public static func load(_ nameOrPath: String, directories: [URL] = []) throws(ThemeLoadError) -> Theme {
        if nameOrPath.contains("/") || nameOrPath.hasSuffix(".theme") {
            return try loadFile(URL(fileURLWithPath: nameOrPath))
        }
        for directory in directories {
            let url = directory.appendingPathComponent(nameOrPath + ".theme")
            if FileManager.default.fileExists(atPath: url.path) { return try loadFile(url) }
        }
        if let theme = Theme.builtIn(nameOrPath) { return theme }
        throw ThemeLoadError(
            "unknown theme '\(nameOrPath)'; shipped themes: \(Theme.builtInNames.joined(separator: ", ")), "
                + "or give a path to a .theme file")
    }

    /// The themes `t` cycles through: `first`, then the shipped themes not named like it.
    public static func cycle(startingWith first: Theme) -> [Theme] {
        [first] + Theme.builtInNames.filter { $0 != first.name }.compactMap { Theme.builtIn($0) }
    }

    static func loadFile(_ url: URL) throws(ThemeLoadError) -> Theme {
        let text: String
        do {
            text = String(decoding: try Files.read(url.path, limit: 1 << 20), as: UTF8.self)
        } catch {
            throw ThemeLoadError("\(url.path): cannot read the theme file (\(error.reason))")
        }
        do {
            return try Theme.parse(text, name: url.deletingPathExtension().lastPathComponent, file: url.path)
        } catch {
            throw ThemeLoadError(error)
        }
    }
}
