import Console
import Glibc
import Platform

/// Finds themes by name or path: the file system edge of theming (parsing itself is pure, in Console).
public enum ThemeCatalog {
    /// Loads a theme given as a name (`light`) or a path (`./mine.theme`, anything with a `/`).
    ///
    /// A name is looked up as `NAME.theme` in `directories` first (so a team can override a shipped theme), then
    /// among the shipped themes.
    public static func load(_ nameOrPath: String, directories: [String] = []) throws(ThemeLoadError) -> Theme {
        if nameOrPath.contains("/") || nameOrPath.hasSuffix(".theme") {
            return try loadFile(nameOrPath)
        }
        for directory in directories {
            let path = Path.join(directory, nameOrPath + ".theme")
            if Files.exists(path) { return try loadFile(path) }
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

    static func loadFile(_ path: String) throws(ThemeLoadError) -> Theme {
        let text: String
        do {
            text = String(decoding: try Files.read(path, limit: 1 << 20), as: UTF8.self)
        } catch {
            throw ThemeLoadError("\(path): cannot read the theme file (\(error.reason))")
        }
        do {
            return try Theme.parse(text, name: Path.deletingExtension(Path.lastComponent(of: path)), file: path)
        } catch {
            throw ThemeLoadError(error)
        }
    }
}
