import Console

/// Why the console cannot take over the terminal; each message says what to do instead.
public enum TerminalError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Standard input or output is not a terminal (a pipe, a file, a CI job).
    case notATerminal
    /// `TERM` is not set.
    case noTerminalType
    /// The terminal database has no entry for `TERM`.
    case unknownTerminalType(String)
    /// The terminal cannot move the cursor (e.g. `TERM=dumb`), so it cannot show a full screen.
    case unsuitableTerminal(String)
    /// A theme could not be loaded.
    case theme(ThemeLoadError)

    public var description: String {
        switch self {
        case .notATerminal:
            "rollout console needs an interactive terminal, but standard input or output is not one; "
                + "for a one-shot report use `rollout status` (add --json for scripts)"
        case .noTerminalType:
            "TERM is not set, so the terminal type is unknown; set it (for example TERM=xterm-256color) "
                + "or use `rollout status`"
        case .unknownTerminalType(let term):
            "unknown terminal type '\(term)' (from TERM): no terminfo entry; set TERM to one this system knows, "
                + "for example xterm-256color, or use `rollout status`"
        case .unsuitableTerminal(let term):
            "terminal type '\(term)' cannot move the cursor, so the console cannot draw a screen; "
                + "use a full terminal (TERM=xterm-256color) or `rollout status`"
        case .theme(let error):
            error.description
        }
    }
}

/// A theme named on the command line that could not be used.
public struct ThemeLoadError: Error, Hashable, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension ThemeLoadError {
    init(_ error: ThemeError) { self.init(error.description) }
}
