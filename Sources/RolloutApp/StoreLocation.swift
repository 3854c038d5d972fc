import CommandLineKit
import Glibc
import Platform

/// Where the store lives and who is acting, resolved from flags, then the environment, then defaults.
public enum StoreLocation {
    /// `--store PATH`, else `$ROLLOUT_STORE`, else `$XDG_STATE_HOME/rollout/rollout.db`, else
    /// `~/.local/state/rollout/rollout.db`.
    ///
    /// An explicit `--store ""` is returned as it is (opening it fails); `resolvedPath` makes it a usage error.
    public static func path(_ invocation: Invocation) -> String {
        if let p = invocation.value("--store") { return p }
        let env = invocation.environment
        if let p = env["ROLLOUT_STORE"], !p.isEmpty { return p }
        return directory(environment: env) + "/rollout.db"
    }

    /// The per-user directory of rollout's files: `$XDG_STATE_HOME/rollout` (an absolute path), else
    /// `~/.local/state/rollout`. The default store and the Firebase state stores live here.
    public static func directory(environment env: [String: String]) -> String {
        let state: String
        if let x = env["XDG_STATE_HOME"], x.hasPrefix("/") {
            state = x
        } else {
            let home = env["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? CurrentUser.home
            state = home + "/.local/state"
        }
        return state + "/rollout"
    }

    /// `path`, with `--store ""` refused as a usage error (it never falls back to another store).
    public static func resolvedPath(_ invocation: Invocation) throws -> String {
        let p = path(invocation)
        guard !p.isEmpty else { throw invocation.usageError("--store needs a file path, not an empty string") }
        return p
    }

    /// Creates the store's directory (mode 0700) when it is missing.
    public static func prepareDirectory(for path: String) throws {
        do { try Files.makeDirectories(Path.directory(of: path), mode: 0o700) } catch {
            throw CommandError("cannot create the store directory \(error.path): \(error.reason)")
        }
    }

    /// `--operator`, else `$ROLLOUT_OPERATOR`, else `user@host`.
    public static func operatorID(_ invocation: Invocation) -> String {
        if let o = invocation.value("--operator"), !o.isEmpty { return o }
        if let o = invocation.environment["ROLLOUT_OPERATOR"], !o.isEmpty { return o }
        let user = invocation.environment["USER"] ?? invocation.environment["LOGNAME"] ?? CurrentUser.name
        return "\(user)@\(CurrentUser.hostName)"
    }
}
